"""The records each build model writes with cited lines (issue 50): what code keeps, drops and corrects, and the
hand check of who the kept events name.

    # 30 LoCoMo dev boxes (10 each of conv-26, conv-30, conv-44, every n-th
    # box of 3+ messages) from the default judge's boxes-only builds (`membox eval locomo --config cpu-ce --boxes-only
    # --no-qa --conversations conv-26 conv-30 conv-44 --builds runs/builds-boxes --modes turn-rag --budgets 500
    # --out runs/records-boxes`), and the demo conversation's boxes; each model's raw output is saved
    python benchmarks/records_check.py run --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b --threads 1
    # the same boxes with [extract] events = "lines" (the model writes the topic; code takes the lines' words)
    python benchmarks/records_check.py run --models qwen2.5-coder-0.5b --events lines --threads 1
    # each box's numbered lines and each model's kept events (attribution.py applied to the saved output), numbered,
    # with their sources and what was dropped: what the hand check reads
    python benchmarks/records_check.py show
    # per model: events per box, dropped by reason, seconds per box, and from the hand labels
    # (benchmarks/results/records-labels.json: model -> box key -> numbers of kept events that name the wrong
    # person) the wrong-person share; --save writes benchmarks/results/records-check.json
    python benchmarks/records_check.py report --save

Raw outputs go to runs/records/<model>.jsonl (resumable): the attribution is applied when shown or reported, so a
change of attribution.py is measured again without a model call. Labels hold box keys and numbers only.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from membox_local.config import load_config
from membox_local.evaluation.records import kept, records_row
from membox_local.ingest import load_jsonl
from membox_local.memory import open_store
from membox_local.prompts import extract_prompt, extract_schema, numbered_lines
from membox_local.records import Box

REPO = Path(__file__).resolve().parent.parent
OUT = Path("runs/records")
LABELS = REPO / "benchmarks" / "results" / "records-labels.json"
SAVED = REPO / "benchmarks" / "results" / "records-check.json"
DEMO = REPO / "membox_local" / "data" / "demo.jsonl"
DEMO_BUILD = Path("runs/records-demo")
LINES = "+lines"  # the raw outputs of `run --events lines` (a topic: code makes the events from the lines)
CONVERSATIONS = ["conv-26", "conv-30", "conv-44"]


def sample_boxes(builds: Path, per_conversation: int) -> list[Box]:
    """Every n-th box of 3+ messages of each conversation, `per_conversation` of them (the 30 boxes of the first
    hand check, docs/experiments.md)."""
    out = []
    for conv in CONVERSATIONS:
        if not (builds / conv / "memory.db").exists():
            raise SystemExit(f"{builds / conv}: no build; make it first (this script's docstring: membox eval locomo)")
        store = open_store(builds / conv)
        boxes = [b for b in store.boxes(conv) if len(b.messages) >= 3]
        store.close()
        if not boxes:
            raise SystemExit(f"{builds / conv}: no boxes; build them first (this docstring's membox eval command)")
        step = max(1, len(boxes) // per_conversation)
        out += boxes[::step][:per_conversation]
    return out


def key(box: Box) -> str:
    return f"{box.conversation_id}/{box.messages[0].message_id}"


def demo_boxes(config: str) -> list[Box]:
    """The demo conversation filed into boxes by the config's judge (no records), as `make demo` files it."""
    from membox_local import Memory
    from membox_local.loom import file_into_boxes

    if not (DEMO_BUILD / "memory.db").exists():
        mem = Memory(DEMO_BUILD, load_config(config))
        msgs = load_jsonl(DEMO)
        mem.store.add_messages(msgs)
        for conv in dict.fromkeys(m.conversation_id for m in msgs):
            file_into_boxes(mem, conv)
        mem.close()
    store = open_store(DEMO_BUILD)
    out = [b for c in store.conversations() for b in store.boxes(c)]
    store.close()
    return out


def all_boxes(a) -> list[Box]:
    """The boxes of `--sample`: the LoCoMo dev sample, the demo's, or both."""
    locomo = sample_boxes(Path(a.builds), a.per_conversation) if a.sample in ("all", "locomo") else []
    return locomo + (demo_boxes(a.config) if a.sample in ("all", "demo") else [])


def run(a) -> None:
    from membox_local.backends import make_backend
    from membox_local.backends.base import JsonRequest

    cfg = load_config(a.config)
    boxes = all_boxes(a)
    OUT.mkdir(parents=True, exist_ok=True)
    cfg.extract.events = a.events
    for model in a.models:
        path = OUT / f"{model}{LINES if a.events == 'lines' else ''}.jsonl"
        done = {json.loads(line)["box"] for line in path.open()} if path.exists() else set()
        backend = make_backend(dataclasses.replace(cfg.llm, model=model, n_threads=a.threads or cfg.llm.n_threads))
        try:
            with path.open("a") as fh:
                for box in boxes:
                    if key(box) in done:
                        continue
                    t0 = time.time()
                    req = JsonRequest(extract_prompt(box.messages, box.session_date, cfg.extract),
                                      extract_schema(cfg.extract, len(box.messages)), "extract",
                                      cfg.extract.max_tokens)
                    res = backend.json([req])[0]
                    rec = {"box": key(box), "s": round(time.time() - t0, 2)}
                    rec.update({"error": str(res)} if isinstance(res, BaseException) else {"data": res.data})
                    fh.write(json.dumps(rec) + "\n")
                    fh.flush()
                    print(f"{model} {key(box)} {rec['s']} s", file=sys.stderr)
        finally:
            backend.close()


def records(model: str) -> dict[str, dict]:
    path = OUT / f"{model}.jsonl"
    return {r["box"]: r for r in map(json.loads, path.open())} if path.exists() else {}


def models_run() -> list[str]:
    return [p.stem for p in sorted(OUT.glob("*.jsonl"))]


def show(a) -> None:
    cfg = load_config(a.config)
    boxes = all_boxes(a)
    for box in boxes:
        print(f"=== {key(box)} ({box.session_date})")
        print("\n".join("  " + line for line in numbered_lines(box.messages).splitlines()))
        for model in models_run():
            rec = records(model).get(key(box), {})
            if "data" not in rec:
                print(f"  [{model}] {rec.get('error', 'not run')}")
                continue
            topic, events, dropped = kept(box, rec["data"], boxes, cfg)
            print(f"  [{model}] topic: {topic}   dropped: {dropped or '-'}")
            for i, e in enumerate(events, 1):
                print(f"  [{model} {i}] {e.text}  {e.sources}")


def report(a) -> dict:
    cfg = load_config(a.config)
    boxes = all_boxes(a)
    labels = {k: v for k, v in json.loads(LABELS.read_text()).items() if k != "what"} if LABELS.exists() else {}
    rows = {}
    for model in models_run():
        recs = records(model)
        for part, chosen in (("locomo", [b for b in boxes if b.conversation_id.startswith("conv-")]),
                             ("demo", [b for b in boxes if not b.conversation_id.startswith("conv-")])):
            rows[f"{model} / {part}"] = records_row(chosen, boxes, recs, labels.get(model), cfg, key)
    print("| model / boxes | boxes | events/box | wrong person (hand) | name no participant | grounded in cited line | "
          "dropped (by code) | s/box |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        hand = f"{r['wrong_person']} ({100 * r['wrong_person_share']:.1f}%)" if r["hand_checked"] else "not checked"
        drops = ", ".join(f"{n} {k}" for k, n in sorted(r["dropped"].items())) or "none"
        none = f"{r['names_no_participant']} ({100 * r['names_no_participant'] / max(1, r['events']):.0f}%)"
        print(f"| {name} | {r['boxes']} | {r['events_per_box']} | {hand} | {none} | "
              f"{100 * r['grounded_in_cited_line']:.0f}% | {drops} | {r['s_per_box']} |")
    if a.save:
        SAVED.write_text(json.dumps({"command": "python benchmarks/records_check.py report --save",
                                     "config": a.config, "rows": rows}, indent=1) + "\n")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["run", "show", "report"])
    p.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    p.add_argument("--config", default="cpu-ce")
    p.add_argument("--builds", default="runs/builds-boxes/cpu-ce")
    p.add_argument("--per-conversation", type=int, default=10)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--sample", choices=["all", "locomo", "demo"], default="all")
    p.add_argument("--events", choices=["written", "lines"], default="written",
                   help="run: [extract] events (lines: saved as <model>+lines.jsonl, its own row)")
    p.add_argument("--save", action="store_true")
    a = p.parse_args()
    {"run": run, "show": show, "report": report}[a.what](a)


if __name__ == "__main__":
    main()
