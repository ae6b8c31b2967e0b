"""hnswlib vector indexes derived from the store: rebuilt from it when missing or stale.

Our ids (box ids, event ids, message uids) map to hnswlib integer labels under one lock; the map, with
each item's conversation, is saved beside the index so searches can be limited to one conversation.
"""
from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Collection

import numpy as np

from .private import private_file, tighten, write_private


class VectorIndex:
    def __init__(self, path: Path, dim: int, space: str = "cosine", ef: int = 200, m: int = 32):
        self.path, self.dim, self.space, self.ef, self.m = Path(path), dim, space, ef, m
        self._lock = threading.Lock()
        self.ids: list[int] = []  # label -> our id
        self.conv: list[str] = []  # label -> conversation id
        self._label_of: dict[int, int] = {}
        self._count: Counter = Counter()  # conversation -> its items, so that a search of one needs no count
        self._index = None
        self._load()

    def _new(self, capacity: int):
        import hnswlib

        index = hnswlib.Index(space=self.space, dim=self.dim)
        index.init_index(max_elements=max(capacity, 64), ef_construction=self.ef, M=self.m)
        index.set_ef(self.ef)
        return index

    def _load(self) -> None:
        meta = self.path.with_suffix(".ids.json")
        if not (self.path.exists() and meta.exists()):
            return
        import hnswlib

        tighten(self.path)  # files an older version wrote 0644 (private.py)
        tighten(meta)
        try:
            data = json.loads(meta.read_text())
            ids, conv = list(data["ids"]), list(data["conv"])
        except (ValueError, KeyError, TypeError):
            return  # an id map a killed save left unreadable (older versions wrote it in place): rebuilt by sync()
        if data.get("dim") != self.dim:
            return  # built with another embedder: rebuilt by sync()
        index = hnswlib.Index(space=self.space, dim=self.dim)
        index.load_index(str(self.path), max_elements=max(len(ids), 64))
        if index.get_current_count() != len(ids) or len(conv) != len(ids):
            return  # a save killed between its two files: the pair disagrees, rebuilt by sync()
        index.set_ef(self.ef)
        self._index, self.ids, self.conv = index, ids, conv
        self._label_of = {i: n for n, i in enumerate(self.ids)}
        self._count = Counter(conv)

    def __contains__(self, item_id: int) -> bool:
        return item_id in self._label_of

    def __len__(self) -> int:
        return len(self.ids)

    def held_bytes(self) -> int:
        """Bytes held for the items, counted from what they are: hnswlib's level-0 record per item (the vector as
        float32, 2*M neighbour links, a count and a label; upper levels hold about 1/M of the items with M links
        each), and the Python maps beside it (a list slot, an int and a dict entry each; conversation names are
        shared strings). hnswlib reserves room for twice the items on a resize but touches only what it uses."""
        per_item = self.dim * 4 + (2 * self.m + 1) * 4 + 8 + 4 * (self.m + 1)
        python = 8 + 32 + 8 + 100  # ids slot and int, conv slot, _label_of entry
        return len(self.ids) * (per_item + python)

    def add(self, ids: list[int], conversations: list[str], vectors: np.ndarray) -> None:
        with self._lock:
            fresh = [n for n, i in enumerate(ids) if i not in self._label_of]
            if not fresh:
                return
            if self._index is None:
                self._index = self._new(len(fresh) * 2)
            need = len(self.ids) + len(fresh)
            if need > self._index.get_max_elements():
                self._index.resize_index(need * 2)
            labels = np.arange(len(self.ids), need)
            # one thread: the graph, and so every search, is the same from run to run
            self._index.add_items(np.asarray(vectors, dtype=np.float32)[fresh], labels, num_threads=1)
            for n in fresh:
                self._label_of[ids[n]] = len(self.ids)
                self.ids.append(ids[n])
                self.conv.append(conversations[n])
                self._count[conversations[n]] += 1

    def search(self, vector: np.ndarray, k: int, conversation_id: str | None = None,
               only: Collection[int] | None = None) -> list[tuple[int, float]]:
        """Nearest items as (our id, cosine similarity), best first: of one conversation (None: any), and given
        `only`, among those ids."""
        with self._lock:
            if self._index is None or not self.ids:
                return []
            if only is None and (conversation_id is None or self._count[conversation_id] == len(self.ids)):
                allowed = len(self.ids)  # every item may be found: no filter (a Python call per node visited)
                filt = None
            elif only is None:
                conv = self.conv
                filt = lambda label: conv[label] == conversation_id  # noqa: E731
                allowed = self._count[conversation_id]
            else:
                ids, conv, only = self.ids, self.conv, None if only is None else set(only)
                filt = lambda label: ((conversation_id is None or conv[label] == conversation_id)  # noqa: E731
                                      and (only is None or ids[label] in only))
                allowed = sum(map(filt, range(len(ids))))
            k = min(k, allowed)
            if k <= 0:
                return []
            self._index.set_ef(max(self.ef, k * 2))
            labels, dists = self._index.knn_query(np.asarray(vector, dtype=np.float32), k=k, filter=filt)
            hits = [(self.ids[int(lab)], 1.0 - float(d)) for lab, d in zip(labels[0], dists[0])]
            return sorted(hits, key=lambda h: (-h[1], h[0]))  # equal similarities: the older item first

    def save(self) -> None:
        with self._lock:
            if self._index is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # files of this save's own (readers of one memory in several processes or threads save its indexes
            # too), renamed into place
            own = f"{os.getpid()}-{threading.get_ident()}"
            tmp = self.path.with_suffix(f".{own}.tmp")
            # 0600 (private.py): hnswlib writes with the umask's mode, into a file it truncates (keeping its mode)
            private_file(tmp)
            self._index.save_index(str(tmp))
            tighten(tmp)
            # the id map written whole beside its final name, then both renamed: a save a kill interrupts leaves
            # each file complete, old or new; a pair that disagrees is rebuilt on load (_load)
            ids_tmp = self.path.with_suffix(f".ids.{own}.tmp")
            write_private(ids_tmp, json.dumps({"dim": self.dim, "ids": self.ids, "conv": self.conv}))
            tmp.replace(self.path)
            ids_tmp.replace(self.path.with_suffix(".ids.json"))
