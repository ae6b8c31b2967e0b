"""Bounded memory's effect on evidence recall (EventWeave's node cap, `[eventweave] max_nodes`).

A built event graph is replayed from its own events into a copy of the store with a node cap: the events keep
their texts, dates and vectors, so no model is called, and the graph comes out as a build with that cap would have
woven it (eviction runs as each event is added, as in a build). The same questions are then read from the capped
copy and the uncapped one, at each budget. The built memory itself is never written.
"""
from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .locomo import FILL_K, evidence_recall


@dataclass
class BoundedRow:
    cap: int  # max_nodes of the replay (0: no cap, the graph as built)
    nodes: int  # event nodes left
    events: int  # events left (an evicted node's events go with it)
    evicted_nodes: int
    questions: int  # questions with evidence
    reachable: float | None = None  # share of their evidence messages that are a source turn of a kept event
    recall: dict[int, float | None] = field(default_factory=dict)  # budget -> mean evidence recall
    per_question: list[dict] = field(default_factory=list)  # {"qid", "budget", "recall"}


def capped_recall(path: Path, config, conversation_id: str, questions: Sequence[dict], caps: Sequence[int],
                  budgets: Sequence[int], mode: str = "event-graph", embedder=None) -> list[BoundedRow]:
    """One row per cap for one conversation built in the memory folder `path` with `config` (its event graph
    complete). `questions`: dicts with "qid", "question" and "evidence" (message ids), as the LoCoMo harness reads
    them; questions without evidence are left out. A cap of 0 replays without one (the reference row)."""
    from ..memory import Memory
    from ..store import copy_db
    from ..retrieval import make_retriever
    from ..systems.eventweave_graph import GraphWeaver, counters

    asked = [q for q in questions if q["evidence"]]
    rows = []
    for cap in caps:
        with tempfile.TemporaryDirectory() as tmp:
            copy_db(Path(path) / "memory.db", Path(tmp) / "memory.db")
            c = copy.deepcopy(config)
            c.eventweave.max_nodes = cap
            mem = Memory(Path(tmp), c, embedder=embedder)
            try:
                before = counters(mem.store, conversation_id).get("evicted_nodes", 0)
                GraphWeaver(mem.store, c.eventweave).rebuild(conversation_id)
                retriever = make_retriever(mode, mem)
                row = BoundedRow(cap, len(mem.store.ew_nodes(conversation_id)),
                                 len(mem.store.ew_events(conversation_id, woven=True)),
                                 counters(mem.store, conversation_id).get("evicted_nodes", 0) - before, len(asked))
                sources = {m for e in mem.store.ew_events(conversation_id, woven=True) for m in e.sources}
                evidence = [m for q in asked for m in q["evidence"]]
                row.reachable = round(sum(m in sources for m in evidence) / len(evidence), 4) if evidence else None
                for budget in budgets:
                    got = []
                    for q in asked:
                        ctx = retriever.retrieve(q["question"], conversation_id, FILL_K, budget)
                        r = evidence_recall(q["evidence"], ctx.message_ids)
                        got.append(r)
                        row.per_question.append({"qid": q["qid"], "budget": budget, "recall": r})
                    row.recall[budget] = round(sum(got) / len(got), 4) if got else None
                rows.append(row)
            finally:
                mem.close()
    return rows
