"""A SQLite database's connections, one per thread: sqlite3 connections must not run statements from two threads at
once (one connection shared by a server's threads answered 'another row available' and 'database is locked').

Each thread reads committed data on its own connection under WAL, never waiting for a writer; writes take turns on
one lock per database object (whichever thread), and SQLite's busy wait (BUSY_TIMEOUT_S) settles them with other
processes and other objects of the same file. A database in memory is one connection shared by every thread (a
second connection would open another database), its reads under the write lock. A connection of a thread that
ended is closed when the next one opens.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterator

# how long a connection waits for another's write transaction before its own write is refused: longer than the
# longest write (a scrub's VACUUM of a large memory)
BUSY_TIMEOUT_S = 120.0
# KiB of database pages each connection keeps in memory (SQLite's default is 2,000): a server holds one connection
# per HTTP worker thread and store, so its pages would grow with the threads to ~240 MB (a 4-minute soak of 8 clients
# grew 24 MB at the default, 0 at 256 KiB: benchmarks/soak.py); the OS's file cache keeps the rest at hand
CACHE_KIB = 512


class Connections:
    """The connections of one database file (`path`); `on_connect` sets each new one up (its pragmas)."""

    def __init__(self, path: Path, on_connect: Callable[[sqlite3.Connection], None], busy: type[Exception]):
        self.path, self._on_connect, self._busy = path, on_connect, busy
        self.lock = threading.RLock()  # one write transaction at a time in this process
        self._local = threading.local()
        self._open: dict[int, tuple[threading.Thread, sqlite3.Connection]] = {}
        self._open_lock = threading.Lock()
        self.closed = False
        self._shared = self._connect() if str(path) == ":memory:" else None

    def _connect(self) -> sqlite3.Connection:
        if self.closed:
            raise self._busy(f"{self.path.parent}: the store is closed")
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        conn.row_factory = sqlite3.Row
        self._on_connect(conn)
        me = threading.current_thread()
        with self._open_lock:
            for key, (thread, old) in list(self._open.items()):
                if not thread.is_alive():
                    del self._open[key]
                    old.close()
            self._open[id(me)] = (me, conn)
        return conn

    def __len__(self) -> int:
        return len(self._open)

    def get(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use)."""
        if self._shared is not None:
            return self._shared
        conn = getattr(self._local, "db", None)
        if conn is None:
            conn = self._local.db = self._connect()
        return conn

    def set(self, conn: sqlite3.Connection) -> None:
        """Replace this thread's connection (a double that slows commits: evaluation/crash.py)."""
        if self._shared is not None:
            self._shared = conn
        else:
            self._local.db = conn

    @property
    def depth(self) -> int:
        """How deep this thread is in nested write transactions."""
        return getattr(self._local, "depth", 0)

    @depth.setter
    def depth(self, value: int) -> None:
        self._local.depth = value

    def begin_write(self) -> None:
        """BEGIN IMMEDIATE, retried while the database stays busy beyond SQLite's own waits (a connection whose
        snapshot predates the last commit is answered busy at once), until BUSY_TIMEOUT_S."""
        deadline, pause = time.monotonic() + BUSY_TIMEOUT_S, 0.005
        while True:
            try:
                self.get().execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise self._busy(f"{self.path.parent}: the database stayed busy for {BUSY_TIMEOUT_S:.0f} s "
                                     f"(another process writing); nothing was written") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction on this thread's connection (inside a write transaction: that one)."""
        if self.depth:
            yield self.get()
            return
        with self.lock if self._shared is not None else nullcontext():
            db = self.get()
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")

    def close(self) -> None:
        with self.lock, self._open_lock:
            self.closed = True
            for _, conn in self._open.values():
                conn.close()
            self._open.clear()
            if self._shared is not None:
                self._shared.close()
