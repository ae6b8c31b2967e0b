"""Continuity judges: does a new message continue the open box?

A judge's `decide` is a generator step: it may yield requests (embeddings, a label call) and returns a
`Decision`. New judges subclass `Judge` and register in JUDGES.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .backends.base import LabelRequest
from .config import LoomConfig
from .prompts import CONTINUITY_LABELS, continuity_prompt
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


class EmbeddingJudge(Judge):
    """Cosine of the new message against the mean of the open box's last `window` messages."""

    name = "embedding"

    def decide(self, recent, new):
        window = list(recent)[-self.cfg.window:]
        vecs = yield EmbedRequest(tuple(m.text for m in window) + (new.text,))
        ref = np.asarray(vecs[:-1], dtype=np.float32).mean(axis=0)
        norm = float(np.linalg.norm(ref)) or 1.0
        score = float(np.dot(ref / norm, vecs[-1]))
        cont = score >= self.cfg.threshold
        return Decision(cont, "yes" if cont else "no", score)


class LLMJudge(Judge):
    """The paper's judge: the model labels the message yes / partly / no; only 'yes' continues."""

    name = "llm"
    uses_llm = True

    def decide(self, recent, new):
        window = list(recent)[-self.cfg.window:]
        res = yield LabelRequest(continuity_prompt(window, new), CONTINUITY_LABELS, stage="judge")
        return Decision(res.label == "yes", res.label, None)


JUDGES: dict[str, type[Judge]] = {j.name: j for j in (EmbeddingJudge, LLMJudge)}


def make_judge(cfg: LoomConfig) -> Judge:
    if cfg.judge not in JUDGES:
        raise ValueError(f"unknown continuity judge '{cfg.judge}'; choose one of {sorted(JUDGES)}")
    return JUDGES[cfg.judge](cfg)
