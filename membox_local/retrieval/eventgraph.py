"""Event-graph retrieval (EventWeave §4.1), over what systems/eventweave.py builds.

Every event in the graph gets  score = w1 recency + w2 relevance + w3 PageRank  with
- recency = 2^(-age / half_life): the age of the event's session against the conversation's latest session, in
  sessions or in days (`half_life_unit`; days fall back to sessions when a session date cannot be read), the
  paper's exp(-gamma (t_now - t_e)) with gamma = ln 2 / half_life;
- relevance = the cosine of the question to the event's vector;
- PageRank of the event's node over the graph (summary nodes included), transitions in proportion to edge
  weight (the edges' strength), divided by the largest so that it lies in 0..1.
The weights are `[eventweave] recency_weight, relevance_weight, pagerank_weight`: fixed values in place of the
paper's MLP that sets them per dialogue state, fitted on dev questions by a grid of LoCoMo evaluations that keeps
the best evidence recall (benchmarks/fit_eventweave.py; README, "EventWeave").

- `event-graph`: the top k events, best first, each shown with its source turns (the turn before and the new
  turn) while they fit the budget (a pair that does not fit is tried with the new turn alone). The context is a
  block of event lines ("Events:", one line per event, dated, in time order) above the turns, laid out as every
  mode lays messages out (layout.Layout: one date line per session, relative time resolved with
  `[retrieve] resolve_dates`); both count against the same budget.
- `event-graph-boxes` (with the box memory built too): the top k events pull in their boxes, box-hits style: a
  message of a box holding an event's source turn has the priority of the event's score less `DECAY` per turn
  of distance; messages are added best first while they fit, an event's line and turns together.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Hashable, Sequence

import numpy as np

from ..records import Message
from .base import Context, Retriever, count_tokens, register
from .boxhits import BoxHitsRetriever
from .layout import Layout, shown_render

# what the event graph's system hands over (systems/eventweave.py GraphSnapshot, systems/eventweave_tables.py
# GraphEvent): not imported, the retrieval modes sit below the systems
GraphSnapshot = Any
GraphEvent = Any


def event_line(e: "GraphEvent", resolve: bool) -> str:
    """An event as shown: its session's date, its text (relative time resolved with `resolve`), its date."""
    from ..dates import resolve_relative

    text = resolve_relative(e.text, e.session_date) if resolve else e.text
    when = f" (when: {e.date})" if e.date and e.date not in text else ""
    return f"- [{e.session_date or 'session ' + e.session}] {text}{when}"


class EventLayout:
    """Event lines under "Events:" above the messages of a Layout, both within the Layout's budget."""

    HEAD = "Events:"

    def __init__(self, layout: Layout):
        self.layout = layout
        self.budget = layout.budget
        self.lines: dict[int, tuple[Hashable, str, float]] = {}  # event id -> (time order, line, score)
        self.line_tokens = 0
        self.shown: set[Message] = set()

    def add(self, msgs: Sequence[Message], event: "GraphEvent | None" = None, line: str = "",
            score: float = 0.0) -> bool:
        """Show the messages (those not shown yet) and the event's line, if they all fit; returns whether."""
        msgs = [m for m in dict.fromkeys(msgs) if m not in self.shown]
        extra = 0
        if event is not None and event.id not in self.lines:
            extra = count_tokens(line) + (0 if self.lines else count_tokens(self.HEAD))
        self.layout.budget = self.budget - self.line_tokens - extra
        added = self.layout.try_add(msgs)
        if added and extra:
            self.lines[event.id] = ((event.conversation_id, event.seq, event.idx), line, score)
            self.line_tokens += extra
        self.layout.budget = self.budget - self.line_tokens
        if added:
            self.shown.update(msgs)
        return added

    def context(self) -> Context:
        ctx = self.layout.context()
        if self.lines:
            shown = sorted(self.lines.items(), key=lambda kv: kv[1][0])
            head = "\n".join([self.HEAD] + [line for _, (_, line, _) in shown])
            ctx.text = head + ("\n\n" + ctx.text if ctx.text else "")
            ctx.event_ids = [i for i, _ in shown]
            ctx.scores = {i: s for i, (_, _, s) in shown}
        return ctx


def recency(e: "GraphEvent", snap: "GraphSnapshot", half_life: float, unit: str) -> float:
    from ..dates import parse_session_date

    latest = max(snap.sessions, key=snap.sessions.get) if snap.sessions else e.session
    age = None
    if unit == "days":
        a, b = parse_session_date(e.session_date), parse_session_date(snap.session_dates.get(latest, ""))
        age = max(0, (b - a).days) if a and b else None
    if age is None:
        age = max(0, snap.sessions.get(latest, 0) - snap.sessions.get(e.session, 0))
    return 2.0 ** (-age / half_life)


@register
class EventGraphRetriever(Retriever):
    name = "event-graph"
    needs = "records"

    def __init__(self, memory):
        super().__init__(memory)
        self.system = memory.system("eventweave")  # a config without the event graph fails here, naming it
        self._snaps: dict[str, "GraphSnapshot"] = {}

    def snapshot(self, conversation_id: str) -> "GraphSnapshot":
        if conversation_id not in self._snaps:
            self._snaps[conversation_id] = self.system.snapshot(conversation_id)
        return self._snaps[conversation_id]

    @contextmanager
    def reading(self, conversation_id: str, snap: "GraphSnapshot"):
        """Retrieve from `snap` in place of the conversation's graph inside the block (a part of it: what was
        known at a time, or the graph with edges removed; evaluation/next_turn.py, evaluation/backtracking.py)."""
        whole = self.snapshot(conversation_id)
        self._snaps[conversation_id] = snap
        try:
            yield
        finally:
            self._snaps[conversation_id] = whole

    def rank(self, question: str, conversation_id: str | None) -> list[tuple["GraphEvent", float]]:
        """Every event of the conversation (None: of every one) with its score, best first."""
        if not question.strip():
            raise ValueError("retrieve: the question is empty")
        convs = [conversation_id] if conversation_id is not None else self.memory.store.conversations()
        cfg = self.memory.config.eventweave
        rows: list[tuple["GraphEvent", float]] = []
        qv = None
        for conv in convs:
            snap = self.snapshot(conv)
            if not snap.events:
                continue
            if qv is None:
                qv = _unit(self.memory.embedder.encode([question])[0])
            vecs = np.stack([_unit(e.vector) for e in snap.events])
            top = max(snap.pagerank.values(), default=0.0) or 1.0
            pr = np.array([snap.pagerank.get(e.node_id, 0.0) / top for e in snap.events])
            rec = np.array([recency(e, snap, cfg.half_life, cfg.half_life_unit) for e in snap.events])
            score = cfg.recency_weight * rec + cfg.relevance_weight * (vecs @ qv) + cfg.pagerank_weight * pr
            rows += list(zip(snap.events, score.tolist()))
        rows.sort(key=lambda r: (-r[1], r[0].conversation_id, r[0].seq, r[0].idx))
        return rows

    def sources(self, e: "GraphEvent") -> list[Message]:
        """The event's source turns still stored, in time order (the turn before, the new turn)."""
        msgs = self.snapshot(e.conversation_id).messages
        return [msgs[i] for i in e.sources if i in msgs]

    def retrieve(self, question, conversation_id, k, budget_tokens):
        config = self.memory.config
        layout = EventLayout(Layout(budget_tokens, render=shown_render(config)))
        for e, score in self.rank(question, conversation_id)[:k]:
            line, turns = event_line(e, config.retrieve.resolve_dates), self.sources(e)
            if not layout.add(turns, e, line, score) and len(turns) > 1:
                layout.add(turns[-1:], e, line, score)
        return layout.context()


@register
class EventGraphBoxesRetriever(BoxHitsRetriever):
    name = "event-graph-boxes"
    needs = "records"

    def __init__(self, memory):
        memory.system("membox")  # the boxes: a config without the box memory fails here, naming it
        super().__init__(memory)
        self.events = EventGraphRetriever(memory)

    def retrieve(self, question, conversation_id, k, budget_tokens):
        ranked = self.events.rank(question, conversation_id)[:k]
        bm = self.box_map(conversation_id)
        if not bm.messages:
            return Context("")
        at = {(m.conversation_id, m.message_id): i for i, m in enumerate(bm.messages)}
        prio = np.full(len(bm.messages), -np.inf)
        seed: dict[int, tuple["GraphEvent", float]] = {}  # message index -> the best event it is a source of
        for e, score in ranked:
            for mid in e.sources:
                i = at.get((e.conversation_id, mid))
                if i is None:
                    continue
                seed.setdefault(i, (e, score))
                members = bm.members[bm.box_of[i]]
                distance = np.abs(np.arange(len(members)) - int(np.flatnonzero(members == i)[0]))
                prio[members] = np.maximum(prio[members], score - self.decay * distance)
        config = self.memory.config
        layout = EventLayout(bm.layout(budget_tokens, self.headers, shown_render(config)))
        for i in np.argsort(-prio, kind="stable"):
            if prio[i] == -np.inf:
                break
            if i in seed:
                e, score = seed[i]
                line, turns = event_line(e, config.retrieve.resolve_dates), self.events.sources(e)
                if layout.add(turns, e, line, score) or layout.add([bm.messages[i]], e, line, score):
                    continue
            layout.add([bm.messages[i]])
        ctx = layout.context()
        boxes = dict.fromkeys(bm.box(m) for m in sorted(layout.layout.messages, key=lambda m: (m.conversation_id,
                                                                                                m.seq)))
        ctx.box_ids = [bm.boxes[b].id for b in boxes if bm.boxes[b].id >= 0]
        return ctx


def _unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    n = np.linalg.norm(v)
    return v / n if n > 0 else v
