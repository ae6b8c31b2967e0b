"""Box-hits' lexical stage (`[retrieve] lexical_weight`, retrieval/lexical.py): how its weight was chosen, the
ablations, and what building the in-memory BM25 index costs.

    # evidence recall at 250/500/1000/2000 tokens for dense only (weight 0), BM25 only and each fused weight,
    # on the LoCoMo dev conversations and on LongMemEval dev histories 0, 4, 8... (the builds are reused)
    python benchmarks/lexical_fit.py fit locomo --builds runs/builds-locomo-ce \
        --save benchmarks/results/lexical-fit-locomo.json
    python benchmarks/lexical_fit.py fit longmemeval --stride 4 --builds runs/builds-lme \
        --save benchmarks/results/lexical-fit-lme-s4.json
    # seconds to build the index: each LoCoMo dev conversation and LongMemEval dev histories 0, 4, 8...
    python benchmarks/lexical_fit.py speed

`fit` opens each conversation's boxes-only build under --builds (made by `membox eval locomo --boxes-only` or
`membox eval longmemeval`; built first if missing) and runs box-hits on every question at each budget for each
variant: `dense` (lexical_weight 0: box-hits before this stage), `bm25` (the cosines left out: relevance is the
normalised BM25 score alone, the boxes, decay and length cost as before) and `w=X` (cosines + X x BM25).
The saved JSON holds the settings, the pooled recall per variant and budget, and per question its id and recall
(no dataset text). Every figure is on dev data: the weight is fitted there, so its gain is in-sample.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from membox_local.config import load_config
from membox_local.evaluation import longmemeval as lme
from membox_local.evaluation import locomo
from membox_local.evaluation.locomo import FILL_K, Shared, evidence_recall, open_build
from membox_local.retrieval.boxhits import BoxHitsRetriever
from membox_local.retrieval.lexical import LexicalIndex

BUDGETS = (250, 500, 1000, 2000)
WEIGHTS = (0.1, 0.2, 0.3, 0.5)


def locomo_items(a) -> list[tuple[str, list, list[tuple[str, str, list[str]]]]]:
    """(conversation id, messages, [(question id, question, evidence ids)]) for each LoCoMo conversation."""
    from membox_local.ingest import load_locomo

    s = locomo.Settings(data=a.data or str(locomo.DEFAULT_DATA), stride=a.stride)
    out = []
    for sample in locomo.load_samples(s.data, getattr(a, "conversations", None) or []):
        conv = sample["sample_id"]
        messages = load_locomo(s.data, [conv])
        qs = locomo._questions(sample, s, {m.message_id for m in messages}, {k: 0 for k in
                                ("split", "malformed", "unknown", "questions_without_evidence")})
        out.append((conv, messages, [(f"{conv}:{q['qid']}", q["question"], q["evidence"]) for q in qs]))
    return out


def lme_items(a) -> list[tuple[str, list, list[tuple[str, str, list[str]]]]]:
    """One item per answerable LongMemEval history: its own conversation, one question."""
    records = lme.sample(lme.read_file(a.data or lme.DEFAULT_DATA), [], 0, a.stride)
    qs = [q for q in map(lme.to_question, records) if not q.abstention]
    return [(q.id, q.messages, [(q.id, q.question, q.evidence_turns)]) for q in qs]


def variants(weights) -> dict[str, tuple[float, float]]:
    """name -> (dense_weight, lexical_weight)."""
    return {"dense": (1.0, 0.0), "bm25": (0.0, 1.0), **{f"w={w:g}": (1.0, w) for w in weights}}


def sweep_arguments(p: argparse.ArgumentParser, weights) -> None:
    """The options of a recall sweep over existing builds (this script's `fit`, events_fit.py)."""
    p.add_argument("--data", default="")
    p.add_argument("--config", default="cpu-ce")
    p.add_argument("--stride", type=int, default=1)
    p.add_argument("--conversations", nargs="*", default=[], help="LoCoMo sample ids (default: all)")
    p.add_argument("--builds", required=True)
    p.add_argument("--weights", type=float, nargs="*", default=list(weights))
    p.add_argument("--save", default="")


def fit(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="lexical_fit.py fit")
    p.add_argument("dataset", choices=("locomo", "longmemeval"))
    sweep_arguments(p, WEIGHTS)
    a = p.parse_args(argv)
    cfg = load_config(a.config)
    items = locomo_items(a) if a.dataset == "locomo" else lme_items(a)
    grid = variants(a.weights)
    per_q: dict[str, dict[str, list]] = {v: {} for v in grid}
    shared, started = Shared(cfg), time.time()
    command = f"python benchmarks/lexical_fit.py fit {' '.join(argv)}"
    for conv, messages, questions in items:
        mem = open_build(conv, messages, cfg, a.builds, shared, build=False, boxes_only=True, progress=False)
        try:
            mem.embedder.encode([q for _, q, _ in questions])
            r = BoxHitsRetriever(mem)
            for name, (dense, lexical) in grid.items():
                r.dense_weight, r.lexical_weight = dense, lexical
                for qid, question, evidence in questions:
                    if not evidence:
                        continue
                    per_q[name][qid] = [evidence_recall(evidence, r.retrieve(question, conv, FILL_K, b).message_ids)
                                        for b in BUDGETS]
        finally:
            mem.close(models=False)
        print(f"{conv}: {len(questions)} questions, {time.time() - started:.0f} s", file=sys.stderr)
        report(a, command, grid, per_q, final=False)  # saved after each conversation: a long run can stop early
    shared.close()
    report(a, command, grid, per_q, final=True)
    return 0


def report(a, command: str, grid: dict, per_q: dict[str, dict[str, list]], final: bool) -> None:
    """The pooled table (printed when final) and the saved JSON."""
    n = len(next(iter(per_q.values())))
    pooled = {v: dict(zip(map(str, BUDGETS), np.round(100 * np.mean(list(qs.values()), axis=0), 1).tolist()))
              for v, qs in per_q.items()} if n else {}
    if final:
        print(f"<!-- {time.strftime('%Y-%m-%d')}; {a.dataset} dev, config {a.config}; {n} questions with evidence; "
              f"command: {command} -->")
        print("| variant | " + " | ".join(map(str, BUDGETS)) + " |\n|---|" + "---|" * len(BUDGETS))
        for v, row in pooled.items():
            print(f"| {v} | " + " | ".join(f"{x:.1f}" for x in row.values()) + " |")
    if a.save:
        out = {"date": time.strftime("%Y-%m-%d"), "dataset": a.dataset, "split": "dev", "config": a.config,
               "stride": a.stride, "complete": final, "budgets": list(BUDGETS),
               "variants": {v: {"dense_weight": d, "lexical_weight": w} for v, (d, w) in grid.items()},
               "questions": n, "recall": pooled,
               "per_question": {v: {q: [round(x, 4) for x in r] for q, r in qs.items()} for v, qs in per_q.items()},
               "command": command}
        Path(a.save).write_text(json.dumps(out, separators=(",", ":")))


def merge(argv: list[str]) -> int:
    """Saved fits of parts of one dataset (e.g. conversations fitted by separate runs) as one file."""
    p = argparse.ArgumentParser(prog="lexical_fit.py merge")
    p.add_argument("parts", nargs="+")
    p.add_argument("--save", required=True)
    a = p.parse_args(argv)
    parts = [json.loads(Path(x).read_text()) for x in a.parts]
    first = parts[0]
    per_q = {v: {q: r for part in parts for q, r in part["per_question"][v].items()} for v in first["variants"]}
    grid = {v: (x["dense_weight"], x["lexical_weight"]) for v, x in first["variants"].items()}
    ns = argparse.Namespace(save=a.save, dataset=first["dataset"], config=first["config"], stride=first["stride"])
    command = "; ".join(part["command"] for part in parts) + \
        f"; python benchmarks/lexical_fit.py merge {' '.join(argv)}"
    report(ns, command, grid, per_q, final=True)
    return 0


def speed(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="lexical_fit.py speed")
    p.add_argument("--stride", type=int, default=4)
    p.add_argument("--save", default="")
    a = p.parse_args(argv)
    a.data = ""
    rows = {}
    for name, items in (("locomo", locomo_items(argparse.Namespace(data="", stride=1))),
                        ("longmemeval", lme_items(a))):
        secs, turns, query = [], [], []
        for _, messages, questions in items:
            texts = [m.render() for m in messages]
            t0 = time.perf_counter()
            index = LexicalIndex.build(texts)
            secs.append(time.perf_counter() - t0)
            turns.append(len(texts))
            for _, q, _ in questions:
                t0 = time.perf_counter()
                index.normalised(q)
                query.append(time.perf_counter() - t0)
        rows[name] = {"histories": len(items), "turns_mean": round(float(np.mean(turns))),
                      "build_ms_mean": round(1000 * float(np.mean(secs)), 1),
                      "build_ms_max": round(1000 * float(np.max(secs)), 1),
                      "query_ms_mean": round(1000 * float(np.mean(query)), 2),
                      "load_1min": round(os.getloadavg()[0], 2)}
        print(name, rows[name])
    if a.save:
        Path(a.save).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), **rows}, indent=1))
    return 0


if __name__ == "__main__":
    commands = {"fit": fit, "merge": merge, "speed": speed}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit("usage: lexical_fit.py {fit,merge,speed} [arguments]  (see the module docstring)")
    sys.exit(commands[sys.argv[1]](sys.argv[2:]))
