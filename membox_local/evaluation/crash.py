"""The crash harness (benchmarks/crash_harness.py reports it): a worker process
(`python -m membox_local.evaluation.crash worker STORE`) builds a multi-session conversation session by
session with the deterministic doubles (membox_local/testing.py), slowed by a small delay per model call,
embedding batch, commit and index save, printing a phase marker before each; `run_campaign` kills it with SIGKILL
at seeded random points, some aimed at phases (ingest, judging, extraction, weaving, a commit, an index save),
checks the folder after every exit (evaluation/integrity.py `check_store`), runs the worker again until it
finishes, and compares the final memory with an uninterrupted build (`memory_digest`).
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence


from ..argtypes import count, number
from ..records import Message
from .integrity import (COMPARED, check_store, connect_ro, digest_differences, memory_digest, message_counts,
                        table_sha)


# ---- the worker: a build slowed down and narrated ----------------------------------------------------------
PHASES = ("ingest", "judge", "extract", "weave", "embed", "commit", "index-save", "seal", "sync", "done")


def crash_messages(conversations: int = 2) -> list[Message]:
    """The bundled demo (40 messages over 3 sessions) and, for a second conversation and on, its first
    26 messages (2 sessions) under other ids, so that a batched build interleaves conversations of unequal
    length."""
    from ..ingest import load_jsonl

    demo = load_jsonl(Path(__file__).resolve().parent.parent / "data" / "demo.jsonl")
    out = list(demo)
    for k in range(1, conversations):
        out += [Message(f"{m.conversation_id}-{k + 1}", m.message_id, m.speaker, m.text, m.session, m.session_date)
                for m in demo[:26]]
    return out


def crash_config():
    """The CPU default (the hybrid judge, whose language-model features make judging calls) with the weaver's
    vote threshold lowered for the bag-of-words double, as the batch tests do."""
    from ..config import load_config

    cfg = load_config("cpu")
    cfg.weaver.vote_threshold = 0.2
    return cfg


def _events_per_line(r):
    """Extraction answered with one event per message (at most 4), so that the weaver links and groups them."""
    if r.stage != "extract":
        return None
    lines = [l.split(": ", 1)[1] for l in r.prompt.user.splitlines() if re.match(r"^[A-Z][\w ]*: ", l)]
    words = [w for w in re.findall(r"[a-z]+", " ".join(lines).lower()) if len(w) > 3]
    kws = list(dict.fromkeys(words))[:4]
    return {"topic": " ".join(kws[:2]), "keywords": kws, "events": [l[:150] for l in lines][:4]}


def _emit(phase: str) -> None:
    sys.stdout.write(f"@{phase}\n")
    sys.stdout.flush()


def make_doubles(call_s: float):
    """The deterministic doubles, each batched call announced (a phase marker) and slowed by `call_s`."""
    from ..testing import FakeBackend, FakeEmbedder

    stage_phase = {"judge": "judge", "extract": "extract", "link": "weave", "trace-init": "weave"}

    class SlowBackend(FakeBackend):
        def _call(self, requests):
            for phase in dict.fromkeys(stage_phase.get(r.stage, r.stage) for r in requests):
                _emit(phase)
            time.sleep(call_s)

        def label_batch(self, requests):
            self._call(requests)
            return super().label_batch(requests)

        def json_batch(self, requests):
            self._call(requests)
            return super().json_batch(requests)

        def score_batch(self, requests):
            self._call(requests)
            return super().score_batch(requests)

    class SlowEmbedder(FakeEmbedder):
        def encode(self, texts):
            _emit("embed")
            time.sleep(call_s / 2)
            return super().encode(texts)

    backend = SlowBackend()
    backend.responder = _events_per_line
    return backend, SlowEmbedder()


class _SlowCommits:
    """The store's connection, with each COMMIT announced and delayed (a kill then lands in an open write
    transaction)."""

    def __init__(self, db, delay_s: float):
        self._db, self._delay = db, delay_s

    def execute(self, sql, *args):
        if sql.strip().upper().startswith("COMMIT"):
            _emit("commit")
            time.sleep(self._delay)
        return self._db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)


def _slow_index_saves(delay_s: float) -> None:
    """Index saves announced and widened: a pause before each, inside the writing of the id map (after the file
    is opened and truncated, before its content is written) and after the index file is renamed into place,
    where a kill is otherwise a rare event."""
    from .. import index as index_mod
    from ..private import private_open

    save = index_mod.VectorIndex.save

    def slow_save(self):
        _emit("index-save")
        time.sleep(delay_s)
        return save(self)

    def slow_write_private(path, data):
        time.sleep(delay_s)
        with private_open(path, "wb" if isinstance(data, bytes) else "w",
                          **({} if isinstance(data, bytes) else {"encoding": "utf-8"})) as fh:
            fh.flush()
            time.sleep(delay_s)
            fh.write(data)

    def slow_replace(self, target):
        out = replace(self, target)
        if str(target).endswith(".hnsw"):
            time.sleep(delay_s)  # the index renamed into place, its id map not yet
        return out

    replace = Path.replace
    index_mod.VectorIndex.save = slow_save
    index_mod.write_private = slow_write_private
    Path.replace = slow_replace


def worker(store: str | Path, call_s: float = 0.02, conversations: int = 2, batch_size: int = 2) -> None:
    """Build (or resume building) the crash harness's memory: session by session, each session's new messages
    stored (`ingest`), filed with a batched build and the box index synced (as a search between sessions
    would), then every box sealed and the index synced again."""
    from ..execution.batch import build_conversations
    from ..memory import Memory

    msgs = crash_messages(conversations)
    convs = list(dict.fromkeys(m.conversation_id for m in msgs))
    sessions = list(dict.fromkeys(m.session for m in msgs))
    backend, embedder = make_doubles(call_s)
    _slow_index_saves(call_s)
    with Memory(store, crash_config(), backend=backend, embedder=embedder) as mem:
        mem.store.db = _SlowCommits(mem.store.db, call_s / 4)
        for s in sessions:
            part = [m for m in msgs if m.session == s]
            stored = {(r["conversation_id"], r["message_id"]) for r in mem.store.message_rows()}
            if any((m.conversation_id, m.message_id) not in stored for m in part):
                _emit("ingest")
            mem.store.add_messages(part)
            build_conversations(mem, convs, batch_size, seal=False)
            _emit("sync")  # questions asked between sessions: the box index brought up to date and saved
            mem.sync()
        _emit("seal")
        build_conversations(mem, convs, batch_size, seal=True)
        _emit("sync")
        mem.sync()
    _emit("done")


# ---- the harness --------------------------------------------------------------------------------------------
TARGETS = ("random", "ingest", "judge", "extract", "weave", "commit", "index-save")


class _Launch:
    """One worker process, its phase markers read as they come."""

    def __init__(self, store: Path, call_s: float, conversations: int, batch_size: int, log: Path):
        self.t0 = time.monotonic()
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "membox_local.evaluation.crash", "worker", str(store), "--call-ms",
             str(call_s * 1000), "--conversations", str(conversations), "--batch-size", str(batch_size)],
            stdout=subprocess.PIPE, stderr=open(log, "w"), stdin=subprocess.DEVNULL, text=True,
            cwd=str(Path(__file__).resolve().parent.parent.parent))
        self.markers: list[tuple[float, str]] = []
        self.counts: Counter = Counter()
        self.cond = threading.Condition()
        self.eof = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("@"):
                with self.cond:
                    phase = line[1:].strip()
                    self.markers.append((time.monotonic() - self.t0, phase))
                    self.counts[phase] += 1
                    self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def wait_for(self, phase: str | None, n: int, seconds: float | None) -> bool:
        """Until the n-th `phase` marker (or `seconds` after the start): True, or False when the worker ended."""
        deadline = self.t0 + seconds if seconds is not None else None
        with self.cond:
            while not self.eof:
                if phase is not None and self.counts[phase] >= n:
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return True
                self.cond.wait(timeout=0.5 if left is None else min(left, 0.5))
        return False

    def kill(self) -> tuple[bool, float, str]:
        """SIGKILL the worker if it still runs: (killed, seconds since start, the last phase it announced)."""
        with self.cond:
            last = self.markers[-1][1] if self.markers else "startup"
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return True, time.monotonic() - self.t0, last
        return False, time.monotonic() - self.t0, last

    def finish(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
        self.reader.join(timeout=5)
        return rc


def copy_memory(src: Path, dst: Path) -> Path:
    """A copy of a memory folder no process holds open (the database, its write-ahead log, the indexes)."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for p in src.iterdir() if src.exists() else ():  # a build killed before it made its folder
        if p.is_file() and not p.name.endswith("-shm"):
            shutil.copy2(p, dst / p.name)
    return dst


def _state(path: Path, inputs: Sequence[Message]) -> tuple[float, bool, bool]:
    """(share of the input still to file, every input stored, judging left) of a memory folder."""
    db_path = path / "memory.db"
    if not db_path.exists():
        return 1.0, False, True
    db = connect_ro(db_path)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        stored, filed = db.execute("SELECT COUNT(*), COALESCE(SUM(processed), 0) FROM messages").fetchone() \
            if "messages" in tables else (0, 0)
    finally:
        db.close()
    return 1.0 - filed / len(inputs), stored >= len(inputs), filed < len(inputs)


def run_campaign(workdir: str | Path, kills: int = 50, seed: int = 0, call_ms: float = 20.0, conversations: int = 2,
                 batch_size: int = 2, max_kills_per_run: int = 5, log: Callable[[str], None] = print) -> dict:
    """Kill builds `kills` times at seeded random points, resume each until it finishes, check the folder after
    every exit and compare each finished build with an uninterrupted one. Returns the report (see
    benchmarks/crash_harness.py)."""
    campaign = Campaign(Path(workdir), kills, seed, call_ms, conversations, batch_size, max_kills_per_run, log)
    campaign.reference()
    runs: list[dict] = []
    while campaign.total < kills:
        runs.append(campaign.one_run(len(runs)))
    return campaign.report(runs)


class Campaign:
    """run_campaign's state: the settings, the seeded generator, the reference build and the kills made so far."""

    def __init__(self, workdir: Path, kills: int, seed: int, call_ms: float, conversations: int, batch_size: int,
                 max_kills_per_run: int, log: Callable[[str], None]):
        workdir.mkdir(parents=True, exist_ok=True)
        for old in workdir.glob("run-*"):  # an earlier campaign's builds and logs
            if old.is_dir():
                shutil.rmtree(old)
            else:
                old.unlink()
        self.workdir, self.kills, self.seed, self.call_ms = workdir, kills, seed, call_ms
        self.conversations, self.batch_size, self.max_kills_per_run, self.log = (conversations, batch_size,
                                                                                max_kills_per_run, log)
        self.rng = random.Random(seed)
        self.call_s = call_ms / 1000
        self.cfg = crash_config()
        self.inputs = crash_messages(conversations)
        self.started = time.time()
        self.total = 0

    def launch(self, folder: Path, log_file: Path) -> "_Launch":
        return _Launch(folder, self.call_s, self.conversations, self.batch_size, log_file)

    def check(self, folder: Path, complete: bool) -> list[str]:
        from ..testing import FakeEmbedder

        return check_store(copy_memory(folder, self.workdir / "check"), embedder=FakeEmbedder(), config=self.cfg,
                           inputs=self.inputs, complete=complete)

    def reference(self) -> None:
        """The uninterrupted build: the reference, its length and how often each phase comes."""
        ref = self.workdir / "reference"
        if ref.exists():
            shutil.rmtree(ref)
        launch = self.launch(ref, self.workdir / "reference.log")
        rc = launch.finish(timeout=600)
        if rc != 0 or launch.counts["done"] != 1:
            raise RuntimeError(f"the uninterrupted build failed (rc {rc}): "
                               f"{(self.workdir / 'reference.log').read_text()[-2000:]}")
        self.ref_s = launch.markers[-1][0]
        self.ref_counts = dict(launch.counts)
        self.ref_problems = self.check(ref, complete=True)
        self.ref_digest = memory_digest(ref)
        self.log(f"reference build: {self.ref_s:.1f} s, markers {self.ref_counts}, problems {self.ref_problems}")

    def aim(self, launch: "_Launch", all_stored: bool, judging: bool, todo: float,
            run: dict) -> tuple[dict, bool]:
        """Choose where this launch is killed (a phase and its n-th marker, or a random time; None: let it
        finish) and wait for that point. Returns (what was aimed at, whether the point was reached)."""
        target = None
        if len(run["kills"]) < self.max_kills_per_run and self.total < self.kills:
            target = self.rng.choice([t for t in TARGETS if not (t == "ingest" and all_stored)
                                      and not (t == "judge" and not judging)])
        aimed: dict[str, Any] = {"target": target}
        if target is None:
            return aimed, False
        if target == "random":
            at = self.rng.uniform(0.0, self.ref_s * max(todo, 0.1))
            aimed["at_s"] = round(at, 3)
            return aimed, launch.wait_for(None, 0, at)
        if target == "ingest":
            expected = len(set(m.session for m in self.inputs))
        elif target == "index-save":
            expected = self.ref_counts.get("index-save", 1)
        else:
            expected = max(1, round(self.ref_counts.get(target, 1) * max(todo, 0.05)))
        n = self.rng.randint(1, max(1, expected))
        jitter = self.rng.uniform(0.0, {"commit": self.call_s / 4, "ingest": self.call_s / 2,
                                        "index-save": 4 * self.call_s}.get(target, self.call_s) * 1.2)
        aimed.update(nth=n, jitter_s=round(jitter, 4))
        reached = launch.wait_for(target, n, None)
        if reached:
            time.sleep(jitter)
        return aimed, reached

    def one_launch(self, folder: Path, run: dict) -> bool:
        """Launch the build once, kill it where `aim` says (or let it finish) and check the folder after it.
        Returns whether the build finished."""
        todo, all_stored, judging = _state(folder, self.inputs)
        launch = self.launch(folder, folder.parent / f"{folder.name}.{run['launches']}.log")
        run["launches"] += 1
        aimed, reached = self.aim(launch, all_stored, judging, todo, run)
        killed = False
        if reached:
            killed, t, last = launch.kill()
            launch.finish(timeout=10)
        if killed:
            self.total += 1
            run["kills"].append({**aimed, "t_s": round(t, 3), "landed_after": last})
            self.log(f"run {run['run']} kill {self.total}/{self.kills}: aimed {aimed}, landed after @{last} at "
                     f"{t:.2f} s")
        else:
            rc = launch.finish(timeout=600)
            if rc != 0 or launch.counts["done"] != 1:
                run["worker_failures"] += 1
                tail = Path(launch.log).read_text()[-1500:]
                run["problems"].append(f"launch {run['launches'] - 1}: worker exited {rc}: {tail}")
                self.log(f"run {run['run']}: worker failed (rc {rc}): {tail}")
        finished = not killed and launch.counts["done"] == 1
        problems = self.check(folder, complete=finished)
        run["checks"] += 1
        if problems:
            run["inconsistent"] += 1
            run["problems"] += [f"check {run['checks']} ({'finished' if finished else 'after kill'}): {p}"
                                for p in problems[:10]]
            self.log(f"run {run['run']}: {len(problems)} problem(s): {problems[:3]}")
        return finished

    def one_run(self, index: int) -> dict:
        """One build, killed and resumed until it finishes, then compared with the reference."""
        folder = self.workdir / f"run-{index:02d}"
        if folder.exists():
            shutil.rmtree(folder)
        run: dict[str, Any] = {"run": index, "kills": [], "launches": 0, "checks": 0, "inconsistent": 0,
                               "problems": [], "worker_failures": 0}
        while True:
            finished = self.one_launch(folder, run)
            if finished or run["launches"] >= self.max_kills_per_run + 4:
                break
        counts = message_counts(folder, self.inputs)
        got = memory_digest(folder)
        diff = digest_differences(self.ref_digest, got) if finished else list(COMPARED)
        extra: Counter = Counter()
        for key, n in got["llm_usage"].items():
            extra[key.split("/")[-1]] += n - self.ref_digest["llm_usage"].get(key, 0)
        run.update(counts, finished=finished, final_equal=not diff, differing=diff,
                   ids_equal=got["ids"] == self.ref_digest["ids"], extra_llm_calls=sum(extra.values()),
                   extra_llm_calls_by_stage=dict(sorted(extra.items())))
        self.log(f"run {run['run']}: {len(run['kills'])} kill(s), lost {counts['lost']}, doubled {counts['doubled']}, "
                 f"inconsistent {run['inconsistent']}, final equal {run['final_equal']} {diff or ''}")
        return run

    def report(self, runs: list[dict]) -> dict:
        landed = Counter(k["landed_after"] for r in runs for k in r["kills"])
        aimed_at = Counter(k["target"] for r in runs for k in r["kills"])
        total = lambda key: sum(r[key] for r in runs)  # noqa: E731
        return {
            "kills": self.total, "runs": len(runs), "checks": total("checks"), "lost": total("lost"),
            "doubled": total("doubled"), "unknown": total("unknown"), "inconsistent": total("inconsistent"),
            "worker_failures": total("worker_failures"), "final_equal": total("final_equal"),
            # calls made again after a kill (their results were lost with the process; recorded in llm_usage)
            "extra_llm_calls_by_stage": dict(sorted(sum((Counter(r["extra_llm_calls_by_stage"]) for r in runs),
                                                        Counter()).items())),
            "kills_by_target": dict(sorted(aimed_at.items())), "kills_by_landed_phase": dict(sorted(landed.items())),
            "reference": {"seconds": round(self.ref_s, 2), "markers": self.ref_counts, "problems": self.ref_problems,
                          "tables": table_sha(self.ref_digest),
                          "llm_calls": sum(self.ref_digest["llm_usage"].values())},
            "settings": {"seed": self.seed, "call_ms": self.call_ms, "conversations": self.conversations,
                         "batch_size": self.batch_size, "messages": len(self.inputs),
                         "max_kills_per_run": self.max_kills_per_run, "config": self.cfg.name,
                         "judge": self.cfg.loom.judge},
            "wall_s": round(time.time() - self.started, 1),
            "per_run": runs,
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m membox_local.evaluation.crash",
                                description="the crash harness's worker, or a memory folder's integrity check")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker", help="build (or resume) the crash harness's memory in STORE")
    w.add_argument("store")
    w.add_argument("--call-ms", type=number(0), default=20.0)
    w.add_argument("--conversations", type=count(1), default=2)
    w.add_argument("--batch-size", type=count(1), default=2)
    c = sub.add_parser("check", help="check a memory folder's tables (and, with --sync, its box index)")
    c.add_argument("store")
    c.add_argument("--config", default="cpu", help="with --sync: the config the memory was built with")
    c.add_argument("--sync", action="store_true", help="sync and check the box index (loads the embedder)")
    a = p.parse_args(argv)
    if a.cmd == "worker":
        worker(a.store, a.call_ms / 1000, a.conversations, a.batch_size)
        return 0
    embedder = cfg = None
    if a.sync:
        from ..config import load_config
        from ..embed import make_embedder

        cfg = load_config(a.config)
        embedder = make_embedder(cfg.embedder)
    problems = check_store(a.store, embedder=embedder, config=cfg)
    print("\n".join(problems) if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
