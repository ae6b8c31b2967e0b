"""The LongMemEval tables of BENCHMARKS.md and docs/longmemeval.md, from saved runs.

    python benchmarks/longmemeval_report.py save runs/lme-retrieval --as longmemeval-retrieval   # keep a run
    python benchmarks/longmemeval_report.py show longmemeval-retrieval                            # its tables
    python benchmarks/longmemeval_report.py compare longmemeval-qa-dev98 box-hits turn-rag        # where A shows more

`save` copies a run's summary (benchmarks/results/NAME.json) and its per-question records, gzipped
(benchmarks/results/NAME.jsonl.gz: ids, types, metrics and the model's replies; no text of the dataset's
histories); `show` prints the Markdown tables (membox_local.evaluation.longmemeval.markdown) from the saved summary;
`compare` splits the answerable questions by whether mode A's context held more of the evidence turns than mode B's
(recall at the budget) and counts each mode's answers judged right in each part: does more evidence give more right
answers?
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

from membox_local.evaluation.longmemeval import markdown

RESULTS = Path(__file__).resolve().parent / "results"


def compare(records: list[dict], a: str, b: str, budget: int = 1000) -> list[dict]:
    """Rows (part, questions, judged right with a, with b, a's and b's mean recall) over the answerable questions both
    modes answered: where a's context held more of the evidence turns than b's, as much, less."""
    key = f"recall@{budget}"
    by_qid: dict[str, dict[str, dict]] = {}
    for r in records:
        if not r.get("abstention") and key in r and r.get("judge") is not None:
            by_qid.setdefault(r["qid"], {})[r["mode"]] = r
    parts: dict[str, list[tuple[dict, dict]]] = {f"{a} more": [], "as much": [], f"{b} more": []}
    for modes in by_qid.values():
        if a in modes and b in modes:
            ra, rb = modes[a][key], modes[b][key]
            parts[f"{a} more" if ra > rb else f"{b} more" if rb > ra else "as much"].append((modes[a], modes[b]))
    rows = []
    for part, pairs in parts.items():
        n = len(pairs)
        rows.append({"part": part, "questions": n, f"{a} right": sum(x["judge"] for x, _ in pairs),
                     f"{b} right": sum(y["judge"] for _, y in pairs),
                     f"{a} recall": sum(x[key] for x, _ in pairs) / n if n else 0.0,
                     f"{b} recall": sum(y[key] for _, y in pairs) / n if n else 0.0})
    return rows


def _compare_table(rows: list[dict]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{v:.0f}" if isinstance(v, float) and not k.endswith("recall") else
                                       f"{100 * v:.1f}" if isinstance(v, float) else str(v) for k, v in r.items()) + " |")
    return "\n".join(lines)


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
    args = p.parse_args(argv)
    if args.cmd == "save":
        run = Path(args.run)
        shutil.copyfile(run / "summary.json", RESULTS / f"{args.name}.json")
        with open(run / "records.jsonl", "rb") as src, gzip.open(RESULTS / f"{args.name}.jsonl.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        print(f"saved {RESULTS / args.name}.json and .jsonl.gz")
        return 0
    if args.cmd == "compare":
        with gzip.open(RESULTS / f"{args.name}.jsonl.gz", "rt") as fh:
            records = [json.loads(line) for line in fh]
        print(_compare_table(compare(records, args.a, args.b, args.budget)))
        return 0
    print(markdown(json.loads((RESULTS / f"{args.name}.json").read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
