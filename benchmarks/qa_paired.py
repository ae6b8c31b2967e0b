"""LoCoMo QA of several runs compared on the questions every one of them answered: each (mode, answering budget)
an arm, scored on the same questions (membox_local/evaluation/paired.py).

    python benchmarks/qa_paired.py runs/qa-500-conv-30 runs/qa-1000-conv-30 runs/qa-500-conv-26 runs/qa-1000-conv-26 \
        --save benchmarks/results/locomo-qa-budgets.json
    python benchmarks/qa_paired.py runs/qa-new --saved benchmarks/results/locomo-qa-233.json  # against a saved arm

The table: per arm the questions, the LoCoMo F1, mem0's F1 and BLEU-1, evidence recall in the context, context
tokens and seconds per answer (means); then each pair of arms' LoCoMo F1 difference, question by question, with its
standard error, and how many answers the two give word for word. The saved JSON holds no question, answer or
context text.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from membox_local.evaluation.paired import arms, differences, paired, per_question, saved_arms, table_lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, nargs="+", help="run folders of `membox eval locomo --out`")
    p.add_argument("--save", type=Path)
    p.add_argument("--saved", type=Path, nargs="*", default=[],
                   help="results saved by --save before: their arms join, paired by their per-question scores")
    a = p.parse_args(argv)
    by_arm = arms(a.runs)
    for path in a.saved:
        by_arm.update(saved_arms(path))
    common, table = paired(by_arm)
    print(f"{len(common)} questions answered by every arm")
    print("\n".join(table_lines(table)))
    diffs = differences(by_arm, common)
    for pair, d in diffs.items():
        print(f"{pair}: {d['mean']:+} F1, standard error {d['se']}; the same answer to {d['same_answers']} of "
              f"{len(common)}")
    if a.save:
        per_q = per_question(by_arm, common)
        a.save.write_text(json.dumps({"command": "python benchmarks/qa_paired.py " + " ".join(argv or sys.argv[1:]),
                                      "date": time.strftime("%Y-%m-%d"), "arms": table, "differences": diffs,
                                      "per_question": per_q},
                                     indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
