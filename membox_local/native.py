"""Native state that grows with the input shapes a model has seen, bounded.

Torch runs MiniLM's layers on CPU through oneDNN (torch.backends.mkldnn), which keeps native state for every input
shape it has run (batch size x padded length). A long-running process that embeds texts of every length (a server
filing messages and answering searches) grows with it: MiniLM on one thread, 600 calls of 1-4 texts of 3-60 words
(LoCoMo dev), +39.4 MB with oneDNN on and +10.9 MB with it off, alone on 2 cores (`python benchmarks/shape_memory.py`,
benchmarks/results/shape-memory.json); capping oneDNN's primitive cache (ONEDNN_PRIMITIVE_CACHE_CAPACITY) or ideep's
(LRU_CACHE_CAPACITY) did not bound it. Off, MiniLM computes the same vectors (cosine 0.9999999); calls of 1-4 texts
take the same time, batches of up to 64 texts 1.27x as long (a build's embedding is seconds of its minutes).
So the library's MiniLM calls (the embedder, the continuity cross-encoder) run inside `onednn_off()`.
"""
from __future__ import annotations

import threading
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

