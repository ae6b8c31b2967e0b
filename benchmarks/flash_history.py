"""Does a llama.cpp instance's greedy output depend only on the prompt, or also on what it evaluated before?

    python benchmarks/flash_history.py --boxes 8 --save benchmarks/results/flash-history.json
    python benchmarks/flash_history.py --config cpu-ce --data ../shared/data/locomo-dev.json --boxes 40 --lines 6

For `[llm] flash_attn` off and on (each in a fresh backend with one instance, the config's model, default cpu-fast's
SmolLM2): the extraction prompts of the first `--boxes` spans of `--lines` messages of the bundled demo conversation
(or of `--data`: a LoCoMo .json or messages .jsonl, its conversations in turn, a span never across two),
generated as JSON one after another, then again in the reverse order on the same instance (its KV cache keeps the
prompt prefix each shares with the one before, as a build's calls do), then each again after the cache was emptied.
Reports how many texts differ between the orders and between a warm and an empty cache. A setting with 0 and 0 gives
a prompt the same text whatever ran before it: a resumed or reordered build writes the same records.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from membox_local.argtypes import count
from membox_local.backends.base import JsonRequest
from membox_local.backends.llamacpp import LlamaCppBackend
from membox_local.config import load_config
from membox_local.evaluation.soak import DEMO
from membox_local.ingest import load_messages
from membox_local.prompts import extract_prompt, extract_schema


def requests(config: str, boxes: int, lines: int, data: Path = DEMO) -> list[JsonRequest]:
    cfg = load_config(config)
    by_conversation: dict[str, list] = {}
    for m in load_messages(data):
        by_conversation.setdefault(m.conversation_id, []).append(m)
    spans = [msgs[i:i + lines] for msgs in by_conversation.values() for i in range(0, len(msgs), lines)][:boxes]
    return [JsonRequest(extract_prompt(span, span[0].session_date or "", cfg.extract),
                        extract_schema(cfg.extract, len(span)), "extract", cfg.extract.max_tokens)
            for span in spans if span]


def arm(config: str, flash: bool, reqs: list[JsonRequest]) -> dict:
    cfg = load_config(config).llm
    cfg.flash_attn = flash
    cfg.stage_contexts = False  # every request on the one instance `backend.llm`, so that its reset empties the cache
    backend = LlamaCppBackend(cfg)
    try:
        t0 = time.perf_counter()
        forward = [r.raw for r in backend.json_batch(reqs)]
        backward = [r.raw for r in backend.json_batch(reqs[::-1])][::-1]
        alone = []
        for req in reqs:
            backend.llm.reset()  # n_tokens 0: the next eval clears the whole KV cache first (llama-cpp-python)
            alone.append(backend.json_batch([req])[0].raw)
        seconds = time.perf_counter() - t0
    finally:
        backend.close()
    return {"texts": len(reqs), "differ_by_order": sum(a != b for a, b in zip(forward, backward)),
            "differ_warm_vs_empty_cache": sum(a != b for a, b in zip(forward, alone)), "seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="cpu-fast", help="the config whose [llm] model generates (default cpu-fast)")
    p.add_argument("--boxes", type=count(1), default=4, help="extraction prompts (default 4)")
    p.add_argument("--lines", type=count(1), default=4, help="messages per prompt (default 4)")
    p.add_argument("--data", type=Path, default=DEMO, help="a LoCoMo .json or messages .jsonl (default the demo's)")
    p.add_argument("--save", type=Path)
    a = p.parse_args(argv)
    reqs = requests(a.config, a.boxes, a.lines, a.data)
    arms = {name: arm(a.config, flash, reqs) for name, flash in (("off", False), ("on", True))}
    for name, r in arms.items():
        print(f"flash_attn {name}: of {r['texts']} texts, {r['differ_by_order']} differ when run in the other order, "
              f"{r['differ_warm_vs_empty_cache']} between a warm and an empty cache ({r['seconds']} s)")
    if a.save:
        a.save.write_text(json.dumps({"command": "python benchmarks/flash_history.py " + " ".join(argv or sys.argv[1:]),
                                      "date": time.strftime("%Y-%m-%d"), "config": a.config,
                                      "model": load_config(a.config).llm.model, "arms": arms}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
