"""What a full build (boxes and their LLM records, `membox eval longmemeval --full-build`) of LongMemEval histories
costs, and whether its long assistant turns fit: per history its messages, boxes, failed boxes, boxes whose record
was read from a cut excerpt (a box too long for the model's context), events and traces; the build model's calls,
prompt and generated tokens, and seconds of the record stages (extract, trace-init, link, index), each also per
message. Reads the build folders only (no model runs).

    python benchmarks/longmemeval_build_cost.py --builds runs/builds-lme-full --config cpu-ce \\
        --save benchmarks/results/longmemeval-full-build.json
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

from membox_local.config import load_config
from membox_local.memory import Memory

RECORD_STAGES = ("extract", "trace-init", "link", "index")  # what a full build adds to a boxes-only one


def history_cost(folder: Path, cfg) -> dict:
    with Memory(folder, cfg) as mem:
        st = mem.stats()
        cut = sum(b.note.startswith("extracted from an excerpt") for b in mem.store.boxes())
    n = st["messages"]
    usage = {s: u for s, u in st["llm_usage"].items() if s != "answer"}  # answers of earlier QA runs left out
    seconds = sum(st["build_time"].get(s, {}).get("wall_s", 0.0) for s in RECORD_STAGES)
    return {"history": folder.name, "messages": n, "boxes": st["boxes"], "box_status": st["box_status"],
            "failed_boxes": st["failed_boxes"],
            "boxes_from_a_cut_excerpt": cut, "events": st["events"], "traces": st["traces"],
            "llm": usage, "record_seconds": round(seconds, 1),
            "per_message": {"prompt_tokens": round(sum(u["prompt_tokens"] for u in usage.values()) / n, 1),
                            "generated_tokens": round(sum(u["completion_tokens"] for u in usage.values()) / n, 1),
                            "calls": round(sum(u["calls"] for u in usage.values()) / n, 3),
                            "record_seconds": round(seconds / n, 2)}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--builds", default="runs/builds-lme-full", help="the --builds folder of the full-build run")
    p.add_argument("--config", default="cpu-ce")
    p.add_argument("--save", help="write the result here (JSON)")
    a = p.parse_args(argv)
    cfg = load_config(a.config)
    root = Path(a.builds) / cfg.name
    folders = sorted(f for f in root.iterdir() if (f / "memory.db").exists()) if root.is_dir() else []
    if not folders:
        print(f"error: --builds {a.builds}: no build of config {cfg.name} under {root}", file=sys.stderr)
        return 2
    rows = [history_cost(f, cfg) for f in folders]
    complete = [r for r in rows if r["boxes"] and r["box_status"] == {"extracted": r["boxes"]}]
    result = {"date": date.today().isoformat(), "config": cfg.name, "build_model": cfg.llm.model,
              "histories": rows, "complete": [r["history"] for r in complete]}
    text = json.dumps(result, indent=1)
    if a.save:
        Path(a.save).write_text(text + "\n")
        print(f"saved: {a.save}", file=sys.stderr)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
