"""The box memory builds the same stores as before it became a component: every box, message filing, event,
trace, trace link and usage row, and every retrieval mode's context, equal to the digests the code before the
component seam wrote (tests/data/golden-store.json), on the test conversations with the deterministic doubles."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from membox_local.config import load_config
from membox_local.memory import Memory
from membox_local.testing import FakeBackend, FakeEmbedder

from test_batch import conversations, weaving_backend

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden-store.json").read_text())
TABLES = (("boxes", "id"), ("messages", "uid"), ("events", "id"), ("traces", "id"),
          ("trace_events", "trace_id, event_id"), ("llm_usage", "id"))
QUESTIONS = ("Which race did Maya sign up for?", "What is the cat called?")
MODES = ("compact", "trace", "box-hits", "box-hits-trace", "chunk-rag")
# columns added after the digests were written (store schema 2: message tags), with the value an untagged build
# writes: checked on every row, then left out of the digest
ADDED = {"messages": {"user_id": "", "agent_id": "", "metadata": "{}"}}


def digest(rows) -> dict:
    return {"rows": len(rows), "sha256": hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]}


@pytest.mark.parametrize("variant", sorted(k for k in GOLDEN if not k.startswith("_")))
def test_the_box_memory_builds_what_it_built_before_the_seam(tmp_path, variant):
    label, backend_kind = variant.split("/")
    cfg = load_config("cpu")
    if label == "embedding-compact":
        cfg.loom.judge, cfg.loom.threshold = "embedding", 0.15
        cfg.retrieve.mode = "compact"
    cfg.weaver.vote_threshold = 0.2
    cfg.retrieve.resolve_dates = False  # contexts rendered as before relative dates were resolved
    cfg.extract.speaker_grounding = False  # events' grounding as computed before the speaker check
    convs = conversations()
    backend = weaving_backend() if backend_kind == "weaving" else FakeBackend()
    with Memory(tmp_path, cfg, backend=backend, embedder=FakeEmbedder()) as mem:
        for msgs in convs.values():
            mem.add(msgs, seal=True)
        contexts = {f"{c}/{q}/{m}": hashlib.sha1(mem.context(q, c, mode=m).text.encode()).hexdigest()
                    for c in convs for q in QUESTIONS for m in MODES}
    db = sqlite3.connect(tmp_path / "memory.db")
    got = {}
    for table, order in TABLES:
        cur = db.execute(f"SELECT * FROM {table} ORDER BY {order}")
        cols = [c[0] for c in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        added = ADDED.get(table, {})
        assert all(row.pop(c) == v for row in rows for c, v in added.items()), f"{table}: an added column was set"
        got[table] = digest(rows)
    db.close()
    got["contexts"] = digest(contexts)
    assert got == GOLDEN[variant]
