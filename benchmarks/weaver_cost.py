"""Trace Weaver cost: LLM calls and tokens per box for linking ("link" + "trace-init"), next to the paper.

    python benchmarks/weaver_cost.py --data ../shared/data/locomo-dev.json --conversations conv-26 \
        --sessions 3 --config cpu --store stores/weaver-cost

Builds the given LoCoMo conversations (first N sessions) into --store (a fresh temporary folder by default).
An existing folder is reused: stored messages are skipped, and boxes not woven yet (a failed weave, or a
build made with the weaver off) are woven now. Prints a JSON report; the paper's Table 6 reports
0.88 (GPT-4o) to 2.30 (GPT-4o-mini) linking calls and about 2.7k-3.1k tokens per box.
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
from membox_local.ingest import load_messages
from membox_local.memory import Memory
from membox_local.weaver import weave_counters

LINK_STAGES = ("link", "trace-init")
PAPER_TABLE6 = {"gpt-4o-mini": {"boxes": 892, "calls_per_box": 2.30, "tokens_per_box": 3133.56},
                "gpt-4o": {"boxes": 1206, "calls_per_box": 0.88, "tokens_per_box": 2716.89}}


def timed(weave, seconds: list[float]):
    """Wrap the weaver's step to time each box's weaving, model calls included (a single driven step)."""
    def step(box):
        t0 = time.time()
        out = yield from weave(box)
        seconds.append(time.time() - t0)
        return out
    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data/locomo-dev.json")
    p.add_argument("--conversations", nargs="*", default=["conv-26"])
    p.add_argument("--sessions", type=int, default=0, help="only the first N sessions (0: all)")
    p.add_argument("--config", default="cpu")
    p.add_argument("--store", help="memory folder, reused when it exists (default: a fresh temporary one)")
    p.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0: the config's setting)")
    p.add_argument("--out", help="also write the report here")
    a = p.parse_args()
    msgs = load_messages(a.data, a.conversations)
    if a.sessions:
        msgs = [m for m in msgs if int(m.session) <= a.sessions]
    cfg = load_config(a.config, {"llm.n_threads": a.threads} if a.threads else None)
    if not cfg.weaver.enabled:
        sys.exit(f"{a.config}: [weaver] enabled = false; nothing to measure")
    store = Path(a.store) if a.store else Path(tempfile.mkdtemp(prefix="membox-weaver-")) / "mem"
    weave_s: list[float] = []
    with Memory(store, cfg) as mem:
        mem.after_extract = timed(mem.weaver.weave, weave_s)
        mem.weaver.weave = mem.after_extract  # retries of earlier failures are timed too
        t0 = time.time()
        mem.backend  # load the model outside the timed build
        load_s = time.time() - t0
        t0 = time.time()
        mem.add(msgs, seal=True)
        wall = time.time() - t0
        convs = list(dict.fromkeys(m.conversation_id for m in msgs))
        usage: dict[str, dict[str, int]] = {}
        counters = {k: 0 for k in weave_counters(mem.store, convs[0])}
        boxes = woven = traces = multi_session = 0
        for conv in convs:
            for stage, u in mem.store.usage_by_stage(conv).items():
                tot = usage.setdefault(stage, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
                for k in tot:
                    tot[k] += u[k]
            for k, v in weave_counters(mem.store, conv).items():
                counters[k] += v
            extracted = mem.store.boxes(conv, status="extracted")
            boxes += len(extracted)
            woven += len(extracted) - len(mem.store.unwoven_boxes(conv))
            session_of = {b.id: b.session for b in mem.store.boxes(conv)}
            for _, evs in mem.store.traces_with_events(conv):
                traces += 1
                multi_session += len({session_of[e.box_id] for e in evs}) > 1
    link = {s: usage.get(s, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}) for s in LINK_STAGES}
    calls = sum(u["calls"] for u in link.values())
    tokens = sum(u["prompt_tokens"] + u["completion_tokens"] for u in link.values())
    extract = usage.get("extract", {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
    report = {
        "date": date.today().isoformat(), "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "config": cfg.name, "model": cfg.llm.model, "conversations": convs, "sessions": a.sessions or "all",
        "messages": len(msgs), "boxes_extracted": boxes, "boxes_woven": woven,
        "weaver": counters, "traces": traces, "traces_spanning_sessions": multi_session,
        "linking": {
            "calls_per_box": round(calls / woven, 2) if woven else None,
            "tokens_per_box": round(tokens / woven, 1) if woven else None,
            "by_stage": link,
            "weave_s_per_box": round(sum(weave_s) / len(weave_s), 2) if weave_s else None,
        },
        "extraction_tokens_per_box": round((extract["prompt_tokens"] + extract["completion_tokens"]) / boxes, 1)
        if boxes else None,
        "model_load_s": round(load_s, 1), "build_wall_s": round(wall, 1),
        "paper_table6": PAPER_TABLE6,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
