"""LoCoMo box sizes of each continuity judge, and the judges' seconds per message (the fitted upper bound and
the per-feature AUC are retired: docs/experiments.md).

    python benchmarks/segmentation.py locomo --config cpu [--judge NAME] [--set loom.key=value ...]
    python benchmarks/segmentation.py speed --also CONFIG.toml ...   # seconds per message, side by side

The fits themselves (thresholds, weights, the content vector) are `membox fit ...` (membox_local/fit/), whose
pieces these measurements share. Every decision goes through `membox_local.evaluation.segmentation.run_segmenter`,
i.e. `loom.decide`, online. Embeddings are computed once per text with the config's embedder and kept in
runs/segmentation/vectors.npz; the hybrid's LLM scores come from the committed cache in benchmarks/cache/.
Data: ../shared/data (or --data-dir). Results: runs/segmentation/.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from membox_local.backends.base import ScoreRequest
from membox_local.config import load_config
from membox_local.embed import make_embedder
from membox_local.evaluation.segmentation import box_sizes, evaluate, load_dialogues, run_segmenter
from membox_local.fit.cache import LookupEmbedder, ScoreCache, precompute_scores, score_cache_path
from membox_local.fit.data import sessions_of

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "runs" / "segmentation"
CACHE = REPO / "benchmarks" / "cache"


def cmd_speed(args) -> int:
    """Seconds per message of each judge, side by side in one process on the same dialogues, with the real
    models loaded once and warmed up beforehand (no caches: every embedding and score is computed)."""
    from membox_local.backends import make_backend

    dls = load_dialogues(Path(args.data_dir) / "segmentation" / "tiage_dev.json", args.limit)
    base = load_config(args.config)
    embedder = make_embedder(base.embedder)
    embedder.encode(["warm up"])
    backend = make_backend(base.llm)
    settings = [("embedding", load_config(args.config, {"loom.judge": "embedding"})),
                (f"hybrid ({args.config})", base)]
    settings += [(f"{load_config(path).loom.judge} ({path})", load_config(path)) for path in args.also or []]
    settings += [(j, load_config(args.config, {"loom.judge": j})) for j in args.llm_judges]
    out = {"date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/segmentation.py " + " ".join(sys.argv[1:]),
           "dialogues": len(dls), "rows": []}
    backend.score([ScoreRequest("warm", " up", "judge")])  # loads the scoring instance before any timing
    for name, cfg in settings:
        _, summary = evaluate(cfg, dls, embedder=embedder, backend=backend)
        row = {"judge": name, "s_per_message": summary["s_per_message"], "messages": summary["messages"],
               "pk": summary["pk"], "wd": summary["wd"], "f1": summary["f1"]}
        out["rows"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    fastest = min(r["s_per_message"] for r in out["rows"])
    for r in out["rows"]:
        r["x_fastest"] = round(r["s_per_message"] / fastest, 1)
    RUNS.mkdir(parents=True, exist_ok=True)
    (RUNS / "speed.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


def cmd_locomo(args) -> int:
    from membox_local.evaluation.segmentation import _parse_set
    from membox_local.ingest import load_locomo

    overrides = _parse_set(args.set or [])
    if args.judge:
        overrides["loom.judge"] = args.judge
    cfg = load_config(args.config, overrides)
    msgs = load_locomo(Path(args.data_dir) / "locomo-dev.json")
    conversations: dict[str, list] = {}
    for m in msgs:
        conversations.setdefault(m.conversation_id, []).append(m)
    if args.limit:
        conversations = {c: v[: args.limit] for c, v in conversations.items()}
    emb = LookupEmbedder(cfg, [m.text for m in msgs], RUNS / "vectors.npz") if cfg.loom.judge in (
        "embedding", "hybrid") else None
    from membox_local.judges import make_judge

    # the hybrid's LLM scores come from the committed cache (computed and appended if missing)
    uses_scores = cfg.loom.judge == "hybrid" and make_judge(cfg.loom).uses_llm
    scorer = ScoreCache(cfg, score_cache_path(cfg, CACHE)) if uses_scores else None
    if scorer is not None:  # missing scores first, session by session, in the order that reuses each prefix
        precompute_scores(sessions_of(conversations), scorer, cfg.loom.window, "LoCoMo")
    decisions, facts = run_segmenter(cfg, conversations, embedder=emb, backend=scorer)
    sizes = box_sizes(decisions)
    out = {"config": cfg.name, "judge": cfg.loom.judge, "overrides": overrides, "messages_per_box": sizes,
           "mean": round(float(np.mean(list(sizes.values()))), 2), **facts,
           "command": "python benchmarks/segmentation.py " + " ".join(sys.argv[1:])}
    print(json.dumps(out, indent=2))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    sub = p.add_subparsers(dest="cmd", required=True)
    lo = sub.add_parser("locomo", help="messages per box on the LoCoMo dev conversations")
    lo.add_argument("--config", default="cpu")
    lo.add_argument("--judge")
    lo.add_argument("--set", action="append")
    lo.add_argument("--limit", type=int, help="only the first N messages of each conversation")
    lo.set_defaults(func=cmd_locomo)
    sp = sub.add_parser("speed", help="seconds per message of each judge, side by side (real models, no caches)")
    sp.add_argument("--config", default="cpu")
    sp.add_argument("--limit", type=int, default=5, help="first N TIAGE-dev dialogues")
    sp.add_argument("--also", action="append", metavar="TOML",
                    help="also time the judge of this config file (repeatable)")
    sp.add_argument("--llm-judges", nargs="*", default=["llm-logprob"], help="LLM label judges to time")
    sp.set_defaults(func=cmd_speed)
    args = p.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
