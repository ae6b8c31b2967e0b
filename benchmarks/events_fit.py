"""The records' events as retrieval keys (retrieval/eventkeys.py, mode box-hits-events): evidence recall of each way
of using them against box-hits without them, on full builds (records with cited lines), or with the events made
from the lines.

    python benchmarks/events_fit.py --builds runs/builds-rec --conversations conv-26 conv-30 \
        --save benchmarks/results/events-fit-locomo.json
    # the events `[extract] events = "lines"` makes (code reads them from each box's lines; the model writes only
    # the topic), so boxes without records serve: LoCoMo and the LongMemEval dev slice
    python benchmarks/events_fit.py --events lines --builds runs/builds-rec --conversations conv-26 conv-30
    python benchmarks/events_fit.py --events lines --dataset longmemeval --builds runs/builds-lme
    # QA with those events: `membox eval` with the two modes made from the lines registered beside the others
    python benchmarks/events_fit.py qa longmemeval --modes box-hits-said:lines --builds runs/builds-lme ...

Each conversation's build under --builds/<config>/<conversation> must exist (made by `membox eval locomo --config
cpu-ce --builds runs/builds-rec --conversations conv-26 ...`, not --boxes-only: events need the records). Variants:
`box-hits` (no events), `keys x=W` (a message's dense relevance moved W of the way to its best event's cosine where
that is higher; 1 takes the larger), `words` (the events' words in the message's BM25 document), `said` (box-hits'
ranking, each shown line followed by its events: recall per token of showing them). The saved JSON holds the pooled
recall per variant and budget and per question its id and recall (no dataset text). Dev data only.

`--events lines` gives each box the events a build with `[extract] events = "lines"` stores, made here by the same
code (attribution.extracted_events) from the whole box: a real build makes them from the excerpt its extraction
call read where a box is longer than the build model's context (LongMemEval boxes can be; LoCoMo's are not).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from lexical_fit import BUDGETS, lme_items, locomo_items, sweep_arguments

from membox_local.attribution import extracted_events
from membox_local.cli import main as membox
from membox_local.config import load_config
from membox_local.evaluation.locomo import FILL_K, Shared, evidence_recall, open_build
from membox_local.prompts import extract_system
from membox_local.retrieval import RETRIEVERS
from membox_local.retrieval.boxhits import BoxHitsRetriever, BoxMap
from membox_local.retrieval.eventkeys import BoxHitsEventsRetriever, BoxHitsSaidRetriever, MessageEvents, message_events

WEIGHTS = (0.25, 0.5, 1.0)


def line_events(memory, bm: BoxMap) -> MessageEvents:
    """The scope's events as `[extract] events = "lines"` makes them: each box's lines, persons and dates resolved,
    questions and asides left out (no model call: the model writes only the topic, which retrieval does not read)."""
    ec = replace(memory.config.extract, events="lines")
    instructions, boxes = extract_system(ec), []
    for box in bm.boxes:
        participants = memory.store.speakers(box.conversation_id, max(m.seq for m in box.messages))
        events, _ = extracted_events({"topic": ""}, box, box.messages, participants, instructions, ec)
        boxes.append(replace(box, events=events))
    return message_events(memory, replace(bm, boxes=boxes))


class _FromLines:
    """A retriever reading the events made from the lines (`line_events`) rather than the stored records'."""
    needs = "boxes"

    def events(self, bm: BoxMap) -> MessageEvents:
        if bm.scope not in self._events:
            self._events[bm.scope] = line_events(self.memory, bm)
        return self._events[bm.scope]


class EventsFromLines(_FromLines, BoxHitsEventsRetriever):
    name = "box-hits-events:lines"


class SaidFromLines(_FromLines, BoxHitsSaidRetriever):
    name = "box-hits-said:lines"


def retrievers(mem, weights, lines: bool) -> dict[str, BoxHitsRetriever]:
    keys, said = (EventsFromLines, SaidFromLines) if lines else (BoxHitsEventsRetriever, BoxHitsSaidRetriever)
    out: dict[str, BoxHitsRetriever] = {"box-hits": BoxHitsRetriever(mem)}
    for w in weights:
        r = out[f"keys x={w:g}"] = keys(mem)
        r.event_weight = w
    r = out["words"] = keys(mem)
    r.event_weight, r.event_words = 0.0, True
    out["said"] = said(mem)
    shared: dict = {}  # one scope's events made once, read by every variant that reads events
    for r in out.values():
        if isinstance(r, (BoxHitsEventsRetriever, BoxHitsSaidRetriever)):
            r._events = shared
    return out


def qa(argv: list[str]) -> int:
    """`membox eval locomo|longmemeval ...` with box-hits-events:lines and box-hits-said:lines as modes."""
    for cls in (EventsFromLines, SaidFromLines):
        RETRIEVERS[cls.name] = cls
    return membox(["eval", *argv])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["qa"]:
        return qa(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sweep_arguments(p, WEIGHTS)
    p.add_argument("--dataset", choices=("locomo", "longmemeval"), default="locomo")
    p.add_argument("--events", choices=("stored", "lines"), default="stored",
                   help="the records' events (a full build), or those made from the lines (boxes suffice)")
    a = p.parse_args(argv)
    if a.dataset == "longmemeval" and a.events == "stored":
        p.error("--dataset longmemeval: its builds have boxes without records; give --events lines")
    cfg = load_config(a.config)
    shared, per_q, started = Shared(cfg), {}, time.time()
    items = locomo_items(a) if a.dataset == "locomo" else lme_items(a)
    for n, (conv, messages, questions) in enumerate(items, 1):
        mem = open_build(conv, messages, cfg, a.builds, shared, build=False, boxes_only=a.events == "lines",
                         progress=False)
        try:
            mem.embedder.encode([q for _, q, _ in questions])
            for name, r in retrievers(mem, a.weights, a.events == "lines").items():
                got = per_q.setdefault(name, {})
                for qid, question, evidence in questions:
                    if evidence:
                        got[qid] = [evidence_recall(evidence, r.retrieve(question, conv, FILL_K, b).message_ids)
                                    for b in BUDGETS]
        finally:
            mem.close(models=False)
        print(f"{n}/{len(items)} {conv}: {time.time() - started:.0f} s", file=sys.stderr)
    shared.close()
    pooled = {name: {f"budget={b}": round(100 * sum(v[i] for v in qs.values()) / len(qs), 1)
                     for i, b in enumerate(BUDGETS)} for name, qs in per_q.items()}
    print("| variant | " + " | ".join(str(b) for b in BUDGETS) + " |\n|---|" + "---|" * len(BUDGETS))
    for name, row in pooled.items():
        print(f"| {name} | " + " | ".join(f"{x:.1f}" for x in row.values()) + " |")
    if a.save:
        Path(a.save).write_text(json.dumps({"command": "python benchmarks/events_fit.py " + " ".join(argv),
                                      "date": time.strftime("%Y-%m-%d"), "config": a.config,
                                      "dataset": a.dataset, "events": a.events,
                                      "questions": len(next(iter(per_q.values()), {})), "pooled": pooled,
                                      "per_question": per_q}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
