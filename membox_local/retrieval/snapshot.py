"""box-hits' box map kept beside the store, so that the first question after opening a large memory does not read and
index the whole scope again (100,000 messages: 29 s alone on the 2-core VM, two thirds of it BM25's tokenizing and
postings, the rest the window vectors and token counts; BENCHMARKS.md, "Scale").

A scope of at least MIN_MESSAGES messages, once its map is made, is written to `<memory>/boxhits-<digest>.snapshot.npz`:
the message ids in order, the boxes' ids and states, every array the map holds (vectors, windows, centroids, token
counts) and the BM25 postings (lexical.LexicalIndex.arrays). No message text is in it, but the BM25 terms are the
messages' stemmed words, so it is erased with them: `Memory.forget` deletes every snapshot with the vector indexes
(memory_erasure.drop_indexes), and a snapshot is only read while the store's erasure count (Store.generation) is the
one it was written at; any other is deleted on sight. It is a cache: the store is the source of truth, a snapshot
that does not fit the store (another model, a message gone, ids out of order, a damaged file, one a crash left
half-written as `.tmp`) is rebuilt from the store, and what was filed after it is added as any later filing is
(boxmap.extended). Written whole to a temporary file and renamed, so a reader sees the old file or the new one.
"""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from ..private import private_open
from ..records import Box
from .boxmap import BoxMap, extended
from .lexical import LexicalIndex

MIN_MESSAGES = 5_000  # smaller scopes are made from the store in about a second: no file for them
VERSION = 1
SUFFIX = ".snapshot.npz"


def path_for(folder: Path, mode: str, scope: str) -> Path:
    digest = hashlib.sha1(f"{mode}\0{scope}".encode()).hexdigest()[:16]
    return folder / f"{mode}-{digest}{SUFFIX}"


def save(memory, bm: BoxMap, mode: str, erased: int) -> bool:
    """Write the map (its BM25 index and token counts made first) for the store's state with `erased` erasures;
    False where the scope is small, several conversations, or the file cannot be written (a read-only folder: the
    map is then made from the store after each opening, as before)."""
    if bm.scope is None or len(bm.messages) < MIN_MESSAGES:
        return False
    path = path_for(memory.path, mode, bm.scope)
    lexical = bm.lexical_index().arrays()
    meta = {"version": VERSION, "mode": mode, "scope": bm.scope, "erased": erased, "messages": len(bm.messages),
            "embedder": memory.embedder.model_name, "dim": int(bm.vectors.shape[1])}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with private_open(tmp, "wb") as fh:  # owner-only, as every file of a memory folder (private.py)
            np.savez(fh, meta=np.array(json.dumps(meta)),
                     message_ids=np.frombuffer(json.dumps([m.message_id for m in bm.messages]).encode(), dtype=np.uint8),
                     box_ids=np.array([b.id for b in bm.boxes], dtype=np.int64),
                     box_open=np.array([b.status == "open" for b in bm.boxes]), box_of=bm.box_of,
                     vectors=bm.vectors, windows=bm.windows, centroids=bm.centroids, tokens=bm.message_tokens(),
                     **{f"lexical_{k}": v for k, v in lexical.items()})
        if memory.store.generation()[1] != erased:  # an erasure since the map was read: its terms must not stay
            tmp.unlink(missing_ok=True)
            return False
        os.replace(tmp, path)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def load(memory, mode: str, scope: str | None) -> tuple[BoxMap, int] | None:
    """The scope's map from its snapshot, brought up to date with what was filed since, and the number of messages
    the snapshot held; None where there is none or it does not fit the store (then deleted where it is stale)."""
    if scope is None:
        return None
    path = path_for(memory.path, mode, scope)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("version") != VERSION or meta.get("erased") != memory.store.generation()[1]:
                path.unlink(missing_ok=True)  # an erasure since it was written (or an older format): never read
                return None
            if meta["scope"] != scope or meta["embedder"] != memory.embedder.model_name:
                return None
            arrays = {k: z[k] for k in z.files if k != "meta"}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # damaged: made again from the store
        return None
    bm = _box_map(memory, scope, arrays)
    out = None if bm is None else extended(memory, bm)
    if out is None:
        return None
    out.lexical.extend([m.render() for m in out.messages[out.lexical.size:]])  # as BoxHitsRetriever.refresh grows it
    return out, len(bm.messages)


def _box_map(memory, scope: str, a: dict[str, np.ndarray]) -> BoxMap | None:
    """The map as it was when written, with the store's messages and boxes; None where the store does not hold
    them in that order any more."""
    ids = json.loads(a["message_ids"].tobytes().decode())
    messages = memory.store.messages(scope)[:len(ids)]
    if [m.message_id for m in messages] != ids:
        return None
    stored = {b.id: b for b in memory.store.boxes(scope, with_messages=False)}  # their rows: the messages are here
    box_of = a["box_of"].astype(np.int64)
    box_ids = a["box_ids"].tolist()
    members = np.split(np.argsort(box_of, kind="stable"), np.cumsum(np.bincount(box_of, minlength=len(box_ids)))[:-1])
    boxes: list[Box] = []
    for n, (box_id, was_open) in enumerate(zip(box_ids, a["box_open"].tolist())):
        mine = [messages[i] for i in members[n].tolist()]
        if box_id < 0 and mine:  # a message not filed then: a box of its own
            boxes.append(Box(-1, mine[0].conversation_id, mine[0].session, mine[0].session_date, mine))
        elif box_id in stored and mine:
            box = stored[box_id]
            box.messages = mine  # an open one's as they were then: boxmap.extended reads it again
            box.status = "open" if was_open else ("sealed" if box.status == "open" else box.status)
            boxes.append(box)
        else:
            return None
    position = {(messages[i].conversation_id, messages[i].message_id): int(b) for i, b in enumerate(box_of)}
    lexical = LexicalIndex.from_arrays(*(a[f"lexical_{k}"] for k in ("terms", "offsets", "docs", "counts", "lengths")))
    return BoxMap(messages, a["vectors"], box_of, boxes, members, position, windows=a["windows"],
                  centroids=a["centroids"], scope=scope, tokens=a["tokens"], lexical=lexical)
