"""What the answering model does with the evidence in hand: LongMemEval's oracle setting on the dev slice (issue 37).

    python benchmarks/longmemeval_oracle.py --modes box-hits                  # QA, every dev question
    python benchmarks/longmemeval_oracle.py --modes box-hits --stride 4      # a sample; any `eval longmemeval` option

The paper's oracle file keeps of each history only its evidence sessions (`answer_session_ids`; 1-5 per question on
the dev slice, 1.8 on average). This script derives that file from the S file (`--data`, the dev slice by default)
into runs/ (longmemeval_oracle_dev.json.gz; the data stays out of the repository), then runs `membox eval
longmemeval` on it with its builds and run folder in runs/ (`--builds runs/builds-lme-oracle --out runs/lme-oracle`
unless given). With retrieval left almost nothing to miss, the judged accuracy is about the most the answering model
gets from any retrieval mode at that budget: if it is under turn-rag's accuracy on the full histories plus 10
points, no retrieval mode can reach "QA 10 points above turn-rag" with that model (docs/longmemeval.md).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from membox_local.cli import main as membox
from membox_local.evaluation import longmemeval as lme
from membox_local.ingest import InputError


def oracle_path(source: str) -> Path:
    """Where the oracle file of `source` goes, in runs/ (the data stays out of the repository): named as the
    released oracle file (longmemeval_s_dev -> longmemeval_oracle_dev), else oracle-<its name>."""
    name = Path(source).name.removesuffix(".gz").removesuffix(".json")
    released = name.startswith("longmemeval_s")
    name = name.replace("longmemeval_s", "longmemeval_oracle", 1) if released else f"oracle-{name}"
    return Path("runs") / f"{name}.json.gz"


def oracle(records: list[dict]) -> list[dict]:
    """Each record with only its evidence sessions (ids, dates and turns kept in step), as the paper's oracle file."""
    out = []
    for rec in records:
        gold = set(rec["answer_session_ids"])
        keep = [i for i, sid in enumerate(rec["haystack_session_ids"]) if sid in gold]
        out.append({**rec, **{k: [rec[k][i] for i in keep]
                              for k in ("haystack_session_ids", "haystack_dates", "haystack_sessions")}})
    return out


def stats(records: list[dict]) -> str:
    """One line on an oracle file: evidence sessions per question (least, most, mean) and the median history's words."""
    n = sorted(len(r["haystack_sessions"]) for r in records)
    words = sorted(sum(len(t["content"].split()) for s in r["haystack_sessions"] for t in s) for r in records)
    mid = len(words) // 2
    median = words[mid] if len(words) % 2 else (words[mid - 1] + words[mid]) / 2
    return (f"oracle: {len(records)} questions, {n[0]}-{n[-1]} evidence sessions each ({sum(n) / len(n):.1f} on "
            f"average), a median of {median:,.0f} words per history")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    ap.add_argument("--data", default=str(lme.DEFAULT_DATA), help="a LongMemEval S file (the dev slice by default)")
    a, rest = ap.parse_known_args(argv)  # the rest is `membox eval longmemeval`'s
    try:
        records = oracle(lme.read_file(a.data))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(stats(records), file=sys.stderr)
    path = oracle_path(a.data)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    with gzip.open(part, "wt", encoding="utf-8") as fh:
        json.dump(records, fh)
    part.replace(path)  # whole or not at all
    defaults = [*([] if "--builds" in rest else ["--builds", "runs/builds-lme-oracle"]),
                *([] if "--out" in rest else ["--out", "runs/lme-oracle"])]
    return membox(["eval", "longmemeval", "--data", str(path), *defaults, *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
