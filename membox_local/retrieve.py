"""Retrieval: pick memory for a question and lay it out as context within a token budget.

Modes are small subclasses of `Retriever` registered in RETRIEVERS. `compact` ranks whole boxes by the
cosine between the question and the box (topic, keywords and text) and shows the best ones, in time
order, each under its date and topic.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .memory import Memory

from .records import Box

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """A model-free token count (words and punctuation marks), the same for every mode and backend."""
    return len(_TOKEN.findall(text))


@dataclass
class Context:
    text: str
    box_ids: list[int] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)  # every message shown, for evidence recall
    event_ids: list[int] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return count_tokens(self.text)


def box_index_text(box: Box) -> str:
    head = " ".join(x for x in (box.topic, ", ".join(box.keywords)) if x)
    return f"{head}\n{box.text()}" if head else box.text()


def render_box(box: Box, messages=None) -> str:
    msgs = box.messages if messages is None else messages
    return box.header() + "\n" + "\n".join(m.render() for m in msgs)


class Retriever:
    name = "base"

    def __init__(self, memory: "Memory"):
        self.memory = memory

    def retrieve(self, question: str, conversation_id: str | None, k: int, budget_tokens: int) -> Context:
        raise NotImplementedError


class CompactRetriever(Retriever):
    name = "compact"

    def retrieve(self, question, conversation_id, k, budget_tokens):
        hits = self.memory.search(question, k=k, conversation_id=conversation_id)
        chosen, used = [], 0
        for box, score in hits:
            block = render_box(box)
            cost = count_tokens(block)
            if used + cost > budget_tokens:
                if chosen:
                    continue  # a smaller box further down may still fit
                block = _truncate(block, budget_tokens)
                cost = count_tokens(block)
            chosen.append((box, score, block))
            used += cost
        chosen.sort(key=lambda x: (x[0].messages[0].seq if x[0].messages else 0, x[0].id))
        ctx = Context("\n\n".join(b for _, _, b in chosen))
        for box, score, block in chosen:
            ctx.box_ids.append(box.id)
            ctx.scores[box.id] = score
            shown = block.count("\n")  # header line + one line per shown message
            ctx.message_ids += [m.message_id for m in box.messages[:shown]]
        return ctx


def _truncate(text: str, budget: int) -> str:
    lines, out, used = text.split("\n"), [], 0
    for line in lines:
        cost = count_tokens(line)
        if used + cost > budget:
            break
        out.append(line)
        used += cost
    return "\n".join(out)


RETRIEVERS: dict[str, type[Retriever]] = {r.name: r for r in (CompactRetriever,)}


def make_retriever(mode: str, memory: "Memory") -> Retriever:
    if mode not in RETRIEVERS:
        raise ValueError(f"unknown retrieval mode '{mode}'; choose one of {sorted(RETRIEVERS)}")
    return RETRIEVERS[mode](memory)
