"""The LongMemEval tables of BENCHMARKS.md and docs/longmemeval.md, from saved runs.

    python benchmarks/longmemeval_report.py save runs/lme-retrieval --as longmemeval-retrieval   # keep a run
    python benchmarks/longmemeval_report.py show longmemeval-retrieval                            # its tables
    python benchmarks/longmemeval_report.py compare longmemeval-qa-dev98 box-hits turn-rag        # where A shows more
    python benchmarks/longmemeval_report.py versus longmemeval-retrieval-dev-s4 longmemeval-retrieval-dev  # two runs

`save` copies a run's summary (benchmarks/results/NAME.json) and its per-question records, gzipped
(benchmarks/results/NAME.jsonl.gz: ids, types, metrics and the model's replies; no text of the dataset's
histories); `show` prints the Markdown tables (membox_local.evaluation.longmemeval.markdown) from the saved summary;
`compare` splits the answerable questions by whether mode A's context held more of the evidence turns than mode B's
(recall at the budget) and counts each mode's answers judged right in each part: does more evidence give more right
answers?; `versus` sets two saved runs side by side on the answerable questions both hold (e.g. the boxes of two
judges), per mode: mean recall figures and how many questions' evidence recall at 1000 tokens differs.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

from membox_local.evaluation.longmemeval import markdown
from membox_local.evaluation.paired import compare, versus

RESULTS = Path(__file__).resolve().parent / "results"


def _saved_records(name: str) -> list[dict]:
    with gzip.open(RESULTS / f"{name}.jsonl.gz", "rt") as fh:
        return [json.loads(line) for line in fh]


def _table(rows: list[dict], cell=lambda key, value: str(value)) -> str:
    """Rows of one shape as a Markdown table, their keys the header."""
    cols = list(rows[0])
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                     + ["| " + " | ".join(cell(k, r[k]) for k in cols) + " |" for r in rows])


def _compare_cell(key: str, value) -> str:
    """compare's cells: recall as a percentage, answers judged right as a count."""
    if isinstance(value, float):
        return f"{100 * value:.1f}" if key.endswith("recall") else f"{value:.0f}"
    return str(value)


def _compare_table(rows: list[dict]) -> str:
    return _table(rows, _compare_cell)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="keep a run's summary and records under benchmarks/results/")
    s.add_argument("run", help="a run folder of `membox eval longmemeval` (--out)")
    s.add_argument("--as", dest="name", required=True, help="the saved files' name, without extension")
    v = sub.add_parser("show", help="print a saved run's tables")
    v.add_argument("name")
    c = sub.add_parser("compare", help="judged right by two modes, split by which context held more evidence")
    c.add_argument("name")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--budget", type=int, default=1000, help="the context-token budget whose recall splits (1000)")
    w = sub.add_parser("versus", help="two saved runs side by side on the questions both hold")
    w.add_argument("new")
    w.add_argument("old")
    w.add_argument("--modes", nargs="+", default=["box-hits", "turn-rag"])
    args = p.parse_args(argv)
    if args.cmd == "save":
        run = Path(args.run)
        shutil.copyfile(run / "summary.json", RESULTS / f"{args.name}.json")
        with open(run / "records.jsonl", "rb") as src, gzip.open(RESULTS / f"{args.name}.jsonl.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        print(f"saved {RESULTS / args.name}.json and .jsonl.gz")
        return 0
    if args.cmd == "compare":
        print(_compare_table(compare(_saved_records(args.name), args.a, args.b, args.budget)))
        return 0
    if args.cmd == "versus":
        print(_table(versus(_saved_records(args.new), _saved_records(args.old), args.modes)))
        return 0
    print(markdown(json.loads((RESULTS / f"{args.name}.json").read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
