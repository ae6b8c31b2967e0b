"""Seconds per answer, cold (`membox ask`, a new process per question) and warm (`membox serve`, POST /answer),
p50 and p90 at two or more context budgets side by side on the same questions (membox_local/evaluation/latency.py).

    python benchmarks/answer_latency.py --store runs/builds-boxes/cpu-ce/conv-26 --data ../shared/data/locomo-dev.json \
        --conversation conv-26 --questions 10 --budgets 500 1000 --save benchmarks/results/answer-latency.json
    python benchmarks/answer_latency.py --store /tmp/lat-demo --questions-file QUESTIONS.jsonl --questions 2 \
        --budgets 200 400

The store is an existing memory folder (a boxes-only LoCoMo build: `membox eval locomo --config cpu-ce --boxes-only
--no-qa --conversations conv-26 --builds runs/builds-boxes`). Questions: `--questions` of the conversation's
category 1-4 LoCoMo questions, spread evenly with a fixed stride, or of a JSON-lines `--questions-file` of
{"question", "conversation_id"}; only their indices and categories are printed or saved, never their text or the
answers'. The phases alternate cold and warm by budget in one run. Run it alone on the machine: the figures mean
something only when it is otherwise idle (each phase's 1-minute load before and after is in the table and the file).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from membox_local.argtypes import count
from membox_local.evaluation.latency import file_questions, locomo_questions, machine, measure, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, required=True, help="an existing memory folder")
    ap.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"),
                    help="LoCoMo .json the questions come from (default ../shared/data/locomo-dev.json)")
    ap.add_argument("--conversation", default="conv-26", help="the LoCoMo conversation (default conv-26); with "
                    "--questions-file, the conversation of lines that name none")
    ap.add_argument("--questions-file", type=Path, help="JSON lines of {\"question\", \"conversation_id\"} instead of "
                    "LoCoMo (for other memories, e.g. the demo)")
    ap.add_argument("--questions", type=count(1), default=10, help="questions timed per budget and mode (default 10)")
    ap.add_argument("--budgets", type=count(50, 32000), nargs="+", default=[500, 1000],
                    help="context token budgets, side by side (default 500 1000)")
    ap.add_argument("--config", help="config for both ways of asking (default: the one stored in the memory)")
    ap.add_argument("--timeout-s", type=count(1), default=1800, help="one answer's limit in seconds (default 1800)")
    ap.add_argument("--save", type=Path, help="write the results here (JSON; no question or answer text)")
    args = ap.parse_args(argv)
    if not (args.store / "memory.db").exists():
        ap.error(f"--store {args.store}: no memory there (memory.db)")
    if args.questions_file:
        questions = file_questions(args.questions_file, args.questions, args.conversation)
        source = {"questions_file": str(args.questions_file)}
    else:
        questions = locomo_questions(args.data, args.conversation, args.questions)
        source = {"data": str(args.data), "conversation": args.conversation}
    say = lambda line: print(f"latency: {line}", file=sys.stderr, flush=True)  # noqa: E731
    result = measure(args.store, questions, args.budgets, config=args.config, timeout_s=args.timeout_s, say=say)
    print(table(result))
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        record = {"command": "python benchmarks/answer_latency.py " + " ".join(argv or sys.argv[1:]),
                  "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine()} | source | result
        args.save.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
