"""EventWeave's bounded memory on LoCoMo dev builds (issue 23; membox_local.evaluation.bounded): each built event
graph replayed from its events with a node cap (`[eventweave] max_nodes`, the paper's 30 and larger), evidence
recall of the same questions at each budget beside the uncapped graph (cap 0).

    python benchmarks/eventweave_bounded.py --conversations conv-26 conv-30 --builds runs/builds-boxes \\
        --caps 0 30 100 200 --save benchmarks/results/eventweave-bounded.json

The builds are those of `membox eval locomo --config eventweave --boxes-only` (benchmarks/fit_eventweave.py says
how); each replay runs in a temporary copy of the store, no model is called and the builds are not changed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

from membox_local.evaluation.locomo import DEFAULT_BUDGETS, DEFAULT_DATA, Settings, build_dir, load_samples, _questions


def main(argv: list[str] | None = None, embedder=None) -> int:
    """`embedder`: the builds' embedder (default: the config's; tests pass a double)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="a LoCoMo-format .json file")
    ap.add_argument("--config", default="eventweave", help="the config the builds were made with")
    ap.add_argument("--conversations", nargs="+", required=True, help="conversations with an event graph built")
    ap.add_argument("--builds", default="runs/builds-boxes", help="where the builds are (as eval locomo --builds)")
    ap.add_argument("--mode", default="event-graph", choices=["event-graph", "event-graph-boxes"],
                    help="the retrieval mode measured")
    ap.add_argument("--caps", nargs="+", type=int, default=[0, 30, 100, 200],
                    help="node caps (max_nodes) to replay with; 0 is no cap")
    ap.add_argument("--budgets", nargs="+", type=int, default=list(DEFAULT_BUDGETS), help="context budgets in tokens")
    ap.add_argument("--save", help="write the rows here (JSON)")
    a = ap.parse_args(argv)

    from membox_local.config import load_config
    from membox_local.evaluation.bounded import capped_recall

    cfg = load_config(a.config)
    settings = Settings(data=a.data, config=a.config)
    out = []
    for sample in load_samples(a.data, a.conversations):
        conv = sample["sample_id"]
        path = build_dir(a.builds, cfg, conv)
        if not (path / "memory.db").exists():
            sys.exit(f"error: no build of {conv} in {path}; build it first (see this script's help)")
        known = {t["dia_id"] for s in sample["conversation"].values() if isinstance(s, list) for t in s}
        questions = _questions(sample, settings, known, {"split": 0, "malformed": 0, "unknown": 0,
                                                         "questions_without_evidence": 0})
        for r in capped_recall(path, cfg, conv, questions, a.caps, a.budgets, a.mode, embedder=embedder):
            out.append({"conversation": conv, "cap": r.cap, "nodes": r.nodes, "events": r.events,
                        "evicted_nodes": r.evicted_nodes, "questions": r.questions, "reachable": r.reachable,
                        "recall": {str(b): v for b, v in r.recall.items()}, "per_question": r.per_question})
    lines = ["| max_nodes | nodes (per conversation) | events | questions | evidence turns a source of an event | "
             + " | ".join(f"recall @{b}" for b in a.budgets) + " |", "|---" * (5 + len(a.budgets)) + "|"]
    for cap in a.caps:
        rows = [r for r in out if r["cap"] == cap]
        per = [p for r in rows for p in r["per_question"]]
        cells = []
        for b in a.budgets:
            got = [p["recall"] for p in per if p["budget"] == b and p["recall"] is not None]
            cells.append(f"{100 * sum(got) / max(len(got), 1):.1f}")
        n = sum(r["questions"] for r in rows)
        reach = sum(r["reachable"] * r["questions"] for r in rows if r["reachable"] is not None) / max(n, 1)
        lines.append(f"| {cap or 'no cap'} | {' / '.join(str(r['nodes']) for r in rows)} | "
                     f"{sum(r['events'] for r in rows)} | {n} | {100 * reach:.1f} | {' | '.join(cells)} |")
    print("\n".join(lines))
    if a.save:
        Path(a.save).write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {platform.node()}",
            "config": a.config, "mode": a.mode, "budgets": a.budgets, "conversations": a.conversations,
            "rows": out, "table": lines,
            "command": "python benchmarks/eventweave_bounded.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
