"""Box-hits' length penalty on LongMemEval (`[retrieve] length_cost`, `length_free`): how it was chosen, and where
the lead over the baselines comes from (an ablation).

    # the grid it was chosen on: LongMemEval dev questions 0, 6, 12... (17 of 98), retrieval only
    python benchmarks/longmemeval_length.py fit --stride 6
    # the ablation beside the usual modes on all 98 dev questions (BENCHMARKS.md, "LongMemEval")
    python benchmarks/longmemeval_length.py run --no-qa --out runs/lme-all
    # the figures the docs quote: turn lengths by role, evidence turns by role, LoCoMo turns over length_free,
    # boxes of the builds, and recall at 1000 tokens on the questions the fit did not see (saved records)
    python benchmarks/longmemeval_length.py stats

`fit` reads each history's build (made by `membox eval longmemeval`, reused; built first if missing) and prints
box-hits' evidence-turn recall at 500/1000/2000 context tokens for every cost x free in the grid (cost 0: off).
`run` is `membox eval longmemeval` with two more modes (unless --modes names others): `box-hits:no-length-cost`
(length_cost 0: the boxes alone) and `turn-rag:length-cost` (turn-rag ranked by cosine less the same penalty,
boxhits.length_penalty: the length prior alone, no boxes); every other argument is the command's own.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from membox_local.cli import main as membox
from membox_local.config import load_config
from membox_local.evaluation import longmemeval as lme
from membox_local.evaluation.locomo import FILL_K, Shared, evidence_recall, open_build
from membox_local.retrieval import RETRIEVERS
from membox_local.retrieval.base import count_tokens
from membox_local.retrieval.baselines import TurnRagRetriever
from membox_local.retrieval.boxhits import BoxHitsRetriever, length_penalty

ABLATION = ["box-hits:no-length-cost", "turn-rag:length-cost"]
COSTS = (0.0, 0.1, 0.2, 0.3)
FREES = (50, 100, 150)


class TurnRagLengthCost(TurnRagRetriever):
    name = "turn-rag:length-cost"

    def order(self, sims, chunks):
        rc = self.memory.config.retrieve
        tokens = [sum(count_tokens(m.render()) for m in c) for c in chunks]
        return np.argsort(-(sims - length_penalty(tokens, rc.length_cost, rc.length_free)), kind="stable")


class BoxHitsNoLengthCost(BoxHitsRetriever):
    name = "box-hits:no-length-cost"
    length_cost = 0.0


def fit(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="longmemeval_length.py fit")
    p.add_argument("--data", default=str(lme.DEFAULT_DATA))
    p.add_argument("--config", default="cpu-ce")
    p.add_argument("--stride", type=int, default=6)
    p.add_argument("--builds", default="runs/builds-lme")
    a = p.parse_args(argv)
    cfg = load_config(a.config)
    questions = [q for q in map(lme.to_question, lme.sample(lme.read_file(a.data), [], 0, a.stride))
                 if not q.abstention]
    grid = [(0.0, FREES[0])] + [(c, f) for c in COSTS if c for f in FREES]
    recall = {g: {b: [] for b in lme.BUDGETS} for g in grid}
    shared = Shared(cfg)
    for q in questions:
        mem = open_build(q.id, q.messages, cfg, a.builds, shared, build=False, boxes_only=True, progress=False)
        try:
            r = BoxHitsRetriever(mem)
            for cost, free in grid:
                mem.config.retrieve.length_cost, mem.config.retrieve.length_free = cost, free
                for b in lme.BUDGETS:
                    shown = r.retrieve(q.question, q.id, FILL_K, b).message_ids
                    recall[(cost, free)][b].append(evidence_recall(q.evidence_turns, shown))
        finally:
            mem.close()
    print(f"<!-- {time.strftime('%Y-%m-%d')}; config {a.config}; {len(questions)} questions (--stride {a.stride}); "
          f"command: python benchmarks/longmemeval_length.py fit {' '.join(argv)} -->")
    print("| length_cost | length_free | 500 | 1000 | 2000 |\n|---|---|---|---|---|")
    for (cost, free), by in recall.items():
        print(f"| {cost} | {free if cost else '-'} | " + " | ".join(f"{100 * np.mean(by[b]):.1f}" for b in lme.BUDGETS)
              + " |")
    return 0


def stats(argv: list[str]) -> int:
    import gzip
    import json
    import sqlite3
    from collections import Counter
    from pathlib import Path

    from membox_local.evaluation.locomo import DEFAULT_DATA as LOCOMO
    from membox_local.ingest import load_locomo

    p = argparse.ArgumentParser(prog="longmemeval_length.py stats")
    p.add_argument("--data", default=str(lme.DEFAULT_DATA))
    p.add_argument("--builds", default="runs/builds-lme/cpu-ce")
    p.add_argument("--records", default="benchmarks/results/longmemeval-retrieval-dev.jsonl.gz")
    a = p.parse_args(argv)
    free = load_config("cpu").retrieve.length_free
    questions = [lme.to_question(r) for r in lme.read_file(a.data)]
    for role in ("user", "assistant"):
        n = np.array([count_tokens(m.render()) for q in questions for m in q.messages if m.speaker == role])
        print(f"{role} turns: {len(n)}, median {np.median(n):.0f} tokens, {100 * np.mean(n > free):.0f}% over {free}")
    evidence = Counter(m.speaker for q in questions for m in q.messages if m.message_id in set(q.evidence_turns))
    print(f"evidence turns by role: {dict(evidence)}")
    locomo = [count_tokens(m.render()) for m in load_locomo(LOCOMO)]
    print(f"LoCoMo dev turns over {free} tokens: {sum(t > free for t in locomo)} of {len(locomo)} (longest {max(locomo)})")
    built = [Path(a.builds) / q.id / "memory.db" for q in questions if (Path(a.builds) / q.id / "memory.db").exists()]
    if built:
        counts = [sqlite3.connect(db).execute("SELECT (SELECT COUNT(*) FROM messages), (SELECT COUNT(*) FROM boxes)")
                  .fetchone() for db in built]
        turns, boxes = (sum(c[i] for c in counts) for i in (0, 1))
        print(f"builds: {len(built)} histories, {turns} turns in {boxes} boxes ({turns / boxes:.1f} per box)")
    if Path(a.records).exists():
        fitted = {q.id for q in questions[::6]}
        recs = [json.loads(line) for line in gzip.open(a.records, "rt") if line.strip()]
        for mode in dict.fromkeys(r["mode"] for r in recs):
            xs = [r["recall@1000"] for r in recs if r["mode"] == mode and not r["abstention"] and r["qid"] not in fitted]
            print(f"{mode}: recall at 1000 tokens {100 * np.mean(xs):.1f} on the {len(xs)} questions the fit did not see")
    return 0


def run(argv: list[str]) -> int:
    for cls in (TurnRagLengthCost, BoxHitsNoLengthCost):
        RETRIEVERS[cls.name] = cls
    modes = [] if "--modes" in argv else ["--modes", *lme.DEFAULT_MODES, *ABLATION]  # the usual ones and these two
    return membox(["eval", "longmemeval", *modes, *argv])


if __name__ == "__main__":
    commands = {"fit": fit, "run": run, "stats": stats}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit("usage: longmemeval_length.py {fit,run,stats} [arguments]  (see the module docstring)")
    sys.exit(commands[sys.argv[1]](sys.argv[2:]))
