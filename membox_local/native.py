"""Native state that grows with the input shapes a model has seen, bounded.

Torch runs MiniLM's layers on CPU through oneDNN (torch.backends.mkldnn), which keeps native state for every input
shape it has run (batch size x padded length). A long-running process that embeds texts of every length (a server
filing messages and answering searches) grows with it: MiniLM on one thread, 600 calls of 1-4 texts of 3-60 words
(LoCoMo dev), +39.4 MB with oneDNN on and +10.9 MB with it off, alone on 2 cores (`python benchmarks/shape_memory.py`,
benchmarks/results/shape-memory.json); capping oneDNN's primitive cache (ONEDNN_PRIMITIVE_CACHE_CAPACITY) or ideep's
(LRU_CACHE_CAPACITY) did not bound it. Off, MiniLM computes the same vectors (cosine 0.9999999); calls of 1-4 texts
take the same time, batches of up to 64 texts 1.27x as long (a build's embedding is seconds of its minutes).
So the library's MiniLM calls (the embedder, the continuity cross-encoder) run inside `onednn_off()`.

The C heap keeps what such calls free: glibc's malloc keeps a freed block in its thread's heap for the next call, and
raises the size it maps on its own (up to 32 MB) whenever a larger mapped block is freed, so torch's temporaries for
a batch of long texts stay resident after it, in each thread's heap, at every new largest batch: a long-running
server's memory rose in steps of ~33 MB over its first minutes. `give_back_freed_heap()` hands the heaps' free pages
back (malloc_trim). MiniLM's calls of 1, 4 and 64 texts of 5-400 words, three rounds, alone: the heap kept +68.5 MB
without, +10.5 MB trimmed after every call (72 trims, 0.34 s in all; the calls took 62.7 s against 57.7, the pages
given back being faulted in again by the next large call) (`python benchmarks/heap_trim.py`,
benchmarks/results/heap-trim.json). A server trims at most once a second (HEAP_TRIM_EVERY_S).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_inside = 0  # calls inside onednn_off now, on any thread
_before: bool | None = None  # the flag as the first of them found it


@contextmanager
def onednn_off() -> Iterator[None]:
    """Torch's oneDNN off while the body runs. The flag is the process's, so it is turned off by the first caller in
    and set back to what it was by the last one out: calls on several threads at once never turn it on under another."""
    global _inside, _before
    import torch

    with _lock:
        if _inside == 0:
            _before = torch.backends.mkldnn.enabled
            torch.backends.mkldnn.enabled = False
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                torch.backends.mkldnn.enabled = _before


# `membox serve` and `membox mcp` trim after each piece of model work (Service), at most this often: a trim took
# ~5 ms in benchmarks/heap_trim.py (72 in 0.34 s), so at most 0.5% of a core
HEAP_TRIM_EVERY_S = 1.0
_trim_lock = threading.Lock()
_trimmed_at = float("-inf")
_malloc_trim = None  # glibc's malloc_trim, found on the first call; False where the C library has none


def give_back_freed_heap(every_s: float = HEAP_TRIM_EVERY_S) -> bool:
    """glibc's malloc_trim(0): the free pages in every thread's heap handed back to the system. At most once per
    `every_s` seconds over all threads (a call sooner does nothing and says False); False, too, where the C library
    is not glibc."""
    global _trimmed_at, _malloc_trim
    with _trim_lock:
        now = time.monotonic()
        if now - _trimmed_at < every_s:
            return False
        _trimmed_at = now
        if _malloc_trim is None:
            _malloc_trim = _find_malloc_trim()
        if not _malloc_trim:
            return False
    _malloc_trim(0)
    return True


def _find_malloc_trim():
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    fn.argtypes, fn.restype = (ctypes.c_size_t,), ctypes.c_int
    return fn
