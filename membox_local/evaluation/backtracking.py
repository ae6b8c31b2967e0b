"""EventWeave's backtracking test (its Table 3): a share of the event graph's edges is removed at random, as a
partial graph update might, and the evidence recall of the questions about the events around the removed
connections is measured before and after, on the same questions.

The graph is not touched: the edges are removed from the PageRank graph the event-graph modes read (the
retriever's snapshot gets the PageRank of the reduced graph). A connection is an unordered pair of graph nodes
(event or summary) with at least one edge; "around" it are the events of its two ends, and a question is about them
when one of its evidence messages is a source turn of such an event. Retrieval reads the edges only through
PageRank, so with `pagerank_weight = 0` the recall cannot change: the measurement says how much the graph's
structure carries.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from .locomo import FILL_K, evidence_recall


@dataclass
class BacktrackingRow:
    share: float  # of the connections removed
    seed: int
    removed: int  # connections removed
    connections: int  # connections in the graph
    questions: int  # questions about the events around the removed connections
    recall_intact: float | None  # their mean evidence recall on the whole graph
    recall_removed: float | None  # and with the connections removed
    per_question: list[dict[str, Any]] = field(default_factory=list)


def connections(graph) -> list[tuple[str, str]]:
    """The unordered node pairs of a networkx graph that hold at least one edge (self-loops left out)."""
    return sorted({tuple(sorted((a, b))) for a, b in graph.edges() if a != b})


def remove_connections(graph, share: float, seed: int):
    """A copy of the (ranking) graph without a `share` of its connections, chosen with `seed`, and those removed."""
    pairs = connections(graph)
    chosen = random.Random(seed).sample(pairs, round(share * len(pairs)))
    reduced = graph.copy()
    for a, b in chosen:
        for x, y in ((a, b), (b, a)):
            if reduced.has_edge(x, y):
                reduced.remove_edge(x, y)
    return reduced, chosen


def backtracking(memory, conversation_id: str, questions: Sequence[dict], shares: Sequence[float] = (0.1, 0.2, 0.3, 0.4),
                 seeds: Sequence[int] = (0,), budget: int = 1000, mode: str = "event-graph") -> list[BacktrackingRow]:
    """Rows of the test for one conversation of a memory with its event graph built. `questions`: dicts with
    "qid", "question" and "evidence" (message ids), as the LoCoMo harness reads them."""
    import networkx as nx

    from ..retrieval import make_retriever
    from ..systems.eventweave_graph import networkx_graph

    retriever = make_retriever(mode, memory)
    ranker = getattr(retriever, "events", retriever)  # event-graph-boxes ranks with an event-graph retriever
    snap = ranker.snapshot(conversation_id)
    graph = networkx_graph(memory.store, conversation_id, ranking=True)
    sources: dict[str, set[str]] = {}  # graph node -> message ids of its events' source turns
    for e in snap.events:
        sources.setdefault(f"n{e.node_id}", set()).update(e.sources)
    damping = memory.config.eventweave.damping

    def recall(q: dict) -> float | None:
        ctx = retriever.retrieve(q["question"], conversation_id, FILL_K, budget)
        return evidence_recall(q["evidence"], ctx.message_ids)

    asked = [q for q in questions if q["evidence"]]
    intact = {q["qid"]: recall(q) for q in asked}
    rows = []
    for share in shares:
        for seed in seeds:
            reduced, removed = remove_connections(graph, share, seed)
            around = {m for pair in removed for node in pair for m in sources.get(node, ())}
            about = [q for q in asked if around & set(q["evidence"])]
            ranks = nx.pagerank(reduced, alpha=damping, weight="weight") if reduced.number_of_nodes() else {}
            cut = replace(snap, pagerank={int(k[1:]): v for k, v in ranks.items() if k.startswith("n")})
            with ranker.reading(conversation_id, cut):
                after = {q["qid"]: recall(q) for q in about}
            per = [{"qid": q["qid"], "intact": intact[q["qid"]], "removed": after[q["qid"]]} for q in about]
            rows.append(BacktrackingRow(share, seed, len(removed), len(connections(graph)), len(about),
                                        _mean([p["intact"] for p in per]), _mean([p["removed"] for p in per]),
                                        per))
    return rows


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 4) if xs else None
