"""Continuity judges: does a new message continue the open box?

A judge's `decide` is a generator step: it may yield requests (embeddings, a label call, score requests) and
returns a `Decision`. New judges subclass `Judge` and register in JUDGES. Every judge sees only the open box and
the new message (online, no look-ahead); thresholds and weights come from LoomConfig and are fitted on TIAGE
train/dev by `benchmarks/segmentation.py fit` and `fit-lm` (see BENCHMARKS.md, "Topic segmentation").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .backends.base import BackendError, LabelRequest, ScoreRequest
from .config import LoomConfig
from .prompts import (CONTINUITY_LABELS, DIALOGUE_HEADER, authors_continuity_prompt, continuity_prompt,
                      dialogue_context, dialogue_line)
from .records import Message
from .requests import EmbedRequest, Step


@dataclass
class Decision:
    continues: bool
    label: str  # what the judge said, for logs and agreement metrics
    score: float | None = None  # judge confidence that the message continues, when it has one


class Judge:
    name = "base"
    uses_llm = False

    def __init__(self, cfg: LoomConfig):
        self.cfg = cfg

    def decide(self, recent: Sequence[Message], new: Message) -> Step:
        raise NotImplementedError


def _unit(v: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v


def _threshold_decision(score: float, threshold: float) -> Decision:
    cont = score >= threshold
    return Decision(cont, "yes" if cont else "no", score)


class EmbeddingJudge(Judge):
    """Cosine of the new message against the mean of the open box's last `window` messages."""

    name = "embedding"

    def decide(self, recent, new):
        window = list(recent)[-self.cfg.window:]
        vecs = yield EmbedRequest(tuple(m.text for m in window) + (new.text,))
        score = float(np.dot(_unit(np.asarray(vecs[:-1], dtype=np.float32).mean(axis=0)), vecs[-1]))
        return _threshold_decision(score, self.cfg.threshold)


# ---- hybrid: a logistic model over cheap features --------------------------------------------------
def _words(text: str) -> int:
    return len(text.split())


def hybrid_features(box_vecs: np.ndarray, new_vec: np.ndarray, box: Sequence[Message], new: Message,
                    window: int) -> dict[str, float]:
    """Features of (open box, new message); `box_vecs` are the box messages' unit embeddings, in order.

    The `rel_*` features subtract the box's own coherence (mean cosine of its consecutive messages), so a
    conversation whose messages are all alike (long LoCoMo turns) is judged against its own baseline.
    """
    box_vecs = np.asarray(box_vecs, dtype=np.float32)
    sims = box_vecs @ new_vec
    n = len(box)
    cos_last = float(sims[-1])
    cos_prev = float(sims[-2]) if n >= 2 else cos_last
    cos_window = float(_unit(box_vecs[-window:].mean(axis=0)) @ new_vec)
    cos_box = float(_unit(box_vecs.mean(axis=0)) @ new_vec)
    if n >= 2:
        cohesion = float(np.mean(np.sum(box_vecs[1:] * box_vecs[:-1], axis=1)))
    else:
        cohesion = cos_last  # no pair inside the box yet: neutral
    last = box[-1]
    return {
        "cos_last": cos_last,
        "cos_prev": cos_prev,
        "cos_window": cos_window,
        "cos_box": cos_box,
        "cohesion": cohesion,
        "rel_last": cos_last - cohesion,
        "rel_window": cos_window - cohesion,
        "max_box": float(sims.max()),
        "speaker_change": float(new.speaker != last.speaker),
        "new_question": float("?" in new.text),
        "last_question": float("?" in last.text),
        "len_new": math.log1p(_words(new.text)),
        "len_last": math.log1p(_words(last.text)),
        "box_age": math.log(n),
    }


def likelihood_features(box: Sequence[Message], new: Message, window: int, knot: float = 1.0) -> Step:
    """The language model's view, per token of the new message: `lm_pmi`, how much more likely it is after
    the box's last `window` messages than after a bare header (pointwise mutual information), `lm_cond`, its
    log-likelihood after them, and `lm_pmi_low` = min(lm_pmi, knot), so that a linear model can treat "the box
    does not help at all" (a hard switch) apart from the soft range. A message that continues the topic is
    predicted by what came before."""
    line = dialogue_line(new)
    after_box = yield ScoreRequest(dialogue_context(list(box)[-window:]), line, stage="judge")
    alone = yield ScoreRequest(DIALOGUE_HEADER, line, stage="judge")
    # per token of each score's own span: equal spans unless a long message was cut to fit the scorer's context
    cond = after_box.logprob / max(1, after_box.tokens)
    pmi = cond - alone.logprob / max(1, alone.tokens)
    return {"lm_pmi": pmi, "lm_cond": cond, "lm_pmi_low": min(pmi, knot)}


LM_FEATURES = ("lm_pmi", "lm_cond", "lm_pmi_low")
FEATURES = ("cos_last", "cos_prev", "cos_window", "cos_box", "cohesion", "rel_last", "rel_window", "max_box",
            "speaker_change", "new_question", "last_question", "len_new", "len_last", "box_age") + LM_FEATURES


class HybridJudge(Judge):
    """Logistic model: p(continue) = sigmoid(bias + sum of weights[f] * feature f); continues at p >= 0.5.

    Features are MiniLM cosines and surface cues (`hybrid_features`); weights on `lm_*` features add the
    language model's likelihoods (`likelihood_features`, two score requests per judged message)."""

    name = "hybrid"

    def __init__(self, cfg: LoomConfig):
        super().__init__(cfg)
        if not cfg.weights:
            raise ValueError("the hybrid judge needs [loom] weights (feature -> weight); fit them with "
                             "`python benchmarks/segmentation.py fit` or use configs/cpu.toml")
        unknown = sorted(set(cfg.weights) - set(FEATURES))
        if unknown:
            raise ValueError(f"[loom] weights: unknown hybrid feature(s) {unknown}; known: {list(FEATURES)}")
        self.weights = {k: float(v) for k, v in cfg.weights.items()}
        self.uses_llm = any(k in LM_FEATURES and w for k, w in self.weights.items())

    def features(self, recent: Sequence[Message], new: Message) -> Step:
        box = list(recent)
        vecs = yield EmbedRequest(tuple(m.text for m in box) + (new.text,))
        vecs = np.asarray(vecs, dtype=np.float32)
        feats = hybrid_features(vecs[:-1], vecs[-1], box, new, self.cfg.window)
        if self.uses_llm:
            feats.update((yield from likelihood_features(box, new, self.cfg.window, self.cfg.lm_knot)))
        return feats

    def probability(self, feats: dict[str, float]) -> float:
        z = self.cfg.bias + sum(w * feats[k] for k, w in self.weights.items() if w)
        return 1.0 / (1.0 + math.exp(-z))

    def decide(self, recent, new):
        feats = yield from self.features(recent, new)
        return _threshold_decision(self.probability(feats), 0.5)


# ---- LLM judges -----------------------------------------------------------------------------------
class LLMJudge(Judge):
    """The model labels the message yes / partly / no against the open box's last `window` messages;
    only 'yes' continues."""

    name = "llm"
    uses_llm = True

    def decide(self, recent, new):
        window = list(recent)[-self.cfg.window:]
        res = yield LabelRequest(continuity_prompt(window, new), CONTINUITY_LABELS, stage="judge")
        return Decision(res.label == "yes", res.label, None)


class LLMLogprobJudge(Judge):
    """Same prompt as `llm`, but reads the label distribution: continues when p(yes) >= prob_threshold.

    Small models answer the question near-constantly when asked in words; their p(yes) still ranks
    messages, and a threshold fitted on TIAGE turns that ranking into decisions.
    """

    name = "llm-logprob"
    uses_llm = True

    def decide(self, recent, new):
        window = list(recent)[-self.cfg.window:]
        res = yield LabelRequest(continuity_prompt(window, new), CONTINUITY_LABELS, stage="judge", logprobs=True)
        if not res.probs or "yes" not in res.probs:
            raise BackendError(f"the llm-logprob judge needs label probabilities; the backend returned {res.probs!r} "
                               f"for message {new.message_id} (use the llamacpp backend or the 'llm' judge)")
        return _threshold_decision(float(res.probs["yes"]), self.cfg.prob_threshold)


class AuthorsJudge(Judge):
    """The paper's setting: the two previous messages, a bare three-way question, only 'yes' continues."""

    name = "authors"
    uses_llm = True

    def decide(self, recent, new):
        res = yield LabelRequest(authors_continuity_prompt(list(recent)[-2:], new), CONTINUITY_LABELS,
                                 stage="judge")
        return Decision(res.label == "yes", res.label, None)


JUDGES: dict[str, type[Judge]] = {
    j.name: j for j in (EmbeddingJudge, HybridJudge, LLMJudge, LLMLogprobJudge, AuthorsJudge)
}


def make_judge(cfg: LoomConfig) -> Judge:
    if cfg.judge not in JUDGES:
        raise ValueError(f"unknown continuity judge '{cfg.judge}'; choose one of {sorted(JUDGES)}")
    return JUDGES[cfg.judge](cfg)
