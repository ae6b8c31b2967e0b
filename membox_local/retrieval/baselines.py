"""Baseline retrieval modes, with the same embedder, store and answering model as Membox.

- `turn-rag`: every message is its own record, ranked by cosine to the question.
- `chunk-rag`: consecutive messages of one session grouped into chunks of about `CHUNK_WORDS` words
  (whole messages; a chunk never crosses a session), ranked by cosine.
- `session-rag`: every session one record (its messages' mean embedding), shown whole, ranked by cosine.
- `full-context`: no retrieval: the most recent messages that fit the budget and the model's window.

All three lay out what they show the same way (`layout.Layout`): the chosen messages in time order, under one
date line per session. Message embeddings come from Memory's cached embedder, so they are computed once
per memory folder; ranking is exact cosine over one conversation's messages with numpy.
"""
from __future__ import annotations


import numpy as np

from ..records import Message
from .base import Context, Retriever, register
from .layout import CHUNK_WORDS, Layout, chunk_session_messages, chunk_text, shown_render
from ..config import Config

ANSWER_PROMPT_RESERVE = 200  # model tokens for the answer prompt's fixed instructions and question
MODEL_TOKENS_PER_COUNTED = 1.25  # llama-style tokenizers produce somewhat more tokens than count_tokens


def conversation_messages(memory, conversation_id: str | None) -> list[list[Message]]:
    convs = [conversation_id] if conversation_id is not None else memory.store.conversations()
    return [memory.store.messages(c) for c in convs]


@register
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
        order = self.order(sims, chunks)[:k]
        layout, scores = Layout(budget_tokens, render=shown_render(self.memory.config)), {}
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

    def order(self, sims: np.ndarray, chunks: list[list[Message]]) -> np.ndarray:
        """The units best first (a variant may rank them otherwise)."""
        return np.argsort(-sims, kind="stable")


@register
class TurnRagRetriever(ChunkRagRetriever):
    name = "turn-rag"
    chunk_words = 0  # every message its own record


@register
class SessionRagRetriever(ChunkRagRetriever):
    """Whole sessions as records (LongMemEval's session-level retrieval): a session's vector is the mean of its
    messages' unit embeddings (the same cached vectors turn-rag ranks), since MiniLM reads only a session's first
    256 word pieces; the best session is shown from its start when it is longer than the budget."""

    name = "session-rag"
    chunk_words = 10**9  # one chunk per session

    def units(self, conversation_id):
        if conversation_id not in self._units:
            sessions = [c for msgs in conversation_messages(self.memory, conversation_id)
                        for c in chunk_session_messages(msgs, self.chunk_words)]
            # one call for the conversation's messages (cached vectors, as turn-rag's), averaged per session
            flat = np.asarray(self.memory.embedder.encode([m.text for s in sessions for m in s]), dtype=np.float32)
            ends = np.cumsum([len(s) for s in sessions])
            vecs = np.stack([flat[e - len(s):e].mean(axis=0) for s, e in zip(sessions, ends)]) if sessions else \
                np.zeros((0, self.memory.embedder.dim), dtype=np.float32)
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            self._units[conversation_id] = (sessions, vecs)
        return self._units[conversation_id]


def window_tokens(config: "Config") -> int:
    """The context a mode may show the answering model, in count_tokens units."""
    room = config.answer_llm().n_ctx - config.answer.max_tokens - ANSWER_PROMPT_RESERVE
    return max(0, int(room / MODEL_TOKENS_PER_COUNTED))


@register
class FullContextRetriever(Retriever):
    needs = "messages"
    """The conversation cut to the model's window (and the budget), most recent messages kept; k unused."""

    name = "full-context"

    def retrieve(self, question, conversation_id, k, budget_tokens):
        layout = Layout(min(budget_tokens, window_tokens(self.memory.config)), render=shown_render(self.memory.config))
        msgs = [m for conv in conversation_messages(self.memory, conversation_id) for m in conv]
        for m in reversed(msgs):
            if not layout.try_add([m]):
                break
        return layout.context()
