"""SQLite is the source of truth: messages, boxes, events, traces, embeddings and LLM usage.

The schema is versioned (meta.schema_version) and the database runs in WAL mode. A message row is written
before it is processed and marked processed in the same transaction that files it into a box, so an
interrupted build resumes exactly where it stopped.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from .records import Box, Event, Message, Trace

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    uid INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    speaker TEXT NOT NULL,
    text TEXT NOT NULL,
    session TEXT NOT NULL,
    session_date TEXT NOT NULL,
    box_id INTEGER,
    decision TEXT,
    score REAL,
    processed INTEGER NOT NULL DEFAULT 0,
    UNIQUE (conversation_id, message_id)
);
CREATE INDEX IF NOT EXISTS messages_conv_seq ON messages (conversation_id, seq);
CREATE TABLE IF NOT EXISTS boxes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    session TEXT NOT NULL,
    session_date TEXT NOT NULL,
    status TEXT NOT NULL,
    topic TEXT NOT NULL DEFAULT '',
    keywords TEXT NOT NULL DEFAULT '[]',
    error TEXT NOT NULL DEFAULT '',
    woven INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS boxes_conv ON boxes (conversation_id, status);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    box_id INTEGER NOT NULL REFERENCES boxes(id),
    conversation_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    text TEXT NOT NULL,
    date TEXT NOT NULL,
    grounding REAL NOT NULL
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
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    key TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, key)
);
CREATE TABLE IF NOT EXISTS llm_usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    box_id INTEGER,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_conv ON llm_usage (conversation_id, stage);
"""


class StoreError(RuntimeError):
    pass


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class Store:
    """A memory folder's database. One connection, guarded by a lock; writes go through `transaction()`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self._depth = 0
        self._migrate()

    # ---- plumbing -------------------------------------------------------------------------------
    def _migrate(self) -> None:
        with self.transaction():
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    self.db.execute(stmt)
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row["value"]) > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {row['value']}, newer than this membox_local "
                    f"({SCHEMA_VERSION}); upgrade membox_local"
                )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            outer = self._depth == 0
            if outer:
                self.db.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self.db
            except BaseException:
                self._depth -= 1
                if outer:
                    self.db.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outer:
                self.db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row["value"] if row else default

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # ---- messages -------------------------------------------------------------------------------
    def add_messages(self, messages: Iterable[Message]) -> int:
        """Insert messages not yet stored; returns how many were new. Same id with other text is an error."""
        added = 0
        with self.transaction():
            for m in messages:
                row = self.db.execute(
                    "SELECT speaker, text FROM messages WHERE conversation_id=? AND message_id=?",
                    (m.conversation_id, m.message_id),
                ).fetchone()
                if row is not None:
                    if row["text"] != m.text or row["speaker"] != m.speaker:
                        raise StoreError(
                            f"message {m.conversation_id}/{m.message_id} is already stored with other "
                            f"content; message ids must be stable"
                        )
                    continue
                seq = self.db.execute(
                    "SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE conversation_id=?",
                    (m.conversation_id,),
                ).fetchone()[0]
                self.db.execute(
                    "INSERT INTO messages (conversation_id, message_id, seq, speaker, text, session, session_date)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (m.conversation_id, m.message_id, seq, m.speaker, m.text, m.session, m.session_date),
                )
                added += 1
        return added

    @staticmethod
    def _message(row: sqlite3.Row) -> Message:
        return Message(
            conversation_id=row["conversation_id"], message_id=row["message_id"], speaker=row["speaker"],
            text=row["text"], session=row["session"], session_date=row["session_date"], seq=row["seq"],
        )

    def pending_messages(self, conversation_id: str) -> list[Message]:
        rows = self.db.execute(
            "SELECT * FROM messages WHERE conversation_id=? AND processed=0 ORDER BY seq", (conversation_id,)
        ).fetchall()
        return [self._message(r) for r in rows]

    def messages(self, conversation_id: str) -> list[Message]:
        rows = self.db.execute(
            "SELECT * FROM messages WHERE conversation_id=? ORDER BY seq", (conversation_id,)
        ).fetchall()
        return [self._message(r) for r in rows]

    def filed_messages(self, conversation_id: str, last: int) -> list[Message]:
        """The conversation's `last` messages already filed into boxes, oldest first."""
        rows = self.db.execute(
            "SELECT * FROM messages WHERE conversation_id=? AND processed=1 ORDER BY seq DESC LIMIT ?",
            (conversation_id, last),
        ).fetchall()
        return [self._message(r) for r in reversed(rows)]

    def message_uid(self, conversation_id: str, message_id: str) -> int:
        return self.db.execute(
            "SELECT uid FROM messages WHERE conversation_id=? AND message_id=?", (conversation_id, message_id)
        ).fetchone()[0]

    def message_rows(self, conversation_id: str | None = None) -> list[sqlite3.Row]:
        if conversation_id is None:
            return self.db.execute("SELECT * FROM messages ORDER BY conversation_id, seq").fetchall()
        return self.db.execute(
            "SELECT * FROM messages WHERE conversation_id=? ORDER BY seq", (conversation_id,)
        ).fetchall()

    def conversations(self) -> list[str]:
        rows = self.db.execute("SELECT DISTINCT conversation_id FROM messages ORDER BY conversation_id")
        return [r[0] for r in rows]

    def file_message(self, m: Message, box_id: int, decision: str, score: float | None) -> None:
        with self.transaction():
            self.db.execute(
                "UPDATE messages SET box_id=?, decision=?, score=?, processed=1 "
                "WHERE conversation_id=? AND message_id=?",
                (box_id, decision, score, m.conversation_id, m.message_id),
            )

    # ---- boxes ----------------------------------------------------------------------------------
    def open_box(self, m: Message) -> int:
        with self.transaction():
            cur = self.db.execute(
                "INSERT INTO boxes (conversation_id, session, session_date, status) VALUES (?, ?, ?, 'open')",
                (m.conversation_id, m.session, m.session_date),
            )
            return int(cur.lastrowid)

    def set_box_status(self, box_id: int, status: str, error: str = "") -> None:
        with self.transaction():
            self.db.execute("UPDATE boxes SET status=?, error=? WHERE id=?", (status, error, box_id))

    def save_extraction(self, box_id: int, topic: str, keywords: list[str], events: list[Event]) -> list[Event]:
        """Write a box's record and its events in one transaction; returns the events with their ids."""
        stored = []
        with self.transaction():
            self.db.execute("DELETE FROM events WHERE box_id=?", (box_id,))
            self.db.execute(
                "UPDATE boxes SET topic=?, keywords=?, status='extracted', error='' WHERE id=?",
                (topic, json.dumps(keywords), box_id),
            )
            for i, e in enumerate(events):
                cur = self.db.execute(
                    "INSERT INTO events (box_id, conversation_id, idx, text, date, grounding) VALUES (?,?,?,?,?,?)",
                    (box_id, e.conversation_id, i, e.text, e.date, e.grounding),
                )
                stored.append(Event(int(cur.lastrowid), box_id, e.conversation_id, e.text, e.date, e.grounding))
        return stored

    def _box(self, row: sqlite3.Row, with_messages: bool = True) -> Box:
        box = Box(
            id=row["id"], conversation_id=row["conversation_id"], session=row["session"],
            session_date=row["session_date"], status=row["status"], topic=row["topic"],
            keywords=json.loads(row["keywords"]), error=row["error"],
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
            raise StoreError(f"no box {box_id}")
        return self._box(row)

    def boxes(self, conversation_id: str | None = None, status: str | None = None) -> list[Box]:
        sql, args = "SELECT * FROM boxes WHERE 1=1", []
        if conversation_id is not None:
            sql += " AND conversation_id=?"
            args.append(conversation_id)
        if status is not None:
            sql += " AND status=?"
            args.append(status)
        return [self._box(r) for r in self.db.execute(sql + " ORDER BY id", args).fetchall()]

    def current_open_box(self, conversation_id: str) -> Box | None:
        row = self.db.execute(
            "SELECT * FROM boxes WHERE conversation_id=? AND status='open' ORDER BY id DESC LIMIT 1",
            (conversation_id,),
        ).fetchone()
        return self._box(row) if row else None

    def mark_woven(self, box_id: int) -> None:
        with self.transaction():
            self.db.execute("UPDATE boxes SET woven=1 WHERE id=?", (box_id,))

    def unwoven_boxes(self, conversation_id: str) -> list[Box]:
        rows = self.db.execute(
            "SELECT * FROM boxes WHERE conversation_id=? AND status='extracted' AND woven=0 ORDER BY id",
            (conversation_id,),
        ).fetchall()
        return [self._box(r) for r in rows]

    # ---- events and traces ----------------------------------------------------------------------
    @staticmethod
    def _event(row: sqlite3.Row) -> Event:
        return Event(row["id"], row["box_id"], row["conversation_id"], row["text"], row["date"], row["grounding"])

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

    # ---- embeddings cache -----------------------------------------------------------------------
    def cached_vectors(self, model: str, texts: list[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        keys = [text_key(t) for t in texts]
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for r in self.db.execute(
                f"SELECT key, vector FROM embeddings WHERE model=? AND key IN ({marks})", [model, *chunk]
            ):
                out[r["key"]] = np.frombuffer(r["vector"], dtype=np.float32)
        return out

    def put_vectors(self, model: str, texts: list[str], vectors: np.ndarray) -> None:
        with self.transaction():
            self.db.executemany(
                "INSERT OR IGNORE INTO embeddings VALUES (?, ?, ?)",
                [(model, text_key(t), np.asarray(v, dtype=np.float32).tobytes()) for t, v in zip(texts, vectors)],
            )

    # ---- usage ----------------------------------------------------------------------------------
    def record_usage(self, conversation_id: str, stage: str, prompt_tokens: int, completion_tokens: int,
                     box_id: int | None = None) -> None:
        with self.transaction():
            self.db.execute(
                "INSERT INTO llm_usage (conversation_id, stage, box_id, prompt_tokens, completion_tokens)"
                " VALUES (?, ?, ?, ?, ?)",
                (conversation_id, stage, box_id, prompt_tokens, completion_tokens),
            )

    def usage_by_stage(self, conversation_id: str | None = None) -> dict[str, dict[str, int]]:
        sql = ("SELECT stage, COUNT(*) AS calls, SUM(prompt_tokens) AS p, SUM(completion_tokens) AS c "
               "FROM llm_usage")
        args: list = []
        if conversation_id is not None:
            sql += " WHERE conversation_id=?"
            args.append(conversation_id)
        rows = self.db.execute(sql + " GROUP BY stage ORDER BY stage", args).fetchall()
        return {r["stage"]: {"calls": r["calls"], "prompt_tokens": r["p"], "completion_tokens": r["c"]}
                for r in rows}
