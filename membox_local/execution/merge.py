"""Join shard stores (disjoint sets of conversations) into one store that `Memory` and `membox ask` read.

The shards are the source of truth; the merged `memory.db` is derived from them and rebuilt whole each time
(written beside, then swapped in), so a merge can be interrupted and rerun. Row ids are shifted per shard
so they stay unique, along with every column that holds an id. Vector indexes are derived from the store:
they are deleted here and rebuilt (from the copied embedding cache) on the next `sync_box_index`.
"""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Sequence

from ..store import StoreError, built_systems, store_class
from ..systems import tables_for

SHARED_META = ("schema_version",)  # and schema_version.<system>: each shard's own, the target has the current


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


def _tables(db: sqlite3.Connection, schema: str) -> list[str]:
    rows = db.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
    return [r[0] for r in rows]


def _columns(db: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA {schema}.table_info({table})")]


def merge_stores(target_db: str | Path, shard_dbs: Sequence[str | Path]) -> dict[str, int]:
    """Write the union of `shard_dbs` to `target_db` (replacing it); returns rows copied per table.

    The tables are those of the shared store and of every memory system built in the shards; each part's merge
    rules (merge_rules) say which columns hold row ids."""
    target_db = Path(target_db)
    tmp = target_db.with_name(target_db.name + ".merging")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    systems: list[str] = []
    for shard in shard_dbs:
        systems += [n for n in built_systems(shard) if n not in systems]
    cls = store_class(tables_for(systems))
    cls(tmp).close()  # the current schema of every part
    id_columns, own_id, keyed = merge_rules(cls)
    db = sqlite3.connect(str(tmp), isolation_level=None)
    copied: dict[str, int] = {}
    try:
        known = set(_tables(db, "main"))
        unknown = known - set(id_columns) - set(keyed)
        if unknown:
            raise StoreError(f"merge: tables {sorted(unknown)} have no merge rule; add them to the ID_COLUMNS "
                             f"or KEYED of the store part that creates them")
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
                           for t, c in own_id.items()}
                for table in sorted(known):
                    cols = _columns(db, "shard", table)
                    missing = set(cols) - set(_columns(db, "main", table))
                    if missing:
                        raise StoreError(f"{shard}: {table} has columns {sorted(missing)} unknown here")
                    shift = id_columns.get(table, {})
                    exprs = [f"{c} + {offsets[shift[c]]}" if c in shift else c for c in cols]
                    verb = "INSERT OR IGNORE" if table in keyed else "INSERT"
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
        if key in SHARED_META or key.startswith("schema_version."):
            continue
        row = db.execute("SELECT value FROM main.meta WHERE key=?", (key,)).fetchone()
        if row is not None and row[0] != value and key == "embedder":
            raise StoreError(f"{shard} was built with embedder '{value}', the shards before it with "
                             f"'{row[0]}'; rebuild it with the same config")
