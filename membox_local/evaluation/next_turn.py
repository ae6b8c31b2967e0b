"""EventWeave's own task: generate the next turn of a conversation, with and without memory of the earlier
sessions, scored against the turn that was said with BLEU-4 (sacrebleu) and ROUGE-L (rouge-score).

A target is a turn of a later session (not the first) with at least `min_recent` turns of its session before
it; the model sees up to `recent` of those turns and writes the target speaker's next message. With memory it
also sees an event-graph context retrieved with the last two turns as the query, from the events of what was
said before the shown turns only. The graph is the whole conversation's, so the retriever reads a snapshot cut
there: the earlier events and their turns, and PageRank over the nodes that hold one of them and the summaries of
the sessions finished by then. No text said later is shown (a shown later turn is refused as a bug); edges that
later events added between the kept nodes stay, so PageRank may still feel them. Greedy decoding, the same model
for both conditions.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Sequence

from ..records import Message


@dataclass
class Target:
    message: Message  # the turn to generate
    recent: list[Message]  # the turns of its session before it, at most `recent` of them


def sample_targets(messages: Sequence[Message], n: int, recent: int = 6, min_recent: int = 2) -> list[Target]:
    """`n` targets spread evenly over the turns that qualify (a session after the first, `min_recent` turns of
    the session before), in conversation order."""
    first_session = messages[0].session if messages else ""
    candidates: list[Target] = []
    session_turns: list[Message] = []
    for m in messages:
        if session_turns and session_turns[-1].session != m.session:
            session_turns = []
        if m.session != first_session and len(session_turns) >= min_recent:
            candidates.append(Target(m, session_turns[-recent:]))
        session_turns.append(m)
    if n >= len(candidates):
        return candidates
    return [candidates[int(i * len(candidates) / n)] for i in range(n)]


def earlier_snapshot(memory, conversation_id: str, snap, before_seq: int, graph=None):
    """The event-graph snapshot of what was said before `before_seq` only: events of earlier turns, those turns,
    and PageRank over the graph's nodes that keep an event and the summaries of the sessions finished before.
    `graph`: the conversation's ranking graph, when the caller has it already (read from the store otherwise)."""
    import networkx as nx

    from ..systems.eventweave_graph import networkx_graph

    events = [e for e in snap.events if e.seq < before_seq]
    keep_nodes = {f"n{e.node_id}" for e in events}
    last: dict[str, int] = {}  # session -> its last turn's place
    for m in snap.messages.values():
        last[m.session] = max(last.get(m.session, -1), m.seq)
    finished = {session for session, seq in last.items() if seq < before_seq}
    graph = graph if graph is not None else networkx_graph(memory.store, conversation_id, ranking=True)
    kept = [v for v, d in graph.nodes(data=True) if v in keep_nodes or (d.get("kind") == "summary"
                                                                       and d.get("sessions") in finished)]
    sub = graph.subgraph(kept)
    ranks = nx.pagerank(sub, alpha=memory.config.eventweave.damping, weight="weight") if sub.number_of_nodes() else {}
    return replace(snap, events=events, pagerank={int(k[1:]): v for k, v in ranks.items() if k.startswith("n")},
                   messages={i: m for i, m in snap.messages.items() if m.seq < before_seq})


def scores(prediction: str, reference: str) -> dict[str, float]:
    """Sentence BLEU-4 (sacrebleu, its default smoothing) and ROUGE-L F1 (rouge-score, stemmed), x100."""
    import sacrebleu
    from rouge_score import rouge_scorer

    rouge = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(reference, prediction)["rougeL"].fmeasure
    return {"bleu4": round(sacrebleu.sentence_bleu(prediction, [reference]).score, 3),
            "rougeL": round(100 * rouge, 3)}


def corpus_bleu(predictions: Sequence[str], references: Sequence[str]) -> float:
    import sacrebleu

    return round(sacrebleu.corpus_bleu(list(predictions), [list(references)]).score, 3)


def generate(memory, conversation_id: str, targets: Sequence[Target], backend, conditions: Sequence[str] =
             ("none", "event-graph"), budget: int = 500, k: int = 10, max_tokens: int = 60,
             progress=None) -> list[dict]:
    """One record per (target, condition): ids, the prediction, its scores, the memory's tokens and seconds.
    `conditions`: "none" (recent turns only) and "event-graph" (event-graph-boxes is refused: a box may run
    into the target's session, and what it shows would not all be earlier)."""
    from ..backends.base import TextRequest
    from ..prompts import next_turn_prompt
    from ..retrieval import make_retriever

    unknown = [c for c in conditions if c not in ("none", "event-graph")]
    if unknown:
        raise ValueError(f"next-turn conditions {unknown}: only 'none' and 'event-graph' show nothing said later")
    from ..systems.eventweave_graph import networkx_graph

    retriever = make_retriever("event-graph", memory) if "event-graph" in conditions else None
    graph = networkx_graph(memory.store, conversation_id, ranking=True) if retriever else None  # read once
    seq = {m.message_id: m.seq for m in memory.store.messages(conversation_id)}
    out = []
    for t in targets:
        recent = "\n".join(m.render() for m in t.recent)
        query = " ".join(m.text for m in t.recent[-2:])
        start = t.recent[0].seq if t.recent else t.message.seq  # the memory: what was said before these turns
        for cond in conditions:
            context, tokens = "", 0
            if cond != "none":
                part = earlier_snapshot(memory, conversation_id, retriever.snapshot(conversation_id), start, graph)
                with retriever.reading(conversation_id, part):
                    ctx = retriever.retrieve(query, conversation_id, k, budget)
                late = [i for i in ctx.message_ids if seq.get(i, start) >= start]
                if late:  # a bug, not a data problem: refuse rather than score a leaked context
                    raise RuntimeError(f"next turn {t.message.message_id}: the memory showed later turns {late}")
                context, tokens = ctx.text, ctx.tokens
            t0 = time.time()
            res = backend.text([TextRequest(next_turn_prompt(recent, t.message.speaker, context), "next-turn",
                                            max_tokens)])[0]
            if isinstance(res, BaseException):
                raise res
            prediction = " ".join(res.text.strip().split("\n")[0].split())
            out.append({"conversation": conversation_id, "message_id": t.message.message_id,
                        "session": t.message.session, "condition": cond, "prediction": prediction,
                        "reference": t.message.text, "memory_tokens": tokens,
                        "seconds": round(time.time() - t0, 2), **scores(prediction, t.message.text)})
        if progress:
            progress(1)
    return out
