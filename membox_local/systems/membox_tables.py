"""The box memory's tables and queries: boxes (a run of messages on one topic, with its record), their events,
and the Trace Weaver's traces. A mixin that `store.store_class` composes with the shared `Store`; the filing
of messages into boxes writes the messages table's box columns. Every change to a box is recorded in the shared
history table (Store.record): opened, sealed, extracted (again), failed, invalidated, woven, deleted.
"""
from __future__ import annotations

import json
import sqlite3
from typing import Any, Iterable, Mapping

from ..records import Box, Event, Message, Trace
from ..store import NotFound, counted, store_class

SCHEMA = """
CREATE TABLE IF NOT EXISTS boxes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    session TEXT NOT NULL,
    session_date TEXT NOT NULL,
    status TEXT NOT NULL,
    topic TEXT NOT NULL DEFAULT '',
    keywords TEXT NOT NULL DEFAULT '[]',
    error TEXT NOT NULL DEFAULT '',
    woven INTEGER NOT NULL DEFAULT 0,
    note TEXT NOT NULL DEFAULT '',
    dropped TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS boxes_conv ON boxes (conversation_id, status);
CREATE INDEX IF NOT EXISTS messages_box ON messages (box_id, seq);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    box_id INTEGER NOT NULL REFERENCES boxes(id),
    conversation_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    text TEXT NOT NULL,
    date TEXT NOT NULL,
    grounding REAL NOT NULL,
    sources TEXT
);
CREATE INDEX IF NOT EXISTS events_box ON events (box_id);
CREATE TABLE IF NOT EXISTS traces (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    summary TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS trace_events (
    trace_id INTEGER NOT NULL REFERENCES traces(id),
    event_id INTEGER NOT NULL REFERENCES events(id),
    PRIMARY KEY (trace_id, event_id)
);
CREATE INDEX IF NOT EXISTS trace_events_event ON trace_events (event_id);
"""


class BoxTables:
    """Mixin for `Store`: uses its connection (`db`), `transaction()` and `_message`."""

    TABLES = "membox"
    SCHEMA = SCHEMA
    # what the box modes read (a box's membership is the messages' box_id, counted by the core's triggers)
    TRIGGERS = tuple(t for table in ("boxes", "events", "traces", "trace_events") for t in counted(table)) + \
        counted("boxes", ("DELETE",), "erased")
    SCHEMA_VERSION = 4
    # 2: boxes.note, what the record was made from when it is not the whole box (an excerpt of an over-long box)
    # 3: events.sources, the JSON list of the message ids an event was read from (NULL: extracted before schema 3,
    #    "no sources"), and boxes.dropped, the JSON object of what the code dropped or corrected in the record
    COLUMNS_ADDED = {2: (("boxes", "note", "TEXT NOT NULL DEFAULT ''"),),
                     3: (("events", "sources", "TEXT"), ("boxes", "dropped", "TEXT NOT NULL DEFAULT '{}'"))}
    # how sharded builds are merged (execution/merge.py merge_rules): table -> {column: the table whose ids it holds}
    ID_COLUMNS = {
        "messages": {"box_id": "boxes"},
        "llm_usage": {"box_id": "boxes"},
        "boxes": {"id": "boxes"},
        "events": {"id": "events", "box_id": "boxes"},
        "traces": {"id": "traces"},
        "trace_events": {"trace_id": "traces", "event_id": "events"},
        "history": {"box_id": "boxes"},
    }
    OWN_ID = {"boxes": "id", "events": "id", "traces": "id"}

    # ---- filing messages ------------------------------------------------------------------------
    def file_message(self, m: Message, box_id: int, decision: str, score: float | None) -> None:
        with self.transaction():
            self.db.execute(
                "UPDATE messages SET box_id=?, decision=?, score=?, processed=1 "
                "WHERE conversation_id=? AND message_id=?",
                (box_id, decision, score, m.conversation_id, m.message_id),
            )

    def move_messages(self, messages: list[Message], from_box: int, to_box: int) -> None:
        """Refile `messages` (the tail of the open box `from_box`) into the box `to_box`; the first of them is
        labelled "split", the box it opens (loom.cap_split "weakest"). Recorded in `from_box`'s history."""
        with self.transaction():
            for i, m in enumerate(messages):
                self.db.execute("UPDATE messages SET box_id=?, decision=CASE WHEN ? THEN 'split' ELSE decision END "
                                "WHERE conversation_id=? AND message_id=? AND box_id=?",
                                (to_box, i == 0, m.conversation_id, m.message_id, from_box))
            self._record_box(from_box, "split", {"moved": len(messages), "to_box": to_box})

    def box_scores(self, box_id: int) -> list[float | None]:
        """The continue scores its messages were filed with (Decision.score), in order."""
        return [r[0] for r in self.db.execute("SELECT score FROM messages WHERE box_id=? ORDER BY seq", (box_id,))]

    def filed_messages(self, conversation_id: str, last: int) -> list[Message]:
        """The conversation's `last` messages already filed into boxes, oldest first."""
        rows = self.db.execute(
            "SELECT * FROM messages WHERE conversation_id=? AND processed=1 ORDER BY seq DESC LIMIT ?",
            (conversation_id, last),
        ).fetchall()
        return [self._message(r) for r in reversed(rows)]

    # ---- boxes ----------------------------------------------------------------------------------
    def open_box(self, m: Message) -> int:
        with self.transaction():
            cur = self.db.execute(
                "INSERT INTO boxes (conversation_id, session, session_date, status) VALUES (?, ?, ?, 'open')",
                (m.conversation_id, m.session, m.session_date),
            )
            self.record(m.conversation_id, "add", box_id=int(cur.lastrowid))
            return int(cur.lastrowid)

    # what a box's history calls a move to these statuses (a move to 'extracted' is save_extraction's, or the
    # weaver recording or clearing its error)
    STATUS_EVENTS = {"sealed": "seal", "failed": "extract-failed"}

    def set_box_status(self, box_id: int, status: str, error: str = "") -> None:
        with self.transaction():
            self.db.execute("UPDATE boxes SET status=?, error=? WHERE id=?", (status, error, box_id))
            if status in self.STATUS_EVENTS:
                self._record_box(box_id, self.STATUS_EVENTS[status])

    def _record_box(self, box_id: int, event: str, detail: Mapping[str, Any] | None = None) -> None:
        conv = self.db.execute("SELECT conversation_id FROM boxes WHERE id=?", (box_id,)).fetchone()[0]
        self.record(conv, event, box_id=box_id, detail=detail)

    def save_extraction(self, box_id: int, topic: str, keywords: list[str], events: list[Event],
                        note: str = "", dropped: Mapping[str, int] | None = None) -> list[Event]:
        """Write a box's record and its events in one transaction; returns the events with their ids. `note`:
        what the record was made from when it is not the whole box (Loom.extract's excerpt); `dropped`: what the
        code dropped or corrected (Box.dropped)."""
        stored = []
        with self.transaction():
            # extracted again: after an update or a forget dropped its record (an imported box's first is not here)
            again = self.db.execute("SELECT 1 FROM history WHERE box_id=? AND event='invalidate' LIMIT 1",
                                    (box_id,)).fetchone() is not None
            self._record_box(box_id, "re-extract" if again else "extract", {"events": len(events)})
            self.db.execute("DELETE FROM events WHERE box_id=?", (box_id,))
            self.db.execute(
                "UPDATE boxes SET topic=?, keywords=?, status='extracted', error='', note=?, dropped=? WHERE id=?",
                (topic, json.dumps(keywords), note, json.dumps(dict(dropped or {})), box_id),
            )
            for i, e in enumerate(events):
                sources = None if e.sources is None else json.dumps(list(e.sources))
                cur = self.db.execute(
                    "INSERT INTO events (box_id, conversation_id, idx, text, date, grounding, sources) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (box_id, e.conversation_id, i, e.text, e.date, e.grounding, sources),
                )
                stored.append(Event(int(cur.lastrowid), box_id, e.conversation_id, e.text, e.date, e.grounding,
                                    None if e.sources is None else list(e.sources)))
        return stored

    def _box(self, row: sqlite3.Row, with_messages: bool = True) -> Box:
        box = Box(
            id=row["id"], conversation_id=row["conversation_id"], session=row["session"],
            session_date=row["session_date"], status=row["status"], topic=row["topic"],
            keywords=json.loads(row["keywords"]), error=row["error"], note=row["note"],
            dropped=json.loads(row["dropped"]),
        )
        if with_messages:
            rows = self.db.execute("SELECT * FROM messages WHERE box_id=? ORDER BY seq", (box.id,)).fetchall()
            box.messages = [self._message(r) for r in rows]
            box.events = self.events_of_box(box.id)
        return box

    def box_ids(self, status: str | None = None) -> list[int]:
        if status is None:
            return [r[0] for r in self.db.execute("SELECT id FROM boxes ORDER BY id")]
        return [r[0] for r in self.db.execute("SELECT id FROM boxes WHERE status=? ORDER BY id", (status,))]

    def box(self, box_id: int) -> Box:
        row = self.db.execute("SELECT * FROM boxes WHERE id=?", (box_id,)).fetchone()
        if row is None:
            raise NotFound(f"{self.path.parent}: no box {box_id}")
        return self._box(row)

    def box_rows(self, conversation_id: str) -> list[sqlite3.Row]:
        """The conversation's box rows as stored (with `woven`, which Box does not carry), by id."""
        return self.db.execute("SELECT * FROM boxes WHERE conversation_id=? ORDER BY id", (conversation_id,)).fetchall()

    def boxes(self, conversation_id: str | None = None, status: str | None = None,
              with_messages: bool = True) -> list[Box]:
        """The boxes by id, each with its messages and events (`with_messages`; else its row alone)."""
        sql, args = "SELECT * FROM boxes WHERE 1=1", []
        if conversation_id is not None:
            sql += " AND conversation_id=?"
            args.append(conversation_id)
        if status is not None:
            sql += " AND status=?"
            args.append(status)
        return [self._box(r, with_messages) for r in self.db.execute(sql + " ORDER BY id", args).fetchall()]

    def boxes_after(self, conversation_id: str, box_id: int) -> list[Box]:
        """The conversation's boxes with an id above `box_id`, by id (those filed after it)."""
        rows = self.db.execute("SELECT * FROM boxes WHERE conversation_id=? AND id>? ORDER BY id",
                               (conversation_id, box_id)).fetchall()
        return [self._box(r) for r in rows]

    def current_open_box(self, conversation_id: str) -> Box | None:
        row = self.db.execute(
            "SELECT * FROM boxes WHERE conversation_id=? AND status='open' ORDER BY id DESC LIMIT 1",
            (conversation_id,),
        ).fetchone()
        return self._box(row) if row else None

    def mark_woven(self, box_id: int) -> None:
        with self.transaction():
            self.db.execute("UPDATE boxes SET woven=1 WHERE id=?", (box_id,))
            self._record_box(box_id, "weave")

    def unwoven_boxes(self, conversation_id: str) -> list[Box]:
        rows = self.db.execute(
            "SELECT * FROM boxes WHERE conversation_id=? AND status='extracted' AND woven=0 ORDER BY id",
            (conversation_id,),
        ).fetchall()
        return [self._box(r) for r in rows]

    # ---- events and traces ----------------------------------------------------------------------
    @staticmethod
    def _event(row: sqlite3.Row) -> Event:
        sources = row["sources"]
        return Event(row["id"], row["box_id"], row["conversation_id"], row["text"], row["date"], row["grounding"],
                     None if sources is None else json.loads(sources))

    def events_of_box(self, box_id: int) -> list[Event]:
        rows = self.db.execute("SELECT * FROM events WHERE box_id=? ORDER BY idx", (box_id,)).fetchall()
        return [self._event(r) for r in rows]

    def events(self, conversation_id: str | None = None) -> list[Event]:
        if conversation_id is None:
            rows = self.db.execute("SELECT * FROM events ORDER BY id").fetchall()
        else:
            rows = self.db.execute(
                "SELECT * FROM events WHERE conversation_id=? ORDER BY id", (conversation_id,)
            ).fetchall()
        return [self._event(r) for r in rows]

    def event(self, event_id: int) -> Event:
        return self._event(self.db.execute("SELECT * FROM events WHERE id=?", (event_id,)).fetchone())

    def create_trace(self, conversation_id: str, summary: str, event_ids: list[int]) -> int:
        with self.transaction():
            cur = self.db.execute(
                "INSERT INTO traces (conversation_id, summary) VALUES (?, ?)", (conversation_id, summary)
            )
            tid = int(cur.lastrowid)
            self.add_to_trace(tid, event_ids)
            return tid

    def add_to_trace(self, trace_id: int, event_ids: list[int]) -> None:
        with self.transaction():
            for eid in event_ids:
                self.db.execute("INSERT OR IGNORE INTO trace_events VALUES (?, ?)", (trace_id, eid))

    def traces(self, conversation_id: str | None = None) -> list[Trace]:
        sql, args = "SELECT * FROM traces", []
        if conversation_id is not None:
            sql += " WHERE conversation_id=?"
            args.append(conversation_id)
        out = []
        for r in self.db.execute(sql + " ORDER BY id", args).fetchall():
            ids = [x[0] for x in self.db.execute(
                "SELECT event_id FROM trace_events WHERE trace_id=? ORDER BY event_id", (r["id"],))]
            out.append(Trace(r["id"], r["conversation_id"], r["summary"], ids))
        return out

    def traces_of_event(self, event_id: int) -> list[int]:
        return [r[0] for r in self.db.execute("SELECT trace_id FROM trace_events WHERE event_id=?", (event_id,))]

    def traces_with_events(self, conversation_id: str | None = None) -> list[tuple[Trace, list[Event]]]:
        """Every trace with its events in conversation order (two queries, whatever the number of traces)."""
        where, args = ("WHERE t.conversation_id=?", [conversation_id]) if conversation_id is not None else ("", [])
        members: dict[int, list[Event]] = {}
        for r in self.db.execute(
            "SELECT te.trace_id, e.*, p.pos FROM trace_events te JOIN events e ON e.id=te.event_id "
            "JOIN traces t ON t.id=te.trace_id LEFT JOIN (SELECT box_id, MIN(seq) AS pos FROM messages "
            f"WHERE box_id IS NOT NULL GROUP BY box_id) p ON p.box_id=e.box_id {where} "
            "ORDER BY te.trace_id, p.pos, e.box_id, e.idx", args,
        ):
            members.setdefault(r["trace_id"], []).append(self._event(r))
        out = []
        for r in self.db.execute(f"SELECT * FROM traces t {where} ORDER BY t.id", args).fetchall():
            events = members.get(r["id"], [])
            out.append((Trace(r["id"], r["conversation_id"], r["summary"], [e.id for e in events]), events))
        return out

    # ---- forgetting -----------------------------------------------------------------------------
    def boxes_holding(self, conversation_id: str, message_ids: list[str]) -> list[int]:
        """Ids of the conversation's boxes that hold one of these messages."""
        return sorted({r[0] for cur in self._in_chunks(
            "SELECT DISTINCT box_id FROM messages WHERE conversation_id=? AND box_id IS NOT NULL "
            "AND message_id IN ({marks})", list(message_ids), conversation_id) for r in cur})

    def forget_boxes(self, box_ids: list[int], message_ids: list[str], cause: str = "delete") -> dict[str, int]:
        """Undo what the box memory derived in these boxes, which lose the messages `message_ids` (deleted by
        the caller right after, in the same transaction; none when a message's text changes instead, `cause`
        "update"). Every trace holding one of their events is deleted (its summary may quote them), and the other
        boxes with events in it are marked unwoven, so the next build weaves them again. Their events go; a box
        left with no message is deleted; a box keeping some loses its record (topic, keywords, error) and, unless
        still open, goes back to 'sealed', so that the next build extracts it again (Loom.finish_pending). The
        history records each box deleted or invalidated, with the cause."""
        gone = set(message_ids)
        counts = {"boxes": 0, "events": 0, "traces": 0, "boxes_to_extract": 0, "boxes_to_weave": 0}
        if not box_ids:
            return counts
        with self.transaction():
            events: list[int] = []
            for bid in box_ids:
                events += [r[0] for r in self.db.execute("SELECT id FROM events WHERE box_id=?", (bid,))]
            traces: set[int] = set()
            for eid in events:
                traces.update(self.traces_of_event(eid))
            rewoven: set[int] = set()
            for tid in sorted(traces):
                rewoven.update(r[0] for r in self.db.execute(
                    "SELECT DISTINCT e.box_id FROM trace_events te JOIN events e ON e.id=te.event_id "
                    "WHERE te.trace_id=?", (tid,)))
                self.db.execute("DELETE FROM trace_events WHERE trace_id=?", (tid,))
                self.db.execute("DELETE FROM traces WHERE id=?", (tid,))
            rewoven -= set(box_ids)
            for bid in sorted(rewoven):
                self.db.execute("UPDATE boxes SET woven=0 WHERE id=?", (bid,))
            for bid in box_ids:
                counts["events"] += self.db.execute("DELETE FROM events WHERE box_id=?", (bid,)).rowcount
                kept = [r[0] for r in self.db.execute("SELECT message_id FROM messages WHERE box_id=?", (bid,))
                        if r[0] not in gone]
                if not kept:
                    self._record_box(bid, "delete", {"cause": cause})
                    self.db.execute("UPDATE messages SET box_id=NULL WHERE box_id=?", (bid,))
                    counts["boxes"] += self.db.execute("DELETE FROM boxes WHERE id=?", (bid,)).rowcount
                    continue
                self._record_box(bid, "invalidate", {"cause": cause})
                status = self.db.execute("SELECT status FROM boxes WHERE id=?", (bid,)).fetchone()[0]
                self.db.execute(
                    "UPDATE boxes SET status=?, topic='', keywords='[]', error='', woven=0, note='', dropped='{}' "
                    "WHERE id=?",
                    ("open" if status == "open" else "sealed", bid),
                )
                counts["boxes_to_extract"] += status != "open"
            counts["traces"] = len(traces)
            counts["boxes_to_weave"] = len(rewoven)
        return counts

    # ---- export and import (exchange.py) --------------------------------------------------------
    def restore_boxes(self, boxes: Iterable[Mapping[str, Any]], detail: Mapping[str, Any]) -> int:
        """Insert boxes as an export wrote them, under their own ids: the box row's columns (`keywords` a list,
        `dropped` a dict, {} when missing) and `events` (dicts with id, text, date, grounding and sources, a list of
        message ids or None when missing, in their order); each recorded in the history as added, with `detail`.
        Returns how many boxes."""
        n = 0
        with self.transaction():
            for b in boxes:
                self.db.execute(
                    "INSERT INTO boxes (id, conversation_id, session, session_date, status, topic, keywords, error, "
                    "woven, note, dropped) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (b["id"], b["conversation_id"], b["session"], b["session_date"], b["status"], b["topic"],
                     json.dumps(b["keywords"]), b["error"], b["woven"], b.get("note", ""),
                     json.dumps(dict(b.get("dropped") or {}))))
                for idx, e in enumerate(b["events"]):
                    sources = e.get("sources")  # None: the event kept no sources (NULL)
                    self.db.execute(
                        "INSERT INTO events (id, box_id, conversation_id, idx, text, date, grounding, sources) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (e["id"], b["id"], b["conversation_id"], idx, e["text"], e["date"], e["grounding"],
                         None if sources is None else json.dumps(list(sources))))
                self.record(b["conversation_id"], "add", box_id=b["id"], detail=detail)
                n += 1
        return n

    def restore_traces(self, traces: Iterable[Trace]) -> int:
        """Insert traces as an export wrote them, under their own ids, with their events; returns how many."""
        n = 0
        with self.transaction():
            for t in traces:
                self.db.execute("INSERT INTO traces (id, conversation_id, summary) VALUES (?, ?, ?)",
                                (t.id, t.conversation_id, t.summary))
                self.add_to_trace(t.id, t.event_ids)
                n += 1
        return n


# the shared store with the box memory's tables (what a Memory with [memory] systems = ["membox"] opens)
BoxStore = store_class([BoxTables])
