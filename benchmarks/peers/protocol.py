"""The harness side of the JSON-lines protocol (worker_common.py has the worker side and the ops).

A worker is a subprocess; its stderr goes to a log file (never a pipe that could fill up and stall it). A worker
that dies, answers something that is not JSON, or takes longer than the time-out raises WorkerError with one line
that names the worker, the op, the exit code and the last line of its log.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any


class WorkerError(RuntimeError):
    """A worker that cannot go on (died, garbled, timed out). A request the worker answered with ok=false is
    RequestFailed instead: the worker is still there."""


class RequestFailed(RuntimeError):
    pass


def last_line(path: Path, limit: int = 300) -> str:
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:limit] if lines else ""


class WorkerClient:
    """One worker process. `request(op, **fields)` sends one line and waits for one line."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None,
                 cwd: str | None = None, timeout: float = 600.0):
        self.name, self.cmd, self.log_path, self.timeout = name, cmd, Path(log_path), timeout
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                         env={**os.environ, **(env or {})}, cwd=cwd, text=True, encoding="utf-8",
                                         bufsize=1)
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
        tail = last_line(self.log_path)
        return WorkerError(f"{self.name} worker {what} during '{op}' (exit code {code}): {tail or 'no output'} "
                           f"[log: {self.log_path}]")

    def request(self, op: str, timeout: float | None = None, **fields: Any) -> dict:
        """The worker's reply (ok=true) as a dict; RequestFailed when it answered ok=false; WorkerError when it
        cannot answer."""
        if self.proc.poll() is not None:
            raise self._died(op, "had exited")
        try:
            self.proc.stdin.write(json.dumps({"op": op, **fields}, ensure_ascii=False) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(op, "exited") from None
        try:
            line = self._lines.get(timeout=timeout or self.timeout)
        except queue.Empty:
            self.kill()
            raise WorkerError(f"{self.name} worker gave no answer to '{op}' in {timeout or self.timeout:.0f} s "
                              f"(killed) [log: {self.log_path}]") from None
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
                self.proc.stdin.write(json.dumps({"op": "close"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=timeout)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                self.kill()
        self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
