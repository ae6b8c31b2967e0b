"""Private by default (issue 24): a memory folder is 0700 and every file the library writes in it 0600, whatever
the umask; folders and files an older version left open are tightened when the memory is opened again."""
from __future__ import annotations

import dataclasses
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from membox_local.ingest import load_jsonl
from membox_local.memory import Memory
from membox_local.private import private_dir, private_file, private_open, write_private

from conftest import DEMO
from membox_local.testing import FakeBackend, FakeEmbedder


@pytest.fixture
def open_umask():
    """The usual umask (group and others may read); restored after the test."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): mode(p) for p in sorted(folder.rglob("*"))}


def build(folder: Path, cfg) -> Memory:
    mem = Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    mem.add(load_jsonl(DEMO), seal=True)
    assert mem.search("Which race did Maya sign up for?")  # builds and saves the vector indexes
    mem.answer("Which race did Maya sign up for?")
    return mem


def test_a_memory_folder_is_owner_only_whatever_the_umask(tmp_path, cfg, open_umask):
    folder = tmp_path / "mem"
    mem = build(folder, cfg)
    from membox_local.evaluation.locomo import _lock_build

    _lock_build(mem)  # the LoCoMo evaluation's build.lock, kept open by the memory
    try:
        mem.sync()
        for idx in mem._indexes.values():
            idx.save()
        files = modes(folder)  # while the store is open: memory.db-wal and -shm exist
        assert {"memory.db", "memory.db-wal", "memory.db-shm", "build.lock"} <= set(files)
        assert any(f.endswith(".hnsw") for f in files) and any(f.endswith(".ids.json") for f in files)
        assert mode(folder) == 0o700
        assert {f: oct(m) for f, m in files.items() if m != 0o600} == {}
    finally:
        mem.build_lock.close()
        mem.close()
    assert mode(folder) == 0o700 and set(modes(folder).values()) == {0o600}


def test_a_memory_an_older_version_left_readable_is_tightened_when_opened(tmp_path, cfg, open_umask):
    folder = tmp_path / "old"
    build(folder, cfg).close()
    os.chmod(folder, 0o755)  # as an older version left it
    for p in folder.iterdir():
        os.chmod(p, 0o644)
    mem = Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    try:
        mem.search("Which race did Maya sign up for?")  # loads the old indexes
        assert mode(folder) == 0o700
        assert {f: oct(m) for f, m in modes(folder).items() if m != 0o600} == {}
    finally:
        mem.close()


def test_the_helpers_give_exact_modes_and_never_add_a_bit(tmp_path, open_umask):
    d = private_dir(tmp_path / "a" / "b")
    assert mode(d) == 0o700
    f = private_file(d / "x")
    assert mode(f) == 0o600 and f.read_bytes() == b""
    f.write_text("kept")
    private_file(f)  # an existing file is not truncated
    assert f.read_text() == "kept"
    os.chmod(f, 0o400)  # read-only stays read-only
    private_file(f)
    assert mode(f) == 0o400
    write_private(d / "t.json", "{}")
    write_private(d / "b.bin", b"\x00")
    with private_open(d / "log", "a") as fh:
        fh.write("one\n")
    with private_open(d / "log", "a") as fh:
        fh.write("two\n")
    assert (d / "log").read_text() == "one\ntwo\n"
    assert {mode(d / n) for n in ("t.json", "b.bin", "log")} == {0o600}
    os.umask(0o277)  # a umask that takes too much still ends at exactly 0600 for new files
    assert mode(private_file(d / "y")) == 0o600


def test_a_merged_store_is_owner_only(tmp_path, cfg, open_umask):
    from membox_local.execution.merge import merge_stores

    shards = []
    for n, conv in enumerate(("a", "b")):
        folder = tmp_path / "shards" / f"{n:02d}"
        mem = Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder())
        mem.add([dataclasses.replace(m, conversation_id=conv) for m in load_jsonl(DEMO)[:6]], seal=True)
        mem.close()
        shards.append(folder / "memory.db")
    target = private_dir(tmp_path / "target")
    merge_stores(target / "memory.db", shards)
    db = sqlite3.connect(str(target / "memory.db"))
    db.execute("PRAGMA journal_mode=WAL").fetchone()
    db.execute("SELECT count(*) FROM messages").fetchone()
    try:
        assert {f: oct(m) for f, m in modes(target).items() if m != 0o600} == {}
    finally:
        db.close()


def test_a_ray_shard_is_owner_only(tmp_path, cfg, open_umask):
    """The Ray engine's actor (run here as a plain object): its shard folder and the seeded copy are private."""
    from membox_local.execution.ray_engine import ShardBuilder, db_bytes

    first = build(tmp_path / "first", cfg)
    first.close()
    seed = db_bytes(tmp_path / "first" / "memory.db")
    shard = tmp_path / "node" / "target" / "00"
    b = ShardBuilder(0, str(shard), cfg, FakeBackend, FakeEmbedder, seed)
    try:
        assert b.prepare(load_jsonl(DEMO)) == 0  # the seed holds them, filed
        assert mode(shard) == 0o700 and {f: oct(m) for f, m in modes(shard).items() if m != 0o600} == {}
    finally:
        b.memory.close()
