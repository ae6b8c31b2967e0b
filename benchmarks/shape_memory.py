"""Resident memory that MiniLM's calls leave behind, with torch's oneDNN on and off (membox_local/native.py).

    python benchmarks/shape_memory.py --calls 600 --save benchmarks/results/shape-memory.json

Each arm runs in a process of its own: the shipped MiniLM (the CPU configs' embedder) embeds `--calls` batches of 1 to
`--max-batch` texts, each the first 3 to `--max-words` words of a message of `--data` (every call a new input shape:
batch size x padded length), on one worker thread as a server's search thread does; resident memory after 100 calls
and then at each quarter. "on" calls the model directly (oneDNN on, torch's default), "off" through the embedder
(inside onednn_off). Then, in one process, the same texts both ways interleaved (seconds side by side, and the smallest
cosine between the two vectors of a text). Run it alone: the seconds are the claim only as a ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from membox_local.argtypes import count
from membox_local.evaluation.soak import rss_mb
from membox_local.config import load_config
from membox_local.embed import SentenceTransformerEmbedder
from membox_local.ingest import load_messages


def batches(data: Path, calls: int, max_batch: int, max_words: int, seed: int) -> list[list[str]]:
    words = [m.text.split() for m in load_messages(data)]
    words = [w for w in words if len(w) >= 3]
    rng = random.Random(seed)
    return [[" ".join(rng.choice(words)[:rng.randint(3, max_words)]) for _ in range(rng.randint(1, max_batch))]
            for _ in range(calls)]


def encoder(emb: SentenceTransformerEmbedder, name: str):
    """The embedder's call ("off": inside onednn_off) or the model's own (oneDNN on), unit vectors both."""
    return emb.encode if name == "off" else (
        lambda texts: emb.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True))


def arm(name: str, args) -> dict:
    emb = SentenceTransformerEmbedder(load_config("cpu-ce").embedder)
    run = encoder(emb, name)
    work = batches(args.data, args.calls + 100, args.max_batch, args.max_words, args.seed)
    pool = ThreadPoolExecutor(1)
    for texts in work[:100]:
        pool.submit(run, texts).result()
    start, marks, t0 = rss_mb(), [], time.perf_counter()
    for i, texts in enumerate(work[100:], 1):
        pool.submit(run, texts).result()
        if i % (args.calls // 4) == 0:
            marks.append(round(rss_mb() - start, 1))
    return {"arm": name, "rss_after_100_mb": round(start, 1), "growth_mb_by_quarter": marks,
            "seconds": round(time.perf_counter() - t0, 1)}


def side_by_side(args) -> dict:
    import torch

    emb = SentenceTransformerEmbedder(load_config("cpu-ce").embedder)
    seconds = {"on": 0.0, "off": 0.0}
    low = 1.0
    for texts in batches(args.data, args.rounds, 64, args.max_words, args.seed + 1):
        vecs = {}
        for name in ("on", "off"):
            t0 = time.perf_counter()
            vecs[name] = encoder(emb, name)(texts)
            seconds[name] += time.perf_counter() - t0
        low = min(low, float(np.min(np.sum(vecs["on"] * vecs["off"], axis=1))))
    assert torch.backends.mkldnn.enabled
    return {"rounds": args.rounds, "seconds": {k: round(v, 2) for k, v in seconds.items()},
            "off_over_on": round(seconds["off"] / seconds["on"], 3), "min_cosine": low}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"))
    p.add_argument("--calls", type=count(4), default=600)
    p.add_argument("--max-batch", type=count(1), default=4)
    p.add_argument("--max-words", type=count(1), default=60)
    p.add_argument("--rounds", type=count(1), default=20, help="batches of 1-64 texts, each embedded both ways")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arm", choices=("on", "off"), help=argparse.SUPPRESS)  # one arm, in this process
    p.add_argument("--save", type=Path)
    args = p.parse_args(argv)
    if args.arm:
        print(json.dumps(arm(args.arm, args)))
        return 0
    load = os.getloadavg()[0]
    child = [sys.executable, __file__, "--data", str(args.data), "--calls", str(args.calls), "--max-batch",
             str(args.max_batch), "--max-words", str(args.max_words), "--seed", str(args.seed), "--arm"]
    arms = {}
    for name in ("on", "off"):
        print(f"shape_memory: oneDNN {name}, {args.calls} calls ...", file=sys.stderr, flush=True)
        out = subprocess.run(child + [name], check=True, capture_output=True, text=True).stdout
        arms[name] = json.loads(out.strip().splitlines()[-1])
    print("shape_memory: side by side ...", file=sys.stderr, flush=True)
    result = {"command": " ".join(["python", "benchmarks/shape_memory.py"] + (argv or sys.argv[1:])),
              "date": time.strftime("%Y-%m-%d"), "load_before": round(load, 2), "calls": args.calls,
              "max_batch": args.max_batch, "max_words": args.max_words, "arms": arms, "side_by_side": side_by_side(args)}
    print(json.dumps(result, indent=1))
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
