"""The JSON-lines protocol between the harness (`WorkerClient`, in `.venv`) and a peer's worker, and the workers,
run as `.venv-peers/bin/python benchmarks/peers/workers.py mem0|amem` (standard library only at the top: membox_local
is not installed there; a peer's library is imported by its `init`).

One request per line on stdin, one reply per line on stdout:

    {"op": "init", "store": DIR, "base_url": URL, "model": NAME, "embedder": PATH, "threads": N}
    {"op": "add", "message": {"id": "D1:3", "speaker": "Caroline", "text": "...", "session": "1", "date": "..."}}
        -> {"ok": true, "memories": N, "failed": false, "errors": 0}
    {"op": "search", "question": "...", "k": 50}
        -> {"ok": true, "items": [{"text": "...", "sources": ["D1:3"]}, ...]}   (best first)
    {"op": "stats"} -> {"ok": true, "stats": {...}}
    {"op": "close"} -> {"ok": true}, then the worker exits

A request that fails answers {"ok": false, "error": "one line"} (RequestFailed); the worker goes on. What the peer
libraries print goes to stderr (fd 1 is moved there before they are imported), so stdout carries the protocol only;
stderr goes to a log file. A worker that dies, answers something that is not JSON, or takes longer than the time-out
raises WorkerError, one line: the worker, the op, the exit code, the last line of its log. Each peer is configured
with its documented options only (docs/peers.md says what and why).
"""
from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable

# offline and quiet, before any peer library is imported (documented switches of each library)
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MEM0_TELEMETRY": "False",
    "ANONYMIZED_TELEMETRY": "False",  # chromadb (A-Mem's store)
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm (A-Mem imports it) reads its cost map from disk, not the web
    "TOKENIZERS_PARALLELISM": "false", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
}


# ---- the harness side
def last_line(path: Path, limit: int = 300) -> str:
    """The last non-blank line of a log (a worker's or the server's), for a one-line error."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:limit] if lines else ""


class WorkerError(RuntimeError):
    """A worker that cannot go on (died, garbled, timed out)."""


class RequestFailed(RuntimeError):
    """A request the worker answered with ok=false: the worker is still there."""


class WorkerClient:
    """One worker process. `request(op, **fields)` sends one line and waits for one line."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None,
                 timeout: float = 600.0):
        self.name, self.log_path, self.timeout = name, Path(log_path), timeout
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                         env={**os.environ, **(env or {})}, text=True, encoding="utf-8", bufsize=1)
        except OSError as exc:
            self._log.close()
            raise WorkerError(f"{name} worker could not start ({' '.join(cmd[:2])}): {exc}") from None
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # end of output: the worker exited

    def _died(self, op: str, what: str) -> WorkerError:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self._log.flush()
        return WorkerError(f"{self.name} worker {what} during '{op}' (exit code {code}): "
                           f"{last_line(self.log_path) or 'no output'} [log: {self.log_path}]")

    def _send(self, op: str, **fields: Any) -> None:
        self.proc.stdin.write(json.dumps({"op": op, **fields}, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()

    def request(self, op: str, timeout: float | None = None, **fields: Any) -> dict:
        """The worker's reply (ok=true) as a dict; RequestFailed when it answered ok=false; WorkerError when it
        cannot answer."""
        if self.proc.poll() is not None:
            raise self._died(op, "had exited")
        try:
            self._send(op, **fields)
        except OSError:  # BrokenPipeError among them
            raise self._died(op, "exited") from None
        timeout = timeout or self.timeout
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise WorkerError(f"{self.name} worker gave no answer to '{op}' in {timeout:.0f} s (killed) "
                              f"[log: {self.log_path}]") from None
        if line is None:
            raise self._died(op, "exited")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            raise WorkerError(f"{self.name} worker answered '{op}' with a line that is not JSON: "
                              f"{line.strip()[:200]!r}") from None
        if not reply.get("ok"):
            raise RequestFailed(f"{self.name} '{op}': {reply.get('error', 'no reason given')}")
        return reply

    def close(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            try:
                self._send("close")
                self.proc.wait(timeout=timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- the worker side
class ErrorCount(logging.Handler):
    """Counts the records of level ERROR and above the peer library logs (a peer that swallows a failed LLM call
    and goes on logs it: the message is kept, degraded)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.count, self.last = 0, ""

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
            reply = {"ok": False, "error": " ".join(f"{type(exc).__name__}: {exc}".split())[:500]}
        stdout.write(json.dumps(reply, ensure_ascii=False) + "\n")
        stdout.flush()
    return 0


class PeerWorker:
    """What both peers share: `init` (threads, the error count, the store folder, then the peer's `open`) and `add`
    (one message through the peer's `put`; one that raises is dropped; `tally`: the memories it wrote, and more)."""

    COUNTS: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.errors = ErrorCount()
        self.counts = dict.fromkeys(("adds", "failed", "with_errors", *self.COUNTS), 0)

    def init(self, req: dict) -> dict:
        threads = int(req.get("threads", 0))  # the embedder's torch threads: one thread budget for every system
        if threads > 0:
            for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                os.environ[key] = str(threads)
            with contextlib.suppress(ImportError):
                import torch

                torch.set_num_threads(threads)
        logging.getLogger().addHandler(self.errors)
        store = Path(req["store"])
        store.mkdir(parents=True, exist_ok=True)
        return {"info": self.open(req, store)}

    def add(self, req: dict) -> dict:
        m = req["message"]
        before = self.errors.count
        self.counts["adds"] += 1
        try:
            written = self.put(m)
        except Exception as exc:  # a failed model call the peer does not catch: the message is dropped
            self.counts["failed"] += 1
            return {"memories": 0, "failed": True, "errors": self.errors.count - before,
                    "reason": f"{type(exc).__name__}: {exc}"[:300]}
        memories, extra = self.tally(m, written)
        errors = self.errors.count - before
        self.counts["with_errors"] += errors > 0
        return {"memories": memories, "failed": False, "errors": errors, **extra,
                "reason": self.errors.last if errors else ""}


class Mem0Worker(PeerWorker):
    """mem0 (`mem0ai`, unmodified), one `add` per turn; a memory's source is the dia_id of the `add` that wrote it
    (approximate: mem0 reads the session's last messages too)."""

    COUNTS = ("no_memory", "memories_written")

    def open(self, req: dict, store: Path) -> dict:
        from mem0 import Memory

        config = {
            "llm": {"provider": "openai", "config": {
                "model": req["model"], "openai_base_url": req["base_url"], "api_key": "sk-local",
                "temperature": 0.0}},
            "embedder": {"provider": "huggingface", "config": {"model": req["embedder"], "embedding_dims": 384}},
            "vector_store": {"provider": "qdrant", "config": {
                "collection_name": "mem0", "path": str(store / "qdrant"), "on_disk": True,
                "embedding_model_dims": 384}},
            "history_db_path": str(store / "history.db"),
        }
        self.memory = Memory.from_config(config)
        self.user_id = req["conversation"]
        # the config as saved with the results: no key, URL or path of this machine's temporary folders
        hidden = ("history_db_path", "path", "api_key", "openai_base_url")
        shown = {k: {**v, "config": {ck: cv for ck, cv in v["config"].items() if ck not in hidden}}
                 for k, v in config.items() if k not in hidden}
        shown["embedder"]["config"]["model"] = os.path.basename(req["embedder"])
        return {"system": "mem0", "gives_sources": True, "version": md.version("mem0ai"), "config": shown}

    def put(self, m: dict):
        return self.memory.add([{"role": "user", "content": f"{m['speaker']}: {m['text']}"}], user_id=self.user_id,
                               metadata={"dia_id": m["id"], "session_date": m.get("date", "")})

    def tally(self, m: dict, res) -> tuple[int, dict]:
        written = [r for r in (res or {}).get("results", []) if r.get("event") in ("ADD", "UPDATE")]
        self.counts["no_memory"] += not written
        self.counts["memories_written"] += len(written)
        return len(written), {}

    def search(self, req: dict) -> dict:
        res = self.memory.search(req["question"], top_k=int(req.get("k", 20)), filters={"user_id": self.user_id})
        items = []
        for r in res.get("results", []):
            meta = r.get("metadata") or {}
            date = meta.get("session_date", "")
            items.append({"text": f"[{date}] {r['memory']}" if date else r["memory"],
                          "sources": [meta["dia_id"]] if meta.get("dia_id") else [], "score": r.get("score")})
        return {"items": items}

    def stats(self, req: dict) -> dict:
        stored = self.memory.get_all(filters={"user_id": self.user_id}, top_k=100000).get("results", [])
        return {"stats": {**self.counts, "memories_stored": len(stored)}}


class AMemWorker(PeerWorker):
    """A-Mem (`a-mem`, module `agentic_memory`, unmodified), one `add_note` per turn; its openai client reads the
    documented OPENAI_BASE_URL, set by the harness to its proxy. A note is one message: its source is exact."""

    COUNTS = ("no_analysis",)

    def open(self, req: dict, store: Path) -> dict:
        from agentic_memory.memory_system import AgenticMemorySystem

        self.sources: dict[str, str] = {}  # note id -> dia_id
        self.system = AgenticMemorySystem(model_name=req["embedder"], llm_backend="openai", llm_model=req["model"],
                                          api_key="sk-local", storage_path=str(store / "chroma"))
        return {"system": "a-mem", "gives_sources": True, "version": md.version("a-mem"),
                "config": {"llm_backend": "openai", "llm_model": req["model"], "model_name": Path(req["embedder"]).name,
                           "evo_threshold": self.system.evo_threshold}}

    def put(self, m: dict):
        return self.system.add_note(f"{m['speaker']}: {m['text']}", time=m.get("date") or None)

    def tally(self, m: dict, note_id) -> tuple[int, dict]:
        self.sources[note_id] = m["id"]
        note = self.system.read(note_id)
        # analyze_content catches its own failure and keeps the note with no keywords, context "General", no tags
        unanalysed = note is not None and not note.keywords and note.context == "General" and not note.tags
        self.counts["no_analysis"] += unanalysed
        return 1, {"unanalysed": unanalysed}

    def search(self, req: dict) -> dict:
        items = []
        for hit in self.system.search_agentic(req["question"], int(req.get("k", 5))):
            note = self.system.read(hit["id"])
            if note is None:
                continue
            text = f"[{note.timestamp}] {note.content}" if note.timestamp else note.content
            if note.context and note.context != "General":
                text += f" (context: {note.context})"
            src = self.sources.get(hit["id"])
            items.append({"text": text, "sources": [src] if src else [], "score": hit.get("score"),
                          "neighbor": bool(hit.get("is_neighbor"))})
        return {"items": items}

    def stats(self, req: dict) -> dict:
        return {"stats": {**self.counts, "notes_stored": self.system.retriever.count(),
                          "evolutions": self.system.evo_cnt}}


WORKERS = {"mem0": Mem0Worker, "amem": AMemWorker}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in WORKERS:
        sys.exit(f"usage: workers.py {'|'.join(WORKERS)}")
    for key, value in OFFLINE_ENV.items():  # before the peer library is imported (by `init`)
        os.environ.setdefault(key, value)
    w = WORKERS[argv[0]]()
    return serve({"init": w.init, "add": w.add, "search": w.search, "stats": w.stats})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
