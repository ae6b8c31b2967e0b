"""SQLite is the source of truth: one database per memory folder.

`Store` holds the tables every memory system shares (meta, messages, the embedding cache, LLM usage). Each
memory system adds its own tables and queries as a mixin class (`TABLES`, `SCHEMA`, `SCHEMA_VERSION` and its
merge rules, e.g. systems/membox_tables.py); `store_class(mixins)` composes them with `Store`, and opening
the store creates or migrates each part's tables under its own version (meta `schema_version` for the shared
tables, `schema_version.<name>` for a system's; a schema only ever grows, see Store._migrate). The database runs
in WAL mode, each thread on a connection of its own. A message row is written before it is processed and marked
processed in the same transaction that
files it, so an interrupted build resumes exactly where it stopped. The messages table's filing columns (box_id, decision, score, processed)
record the box memory's progress; they predate the split into systems and stay here. The history table
records every change to a message or a box (Memory.history), with ids and counts only, never a message's text.
The build_time table holds each conversation's build seconds by stage (profile.py), beside its token usage; the
store times its own write transactions (`write_s`, `writes`) for it.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from .ingest import metadata_text
from .private import private_file, tighten
from .records import Change, Message
from .store_connections import CACHE_KIB, Connections
from .store_lock import LOCK_FILE, NotFound, StoreBusy, StoreError, WriteLock  # noqa: F401  (the store's API)

SCHEMA_VERSION = 5

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
    user_id TEXT NOT NULL DEFAULT '',
    agent_id TEXT NOT NULL DEFAULT '',
    metadata TEXT NOT NULL DEFAULT '{}',
    UNIQUE (conversation_id, message_id)
);
CREATE INDEX IF NOT EXISTS messages_conv_seq ON messages (conversation_id, seq);
CREATE INDEX IF NOT EXISTS messages_user ON messages (user_id);
CREATE INDEX IF NOT EXISTS messages_agent ON messages (agent_id);
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
    completion_tokens INTEGER NOT NULL,
    cached_tokens INTEGER
);
CREATE INDEX IF NOT EXISTS usage_conv ON llm_usage (conversation_id, stage);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    message_id TEXT,
    box_id INTEGER,
    event TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS history_message ON history (conversation_id, message_id);
CREATE INDEX IF NOT EXISTS history_box ON history (box_id);
CREATE TABLE IF NOT EXISTS build_time (
    conversation_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    wall_s REAL NOT NULL,
    calls INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, stage)
);
"""
# What a reader builds from the rows (a retriever's box map) is kept while nothing it reads changed: `rows` counts every
# insert, update and delete of them, `erased` what takes text away (a message deleted or rewritten, a box deleted), by
# triggers on the tables, so that a write of any connection or process counts (Store.generation; schema 5).
CHANGES = """
CREATE TABLE IF NOT EXISTS changes (what TEXT PRIMARY KEY, n INTEGER NOT NULL);
INSERT OR IGNORE INTO changes VALUES ('rows', 0);
INSERT OR IGNORE INTO changes VALUES ('erased', 0)
"""


def counted(table: str, ops: tuple[str, ...] = ("INSERT", "UPDATE", "DELETE"), row: str = "rows") -> tuple[str, ...]:
    """The triggers that count each of `ops` on `table` in the `changes` row `row` (CHANGES)."""
    return tuple(f"CREATE TRIGGER IF NOT EXISTS {table}_{op.split()[0].lower()}_{'counted' if row == 'rows' else row} "
                 f"AFTER {op} ON {table} "
                 f"BEGIN UPDATE changes SET n = n + 1 WHERE what = '{row}'; END" for op in ops)


TRIGGERS = counted("messages") + counted("messages", ("DELETE", "UPDATE OF text"), "erased")
# Schema 3 added the build_time table (seconds and calls per conversation and build stage, profile.py).
# Columns a schema version added to a table that existed before it: (table, column, declaration), added to a store
# of an older version when it is opened (Store._migrate). New stores get them from SCHEMA's CREATE TABLE.
COLUMNS_ADDED: dict[int, tuple[tuple[str, str, str], ...]] = {
    2: (("messages", "user_id", "TEXT NOT NULL DEFAULT ''"), ("messages", "agent_id", "TEXT NOT NULL DEFAULT ''"),
        ("messages", "metadata", "TEXT NOT NULL DEFAULT '{}'")),
    # of a call's prompt tokens, those the engine kept from its cache (NULL: the backend did not say)
    4: (("llm_usage", "cached_tokens", "INTEGER"),),
}


def utc_now() -> str:
    """The time of a history entry: UTC, ISO 8601 to the microsecond."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def built_systems(db_path: str | Path) -> list[str]:
    """The memory systems built in a store (meta `systems`; a store from before that key holds the box memory
    when it has its tables), read without writing to it; [] when there is no store yet."""
    if not Path(db_path).exists():
        return []
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        row = db.execute("SELECT value FROM meta WHERE key='systems'").fetchone() if "meta" in tables else None
    finally:
        db.close()
    return json.loads(row[0]) if row else (["membox"] if "boxes" in tables else [])


_COMPOSED: dict[tuple[type, ...], type] = {}


def store_class(mixins: "Iterable[type]" = ()) -> type:
    """`Store` with the tables and queries of the given memory systems' mixins (the same class for the same
    mixins, so instances compare by type)."""
    key = tuple(dict.fromkeys(mixins))
    if not key:
        return Store
    if key not in _COMPOSED:
        _COMPOSED[key] = type("Store[" + ",".join(m.TABLES for m in key) + "]", (*key, Store), {})
    return _COMPOSED[key]


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class Store:
    """A memory folder's database: one connection per thread (store_connections.py); writes go through
    `transaction()`, one at a time."""

    TABLES = "core"
    SCHEMA = SCHEMA + ";" + CHANGES
    TRIGGERS = TRIGGERS
    SCHEMA_VERSION = SCHEMA_VERSION
    COLUMNS_ADDED = COLUMNS_ADDED
    ID_COLUMNS = {"messages": {"uid": "messages"}, "llm_usage": {"id": "llm_usage"}, "history": {"id": "history"}}
    OWN_ID = {"messages": "uid", "llm_usage": "id", "history": "id"}
    # build_time: keyed by (conversation, stage), disjoint across shards; changes: a merged store starts a count anew
    KEYED = ("embeddings", "meta", "build_time", "changes")

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if str(path) != ":memory:":
            # owner-only (private.py): the database made 0600 before SQLite opens it, so its -wal and -shm get
            # the same mode; a store an older version made 0644 is tightened here, with its -wal/-shm
            private_file(self.path)
            for suffix in ("-wal", "-shm"):
                tighten(f"{self.path}{suffix}")
            tighten(self.path.parent / LOCK_FILE)  # the folder's write lock (WriteLock), as an older version left it
        # one connection per thread, writes in turn (store_connections.py)
        self._conns = Connections(self.path, self._setup, StoreBusy)
        self._lock = self._conns.lock
        self.db.execute("PRAGMA journal_mode=WAL")
        # seconds spent inside write transactions (BEGIN to COMMIT) and how many committed: the build profile's
        # "store" stage reads their growth around each piece of work (profile.py)
        self.write_s = 0.0
        self.writes = 0
        self._migrate()

    # ---- plumbing -------------------------------------------------------------------------------
    def _migrate(self) -> None:
        """Create or migrate the tables of the shared part and of every mixin, each under its own version, in one
        transaction. A schema only grows: a version adds tables and indexes (SCHEMA's CREATE ... IF NOT EXISTS) and
        columns (COLUMNS_ADDED, added to a store of an older version before SCHEMA runs, so that its indexes find
        them); a store of an older version is lifted to the current one when opened, a newer one is refused."""
        with self.transaction():
            for part in reversed(type(self).__mro__):
                if "SCHEMA" not in part.__dict__:
                    continue
                key = "schema_version" if part.TABLES == "core" else f"schema_version.{part.TABLES}"
                stored = self._schema_version(key)
                if stored is not None and stored > part.SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path} has {part.TABLES} schema version {stored}, newer than this "
                        f"membox_local ({part.SCHEMA_VERSION}); upgrade membox_local"
                    )
                for version in range((stored or part.SCHEMA_VERSION) + 1, part.SCHEMA_VERSION + 1):
                    for table, column, declaration in part.__dict__.get("COLUMNS_ADDED", {}).get(version, ()):
                        self._add_column(table, column, declaration)
                for stmt in part.SCHEMA.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
                for stmt in part.__dict__.get("TRIGGERS", ()):
                    self.db.execute(stmt)
                if stored != part.SCHEMA_VERSION:
                    self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(part.SCHEMA_VERSION)))

    def generation(self) -> tuple[int, int]:
        """(changes, erasures): how many inserts, updates and deletes the rows a reader builds from have seen, and
        how many of them took text away (CHANGES). Equal numbers mean nothing of them changed in between, whoever
        wrote; equal erasures, that they were only added to and filed."""
        with self._conns.read() as db:
            n = dict(db.execute("SELECT what, n FROM changes").fetchall())
        return n["rows"], n["erased"]

    def _schema_version(self, key: str) -> int | None:
        """A part's stored schema version; None for a new store or a part new to it."""
        if self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone() is None:
            return None
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else int(row["value"])

    def _add_column(self, table: str, column: str, declaration: str) -> None:
        """Add a column unless the table has it already (idempotent)."""
        if column not in {r["name"] for r in self.db.execute(f"PRAGMA table_info({table})")}:
            self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")

    @staticmethod
    def _setup(conn: sqlite3.Connection) -> None:
        """The settings of each new connection."""
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        conn.execute("PRAGMA foreign_keys=ON")
        # deleted rows are overwritten with zeros, not left in free pages (forgetting: Memory.forget)
        conn.execute("PRAGMA secure_delete=ON")

    @property
    def db(self) -> sqlite3.Connection:
        """This thread's connection (store_connections.Connections)."""
        return self._conns.get()

    @db.setter
    def db(self, conn: sqlite3.Connection) -> None:
        self._conns.set(conn)

    @property
    def _depth(self) -> int:
        return self._conns.depth

    @_depth.setter
    def _depth(self, value: int) -> None:
        self._conns.depth = value

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction on this thread's connection (nested ones join the outer one): committed whole
        when the block ends, rolled back whole when it raises."""
        with self._lock:
            outer = self._depth == 0
            if outer:
                t0 = time.perf_counter()
                self._conns.begin_write()
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
                self.write_s += time.perf_counter() - t0
                self.writes += 1

    def close(self) -> None:
        """Close every thread's connection; the store is not used after."""
        self._conns.close()

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row["value"] if row else default

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def reading(self):
        """One consistent view of the store over several queries (a read transaction on this thread's connection:
        a build writing meanwhile is not seen half-way, and is not waited for); inside a transaction, that one's
        view."""
        return self._conns.read()

    # ---- messages -------------------------------------------------------------------------------
    def add_messages(self, messages: Iterable[Message]) -> int:
        """Insert messages not yet stored (each recorded in the history); returns how many were new. The same id
        with another speaker, text, user, agent or metadata is an error."""
        added = 0
        with self.transaction():
            for m in messages:
                row = self.db.execute(
                    "SELECT speaker, text, user_id, agent_id, metadata FROM messages "
                    "WHERE conversation_id=? AND message_id=?", (m.conversation_id, m.message_id),
                ).fetchone()
                if row is not None:
                    differ = [f for f, v in (("speaker", m.speaker), ("text", m.text), ("user_id", m.user_id),
                                             ("agent_id", m.agent_id), ("metadata", metadata_text(m.metadata)))
                              if row[f] != v]
                    if differ:
                        raise StoreError(
                            f"message {m.conversation_id}/{m.message_id} is already stored with other "
                            f"content ({', '.join(differ)}); message ids must be stable"
                        )
                    continue
                seq = self.db.execute(
                    "SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE conversation_id=?",
                    (m.conversation_id,),
                ).fetchone()[0]
                self.db.execute(
                    "INSERT INTO messages (conversation_id, message_id, seq, speaker, text, session, session_date, "
                    "user_id, agent_id, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (m.conversation_id, m.message_id, seq, m.speaker, m.text, m.session, m.session_date,
                     m.user_id, m.agent_id, metadata_text(m.metadata)),
                )
                self.record(m.conversation_id, "add", message_id=m.message_id)
                added += 1
        return added

    # the messages table's columns as an export writes them and an import restores them (exchange.py); uid is
    # the store's own
    MESSAGE_COLUMNS = ("conversation_id", "message_id", "seq", "speaker", "text", "session", "session_date",
                       "user_id", "agent_id", "metadata", "box_id", "decision", "score", "processed")

    def restore_messages(self, rows: Iterable[Mapping[str, Any]], detail: Mapping[str, Any]) -> int:
        """Insert messages as an export wrote them (every column of MESSAGE_COLUMNS, `metadata` an object), each
        recorded in the history as added, with `detail`; returns how many."""
        n = 0
        cols = self.MESSAGE_COLUMNS
        with self.transaction():
            for row in rows:
                values = [metadata_text(row[c]) if c == "metadata" else row[c] for c in cols]
                self.db.execute(f"INSERT INTO messages ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                values)
                self.record(row["conversation_id"], "add", message_id=row["message_id"], detail=detail)
                n += 1
        return n

    @staticmethod
    def _message(row: sqlite3.Row) -> Message:
        return Message(
            conversation_id=row["conversation_id"], message_id=row["message_id"], speaker=row["speaker"],
            text=row["text"], session=row["session"], session_date=row["session_date"], seq=row["seq"],
            user_id=row["user_id"], agent_id=row["agent_id"],
            metadata=json.loads(row["metadata"]) if row["metadata"] != "{}" else {},
        )

    def message(self, conversation_id: str, message_id: str) -> Message:
        row = self.db.execute("SELECT * FROM messages WHERE conversation_id=? AND message_id=?",
                              (conversation_id, message_id)).fetchone()
        if row is None:
            raise NotFound(f"{self.path.parent}: no message {message_id!r} in conversation {conversation_id!r}")
        return self._message(row)

    def find_messages(self, conversations: list[str] | None = None, user_id: str | None = None,
                      agent_id: str | None = None, metadata: Mapping[str, Any] | None = None) -> list[Message]:
        """The messages of these conversations (None: every one) with this user, this agent and, for each key of
        `metadata`, that value (equal as JSON: 1 is not 1.0 nor true), in conversation order."""
        sql, args = "SELECT * FROM messages WHERE 1=1", []
        for column, value in (("user_id", user_id), ("agent_id", agent_id)):
            if value is not None:
                sql += f" AND {column}=?"
                args.append(value)
        order = " ORDER BY conversation_id, seq"
        if conversations is None:
            rows = self.db.execute(sql + order, args).fetchall()
        else:
            rows = [r for cur in self._in_chunks(sql + " AND conversation_id IN ({marks})" + order,
                                                 list(dict.fromkeys(conversations)), *args) for r in cur]
            rows.sort(key=lambda r: (r["conversation_id"], r["seq"]))
        wanted = {k: metadata_text({"v": v}) for k, v in (metadata or {}).items()}
        msgs = [self._message(r) for r in rows]
        return [m for m in msgs if all(k in m.metadata and metadata_text({"v": m.metadata[k]}) == v
                                       for k, v in wanted.items())]

    def set_message_text(self, conversation_id: str, message_id: str, text: str) -> None:
        """Replace a stored message's text (Memory.update, which drops what was derived from the old one first),
        recorded in the history without either text."""
        with self.transaction():
            self.db.execute("UPDATE messages SET text=? WHERE conversation_id=? AND message_id=?",
                            (text, conversation_id, message_id))
            self.record(conversation_id, "update", message_id=message_id)

    def speakers(self, conversation_id: str, up_to_seq: int | None = None) -> list[str]:
        """The conversation's speakers (through message `up_to_seq`), in order of first appearance."""
        rows = self.db.execute(
            "SELECT speaker, MIN(seq) AS first FROM messages WHERE conversation_id=? AND seq<=? GROUP BY speaker "
            "ORDER BY first", (conversation_id, (1 << 62) if up_to_seq is None else up_to_seq)).fetchall()
        return [r[0] for r in rows if r[0].strip()]

    def pending_messages(self, conversation_id: str) -> list[Message]:
        rows = self.db.execute(
            "SELECT * FROM messages WHERE conversation_id=? AND processed=0 ORDER BY seq", (conversation_id,)
        ).fetchall()
        return [self._message(r) for r in rows]

    def messages_from(self, conversation_id: str, seq: int) -> list[Message]:
        """The conversation's messages from `seq` on, in order."""
        rows = self.db.execute("SELECT * FROM messages WHERE conversation_id=? AND seq>=? ORDER BY seq",
                               (conversation_id, seq)).fetchall()
        return [self._message(r) for r in rows]

    def messages(self, conversation_id: str) -> list[Message]:
        rows = self.db.execute(
            "SELECT * FROM messages WHERE conversation_id=? ORDER BY seq", (conversation_id,)
        ).fetchall()
        return [self._message(r) for r in rows]

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

    def filing_counts(self) -> dict[str, tuple[int, int]]:
        """Per conversation, (messages stored, messages filed into a box), in one query: the conversation holding
        the oldest message not filed yet first, then those with none left to file (`membox serve`'s progress)."""
        rows = self.db.execute(
            "SELECT conversation_id, COUNT(*), SUM(processed), MIN(CASE WHEN processed=0 THEN uid END) AS first "
            "FROM messages GROUP BY conversation_id ORDER BY first IS NULL, first, conversation_id")
        return {r[0]: (r[1], r[2] or 0) for r in rows}

    def conversations(self) -> list[str]:
        rows = self.db.execute("SELECT DISTINCT conversation_id FROM messages ORDER BY conversation_id")
        return [r[0] for r in rows]

    def _in_chunks(self, sql: str, values: list, *leading) -> Iterator[sqlite3.Cursor]:
        """`sql` with `{marks}` for an IN (...) list, run over `values` 500 at a time (SQLite's limit on bound
        variables), each time after the `leading` arguments."""
        for i in range(0, len(values), 500):
            chunk = values[i:i + 500]
            yield self.db.execute(sql.format(marks=",".join("?" * len(chunk))), [*leading, *chunk])

    # ---- embeddings cache -----------------------------------------------------------------------
    def cached_vectors(self, model: str, texts: list[str]) -> dict[str, np.ndarray]:
        keys = [text_key(t) for t in texts]
        return {r["key"]: np.frombuffer(r["vector"], dtype=np.float32)
                for cur in self._in_chunks("SELECT key, vector FROM embeddings WHERE model=? AND key IN ({marks})",
                                           keys, model)
                for r in cur}

    def put_vectors(self, model: str, texts: list[str], vectors: np.ndarray) -> None:
        with self.transaction():
            self.db.executemany(
                "INSERT OR IGNORE INTO embeddings VALUES (?, ?, ?)",
                [(model, text_key(t), np.asarray(v, dtype=np.float32).tobytes()) for t, v in zip(texts, vectors)],
            )

    # ---- usage ----------------------------------------------------------------------------------
    def record_usage(self, conversation_id: str, stage: str, prompt_tokens: int, completion_tokens: int,
                     box_id: int | None = None, cached_tokens: int | None = None) -> None:
        """`cached_tokens`: of the prompt tokens, those the engine kept from its cache (None: not said)."""
        with self.transaction():
            self.db.execute(
                "INSERT INTO llm_usage (conversation_id, stage, box_id, prompt_tokens, completion_tokens,"
                " cached_tokens) VALUES (?, ?, ?, ?, ?, ?)",
                (conversation_id, stage, box_id, prompt_tokens, completion_tokens, cached_tokens),
            )

    def usage_by_stage(self, conversation_id: str | None = None) -> dict[str, dict[str, int]]:
        """Per stage: calls, prompt_tokens (sent), completion_tokens and, where every call of the stage said how
        many of its prompt tokens came from the engine's cache, read_tokens (sent less cached: what the model read)."""
        sql = ("SELECT stage, COUNT(*) AS calls, SUM(prompt_tokens) AS p, SUM(completion_tokens) AS c, "
               "SUM(prompt_tokens - cached_tokens) AS r, COUNT(cached_tokens) AS known FROM llm_usage")
        args: list = []
        if conversation_id is not None:
            sql += " WHERE conversation_id=?"
            args.append(conversation_id)
        rows = self.db.execute(sql + " GROUP BY stage ORDER BY stage", args).fetchall()
        return {r["stage"]: {"calls": r["calls"], "prompt_tokens": r["p"], "completion_tokens": r["c"],
                             **({"read_tokens": r["r"]} if r["known"] == r["calls"] else {})}
                for r in rows}

    def record_build_time(self, rows: Iterable[tuple[str, str, float, int]]) -> None:
        """Add (conversation, stage, seconds, calls) to the build_time table: a resumed build accumulates."""
        with self.transaction():
            self.db.executemany(
                "INSERT INTO build_time (conversation_id, stage, wall_s, calls) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (conversation_id, stage) DO UPDATE SET wall_s = wall_s + excluded.wall_s, "
                "calls = calls + excluded.calls", list(rows))

    def build_time_by_stage(self, conversation_id: str | None = None) -> dict[str, dict[str, float]]:
        """{stage: {"wall_s", "calls"}} summed over every conversation (None) or of one."""
        sql, args = "SELECT stage, SUM(wall_s) AS s, SUM(calls) AS n FROM build_time", []
        if conversation_id is not None:
            sql += " WHERE conversation_id=?"
            args.append(conversation_id)
        rows = self.db.execute(sql + " GROUP BY stage ORDER BY stage", args).fetchall()
        return {r["stage"]: {"wall_s": r["s"], "calls": r["n"]} for r in rows}

    # ---- history (Memory.history) ---------------------------------------------------------------
    def record(self, conversation_id: str, event: str, message_id: str | None = None, box_id: int | None = None,
               detail: Mapping[str, Any] | None = None) -> None:
        """Add a history entry (inside the caller's transaction): `detail` holds ids and counts, never text."""
        self.db.execute("INSERT INTO history (at, conversation_id, message_id, box_id, event, detail) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (utc_now(), conversation_id, message_id, box_id, event, json.dumps(detail or {})))

    def history(self, conversation_id: str | None = None, message_id: str | None = None,
                box_id: int | None = None) -> list[Change]:
        """The history of one message (conversation_id and message_id) or one box (box_id), oldest first."""
        if box_id is not None:
            rows = self.db.execute("SELECT * FROM history WHERE box_id=? ORDER BY id", (box_id,))
        else:
            rows = self.db.execute("SELECT * FROM history WHERE conversation_id=? AND message_id=? ORDER BY id",
                                   (conversation_id, message_id))
        return [Change(r["at"], r["event"], r["conversation_id"], r["message_id"], r["box_id"], json.loads(r["detail"]))
                for r in rows.fetchall()]

    # ---- forgetting (Memory.forget) -------------------------------------------------------------
    def delete_messages(self, conversation_id: str, message_ids: Iterable[str]) -> int:
        """Delete messages of one conversation, each recorded in the history (ids only); returns how many were
        deleted. When the conversation is left with no message, its usage and build-time rows go too. What other
        tables derived from them is each system's to delete (Component.forget), in the same transaction."""
        ids = list(dict.fromkeys(message_ids))
        with self.transaction():
            for cur in self._in_chunks("SELECT message_id FROM messages WHERE conversation_id=? "
                                       "AND message_id IN ({marks}) ORDER BY seq", ids, conversation_id):
                for r in cur.fetchall():
                    self.record(conversation_id, "delete", message_id=r[0])
            deleted = sum(cur.rowcount for cur in self._in_chunks(
                "DELETE FROM messages WHERE conversation_id=? AND message_id IN ({marks})", ids, conversation_id))
            if self.db.execute("SELECT 1 FROM messages WHERE conversation_id=? LIMIT 1",
                               (conversation_id,)).fetchone() is None:
                self.db.execute("DELETE FROM llm_usage WHERE conversation_id=?", (conversation_id,))
                self.db.execute("DELETE FROM build_time WHERE conversation_id=?", (conversation_id,))
        return deleted

    def clear(self) -> None:
        """Delete what no conversation owns once every conversation is forgotten (Memory.reset): the history, usage
        rows left (answers asked with no conversation), build times (the box index's), the embedding cache
        (questions asked), the build settings and the config stored with them. The memory keeps its schema, systems
        and embedder."""
        with self.transaction():
            for table in ("history", "llm_usage", "build_time", "embeddings"):
                self.db.execute(f"DELETE FROM {table}")
            self.db.execute("DELETE FROM meta WHERE key IN ('build_settings', 'config')")

    def forget_vectors(self, texts: Iterable[str]) -> int:
        """Drop the cached embeddings of these texts, under every model; returns how many rows went."""
        keys = list(dict.fromkeys(text_key(t) for t in texts))
        with self.transaction():
            return sum(cur.rowcount for cur in self._in_chunks("DELETE FROM embeddings WHERE key IN ({marks})", keys))

    def scrub(self) -> bool:
        """Leave no copy of deleted rows in the folder's files: the database is rebuilt without free pages
        (VACUUM; with secure_delete on, deleted cells were zeroed already) and the write-ahead log, which still
        holds old page images, is copied back and truncated to nothing. False when another connection kept
        the log from being truncated (the rows are deleted; their old pages stay in memory.db-wal until the
        next checkpoint)."""
        with self._lock:
            if self._depth:
                raise StoreError("scrub: not inside a transaction")
            try:
                self.db.execute("VACUUM")
                busy = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.OperationalError:
                return False
            return busy == 0


def copy_db(src: Path, dst: Path) -> None:
    """A consistent copy of a (possibly WAL-mode) SQLite database file, written at `dst` (SQLite's backup API)."""
    a, b = sqlite3.connect(str(src)), sqlite3.connect(str(dst))
    try:
        a.backup(b)
    finally:
        a.close()
        b.close()
