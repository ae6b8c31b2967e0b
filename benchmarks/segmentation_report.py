"""The CPU configs' judges on a whole segmentation set, LLM scores from the committed cache (benchmarks/cache/).

    python benchmarks/segmentation_report.py [--data FILE ...] [--config SPEC ...] [--limit N] [--cached-only]
                                             [--after N]

SPEC is a config name or file, optionally with a judge: `cpu` (the default, hybrid with the LLM's PMI),
`cpu-switch`, `cpu-minilm`, `cpu:embedding` (configs/cpu.toml with loom.judge = embedding). Default: those four,
on ../shared/data/segmentation/dialseg711_test.json. Every decision goes through the Loom's online rule
(`evaluate`), as in `membox eval segmentation`; scores missing from the cache are computed first (about 0.7 s
per DialSeg711 message here) and appended to it, so a long run resumes where it stopped.

--cached-only measures the longest run of leading dialogues whose every score is cached and computes nothing:
the figure for "the first N dialogues" while a scoring run is still going. Nothing is fitted here.
Writes runs/segmentation/report-<data>.json: per config, the macro averages and each dialogue's Pk/WD/F1 and
boundaries (saved copies: benchmarks/results/segmentation-report-<data>.json).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from membox_local.evaluation.segmentation import load_dialogues
from membox_local.fit.cache import LookupEmbedder, ScoreCache, precompute_scores, score_cache_path
from membox_local.fit.measure import cached_prefix, config_of, configs_report, no_boundaries, uses_llm

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "runs" / "segmentation"
CACHE = REPO / "benchmarks" / "cache"

DEFAULT_SPECS = ["cpu", "cpu-switch", "cpu-minilm", "cpu:embedding"]
# published figures in the README of ../shared/data/segmentation (Pk / WD / F1), for the printout only
PUBLISHED = {"dialseg711_test": {"CSM": (0.278, 0.302, 0.610), "RoBERTa-TIAGE": (0.197, 0.210, 0.650)}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    seg = REPO.parent / "shared" / "data" / "segmentation"
    p.add_argument("--data", action="append", help=f"segmentation JSON file (default: {seg}/dialseg711_test.json)")
    p.add_argument("--config", action="append", metavar="SPEC", help=f"default: {' '.join(DEFAULT_SPECS)}")
    p.add_argument("--limit", type=int, help="only the first N dialogues of each file")
    p.add_argument("--cached-only", action="store_true", help="only the leading dialogues whose scores are cached")
    p.add_argument("--after", type=int, default=0, metavar="N",
                   help="also the macro averages over the dialogues after the first N (a part held out of a choice)")
    args = p.parse_args()
    specs = args.config or DEFAULT_SPECS
    cfgs = {s: config_of(s) for s in specs}
    llm_models = {c.llm.model for c in cfgs.values() if uses_llm(c)}
    if len(llm_models) > 1:
        raise SystemExit(f"configs score with different LLMs {sorted(llm_models)}: run them separately")
    windows = {c.loom.window for c in cfgs.values() if uses_llm(c)}
    for path in args.data or [str(seg / "dialseg711_test.json")]:
        dls = load_dialogues(path, args.limit)
        base = next(iter(cfgs.values()))
        scored = next((c for c in cfgs.values() if uses_llm(c)), None)
        scorer = ScoreCache(scored, score_cache_path(scored, CACHE)) if llm_models else None
        if args.cached_only and scorer is not None:
            n = min(cached_prefix(dls, scorer, w) for w in windows)
            print(f"{Path(path).name}: the first {n} of {len(dls)} dialogues have every score cached", file=sys.stderr)
            dls = dls[:n]
        elif scorer is not None:  # missing scores first, in the order that reuses each prefix
            for w in windows:
                precompute_scores([d.messages for d in dls], scorer, w, Path(path).name)
        if not dls:
            raise SystemExit(f"{path}: no dialogue to measure")
        emb = LookupEmbedder(base, [m.text for d in dls for m in d.messages], RUNS / "vectors.npz")
        stem = Path(path).stem
        out = {"date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/segmentation_report.py " +
               " ".join(sys.argv[1:]), "data": Path(path).name, "dialogues": len(dls),
               "turns": sum(len(d.messages) for d in dls), "llm": sorted(llm_models),
               "embedder": base.embedder.model, "no_boundaries": no_boundaries(dls)}
        out["configs"] = configs_report(cfgs, dls, emb, scorer, args.after, stem)
        for name, (pk_, wd_, f1_) in PUBLISHED.get(stem, {}).items():
            print(f"{stem} {name + ' (published)':16s} {pk_:.3f} / {wd_:.3f} / {f1_:.3f}", file=sys.stderr)
        RUNS.mkdir(parents=True, exist_ok=True)
        (RUNS / f"report-{stem}.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
