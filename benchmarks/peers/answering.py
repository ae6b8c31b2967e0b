"""The answering step every system shares: its context within one token budget, the same answering model and
prompt, the same scorers.

- Budget: membox_local's model-free count_tokens (retrieval/base.py), the unit of its `[retrieve] budget_tokens`.
  membox_local's retrieval fills the budget itself; a peer's memories are taken best first while they fit (one
  that does not fit is skipped, a shorter one after it may still fit) and shown in that order, one per line.
- Answer: membox_local's own answering step, `Memory.answer_from` (answer_prompt, `[answer]` max_tokens, the tally
  of total questions), run on an empty scratch Memory with the config's settings, for every system alike.
- Scores: membox_local.evaluation.scorers.score_all (LoCoMo F1, mem0 F1, BLEU-1, membox F1); evidence recall where
  the system gave the sources of what it showed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from membox_local.evaluation.locomo import evidence_recall
from membox_local.evaluation.scorers import score_all
from membox_local.retrieval.base import Context, count_tokens


@dataclass
class Retrieved:
    """What one system showed for one question: its context text and the dia_ids behind it (None: the system
    gives no sources)."""

    context: Context
    sources: list[str] | None
    search_s: float = 0.0
    items_returned: int = 0
    items_shown: int = 0
    extra: dict = field(default_factory=dict)


def fit_budget(items: list[dict], budget: int) -> list[dict]:
    """Items (best first, each with "text") that fit `budget` count_tokens as one line each, in their order."""
    kept, used = [], 0
    for item in items:
        text = " ".join(str(item.get("text", "")).split())
        if not text:
            continue
        cost = count_tokens(f"- {text}")
        if used + cost <= budget:
            kept.append({**item, "text": text})
            used += cost
    return kept


def items_context(items: list[dict], budget: int,
                  gives_sources: bool = True) -> tuple[Context, list[str] | None, int]:
    """The context a peer's memories make, the sources of those shown (None for a system that gives none), and how
    many were shown."""
    kept = fit_budget(items, budget)
    text = "\n".join(f"- {it['text']}" for it in kept)
    sources = []
    for it in kept:
        for s in it.get("sources") or []:
            if s not in sources:
                sources.append(s)
    return Context(text=text, message_ids=sources), (sources if gives_sources else None), len(kept)


class Answerer(Protocol):
    name: str

    def answer(self, question: str, ctx: Context) -> str: ...


class MemboxAnswerer:
    """membox_local's answering step (Memory.answer_from) with the config's answering model, on an empty scratch
    Memory, so no system's store takes part in answering."""

    def __init__(self, cfg, scratch: Path, backend=None):
        from membox_local.backends import make_backend
        from membox_local.memory import Memory

        llm = cfg.answer_llm()
        self.name = llm.model
        self.backend = backend if backend is not None else make_backend(llm)
        self.memory = Memory(Path(scratch), cfg, backend=self.backend, answer_backend=self.backend)

    def answer(self, question: str, ctx: Context) -> str:
        return self.memory.answer_from(question, ctx, None, backend=self.backend).text

    def close(self) -> None:
        self.memory.close(models=False)
        self.backend.close()


def grade(question, retrieved: Retrieved, answerer: Answerer, keep_text: bool = False) -> dict:
    """One question's record: retrieval figures, the answer's seconds and scores (no dataset text unless
    keep_text)."""
    t0 = time.time()
    prediction = answerer.answer(question.question, retrieved.context)
    answer_s = time.time() - t0
    rec = {
        "qid": question.qid, "category": question.category,
        "context_tokens": count_tokens(retrieved.context.text),
        "items_returned": retrieved.items_returned, "items_shown": retrieved.items_shown,
        "search_s": round(retrieved.search_s, 3), "answer_s": round(answer_s, 3),
        "recall": (evidence_recall(question.evidence, retrieved.sources)
                   if retrieved.sources is not None else None),
        "scores": score_all(prediction, question.gold, question.category),
    }
    if keep_text:
        rec.update(question=question.question, gold=question.gold, prediction=prediction,
                   context=retrieved.context.text)
    return rec
