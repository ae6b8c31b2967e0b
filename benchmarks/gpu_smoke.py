"""The vLLM path end to end, the same script on vLLM's CPU build and on a GPU: only the config differs.

    # here (make install-vllm): Qwen2.5-Coder-0.5B as a folder derived from the shipped GGUF, vLLM's CPU build
    .venv-vllm/bin/python benchmarks/gpu_smoke.py --config vllm-cpu --out benchmarks/results/vllm-cpu-smoke.json
    # a CUDA box with vLLM installed: the same steps on the GPU (configs/vllm.toml; --model names a local folder
    # or a manifest name such as qwen2.5-coder-0.5b-hf, which is derived there from the shipped GGUF)
    python benchmarks/gpu_smoke.py --config vllm --model qwen2.5-coder-0.5b-hf --out gpu-smoke.json

Steps, each timed: (1) load the engine; (2) build the bundled demo conversation (judge, extraction under a JSON
schema, the Weaver) and answer three questions; (3) batching: N sliced LoCoMo conversations built one at a time
and all in flight together (one generate over every pending request), N = --sizes, with the ratio
(benchmarks/build_throughput.py's measurement). Writes one JSON report.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

from membox_local.config import load_config
from membox_local.ingest import load_messages
from membox_local.memory import Memory

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from build_throughput import run_once, slices  # noqa: E402  (the batching measurement, shared)

DEMO = REPO / "membox_local" / "data" / "demo.jsonl"
QUESTIONS = ["Which race did Maya sign up for?", "What did the physio tell Maya to do about her knee?",
             "What is the name of Tom's cat?"]


def demo_build(cfg, backend, embedder, folder: Path) -> dict:
    """The demo conversation built and asked, with this run's engine (kept open for the batching step)."""
    mem = Memory(folder, cfg, backend=backend, embedder=embedder)
    try:
        t0 = time.time()
        mem.add(load_messages(DEMO), seal=True)
        build_s = time.time() - t0
        t0 = time.time()
        answers = [{"question": q, "answer": mem.answer(q).text} for q in QUESTIONS]
        ask_s = time.time() - t0
        stats = mem.stats()
    finally:
        mem.store.close()  # not mem.close(): that would close the shared engine
    return {"messages": stats["messages"], "boxes": stats["boxes"], "failed_boxes": stats.get("failed_boxes", 0),
            "traces": stats.get("traces", 0), "build_s": round(build_s, 1), "ask_s": round(ask_s, 1),
            "s_per_message": round(build_s / max(1, stats["messages"]), 2), "llm_usage": stats["llm_usage"],
            "answers": answers}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="vllm-cpu", help="vllm-cpu here, vllm on a GPU box")
    ap.add_argument("--model", help="override [llm] model (a manifest name or a local folder)")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "locomo-dev.json"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--sessions", type=int, default=1, help="batching: sessions per sliced conversation")
    ap.add_argument("--turns", type=int, default=4, help="batching: first turns of each session")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--out", help="write the JSON report here")
    a = ap.parse_args(argv)

    cfg = load_config(a.config, {"llm.model": a.model} if a.model else None)
    if cfg.llm.backend != "vllm":
        raise SystemExit(f"config {a.config!r} uses the {cfg.llm.backend!r} backend; this script measures vLLM")
    cfg.answer.llm = {}  # the engine under test answers too
    from membox_local.backends import make_backend
    from membox_local.embed import make_embedder

    t0 = time.time()
    backend = make_backend(cfg.llm)
    embedder = make_embedder(cfg.embedder)
    report = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
              "command": "python " + " ".join(sys.argv if argv is None else ["benchmarks/gpu_smoke.py", *argv]),
              "config": cfg.name, "model": cfg.llm.model, "judge": cfg.loom.judge, "load_s": round(time.time() - t0, 1)}
    import tempfile

    try:
        with tempfile.TemporaryDirectory(prefix="membox-smoke-") as tmp:
            if not a.skip_demo:
                report["demo"] = demo_build(cfg, backend, embedder, Path(tmp) / "demo")
                print(json.dumps({"demo": {k: v for k, v in report["demo"].items() if k != "llm_usage"}}), flush=True)
            convs = slices(load_messages(a.data), a.sessions, a.turns)
            rows = []
            for n in a.sizes:
                one = run_once(convs[:n], 1, cfg, backend, embedder)
                batched = run_once(convs[:n], n, cfg, backend, embedder)
                rows.append({"N": n, "turns": one["turns"], "one_at_a_time_s": one["wall_s"],
                             "batched_s": batched["wall_s"], "one_at_a_time_turns_per_s": one["turns_per_s"],
                             "batched_turns_per_s": batched["turns_per_s"],
                             "speedup": round(batched["turns_per_s"] / one["turns_per_s"], 2),
                             "backend_calls": {"one_at_a_time": one["backend_calls"], "batched": batched["backend_calls"]}})
                print(json.dumps(rows[-1]), flush=True)
            report["batching"] = {"sessions": a.sessions, "turns": a.turns, "rows": rows}
    finally:
        backend.close()
    text = json.dumps(report, indent=2)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
