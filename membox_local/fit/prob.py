"""`membox fit prob RUN`: the llm-logprob judge's prob_threshold from a scored run, made first with
`membox eval segmentation --judge llm-logprob --set loom.prob_threshold=0 --out RUN` (every judged turn scored).

The recorded p(yes) are replayed through the Loom's rule for each threshold of a grid (quantiles of the scores);
the best objective wins. Prints one JSON line (threshold, figures, how well p(yes) ranks continuing turns above
boundary turns) and writes it to runs/segmentation/fit-prob.json.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..backends.base import Embedder
from ..config import load_config
from ..ingest import InputError, read_json
from .measure import objective
from .report import write_result


class ReplayJudge:
    """Replays p(yes) recorded by an llm-logprob run with prob_threshold=0 (every judged turn scored).

    With window=2 and min_box_messages=2 the judge always sees the two previous turns, so a turn's p(yes) does
    not depend on earlier decisions and one scored run serves every threshold; `loom.decide` still applies."""

    uses_llm = False
    history = 0  # no earlier messages

    def __init__(self, scores: dict[tuple[str, str], float], threshold: float):
        self.scores, self.threshold = scores, threshold

    def decide(self, recent, new, earlier=()):
        from ..judges import Decision

        p = self.scores[(new.conversation_id, new.message_id)]
        return Decision(p >= self.threshold, "replay", p)
        yield  # a step that asks for nothing


class NoEmbedder(Embedder):
    """The replayed judge asks for no embedding, so none is loaded."""

    model_name, dim = "none", 0

    def encode(self, texts):
        raise RuntimeError("the replayed judge asks for no embedding")


def main(args) -> int:
    import numpy as np

    from ..evaluation.segmentation import hyp_boundaries, load_dialogues, run_segmenter, score, summarise

    scored = Path(args.scored)
    if not (scored / "dialogues.jsonl").exists():
        raise InputError(f"{scored}: no dialogues.jsonl; score a run first with `membox eval segmentation "
                         "--judge llm-logprob --set loom.prob_threshold=0 --out DIR`")
    rows = [json.loads(line) for line in open(scored / "dialogues.jsonl")]
    summary = read_json(scored / "summary.json")
    cfg = load_config(summary["config"], {"loom.judge": "llm-logprob"})
    if summary["loom"]["min_box_messages"] != 2 or summary["loom"]["window"] != 2:
        raise InputError(f"{scored}: replay needs a run with window=2 and min_box_messages=2")
    dialogues = {d.id: d for d in load_dialogues(summary["data"])}
    scores = {(r["id"], str(i)): s for r in rows for i, s in enumerate(r["scores"]) if s is not None}
    if not scores:
        raise InputError(f"{scored}: no scored turn; was the run made with --judge llm-logprob?")
    dls = [dialogues[r["id"]] for r in rows]

    def result(t):
        decisions, _ = run_segmenter(cfg, {d.id: d.messages for d in dls}, embedder=NoEmbedder(),
                                     judge=ReplayJudge(scores, t))
        return summarise([{"turns": len(d.messages), "ref": d.boundaries, "hyp": hyp_boundaries(decisions[d.id]),
                           **score(d.boundaries, hyp_boundaries(decisions[d.id]), len(d.messages))} for d in dls])

    grid = sorted({round(float(q), 4) for q in np.quantile(list(scores.values()), np.linspace(0.02, 0.98, 49))})
    best = max(grid, key=lambda t: objective(result(t)))
    # does p(yes) rank continuing turns above boundary turns? (ROC AUC; 0.5 = no signal)
    cont = [s for r in rows for i, s in enumerate(r["scores"]) if s is not None and i not in r["ref"]]
    shift = [s for r in rows for i, s in enumerate(r["scores"]) if s is not None and i in r["ref"]]
    auc = sum((a > b) + 0.5 * (a == b) for a in cont for b in shift) / max(1, len(cont) * len(shift))
    out = {"prob_threshold": best, "fit_on": summary["data"], "dialogues": len(rows), **result(best),
           "auc_p_yes": round(auc, 3), "continuing_turns": len(cont), "boundary_turns": len(shift)}
    write_result("fit-prob", out, args.save)
    print(json.dumps(out))
    return 0
