"""EventWeave beside Membox on the same LoCoMo dev questions (issue 23), from saved results only: evidence recall at
each budget, QA at 1000 tokens against box-hits answered by the same model, and the build cost per message of each
system. Nothing is built, retrieved or answered here; the files come from:

    # the builds, recall of every mode on them (no answering model), then saved (ids and scores only)
    membox eval locomo --config eventweave --conversations conv-26 conv-30 --boxes-only --no-qa \\
        --modes event-graph event-graph-boxes box-hits chunk-rag turn-rag --k 1 3 5 10 \\
        --builds runs/builds-boxes --out runs/ew-recall
    python benchmarks/locomo_bench.py save runs/ew-recall --results benchmarks/results/eventweave-recall.jsonl.gz
    # event-graph answers (k 10, 1000 tokens), the answering model of benchmarks/answer_models.py's box-hits runs
    membox eval locomo --config eventweave --conversations conv-26 conv-30 --boxes-only --modes event-graph \\
        --k 10 --budgets 1000 --qa-k 10 --qa-budget 1000 --builds runs/builds-boxes --out runs/ew-qa
    python benchmarks/locomo_bench.py save runs/ew-qa --results benchmarks/results/eventweave-qa.jsonl.gz
    python benchmarks/eventweave_report.py

compact (it needs LLM records; the boxes-only builds have none) comes from the LLM builds of
benchmarks/results/locomo-recall-cpu.jsonl.gz on the same questions; box-hits' answers from
benchmarks/results/answer-models.jsonl.gz (the same boxes, the same answering model).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from membox_local.evaluation.locomo import DEFAULT_DATA

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
SCORERS = ("locomo_f1", "mem0_f1", "mem0_bleu1", "membox_f1")


def recall_table(recall_file: Path, compact_file: Path, data: str, modes: list[str], budgets: list[int]) -> list[str]:
    from membox_local.evaluation.results import pooled_summary

    s = pooled_summary(recall_file, data, modes=modes)
    convs = s["settings"]["conversations"]
    rows = [(m, s["modes"][m]) for m in modes if m in s["modes"]]
    if compact_file.exists():
        c = pooled_summary(compact_file, data, modes=["compact"], conversations=convs)
        rows.append(("compact (LLM builds of locomo-recall-cpu)", c["modes"]["compact"]))
    lines = ["| mode | questions | " + " | ".join(f"{b} tokens" for b in budgets) + " |",
             "|---" * (2 + len(budgets)) + "|"]
    for name, m in rows:
        cells = [f"{100 * m['recall'][f'budget={b}']:.1f}" for b in budgets]
        lines.append(f"| {name} | {m['questions_with_evidence']} | " + " | ".join(cells) + " |")
    return lines


def qa_table(qa_file: Path, answers_file: Path, answerer: str) -> list[str]:
    """event-graph's answers beside box-hits' by `answerer` on the questions both answered: overall and temporal."""
    from membox_local.evaluation.locomo import _read_records

    eg = {(k[0], k[2]): r for k, r in _read_records(qa_file).items() if k[1] == "event-graph" and r.get("scores")}
    bh = {(k[0], k[2]): r for k, r in _read_records(answers_file).items()
          if k[1] == "box-hits" and k[3] == answerer and r.get("scores")}
    common = sorted(set(eg) & set(bh))
    lines = ["| mode | questions | locomo F1 | mem0 F1 | mem0 BLEU-1 | membox F1 | temporal (cat. 2): n, locomo F1 "
             "| s per answer |", "|---|---|---|---|---|---|---|---|"]
    for name, recs in (("box-hits", bh), ("event-graph", eg)):
        got = [recs[q] for q in common]
        temporal = [r for r in got if r["category"] == 2]
        mean = lambda rs, k: 100 * sum(r["scores"][k] for r in rs) / max(len(rs), 1)  # noqa: E731
        secs = [r["answer_s"] for r in got if r.get("answer_s") is not None]
        lines.append(f"| {name} | {len(got)} | " + " | ".join(f"{mean(got, k):.1f}" for k in SCORERS) +
                     f" | {len(temporal)}, {mean(temporal, 'locomo_f1'):.1f} | "
                     f"{sum(secs) / max(len(secs), 1):.1f} |")
    return lines


def cost_table(ew_meta: dict, membox_meta: dict, convs: list[str]) -> list[str]:
    """LLM calls, tokens and seconds per message of each system's own stages, over the same conversations."""
    lines = ["| system (build model) | messages | LLM calls per message | prompt / completion tokens per message "
             "| s per message |", "|---|---|---|---|---|"]
    for name, meta, stages in (
            ("Membox: extract, link, trace-init (Qwen2.5-Coder-0.5B; LLM builds of locomo-recall-cpu)", membox_meta,
             ("extract", "link", "trace-init")),
            ("EventWeave: ew-extract, ew-summary (Qwen2.5-Coder-1.5B)", ew_meta, ("ew-extract", "ew-summary"))):
        builds = [meta["builds"][c] for c in convs if c in meta.get("builds", {})]
        n = sum(b["utterances"] for b in builds)
        if not n:
            continue
        use = lambda k: sum(b["by_stage"].get(s, {}).get(k, 0) for b in builds for s in stages)  # noqa: E731
        timed = [b for b in builds if b.get("time_by_stage")]
        if timed:
            wall = sum(b["time_by_stage"].get(s, {}).get("wall_s", 0) for b in timed for s in stages)
            secs = f"{wall / sum(b['utterances'] for b in timed):.2f}"
        else:  # builds saved before the stages were timed: the whole build's wall time (judge included)
            secs = f"{sum(b['build_wall_s'] for b in builds) / n:.2f} (whole build)"
        lines.append(f"| {name} | {n} | {use('calls') / n:.3f} | {use('prompt_tokens') / n:.1f} / "
                     f"{use('completion_tokens') / n:.1f} | {secs} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    import json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="a LoCoMo-format .json file")
    ap.add_argument("--recall", default=str(RESULTS / "eventweave-recall.jsonl.gz"))
    ap.add_argument("--compact", default=str(RESULTS / "locomo-recall-cpu.jsonl.gz"))
    ap.add_argument("--qa", default=str(RESULTS / "eventweave-qa.jsonl.gz"))
    ap.add_argument("--answers", default=str(RESULTS / "answer-models.jsonl.gz"))
    ap.add_argument("--answerer", default="qwen2.5-coder-1.5b", help="box-hits' answering model to compare with")
    ap.add_argument("--modes", nargs="+", default=["event-graph", "event-graph-boxes", "box-hits", "chunk-rag",
                                                   "turn-rag"])
    ap.add_argument("--budgets", nargs="+", type=int, default=[250, 500, 1000, 2000])
    a = ap.parse_args(argv)
    recall_file = Path(a.recall)
    print("\n".join(recall_table(recall_file, Path(a.compact), a.data, a.modes, a.budgets)))
    if Path(a.qa).exists():
        print()
        print("\n".join(qa_table(Path(a.qa), Path(a.answers), a.answerer)))
    def meta_of(p: Path) -> dict:
        p = p.with_name(p.name.removesuffix(".gz").removesuffix(".jsonl") + ".json")
        return json.loads(p.read_text()) if p.exists() else {}

    ew_meta = meta_of(recall_file)
    print()
    print("\n".join(cost_table(ew_meta, meta_of(Path(a.compact)), sorted(ew_meta.get("builds", {})))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
