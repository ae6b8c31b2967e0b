"""The box memory builds the same stores as before it became a component: every box, message filing, event,
trace, trace link and usage row, and every retrieval mode's context, on the test conversations with the
deterministic doubles, against tests/data/golden-store.json.

What must be equal exactly (ids, decisions, texts, box spans, token counts) is digested; floats (the judges'
scores, the events' grounding) are not: the last bits of a float differ between CPUs and BLAS kernels (an AMD EPYC
VM digested `messages.score` differently), so each float column is kept as a list and compared with a tolerance.
`make test` runs this module a second time on another BLAS kernel and one thread (the Makefile's `test-numeric`).
Rewrite the file after a deliberate change with `python tests/test_golden.py --write` (it says what changed)."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from membox_local.config import load_config
from membox_local.memory import Memory
from membox_local.testing import FakeBackend, FakeEmbedder

from test_batch import conversations, weaving_backend

pytestmark = pytest.mark.numeric

GOLDEN_FILE = Path(__file__).parent / "data" / "golden-store.json"
GOLDEN = json.loads(GOLDEN_FILE.read_text())
VARIANTS = sorted(k for k in GOLDEN if not k.startswith("_"))
TABLES = (("boxes", "id"), ("messages", "uid"), ("events", "id"), ("traces", "id"),
          ("trace_events", "trace_id, event_id"), ("llm_usage", "id"))
QUESTIONS = ("Which race did Maya sign up for?", "What is the cat called?")
MODES = ("compact", "trace", "box-hits", "box-hits-trace", "chunk-rag")
# columns added after the digests were first written, with the value a build of these conversations writes: checked
# on every row where the column exists, then left out of the digest
ADDED = {"messages": {"user_id": "", "agent_id": "", "metadata": "{}"},
         "boxes": {"note": ""},  # membox schema 2: what a record was made from when not the whole box
         "llm_usage": {"cached_tokens": None}}  # schema 4: the doubles do not say what was cached
ABOUT = ("The stores that the box memory builds from the test conversations with the deterministic doubles "
         "(tests/test_golden.py): per table the row count, the sha256 prefix of its rows as JSON with every float set "
         "to None, and the float columns' values (compared with a tolerance); the digest of every retrieval mode's "
         "context for two questions. The exact parts are those the code before the component seam (commit 601b2f5) "
         "wrote; the floats were read at commit 5f00f96, whose digests with the floats agreed with 601b2f5's. Written "
         "again when records began to cite their lines (issue 50, attribution.py: events in their line's words with "
         "persons resolved, their sources, what was dropped; topics and keywords the box holds), and box-hits fused BM25 "
         "with its cosines (`[retrieve] lexical_weight`): boxes, events, traces, usage and contexts moved.")
# scores are cosines and logistic probabilities in [0, 1]: a CPU's rounding moves them by ~1e-7
FLOAT_TOLERANCE = 1e-5


def digest(rows) -> dict:
    return {"rows": len(rows), "sha256": hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]}


def split_floats(rows: list[dict]) -> tuple[list[dict], dict[str, list]]:
    """The rows with every float column set to None, and those columns' values in row order."""
    cols = sorted({c for row in rows for c, v in row.items() if isinstance(v, float)})
    floats = {c: [row[c] for row in rows] for c in cols}
    return [{c: (None if c in floats else v) for c, v in row.items()} for row in rows], floats


def build(tmp_path: Path, variant: str) -> dict:
    """The tables' digests and float columns, and the contexts' digest, of the store `variant` builds."""
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
        assert all(row.pop(c, v) == v for row in rows for c, v in added.items()), f"{table}: an added column was set"
        exact, floats = split_floats(rows)
        got[table] = {**digest(exact), "floats": floats}
    db.close()
    got["contexts"] = digest(contexts)
    return got


def differences(got: dict, want: dict) -> list[str]:
    """What differs beyond the tolerance: a digest, a row count, a float column's values."""
    out = []
    for table in sorted(set(got) | set(want)):
        g, w = got.get(table, {}), want.get(table, {})
        if (g.get("rows"), g.get("sha256")) != (w.get("rows"), w.get("sha256")):
            out.append(f"{table}: rows/digest {g.get('rows')}/{g.get('sha256')} != {w.get('rows')}/{w.get('sha256')}")
        gf, wf = g.get("floats", {}), w.get("floats", {})
        if sorted(gf) != sorted(wf):
            out.append(f"{table}: float columns {sorted(gf)} != {sorted(wf)}")
            continue
        for col in gf:
            far = [i for i, (a, b) in enumerate(zip(gf[col], wf[col]))
                   if (a is None) != (b is None) or (a is not None and abs(a - b) > FLOAT_TOLERANCE)]
            if len(gf[col]) != len(wf[col]) or far:
                out.append(f"{table}.{col}: {len(far)} value(s) beyond {FLOAT_TOLERANCE:g}, e.g. row {far[:3]}")
    return out


def test_split_floats_keeps_exact_values_apart():
    rows = [{"id": 1, "score": 0.1 + 0.2, "text": "a"}, {"id": 2, "score": None, "text": "b"}]
    exact, floats = split_floats(rows)
    assert exact == [{"id": 1, "score": None, "text": "a"}, {"id": 2, "score": None, "text": "b"}]
    assert floats == {"score": [0.1 + 0.2, None]}
    want = {"t": {**digest(exact), "floats": {"score": [0.3, None]}}}
    assert differences({"t": {**digest(exact), "floats": floats}}, want) == []  # 0.30000000000000004 vs 0.3
    moved = {"t": {**digest(exact), "floats": {"score": [0.31, None]}}}
    assert differences(moved, want) == ["t.score: 1 value(s) beyond 1e-05, e.g. row [0]"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_box_memory_builds_what_it_built_before_the_seam(tmp_path, variant):
    assert differences(build(tmp_path, variant), GOLDEN[variant]) == []


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    new = {"_about": ABOUT}
    for v in VARIANTS:
        with tempfile.TemporaryDirectory() as tmp:
            new[v] = build(Path(tmp), v)
        print(v, differences(new[v], GOLDEN[v]) or "unchanged")
    GOLDEN_FILE.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
