"""Box-aware retrieval (membox_local/retrieval/boxhits.py) against the baselines on LoCoMo, for BENCHMARKS.md.

    # evidence recall on the six dev conversations, boxes from the config's judge, no language model
    python benchmarks/boxaware_bench.py recall
    # the same on each conversation's first 8 sessions (questions whose evidence is there), the judge's LLM
    # scores read from the segmentation benchmarks' committed cache (benchmarks/cache/): configs side by side
    python benchmarks/boxaware_bench.py recall --sessions 8 --cached-scores --config cpu
    # every mode, compact and trace included, on full builds of the first 4 sessions (built by locomo_bench.py)
    python benchmarks/boxaware_bench.py full --conversations conv-30 conv-26
    # QA (three scorers) at a 1000-token budget on those full builds
    python benchmarks/boxaware_bench.py qa --conversations conv-30 conv-26
    # box-hits with each header layout (boxaware.HEADERS) on whole-conversation builds that exist already
    # (runs/builds/cpu/<conversation>, made by `membox eval locomo --config cpu --conversations ...`)
    python benchmarks/boxaware_bench.py headers --conversations conv-30 conv-26 conv-41 conv-42 conv-43 conv-44
    # box-hits with other message windows (how the default window was chosen), same builds, six conversations
    python benchmarks/boxaware_bench.py windows
    # QA (three scorers) at a 1000-token budget on those whole-conversation builds; one process per
    # conversation side by side, then one table over both (saved in benchmarks/results/boxaware-qa-cpu.md)
    python benchmarks/boxaware_bench.py qa-full --conversations conv-30 --out runs/bench-boxaware-qa-full-conv-30
    python benchmarks/boxaware_bench.py qa-full --conversations conv-26 --out runs/bench-boxaware-qa-full-conv-26
    python benchmarks/locomo_bench.py save --results benchmarks/results/boxaware-qa-cpu.jsonl.gz \
        runs/bench-boxaware-qa-full-conv-30 runs/bench-boxaware-qa-full-conv-26

Each step is `membox eval locomo` (membox_local.evaluation.locomo.run) with fixed settings; resumable.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from membox_local.evaluation.locomo import DEFAULT_DATA, Settings, markdown, run
from membox_local.retrieval import RETRIEVERS
from membox_local.retrieval.boxhits import HEADERS, BoxHitsRetriever, BoxHitsTraceRetriever, _unit

REPO = Path(__file__).resolve().parent.parent

DEV = ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44"]
BOX_ONLY_MODES = ["turn-rag", "chunk-rag", "box-hits"]
FULL_MODES = ["turn-rag", "chunk-rag", "compact", "trace", "box-hits", "box-hits-trace"]


def header_variants() -> list[str]:
    """Register box-hits and box-hits-trace with every header layout as modes named `<mode>:<headers>`."""
    names = []
    for base in (BoxHitsRetriever, BoxHitsTraceRetriever):
        for headers in HEADERS:
            name = f"{base.name}:{headers}"
            RETRIEVERS[name] = type(f"{base.__name__}_{headers}", (base,), {"name": name, "headers": headers})
            names.append(name)
    return names


def window_variants() -> list[str]:
    """Register box-hits with other message windows as modes named `box-hits:<window>`: `neighbours-mean`
    (the mean vector of the message and its box neighbours on either side: the window before 2026-11-30),
    `neighbours-text` (those three messages embedded as one text), `chunk40` (box-bounded chunks of ~40
    words instead of ~60)."""
    def neighbours_mean(self, messages, members):
        vectors = self.memory.embedder.encode([m.render() for m in messages])  # turn-rag's, cached
        windows = np.zeros_like(vectors)
        for idx in members:
            for j in range(len(idx)):
                windows[idx[j]] = vectors[idx[max(0, j - 1):j + 2]].mean(axis=0)
        return _unit(windows)

    def neighbours_text(self, messages, members):
        spans = [idx[max(0, j - 1):j + 2] for idx in members for j in range(len(idx))]
        vecs = self.memory.embedder.encode(["\n".join(messages[i].render() for i in span) for span in spans])
        windows = np.zeros((len(messages), vecs.shape[1]), dtype=vecs.dtype)
        for idx, v in zip((i for idx in members for i in idx), vecs):
            windows[idx] = v
        return _unit(windows)

    variants = {"neighbours-mean": {"window_vectors": neighbours_mean},
                "neighbours-text": {"window_vectors": neighbours_text},
                "chunk40": {"chunk_words": 40}}
    for window, attrs in variants.items():
        name = f"box-hits:{window}"
        RETRIEVERS[name] = type(f"BoxHits_{window}", (BoxHitsRetriever,), {"name": name, **attrs})
    return ["box-hits:" + w for w in variants]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["recall", "full", "qa", "headers", "windows", "qa-full"])
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--config", default="cpu")
    p.add_argument("--conversations", nargs="+", default=None)
    p.add_argument("--modes", nargs="*", help="default: the step's modes")
    p.add_argument("--limit", type=int, default=0, help="qa: questions per conversation (0: all)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", help="run folder (default: runs/bench-boxaware-<step>-<config>...)")
    p.add_argument("--sessions", type=int, default=0, help="recall: only each conversation's first N sessions")
    p.add_argument("--cached-scores", action="store_true",
                   help="recall: the judge's score requests from benchmarks/cache/ (membox_local.fit.cache.ScoreCache; missing "
                        "ones are computed and added), MiniLM vectors from runs/segmentation/vectors.npz")
    a = p.parse_args(argv)
    if a.step != "recall" and (a.sessions or a.cached_scores):
        p.error("--sessions and --cached-scores serve the recall step only (the others fix their own sessions and "
                "extract records with the LLM)")
    variants = header_variants()  # so that --modes may name them in any step
    windows = window_variants()
    if a.step == "recall":
        tag = f"-s{a.sessions}" if a.sessions else ""
        s = Settings(data=a.data, config=a.config, conversations=a.conversations or DEV, k=[10],
                     modes=a.modes or BOX_ONLY_MODES, qa=False, build=False, boxes_only=True, sessions=a.sessions,
                     builds="runs/builds-boxes", out=a.out or f"runs/bench-boxaware-recall-{Path(a.config).stem}{tag}")
    elif a.step == "headers":  # recall only, on whole-conversation builds (finished ones are not rebuilt)
        s = Settings(data=a.data, config=a.config, conversations=a.conversations or DEV, k=[10],
                     modes=a.modes or ["chunk-rag"] + variants, qa=False, threads=a.threads,
                     out=a.out or f"runs/bench-boxaware-headers-{a.config}")
    elif a.step == "windows":  # recall only, on whole-conversation builds (finished ones are not rebuilt)
        s = Settings(data=a.data, config=a.config, conversations=a.conversations or DEV, k=[10],
                     modes=a.modes or ["chunk-rag", "box-hits"] + windows, qa=False, threads=a.threads,
                     out=a.out or f"runs/bench-boxaware-windows-{a.config}")
    elif a.step == "qa-full":  # QA on whole-conversation builds (finished ones are not rebuilt)
        s = Settings(data=a.data, config=a.config, conversations=a.conversations or ["conv-30", "conv-26"],
                     k=[10], modes=a.modes or ["box-hits", "compact"], qa=True, qa_budget=1000,
                     limit=a.limit, threads=a.threads, out=a.out or f"runs/bench-boxaware-qa-full-{a.config}")
    else:
        s = Settings(data=a.data, config=a.config, conversations=a.conversations or ["conv-30", "conv-26"],
                     k=[10], sessions=4, modes=a.modes or FULL_MODES, qa=a.step == "qa", qa_budget=1000,
                     limit=a.limit, threads=a.threads,
                     out=a.out or f"runs/bench-boxaware-{a.step}-{a.config}-s4")
    backend = embedder = None
    if a.cached_scores:
        from membox_local.config import load_config
        from membox_local.fit.cache import LookupEmbedder, ScoreCache, score_cache_path

        cfg = load_config(a.config)
        backend = ScoreCache(cfg, score_cache_path(cfg, REPO / "benchmarks" / "cache"))
        embedder = LookupEmbedder(cfg, [], REPO / "runs" / "segmentation" / "vectors.npz")
    summary = run(s, backend=backend, embedder=embedder)
    print(f"<!-- 2-core CPU VM; date {time.strftime('%Y-%m-%d')}; command: python benchmarks/boxaware_bench.py "
          f"{' '.join(sys.argv[1:] if argv is None else argv)} -->")
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
