"""Fit EventWeave's retrieval weights on LoCoMo dev questions (issue 23): a grid over the recency and PageRank
weights (relevance fixed at 1: only the ratios matter), each point a `membox eval locomo` run of the event-graph
mode(s) on the same builds, no answering model. The point with the best mean evidence recall over the budgets
wins; ties go to the smaller weights (the plain relevance ranking unless the graph's terms help).

    # the builds first (one extraction call per message; the box memory filed into boxes, not extracted):
    membox eval locomo --config eventweave --conversations conv-26 conv-30 --boxes-only \\
        --modes event-graph event-graph-boxes box-hits turn-rag chunk-rag --no-qa \\
        --builds runs/builds-boxes --out runs/locomo-eventweave-recall
    python benchmarks/fit_eventweave.py --conversations conv-26 conv-30 --builds runs/builds-boxes \\
        --save benchmarks/results/eventweave-fit.json

Each point's run folder is runs/fit-eventweave/r<recency>-p<pagerank>[-h<half life>] (resumable). The weights are
retrieval settings, not build settings: the builds are reused as they are.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import platform
import sys
from pathlib import Path

from membox_local.evaluation.locomo import DEFAULT_BUDGETS, DEFAULT_DATA, Settings, run


def point_name(recency: float, pagerank: float, half_life: float) -> str:
    return f"r{recency:g}-p{pagerank:g}-h{half_life:g}"


def choose(points: list[dict], mode: str) -> dict:
    """The best mean recall over the budgets in `mode`; ties (within 0.05 points) to the smaller weights."""
    def mean(p):
        r = p["recall"][mode]
        return sum(r.values()) / len(r)

    best = max(mean(p) for p in points)
    tied = [p for p in points if mean(p) >= best - 0.0005]
    return min(tied, key=lambda p: (p["recency_weight"] + p["pagerank_weight"], p["half_life"]))


def main(argv: list[str] | None = None, embedder=None) -> int:
    """`embedder`: the builds' embedder (default: the config's; tests pass a double)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="a LoCoMo-format .json file")
    ap.add_argument("--config", default="eventweave", help="a config that builds the event graph")
    ap.add_argument("--conversations", nargs="+", required=True, help="dev conversations to fit on")
    ap.add_argument("--builds", default="runs/builds-boxes", help="where the builds are (as eval locomo --builds)")
    ap.add_argument("--modes", nargs="+", default=["event-graph", "event-graph-boxes"],
                    help="modes measured at each point; the first one chooses")
    ap.add_argument("--recency", nargs="+", type=float, default=[0.0, 0.1, 0.3, 1.0], help="w1 values")
    ap.add_argument("--pagerank", nargs="+", type=float, default=[0.0, 0.1, 0.3, 1.0], help="w3 values")
    ap.add_argument("--half-life", nargs="+", type=float, default=[4.0],
                    help="recency half lives, in sessions (only matter when w1 > 0)")
    ap.add_argument("--budgets", nargs="+", type=int, default=list(DEFAULT_BUDGETS), help="context budgets")
    ap.add_argument("--out", default="runs/fit-eventweave", help="folder of the grid's run folders")
    ap.add_argument("--save", help="write the grid and the choice here (JSON)")
    a = ap.parse_args(argv)

    from membox_local.config import load_config
    from membox_local.embed import make_embedder

    embedder = embedder or make_embedder(load_config(a.config).embedder)  # one MiniLM for every point
    points = []
    grid = [(r, p, h) for r, p, h in itertools.product(a.recency, a.pagerank, a.half_life) if r > 0 or h == a.half_life[0]]
    for i, (r, p, h) in enumerate(grid, 1):
        name = point_name(r, p, h)
        print(f"[{i}/{len(grid)}] {name}", file=sys.stderr)
        summary = run(Settings(data=a.data, config=a.config, conversations=a.conversations, modes=a.modes,
                               budgets=a.budgets, qa=False, build=False, boxes_only=True, builds=a.builds,
                               out=str(Path(a.out) / name),
                               overrides={"eventweave.recency_weight": r, "eventweave.pagerank_weight": p,
                                          "eventweave.half_life": h}),
                      embedder=embedder, progress=False)
        points.append({"recency_weight": r, "pagerank_weight": p, "half_life": h,
                       "questions": summary["modes"][a.modes[0]]["questions"],
                       "recall": {m: {k: v for k, v in summary["modes"][m]["recall"].items() if k.startswith("budget")}
                                  for m in a.modes}})
    best = choose(points, a.modes[0])
    head = "| w1 recency | w3 PageRank | half life | " + " | ".join(
        f"{m} {'/'.join(str(b) for b in a.budgets)}" for m in a.modes) + " |"
    lines = [head, "|" + "---|" * (3 + len(a.modes))]
    for p in points:
        cells = ["/".join(f"{100 * v:.1f}" for v in p["recall"][m].values()) for m in a.modes]
        mark = "**" if p is best else ""
        lines.append(f"| {mark}{p['recency_weight']:g}{mark} | {mark}{p['pagerank_weight']:g}{mark} | "
                     f"{p['half_life']:g} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    print(f"\nchosen: recency_weight = {best['recency_weight']:g}, pagerank_weight = {best['pagerank_weight']:g}, "
          f"half_life = {best['half_life']:g} (mean {a.modes[0]} recall over the budgets; "
          f"{best['questions']} questions of {', '.join(a.conversations)})")
    if a.save:
        Path(a.save).write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {platform.node()}",
            "config": a.config, "conversations": a.conversations, "builds": a.builds, "budgets": a.budgets,
            "modes": a.modes, "grid": points, "chosen": best,
            "command": "python benchmarks/fit_eventweave.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
