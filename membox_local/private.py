"""Memory folders hold people's conversations: private to their owner by default, whatever the umask.

A memory folder is made owner-only (0700) and every file the library writes in it (memory.db and its
-wal/-shm, the *.hnsw indexes and their *.ids.json maps, build.lock, shards) owner read/write only (0600).
New files and folders get exactly that mode (created with it, as the umask can only take bits away, then
chmod-ed, so that no umask changes it). Folders and files an older version made (0755, 0644) are tightened
when they are opened again: their group and other bits are taken away, no bit is added.
"""
from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def _tighten(path: str | Path, mode: int) -> None:
    """Take away what `mode` does not grant (group and other bits); never add a bit, so a read-only file stays
    read-only. A file of another owner is not ours to change, and is left as it is."""
    try:
        now = os.stat(path).st_mode & 0o777
        if now & ~mode:
            os.chmod(path, now & mode)
    except (FileNotFoundError, PermissionError):
        pass


def private_dir(path: str | Path) -> Path:
    """Make the folder `path` (and missing parents, as mkdir -p does) owner-only: a new folder is 0700; an
    existing one, e.g. one an older version made 0755, loses its group and other bits here."""
    p = Path(path)
    if not p.is_dir():
        p.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        os.chmod(p, DIR_MODE)
    else:
        _tighten(p, DIR_MODE)
    return p


def private_file(path: str | Path) -> Path:
    """Create `path` empty with mode 0600 if it is missing; an existing one (an older version's 0644) loses its
    group and other bits. SQLite gives a database's -wal, -shm and -journal files the mode of the database file,
    so creating memory.db this way before connecting keeps them private too."""
    p = Path(path)
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        os.chmod(p, FILE_MODE)
    except FileExistsError:
        _tighten(p, FILE_MODE)
    return p


def tighten(path: str | Path) -> None:
    """Take group and other bits off a file that exists (an older version's -wal/-shm, a file written by a
    library that obeys the umask); a missing one is left missing."""
    _tighten(path, FILE_MODE)


def private_open(path: str | Path, mode: str = "w", **kw):
    """`open(path, mode)` for writing ('w', 'wb', 'a', 'ab'), the file created 0600 (or tightened to it)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.chmod(fd, FILE_MODE)
        return os.fdopen(fd, mode, **kw)
    except BaseException:
        os.close(fd)
        raise


def write_private(path: str | Path, data: str | bytes) -> None:
    """`Path.write_text` / `write_bytes` with the file 0600."""
    with private_open(path, "wb" if isinstance(data, bytes) else "w",
                      **({} if isinstance(data, bytes) else {"encoding": "utf-8"})) as fh:
        fh.write(data)
