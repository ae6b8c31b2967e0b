"""GPU smoke test for the vLLM backend: build the bundled demo conversation, ask it questions, print
throughput. For a CUDA machine with vLLM installed and a chat model on disk (or a hub id it can reach):

    python benchmarks/gpu_smoke.py --model /models/Qwen2.5-7B-Instruct [--judge llm] [--engine outlines]

Not run by this project's CI (no GPU there); nothing in the docs quotes its numbers.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from membox_local.config import load_config
from membox_local.ingest import load_messages
from membox_local.memory import Memory

DEMO = Path(__file__).resolve().parent.parent / "membox_local" / "data" / "demo.jsonl"
QUESTIONS = ["Which race did Maya sign up for?", "What did the physio tell Maya to do about her knee?",
             "What is the name of Tom's cat?"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="HF model folder or hub id for vLLM")
    ap.add_argument("--config", default="cpu", help="base config; [llm] is switched to vllm")
    ap.add_argument("--judge", default=None, help="override [loom] judge (e.g. llm to exercise label calls)")
    ap.add_argument("--engine", default="outlines", help="vLLM structured-output engine")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--max-model-len", type=int, default=8192)
    args = ap.parse_args()

    cfg = load_config(args.config, {"llm.backend": "vllm", "llm.model": args.model, "llm.structured_engine": args.engine,
                                     "llm.gpu_memory_utilization": args.gpu_memory_utilization,
                                     "llm.max_model_len": args.max_model_len})
    if args.judge:
        cfg.loom.judge = args.judge
    messages = load_messages(DEMO)
    t0 = time.time()
    from membox_local.backends import make_backend

    backend = make_backend(cfg.llm)
    load_s = time.time() - t0
    with tempfile.TemporaryDirectory() as tmp, Memory(Path(tmp) / "mem", cfg, backend=backend) as mem:
        t0 = time.time()
        mem.add(messages, seal=True)
        build_s = time.time() - t0
        answers = []
        t0 = time.time()
        for q in QUESTIONS:
            answers.append({"question": q, "answer": mem.answer(q).text})
        ask_s = time.time() - t0
        stats = mem.stats()
    usage = stats["llm_usage"]
    completion = sum(u["completion_tokens"] for u in usage.values())
    prompt = sum(u["prompt_tokens"] for u in usage.values())
    print(json.dumps({"model": args.model, "engine": args.engine, "load_s": round(load_s, 1),
                      "build_s": round(build_s, 2), "ask_s": round(ask_s, 2), "boxes": stats["boxes"],
                      "llm_usage": usage, "prompt_tokens": prompt, "completion_tokens": completion,
                      "completion_tokens_per_s": round(completion / max(1e-9, build_s + ask_s), 1),
                      "answers": answers}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
