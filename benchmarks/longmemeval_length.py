"""Box-hits' length penalty on LongMemEval (`[retrieve] length_cost`, `length_free`): how it was chosen, and where
the lead over the baselines comes from (an ablation).

    # the grid it was chosen on: LongMemEval dev questions 0, 6, 12... (17 of 98), retrieval only
    python benchmarks/longmemeval_length.py fit --stride 6
    # the ablation beside the usual modes on all 98 dev questions (BENCHMARKS.md, "LongMemEval")
    python benchmarks/longmemeval_length.py run --no-qa --out runs/lme-all

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


def run(argv: list[str]) -> int:
    for cls in (TurnRagLengthCost, BoxHitsNoLengthCost):
        RETRIEVERS[cls.name] = cls
    modes = [] if "--modes" in argv else ["--modes", *lme.DEFAULT_MODES, *ABLATION]  # the usual ones and these two
    return membox(["eval", "longmemeval", *modes, *argv])


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("fit", "run"):
        sys.exit("usage: longmemeval_length.py {fit,run} [arguments]  (see the module docstring)")
    sys.exit((fit if sys.argv[1] == "fit" else run)(sys.argv[2:]))
