"""The llama.cpp JSON levers, measured on their own: a built memory's extraction requests, each followed by a
Weaver-style link request (as a build alternates them), replayed under each setting, rounds interleaved.

    python benchmarks/json_levers.py --store STORE --boxes 6 --rounds 2
    python benchmarks/json_levers.py --memory        # resident memory with 1, 2, 3 instances (stage contexts)

Settings (config cpu, its model): "before" (llm.grammar_check_first=false llm.stage_contexts=false), grammar
checked first only, and both levers. One backend per setting is made up front, so each keeps its own KV cache;
rounds cycle through the settings so that a slow spell of a shared machine falls on all of them. Reports, per
setting, seconds for the replay (the best round), completion tokens, and whether its outputs are the text the
"before" setting wrote (grammar checking first writes the same text by construction; separate stage contexts
reuse different cached prefixes, which can change the last bits of the numbers and so, rarely, a token).
Writes JSON (--out, default benchmarks/results/json-levers.json) and prints Markdown.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import date
from pathlib import Path

from membox_local.backends.base import JsonRequest
from membox_local.backends import make_backend
from membox_local.config import load_config, parse_assignment
from membox_local.memory import Memory
from membox_local.prompts import extract_prompt, extract_schema, link_prompt, link_schema

REPO = Path(__file__).resolve().parent.parent
SETTINGS = {"before": ["llm.grammar_check_first=false", "llm.stage_contexts=false"],
            "grammar checked first": ["llm.stage_contexts=false"],
            "grammar checked first + stage contexts": []}


def requests(store: str, n_boxes: int, cfg) -> list[JsonRequest]:
    """Extraction of each of the first `n_boxes` extracted boxes, each followed by a link request that shows
    the previous box's events as the storyline and this box's events as the new ones."""
    out, prev = [], None
    with Memory(store) as mem:
        conv = mem.store.conversations()[0]
        boxes = [b for b in mem.boxes(conv) if b.status == "extracted" and b.events][:n_boxes]
    for box in boxes:
        out.append(JsonRequest(extract_prompt(box.messages, box.session_date), extract_schema(cfg.extract, len(box.messages)),
                               stage="extract", max_tokens=cfg.extract.max_tokens))
        if prev is not None:
            new = [e.text for e in box.events][:8]
            out.append(JsonRequest(link_prompt(prev.topic, [(e.text, e.date) for e in prev.events][-6:], new,
                                               box.session_date), link_schema(len(new)), stage="link",
                                   max_tokens=cfg.weaver.max_tokens))
        prev = box
    return out


def resident_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmRSS"))


def memory(config: str) -> dict:
    """This process's resident memory with the config's llama.cpp backend holding 1, 2 and 3 generation instances
    (`stage_contexts`: a first stage uses the main one, the next two get their own)."""
    from membox_local.backends.llamacpp import LlamaCppBackend

    b = LlamaCppBackend(load_config(config).llm)
    try:
        out = {"instances_1_mb": round(resident_mb())}
        for n, stage in ((1, "extract"), (2, "link"), (3, "trace-init")):
            b._context(stage)
            out[f"instances_{n}_mb"] = round(resident_mb())
        return out
    finally:
        b.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", help="a memory built with the config (its boxes give the prompts)")
    p.add_argument("--memory", action="store_true",
                   help="only measure resident memory per instance and add it to --out as 'memory'")
    p.add_argument("--config", default="cpu")
    p.add_argument("--boxes", type=int, default=6)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=str(REPO / "benchmarks/results/json-levers.json"))
    a = p.parse_args(argv)
    if a.memory:
        out = Path(a.out)
        result = json.loads(out.read_text()) if out.exists() else {}
        result["memory"] = {"date": date.today().isoformat(), "config": a.config, **memory(a.config)}
        out.write_text(json.dumps(result, indent=2))
        print(json.dumps(result["memory"]))
        return 0
    if not a.store:
        p.error("--store is needed (a memory built with the config)")
    cfgs = {name: load_config(a.config, dict(parse_assignment(x) for x in sets) or None)
            for name, sets in SETTINGS.items()}
    reqs = requests(a.store, a.boxes, cfgs["before"])
    backends = {name: make_backend(cfg.llm) for name, cfg in cfgs.items()}
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    texts: dict[str, list[str]] = {}
    tokens: dict[str, int] = {}
    try:
        for r in range(a.rounds):
            for name, backend in backends.items():
                t0 = time.perf_counter()
                res = backend.json_batch(list(reqs))
                times[name].append(time.perf_counter() - t0)
                texts[name] = [getattr(x, "raw", "") for x in res]
                tokens[name] = sum(x.usage.completion_tokens for x in res if getattr(x, "usage", None))
                print(json.dumps({"round": r + 1, "setting": name, "s": round(times[name][-1], 2)}), flush=True)
    finally:
        for backend in backends.values():
            backend.close()
    base = min(times["before"])
    rows = [{"setting": name, "settings": SETTINGS[name], "best_s": round(min(ts), 2), "rounds_s": [round(t, 2) for t in ts],
             "ratio": round(base / min(ts), 2), "completion_tokens": tokens[name],
             "same_text_as_before": sum(x == y for x, y in zip(texts[name], texts["before"])),
             "requests": len(reqs)} for name, ts in times.items()]
    result = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "config": a.config, "model": cfgs["before"].llm.model, "store": a.store, "rows": rows}
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(f"JSON levers, {result['date']}, {result['machine']}, {result['model']}; {len(reqs)} requests "
          f"({a.boxes} extractions, each then a link), best of {a.rounds} interleaved rounds\n")
    print("| setting | best s | ratio | completion tokens | same text as before |\n|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['setting']} | {x['best_s']:.1f} | {x['ratio']} | {x['completion_tokens']} | "
              f"{x['same_text_as_before']}/{x['requests']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
