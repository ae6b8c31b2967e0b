"""Build cost: LLM calls and tokens per message by stage, boxes and messages per box, wall time.

    python benchmarks/build_cost.py --data ../shared/data/locomo-dev.json --conversations conv-26 --sessions 3

Builds into a fresh temporary store (or --store) with the given config and prints a JSON report.
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

from tqdm import tqdm

from membox_local.config import load_config
from membox_local.ingest import load_messages
from membox_local.memory import Memory


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="../shared/data/locomo-dev.json")
    p.add_argument("--conversations", nargs="*", default=["conv-26"])
    p.add_argument("--sessions", type=int, default=0, help="only the first N sessions (0: all)")
    p.add_argument("--config", default="cpu")
    p.add_argument("--store", help="store folder (default: a fresh temporary one)")
    p.add_argument("--out", help="also write the report here")
    a = p.parse_args()
    msgs = load_messages(a.data, a.conversations)
    if a.sessions:
        msgs = [m for m in msgs if int(m.session) <= a.sessions]
    cfg = load_config(a.config)
    store = Path(a.store) if a.store else Path(tempfile.mkdtemp(prefix="membox-cost-")) / "mem"
    with Memory(store, cfg) as mem:
        t0 = time.time()
        mem.backend  # load the model outside the timed build loop
        load_s = time.time() - t0
        t0 = time.time()
        with tqdm(total=len(msgs), unit="msg", file=sys.stderr) as bar:
            mem.add(msgs, seal=True, progress=bar.update)
        wall = time.time() - t0
        stats = mem.stats()
    n = stats["messages"]
    per_msg = {stage: {"calls": round(u["calls"] / n, 3),
                       "prompt_tokens": round(u["prompt_tokens"] / n, 1),
                       "completion_tokens": round(u["completion_tokens"] / n, 1),
                       "tokens": round((u["prompt_tokens"] + u["completion_tokens"]) / n, 1)}
               for stage, u in stats["llm_usage"].items()}
    report = {
        "date": date.today().isoformat(), "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "config": cfg.name, "model": cfg.llm.model, "judge": cfg.loom.judge,
        "conversations": a.conversations, "sessions": a.sessions or "all", "messages": n,
        "boxes": stats["boxes"], "messages_per_box": stats["messages_per_box"], "box_status": stats["box_status"],
        "events": stats["events"], "model_load_s": round(load_s, 1), "build_wall_s": round(wall, 1),
        "s_per_message": round(wall / n, 3), "llm_per_message_by_stage": per_msg,
        "llm_totals_by_stage": stats["llm_usage"],
    }
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
