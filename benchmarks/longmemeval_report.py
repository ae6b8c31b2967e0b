"""The LongMemEval tables of BENCHMARKS.md and docs/longmemeval.md, from saved runs.

    python benchmarks/longmemeval_report.py save runs/lme-retrieval --as longmemeval-retrieval   # keep a run
    python benchmarks/longmemeval_report.py show longmemeval-retrieval                            # its tables

`save` copies a run's summary (benchmarks/results/NAME.json) and its per-question records, gzipped
(benchmarks/results/NAME.jsonl.gz: ids, types, metrics and the model's replies; no text of the dataset's
histories); `show` prints the Markdown tables (membox_local.evaluation.longmemeval.markdown) from the saved summary.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

from membox_local.evaluation.longmemeval import markdown

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="keep a run's summary and records under benchmarks/results/")
    s.add_argument("run", help="a run folder of `membox eval longmemeval` (--out)")
    s.add_argument("--as", dest="name", required=True, help="the saved files' name, without extension")
    v = sub.add_parser("show", help="print a saved run's tables")
    v.add_argument("name")
    args = p.parse_args(argv)
    if args.cmd == "save":
        run = Path(args.run)
        shutil.copyfile(run / "summary.json", RESULTS / f"{args.name}.json")
        with open(run / "records.jsonl", "rb") as src, gzip.open(RESULTS / f"{args.name}.jsonl.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        print(f"saved {RESULTS / args.name}.json and .jsonl.gz")
        return 0
    print(markdown(json.loads((RESULTS / f"{args.name}.json").read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
