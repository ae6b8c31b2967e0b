"""One writer at a time, readers never wait (store.WriteLock).

Every writer (`membox build`, Memory.add / seal / forget, the LoCoMo evaluation's builds) takes the memory folder's
write lock, an exclusive non-blocking flock on build.lock; a second writer, in this process or another, is refused
at once with one line naming the holder's pid. Readers (`membox ask`, `membox show`, Memory.search / answer) never
take it: SQLite's write-ahead log lets them read while a build writes. Only the flock decides, so a lock file a
dead process left, whatever it says, never blocks.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from membox_local import cli
from membox_local.ingest import load_jsonl
from membox_local.memory import Memory, open_store
from membox_local.store import LOCK_FILE, StoreBusy, WriteLock
from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import DEMO, REPO

QUESTIONS = ["Which race did Maya sign up for?", "What is the name of Tom's cat?",
             "What did the physio tell Maya to do about her knee?"]
CONFIG_TOML = """extends = "cpu"
[loom]
judge = "embedding"
threshold = 0.15
[retrieve]
mode = "compact"
resolve_dates = false
[answer]
llm = {}
"""
# the `cfg` fixture (tests/conftest.py), for a process of its own
CFG_IN_CHILD = ("from membox_local.config import load_config\n"
                "cfg = load_config('cpu', {'loom.judge': 'embedding', 'loom.threshold': 0.15, "
                "'retrieve.mode': 'compact', 'retrieve.resolve_dates': False, 'answer.llm': {}})\n")


class GatedBackend(FakeBackend):
    """A slow model: its first JSON call (the first extraction) waits until the test opens the gate, so that the
    build is certainly in progress, holding the lock, while the test runs its readers and second writers."""

    def __init__(self, delay: float = 0.01):
        super().__init__()
        self.started, self.gate, self.delay = threading.Event(), threading.Event(), delay

    def json_batch(self, requests):
        self.started.set()
        assert self.gate.wait(60), "the test never opened the gate"
        time.sleep(self.delay * len(requests))
        return super().json_batch(requests)


def child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=REPO)


def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "test.toml"
    path.write_text(CONFIG_TOML)
    return path


def ask_many(folder: Path, cfg, n: int = 20) -> list[BaseException]:
    """n concurrent readers, each with its Memory: answer, search, and read the boxes as `membox show` does."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        try:
            barrier.wait(30)
            q = QUESTIONS[i % len(QUESTIONS)]
            with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
                ans = mem.answer(q)
                assert isinstance(ans.text, str)
                hits = mem.search(q, k=3)
                assert all(b.status == "extracted" for b, _ in hits)  # only finished boxes are indexed
            store = open_store(folder)
            try:
                boxes = store.boxes()
                assert boxes and all(b.messages for b in boxes)  # no box seen half-written
            finally:
                store.close()
        except BaseException as exc:  # noqa: BLE001 - every failure is reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


def test_readers_work_during_a_build_and_a_second_writer_is_refused_naming_the_pid(tmp_path, cfg, capsys,
                                                                                     monkeypatch):
    folder = tmp_path / "mem"
    msgs = load_jsonl(DEMO)
    with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as first:
        first.add(msgs[:20], seal=True)  # something to read while the rest is built
        first.sync()

    backend = GatedBackend()
    outcome: dict = {}

    def build() -> None:
        try:
            with Memory(folder, cfg, backend=backend, embedder=FakeEmbedder()) as mem:
                outcome["added"] = mem.add(msgs[20:], seal=True)
        except BaseException as exc:  # noqa: BLE001
            outcome["error"] = exc

    builder = threading.Thread(target=build)
    builder.start()
    try:
        assert backend.started.wait(60), "the build never reached the model"
        pid = os.getpid()

        # a second writer in this process (another Memory) is refused at once, naming the holder
        with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as other:
            with pytest.raises(StoreBusy) as refused:
                other.add(msgs[20:])
            with pytest.raises(StoreBusy):
                other.seal()
            with pytest.raises(StoreBusy):
                other.forget("maya-tom", ["s1-1"])
        line = str(refused.value)
        assert f"{folder} is in use by process {pid} (Memory.add" in line and "since " in line
        assert "wait for it to finish" in line and "\n" not in line

        # ... and so is one in another process
        code = CFG_IN_CHILD + (
            "from membox_local.memory import Memory\n"
            "from membox_local.store import StoreBusy\n"
            "from membox_local.testing import FakeBackend, FakeEmbedder\n"
            f"mem = Memory({str(folder)!r}, cfg, backend=FakeBackend(), embedder=FakeEmbedder())\n"
            "try:\n"
            "    mem.add([])\n"
            "except StoreBusy as exc:\n"
            "    print(exc)\n"
            "    raise SystemExit(3)\n")
        res = child(code)
        assert res.returncode == 3, res.stderr
        assert f"is in use by process {pid} (Memory.add" in res.stdout

        # ... and the command line says so in one line (exit code 2), `membox build` and `membox forget` alike
        import membox_local.memory as memory_module

        monkeypatch.setattr(memory_module, "preflight_models", lambda cfg, **kw: None)  # no model needed to be refused
        config = config_file(tmp_path)
        capsys.readouterr()
        assert cli.main(["build", str(DEMO), "--store", str(folder), "--config", str(config)]) == 2
        assert cli.main(["forget", str(folder), "--conversation", "maya-tom", "--config", str(config)]) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 2 and all(l.startswith(f"error: {folder} is in use by process {pid} (Memory.add")
                                       for l in lines), lines

        # while the build holds the lock (stopped in a model call), 20 concurrent readers all succeed
        assert ask_many(folder, cfg) == []
    finally:
        backend.gate.set()
    # and again while it runs on, writing
    errors = ask_many(folder, cfg)
    builder.join(120)
    assert errors == []
    assert "error" not in outcome, outcome.get("error")
    assert outcome["added"] == 20

    with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:  # the lock was given back
        assert mem.add([]) == 0
        assert len(mem.store.message_rows()) == 40 and not mem.store.pending_messages("maya-tom")
        assert {b.status for b in mem.boxes()} == {"extracted"}


def test_a_lock_file_a_dead_process_left_never_blocks(tmp_path, cfg):
    folder = tmp_path / "mem"
    res = child("import os\n"
                "from membox_local.store import WriteLock\n"
                f"WriteLock({str(folder)!r}, 'a build that was killed').acquire()\n"
                "print(os.getpid())\n"
                "os.kill(os.getpid(), 9)\n")
    assert res.returncode == -9
    dead = int(res.stdout.split()[0])
    assert f'"pid": {dead}' in (folder / LOCK_FILE).read_text()  # the file still names the dead holder
    with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        assert mem.add(load_jsonl(DEMO)[:6], seal=True) == 6  # the flock died with it: not blocked

    (folder / LOCK_FILE).write_text('{"pid": 1, "what": "garbage"')  # whatever the file says
    with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        assert mem.add(load_jsonl(DEMO)[6:10]) == 4
    assert oct(os.stat(folder / LOCK_FILE).st_mode & 0o777) == "0o600"


def test_a_holder_that_wrote_nothing_is_still_refused_and_the_lock_is_reentrant(tmp_path, cfg):
    import fcntl

    folder = tmp_path / "mem"
    mem = Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    try:
        with open(folder / LOCK_FILE, "w") as other:  # a writer that says nothing about itself
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with pytest.raises(StoreBusy, match=f"{folder} is in use by another process"):
                mem.add(load_jsonl(DEMO)[:4])
        assert len(mem.store.message_rows()) == 0  # refused before anything was written
        with mem.writing("outer operation"):  # operations inside one another keep the lock they find
            mem.add(load_jsonl(DEMO)[:4])
            mem.seal()
            with pytest.raises(StoreBusy, match=r"process \d+ \(outer operation"):
                WriteLock(folder, "another").acquire()
    finally:
        mem.close()


def test_the_evaluation_build_lock_is_the_same_lock(tmp_path, cfg):
    from membox_local.evaluation.locomo import _lock_build

    folder = tmp_path / "mem"
    other = Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    try:
        with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as held:
            _lock_build(held)
            held.add(load_jsonl(DEMO)[:4])  # its own writes go on under the lock it holds
            with pytest.raises(StoreBusy, match=rf"in use by process {os.getpid()} \(LoCoMo eval build"):
                other.add([])
        # closing the Memory gave the lock back
        assert other.add(load_jsonl(DEMO)[4:8], seal=True) == 4
    finally:
        other.close()


def test_a_writer_continues_correctly_after_another_wrote_in_between(tmp_path, cfg):
    """Two Memories of one folder taking turns build what one builds alone: a writer that finds that another
    held the lock since its last write reads its open box and recent messages from the store again."""
    msgs = load_jsonl(DEMO)
    with Memory(tmp_path / "ref", cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as ref:
        ref.add(msgs, seal=True)
        want = [[m.message_id for m in b.messages] for b in ref.boxes()]
    a = Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    b = Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    try:
        a.add(msgs[:13])
        b.add(msgs[13:27])
        a.add(msgs[27:], seal=True)
        assert [[m.message_id for m in box.messages] for box in a.boxes()] == want
    finally:
        a.close()
        b.close()
