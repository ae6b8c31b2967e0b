"""SQLite is the source of truth: one database per memory folder.

`Store` holds the tables every memory system shares (meta, messages, the embedding cache, LLM usage). Each
memory system adds its own tables and queries as a mixin class (`TABLES`, `SCHEMA`, `SCHEMA_VERSION` and its
merge rules, e.g. systems/membox_tables.py); `store_class(mixins)` composes them with `Store`, and opening
the store creates or migrates each part's tables under its own version (meta `schema_version` for the shared
tables, `schema_version.<name>` for a system's). The database runs in WAL mode. A message row is written
before it is processed and marked processed in the same transaction that files it, so an interrupted build
resumes exactly where it stopped. The messages table's filing columns (box_id, decision, score, processed)
record the box memory's progress; they predate the split into systems and stay here.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from .private import FILE_MODE, private_dir, private_file, tighten
from .records import Message

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


LOCK_FILE = "build.lock"


class StoreBusy(StoreError):
    """Another process holds the memory folder's write lock."""


class WriteLock:
    """A memory folder's write lock: an exclusive, non-blocking flock on `<folder>/build.lock` (0600).

    Every writer takes it (`membox build`, Memory.add / seal / forget, the LoCoMo evaluation's builds); readers
    (`membox ask`, `membox show`, Memory.search / context / answer) never do: SQLite's write-ahead log gives them
    a consistent view while a build runs. A second writer is refused at once with one line naming the holder,
    whose pid, operation, command and start time are written into the file. Only the flock decides: it dies with
    the process that held it, so a file a killed process left behind, whatever it says, never blocks.
    The file also carries a token that changes with every holder, so a writer can tell whether another one wrote
    in between (`previous`, the token found on taking it).
    """

    def __init__(self, folder: str | Path, what: str):
        self.folder, self.what = Path(folder), what
        self.path = self.folder / LOCK_FILE
        self.token = f"{os.getpid()}-{uuid.uuid4().hex}"
        self.previous: str | None = None
        self._fd: int | None = None

    def acquire(self) -> "WriteLock":
        import fcntl

        if self._fd is not None:
            return self
        private_dir(self.folder)
        private_file(self.path)  # 0600 whatever the umask (private.py)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreBusy(self._busy_message(_read_holder(fd))) from None
            self.previous = _read_holder(fd).get("token")
            info = {"pid": os.getpid(), "what": self.what, "since": time.time(),
                    "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200],
                    "token": self.token}
            _write_holder(fd, info)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (again: nothing). The file stays, marked released, with the last holder's token."""
        import fcntl

        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            _write_holder(fd, {"token": self.token, "released": True})
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    close = release

    def __enter__(self) -> "WriteLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def _busy_message(self, holder: dict) -> str:
        pid = holder.get("pid")
        if not isinstance(pid, int) or holder.get("released"):
            who = "another process (one that did not say which)"
        else:
            details = [str(holder.get("what") or "writing")]
            if holder.get("command"):
                details.append(f"`{holder['command']}`")
            if isinstance(holder.get("since"), (int, float)):
                details.append("since " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder["since"])))
            who = f"process {pid} ({', '.join(details)})"
        return (f"{self.folder} is in use by {who}; wait for it to finish, then try again "
                f"(reading it, e.g. `membox ask`, works meanwhile)")


def _read_holder(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_holder(fd: int, info: dict) -> None:
    data = json.dumps(info).encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def merge_rules(cls: type) -> tuple[dict[str, dict[str, str]], dict[str, str], tuple[str, ...]]:
    """(id columns, own-id column, keyed tables) over a composed store class and its mixins: how the shards of a
    sharded build are joined (execution/merge.py). id columns: table -> {column: the table whose row ids it holds};
    a shard's ids are shifted past the rows already merged. Keyed tables: rows keyed by content, first copy wins."""
    ids: dict[str, dict[str, str]] = {}
    own: dict[str, str] = {}
    keyed: list[str] = []
    for part in reversed(cls.__mro__):
        for table, cols in part.__dict__.get("ID_COLUMNS", {}).items():
            ids.setdefault(table, {}).update(cols)
        own.update(part.__dict__.get("OWN_ID", {}))
        keyed += part.__dict__.get("KEYED", ())
    return ids, own, tuple(dict.fromkeys(keyed))


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
    """A memory folder's database. One connection, guarded by a lock; writes go through `transaction()`."""

    TABLES = "core"
    SCHEMA = SCHEMA
    SCHEMA_VERSION = SCHEMA_VERSION
    ID_COLUMNS = {"messages": {"uid": "messages"}, "llm_usage": {"id": "llm_usage"}}
    OWN_ID = {"messages": "uid", "llm_usage": "id"}
    KEYED = ("embeddings", "meta")

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
        self._lock = threading.RLock()
        self.db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        # deleted rows are overwritten with zeros, not left in free pages (forgetting: Memory.forget)
        self.db.execute("PRAGMA secure_delete=ON")
        self._depth = 0
        self._migrate()

    # ---- plumbing -------------------------------------------------------------------------------
    def _migrate(self) -> None:
        """Create or migrate the tables of the shared part and of every mixin, each under its own version."""
        with self.transaction():
            for part in reversed(type(self).__mro__):
                if "SCHEMA" not in part.__dict__:
                    continue
                key = "schema_version" if part.TABLES == "core" else f"schema_version.{part.TABLES}"
                for stmt in part.SCHEMA.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
                row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
                if row is None:
                    self.db.execute("INSERT INTO meta VALUES (?, ?)", (key, str(part.SCHEMA_VERSION)))
                elif int(row["value"]) > part.SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path} has {part.TABLES} schema version {row['value']}, newer than this "
                        f"membox_local ({part.SCHEMA_VERSION}); upgrade membox_local"
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

    # ---- forgetting (Memory.forget) -------------------------------------------------------------
    def delete_messages(self, conversation_id: str, message_ids: Iterable[str]) -> int:
        """Delete messages of one conversation; returns how many were deleted. When the conversation is left
        with no message, its usage rows go too. What other tables derived from them is each system's to delete
        (Component.forget), in the same transaction."""
        ids = list(dict.fromkeys(message_ids))
        with self.transaction():
            deleted = sum(cur.rowcount for cur in self._in_chunks(
                "DELETE FROM messages WHERE conversation_id=? AND message_id IN ({marks})", ids, conversation_id))
            if self.db.execute("SELECT 1 FROM messages WHERE conversation_id=? LIMIT 1",
                               (conversation_id,)).fetchone() is None:
                self.db.execute("DELETE FROM llm_usage WHERE conversation_id=?", (conversation_id,))
        return deleted

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
