"""Link precision of a cheaper Trace Weaver against today's, on the same boxes (issue 35).

    python benchmarks/link_precision.py --store runs/speed-conv30/conv-30/a --conversation conv-30 \
        --reference cpu --config cpu-ce --out benchmarks/results/link-precision-conv30.json

The store must hold extracted boxes (any build, e.g. build_speed.py's side A). Its boxes and events are copied twice
into temporary stores, their traces removed, and each copy is woven again box by box in conversation order: once
with the --reference config's [weaver] settings, once with --config's (the same model, llm and embedder of
--reference, so that only the weaver's settings differ).

A link is one event joined to an existing trace by a link call. There is no gold linking: each link of both sides is
graded by one judge (--judge, default the CPU default's answering model, Qwen2.5-Coder-1.5B: bigger than the 0.5B
that linked, and still a weak judge) that sees the trace's title and latest events as they were when the link was
made and answers yes or no to "does the new event carry this storyline on". Precision is its share of yes; the
report also gives how many links each side made, the links both made (same event, same trace title), the
traces, the largest trace's share of the events, the LLM calls and tokens of linking per box (sent and read), and
a sample of links the judge refused, to read.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
import sys
import tempfile
from datetime import date
from pathlib import Path

from membox_local.backends import make_backend
from membox_local.backends.base import LabelRequest, Prompt
from membox_local.config import ConfigError, load_config, parse_assignment
from membox_local.embed import CachedEmbedder, make_embedder
from membox_local.execution.driver import Driver
from membox_local.systems.membox_tables import BoxStore
from membox_local.weaver import Weaver

LINK_STAGES = ("link", "trace-init")
SHOWN = 4  # the trace's latest events the judge sees
SAMPLE = 10  # refused links shown per side

JUDGE_SYSTEM = ("A storyline is a thread of events about one person's activity, goal, plan, problem or situation that "
                "comes back over time. You decide whether a new event carries a storyline on: the same person and "
                "the same activity or situation (a next step, progress, a result, a change, the same thing again). "
                "An event that only shares a broad subject or a word with it does not. Answer yes or no.")


def judge_prompt(link: dict) -> Prompt:
    shown = "\n".join(f"- {t}" for t in link["trace_events"])
    return Prompt(JUDGE_SYSTEM, f"Storyline: {link['trace']}\nIts latest events:\n{shown}\n\n"
                                f"New event: {link['event']}\n\nDoes the new event carry this storyline on?")


def fresh_copy(src: Path, dst: Path) -> BoxStore:
    """A copy of the store with no traces and every box unwoven; its usage table emptied."""
    shutil.copy(src / "memory.db", dst / "memory.db")
    store = BoxStore(dst / "memory.db")
    with store.transaction():
        for stmt in ("DELETE FROM trace_events", "DELETE FROM traces", "UPDATE boxes SET woven=0",
                     "DELETE FROM llm_usage"):
            store.db.execute(stmt)
    return store


def weave(store: BoxStore, cfg, conversation: str, backend, embedder) -> dict:
    """Weave every box again; each link with the trace as the link call found it."""
    driver = Driver(store, CachedEmbedder(embedder, store), backend)
    weaver = Weaver(store, cfg)
    boxes = store.unwoven_boxes(conversation)
    failed, links = 0, []
    for box in boxes:
        before = {t.id: (t.summary, evs) for t, evs in store.traces_with_events(conversation)}
        out = driver.drive(weaver.weave(box), conversation)
        failed += bool(out.error)
        text = {e.id: e.text for e in box.events}
        for tid, ids in out.linked.items():
            summary, evs = before[tid]
            links += [{"event": text[i], "trace": summary, "trace_events": [e.text for e in evs[-SHOWN:]]}
                      for i in ids]
    usage = {s: u for s, u in store.usage_by_stage(conversation).items() if s in LINK_STAGES}
    sizes = [len(evs) for _, evs in store.traces_with_events(conversation)]
    return {"boxes": len(boxes), "failed": failed, "usage": usage, "links": links, "traces": len(sizes),
            "largest_trace_share": round(max(sizes) / sum(sizes), 3) if sizes else None}


def per_box(usage: dict, boxes: int) -> dict:
    calls = sum(u["calls"] for u in usage.values())
    sent = sum(u["prompt_tokens"] for u in usage.values())
    out = {"calls": round(calls / boxes, 2), "prompt_tokens": round(sent / boxes, 1)}
    if usage and all("read_tokens" in u for u in usage.values()):
        out["read_tokens"] = round(sum(u["read_tokens"] for u in usage.values()) / boxes, 1)
    return out


def grade(links: list[dict], judge) -> None:
    """Each link's verdict ("yes"/"no"), from one batched label call."""
    results = judge.label([LabelRequest(judge_prompt(link), ("yes", "no"), "link-judge") for link in links])
    for link, res in zip(links, results):
        if isinstance(res, BaseException):
            raise res
        link["judge"] = res.label


def side_report(side: dict) -> dict:
    yes = sum(link["judge"] == "yes" for link in side["links"])
    n = len(side["links"])
    return {"links": n, "judged_yes": yes, "precision": round(yes / n, 3) if n else None,
            "traces": side["traces"], "largest_trace_share": side["largest_trace_share"],
            "failed_boxes": side["failed"], "linking_per_box": per_box(side["usage"], side["boxes"]),
            "refused": [{k: link[k] for k in ("event", "trace")} for link in side["links"]
                        if link["judge"] == "no"][:SAMPLE]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True, help="a memory folder holding extracted boxes (read only)")
    p.add_argument("--conversation", required=True)
    p.add_argument("--reference", default="cpu", help="config whose [weaver] settings are today's")
    p.add_argument("--config", default="cpu-ce", help="config whose [weaver] settings are measured")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="settings of --config's side, e.g. weaver.max_candidates=1")
    p.add_argument("--judge", default="", help="model that grades the links (default: --reference's answering model)")
    p.add_argument("--out", help="also write the report here (JSON)")
    a = p.parse_args()
    src = Path(a.store)
    if not (src / "memory.db").exists():
        print(f"error: --store {a.store}: no memory.db there", file=sys.stderr)
        return 2
    try:
        ref = load_config(a.reference)
        measured = load_config(a.config, dict(parse_assignment(x) for x in a.set) or None)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cand = dataclasses.replace(ref, weaver=measured.weaver)  # only the weaver differs
    backend, embedder = make_backend(ref.llm), make_embedder(ref.embedder)
    sides = {}
    with tempfile.TemporaryDirectory(prefix="membox-links-") as tmp:
        for name, cfg in (("reference", ref), ("candidate", cand)):
            (Path(tmp) / name).mkdir()
            store = fresh_copy(src, Path(tmp) / name)
            try:
                sides[name] = weave(store, cfg, a.conversation, backend, embedder)
            finally:
                store.close()
    backend.close()
    judge_llm = ref.answer_llm() if not a.judge else dataclasses.replace(ref.answer_llm(), model=a.judge)
    judge = make_backend(judge_llm)
    for side in sides.values():
        grade(side["links"], judge)
    made = {(link["event"], link["trace"]) for link in sides["reference"]["links"]}
    both = sum((link["event"], link["trace"]) in made for link in sides["candidate"]["links"])
    report = {
        "date": date.today().isoformat(), "machine": platform.machine(), "store": a.store,
        "conversation": a.conversation, "reference": a.reference, "config": a.config, "set": a.set,
        "model": ref.llm.model,
        "judge": judge_llm.model, "boxes": sides["reference"]["boxes"],
        "weaver": {"reference": dataclasses.asdict(ref.weaver), "candidate": dataclasses.asdict(cand.weaver)},
        "reference_side": side_report(sides["reference"]), "candidate_side": side_report(sides["candidate"]),
        "links_both_made": both,
    }
    out = json.dumps(report, indent=2, ensure_ascii=False)
    print(out)
    if a.out:
        Path(a.out).write_text(out + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
