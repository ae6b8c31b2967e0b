"""Baseline retrieval modes, with the same embedder, store and answering model as Membox.

- `turn-rag`: every message is its own record, ranked by cosine to the question.
- `chunk-rag`: consecutive messages of one session grouped into chunks of about `CHUNK_WORDS` words
  (whole messages; a chunk never crosses a session), ranked by cosine.
- `full-context`: no retrieval: the most recent messages that fit the budget and the model's window.

All three lay out what they show the same way: the chosen messages in time order, under one date line per
session. The layout's token count is additive (count_tokens never spans a line), so budgets are checked
without re-rendering. Message embeddings come from Memory's cached embedder, so they are computed once
per memory folder; ranking is exact cosine over one conversation's messages with numpy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Hashable, Sequence

import numpy as np

from .records import Message
from .retrieve import RETRIEVERS, Context, Retriever, count_tokens

if TYPE_CHECKING:
    from .config import Config

CHUNK_WORDS = 60
ANSWER_PROMPT_RESERVE = 200  # model tokens for the answer prompt's fixed instructions and question
MODEL_TOKENS_PER_COUNTED = 1.25  # llama-style tokenizers produce somewhat more tokens than count_tokens


def session_header(m: Message) -> str:
    return f"[{m.session_date or 'session ' + m.session}]"


def _time_order(m: Message) -> tuple[str, int]:
    return m.conversation_id, m.seq


def session_key(m: Message) -> Hashable:
    return m.conversation_id, m.session


def render_messages(messages: Sequence[Message], group: Callable[[Message], Hashable] = session_key,
                    header: Callable[[Message], str] = session_header,
                    subgroup: Callable[[Message], Hashable] | None = None,
                    subheader: Callable[[Message], str] | None = None) -> str:
    """Messages in time order, one header line per group (by default one date line per session, all of a
    session's shown messages under it) and, with `subgroup`, a line from `subheader` (when not empty) where
    a subgroup starts inside its group. Groups and subgroups must be runs of consecutive messages (sessions,
    boxes)."""
    by_group: dict[Hashable, list[Message]] = {}
    for m in sorted(messages, key=_time_order):
        by_group.setdefault(group(m), []).append(m)
    blocks = []
    for ms in by_group.values():
        lines, current = [header(ms[0])], object()
        for m in ms:
            if subgroup is not None and subgroup(m) != current:
                current = subgroup(m)
                if line := subheader(m):
                    lines.append(line)
            lines.append(m.render())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


class Layout:
    """Messages chosen so far and the exact token count of `render_messages` over them (same group, header,
    subgroup and subheader functions: by default sessions under their date line)."""

    def __init__(self, budget_tokens: int, group: Callable[[Message], Hashable] = session_key,
                 header: Callable[[Message], str] = session_header,
                 subgroup: Callable[[Message], Hashable] | None = None,
                 subheader: Callable[[Message], str] | None = None):
        if (subgroup is None) != (subheader is None):
            raise ValueError("Layout: pass subgroup and subheader together")
        self.budget = budget_tokens
        self.group, self.header = group, header
        self.subgroup, self.subheader = subgroup, subheader
        self.messages: list[Message] = []
        self.groups: set[Hashable] = set()
        self.subgroups: set[Hashable] = set()
        self.tokens = 0

    def cost(self, msgs: Sequence[Message]) -> int:
        new_groups = {self.group(m): m for m in msgs if self.group(m) not in self.groups}
        cost = sum(count_tokens(m.render()) for m in msgs) + \
            sum(count_tokens(self.header(m)) for m in new_groups.values())
        if self.subgroup is not None:
            new_subs = {self.subgroup(m): m for m in msgs if self.subgroup(m) not in self.subgroups}
            cost += sum(count_tokens(self.subheader(m)) for m in new_subs.values())
        return cost

    def try_add(self, msgs: Sequence[Message]) -> bool:
        """Add the messages if they all fit the budget; returns whether they were added."""
        cost = self.cost(msgs)
        if self.tokens + cost > self.budget:
            return False
        self.messages += msgs
        self.groups |= {self.group(m) for m in msgs}
        if self.subgroup is not None:
            self.subgroups |= {self.subgroup(m) for m in msgs}
        self.tokens += cost
        return True

    def add_prefix(self, msgs: Sequence[Message]) -> None:
        """Add as many of the messages, in order, as fit (for a first unit larger than the budget)."""
        for m in msgs:
            if not self.try_add([m]):
                break

    def context(self) -> Context:
        ordered = sorted(self.messages, key=_time_order)
        return Context(render_messages(ordered, self.group, self.header, self.subgroup, self.subheader),
                       message_ids=[m.message_id for m in ordered])


def conversation_messages(memory, conversation_id: str | None) -> list[list[Message]]:
    convs = [conversation_id] if conversation_id is not None else memory.store.conversations()
    return [memory.store.messages(c) for c in convs]


def chunk_session_messages(messages: Sequence[Message], chunk_words: int) -> list[list[Message]]:
    """Consecutive messages of one session, about `chunk_words` words each; 0 puts each message alone."""
    chunks: list[list[Message]] = []
    words = 0
    for m in messages:
        n = len(m.text.split())
        cur = chunks[-1] if chunks else None
        if cur is None or cur[-1].session != m.session or chunk_words <= 0 or words + n > chunk_words:
            chunks.append([m])
            words = n
        else:
            cur.append(m)
            words += n
    return chunks


def chunk_text(messages: Sequence[Message]) -> str:
    """The text a chunk of messages is embedded as (chunk-rag's units, box-hits' windows)."""
    return "\n".join(m.render() for m in messages)


class ChunkRagRetriever(Retriever):
    name = "chunk-rag"
    needs = "messages"
    chunk_words = CHUNK_WORDS

    def __init__(self, memory):
        super().__init__(memory)
        self._units: dict[str | None, tuple[list[list[Message]], np.ndarray]] = {}

    def units(self, conversation_id: str | None) -> tuple[list[list[Message]], np.ndarray]:
        if conversation_id not in self._units:
            chunks = [c for msgs in conversation_messages(self.memory, conversation_id)
                      for c in chunk_session_messages(msgs, self.chunk_words)]
            vecs = self.memory.embedder.encode([chunk_text(c) for c in chunks])
            self._units[conversation_id] = (chunks, vecs)
        return self._units[conversation_id]

    def retrieve(self, question, conversation_id, k, budget_tokens):
        if not question.strip():
            raise ValueError("retrieve: the question is empty")
        chunks, vecs = self.units(conversation_id)
        if not chunks:
            return Context("")
        qv = self.memory.embedder.encode([question])[0]
        sims = vecs @ qv
        order = np.argsort(-sims, kind="stable")[:k]
        layout, scores = Layout(budget_tokens), {}
        for rank, i in enumerate(order):
            if not layout.try_add(chunks[i]) and rank == 0:
                layout.add_prefix(chunks[i])
        ctx = layout.context()
        shown = set(ctx.message_ids)
        for i in order:
            if chunks[i][0].message_id in shown:
                scores[int(i)] = float(sims[i])
        ctx.scores = scores  # chunk index -> cosine, for the chunks shown
        return ctx


class TurnRagRetriever(ChunkRagRetriever):
    name = "turn-rag"
    chunk_words = 0  # every message its own record


def window_tokens(config: "Config") -> int:
    """The context a mode may show the answering model, in count_tokens units."""
    room = config.llm.n_ctx - config.answer.max_tokens - ANSWER_PROMPT_RESERVE
    return max(0, int(room / MODEL_TOKENS_PER_COUNTED))


class FullContextRetriever(Retriever):
    needs = "messages"
    """The conversation cut to the model's window (and the budget), most recent messages kept; k unused."""

    name = "full-context"

    def retrieve(self, question, conversation_id, k, budget_tokens):
        layout = Layout(min(budget_tokens, window_tokens(self.memory.config)))
        msgs = [m for conv in conversation_messages(self.memory, conversation_id) for m in conv]
        for m in reversed(msgs):
            if not layout.try_add([m]):
                break
        return layout.context()


for _r in (TurnRagRetriever, ChunkRagRetriever, FullContextRetriever):
    RETRIEVERS[_r.name] = _r
