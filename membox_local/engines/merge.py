"""Join shard stores (disjoint sets of conversations) into one store that `Memory` and `membox ask` read.

The shards are the source of truth; the merged `memory.db` is derived from them and rebuilt whole each time
(written beside, then swapped in), so a merge can be interrupted and rerun. Row ids are shifted per shard
so they stay unique, along with every column that holds an id. Vector indexes are derived from the store:
they are deleted here and rebuilt (from the copied embedding cache) on the next `sync_box_index`.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Sequence

from ..store import Store, StoreError

# table -> {column: the table whose row ids it holds}; ids of a shard are shifted past the rows already merged
ID_COLUMNS: dict[str, dict[str, str]] = {
    "messages": {"uid": "messages", "box_id": "boxes"},
    "boxes": {"id": "boxes"},
    "events": {"id": "events", "box_id": "boxes"},
    "traces": {"id": "traces"},
    "trace_events": {"trace_id": "traces", "event_id": "events"},
    "llm_usage": {"id": "llm_usage", "box_id": "boxes"},
}
OWN_ID = {"messages": "uid", "boxes": "id", "events": "id", "traces": "id", "llm_usage": "id"}
KEYED = ("embeddings", "meta")  # rows keyed by content: the first copy wins
SHARED_META = ("schema_version",)


def _tables(db: sqlite3.Connection, schema: str) -> list[str]:
    rows = db.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
    return [r[0] for r in rows]


def _columns(db: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA {schema}.table_info({table})")]


def merge_stores(target_db: str | Path, shard_dbs: Sequence[str | Path]) -> dict[str, int]:
    """Write the union of `shard_dbs` to `target_db` (replacing it); returns rows copied per table."""
    target_db = Path(target_db)
    tmp = target_db.with_name(target_db.name + ".merging")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    Store(tmp).close()  # the current schema
    db = sqlite3.connect(str(tmp), isolation_level=None)
    copied: dict[str, int] = {}
    try:
        known = set(_tables(db, "main"))
        unknown = known - set(ID_COLUMNS) - set(KEYED)
        if unknown:
            raise StoreError(f"merge: tables {sorted(unknown)} have no merge rule; add them to "
                             f"membox_local/engines/merge.py ID_COLUMNS or KEYED")
        for n, shard in enumerate(shard_dbs):
            db.execute("ATTACH DATABASE ? AS shard", (str(shard),))
            try:
                extra = set(_tables(db, "shard")) - known
                if extra:
                    raise StoreError(f"{shard}: tables {sorted(extra)} are unknown to this membox_local; "
                                     f"merge with the version that built the shard")
                _check_meta(db, shard)
                db.execute("BEGIN")
                offsets = {t: db.execute(f"SELECT COALESCE(MAX({c}), 0) FROM main.{t}").fetchone()[0]
                           for t, c in OWN_ID.items()}
                for table in sorted(known):
                    cols = _columns(db, "shard", table)
                    missing = set(cols) - set(_columns(db, "main", table))
                    if missing:
                        raise StoreError(f"{shard}: {table} has columns {sorted(missing)} unknown here")
                    shift = ID_COLUMNS.get(table, {})
                    exprs = [f"{c} + {offsets[shift[c]]}" if c in shift else c for c in cols]
                    verb = "INSERT OR IGNORE" if table in KEYED else "INSERT"
                    cur = db.execute(f"{verb} INTO main.{table} ({', '.join(cols)}) "
                                     f"SELECT {', '.join(exprs)} FROM shard.{table}")
                    copied[table] = copied.get(table, 0) + max(cur.rowcount, 0)
                db.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                db.execute("ROLLBACK")
                raise StoreError(f"merge: {shard} (shard {n}) overlaps the shards before it ({exc}); "
                                 f"each conversation must live in exactly one shard") from None
            finally:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                db.execute("DETACH DATABASE shard")
    finally:
        db.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{target_db}{suffix}").unlink(missing_ok=True)
    os.replace(tmp, target_db)
    for derived in list(target_db.parent.glob("*.hnsw")) + list(target_db.parent.glob("*.ids.json")):
        derived.unlink()
    return copied


def _check_meta(db: sqlite3.Connection, shard) -> None:
    """Shards must share the embedder (and anything else global); per-conversation keys just copy."""
    for key, value in db.execute("SELECT key, value FROM shard.meta"):
        if key in SHARED_META:
            continue
        row = db.execute("SELECT value FROM main.meta WHERE key=?", (key,)).fetchone()
        if row is not None and row[0] != value and key == "embedder":
            raise StoreError(f"{shard} was built with embedder '{value}', the shards before it with "
                             f"'{row[0]}'; rebuild it with the same config")
