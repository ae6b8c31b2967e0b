"""How a memory's costs grow with its size (issue "a year of conversation": the curve, measured before any change);
benchmarks/scale.py composes it. One conversation scope is grown through the sizes asked:

Messages: LoCoMo dev's turns, then the LongMemEval dev slice's, in order and again, each made distinct by its place
(" #n" after the text), in sessions of 20 lines a day apart. They are filed as the store files them, in synthetic
boxes of 8 messages with a one-line record (the judge and the extraction are not what is measured: BENCHMARKS.md's
build speed times them), their windows embedded as the Loom embeds them on sealing, indexed, and embedded by the tests' bag-of-words double (testing.FakeEmbedder: the vectors
are read from the store's cache as a real build's are; what MiniLM would spend embedding them is not counted). Per
size: seconds per message of those writes (messages, box membership, records, vectors, the box index), the folder's
bytes, the open time (a new Memory and its first `search`), then LoCoMo dev questions: `Memory.search` (the boxes'
HNSW index) and `Memory.context` (box-hits with BM25, the first stage alone), each cold (the first call of a new
Memory) and warm (p50 / p95 of the rest), the next question's context after AFTER_WRITE more messages were filed
by another Memory (a server answering while it files), the first question of a Memory opened after that (box-hits'
snapshot of the scope read, where it has one: retrieval/snapshot.py), and the process's peak resident memory.
"""
from __future__ import annotations

import gzip
import json
import os
import resource
import time
from pathlib import Path

import numpy as np

from ..config import load_config
from ..memory import Memory
from ..records import Message
from ..retrieval.layout import CHUNK_WORDS, chunk_session_messages, chunk_text
from ..testing import FakeEmbedder
from .latency import machine

CONV, PER_SESSION, PER_BOX = "year", 20, 8
AFTER_WRITE = 96  # messages filed between a size's warm questions and the next one (12 boxes)


def texts(data: Path) -> list[tuple[str, str]]:
    """(speaker, text) of LoCoMo dev's turns, then the LongMemEval dev slice's."""
    out = [(t["speaker"], t["text"]) for c in json.loads((data / "locomo-dev.json").read_text())
           for k, s in c["conversation"].items() if k.startswith("session_") and isinstance(s, list) for t in s]
    with gzip.open(data / "longmemeval" / "longmemeval_s_dev.json.gz", "rt") as fh:
        for q in json.load(fh):
            out += [(t["role"], t["content"]) for s in q["haystack_sessions"] for t in s]
    return [(who, " ".join(text.split())) for who, text in out if text.strip()]


def conversation(n: int, conversations: int) -> str:
    """The conversation message n goes to: CONV, or with several, each session to the next of them in turn."""
    return CONV if conversations == 1 else f"{CONV}-{(n // PER_SESSION) % conversations}"


def grow(mem: Memory, pool: list[tuple[str, str]], start: int, stop: int, conversations: int = 1) -> float:
    """Messages start..stop-1 written and filed in boxes of PER_BOX (a conversation's own); returns the seconds."""
    t0 = time.perf_counter()
    store = mem.store
    for lo in range(start, stop, 1000):
        batch = []
        for n in range(lo, min(stop, lo + 1000)):
            who, text = pool[n % len(pool)]
            session = n // PER_SESSION + 1
            batch.append(Message(conversation(n, conversations), f"m{n}", who[:40], f"{text} #{n}", str(session),
                                 f"day {session}"))
        store.add_messages(batch)
        windows = []
        for conv in dict.fromkeys(m.conversation_id for m in batch):
            stored = store.pending_messages(conv)  # the batch, as the Loom reads what it has yet to file
            mem.embedder.encode([m.text for m in stored])  # cached in the store, as a build leaves them
            for i in range(0, len(stored), PER_BOX):
                box = store.open_box(stored[i])
                for m in stored[i:i + PER_BOX]:
                    store.file_message(m, box, "continue", None)
                store.set_box_status(box, "sealed")
                store.save_extraction(box, " ".join(stored[i].text.split()[:6]), [], [])  # a record: indexed
                windows += [chunk_text(c) for c in chunk_session_messages(stored[i:i + PER_BOX], CHUNK_WORDS)]
        mem.embedder.encode(windows)  # the boxes' windows, embedded as the Loom embeds them when it seals a box
        mem.system("membox").sync()  # the boxes' HNSW index, as a build leaves it
    return time.perf_counter() - t0


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(path: Path, cfg, questions: list[str], write, asked: str = CONV) -> dict:
    """Open, search and context figures of the folder, from a new Memory; then `write()` (another Memory files
    AFTER_WRITE more messages) and the next question's context, what a server answering while it files pays."""
    open_s, mem = timed(lambda: Memory(path, cfg, embedder=FakeEmbedder()))
    try:
        search = [timed(lambda q=q: mem.search(q, k=5, conversation_id=asked))[0] for q in questions]
        context = [timed(lambda q=q: mem.context(q, asked))[0] for q in questions]
        write()
        after = timed(lambda: mem.context(questions[0], asked))[0]
    finally:
        mem.close()
    again = Memory(path, cfg, embedder=FakeEmbedder())  # opened again: box-hits' snapshot read (retrieval/snapshot.py)
    try:
        reopened = timed(lambda: again.context(questions[1 % len(questions)], asked))[0]
    finally:
        again.close()
    pct = lambda xs, p: round(1000 * float(np.percentile(xs, p)), 1)  # noqa: E731
    return {"open_s": round(open_s + search[0], 2), "search_cold_ms": round(1000 * search[0], 1),
            "search_warm_p50_ms": pct(search[1:], 50), "search_warm_p95_ms": pct(search[1:], 95),
            "context_cold_ms": round(1000 * context[0], 1), "context_warm_p50_ms": pct(context[1:], 50),
            "context_warm_p95_ms": pct(context[1:], 95), "context_after_write_ms": round(1000 * after, 1),
            "context_reopened_ms": round(1000 * reopened, 1),
            "resident_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def run(data: Path, folder: Path, sizes: list[int], n_questions: int, log=print, conversations: int = 1) -> dict:
    """The curve: one row per size (see the module docstring); with several `conversations` in the folder, the
    questions ask the first of them (a search of one conversation among many: hnswlib's filter)."""
    load = round(os.getloadavg()[0], 2)  # the 1-minute load before: the figures mean something only alone
    pool = texts(data)
    qs = [q["question"] for c in json.loads((data / "locomo-dev.json").read_text()) for q in c["qa"]
          if q.get("category") in (1, 2, 3, 4)]
    questions = qs[::max(1, len(qs) // n_questions)][:n_questions]
    cfg = load_config("cpu-ce")
    cfg.retrieve.evidence_model = ""  # the first stage alone
    path = folder / "memory"
    if path.exists():
        raise FileExistsError(f"{path} exists: remove it or pass another folder")
    rows, have = [], 0
    mem = Memory(path, cfg, embedder=FakeEmbedder())
    try:
        for size in sorted(sizes):
            seconds = grow(mem, pool, have, size, conversations)
            rows.append({"messages": size, "write_s_per_message": round(seconds / (size - have), 5),
                         "folder_mb": round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 1)})
            more = lambda s=size: grow(mem, pool, s, s + AFTER_WRITE, conversations)  # noqa: E731
            rows[-1].update(measure(path, cfg, questions, more, conversation(0, conversations)))
            have = size + AFTER_WRITE
            log(json.dumps(rows[-1]))
    finally:
        mem.close()
    return {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "load_before": load, "conversations": conversations,
            "pool": len(pool), "questions": len(questions), "rows": rows}
