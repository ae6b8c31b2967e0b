"""Answering models side by side on LoCoMo, on the same boxes and the same contexts, for BENCHMARKS.md.

    # QA F1 (three scorers) and seconds per answer, each model answering every question of the three
    # conversations from the same box-hits context (1000-token budget); boxes from the config's judge, its
    # LLM scores read from benchmarks/cache/ (no extraction: box-hits reads messages inside boxes)
    python benchmarks/answer_models.py qa --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b
    # the temporal questions (category 2) of the same sample with relative dates left unresolved (the qa
    # step's records hold them resolved)
    python benchmarks/answer_models.py dates --models qwen2.5-coder-1.5b

Each step is `membox eval locomo` (membox_local.evaluation.locomo.run) with fixed settings; resumable (rerun
the same command). Run folders: runs/bench-answer-<step>[-nodates].
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from membox_local.evaluation.locomo import DEFAULT_DATA, Settings, markdown, run

REPO = Path(__file__).resolve().parent.parent
CONVERSATIONS = ["conv-26", "conv-30", "conv-44"]  # 356 questions of categories 1-4


def report(a) -> int:
    from membox_local.evaluation.paired import answerers_report

    print(answerers_report(a.runs, a.config, a.budget, a.save))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["qa", "dates", "report"])
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--config", default="cpu")
    p.add_argument("--conversations", nargs="+", default=CONVERSATIONS)
    p.add_argument("--models", nargs="+", default=[], help="answering models, side by side")
    p.add_argument("--runs", nargs="*", default=[], help="report: run folders (or saved .jsonl.gz results) to pool; "
                                                        "a folder of the dates step is labelled 'dates as said'")
    p.add_argument("--save", help="report: write the answers to the questions every model answered here (a "
                                  "results .jsonl.gz: ids and scores, no dataset text)")
    p.add_argument("--budget", type=int, default=1000, help="context tokens shown to the answering model")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--limit", type=int, default=0, help="at most this many questions per conversation")
    p.add_argument("--stride", type=int, default=1, help="every N-th question (a sample spread evenly)")
    p.add_argument("--out", help="run folder (default runs/bench-answer-<step>-<config>); models answered in "
                                 "separate processes (one thread each) go to separate folders, merged by "
                                 "`python benchmarks/locomo_bench.py merge`")
    a = p.parse_args(argv)
    if a.step == "report":
        return report(a)
    if not a.models:
        p.error("--models: name at least one answering model")
    from membox_local.backends import make_backend
    from membox_local.config import load_config
    from membox_local.fit.cache import ScoreCache, score_cache_path

    cfg = load_config(a.config, {"llm.n_threads": a.threads} if a.threads else None)
    answerers = {m: make_backend(dataclasses.replace(cfg.answer_llm(), model=m)) for m in a.models}
    backend = ScoreCache(cfg, score_cache_path(cfg, REPO / "benchmarks" / "cache"))
    common = dict(data=a.data, config=a.config, conversations=a.conversations, modes=["box-hits"], k=[10],
                  budgets=[a.budget], qa=True, qa_budget=a.budget, build=False, boxes_only=True,
                  builds="runs/builds-boxes", threads=a.threads, limit=a.limit, stride=a.stride, answer_models=a.models)
    runs = []
    if a.step == "qa":
        runs.append(Settings(**common, out=a.out or f"runs/bench-answer-qa-{Path(a.config).stem}"))
    else:  # the temporal questions of the same sample, relative dates left as they were said
        runs.append(Settings(**common, categories=[2], overrides={"retrieve.resolve_dates": False},
                             out=a.out or f"runs/bench-answer-dates-off-{Path(a.config).stem}"))
    try:
        for s in runs:
            summary = run(s, backend=backend, answer_backends=answerers)
            print(f"<!-- 2-core CPU VM; date {time.strftime('%Y-%m-%d')}; command: python benchmarks/answer_models.py "
                  f"{' '.join(sys.argv[1:] if argv is None else argv)}; run {s.out} -->")
            print(markdown(summary))
    finally:
        for b in answerers.values():
            b.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
