"""Crash safety, measured: a memory folder's integrity check, and a harness that kills builds and resumes them.

`check_store(path)` lists what is wrong with a memory folder (empty list: nothing): SQLite's own
integrity and foreign-key checks; every message stored once, in arrival order (`seq` 0..n-1), the filed ones
a prefix of the conversation; every box non-empty, its messages contiguous and in order, boxes following each
other with no gap or overlap, statuses valid, one open box at most and only the last; events only in extracted
boxes, numbered 0..k-1; traces non-empty, linking existing events of their own conversation; and, given the
embedder (and the config), the box index after `Memory.sync()`: exactly the extracted boxes, each under its own
conversation, each stored vector the embedding of its box. Given the input messages it also checks that the
stored ones are a prefix of them (all of them with `complete=True`, every box then extracted and woven).

`memory_digest(path)` is a memory's content with the autoincrement ids replaced by positions inside their
conversation (box n of a conversation, event i of that box, trace n), so that two builds whose conversations
were interleaved differently compare equal when each conversation's messages, boxes, events and traces are.

`run_campaign` is the crash harness (benchmarks/crash_harness.py reports it): a worker process
(`python -m membox_local.evaluation.integrity worker STORE`) builds a multi-session conversation session by
session with the deterministic doubles (membox_local/testing.py), slowed by a small delay per model call,
embedding batch, commit and index save, printing a phase marker before each; the harness kills it with SIGKILL
at seeded random points, some aimed at phases (ingest, judging, extraction, weaving, a commit, an index save),
checks the folder after every exit, runs the worker again until it finishes, and compares the final memory with
an uninterrupted build.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..records import Message
from ..argtypes import count, number

STATUSES = ("open", "sealed", "extracted", "failed")
INDEXES = ("boxes",)  # the vector indexes a box memory keeps beside its store (<name>.hnsw + <name>.ids.json)


# ---- the integrity check ------------------------------------------------------------------------------------
def _connect_ro(db_path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    return db


def message_counts(path: str | Path, inputs: Sequence[Message]) -> dict[str, int]:
    """How the stored messages compare with the input: lost (input messages not stored), doubled (stored
    copies beyond the first of an input message, by id or by content) and unknown (stored, not in the input)."""
    db = _connect_ro(Path(path) / "memory.db")
    try:
        rows = db.execute("SELECT conversation_id, message_id, speaker, text, session FROM messages").fetchall()
    finally:
        db.close()
    by_id = Counter((r["conversation_id"], r["message_id"]) for r in rows)
    by_text = Counter((r["conversation_id"], r["speaker"], r["text"], r["session"]) for r in rows)
    want_id = Counter((m.conversation_id, m.message_id) for m in inputs)
    want_text = Counter((m.conversation_id, m.speaker, m.text, m.session) for m in inputs)
    lost = sum(max(0, n - by_id[k]) for k, n in want_id.items())
    doubled = max(sum(max(0, n - max(1, want_id[k])) for k, n in by_id.items()),
                  sum(max(0, n - max(1, want_text[k])) for k, n in by_text.items()))
    unknown = sum(n for k, n in by_id.items() if k not in want_id)
    return {"lost": lost, "doubled": doubled, "unknown": unknown}


def check_store(path: str | Path, embedder=None, config=None, inputs: Sequence[Message] | None = None,
                complete: bool = False, forgot: bool = False) -> list[str]:
    """What is wrong with the memory folder `path` ([] when nothing). See the module docstring.

    `embedder` (with `config`, the one the memory was built with): open the memory, `sync()` its indexes and
    check them against the store (this writes to the folder: check a copy of one a build will continue).
    `inputs`: the messages the build was given. `complete`: the build finished (every input message stored
    and filed, every box extracted and woven). `forgot`: messages were forgotten in this memory, so a box
    marked unwoven may keep events in traces (Memory.forget re-weaves it)."""
    path = Path(path)
    db_path = path / "memory.db"
    if not db_path.exists():
        return [f"{db_path}: no database"] if complete else []  # a build killed before it opened the store
    problems: list[str] = []
    db = _connect_ro(db_path)
    try:
        problems += _check_tables(db, inputs, complete, forgot, config)
    finally:
        db.close()
    if embedder is not None:
        problems += _check_indexes(path, embedder, config)
    elif any(path.glob("*.hnsw")):
        problems += _check_index_files(path, None)
    return problems


def _check_tables(db, inputs, complete: bool, forgot: bool, config) -> list[str]:
    out: list[str] = []
    ok = [r[0] for r in db.execute("PRAGMA integrity_check")]
    if ok != ["ok"]:
        out.append(f"integrity_check: {'; '.join(map(str, ok[:5]))}")
    fk = db.execute("PRAGMA foreign_key_check").fetchall()
    if fk:
        out.append(f"foreign_key_check: {len(fk)} row(s) point nowhere, e.g. {tuple(fk[0])}")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "messages" not in tables:  # a build killed while it created the tables (one transaction)
        return out + (["no messages table"] if complete else [])
    msgs = db.execute("SELECT * FROM messages ORDER BY conversation_id, seq").fetchall()
    by_conv: dict[str, list] = {}
    for r in msgs:
        by_conv.setdefault(r["conversation_id"], []).append(r)

    # messages: stored once, seq 0..n-1, the filed ones a prefix, the input's order
    want: dict[str, list[Message]] = {}
    for m in inputs or ():
        want.setdefault(m.conversation_id, []).append(m)
    for conv, rows in by_conv.items():
        seqs = [r["seq"] for r in rows]
        if seqs != list(range(len(rows))):
            out.append(f"{conv}: message seqs are not 0..{len(rows) - 1} ({_short(seqs)})")
        flags = [r["processed"] for r in rows]
        if flags != sorted(flags, reverse=True):
            out.append(f"{conv}: filed messages are not a prefix of the conversation")
        for r in rows:
            if r["processed"] not in (0, 1):
                out.append(f"{conv}/{r['message_id']}: processed = {r['processed']!r}")
            elif r["processed"] and (r["box_id"] is None or not r["decision"]):
                out.append(f"{conv}/{r['message_id']}: filed without a box or decision")
            elif not r["processed"] and r["box_id"] is not None:
                out.append(f"{conv}/{r['message_id']}: in box {r['box_id']} but not marked filed")
        if inputs is not None:
            given = [(m.message_id, m.speaker, m.text, m.session, m.session_date) for m in want.get(conv, [])]
            got = [(r["message_id"], r["speaker"], r["text"], r["session"], r["session_date"]) for r in rows]
            if conv not in want:
                out.append(f"{conv}: a conversation not in the input ({len(rows)} messages)")
            elif got != given[:len(got)]:
                bad = next(i for i, (a, b) in enumerate(zip(got + [None] * len(given), given + [None] * len(got)))
                           if a != b)
                out.append(f"{conv}: stored messages are not the input's first {len(got)} (first difference at "
                           f"seq {bad}: stored {got[bad] if bad < len(got) else None}, given "
                           f"{given[bad] if bad < len(given) else None})")
            elif complete and len(got) != len(given):
                out.append(f"{conv}: {len(given) - len(got)} input message(s) not stored")
            if complete and not all(flags):
                out.append(f"{conv}: {flags.count(0)} message(s) never filed")
    if complete and inputs is not None:
        for conv in want:
            if conv not in by_conv:
                out.append(f"{conv}: none of its {len(want[conv])} messages stored")
    if "boxes" not in tables:
        return out

    # boxes: non-empty, contiguous, in order, one after the other; statuses; the open box last
    boxes = db.execute("SELECT * FROM boxes ORDER BY id").fetchall()
    members: dict[int, list] = {}
    for r in msgs:
        if r["box_id"] is not None:
            members.setdefault(r["box_id"], []).append(r)
    box_ids = {b["id"] for b in boxes}
    for bid in sorted(set(members) - box_ids):
        out.append(f"messages filed into box {bid}, which does not exist")
    conv_boxes: dict[str, list] = {}
    for b in boxes:
        conv_boxes.setdefault(b["conversation_id"], []).append(b)
        rows = members.get(b["id"], [])
        tag = f"box {b['id']} ({b['conversation_id']})"
        if b["status"] not in STATUSES:
            out.append(f"{tag}: status {b['status']!r}")
        if not rows:
            out.append(f"{tag}: holds no message")
            continue
        if any(r["conversation_id"] != b["conversation_id"] for r in rows):
            out.append(f"{tag}: holds messages of another conversation")
        seqs = [r["seq"] for r in rows]
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            out.append(f"{tag}: messages not contiguous ({_short(seqs)})")
        if (rows[0]["session"], rows[0]["session_date"]) != (b["session"], b["session_date"]):
            out.append(f"{tag}: session {b['session']!r} but its first message's is {rows[0]['session']!r}")
        if b["woven"] and b["status"] != "extracted":
            out.append(f"{tag}: woven but {b['status']}")
        if complete and (b["status"] != "extracted" or (config is None or config.weaver.enabled) and not b["woven"]):
            out.append(f"{tag}: {b['status']}{'' if b['woven'] else ', not woven'} after a finished build")
    for conv, bs in conv_boxes.items():
        nxt = 0
        for b in bs:
            seqs = [r["seq"] for r in members.get(b["id"], [])]
            if seqs and seqs[0] != nxt:
                out.append(f"box {b['id']} ({conv}): starts at seq {seqs[0]}, the message after the previous "
                           f"box is seq {nxt}")
            nxt = seqs[-1] + 1 if seqs else nxt
        opened = [b["id"] for b in bs if b["status"] == "open"]
        if len(opened) > 1 or (opened and opened[-1] != bs[-1]["id"]):
            out.append(f"{conv}: open boxes {opened}, only the last box ({bs[-1]['id']}) may be open")
        filed = sum(r["processed"] for r in by_conv.get(conv, []))
        if nxt != filed:
            out.append(f"{conv}: {filed} filed messages but the boxes hold seqs 0..{nxt - 1}")

    # events: in existing, extracted boxes of their conversation, numbered 0..k-1
    events = db.execute("SELECT * FROM events ORDER BY box_id, idx").fetchall()
    by_box: dict[int, list] = {}
    status = {b["id"]: b for b in boxes}
    for e in events:
        by_box.setdefault(e["box_id"], []).append(e)
    for bid, evs in by_box.items():
        b = status.get(bid)
        if b is None:
            out.append(f"{len(evs)} event(s) of box {bid}, which does not exist")
            continue
        if b["status"] != "extracted":
            out.append(f"box {bid}: {len(evs)} event(s) but {b['status']} (a partial extraction)")
        if [e["idx"] for e in evs] != list(range(len(evs))):
            out.append(f"box {bid}: event numbers {_short([e['idx'] for e in evs])}")
        if any(e["conversation_id"] != b["conversation_id"] for e in evs):
            out.append(f"box {bid}: events of another conversation")

    # traces: non-empty, linking existing events of their own conversation
    traces = {t["id"]: t for t in db.execute("SELECT * FROM traces")}
    ev = {e["id"]: e for e in events}
    links = db.execute("SELECT trace_id, event_id FROM trace_events").fetchall()
    linked: dict[int, list[int]] = {}
    for t, e in links:
        linked.setdefault(t, []).append(e)
        if t not in traces:
            out.append(f"trace link ({t}, {e}): no trace {t}")
        if e not in ev:
            out.append(f"trace link ({t}, {e}): no event {e}")
        elif t in traces and ev[e]["conversation_id"] != traces[t]["conversation_id"]:
            out.append(f"trace {t}: holds event {e} of another conversation")
    for t in traces:
        if t not in linked:
            out.append(f"trace {t}: holds no event")
    in_trace = {e for _, e in links}
    min_grounding = config.extract.min_grounding if config is not None else None
    for bid, evs in by_box.items():
        b = status.get(bid)
        if b is None:
            continue
        if not b["woven"] and not forgot and any(e["id"] in in_trace for e in evs):
            out.append(f"box {bid}: not woven, yet some of its events are in traces (a partial weave)")
        if b["woven"] and min_grounding is not None:
            loose = [e["id"] for e in evs if e["grounding"] >= min_grounding and e["id"] not in in_trace]
            if loose:
                out.append(f"box {bid}: woven, but its grounded event(s) {loose} are in no trace")
    return out


def _short(xs: list) -> str:
    return str(xs) if len(xs) <= 12 else f"{str(xs[:12])[:-1]}, ... ({len(xs)})]"


def _check_indexes(path: Path, embedder, config) -> list[str]:
    """Open the memory, bring its indexes up to date (Memory.sync) and check them against the store."""
    from ..config import load_config
    from ..memory import Memory

    try:
        with Memory(path, config or load_config("cpu"), embedder=embedder) as mem:
            mem.sync()
    except Exception as exc:  # a memory that cannot be opened or synced is the problem reported
        return [f"index: opening the memory and syncing failed: {type(exc).__name__}: {exc}"]
    return _check_index_files(path, embedder)


def _check_index_files(path: Path, embedder) -> list[str]:
    """The box index (`boxes.hnsw` and its id map) against the store: every extracted box once, under its
    conversation, nothing else; with the embedder, each stored vector the embedding of its box's index text."""
    import hnswlib

    from ..memory import open_store
    from ..retrieval.layout import box_index_text

    out: list[str] = []
    index, meta = path / "boxes.hnsw", path / "boxes.ids.json"
    store = open_store(path)
    try:
        extracted = {b: c for b, c in store.db.execute(
            "SELECT id, conversation_id FROM boxes WHERE status='extracted'")} if "boxes" in {
            r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type='table'")} else {}
        if not index.exists() or not meta.exists():
            if extracted and embedder is not None:
                out.append(f"index: {len(extracted)} extracted box(es) but no box index after sync")
            return out
        try:
            data = json.loads(meta.read_text())
            ids, conv = data["ids"], data["conv"]
            idx = hnswlib.Index(space="cosine", dim=int(data["dim"]))
            idx.load_index(str(index), max_elements=max(len(ids), 64))
        except Exception as exc:
            return [f"index: boxes.hnsw / boxes.ids.json unreadable: {type(exc).__name__}: {exc}"]
        count = idx.get_current_count()
        if count != len(ids) or len(conv) != len(ids):
            out.append(f"index: boxes.hnsw holds {count} vectors, its id map {len(ids)} ids and {len(conv)} "
                       f"conversations")
        if len(set(ids)) != len(ids):
            out.append(f"index: {len(ids) - len(set(ids))} box id(s) indexed twice")
        stray = sorted(set(ids) - set(extracted))
        if stray:
            out.append(f"index: holds box(es) {_short(stray)} that are not extracted boxes of the store")
        if embedder is not None:
            missing = sorted(set(extracted) - set(ids))
            if missing:
                out.append(f"index: lacks extracted box(es) {_short(missing)} after sync")
        wrong = [i for i, c in zip(ids, conv) if i in extracted and extracted[i] != c]
        if wrong:
            out.append(f"index: box(es) {_short(wrong)} filed under another conversation")
        if embedder is not None and ids and count == len(ids):
            stored = np.asarray(idx.get_items(list(range(count))), dtype=np.float32)
            live = [n for n, i in enumerate(ids) if i in extracted]
            want = np.asarray(embedder.encode([box_index_text(store.box(ids[n])) for n in live]), dtype=np.float32)
            want /= np.maximum(np.linalg.norm(want, axis=1, keepdims=True), 1e-12)
            got = stored[live] / np.maximum(np.linalg.norm(stored[live], axis=1, keepdims=True), 1e-12)
            off = [ids[live[k]] for k in np.nonzero(np.abs(got - want).max(axis=1) > 1e-4)[0]]
            if off:
                out.append(f"index: the vectors of box(es) {_short(off)} are not their boxes' embeddings")
    finally:
        store.close()
    return out


# ---- comparing two memories ---------------------------------------------------------------------------------
COMPARED = ("messages", "boxes", "events", "traces", "meta", "embeddings")


def memory_digest(path: str | Path) -> dict[str, Any]:
    """A memory's content, ids replaced by positions in their conversation (see the module docstring).

    Tables in COMPARED must be equal between a build and its uninterrupted twin; `llm_usage` (calls per
    stage; a call whose result a kill lost is made again, and both are counted) and `ids` (the raw
    autoincrement ids) are reported, not required to be equal."""
    db = _connect_ro(Path(path) / "memory.db")
    try:
        box_key: dict[int, tuple] = {}
        n_in: Counter = Counter()
        boxes = []
        for b in db.execute("SELECT * FROM boxes ORDER BY id"):
            key = (b["conversation_id"], n_in[b["conversation_id"]])
            n_in[b["conversation_id"]] += 1
            box_key[b["id"]] = key
            boxes.append([*key, b["session"], b["session_date"], b["status"], b["topic"], b["keywords"], b["error"],
                          b["woven"]])
        event_key: dict[int, tuple] = {}
        events = []
        for e in db.execute("SELECT * FROM events ORDER BY id"):
            event_key[e["id"]] = (*box_key.get(e["box_id"], (None, e["box_id"])), e["idx"])
            events.append([*event_key[e["id"]], e["text"], e["date"], e["grounding"]])
        events.sort(key=lambda r: (r[0], r[1], r[2]))
        messages = [[r["conversation_id"], r["message_id"], r["seq"], r["speaker"], r["text"], r["session"],
                     r["session_date"], box_key.get(r["box_id"]) if r["box_id"] is not None else None,
                     r["decision"], r["score"], r["processed"]]
                    for r in db.execute("SELECT * FROM messages ORDER BY conversation_id, seq")]
        members: dict[int, list] = {}
        for t, e in db.execute("SELECT trace_id, event_id FROM trace_events"):
            members.setdefault(t, []).append(event_key.get(e, ("?", e)))
        traces, t_in = [], Counter()
        for t in db.execute("SELECT * FROM traces ORDER BY id"):
            traces.append([t["conversation_id"], t_in[t["conversation_id"]], t["summary"],
                           sorted(members.get(t["id"], []))])
            t_in[t["conversation_id"]] += 1
        meta = [[k, v] for k, v in db.execute("SELECT key, value FROM meta ORDER BY key")]
        embeddings = [[m, k, hashlib.sha1(v).hexdigest()[:16]]
                      for m, k, v in db.execute("SELECT model, key, vector FROM embeddings ORDER BY model, key")]
        usage = {f"{c}/{s}": n for c, s, n in db.execute(
            "SELECT conversation_id, stage, COUNT(*) FROM llm_usage GROUP BY conversation_id, stage "
            "ORDER BY conversation_id, stage")}
        ids = {t: [r[0] for r in db.execute(f"SELECT id FROM {t} ORDER BY id")] for t in ("boxes", "events", "traces")}
    finally:
        db.close()
    return {"messages": messages, "boxes": boxes, "events": events, "traces": traces, "meta": meta,
            "embeddings": embeddings, "llm_usage": usage, "ids": ids}


def digest_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The COMPARED tables on which two digests differ."""
    return [t for t in COMPARED if json.dumps(a[t], sort_keys=True) != json.dumps(b[t], sort_keys=True)]


def table_sha(digest: dict[str, Any]) -> dict[str, dict]:
    return {t: {"rows": len(digest[t]), "sha256": hashlib.sha256(json.dumps(digest[t], sort_keys=True).encode())
                .hexdigest()[:16]} for t in COMPARED}


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
            [sys.executable, "-m", "membox_local.evaluation.integrity", "worker", str(store), "--call-ms",
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
    db = _connect_ro(db_path)
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
    from ..testing import FakeEmbedder

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    for old in workdir.glob("run-*"):  # an earlier campaign's builds and logs
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()
    rng = random.Random(seed)
    call_s = call_ms / 1000
    cfg = crash_config()
    inputs = crash_messages(conversations)
    started = time.time()

    def check(folder: Path, complete: bool) -> list[str]:
        return check_store(copy_memory(folder, workdir / "check"), embedder=FakeEmbedder(), config=cfg,
                           inputs=inputs, complete=complete)

    # the uninterrupted build: the reference, its length and how often each phase comes
    ref = workdir / "reference"
    if ref.exists():
        shutil.rmtree(ref)
    launch = _Launch(ref, call_s, conversations, batch_size, workdir / "reference.log")
    rc = launch.finish(timeout=600)
    if rc != 0 or launch.counts["done"] != 1:
        raise RuntimeError(f"the uninterrupted build failed (rc {rc}): {(workdir / 'reference.log').read_text()[-2000:]}")
    ref_s = launch.markers[-1][0]
    ref_counts = dict(launch.counts)
    ref_problems = check(ref, complete=True)
    ref_digest = memory_digest(ref)
    log(f"reference build: {ref_s:.1f} s, markers {ref_counts}, problems {ref_problems}")

    runs: list[dict] = []
    total = 0
    while total < kills:
        folder = workdir / f"run-{len(runs):02d}"
        if folder.exists():
            shutil.rmtree(folder)
        run: dict[str, Any] = {"run": len(runs), "kills": [], "launches": 0, "checks": 0, "inconsistent": 0,
                               "problems": [], "worker_failures": 0}
        while True:
            todo, all_stored, judging = _state(folder, inputs)
            target = None
            if len(run["kills"]) < max_kills_per_run and total < kills:
                choices = [t for t in TARGETS if not (t == "ingest" and all_stored) and not (t == "judge" and not judging)]
                target = rng.choice(choices)
            launch = _Launch(folder, call_s, conversations, batch_size, folder.parent / f"{folder.name}.{run['launches']}.log")
            run["launches"] += 1
            aimed = {"target": target}
            if target == "random":
                at = rng.uniform(0.0, ref_s * max(todo, 0.1))
                aimed["at_s"] = round(at, 3)
                reached = launch.wait_for(None, 0, at)
            elif target is not None:
                if target == "ingest":
                    expected = len(set(m.session for m in inputs))
                elif target == "index-save":
                    expected = ref_counts.get("index-save", 1)
                else:
                    expected = max(1, round(ref_counts.get(target, 1) * max(todo, 0.05)))
                n = rng.randint(1, max(1, expected))
                jitter = rng.uniform(0.0, {"commit": call_s / 4, "ingest": call_s / 2, "index-save": 4 * call_s}
                                     .get(target, call_s) * 1.2)
                aimed.update(nth=n, jitter_s=round(jitter, 4))
                reached = launch.wait_for(target, n, None)
                if reached:
                    time.sleep(jitter)
            else:
                reached = False
            killed = False
            if reached:
                killed, t, last = launch.kill()
                launch.finish(timeout=10)
            if killed:
                total += 1
                run["kills"].append({**aimed, "t_s": round(t, 3), "landed_after": last})
                log(f"run {run['run']} kill {total}/{kills}: aimed {aimed}, landed after @{last} at {t:.2f} s")
            else:
                rc = launch.finish(timeout=600)
                if rc != 0 or launch.counts["done"] != 1:
                    run["worker_failures"] += 1
                    tail = Path(launch.log).read_text()[-1500:]
                    run["problems"].append(f"launch {run['launches'] - 1}: worker exited {rc}: {tail}")
                    log(f"run {run['run']}: worker failed (rc {rc}): {tail}")
            finished = not killed and launch.counts["done"] == 1
            problems = check(folder, complete=finished)
            run["checks"] += 1
            if problems:
                run["inconsistent"] += 1
                run["problems"] += [f"check {run['checks']} ({'finished' if finished else 'after kill'}): {p}"
                                    for p in problems[:10]]
                log(f"run {run['run']}: {len(problems)} problem(s): {problems[:3]}")
            if finished or run["launches"] >= max_kills_per_run + 4:
                break
        counts = message_counts(folder, inputs)
        got = memory_digest(folder)
        diff = digest_differences(ref_digest, got) if finished else list(COMPARED)
        extra: Counter = Counter()
        for key, n in got["llm_usage"].items():
            extra[key.split("/")[-1]] += n - ref_digest["llm_usage"].get(key, 0)
        run.update(counts, finished=finished, final_equal=not diff, differing=diff,
                   ids_equal=got["ids"] == ref_digest["ids"], extra_llm_calls=sum(extra.values()),
                   extra_llm_calls_by_stage=dict(sorted(extra.items())))
        log(f"run {run['run']}: {len(run['kills'])} kill(s), lost {counts['lost']}, doubled {counts['doubled']}, "
            f"inconsistent {run['inconsistent']}, final equal {run['final_equal']} {diff or ''}")
        runs.append(run)

    landed = Counter(k["landed_after"] for r in runs for k in r["kills"])
    aimed_at = Counter(k["target"] for r in runs for k in r["kills"])
    return {
        "kills": total, "runs": len(runs), "checks": sum(r["checks"] for r in runs),
        "lost": sum(r["lost"] for r in runs), "doubled": sum(r["doubled"] for r in runs),
        "unknown": sum(r["unknown"] for r in runs),
        "inconsistent": sum(r["inconsistent"] for r in runs),
        "worker_failures": sum(r["worker_failures"] for r in runs),
        "final_equal": sum(r["final_equal"] for r in runs),
        # calls made again after a kill (their results were lost with the process; recorded in llm_usage)
        "extra_llm_calls_by_stage": dict(sorted(sum((Counter(r["extra_llm_calls_by_stage"]) for r in runs),
                                                    Counter()).items())),
        "kills_by_target": dict(sorted(aimed_at.items())), "kills_by_landed_phase": dict(sorted(landed.items())),
        "reference": {"seconds": round(ref_s, 2), "markers": ref_counts, "problems": ref_problems,
                      "tables": table_sha(ref_digest), "llm_calls": sum(ref_digest["llm_usage"].values())},
        "settings": {"seed": seed, "call_ms": call_ms, "conversations": conversations, "batch_size": batch_size,
                     "messages": len(inputs), "max_kills_per_run": max_kills_per_run, "config": cfg.name,
                     "judge": cfg.loom.judge},
        "wall_s": round(time.time() - started, 1),
        "per_run": runs,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m membox_local.evaluation.integrity",
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
