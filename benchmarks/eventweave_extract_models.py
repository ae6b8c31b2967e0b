"""Which model writes the event graph's items (issue 23; `[eventweave] llm`): each model extracts the same LoCoMo
turn pairs with the EventWeave prompt and schema, side by side in one run, and each item goes through the same
keep rule as a build (systems/eventweave.py `unkept`): items kept, items not kept by reason (copied turns,
questions, loops, swapped people, ungrounded), pairs with no item, seconds per pair.

    python benchmarks/eventweave_extract_models.py --conversation conv-26 --turns 24 \\
        --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b --save benchmarks/results/eventweave-extract-models.json

The turns are blocks of consecutive turns (each with the turn before it, as a build pairs them) spread over the
conversation. The saved file holds counts, token usage and message ids only, no text. With `--longmemeval FILE
--conversation QUESTION_ID` the pairs come from that question's user-and-assistant history instead (what an event
graph of a LongMemEval history would cost: docs/longmemeval.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import sys
import time
from pathlib import Path

from membox_local.evaluation.locomo import DEFAULT_DATA


def pick(messages: list, turns: int, block: int) -> list[int]:
    """Indices of `turns` messages: blocks of `block` consecutive ones spread evenly over the conversation."""
    blocks = max(1, turns // block)
    starts = [int(i * (len(messages) - block) / max(blocks - 1, 1)) for i in range(blocks)]
    return [s + j for s in starts for j in range(block) if s + j < len(messages)][:turns]


def history(path: str, qid: str) -> list:
    """The messages of LongMemEval question `qid`'s history (roles user and assistant, each session dated)."""
    from membox_local.evaluation.longmemeval import read_file, to_question
    from membox_local.ingest import InputError

    found = [to_question(r) for r in read_file(path) if r.get("question_id") == qid]
    if not found:
        raise InputError(f"--conversation {qid}: no such question in {path}")
    return found[0].messages


def main(argv: list[str] | None = None, make=None) -> int:
    """`make(llm)`: a backend for an LLMConfig (tests pass doubles)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="a LoCoMo-format .json file")
    ap.add_argument("--conversation", default="conv-26", help="the conversation whose turns are extracted (with "
                    "--longmemeval: a question id)")
    ap.add_argument("--longmemeval", metavar="FILE", help="a LongMemEval file: --conversation names a question, "
                    "whose history is read")
    ap.add_argument("--config", default="eventweave", help="the config whose [eventweave] bounds are used")
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    ap.add_argument("--turns", type=int, default=24, help="turn pairs extracted by each model")
    ap.add_argument("--block", type=int, default=12, help="consecutive turns per block")
    ap.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0: the config's)")
    ap.add_argument("--save", help="write the counts here (JSON)")
    a = ap.parse_args(argv)

    from membox_local.backends import make_backend
    from membox_local.backends.base import JsonRequest
    from membox_local.config import load_config
    from membox_local.ingest import InputError, load_locomo
    from membox_local.prompts import turn_events_prompt, turn_events_schema
    from membox_local.systems.eventweave import unkept

    make = make or make_backend
    cfg = load_config(a.config)
    ec = cfg.eventweave
    try:
        msgs = history(a.longmemeval, a.conversation) if a.longmemeval else load_locomo(a.data, [a.conversation])
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    chosen = pick(msgs, a.turns, a.block)
    schema = turn_events_schema(ec.max_events, ec.max_event_chars, ec.max_when_chars)
    rows, per_pair = [], []
    for model in a.models:
        llm = dataclasses.replace(cfg.llm, model=model, **({"n_threads": a.threads} if a.threads else {}))
        backend = make(llm)
        kept = failed = empty = prompt_tokens = completion_tokens = 0
        dropped: dict[str, int] = {}
        t0 = time.time()
        try:
            for i in chosen:
                m = msgs[i]
                prev = msgs[i - 1] if i and msgs[i - 1].session == m.session else None
                res = backend.json([JsonRequest(turn_events_prompt(prev, m), schema, "ew-extract",
                                                max_tokens=ec.max_tokens)])[0]
                usage = getattr(res, "usage", None)  # a refused output was generated too: its tokens count
                if usage is not None:
                    prompt_tokens += usage.prompt_tokens
                    completion_tokens += usage.completion_tokens
                if isinstance(res, BaseException):
                    failed += 1
                    per_pair.append({"model": model, "message_id": m.message_id, "failed": True})
                    continue
                why = [unkept(" ".join(str(e.get("text", "")).split()), prev, m, ec.min_grounding)
                       for e in res.data.get("events", []) if str(e.get("text", "")).strip()]
                empty += not why
                kept += why.count("")
                for w in filter(None, why):
                    dropped[w] = dropped.get(w, 0) + 1
                per_pair.append({"model": model, "message_id": m.message_id, "items": len(why),
                                 "kept": why.count(""), "dropped": [w for w in why if w]})
        finally:
            backend.close()
        items = kept + sum(dropped.values())
        rows.append({"model": model, "pairs": len(chosen), "failed": failed, "no_item": empty, "items": items,
                     "kept": kept, "kept_share": round(kept / items, 3) if items else None,
                     "dropped": dict(sorted(dropped.items())), "s_per_pair": round((time.time() - t0) / len(chosen), 2),
                     "prompt_tokens_per_pair": round(prompt_tokens / len(chosen), 1),
                     "completion_tokens_per_pair": round(completion_tokens / len(chosen), 1)})
    lines = ["| model | pairs | no item | items | kept | swapped people | copied / question / loop | ungrounded | "
             "prompt / completion tokens per pair | s per pair |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r["dropped"]
        lines.append(f"| {r['model']} | {r['pairs']} | {r['no_item']} | {r['items']} | {r['kept']} | "
                     f"{d.get('about another person', 0)} | {d.get('copied turn', 0)} / {d.get('question', 0)} / "
                     f"{d.get('repetition', 0)} | {d.get('not grounded', 0)} | "
                     f"{r['prompt_tokens_per_pair']} / {r['completion_tokens_per_pair']} | {r['s_per_pair']} |")
    print("\n".join(lines))
    if a.save:
        Path(a.save).write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {platform.node()}",
            "conversation": a.conversation, "data": a.longmemeval or a.data, "config": a.config, "rows": rows,
            "table": lines, "pairs": per_pair,
            "command": "python benchmarks/eventweave_extract_models.py " +
                       " ".join(argv if argv is not None else sys.argv[1:]),
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
