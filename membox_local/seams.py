"""The memory as its parts see it: what a memory system (systems/) or a retrieval mode (retrieval/) reads from
`Memory`, as a Protocol on the lowest floor. The parts are typed against it and never import memory.py, not even
for type hints, so a drawing of the package's imports has no circle (tests/test_architecture.py counts every
import: at module level, inside functions and under TYPE_CHECKING)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class MemoryView(Protocol):
    path: Path
    config: Any  # config.Config
    store: Any  # store.Store with each built system's tables

    @property
    def embedder(self) -> Any: ...  # backends.base.Embedder

    def system(self, name: str) -> Any: ...  # the named system's Component

    def index(self, name: str) -> Any: ...  # index.VectorIndex

    def evidence_scorer(self) -> Any: ...  # [retrieve] evidence_model's scorer (continuity.py), or None

    def search(self, question: str, k: int | None = None, conversation_id: str | None = None,
               **filters: Any) -> list: ...
