"""The box records' events in box-hits: as keys that point at the messages they cite, and as resolved statements
shown beside those messages. Each event names the lines it was read from (`Event.sources`, attribution.py), with its
people and times resolved by code; these modes measure what that is worth to retrieval and to the answering model
(BENCHMARKS.md, "Records in the answers"; docs/records.md).

- `box-hits-events`: box-hits with one more key per message: a message's dense relevance moves toward the best
  cosine to the question of an event citing it (`event_weight`: 1 takes the larger), and with `event_words` its
  BM25 document holds those events' words too. An event says in a sentence, with names for "I" and "you" and dates
  for "last week", what its line says in passing; a question asked in those words finds the line through it.
- `box-hits-said`: box-hits' context, each shown message followed by the events read from it (`said_line`), so
  the answering model reads who did what and when as code resolved it, beside the line it came from. The events'
  tokens count against the budget like the lines'.
Both need records (a full build); events extracted before they kept their sources (schema 3) point nowhere and
are left out. Neither is the default: the figures decide (BENCHMARKS.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..records import Message
from .base import register
from .boxhits import BoxHitsRetriever, BoxMap, unit
from .layout import shown_render
from .lexical import LexicalIndex

SAID_PREFIX = "  -> "  # how box-hits-said marks an event under its line


@dataclass
class MessageEvents:
    """One scope's events by the messages they cite: `texts[i]` the events citing message i (in box order), `at`
    (conversation id, message id) -> i, and the best cosine of one of them to a question (`best`)."""

    texts: list[list[str]]
    at: dict[tuple[str, str], int]
    owner: np.ndarray  # event index -> message index it cites (an event citing two lines appears twice)
    vectors: np.ndarray  # event index -> unit vector of its text

    def best(self, qv: np.ndarray) -> np.ndarray:
        """Message index -> the best cosine of an event citing it to `qv` (-1 where none does)."""
        out = np.full(len(self.texts), -1.0)
        if len(self.owner):
            np.maximum.at(out, self.owner, self.vectors @ qv)
        return out

    def of(self, m: Message) -> list[str]:
        return self.texts[self.at[(m.conversation_id, m.message_id)]]


def message_events(memory, bm: BoxMap) -> MessageEvents:
    """The events of the scope's boxes, each placed at the messages it cites (by message id, in its conversation)."""
    at = {(m.conversation_id, m.message_id): i for i, m in enumerate(bm.messages)}
    texts: list[list[str]] = [[] for _ in bm.messages]
    owner: list[int] = []
    shown: list[str] = []
    for box in bm.boxes:
        for e in box.events:
            for source in dict.fromkeys(e.sources or ()):
                i = at.get((e.conversation_id, source))
                if i is not None and e.text not in texts[i]:
                    texts[i].append(e.text)
                    owner.append(i)
                    shown.append(e.text)
    vectors = unit(memory.embedder.encode(shown)) if shown else np.zeros((0, bm.vectors.shape[-1]), np.float32)
    return MessageEvents(texts, at, np.array(owner, dtype=np.int64), vectors)


class _WithEvents(BoxHitsRetriever):
    needs = "records"

    def __init__(self, memory):
        super().__init__(memory)
        self._events: dict[str | None, MessageEvents] = {}

    def events(self, bm: BoxMap) -> MessageEvents:
        if bm.scope not in self._events:
            self._events[bm.scope] = message_events(self.memory, bm)
        return self._events[bm.scope]


@register
class BoxHitsEventsRetriever(_WithEvents):
    name = "box-hits-events"
    # how far a message's dense relevance moves toward its best event's cosine where that is higher: 1 takes the
    # larger of the two, 0 is box-hits; 0.25 had the best recall of 0.25/0.5/1 at 250 and 1000 tokens on conv-26
    # and conv-30 (`python benchmarks/events_fit.py --builds runs/builds-rec --conversations conv-26 conv-30`)
    event_weight = 0.25
    event_words = False  # BM25 over each message's text and the events citing it (else over its text alone)

    def __init__(self, memory):
        super().__init__(memory)
        self._lexical: dict[str | None, LexicalIndex] = {}

    def dense(self, bm: BoxMap, qv: np.ndarray) -> np.ndarray:
        """box-hits' dense relevance moved `event_weight` of the way to the best event's cosine where that is higher."""
        own = super().dense(bm, qv)
        return own + self.event_weight * np.maximum(self.events(bm).best(qv) - own, 0.0)

    def lexical(self, bm: BoxMap) -> LexicalIndex:
        if not self.event_words:
            return super().lexical(bm)
        if bm.scope not in self._lexical:
            events = self.events(bm)
            self._lexical[bm.scope] = LexicalIndex.build([" ".join([m.render(), *events.of(m)]) for m in bm.messages])
        return self._lexical[bm.scope]


def said_line(render: Callable[[Message], str], m: Message, events: list[str]) -> str:
    """`m` as `render` shows it, with the events read from it under it."""
    return "\n".join([render(m)] + [SAID_PREFIX + e for e in events])


@register
class BoxHitsSaidRetriever(_WithEvents):
    name = "box-hits-said"

    def render(self, bm: BoxMap) -> Callable[[Message], str]:
        base, events = shown_render(self.memory.config), self.events(bm)
        return lambda m: said_line(base, m, events.of(m))
