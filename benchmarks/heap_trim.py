"""What the C heap keeps after MiniLM's embedding calls, with and without handing its free pages back after each
(membox_local/native.py, give_back_freed_heap: malloc_trim).

    python benchmarks/heap_trim.py --save benchmarks/results/heap-trim.json

Each arm in a fresh process: the config's embedder loaded and run once, then `--rounds` rounds of calls of 1, 4 and
64 texts of 5-400 random words; reports the process's heap and buffers (RssAnon) after the rounds against after the
load, the largest sample between rounds, the calls' seconds, and (trimmed) the seconds spent trimming. Run it alone.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from membox_local.config import load_config
from membox_local.embed import make_embedder
from membox_local.evaluation.soak import rss_parts_mb
from membox_local.native import give_back_freed_heap

LENGTHS = (10, 40, 80, 160, 240, 400, 20, 5)  # words per text, in this order each round
BATCHES = (1, 4, 64)  # texts per call


def arm(config: str, trim: bool, rounds: int) -> dict:
    emb = make_embedder(load_config(config).embedder)
    emb.encode(["warm up"])
    give_back_freed_heap(0.0)  # both arms start from a trimmed heap
    loaded = rss_parts_mb()["anon"]
    words, rng = [f"w{i}" for i in range(5000)], random.Random(0)
    calls = trimming = 0.0
    trims = 0
    peak = loaded
    for _ in range(rounds):
        for n in LENGTHS:
            for batch in BATCHES:
                texts = [" ".join(rng.choice(words) for _ in range(n)) for _ in range(batch)]
                t = time.perf_counter()
                emb.encode(texts)
                calls += time.perf_counter() - t
                if trim:
                    t = time.perf_counter()
                    trims += give_back_freed_heap(0.0)  # False where the C library cannot trim
                    trimming += time.perf_counter() - t
        peak = max(peak, rss_parts_mb()["anon"])
    end = rss_parts_mb()["anon"]
    return {"kept_mb": round(end - loaded, 1), "largest_mb": round(peak - loaded, 1), "calls_s": round(calls, 1),
            "trim_s": round(trimming, 3), "trims": trims}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="cpu-ce", help="the config whose embedder runs (default cpu-ce)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--arm", choices=("kept", "trimmed"), help=argparse.SUPPRESS)  # one arm, in this process
    p.add_argument("--save", type=Path)
    a = p.parse_args(argv)
    if a.arm:
        print(json.dumps(arm(a.config, a.arm == "trimmed", a.rounds)))
        return 0
    arms = {}
    for name in ("kept", "trimmed"):
        out = subprocess.run([sys.executable, __file__, "--config", a.config, "--rounds", str(a.rounds), "--arm", name],
                             capture_output=True, text=True, check=True).stdout
        arms[name] = json.loads(out.strip().splitlines()[-1])
        r = arms[name]
        print(f"{name}: heap +{r['kept_mb']} MB after the rounds (largest +{r['largest_mb']}), calls {r['calls_s']} s, "
              f"{r['trims']} trims {r['trim_s']} s")
    if a.save:
        a.save.write_text(json.dumps({"command": "python benchmarks/heap_trim.py " + " ".join(argv or sys.argv[1:]),
                                      "date": time.strftime("%Y-%m-%d"), "config": a.config,
                                      "model": load_config(a.config).embedder.model, "rounds": a.rounds, "arms": arms},
                                     indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
