"""Build throughput: batched (all N conversations in flight) against one at a time, for N = 1, 4, 16.

    python benchmarks/build_throughput.py --backend model --config cpu-fast --sizes 1 4 16 --turns 6
    python benchmarks/build_throughput.py --backend double --sizes 1 4 16
    python benchmarks/build_throughput.py --backend latency-double --sizes 1 4 16

Conversations are slices of LoCoMo: each of the file's conversations is cut into blocks of `--sessions`
consecutive sessions, each session cut to its first `--turns` turns, so N can exceed the six LoCoMo
conversations. Every build goes into a fresh store. Backends:
- model: the config's real backend (llama.cpp on the CPU), `--jobs` instances (LlamaCppPool when > 1);
- double: the deterministic test double (membox_local/testing.py): pure scheduling overhead, tokens counted in words;
- latency-double: the double plus a fixed cost per call and a small cost per item, standing in for a
  backend that batches natively (vLLM: one generate over all prompts). A simulation: says nothing about
  a real GPU's numbers, only about what the scheduler does with such a backend.
Reports turns per second, the batched/one-at-a-time ratio, backend calls per kind, and LLM tokens per
utterance by stage beside the paper's (Membox, GPT-4o-mini: Tables 5 and 6).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from membox_local.config import load_config
from membox_local.execution.batch import build_conversations
from membox_local.ingest import load_messages
from membox_local.memory import Memory
from membox_local.records import Message

REPO = Path(__file__).resolve().parent.parent

# Membox with GPT-4o-mini (paper, Tables 5 and 6): 892 boxes
PAPER = {"construction_tok_per_utt": 236.18, "construction_tok_per_box": 1557.44, "linking_tok_per_box": 3133.56,
         "linking_calls_per_box": 2.30}
PAPER["utt_per_box"] = PAPER["construction_tok_per_box"] / PAPER["construction_tok_per_utt"]
PAPER["linking_tok_per_utt"] = PAPER["linking_tok_per_box"] / PAPER["utt_per_box"]
PAPER["total_tok_per_utt"] = PAPER["construction_tok_per_utt"] + PAPER["linking_tok_per_utt"]
CONSTRUCTION = ("judge", "continuity", "extract")  # Loom stages (the judge's label stage name varies)
LINKING = ("link", "trace-init")


def slices(messages: list[Message], sessions: int, turns: int) -> list[list[Message]]:
    by_conv: dict[str, list[Message]] = {}
    for m in messages:
        by_conv.setdefault(m.conversation_id, []).append(m)
    blocks: dict[tuple[int, str], list[Message]] = {}
    for conv, msgs in by_conv.items():
        seen: dict[str, int] = {}
        for m in msgs:
            k = seen.setdefault(m.session, 0)
            seen[m.session] += 1
            if turns and k >= turns:
                continue
            block = (int(m.session) - 1) // sessions
            cid = f"{conv}#{block}"
            blocks.setdefault((block, conv), []).append(
                Message(cid, m.message_id, m.speaker, m.text, m.session, m.session_date))
    return [blocks[k] for k in sorted(blocks)]  # block 0 of every conversation first, then block 1, ...


class LatencyDouble:
    """Wraps the double: each batched call costs `call_s` plus `item_s` per request (a native batcher)."""

    def __new__(cls, call_s: float, item_s: float):
        from membox_local.testing import FakeBackend

        class _Latency(FakeBackend):
            name = "latency-double"

            def _wait(self, n):
                time.sleep(call_s + item_s * n)

            def label_batch(self, requests):
                self._wait(len(requests))
                return super().label_batch(requests)

            def json_batch(self, requests):
                self._wait(len(requests))
                return super().json_batch(requests)

            def text_batch(self, requests):
                self._wait(len(requests))
                return super().text_batch(requests)

        return _Latency()


def make_models(a, cfg):
    if a.backend == "model":
        from membox_local.backends import make_backend
        from membox_local.embed import make_embedder

        if a.jobs > 1:
            from membox_local.backends.llamacpp import LlamaCppPool

            backend = LlamaCppPool(cfg.llm, a.jobs)
        else:
            backend = make_backend(cfg.llm)
        return backend, make_embedder(cfg.embedder)
    from membox_local.testing import FakeBackend, FakeEmbedder

    backend = FakeBackend() if a.backend == "double" else LatencyDouble(a.call_ms / 1000, a.item_ms / 1000)
    return backend, FakeEmbedder()


def run_once(convs: list[list[Message]], batch_size: int, cfg, backend, embedder) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="membox-tput-")) / "mem"
    mem = Memory(folder, cfg, backend=backend, embedder=embedder)
    mem.store.add_messages([m for c in convs for m in c])
    report = build_conversations(mem, [c[0].conversation_id for c in convs], batch_size=batch_size)
    stats = mem.stats()
    mem.store.close()  # the backend is shared between runs: not closed here
    n, boxes = stats["messages"], stats["boxes"]
    usage = stats["llm_usage"]

    def tok(stages):
        return sum(u["prompt_tokens"] + u["completion_tokens"] for s, u in usage.items() if s in stages)

    def calls(stages):
        return sum(u["calls"] for s, u in usage.items() if s in stages)

    unknown = set(usage) - set(CONSTRUCTION) - set(LINKING)
    if unknown:
        raise SystemExit(f"stages {sorted(unknown)} are neither construction nor linking: add them to the lists")
    return {
        "turns": n, "boxes": boxes, "utt_per_box": round(n / boxes, 2), "wall_s": round(report.wall_s, 2),
        "turns_per_s": round(n / report.wall_s, 2), "rounds": report.rounds, "backend_calls": report.calls,
        "requests": report.requests,
        "construction_tok_per_utt": round(tok(CONSTRUCTION) / n, 1),
        "linking_tok_per_utt": round(tok(LINKING) / n, 1),
        "linking_tok_per_box": round(tok(LINKING) / boxes, 1),
        "linking_calls_per_box": round(calls(LINKING) / boxes, 2),
        "total_tok_per_utt": round((tok(CONSTRUCTION) + tok(LINKING)) / n, 1),
        "llm_calls_per_utt_by_stage": {s: round(u["calls"] / n, 3) for s, u in usage.items()},
        "tok_per_utt_by_stage": {s: round((u["prompt_tokens"] + u["completion_tokens"]) / n, 1)
                                 for s, u in usage.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "locomo-dev.json"))
    p.add_argument("--backend", choices=("model", "double", "latency-double"), default="double")
    p.add_argument("--config", default="cpu")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--sessions", type=int, default=2, help="consecutive sessions per sliced conversation")
    p.add_argument("--turns", type=int, default=0, help="first turns of each session (0: all)")
    p.add_argument("--jobs", type=int, default=1, help="model backend: llama.cpp instances (pool when > 1)")
    p.add_argument("--call-ms", type=float, default=50.0, help="latency-double: cost of one batched call")
    p.add_argument("--item-ms", type=float, default=2.0, help="latency-double: extra cost per request")
    p.add_argument("--out", help="also write the JSON report here")
    a = p.parse_args()

    cfg = load_config(a.config)
    if a.backend != "model":
        cfg.loom.threshold = 0.15  # the bag-of-words double's cosines are lower than MiniLM's
    convs = slices(load_messages(a.data), a.sessions, a.turns)
    if max(a.sizes) > len(convs):
        raise SystemExit(f"only {len(convs)} sliced conversations; lower --sessions or the sizes")
    t0 = time.time()
    backend, embedder = make_models(a, cfg)
    load_s = time.time() - t0
    rows = []
    for n in a.sizes:
        part = convs[:n]
        one = run_once(part, 1, cfg, backend, embedder)
        batched = run_once(part, n, cfg, backend, embedder)
        row = {"N": n, "one_at_a_time": one, "batched": batched,
               "speedup": round(batched["turns_per_s"] / one["turns_per_s"], 2)}
        rows.append(row)
        print(f"N={n:3d}  turns={one['turns']:5d}  one-at-a-time {one['turns_per_s']:8.2f} turns/s  "
              f"batched {batched['turns_per_s']:8.2f} turns/s  x{row['speedup']}", file=sys.stderr, flush=True)
    report = {
        "date": date.today().isoformat(), "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "command": "python " + " ".join(sys.argv), "backend": a.backend, "config": cfg.name,
        "model": cfg.llm.model if a.backend == "model" else "membox_local/testing.py", "judge": cfg.loom.judge,
        "jobs": a.jobs, "sessions_per_conversation": a.sessions, "turns_per_session": a.turns or "all",
        "model_load_s": round(load_s, 1), "rows": rows, "paper_gpt4o_mini": {k: round(v, 2) for k, v in PAPER.items()},
        "target_total_tok_per_utt": round(PAPER["total_tok_per_utt"] / 2, 1),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
