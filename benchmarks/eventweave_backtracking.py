"""EventWeave's backtracking test on LoCoMo dev builds (issue 23; membox_local.evaluation.backtracking): 10-40% of
the event graph's connections removed at random (three seeds each), evidence recall at one budget of the questions
about the events around them, before and after, for each PageRank weight asked (the config's, and larger ones
that make the graph's structure count more).

    python benchmarks/eventweave_backtracking.py --conversations conv-26 conv-30 --builds runs/builds-boxes \\
        --pagerank 0.1 1.0 --save benchmarks/results/eventweave-backtracking.json

The builds are those of `membox eval locomo --config eventweave --boxes-only` (benchmarks/fit_eventweave.py
says how); nothing is built here and nothing in them is changed.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import platform
import sys
from pathlib import Path

from membox_local.evaluation.locomo import DEFAULT_DATA, Settings, build_dir, load_samples, _questions


def main(argv: list[str] | None = None, embedder=None) -> int:
    """`embedder`: the builds' embedder (default: the config's; tests pass a double)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="a LoCoMo-format .json file")
    ap.add_argument("--config", default="eventweave", help="the config the builds were made with")
    ap.add_argument("--conversations", nargs="+", required=True, help="conversations with an event graph built")
    ap.add_argument("--builds", default="runs/builds-boxes", help="where the builds are (as eval locomo --builds)")
    ap.add_argument("--mode", default="event-graph", choices=["event-graph", "event-graph-boxes"],
                    help="the retrieval mode measured")
    ap.add_argument("--budget", type=int, default=1000, help="context budget in tokens")
    ap.add_argument("--shares", nargs="+", type=float, default=[0.1, 0.2, 0.3, 0.4],
                    help="shares of the connections removed")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="one random removal per seed")
    ap.add_argument("--pagerank", nargs="+", type=float, default=[],
                    help="PageRank weights (w3) to measure at (default: the config's)")
    ap.add_argument("--save", help="write the rows here (JSON)")
    a = ap.parse_args(argv)

    from membox_local.config import load_config
    from membox_local.evaluation.backtracking import backtracking
    from membox_local.memory import Memory

    cfg = load_config(a.config)
    weights = a.pagerank or [cfg.eventweave.pagerank_weight]
    settings = Settings(data=a.data, config=a.config)
    out = []
    for sample in load_samples(a.data, a.conversations):
        conv = sample["sample_id"]
        path = build_dir(a.builds, cfg, conv)
        if not (path / "memory.db").exists():
            sys.exit(f"error: no build of {conv} in {path}; build it first (see this script's help)")
        for w in weights:
            c = copy.deepcopy(cfg)
            c.eventweave.pagerank_weight = w
            mem = Memory(path, c, embedder=embedder)
            try:
                known = {m.message_id for m in mem.store.messages(conv)}
                questions = _questions(sample, settings, known, {"split": 0, "malformed": 0, "unknown": 0,
                                                                 "questions_without_evidence": 0})
                for r in backtracking(mem, conv, questions, a.shares, a.seeds, a.budget, a.mode):
                    out.append({"conversation": conv, "pagerank_weight": w, "share": r.share, "seed": r.seed,
                                "removed": r.removed, "connections": r.connections, "questions": r.questions,
                                "recall_intact": r.recall_intact, "recall_removed": r.recall_removed,
                                "per_question": r.per_question})
            finally:
                mem.close()
    lines = ["| w3 PageRank | removed | questions about them (over the seeds) | recall intact | recall after removal |",
             "|---|---|---|---|---|"]
    for w in weights:
        for share in a.shares:
            rows = [r for r in out if r["pagerank_weight"] == w and r["share"] == share]
            per = [p for r in rows for p in r["per_question"]]
            intact = [p["intact"] for p in per if p["intact"] is not None]
            after = [p["removed"] for p in per if p["removed"] is not None]
            lines.append(f"| {w:g} | {100 * share:.0f}% | {len(per)} | "
                         f"{100 * sum(intact) / max(len(intact), 1):.1f} | {100 * sum(after) / max(len(after), 1):.1f} |")
    print("\n".join(lines))
    if a.save:
        Path(a.save).write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {platform.node()}",
            "config": a.config, "mode": a.mode, "budget": a.budget, "conversations": a.conversations,
            "rows": out, "table": lines,
            "command": "python benchmarks/eventweave_backtracking.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
