"""LoCoMo benchmark for BENCHMARKS.md: evidence recall for every mode, QA F1 on a few conversations.

Builds one conversation at a time (each cached under runs/builds/<config>/<conversation>/ and resumable),
so a run stopped part-way keeps what finished. Steps, each resumable by rerunning the same command:

    # evidence recall, every registered mode, at k and at equal context-token budgets (no answering model)
    python benchmarks/locomo_bench.py recall --conversations conv-30 conv-26 conv-41 conv-42 conv-43 conv-44
    # the message-only baselines (turn-rag, chunk-rag, full-context) need no build and no language model
    python benchmarks/locomo_bench.py baselines --conversations conv-30 conv-26 conv-41 conv-42 conv-43 conv-44
    # QA with every scorer on two conversations
    python benchmarks/locomo_bench.py qa --conversations conv-30 conv-26
    # the recall tables over the listed conversations in one summary (records already there are reused)
    python benchmarks/locomo_bench.py report --conversations conv-30 conv-26
    # runs made side by side with `membox eval locomo --out DIR` (e.g. two processes, --threads 1 each)
    python benchmarks/locomo_bench.py merge runs/recall-full-A runs/recall-full-B
    python benchmarks/locomo_bench.py merge --qa --qa-budget 1000 runs/qa-full-conv-30 runs/qa-full-conv-26
    # keep a finished run's per-question scores (no dataset text) in benchmarks/results/, and summarise every
    # conversation saved there, measured in this session or an earlier one, as one pooled table
    python benchmarks/locomo_bench.py save runs/bench-locomo-recall-cpu
    python benchmarks/locomo_bench.py pooled

Each step is `membox eval locomo` (membox_local.evaluation.locomo.run) with fixed settings.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from membox_local.evaluation.locomo import DEFAULT_DATA, Settings, markdown, run

REPO = Path(__file__).resolve().parent.parent

RECALL_OUT = "runs/bench-locomo-recall-{config}{prefix}"
BASELINES_OUT = "runs/bench-locomo-recall-baselines-{config}"
QA_OUT = "runs/bench-locomo-qa-{config}{prefix}"
RECALL_K = [1, 3, 5, 10]


def _machine() -> str:
    import os

    return f"{platform.machine()} {os.cpu_count()} CPU cores, {platform.system()}"


def _settings(args, out: str, **kw) -> Settings:
    prefix = f"-s{args.sessions}" if args.sessions else ""
    base = dict(data=args.data, config=args.config, conversations=args.conversations, k=RECALL_K,
                sessions=args.sessions, builds=args.builds, threads=args.threads,
                out=out.format(config=args.config, prefix=prefix))
    base.update(kw)
    return Settings(**base)


def recall(args) -> dict:
    summary = None
    for conv in args.conversations:  # one at a time, so finished builds are kept when a later one stops
        t0 = time.time()
        summary = run(_settings(args, RECALL_OUT, conversations=[conv], qa=False))
        print(f"{conv}: recall done in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return report_recall(args) if len(args.conversations) > 1 else summary


def report_recall(args) -> dict:
    return run(_settings(args, RECALL_OUT, qa=False), progress=False)


def baselines(args) -> dict:
    return run(_settings(args, BASELINES_OUT, qa=False, build=False, sessions=0))


def qa(args) -> dict:
    return run(_settings(args, QA_OUT, modes=args.modes or [], qa=True, limit=args.limit, qa_budget=args.qa_budget))


def merge(args) -> dict:
    """One summary over run folders filled side by side (e.g. two processes, each building other conversations
    with --threads 1): their records are copied into the recall (or, with --qa, the QA) folder and summarised.
    Only conversations with records are summarised; their builds are reused, never started here."""
    from membox_local.evaluation.locomo import _read_records

    records: dict = {}
    for folder in args.sources:
        got = _read_records(Path(folder) / "questions.jsonl")
        if not got:
            raise SystemExit(f"{folder}: no questions.jsonl records")
        records.update(got)
    convs = list(dict.fromkeys(key[0] for key in records))
    out = Path((QA_OUT if args.qa else RECALL_OUT).format(config=args.config, prefix=""))
    out.mkdir(parents=True, exist_ok=True)
    have = _read_records(out / "questions.jsonl")
    with open(out / "questions.jsonl", "a", encoding="utf-8") as fh:
        for key, rec in records.items():
            if have.get(key) != rec:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    modes = list(dict.fromkeys(key[1] for key in records))
    args.conversations = convs
    if args.qa:
        return run(_settings(args, QA_OUT, modes=modes, qa=True, k=[10], qa_budget=args.qa_budget), progress=False)
    return run(_settings(args, RECALL_OUT, qa=False), progress=False)


def save(args) -> dict:
    from membox_local.evaluation.results import save_results

    save_results(args.sources, args.results, time.strftime("%Y-%m-%d"))
    return pooled(args)


def pooled(args) -> dict:
    from membox_local.evaluation.results import pooled_summary

    summary = pooled_summary(args.results, args.data, modes=args.modes)
    out = Path(args.results.removesuffix(".gz").removesuffix(".jsonl") + ".md")
    out.write_text(markdown(summary) + "\nSaved on: " + "; ".join(
        f"{c} {', '.join(d)}" for c, d in summary["dates"].items()) + "\n")
    summary["settings"]["out"] = str(Path("runs") / "bench-locomo-pooled")
    Path(summary["settings"]["out"]).mkdir(parents=True, exist_ok=True)
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["recall", "baselines", "qa", "report", "merge", "save", "pooled"])
    p.add_argument("sources", nargs="*", help="merge, save: run folders (membox eval locomo --out ...) to summarise together")
    p.add_argument("--results", default=str(REPO / "benchmarks" / "results" / "locomo-recall-cpu.jsonl.gz"),
                   help="save/pooled: the committed per-question results file")
    p.add_argument("--qa", action="store_true", help="merge: the sources are QA runs (k=10, --qa-budget)")
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--config", default="cpu")
    p.add_argument("--conversations", nargs="+", default=["conv-30", "conv-26"])
    p.add_argument("--modes", nargs="*", help="qa: modes to answer with (default every mode)")
    p.add_argument("--qa-budget", type=int, default=0, help="qa: context budget (default: the config's)")
    p.add_argument("--limit", type=int, default=0, help="qa: questions per conversation (0: all)")
    p.add_argument("--builds", default="runs/builds")
    p.add_argument("--sessions", type=int, default=0, help="recall/qa/report: only the first N sessions of each")
    p.add_argument("--threads", type=int, default=0, help="llama.cpp threads (default: the config's)")
    args = p.parse_intermixed_args(argv)
    summary = {"recall": recall, "baselines": baselines, "qa": qa, "report": report_recall,
               "merge": merge, "save": save, "pooled": pooled}[args.step](args)
    print(f"<!-- machine: {_machine()}; date {time.strftime('%Y-%m-%d')}; command: "
          f"python benchmarks/locomo_bench.py {' '.join(sys.argv[1:] if argv is None else argv)} -->")
    print(markdown(summary))
    Path(summary["settings"]["out"], "bench.json").write_text(json.dumps(
        {"machine": _machine(), "date": time.strftime("%Y-%m-%d"), "argv": sys.argv[1:] if argv is None else argv},
        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
