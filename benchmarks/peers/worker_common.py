"""The worker side of the JSON-lines protocol (standard library only: it runs in `.venv-peers`, where membox_local
is not installed, and is imported as `worker_common` by the worker scripts beside it).

One request per line on stdin, one reply per line on stdout:

    {"op": "init", "store": DIR, "base_url": URL, "model": NAME, "embedder": PATH, "threads": N}
    {"op": "add", "message": {"id": "D1:3", "speaker": "Caroline", "text": "...", "session": "1", "date": "..."}}
        -> {"ok": true, "memories": N, "failed": false, "errors": 0}
    {"op": "search", "question": "...", "k": 50}
        -> {"ok": true, "items": [{"text": "...", "sources": ["D1:3"]}, ...]}   (best first)
    {"op": "stats"} -> {"ok": true, "stats": {...}}
    {"op": "close"} -> {"ok": true}, then the worker exits

A request that fails answers {"ok": false, "error": "one line"}; the worker goes on. What the peer libraries print
goes to stderr (fd 1 is moved there before they are imported), so stdout carries the protocol only.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from typing import Any, Callable

# offline and quiet, before any peer library is imported (documented switches of each library)
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MEM0_TELEMETRY": "False",
    "ANONYMIZED_TELEMETRY": "False",  # chromadb (A-Mem's store)
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm (A-Mem imports it) reads its cost map from disk, not the web
    "TOKENIZERS_PARALLELISM": "false",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


class ErrorCount(logging.Handler):
    """Counts the records of level ERROR and above the peer library logs (a peer that swallows a failed LLM call
    and goes on logs it: the message is kept, degraded)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.count = 0
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        try:
            self.last = record.getMessage()[:300]
        except Exception:  # a record whose arguments do not format
            self.last = str(record.msg)[:300]


def protocol_stream():
    """The real stdout, for replies only; fd 1 and sys.stdout then point at stderr, so whatever the peer libraries
    print cannot corrupt the protocol."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def one_line(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:500]


def serve(handlers: dict[str, Callable[[dict], dict]], stdin=None, stdout=None) -> int:
    """Answer requests until `close` or the end of stdin. `handlers`: op -> function(request) -> reply fields."""
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else protocol_stream()
    for line in stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "close":
                stdout.write(json.dumps({"ok": True}) + "\n")
                stdout.flush()
                return 0
            if op not in handlers:
                raise ValueError(f"unknown op {op!r}; this worker knows {sorted(handlers) + ['close']}")
            reply: dict[str, Any] = {"ok": True, **handlers[op](req)}
        except Exception as exc:  # the worker goes on: one failed request is the harness's to count
            traceback.print_exc(file=sys.stderr)
            reply = {"ok": False, "error": one_line(exc)}
        stdout.write(json.dumps(reply, ensure_ascii=False) + "\n")
        stdout.flush()
    return 0


def set_offline() -> None:
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


def limit_threads(threads: int) -> None:
    """The embedder's torch threads, as the harness says (one llama.cpp/torch thread budget for every system)."""
    if threads > 0:
        for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[key] = str(threads)
        try:
            import torch

            torch.set_num_threads(threads)
        except ImportError:
            pass
