"""Requests that pipeline steps yield to whoever drives them.

Loom, Weaver and retrieval steps are generators: they yield a request (an LLM call or an embedding
batch), receive its result, and carry on. A driver runs one conversation's generator at a time, or
advances many together and answers all pending requests of one kind in a single batched call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Union

from .backends.base import JsonRequest, LabelRequest, ScoreRequest, TextRequest


@dataclass(frozen=True)
class EmbedRequest:
    texts: tuple[str, ...]


Request = Union[LabelRequest, JsonRequest, TextRequest, ScoreRequest, EmbedRequest]
Step = Generator[Request, Any, Any]
