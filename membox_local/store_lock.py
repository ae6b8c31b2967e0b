"""The store's errors and a memory folder's write lock (`WriteLock`: one writer at a time, readers never wait),
re-exported by store.py."""
from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

from .private import FILE_MODE, private_dir, private_file


class StoreError(RuntimeError):
    pass


class NotFound(StoreError, KeyError):
    """No record with this id (a box, a message, a conversation): a StoreError, and a KeyError for callers that
    look records up as in a dict; shown as its message (a KeyError alone would show it quoted)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


LOCK_FILE = "build.lock"


class StoreBusy(StoreError):
    """Another process holds the memory folder's write lock."""


class WriteLock:
    """A memory folder's write lock: an exclusive, non-blocking flock on `<folder>/build.lock` (0600).

    Every writer takes it (`membox build`, Memory.add / seal / forget, the LoCoMo evaluation's builds); readers
    (`membox ask`, `membox show`, Memory.search / context / answer) never do: SQLite's write-ahead log gives them
    a consistent view while a build runs. A second writer is refused at once with one line naming the holder,
    whose pid, operation, command and start time are written into the file. Only the flock decides: it dies with
    the process that held it, so a file a killed process left behind, whatever it says, never blocks.
    The file also carries a token that changes with every holder, so a writer can tell whether another one wrote
    in between (`previous`, the token found on taking it).
    """

    def __init__(self, folder: str | Path, what: str):
        self.folder, self.what = Path(folder), what
        self.path = self.folder / LOCK_FILE
        self.token = f"{os.getpid()}-{uuid.uuid4().hex}"
        self.previous: str | None = None
        self._fd: int | None = None

    def acquire(self) -> "WriteLock":
        import fcntl

        if self._fd is not None:
            return self
        private_dir(self.folder)
        private_file(self.path)  # 0600 whatever the umask (private.py)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreBusy(self._busy_message(_read_holder(fd))) from None
            self.previous = _read_holder(fd).get("token")
            info = {"pid": os.getpid(), "what": self.what, "since": time.time(),
                    "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200],
                    "token": self.token}
            _write_holder(fd, info)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (again: nothing). The file stays, marked released, with the last holder's token."""
        import fcntl

        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            _write_holder(fd, {"token": self.token, "released": True})
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    close = release

    def __enter__(self) -> "WriteLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def _busy_message(self, holder: dict) -> str:
        pid = holder.get("pid")
        if not isinstance(pid, int) or holder.get("released"):
            who = "another process (one that did not say which)"
        else:
            details = [str(holder.get("what") or "writing")]
            if holder.get("command"):
                details.append(f"`{holder['command']}`")
            if isinstance(holder.get("since"), (int, float)):
                details.append("since " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder["since"])))
            who = f"process {pid} ({', '.join(details)})"
        return (f"{self.folder} is in use by {who}; wait for it to finish, then try again "
                f"(reading it, e.g. `membox ask`, works meanwhile)")


def _read_holder(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_holder(fd: int, info: dict) -> None:
    data = json.dumps(info).encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
