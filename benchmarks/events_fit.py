"""The records' events as retrieval keys (retrieval/eventkeys.py, mode box-hits-events): evidence recall of each way
of using them against box-hits without them, on full builds (records with cited lines).

    python benchmarks/events_fit.py --builds runs/builds-rec --conversations conv-26 conv-30 \
        --save benchmarks/results/events-fit-locomo.json

Each conversation's build under --builds/<config>/<conversation> must exist (made by `membox eval locomo --config
cpu-ce --builds runs/builds-rec --conversations conv-26 ...`, not --boxes-only: events need the records). Variants:
`box-hits` (no events), `keys x=W` (a message's dense relevance moved W of the way to its best event's cosine where
that is higher; 1 takes the larger), `words` (the events' words in the message's BM25 document), `said` (box-hits'
ranking, each shown line followed by its events: recall per token of showing them). The saved JSON holds the pooled
recall per variant and budget and per question its id and recall (no dataset text). Dev data only.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lexical_fit import BUDGETS, locomo_items, sweep_arguments

from membox_local.config import load_config
from membox_local.evaluation.locomo import FILL_K, Shared, evidence_recall, open_build
from membox_local.retrieval.boxhits import BoxHitsRetriever
from membox_local.retrieval.eventkeys import BoxHitsEventsRetriever, BoxHitsSaidRetriever

WEIGHTS = (0.25, 0.5, 1.0)


def retrievers(mem, weights) -> dict[str, BoxHitsRetriever]:
    out: dict[str, BoxHitsRetriever] = {"box-hits": BoxHitsRetriever(mem)}
    for w in weights:
        r = out[f"keys x={w:g}"] = BoxHitsEventsRetriever(mem)
        r.event_weight = w
    r = out["words"] = BoxHitsEventsRetriever(mem)
    r.event_weight, r.event_words = 0.0, True
    out["said"] = BoxHitsSaidRetriever(mem)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sweep_arguments(p, WEIGHTS)
    a = p.parse_args(argv)
    cfg = load_config(a.config)
    shared, per_q = Shared(cfg), {}
    for conv, messages, questions in locomo_items(a):
        mem = open_build(conv, messages, cfg, a.builds, shared, build=False, boxes_only=False, progress=False)
        try:
            mem.embedder.encode([q for _, q, _ in questions])
            for name, r in retrievers(mem, a.weights).items():
                got = per_q.setdefault(name, {})
                for qid, question, evidence in questions:
                    if evidence:
                        got[qid] = [evidence_recall(evidence, r.retrieve(question, conv, FILL_K, b).message_ids)
                                    for b in BUDGETS]
        finally:
            mem.close(models=False)
    shared.close()
    pooled = {name: {f"budget={b}": round(100 * sum(v[i] for v in qs.values()) / len(qs), 1)
                     for i, b in enumerate(BUDGETS)} for name, qs in per_q.items()}
    print("| variant | " + " | ".join(str(b) for b in BUDGETS) + " |\n|---|" + "---|" * len(BUDGETS))
    for name, row in pooled.items():
        print(f"| {name} | " + " | ".join(f"{x:.1f}" for x in row.values()) + " |")
    if a.save:
        Path(a.save).write_text(json.dumps({"command": "python benchmarks/events_fit.py " + " ".join(argv or sys.argv[1:]),
                                      "date": time.strftime("%Y-%m-%d"), "config": a.config,
                                      "questions": len(next(iter(per_q.values()), {})), "pooled": pooled,
                                      "per_question": per_q}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
