"""What the answering model does with the evidence in hand: LongMemEval's oracle setting on the dev slice (issue 37).

    python benchmarks/longmemeval_oracle.py --modes box-hits                  # QA, every dev question
    python benchmarks/longmemeval_oracle.py --modes box-hits --stride 4      # a sample; any `eval longmemeval` option

The paper's oracle file keeps of each history only its evidence sessions (`answer_session_ids`; 1-5 per question on
the dev slice, 1.8 on average). This script derives that file from the S file (`--data`, the dev slice by default)
into runs/ (the data stays out of the repository), then runs `membox eval longmemeval` on it with its builds and
run folder in runs/ (`--builds runs/builds-lme-oracle --out runs/lme-oracle` unless given). With retrieval left
almost nothing to miss, the judged accuracy is about the most the answering model gets from any retrieval mode at
that budget: if it is under turn-rag's accuracy on the full histories plus 10 points, no retrieval mode can reach
"QA 10 points above turn-rag" with that model (docs/longmemeval.md).
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from membox_local.cli import main as membox
from membox_local.evaluation import longmemeval as lme
from membox_local.ingest import InputError

ORACLE = Path("runs/longmemeval_oracle_dev.json.gz")


def oracle(records: list[dict]) -> list[dict]:
    """Each record with only its evidence sessions (ids, dates and turns kept in step), as the paper's oracle file."""
    out = []
    for rec in records:
        gold = set(rec["answer_session_ids"])
        keep = [i for i, sid in enumerate(rec["haystack_session_ids"]) if sid in gold]
        out.append({**rec, **{k: [rec[k][i] for i in keep]
                              for k in ("haystack_session_ids", "haystack_dates", "haystack_sessions")}})
    return out


def option(argv: list[str], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else default


def main(argv: list[str]) -> int:
    source = option(argv, "--data", str(lme.DEFAULT_DATA))
    rest = [a for i, a in enumerate(argv) if a != "--data" and (i == 0 or argv[i - 1] != "--data")]
    try:
        records = oracle(lme.read_file(source))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ORACLE.parent.mkdir(parents=True, exist_ok=True)
    part = ORACLE.with_suffix(".part")
    with gzip.open(part, "wt", encoding="utf-8") as fh:
        json.dump(records, fh)
    part.replace(ORACLE)  # whole or not at all
    defaults = [*([] if "--builds" in rest else ["--builds", "runs/builds-lme-oracle"]),
                *([] if "--out" in rest else ["--out", "runs/lme-oracle"])]
    return membox(["eval", "longmemeval", "--data", str(ORACLE), *defaults, *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
