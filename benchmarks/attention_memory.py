"""Resident memory of one llama.cpp instance as its KV cache fills, with flash attention off and on (issue 53).

    python benchmarks/attention_memory.py --model qwen2.5-coder-0.5b --n-ctx 4096 \
        --save benchmarks/results/attention-memory.json

Each arm runs in a process of its own: the model loaded as the llamacpp backend loads it (n_batch 512, `--threads`),
one batch of 512 tokens decoded as `Backend.prepare` does at start, then the context filled to 1024, 2048, 3072 tokens
and to `--n-ctx` less 64, the resident memory read after each step. Without flash attention llama.cpp's attention
scores for a batch take room that grows with the tokens already in the KV cache, up to a size it reserved for the
whole context but touches only as prompts reach that deep: a server's memory then rises over its first long prompts.
The seconds of the fill are printed beside (one arm after the other: run it alone; only their ratio is worth anything).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from membox_local.argtypes import count
from membox_local.evaluation.soak import rss_mb
from membox_local.weights import resolve_model

TEXT = b"The quick brown fox told Maya that the lake trip moved to Saturday, and Tom said he would bring the tent. "


def arm(model: str, n_ctx: int, threads: int, flash: bool) -> dict:
    """One arm in this process: resident MB after loading, after the prepare batch, and at each KV depth."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(resolve_model(model)), n_ctx=n_ctx, n_batch=512, n_threads=threads,
                n_threads_batch=threads, flash_attn=flash, verbose=False)
    tokens = llm.tokenize(TEXT * (n_ctx // 10), add_bos=False)[:n_ctx]
    out = {"loaded_mb": rss_mb()}
    llm.eval(tokens[:512])
    out["prepared_mb"] = rss_mb()
    llm.reset()
    depth, steps, t0 = 0, {}, time.perf_counter()
    for stop in [d for d in (1024, 2048, 3072) if d < n_ctx - 64] + [n_ctx - 64]:
        llm.eval(tokens[depth:stop])
        depth = stop
        steps[str(depth)] = round(rss_mb(), 1)
    out.update(by_depth_mb=steps, fill_s=round(time.perf_counter() - t0, 1),
               growth_after_prepare_mb=round(steps[str(depth)] - out["prepared_mb"], 1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="a model of models/manifest.toml (a GGUF)")
    p.add_argument("--n-ctx", type=count(1024), default=4096, help="the instance's context, as [llm] n_ctx")
    p.add_argument("--threads", type=count(), default=2)
    p.add_argument("--arm", choices=("off", "on"), help=argparse.SUPPRESS)  # one arm, in a child process
    p.add_argument("--save", type=Path)
    args = p.parse_args(argv)
    if args.arm:
        print(json.dumps(arm(args.model, args.n_ctx, args.threads, args.arm == "on")))
        return 0
    arms = {}
    for name in ("off", "on"):
        cmd = [sys.executable, __file__, "--model", args.model, "--n-ctx", str(args.n_ctx), "--threads",
               str(args.threads), "--arm", name]
        arms[name] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        r = arms[name]
        print(f"flash attention {name}: loaded {r['loaded_mb']:.0f} MB, after the prepare batch {r['prepared_mb']:.0f} MB, "
              f"then {r['by_depth_mb']} by KV depth: +{r['growth_after_prepare_mb']} MB ({r['fill_s']} s to fill)")
    if args.save:
        args.save.write_text(json.dumps({"command": "python benchmarks/attention_memory.py " + " ".join(argv or sys.argv[1:]),
                                         "date": time.strftime("%Y-%m-%d"), "model": args.model, "n_ctx": args.n_ctx,
                                         "threads": args.threads, "arms": arms}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
