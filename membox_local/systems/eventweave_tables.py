"""The event graph's tables and queries (systems/eventweave.py): a mixin that `store.store_class` composes with the
shared `Store`, under its own schema version (`schema_version.eventweave`), created by the store's migration when a
memory first builds the system (additive: CREATE ... IF NOT EXISTS, nothing of another system touched).

- ew_pairs: one row per message that has been the new turn of an extraction (with the turn before it): 'done'
  or 'failed' (with the error, retried by the next build). A message with no row is pending.
- ew_events: what a pair's extraction found: the text, the time expression as said and its absolute date and
  days (resolved against the session date), the session, the source message ids, the vector of the text and the
  context-aware vector (the text with its two turns), and its node (NULL: not woven into the graph yet).
- ew_nodes: event nodes, clusters of events; vector = mean of the events' vectors, context_vector = mean of their
  context vectors; layer_session / layer_vector: the session that last changed it and the vector it had before.
- ew_edges: sequential (directed, in time order), temporal and reasoning (symmetric, stored once, src < dst).
- ew_updates: a node whose mean moved in a later session (cosine to its earlier vector below the threshold).
- ew_summaries: one summary per session (the hierarchy's upper layer), 'done' or 'failed'.

Vectors are float32 blobs. Nodes, edges and updates are derived from the events alone, so the graph can be
rebuilt without a model (after a forget, or an extraction retried out of order).
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from ..store import counted, store_class

SCHEMA = """
CREATE TABLE IF NOT EXISTS ew_pairs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    previous_id TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    dropped TEXT NOT NULL DEFAULT '{}',
    UNIQUE (conversation_id, message_id)
);
CREATE INDEX IF NOT EXISTS ew_pairs_previous ON ew_pairs (conversation_id, previous_id);
CREATE TABLE IF NOT EXISTS ew_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    pair_id INTEGER NOT NULL REFERENCES ew_pairs(id),
    seq INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    text TEXT NOT NULL,
    when_text TEXT NOT NULL DEFAULT '',
    date TEXT NOT NULL DEFAULT '',
    first_day TEXT NOT NULL DEFAULT '',
    last_day TEXT NOT NULL DEFAULT '',
    session TEXT NOT NULL,
    session_date TEXT NOT NULL,
    sources TEXT NOT NULL,
    vector BLOB NOT NULL,
    context_vector BLOB NOT NULL,
    node_id INTEGER
);
CREATE INDEX IF NOT EXISTS ew_events_conv ON ew_events (conversation_id, seq, idx);
CREATE INDEX IF NOT EXISTS ew_events_pair ON ew_events (pair_id);
CREATE INDEX IF NOT EXISTS ew_events_node ON ew_events (node_id);
CREATE TABLE IF NOT EXISTS ew_nodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    size INTEGER NOT NULL,
    vector BLOB NOT NULL,
    context_vector BLOB NOT NULL,
    layer_session TEXT NOT NULL,
    layer_vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS ew_nodes_conv ON ew_nodes (conversation_id);
CREATE TABLE IF NOT EXISTS ew_edges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    src INTEGER NOT NULL,
    dst INTEGER NOT NULL,
    weight REAL NOT NULL,
    UNIQUE (kind, src, dst)
);
CREATE INDEX IF NOT EXISTS ew_edges_conv ON ew_edges (conversation_id);
CREATE INDEX IF NOT EXISTS ew_edges_dst ON ew_edges (dst);
CREATE TABLE IF NOT EXISTS ew_updates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    node_id INTEGER NOT NULL,
    event_id INTEGER NOT NULL,
    session TEXT NOT NULL,
    cosine REAL NOT NULL,
    UNIQUE (node_id, session)
);
CREATE TABLE IF NOT EXISTS ew_summaries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    session TEXT NOT NULL,
    session_date TEXT NOT NULL,
    status TEXT NOT NULL,
    text TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    events INTEGER NOT NULL DEFAULT 0,
    UNIQUE (conversation_id, session)
);
"""
SYMMETRIC = ("temporal", "reasoning")  # edge kinds stored once, src < dst
EDGE_KINDS = ("sequential",) + SYMMETRIC


def _blob(v) -> bytes:
    return np.asarray(v, dtype=np.float32).tobytes()


def _vec(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.float32)


@dataclass
class GraphEvent:
    """One extracted event (a row of ew_events)."""

    id: int
    conversation_id: str
    seq: int  # the new turn's place in the conversation
    idx: int  # its place in the pair's answer
    text: str
    when: str  # the time expression as said ("" none)
    date: str  # its absolute date or period, resolved against the session date ("" none)
    first_day: str  # ISO days of that period ("" when vague or none)
    last_day: str
    session: str
    session_date: str
    sources: list[str]  # message ids: the turn before, the new turn
    vector: np.ndarray = field(repr=False)
    context_vector: np.ndarray = field(repr=False)
    node_id: int | None = None
    pair_id: int = 0

    @property
    def order(self) -> tuple[int, int]:
        return self.seq, self.idx


@dataclass
class GraphNode:
    id: int
    conversation_id: str
    size: int
    vector: np.ndarray = field(repr=False)
    context_vector: np.ndarray = field(repr=False)
    layer_session: str = ""
    layer_vector: np.ndarray = field(default=None, repr=False)


class EventTables:
    """Mixin for `Store`: uses its connection (`db`), `transaction()`, `_in_chunks`."""

    TABLES = "eventweave"
    SCHEMA = SCHEMA
    SCHEMA_VERSION = 3
    # the graph a retriever reads, counted as the box memory's rows are (store.CHANGES; version 3)
    TRIGGERS = tuple(t for table in ("ew_pairs", "ew_events", "ew_nodes", "ew_edges", "ew_updates", "ew_summaries")
                     for t in counted(table))
    # version 2: the items a pair's extraction wrote that were not kept, counted by reason (JSON)
    COLUMNS_ADDED = {2: (("ew_pairs", "dropped", "TEXT NOT NULL DEFAULT '{}'"),)}
    # how sharded builds are merged (execution/merge.py merge_rules): table -> {column: the table whose ids it holds}
    ID_COLUMNS = {
        "ew_pairs": {"id": "ew_pairs"},
        "ew_events": {"id": "ew_events", "pair_id": "ew_pairs", "node_id": "ew_nodes"},
        "ew_nodes": {"id": "ew_nodes"},
        "ew_edges": {"id": "ew_edges", "src": "ew_nodes", "dst": "ew_nodes"},
        "ew_updates": {"id": "ew_updates", "node_id": "ew_nodes", "event_id": "ew_events"},
        "ew_summaries": {"id": "ew_summaries"},
    }
    OWN_ID = {t: "id" for t in ID_COLUMNS}

    # ---- pairs ----------------------------------------------------------------------------------
    def ew_pairs(self, conversation_id: str) -> dict[str, sqlite3.Row]:
        """The conversation's pair rows by the new turn's message id."""
        rows = self.db.execute("SELECT * FROM ew_pairs WHERE conversation_id=?", (conversation_id,)).fetchall()
        return {r["message_id"]: r for r in rows}

    def ew_save_pair(self, conversation_id: str, message_id: str, previous_id: str,
                     events: list[GraphEvent], dropped: dict[str, int] | None = None) -> list[GraphEvent]:
        """Record a pair as done with its events (not woven yet) and the items not kept (`dropped`: count by
        reason), in one transaction; returns the events with ids."""
        with self.transaction():
            pair = self._ew_pair_row(conversation_id, message_id, previous_id, "done", "", dropped or {})
            self.db.execute("DELETE FROM ew_events WHERE pair_id=?", (pair,))
            for e in events:
                cur = self.db.execute(
                    "INSERT INTO ew_events (conversation_id, pair_id, seq, idx, text, when_text, date, first_day, "
                    "last_day, session, session_date, sources, vector, context_vector) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (conversation_id, pair, e.seq, e.idx, e.text, e.when, e.date, e.first_day, e.last_day,
                     e.session, e.session_date, json.dumps(e.sources), _blob(e.vector), _blob(e.context_vector)))
                e.id, e.pair_id, e.node_id = int(cur.lastrowid), pair, None
        return events

    def ew_fail_pair(self, conversation_id: str, message_id: str, previous_id: str, error: str) -> None:
        with self.transaction():
            self._ew_pair_row(conversation_id, message_id, previous_id, "failed", error)

    def _ew_pair_row(self, conversation_id: str, message_id: str, previous_id: str, status: str, error: str,
                     dropped: dict[str, int] | None = None) -> int:
        self.db.execute(
            "INSERT INTO ew_pairs (conversation_id, message_id, previous_id, status, error, dropped) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (conversation_id, message_id) DO UPDATE SET "
            "previous_id=excluded.previous_id, status=excluded.status, error=excluded.error, dropped=excluded.dropped",
            (conversation_id, message_id, previous_id, status, error, json.dumps(dropped or {}, sort_keys=True)))
        return self.db.execute("SELECT id FROM ew_pairs WHERE conversation_id=? AND message_id=?",
                               (conversation_id, message_id)).fetchone()[0]

    # ---- events ---------------------------------------------------------------------------------
    @staticmethod
    def _ew_event(r: sqlite3.Row) -> GraphEvent:
        return GraphEvent(r["id"], r["conversation_id"], r["seq"], r["idx"], r["text"], r["when_text"], r["date"],
                          r["first_day"], r["last_day"], r["session"], r["session_date"], json.loads(r["sources"]),
                          _vec(r["vector"]), _vec(r["context_vector"]), r["node_id"], r["pair_id"])

    def ew_events(self, conversation_id: str | None = None, woven: bool | None = None) -> list[GraphEvent]:
        """Events in conversation order; `woven` True / False: only those in the graph / not yet."""
        sql, args = "SELECT * FROM ew_events WHERE 1=1", []
        if conversation_id is not None:
            sql += " AND conversation_id=?"
            args.append(conversation_id)
        if woven is not None:
            sql += " AND node_id IS NOT NULL" if woven else " AND node_id IS NULL"
        rows = self.db.execute(sql + " ORDER BY conversation_id, seq, idx, id", args).fetchall()
        return [self._ew_event(r) for r in rows]

    def ew_last_woven(self, conversation_id: str) -> GraphEvent | None:
        """The conversation's latest event in the graph (in conversation order)."""
        row = self.db.execute("SELECT * FROM ew_events WHERE conversation_id=? AND node_id IS NOT NULL "
                              "ORDER BY seq DESC, idx DESC, id DESC LIMIT 1", (conversation_id,)).fetchone()
        return self._ew_event(row) if row else None

    def ew_latest_same_days(self, conversation_id: str, first_day: str, last_day: str, other_than: int) -> int | None:
        """The node (other than `other_than`) of the latest event in the graph of exactly these days."""
        row = self.db.execute(
            "SELECT node_id FROM ew_events WHERE conversation_id=? AND first_day=? AND last_day=? "
            "AND node_id IS NOT NULL AND node_id != ? ORDER BY seq DESC, idx DESC, id DESC LIMIT 1",
            (conversation_id, first_day, last_day, other_than)).fetchone()
        return row[0] if row else None

    def ew_set_node(self, event_id: int, node_id: int | None) -> None:
        self.db.execute("UPDATE ew_events SET node_id=? WHERE id=?", (node_id, event_id))

    def ew_delete_events(self, event_ids: Iterable[int]) -> int:
        return sum(cur.rowcount for cur in self._in_chunks("DELETE FROM ew_events WHERE id IN ({marks})",
                                                           list(event_ids)))

    # ---- nodes ----------------------------------------------------------------------------------
    def ew_nodes(self, conversation_id: str) -> list[GraphNode]:
        rows = self.db.execute("SELECT * FROM ew_nodes WHERE conversation_id=? ORDER BY id", (conversation_id,))
        return [GraphNode(r["id"], r["conversation_id"], r["size"], _vec(r["vector"]), _vec(r["context_vector"]),
                          r["layer_session"], _vec(r["layer_vector"])) for r in rows.fetchall()]

    def ew_put_node(self, node: GraphNode) -> int:
        """Insert a node (id 0) or write an existing one's size and vectors; returns its id."""
        values = (node.size, _blob(node.vector), _blob(node.context_vector), node.layer_session,
                  _blob(node.layer_vector))
        if node.id:
            self.db.execute("UPDATE ew_nodes SET size=?, vector=?, context_vector=?, layer_session=?, layer_vector=? "
                            "WHERE id=?", (*values, node.id))
            return node.id
        cur = self.db.execute("INSERT INTO ew_nodes (conversation_id, size, vector, context_vector, layer_session, "
                              "layer_vector) VALUES (?, ?, ?, ?, ?, ?)", (node.conversation_id, *values))
        return int(cur.lastrowid)

    def ew_delete_node(self, node_id: int) -> None:
        """A node with its edges and updates (its events are the caller's)."""
        self.db.execute("DELETE FROM ew_edges WHERE src=? OR dst=?", (node_id, node_id))
        self.db.execute("DELETE FROM ew_updates WHERE node_id=?", (node_id,))
        self.db.execute("DELETE FROM ew_nodes WHERE id=?", (node_id,))

    # ---- edges and updates ----------------------------------------------------------------------
    def ew_add_edge(self, conversation_id: str, kind: str, src: int, dst: int, weight: float) -> None:
        """Add an edge (a symmetric kind stored once, src < dst); an edge already there keeps its weight."""
        if kind not in EDGE_KINDS:
            raise ValueError(f"unknown event-graph edge kind {kind!r}")
        if kind in SYMMETRIC and src > dst:
            src, dst = dst, src
        self.db.execute("INSERT OR IGNORE INTO ew_edges (conversation_id, kind, src, dst, weight) "
                        "VALUES (?, ?, ?, ?, ?)", (conversation_id, kind, src, dst, float(weight)))

    def ew_delete_edges(self, node_id: int, kind: str) -> None:
        self.db.execute("DELETE FROM ew_edges WHERE kind=? AND (src=? OR dst=?)", (kind, node_id, node_id))

    def ew_edges(self, conversation_id: str) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM ew_edges WHERE conversation_id=? ORDER BY kind, src, dst",
                               (conversation_id,)).fetchall()

    def ew_record_update(self, conversation_id: str, node_id: int, event_id: int, session: str, cosine: float) -> None:
        """A node's mean moved in `session` (one row per node and session: the latest mover, its cosine)."""
        self.db.execute(
            "INSERT INTO ew_updates (conversation_id, node_id, event_id, session, cosine) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (node_id, session) DO UPDATE SET event_id=excluded.event_id, cosine=excluded.cosine",
            (conversation_id, node_id, event_id, session, float(cosine)))

    def ew_updates(self, conversation_id: str) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM ew_updates WHERE conversation_id=? ORDER BY id",
                               (conversation_id,)).fetchall()

    def ew_clear_graph(self, conversation_id: str) -> None:
        """Drop the conversation's nodes, edges and updates; its events stay, unwoven."""
        with self.transaction():
            for table in ("ew_edges", "ew_updates", "ew_nodes"):
                self.db.execute(f"DELETE FROM {table} WHERE conversation_id=?", (conversation_id,))
            self.db.execute("UPDATE ew_events SET node_id=NULL WHERE conversation_id=?", (conversation_id,))

    # ---- summaries ------------------------------------------------------------------------------
    def ew_summaries(self, conversation_id: str | None = None) -> list[sqlite3.Row]:
        if conversation_id is None:
            return self.db.execute("SELECT * FROM ew_summaries ORDER BY id").fetchall()
        return self.db.execute("SELECT * FROM ew_summaries WHERE conversation_id=? ORDER BY id",
                               (conversation_id,)).fetchall()

    def ew_save_summary(self, conversation_id: str, session: str, session_date: str, status: str, text: str = "",
                        error: str = "", events: int = 0) -> None:
        with self.transaction():
            self.db.execute(
                "INSERT INTO ew_summaries (conversation_id, session, session_date, status, text, error, events) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (conversation_id, session) DO UPDATE SET "
                "session_date=excluded.session_date, status=excluded.status, text=excluded.text, "
                "error=excluded.error, events=excluded.events",
                (conversation_id, session, session_date, status, text, error, events))

    def ew_delete_summaries(self, conversation_id: str, sessions: Iterable[str]) -> int:
        return sum(cur.rowcount for cur in self._in_chunks(
            "DELETE FROM ew_summaries WHERE conversation_id=? AND session IN ({marks})", list(sessions),
            conversation_id))

    # ---- forgetting -----------------------------------------------------------------------------
    def ew_pairs_touching(self, conversation_id: str, message_ids: list[str]) -> list[int]:
        """Ids of the pairs that show one of these messages (as the new turn or the turn before)."""
        out: set[int] = set()
        for column in ("message_id", "previous_id"):
            for cur in self._in_chunks(f"SELECT id FROM ew_pairs WHERE conversation_id=? AND {column} IN ({{marks}})",
                                       list(message_ids), conversation_id):
                out.update(r[0] for r in cur)
        return sorted(out)

    def ew_events_of_pairs(self, pair_ids: list[int]) -> list[GraphEvent]:
        return [self._ew_event(r) for cur in self._in_chunks("SELECT * FROM ew_events WHERE pair_id IN ({marks})",
                                                             pair_ids) for r in cur]

    def ew_delete_pairs(self, pair_ids: list[int]) -> int:
        """Delete pairs with their events: their messages are pending again."""
        with self.transaction():
            sum(cur.rowcount for cur in self._in_chunks("DELETE FROM ew_events WHERE pair_id IN ({marks})", pair_ids))
            return sum(cur.rowcount for cur in self._in_chunks("DELETE FROM ew_pairs WHERE id IN ({marks})",
                                                               pair_ids))

    def ew_delete_conversation(self, conversation_id: str) -> dict[str, int]:
        counts = {}
        with self.transaction():
            for table in ("ew_edges", "ew_updates", "ew_nodes", "ew_events", "ew_summaries", "ew_pairs"):
                counts[table] = self.db.execute(f"DELETE FROM {table} WHERE conversation_id=?",
                                                (conversation_id,)).rowcount
        return counts

    def ew_counts(self, conversation_id: str | None = None) -> dict[str, int]:
        """Rows per table (edges by kind, pairs and summaries by status) of one conversation or all."""
        where, args = ("WHERE conversation_id=?", (conversation_id,)) if conversation_id is not None else ("", ())
        out = {}
        for table in ("ew_events", "ew_nodes", "ew_updates"):
            out[table] = self.db.execute(f"SELECT COUNT(*) FROM {table} {where}", args).fetchone()[0]
        out["ew_events_unwoven"] = self.db.execute(
            f"SELECT COUNT(*) FROM ew_events {where or 'WHERE 1=1'} AND node_id IS NULL", args).fetchone()[0]
        for table, column in (("ew_edges", "kind"), ("ew_pairs", "status"), ("ew_summaries", "status")):
            for r in self.db.execute(f"SELECT {column}, COUNT(*) FROM {table} {where} GROUP BY {column}", args):
                out[f"{table}.{r[0]}"] = r[1]
        for (text,) in self.db.execute(f"SELECT dropped FROM ew_pairs {where or 'WHERE 1=1'} AND dropped != '{{}}'",
                                       args):
            for reason, n in json.loads(text).items():
                out[f"ew_dropped.{reason}"] = out.get(f"ew_dropped.{reason}", 0) + n
        return out


# the shared store with the event graph's tables alone (a Memory with [memory] systems = ["eventweave"])
EventStore = store_class([EventTables])
