"""How a memory's costs grow with its size: one conversation scope grown through 1k, 10k, 50k and 100k messages, or a
folder of many (membox_local/evaluation/scale.py says what is measured and how). Run it alone: every figure is a time.

    python benchmarks/scale.py --sizes 1000 10000 50000 100000 --questions 20 \
        --save benchmarks/results/scale.json
    python benchmarks/scale.py --conversations 20 --save benchmarks/results/scale-20-conversations.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from membox_local.argtypes import count
from membox_local.evaluation.scale import run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=count(100), nargs="+", default=[1000, 10000, 50000, 100000])
    ap.add_argument("--questions", type=count(2), default=20, help="LoCoMo dev questions asked at each size")
    ap.add_argument("--conversations", type=count(1), default=1, help="conversations the messages go to in turn, a "
                                                                      "session each (the questions ask the first)")
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--folder", type=Path, default=Path("runs/scale"))
    ap.add_argument("--save", type=Path)
    a = ap.parse_args(argv)
    report = {"command": "python benchmarks/scale.py " + " ".join(argv or sys.argv[1:]),
              **run(a.data, a.folder, a.sizes, a.questions, log=lambda s: print(s, flush=True), conversations=a.conversations)}
    if a.save:
        a.save.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
