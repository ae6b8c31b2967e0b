"""Retrieval modes: pick memory for a question and lay it out as context within a token budget.

Each family of modes is one module; importing this package registers every mode (RETRIEVERS):
- `compact`, `trace` (compact.py): the paper's modes over whole boxes;
- `turn-rag`, `chunk-rag`, `full-context` (baselines.py): message-only baselines;
- `box-hits`, `box-hits-trace` (boxhits.py): rank single messages, read them inside their boxes;
- `box-hits-events`, `box-hits-said` (eventkeys.py): box-hits with the records' events as keys, or shown;
- `event-graph`, `event-graph-boxes` (eventgraph.py): EventWeave's events by recency, relevance and PageRank.
"""
from . import baselines, boxhits, compact, eventgraph, eventkeys  # noqa: F401  (each registers its modes)
from .base import RETRIEVERS, Context, Retriever, count_tokens, make_retriever, register
from .layout import (CHUNK_WORDS, Layout, box_index_text, chunk_session_messages, chunk_text, render_box,
                     render_messages)

__all__ = ["RETRIEVERS", "Context", "Layout", "Retriever", "box_index_text", "count_tokens", "make_retriever",
           "quoting_texts", "register", "render_box", "render_messages"]


def quoting_texts(messages, message_ids) -> list[str]:
    """The texts the retrieval modes embed (and the store caches) that quote one of `message_ids`: the chunks,
    of every size a registered mode cuts `messages` into (consecutive messages of one session, in order), that
    hold one of them; size 0 is each message alone, as turn-rag embeds it. For forgetting (Memory.forget)."""
    gone = set(message_ids)
    sizes = sorted({getattr(cls, "chunk_words", CHUNK_WORDS) for cls in RETRIEVERS.values()} | {0, CHUNK_WORDS})
    out = [chunk_text(c) for size in sizes for c in chunk_session_messages(list(messages), size)
           if any(m.message_id in gone for m in c)]
    return list(dict.fromkeys(out))
