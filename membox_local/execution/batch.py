"""Batch builds: advance many conversations together, one batched backend call per stage and round.

Inside a conversation the Loom is sequential (each decision needs the previous one), but conversations are
independent. `build_conversations` keeps at most `batch_size` conversations in flight, refills a slot as soon
as a conversation finishes, and in every round answers all pending requests of one kind (the continuity
labels, the extractions, the weaver's link and trace-init calls, the embeddings) with a single call to the
backend. The store it produces equals a one-at-a-time build: the steps are the same generators.

    report = build_conversations(mem, ["u1", "u2", ...], batch_size=16, progress=bar.update)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .driver import KINDS
from .progress import Describe, DescribingDriver
from ..requests import Request


@dataclass
class BuildReport:
    conversations: int = 0
    messages: int = 0  # messages taken in by this build, once per memory system (Memory.to_file; resumed: the rest)
    wall_s: float = 0.0
    rounds: int = 0  # batched rounds: each answers every pending request, one call per kind
    calls: dict[str, int] = field(default_factory=dict)  # backend/embedder calls per request kind
    requests: dict[str, int] = field(default_factory=dict)  # requests answered per kind

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.wall_s if self.wall_s > 0 else 0.0

    def mean_batch(self, kind: str) -> float:
        return self.requests.get(kind, 0) / self.calls[kind] if self.calls.get(kind) else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"conversations": self.conversations, "messages": self.messages, "wall_s": round(self.wall_s, 3),
                "messages_per_s": round(self.messages_per_s, 3), "rounds": self.rounds, "calls": self.calls,
                "requests": self.requests}


class CountingDriver(DescribingDriver):
    """A Driver that tallies its batched calls into a BuildReport (and says what each is about: `describe`)."""

    def __init__(self, *args, report: BuildReport, **kw):
        super().__init__(*args, **kw)
        self.report = report

    def execute(self, requests: list[Request], conversations: list[str]) -> list[Any]:
        r = self.report
        r.rounds += 1
        for kind in KINDS:
            n = sum(isinstance(q, kind) for q in requests)
            if n:
                r.calls[kind.__name__] = r.calls.get(kind.__name__, 0) + 1
                r.requests[kind.__name__] = r.requests.get(kind.__name__, 0) + n
        return super().execute(requests, conversations)


def build_conversations(mem, conversations: Sequence[str], batch_size: int = 8, seal: bool = True,
                        progress: Callable[[int], None] | None = None,
                        on_conversation: Callable[[str], None] | None = None,
                        describe: Describe | None = None) -> BuildReport:
    """File every pending message of `conversations` in `mem` (a Memory), `batch_size` conversations at a time.

    Resumable like `Memory.add`: messages must already be in the store; whatever is pending is processed.
    `progress(n)` is called as each memory system takes in a message (Memory.to_file counts them beforehand),
    `describe(text)` before each batched model call with what it is about, `on_conversation(id)` as each
    conversation finishes.
    Holds the memory folder's write lock while it runs (`Memory.writing`), and checks the models first when
    there is work (`Memory.check_models`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    with mem.writing("build"):
        if mem.has_work(dict.fromkeys(conversations)):
            mem.check_models()
        return _build(mem, conversations, batch_size, seal, progress, on_conversation, describe)


def _build(mem, conversations: Sequence[str], batch_size: int, seal: bool,
           progress: Callable[[int], None] | None,
           on_conversation: Callable[[str], None] | None, describe: Describe | None = None) -> BuildReport:
    report = BuildReport(conversations=len(conversations))
    counted = 0

    def tick(n: int) -> None:
        nonlocal counted
        counted += n
        if progress is not None:
            progress(n)

    driver = CountingDriver(mem.store, mem.embedder, lambda: mem.backend, report=report, describe=describe)
    steps = ((c, (c, mem.conversation_step(c, seal, tick))) for c in dict.fromkeys(conversations))
    t0 = time.perf_counter()
    driver.drive_many(steps, limit=batch_size,
                      on_done=(lambda key, _: on_conversation(key)) if on_conversation else None)
    report.wall_s = time.perf_counter() - t0
    report.messages = counted
    return report
