"""Trace Weaver: links the events of each newly extracted box into macro-topic traces (paper §3.2).

Incremental: `weave(box)` runs once per box, right after its extraction (the Loom's `after_extract`
hook), and reads existing traces but only ever adds the new box's events:

1. voting: each grounded event of the box votes for the trace holding its most similar event (max cosine
   over the trace's events), when that similarity reaches `weaver.vote_threshold`; the most-voted traces,
   at most `weaver.max_candidates`, are the candidates;
2. verification: one "link" call per candidate shows the trace's latest `weaver.shown_trace_events` events and the
   box's numbered events (with `weaver.link_voters_only`, only those that voted for that trace: the embedding
   pre-filter bounds the prompt and the answer; `weaver.link_event_chars` cuts each shown event); the model
   answers with the numbers of the events that continue it. An event may join several traces. With
   `weaver.auto_link` > 0, an event whose vote reaches that similarity joins its trace without being asked
   about; a candidate whose voters all do so gets no call;
3. initialisation: events accepted nowhere are grouped by one "trace-init" call into new traces (the main
   storyline first); an event the model leaves out becomes a trace of its own (counted as a leftover).
   A single unlinked event becomes a trace without a call.

A box's writes happen in one transaction after its last call. When a call fails, nothing of the box is
written: the error is recorded on the box and the next build weaves it again (`weave_pending`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from .backends.base import BackendError, JsonRequest
from .config import Config
from .prompts import link_prompt, link_schema, trace_init_prompt, trace_init_schema
from .records import Box, Event, Trace
from .requests import EmbedRequest, Step
from .store import Store

MAX_SUMMARY_CHARS = 80
MAX_NEW_TRACES = 4  # storylines one trace-init call may open (the rest become single-event traces)
COUNTERS = ("boxes", "events", "linked", "new_traces", "leftovers", "failures")


@dataclass
class WeaveOutcome:
    box_id: int
    events: int = 0  # grounded events considered
    candidates: list[int] = field(default_factory=list)  # trace ids sent to verification
    linked: dict[int, list[int]] = field(default_factory=dict)  # trace id -> event ids it accepted
    new_traces: list[int] = field(default_factory=list)
    leftovers: int = 0  # events the trace-init call left out, each made a trace of its own
    error: str = ""


class Weaver:
    def __init__(self, store: Store, cfg: Config):
        self.store = store
        self.cfg = cfg

    def weave_pending(self, conversation_id: str) -> Step:
        """Weave extracted boxes not woven yet (a failed weave, or boxes built with the weaver off)."""
        for box in self.store.unwoven_boxes(conversation_id):
            yield from self.weave(box)

    def weave(self, box: Box) -> Step:
        """Link one extracted box's grounded events into traces; returns a WeaveOutcome."""
        out = WeaveOutcome(box.id)
        events = [e for e in box.events if e.grounding >= self.cfg.extract.min_grounding]
        out.events = len(events)
        traces = self.store.traces_with_events(box.conversation_id)
        try:
            voters: dict[int, dict[int, float]] = {}
            out.candidates = (yield from self._candidates(events, traces, voters)) if events and traces else []
            by_id = dict((t.id, (t, evs)) for t, evs in traces)
            for tid in out.candidates:
                auto, shown = self._split(events, voters[tid])
                picked = (yield from self._verify(*by_id[tid], shown, box.session_date)) if shown else []
                if auto or picked:
                    out.linked[tid] = sorted(e.id for e in auto + picked)
            linked_ids = {i for ids in out.linked.values() for i in ids}
            unlinked = [e for e in events if e.id not in linked_ids]
            groups, out.leftovers = (yield from self._initialise(unlinked, box.session_date)) if unlinked else ([], 0)
        except BackendError as exc:
            out.error = f"weaving failed: {exc}"
            with self.store.transaction():
                self.store.set_box_status(box.id, "extracted", out.error)
                self._count(box.conversation_id, {"failures": 1})
            return out
        with self.store.transaction():
            for tid, ids in out.linked.items():
                self.store.add_to_trace(tid, ids)
            for summary, group in groups:
                out.new_traces.append(self.store.create_trace(box.conversation_id, summary, [e.id for e in group]))
            self.store.set_box_status(box.id, "extracted", "")  # clears an earlier weaving error
            self.store.mark_woven(box.id)
            self._count(box.conversation_id, {
                "boxes": 1, "events": out.events, "linked": len(linked_ids),
                "new_traces": len(out.new_traces), "leftovers": out.leftovers,
            })
        return out

    # ---- the three steps ------------------------------------------------------------------------
    def _candidates(self, events: list[Event], traces: list[tuple[Trace, list[Event]]],
                    voters: dict[int, dict[int, float]] | None = None) -> Step:
        """Trace ids voted for by the new events, most votes first (ties: higher similarity); `voters` gets, per
        trace, the events that voted for it: their indices, each with its vote's similarity."""
        traces = [(t, evs) for t, evs in traces if evs]
        pool = list({e.id: e for _, evs in traces for e in evs}.values())
        if not pool:
            return []
        col = {e.id: n for n, e in enumerate(pool)}
        vecs = yield EmbedRequest(tuple(e.text for e in events) + tuple(e.text for e in pool))
        vecs = np.asarray(vecs, dtype=np.float32)
        sims = vecs[:len(events)] @ vecs[len(events):].T  # (new events, pooled trace events)
        per_trace = np.stack([sims[:, [col[e.id] for e in evs]].max(axis=1) for _, evs in traces], axis=1)
        votes: dict[int, list[float]] = {}
        for n, row in enumerate(per_trace):
            best = int(np.argmax(row))
            if row[best] >= self.cfg.weaver.vote_threshold:
                votes.setdefault(traces[best][0].id, []).append(float(row[best]))
                if voters is not None:
                    voters.setdefault(traces[best][0].id, {})[n] = float(row[best])
        ranked = sorted(votes, key=lambda tid: (-len(votes[tid]), -max(votes[tid]), tid))
        return ranked[:self.cfg.weaver.max_candidates]

    def _split(self, events: list[Event], voters: dict[int, float]) -> tuple[list[Event], list[Event]]:
        """A candidate trace's (events linked without a call, events its link call shows; none when every voter is
        sure): voters at or above `auto_link` join outright; the call shows the other voters (`link_voters_only`)
        or every other event of the box."""
        wc = self.cfg.weaver
        sure = sorted(i for i, sim in voters.items() if wc.auto_link and sim >= wc.auto_link)
        if len(sure) == len(voters):
            return [events[i] for i in sure], []
        shown = voters if wc.link_voters_only else range(len(events))
        return [events[i] for i in sure], [events[i] for i in shown if i not in sure]

    def _verify(self, trace: Trace, trace_events: list[Event], events: list[Event], date: str) -> Step:
        wc = self.cfg.weaver
        shown = [(_cut(e.text, wc.link_event_chars), e.date) for e in trace_events[-wc.shown_trace_events:]]
        res = yield JsonRequest(
            link_prompt(trace.summary, shown, [_cut(e.text, wc.link_event_chars) for e in events], date),
            link_schema(len(events)),
            stage="link", max_tokens=self.cfg.weaver.max_tokens, about=f"box {events[0].box_id}",
        )
        return [events[i - 1] for i in sorted(set(res.data["continues"]))]

    def _initialise(self, events: list[Event], date: str) -> Step:
        """Group unlinked events into new traces: returns ([(summary, events)], leftovers)."""
        if len(events) == 1:
            return [(_clip(events[0].text), events)], 0
        res = yield JsonRequest(
            trace_init_prompt([e.text for e in events], date),
            trace_init_schema(len(events), min(len(events), MAX_NEW_TRACES), MAX_SUMMARY_CHARS),
            stage="trace-init", max_tokens=self.cfg.weaver.max_tokens, about=f"box {events[0].box_id}",
        )
        groups, used = [], set()
        for story in res.data["storylines"]:
            idx = [i - 1 for i in dict.fromkeys(story["events"]) if i - 1 not in used]
            if not idx:
                continue
            used.update(idx)
            members = [events[i] for i in idx]
            groups.append((_clip(story["title"]) or _clip(members[0].text), members))
        left = [e for i, e in enumerate(events) if i not in used]
        return groups + [(_clip(e.text), [e]) for e in left], len(left)

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _count(self, conversation_id: str, add: dict[str, int]) -> None:
        totals = weave_counters(self.store, conversation_id)
        for k, v in add.items():
            totals[k] += v
        self.store.set_meta(f"weaver:{conversation_id}", json.dumps(totals))


def weave_counters(store: Store, conversation_id: str) -> dict[str, int]:
    """Running totals of one conversation's weaving (boxes woven, events linked, traces opened, ...)."""
    saved = json.loads(store.get_meta(f"weaver:{conversation_id}", "{}"))
    return {k: int(saved.get(k, 0)) for k in COUNTERS}


def _cut(text: str, chars: int) -> str:
    """`text` cut to `chars` characters at a word's end (0: whole), marked with an ellipsis."""
    if not chars or len(text) <= chars:
        return text
    return text[:chars - 1].rsplit(" ", 1)[0].rstrip() + "…"


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_SUMMARY_CHARS else text[:MAX_SUMMARY_CHARS - 1].rstrip() + "…"
