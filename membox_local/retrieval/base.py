"""Retrieval's contract: a `Retriever` turns a question into a `Context` (text within a token budget, plus what
it shows), and `register` adds a mode to RETRIEVERS under its `name`. Modes live one family per module
(compact, baselines, boxhits); `membox_local.retrieval` imports each of them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TypeVar

from ..config import RETRIEVAL_MODES
from ..records import Message
from ..seams import MemoryView

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """A model-free token count (words and punctuation marks), the same for every mode and backend."""
    return len(_TOKEN.findall(text))


@dataclass
class Context:
    text: str
    box_ids: list[int] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)  # every message shown, for evidence recall
    # the messages shown in the order the mode took them in (its ranking; message_ids are in time order): the
    # rank-based metrics (LongMemEval's recall@k, NDCG@k) read it; empty for a mode that does not rank messages
    ranked_ids: list[str] = field(default_factory=list)
    event_ids: list[int] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)
    shown: list[Message] = field(default_factory=list)  # the messages shown, in time order (modes that show lines)

    @property
    def tokens(self) -> int:
        return count_tokens(self.text)


class Retriever:
    name = "base"
    # what the mode reads from a memory: "messages" (stored messages only), "boxes" (messages filed into
    # boxes, no records) or "records" (a full build: extracted boxes, events, traces)
    needs = "records"

    def __init__(self, memory: "MemoryView"):
        self.memory = memory

    def retrieve(self, question: str, conversation_id: str | None, k: int, budget_tokens: int) -> Context:
        raise NotImplementedError

    def refresh(self) -> bool:
        """Bring what this retriever read up to date in place after messages were only added and filed; False (the
        default) when it cannot, and a new retriever is made."""
        return False


RETRIEVERS: dict[str, type[Retriever]] = {}
R = TypeVar("R", bound=type)


def register(cls: R) -> R:
    """Class decorator: make a Retriever subclass available as retrieval mode `cls.name`."""
    if cls.name not in RETRIEVAL_MODES:
        raise ValueError(f"retrieval mode '{cls.name}' is not named in config.RETRIEVAL_MODES (the names a config "
                         f"may use): add it there")
    if cls.name in RETRIEVERS and RETRIEVERS[cls.name] is not cls:
        raise ValueError(f"retrieval mode '{cls.name}' is registered twice")
    RETRIEVERS[cls.name] = cls
    return cls


def make_retriever(mode: str, memory: "MemoryView") -> Retriever:
    if mode not in RETRIEVERS:
        raise ValueError(f"unknown retrieval mode '{mode}'; choose one of {sorted(RETRIEVERS)}")
    return RETRIEVERS[mode](memory)
