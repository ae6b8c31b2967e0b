"""The llama.cpp scorer against a from-scratch reference, side by side in one run.

The hybrid judge asks two score requests per message (the line after the box's last two messages, and after a
bare header). `LlamaCppBackend.score` reuses the KV cache of the prefix a request shares with the previous one
and computes next-token logits only where they predict the continuation; the reference evaluates every request
from an empty cache with logits at every position (what the backend did before 2026-12-01, evening). Both run
on the same requests, in the judge's order, with the same model and threads; the report gives seconds per
message of each, their ratio, and how far the log-likelihoods differ per token (float noise from a different
batch split). A third timing runs the same requests in `membox_local.fit.cache.score_order` (what the fits'
batch scoring uses): each bare-header request right before the request that starts with its text.

    python benchmarks/score_speed.py [--config cpu] [--limit 4]
Writes runs/score-speed.json (benchmarks/results/score-speed.json is a saved copy).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from membox_local.backends.base import continuation_logprob
from membox_local.config import load_config
from membox_local.evaluation.segmentation import load_dialogues
from membox_local.fit.cache import judge_order, score_order

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--config", default="cpu")
    p.add_argument("--limit", type=int, default=4, help="first N TIAGE-dev dialogues")
    args = p.parse_args()
    from llama_cpp import Llama

    from membox_local.backends.llamacpp import LlamaCppBackend

    cfg = load_config(args.config)
    if cfg.llm.backend != "llamacpp":
        raise SystemExit(f"{args.config}: llm.backend is {cfg.llm.backend!r}; this compares llama.cpp scorers")
    dls = load_dialogues(Path(args.data_dir) / "segmentation" / "tiage_dev.json", args.limit)
    window = cfg.loom.window
    reqs = [r for d in dls for per in judge_order(d.messages, window) for r in per]
    batch = [r for d in dls for r in score_order(d.messages, window)]
    messages = sum(max(0, len(d.messages) - window) for d in dls)
    assert sorted(map(repr, batch)) == sorted(map(repr, reqs)), "score_order must ask the judge's requests"
    backend = LlamaCppBackend(cfg.llm)
    threads = backend.llm.context_params.n_threads
    ref = Llama(model_path=backend.model_path, n_ctx=cfg.llm.score_ctx, n_threads=threads, n_threads_batch=threads,
                n_batch=cfg.llm.n_batch, logits_all=True, seed=cfg.llm.seed, verbose=False)
    tok = [(backend.tokenize(r.context, special=False), backend.tokenize(r.continuation, special=False)) for r in reqs]
    backend.score(reqs[:2])  # both instances loaded and warm before any timing
    ref.eval(tok[0][0])

    t0 = time.perf_counter()
    ours = [r.logprob for r in backend.score(reqs)]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    batched = dict(zip(map(repr, batch), (r.logprob for r in backend.score(batch))))
    t_batch = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = []
    for ctx, cont in tok:
        ref.reset()
        ref.eval(ctx + cont)
        theirs.append(continuation_logprob(ref.scores[:len(ctx) + len(cont)], len(ctx), ctx + cont))
    t_ref = time.perf_counter() - t0

    tokens = np.array([len(c) for _, c in tok])
    per_token = np.abs(np.array(ours) - np.array(theirs)) / tokens
    batch_diff = np.abs(np.array(ours) - np.array([batched[repr(r)] for r in reqs])) / tokens
    out = {"date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/score_speed.py " + " ".join(sys.argv[1:]),
           "model": cfg.llm.model, "threads": threads, "dialogues": len(dls), "messages": messages,
           "requests": len(reqs), "s_per_message": {"backend": round(t_ours / messages, 3),
                                                     "backend_batch_order": round(t_batch / messages, 3),
                                                     "from_scratch_reference": round(t_ref / messages, 3)},
           "speedup": round(t_ref / t_ours, 2), "batch_order_speedup": round(t_ours / t_batch, 2),
           "batch_vs_judge_order_abs_logprob_diff_per_token": {"max": round(float(batch_diff.max()), 4),
                                                               "mean": round(float(batch_diff.mean()), 5)},
           "abs_logprob_diff_per_token": {"max": round(float(per_token.max()), 4),
                                          "mean": round(float(per_token.mean()), 5)}}
    (REPO / "runs").mkdir(exist_ok=True)
    (REPO / "runs" / "score-speed.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    backend.close()
    ref.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
