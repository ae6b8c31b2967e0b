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
The crash harness that uses them is evaluation/crash.py.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..records import Message

STATUSES = ("open", "sealed", "extracted", "failed")
INDEXES = ("boxes",)  # the vector indexes a box memory keeps beside its store (<name>.hnsw + <name>.ids.json)


# ---- the integrity check ------------------------------------------------------------------------------------
def connect_ro(db_path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    return db


def message_counts(path: str | Path, inputs: Sequence[Message]) -> dict[str, int]:
    """How the stored messages compare with the input: lost (input messages not stored), doubled (stored
    copies beyond the first of an input message, by id or by content) and unknown (stored, not in the input)."""
    db = connect_ro(Path(path) / "memory.db")
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
    db = connect_ro(db_path)
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
    """Every rule the tables keep, table by table (each check below names its rule)."""
    out = _check_sqlite(db)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "messages" not in tables:  # a build killed while it created the tables (one transaction)
        return out + (["no messages table"] if complete else [])
    msgs = db.execute("SELECT * FROM messages ORDER BY conversation_id, seq").fetchall()
    by_conv: dict[str, list] = {}
    for r in msgs:
        by_conv.setdefault(r["conversation_id"], []).append(r)
    out += _check_messages(by_conv, inputs, complete)
    if "boxes" not in tables:
        return out
    boxes = db.execute("SELECT * FROM boxes ORDER BY id").fetchall()
    out += _check_boxes(boxes, msgs, by_conv, complete, config)
    events = db.execute("SELECT * FROM events ORDER BY box_id, idx").fetchall()
    by_box: dict[int, list] = {}
    for e in events:
        by_box.setdefault(e["box_id"], []).append(e)
    status = {b["id"]: b for b in boxes}
    return out + _check_events(by_box, status) + _check_traces(db, events, by_box, status, forgot, config)


def _check_sqlite(db) -> list[str]:
    """SQLite's own checks: the file's structure and the foreign keys."""
    out = []
    ok = [r[0] for r in db.execute("PRAGMA integrity_check")]
    if ok != ["ok"]:
        out.append(f"integrity_check: {'; '.join(map(str, ok[:5]))}")
    fk = db.execute("PRAGMA foreign_key_check").fetchall()
    if fk:
        out.append(f"foreign_key_check: {len(fk)} row(s) point nowhere, e.g. {tuple(fk[0])}")
    return out


def _check_messages(by_conv: dict[str, list], inputs, complete: bool) -> list[str]:
    """Messages: stored once, seq 0..n-1, the filed ones a prefix, the input's order."""
    out: list[str] = []
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
        out += _check_filing(conv, rows)
        if inputs is not None:
            out += _check_against_input(conv, rows, want, complete)
            if complete and not all(flags):
                out.append(f"{conv}: {flags.count(0)} message(s) never filed")
    if complete and inputs is not None:
        for conv in want:
            if conv not in by_conv:
                out.append(f"{conv}: none of its {len(want[conv])} messages stored")
    return out


def _check_filing(conv: str, rows: list) -> list[str]:
    """Each message filed (box and decision) or not (no box), nothing in between."""
    out = []
    for r in rows:
        if r["processed"] not in (0, 1):
            out.append(f"{conv}/{r['message_id']}: processed = {r['processed']!r}")
        elif r["processed"] and (r["box_id"] is None or not r["decision"]):
            out.append(f"{conv}/{r['message_id']}: filed without a box or decision")
        elif not r["processed"] and r["box_id"] is not None:
            out.append(f"{conv}/{r['message_id']}: in box {r['box_id']} but not marked filed")
    return out


def _check_against_input(conv: str, rows: list, want: dict[str, list[Message]], complete: bool) -> list[str]:
    """The stored messages are the input's first ones, as given (all of them after a finished build)."""
    given = [(m.message_id, m.speaker, m.text, m.session, m.session_date) for m in want.get(conv, [])]
    got = [(r["message_id"], r["speaker"], r["text"], r["session"], r["session_date"]) for r in rows]
    if conv not in want:
        return [f"{conv}: a conversation not in the input ({len(rows)} messages)"]
    if got != given[:len(got)]:
        bad = next(i for i, (a, b) in enumerate(zip(got + [None] * len(given), given + [None] * len(got))) if a != b)
        return [f"{conv}: stored messages are not the input's first {len(got)} (first difference at seq {bad}: "
                f"stored {got[bad] if bad < len(got) else None}, given {given[bad] if bad < len(given) else None})"]
    if complete and len(got) != len(given):
        return [f"{conv}: {len(given) - len(got)} input message(s) not stored"]
    return []


def _check_boxes(boxes: list, msgs: list, by_conv: dict[str, list], complete: bool, config) -> list[str]:
    """Boxes: non-empty, contiguous, in order, one after the other; statuses; the open box last."""
    out: list[str] = []
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
        out += _check_box(b, members.get(b["id"], []), complete, config)
    for conv, bs in conv_boxes.items():
        out += _check_box_order(conv, bs, members, by_conv)
    return out


def _check_box(b, rows: list, complete: bool, config) -> list[str]:
    """One box against its messages and its status."""
    tag = f"box {b['id']} ({b['conversation_id']})"
    out = [f"{tag}: status {b['status']!r}"] if b["status"] not in STATUSES else []
    if not rows:
        return out + [f"{tag}: holds no message"]
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
    return out


def _check_box_order(conv: str, bs: list, members: dict[int, list], by_conv: dict[str, list]) -> list[str]:
    """A conversation's boxes follow one another over its filed messages; only the last may be open."""
    out = []
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
    return out


def _check_events(by_box: dict[int, list], status: dict) -> list[str]:
    """Events: in existing, extracted boxes of their conversation, numbered 0..k-1."""
    out = []
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
    return out


def _check_traces(db, events: list, by_box: dict[int, list], status: dict, forgot: bool, config) -> list[str]:
    """Traces: non-empty, linking existing events of their own conversation; woven boxes' grounded events in one."""
    out = []
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
    out += [f"trace {t}: holds no event" for t in traces if t not in linked]
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
    from ..memory import Memory

    try:  # config None: the one stored in the memory (memory_config)
        with Memory(path, config, embedder=embedder) as mem:
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
    db = connect_ro(Path(path) / "memory.db")
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
