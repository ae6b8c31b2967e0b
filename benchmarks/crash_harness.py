"""Crash safety, measured: builds killed with SIGKILL at random points, resumed, checked, compared.

A worker process (`python -m membox_local.evaluation.crash worker STORE`) builds the bundled demo
conversation (40 messages, 3 sessions) and a shorter second one (26 messages, 2 sessions), session by session,
batched, with the deterministic doubles (membox_local/testing.py) and the CPU config (the hybrid judge), each
model call, embedding batch, commit and index save announced on stdout and slowed by a small delay. The harness
kills it `--kills` times in all (at most `--max-kills-per-run` per build), at seeded random moments or aimed at a
phase (ingest, judging, extraction, weaving, a commit, an index save: the n-th marker of that phase, then a short
random delay), runs it again until it finishes, and after every exit checks a copy of the folder
(`membox_local.evaluation.integrity.check_store`: SQLite integrity, every message stored once and in order,
boxes contiguous, statuses, events, traces, the box index after Memory.sync()). Each finished build is compared
with an uninterrupted one (`memory_digest`: messages, boxes, events, traces, meta, embedding cache; ids as
positions inside each conversation).

    .venv/bin/python benchmarks/crash_harness.py [--kills 50] [--seed 0] [--call-ms 20] [--workdir runs/crash]

Writes benchmarks/results/crash-harness.json (--out) and prints a Markdown table. Exit status 1 when a message
was lost or doubled, a check failed, or a finished build differs from the uninterrupted one.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
from datetime import date
from pathlib import Path

from membox_local.evaluation.crash import run_campaign

REPO = Path(__file__).resolve().parent.parent


def markdown(report: dict) -> str:
    lines = ["| run | kills | launches | checks | lost | doubled | inconsistent | final equal | extra LLM calls |",
             "|---:|---:|---:|---:|---:|---:|---:|:---:|---:|"]
    for r in report["per_run"]:
        lines.append(f"| {r['run']} | {len(r['kills'])} | {r['launches']} | {r['checks']} | {r['lost']} | "
                     f"{r['doubled']} | {r['inconsistent']} | {'yes' if r['final_equal'] else 'no'} | "
                     f"{r['extra_llm_calls']} |")
    lines.append(f"| **all** | **{report['kills']}** | {sum(r['launches'] for r in report['per_run'])} | "
                 f"{report['checks']} | **{report['lost']}** | **{report['doubled']}** | **{report['inconsistent']}** | "
                 f"**{report['final_equal']}/{report['runs']}** | "
                 f"{sum(r['extra_llm_calls'] for r in report['per_run'])} |")
    lines += ["", "| kills aimed at | n |", "|---|---:|"]
    lines += [f"| {k} | {n} |" for k, n in report["kills_by_target"].items()]
    lines += ["", "| last phase announced before the kill | n |", "|---|---:|"]
    lines += [f"| {k} | {n} |" for k, n in report["kills_by_landed_phase"].items()]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--call-ms", type=float, default=20.0, help="the worker's delay per model call (embedding "
                   "batches half, commits a quarter, index-save steps the whole)")
    p.add_argument("--conversations", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--max-kills-per-run", type=int, default=5)
    p.add_argument("--workdir", default=str(REPO / "runs" / "crash"), help="the memory folders and worker logs")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "crash-harness.json"))
    p.add_argument("--note", default="", help="a word on the machine (load, other jobs) for the report")
    a = p.parse_args()

    report = run_campaign(a.workdir, kills=a.kills, seed=a.seed, call_ms=a.call_ms, conversations=a.conversations,
                          batch_size=a.batch_size, max_kills_per_run=a.max_kills_per_run,
                          log=lambda line: print(line, file=sys.stderr, flush=True))
    report = {"date": date.today().isoformat(),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
                         + (f"; {a.note}" if a.note else ""),
              "command": "python " + shlex.join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
              "target": "0 lost, 0 doubled, 0 inconsistent, every finished build equal to the uninterrupted one",
              **report}
    ok = report["lost"] == report["doubled"] == report["inconsistent"] == report["worker_failures"] == 0 \
        and report["final_equal"] == report["runs"]
    report["passed"] = ok
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    print(f"\n{report['kills']} kills over {report['runs']} builds in {report['wall_s']} s: "
          f"{'PASS' if ok else 'FAIL'} (written to {a.out})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
