"""Retrieval modes: pick memory for a question and lay it out as context within a token budget.

Each family of modes is one module; importing this package registers every mode (RETRIEVERS):
- `compact`, `trace` (compact.py): the paper's modes over whole boxes;
- `turn-rag`, `chunk-rag`, `full-context` (baselines.py): message-only baselines;
- `box-hits`, `box-hits-trace` (boxhits.py): rank single messages, read them inside their boxes.
"""
from . import baselines, boxhits, compact  # noqa: F401  (each registers its modes)
from .base import RETRIEVERS, Context, Retriever, count_tokens, make_retriever, register
from .layout import Layout, box_index_text, render_box, render_messages

__all__ = ["RETRIEVERS", "Context", "Layout", "Retriever", "box_index_text", "count_tokens", "make_retriever",
           "register", "render_box", "render_messages"]
