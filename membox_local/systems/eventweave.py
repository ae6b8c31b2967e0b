"""EventWeave (Zhao et al.): an event graph built online from the same stored messages as the box memory.

For each new message, one extraction call sees the (previous turn, new turn) pair (the turn before only when it
is of the same session) and lists at most `max_events` events, each with the time expression it was said with;
an empty list is "no event" (the paper's trained BERT event classifier is this prompt's empty list). An
expression that is not words of the two turns is dropped (else a relative phrase of the event text is taken);
it is resolved against the session date (dates.resolve_when, dateparser) and stored beside the text.
Each event is embedded twice: its text, and its text with the two turns (the context-aware vector). The graph
(systems/eventweave_graph.py) clusters events into nodes and links them by sequential, temporal and reasoning
edges, records update links, and with `max_nodes` evicts by a fixed utility formula (in place of the paper's
LSTM utility predictor and RL retention policy). When a session is complete (a later session started, or the
conversation is sealed), one call summarises its events: the session's summary node.

Everything is resumable: a pair's events are written in one transaction after its call (a pair without a row
is pending; a failed one keeps its error and is retried), events are woven into the graph right after, and an
event woven late (a retried pair) makes the graph be replayed from the events, which carry their vectors.
Retrieval modes: event-graph, event-graph-boxes (retrieval/eventgraph.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..backends.base import BackendError, JsonRequest
from ..dates import find_time_phrase, resolve_when
from ..loom import content_words, event_subjects, excerpt_budget, excerpted_call, grounding, is_about
from ..prompts import session_summary_prompt, session_summary_schema, turn_events_prompt, turn_events_schema
from ..records import Message
from ..requests import EmbedRequest, Step
from .base import Component
from .eventweave_graph import GraphWeaver, context_text, counters, derived_texts, pagerank
from .eventweave_tables import EventTables, GraphEvent

# [eventweave] keys that only decide how the graph is read (retrieval): free to change between runs
RETRIEVAL_KEYS = ("recency_weight", "relevance_weight", "pagerank_weight", "half_life", "half_life_unit", "damping")
SUMMARY_EVENTS = 30  # a session's summary call shows at most its first 30 events


@dataclass
class GraphSnapshot:
    """What the event-graph retrieval modes read of one conversation."""

    events: list[GraphEvent]  # woven events, in conversation order
    pagerank: dict[int, float]  # node id -> PageRank
    sessions: dict[str, int] = field(default_factory=dict)  # session -> its place in the conversation (0, 1, ...)
    session_dates: dict[str, str] = field(default_factory=dict)
    messages: dict[str, Message] = field(default_factory=dict)  # message id -> message


def unkept(text: str, previous: Message | None, new: Message, min_grounding: float) -> str:
    """Why an extracted item is not kept as an event ("": it is). The new turn is what a pair reads; the turn
    before only helps to understand it. Not kept:
    - "copied turn": the item starts with a speaker's name and a colon (a turn copied, not an event);
    - "question": it ends with a question mark;
    - "repetition": a run of three words said three times (a small model looping);
    - "about another person": it is about a speaker (the first one it names, each of "Ana and Ben") whom the new
      turn neither is by nor names: a small model's swapped people ("Ben bought a bicycle" from Ana's turn);
    - "not grounded": under `min_grounding` of its content words (names left out) are words of the two turns."""
    speakers = list(dict.fromkeys(t.speaker for t in (previous, new) if t is not None and t.speaker.strip()))
    if any(text.lower().startswith(f"{sp.lower()}:") for sp in speakers):
        return "copied turn"
    if text.rstrip().endswith("?"):
        return "question"
    words = text.lower().split()
    runs = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    if any(runs.count(r) >= 3 for r in set(runs)):
        return "repetition"
    subjects, rest = event_subjects(text, speakers)
    if any(not is_about(new, person) for person in subjects):
        return "about another person"
    source = " ".join(t.text for t in (previous, new) if t is not None)
    if content_words(rest) and grounding(rest, source) < min_grounding:
        return "not grounded"
    return ""


class EventWeave(Component):
    name = "eventweave"
    tables = EventTables
    settings_sections = ("eventweave",)

    def __init__(self, memory):
        super().__init__(memory)
        self.weaver = GraphWeaver(self.store, self.config.eventweave)

    def generation_stages(self) -> tuple[str, ...]:
        return ("ew-extract", "ew-summary")

    @property
    def before_key_existed(self) -> dict:
        """A store this system has built nothing in yet (a box memory it is added to) takes the config's settings."""
        if self.store.db.execute("SELECT 1 FROM ew_pairs LIMIT 1").fetchone() is None:
            return self.build_settings()
        return {}

    def build_settings(self) -> dict:
        out = super().build_settings()
        for key in RETRIEVAL_KEYS:
            out.pop(f"eventweave.{key}", None)
        # the event graph's own model, as what decides its output (threads, batch sizes... are free to change)
        llm = self.config.stage_llms().get("ew-extract", self.config.llm)
        out["eventweave.llm"] = {"backend": llm.backend, "model": llm.model, "temperature": llm.temperature}
        return out

    # ---- building -------------------------------------------------------------------------------
    def build_step(self, conversation_id: str, seal: bool, progress: Callable[[int], None] | None = None) -> Step:
        tried: set[str] = set()  # sessions whose summary failed in this step (retried by the next build)
        yield from self._catch_up(conversation_id, tried, progress)
        pairs = self.store.ew_pairs(conversation_id)
        previous: Message | None = None
        for m in self.store.messages(conversation_id):
            if m.message_id not in pairs:
                yield from self.extract(previous, m)
                if progress:
                    progress(1)
                if previous is not None and previous.session != m.session:
                    yield from self.summarise(conversation_id, False, tried)  # the session before is complete
            previous = m
        yield from self.summarise(conversation_id, seal, tried)

    def seal_step(self, conversation_id: str) -> Step:
        """Retry failed pairs and summaries, weave what is left, summarise every session with events."""
        tried: set[str] = set()
        yield from self._catch_up(conversation_id, tried)
        yield from self.summarise(conversation_id, True, tried)

    def _catch_up(self, conversation_id: str, tried: set[str],
                  progress: Callable[[int], None] | None = None) -> Step:
        self.weaver.weave_pending(conversation_id)  # events an interruption left unwoven
        failed = [mid for mid, r in self.store.ew_pairs(conversation_id).items() if r["status"] == "failed"]
        if failed:
            messages = self.store.messages(conversation_id)
            for i, m in enumerate(messages):
                if m.message_id in failed:
                    yield from self.extract(messages[i - 1] if i else None, m)
                    if progress:
                        progress(1)
        yield from self.summarise(conversation_id, False, tried)

    def extract(self, previous: Message | None, m: Message) -> Step:
        """One pair's extraction call; its events are stored and woven. A failed call is recorded on the pair."""
        if previous is not None and previous.session != m.session:
            previous = None  # a turn of an earlier session is no context for this one
        cfg, conv = self.config.eventweave, m.conversation_id
        previous_id = previous.message_id if previous is not None else ""
        schema = turn_events_schema(cfg.max_events, cfg.max_event_chars, cfg.max_when_chars)
        n_ctx = self.config.stage_llms().get("ew-extract", self.config.llm).n_ctx
        try:  # a turn too long for the model's context is read from an excerpt (the events' grounding reads it whole)
            res, _ = yield from excerpted_call(
                [previous, m] if previous is not None else [m], excerpt_budget(n_ctx, cfg.max_tokens),
                lambda shown: JsonRequest(turn_events_prompt(shown[0] if len(shown) == 2 else None, shown[-1]),
                                          schema, stage="ew-extract", max_tokens=cfg.max_tokens,
                                          about=f"turn {m.message_id}"))
        except BackendError as exc:
            self.store.ew_fail_pair(conv, m.message_id, previous_id, f"extraction failed: {exc}")
            return []
        turns = [previous, m] if previous is not None else [m]
        events: list[GraphEvent] = []
        seen: set[str] = set()
        dropped: dict[str, int] = {}
        for item in res.data.get("events", []):
            text = " ".join(str(item.get("text", "")).split())
            if not text or text.lower() in seen:
                continue
            seen.add(text.lower())
            why = unkept(text, previous, m, cfg.min_grounding)
            if why:
                dropped[why] = dropped.get(why, 0) + 1
                continue
            when = next((w for w in (" ".join(str(item.get("when", "")).split()), find_time_phrase(text) or "")
                         if w and _said(w, turns)), "")
            date, first, last = (resolve_when(when, m.session_date) if when else None) or ("", "", "")
            events.append(GraphEvent(0, conv, m.seq, len(events), text, when, date, first, last, m.session,
                                     m.session_date, [t.message_id for t in turns], None, None))
        if events:
            vecs = yield EmbedRequest(tuple(e.text for e in events) +
                                      tuple(context_text(e.text, turns) for e in events))
            for i, e in enumerate(events):
                e.vector, e.context_vector = vecs[i], vecs[len(events) + i]
        self.store.ew_save_pair(conv, m.message_id, previous_id, events, dropped)
        self.weaver.weave_pending(conv)
        return events

    def summarise(self, conversation_id: str, seal: bool, tried: set[str]) -> Step:
        """One call per complete session with events and no summary yet (see `due`)."""
        cfg = self.config.eventweave
        if not cfg.summaries:
            return
        for session, date, events in self.due(conversation_id, seal):
            if session in tried:
                continue
            tried.add(session)
            try:
                res = yield JsonRequest(session_summary_prompt([e.text for e in events[:SUMMARY_EVENTS]], date),
                                        session_summary_schema(cfg.max_summary_chars), stage="ew-summary",
                                        max_tokens=cfg.summary_max_tokens, about=f"session {session}")
            except BackendError as exc:
                self.store.ew_save_summary(conversation_id, session, date, "failed", error=f"summary failed: {exc}",
                                           events=len(events))
                continue
            self.store.ew_save_summary(conversation_id, session, date, "done",
                                       text=" ".join(str(res.data.get("summary", "")).split()), events=len(events))

    def due(self, conversation_id: str, seal: bool) -> list[tuple[str, str, list[GraphEvent]]]:
        """Sessions to summarise: with events, no summary done, every message extracted (a failed pair holds its
        session's summary back until it is retried), and followed by a session already extracted in part (or,
        with `seal`, the last one too); (session, date, events)."""
        if not self.config.eventweave.summaries:
            return []
        s = self.store
        pairs = s.ew_pairs(conversation_id)
        done = {r["session"] for r in s.ew_summaries(conversation_id) if r["status"] == "done"}
        order: dict[str, tuple[str, bool]] = {}  # session -> (date, every message extracted)
        for m in s.messages(conversation_id):
            date, complete = order.get(m.session, (m.session_date, True))
            order[m.session] = (date, complete and m.message_id in pairs and pairs[m.message_id]["status"] == "done")
        events: dict[str, list[GraphEvent]] = {}
        for e in s.ew_events(conversation_id, woven=True):
            events.setdefault(e.session, []).append(e)
        sessions = list(order)
        started = {m.session for m in s.messages(conversation_id) if m.message_id in pairs}
        out = []
        for i, session in enumerate(sessions):
            later = any(x in started for x in sessions[i + 1:])
            date, complete = order[session]
            if session not in done and events.get(session) and complete and (seal or later):
                out.append((session, date, events[session]))
        return out

    def pending(self, conversation_id: str) -> int:
        """Messages whose pair is not extracted yet, or failed (retried, and counted, by the next build step)."""
        pairs = self.store.ew_pairs(conversation_id)
        return sum(m.message_id not in pairs or pairs[m.message_id]["status"] == "failed"
                   for m in self.store.messages(conversation_id))

    def todo(self, conversation_id: str) -> int:
        """Messages not extracted or failed, unwoven events (1 if any), summaries left (as a seal would)."""
        unwoven = self.store.ew_counts(conversation_id)["ew_events_unwoven"] > 0
        return self.pending(conversation_id) + unwoven + len(self.due(conversation_id, True))

    # ---- reading --------------------------------------------------------------------------------
    def snapshot(self, conversation_id: str) -> GraphSnapshot:
        """The conversation's woven events, node PageRank (edge-strength transitions) and session order."""
        s = self.store
        snap = GraphSnapshot(s.ew_events(conversation_id, woven=True),
                             pagerank(s, conversation_id, self.config.eventweave.damping))
        for m in s.messages(conversation_id):
            snap.sessions.setdefault(m.session, len(snap.sessions))
            snap.session_dates.setdefault(m.session, m.session_date)
            snap.messages[m.message_id] = m
        return snap

    def graph(self, conversation_id: str):
        """The conversation's graph as a networkx MultiDiGraph (eventweave_graph.networkx_graph)."""
        from .eventweave_graph import networkx_graph

        return networkx_graph(self.store, conversation_id)

    # ---- forgetting -----------------------------------------------------------------------------
    def forget(self, conversation_id: str, message_ids: list[str]) -> dict[str, int]:
        """Delete the pairs that showed these messages (as the new turn or the turn before) with their events, the
        summaries of their sessions and the cached vectors of the events' texts, then replay the graph from the
        events left. The next build extracts the pairs again whose new turn is still stored (with the turn now
        before it) and summarises those sessions again."""
        return self._undo(conversation_id, message_ids, deleted=True)

    def revise(self, conversation_id: str, message_ids: list[str]) -> dict[str, int]:
        """As forget, for messages whose text changes (Memory.update): their pairs are extracted again."""
        return self._undo(conversation_id, message_ids, deleted=False)

    def _undo(self, conversation_id: str, message_ids: list[str], deleted: bool) -> dict[str, int]:
        s = self.store
        gone = set(message_ids) if deleted else set()
        messages = {m.message_id: m for m in s.messages(conversation_id)}
        if deleted and set(messages) <= gone:
            texts = derived_texts(s, s.ew_events(conversation_id))
            with s.transaction():
                n = s.ew_delete_conversation(conversation_id)
                s.db.execute("DELETE FROM meta WHERE key=?", (f"eventweave:{conversation_id}",))
                cached = s.forget_vectors(texts)
            return {"ew_events": n["ew_events"], "ew_nodes": n["ew_nodes"], "ew_summaries": n["ew_summaries"],
                    "ew_pairs_to_extract": 0, "cached_vectors": cached}
        pairs = s.ew_pairs_touching(conversation_id, message_ids)
        rows = {r["id"]: r for r in s.ew_pairs(conversation_id).values()}
        events = s.ew_events_of_pairs(pairs)
        sessions = {e.session for e in events} | {messages[rows[p]["message_id"]].session for p in pairs}
        texts = derived_texts(s, events)
        with s.transaction():
            summaries = s.ew_delete_summaries(conversation_id, sessions)
            s.ew_delete_pairs(pairs)
            cached = s.forget_vectors(texts)
            self.weaver.rebuild(conversation_id)
        again = sum(rows[p]["message_id"] not in gone for p in pairs)
        return {"ew_events": len(events), "ew_summaries": summaries, "ew_pairs_to_extract": again,
                "cached_vectors": cached}

    # ---- reporting ------------------------------------------------------------------------------
    def stats(self, conversation_id: str | None = None) -> dict:
        c = self.store.ew_counts(conversation_id)
        convs = [conversation_id] if conversation_id is not None else self.store.conversations()
        evicted = [counters(self.store, x) for x in convs]
        nodes, events = c["ew_nodes"], c["ew_events"]
        return {"eventweave": {
            "pairs": c.get("ew_pairs.done", 0) + c.get("ew_pairs.failed", 0),
            # pairs whose extraction failed (the error is on the pair, `membox show --graph`): retried next build
            "failed_pairs": c.get("ew_pairs.failed", 0),
            "events": events,
            "nodes": nodes,
            "events_per_node": round(events / nodes, 2) if nodes else 0.0,
            "edges": {k: c.get(f"ew_edges.{k}", 0) for k in ("sequential", "temporal", "reasoning")},
            "updates": c["ew_updates"],
            "summaries": c.get("ew_summaries.done", 0),
            "failed_summaries": c.get("ew_summaries.failed", 0),
            "evicted_nodes": sum(x.get("evicted_nodes", 0) for x in evicted),
            # extracted items not kept, by reason (`unkept`): counted, never silently lost
            "dropped_items": {k.split(".", 1)[1]: v for k, v in sorted(c.items()) if k.startswith("ew_dropped.")},
        }}

    def failures(self, conversations: list[str]) -> tuple[int, int]:
        """(pairs whose extraction failed, pairs extracted or failed) over these conversations."""
        pairs = [r for c in conversations for r in self.store.ew_pairs(c).values()]
        return sum(r["status"] == "failed" for r in pairs), len(pairs)

    def warnings(self, conversations: list[str]) -> list[str]:
        failed, _ = self.failures(conversations)
        summaries = sum(r["status"] == "failed" for c in conversations for r in self.store.ew_summaries(c))
        out = []
        if failed:
            out.append(f"{failed} turn pair(s) failed event extraction (see `membox show {self.memory.path} --graph`);"
                       f" rerun the same build to retry them")
        if summaries:
            out.append(f"{summaries} session summary call(s) failed; rerun the same build to retry them")
        return out


def _said(expression: str, turns: list[Message]) -> bool:
    """Whether a time expression is words of the turns (a model may not invent one, nor copy the chat date)."""
    words = " ".join(expression.lower().split())
    return any(words in " ".join(t.text.lower().split()) for t in turns)


COMPONENT = EventWeave
