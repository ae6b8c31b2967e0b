"""Crash safety: builds killed with SIGKILL and resumed lose nothing, double nothing, stay consistent and end
equal to an uninterrupted build (benchmarks/crash_harness.py runs the 50-kill measurement); the integrity check
finds damage; a vector index whose save was killed is rebuilt, not fatal."""
from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from membox_local.evaluation.crash import crash_config, crash_messages, run_campaign
from membox_local.evaluation.integrity import check_store, memory_digest, message_counts
from membox_local.index import VectorIndex
from membox_local.ingest import load_jsonl
from membox_local.memory import Memory
from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import DEMO


@pytest.mark.slow
def test_killed_builds_resume_to_the_memory_an_uninterrupted_build_makes(tmp_path):
    report = run_campaign(tmp_path, kills=3, seed=7, call_ms=10, max_kills_per_run=3, log=lambda line: None)
    assert report["kills"] == 3
    assert report["reference"]["problems"] == []
    problems = [p for r in report["per_run"] for p in r["problems"]]
    assert (report["lost"], report["doubled"], report["inconsistent"], report["worker_failures"]) == (0, 0, 0, 0), \
        problems
    assert report["final_equal"] == report["runs"], [r["differing"] for r in report["per_run"]]


def _built(tmp_path):
    folder = tmp_path / "mem"
    with Memory(folder, crash_config(), backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        mem.add(load_jsonl(DEMO), seal=True)
        mem.sync()
    return folder


def test_the_integrity_check_passes_a_build_and_finds_damage(tmp_path):
    folder = _built(tmp_path)
    inputs = load_jsonl(DEMO)
    assert check_store(folder, FakeEmbedder(), crash_config(), inputs, complete=True) == []
    assert message_counts(folder, inputs) == {"lost": 0, "doubled": 0, "unknown": 0}
    before = memory_digest(folder)

    db = sqlite3.connect(folder / "memory.db")
    first, second = [r[0] for r in db.execute("SELECT id FROM boxes ORDER BY id LIMIT 2")]
    db.execute("UPDATE messages SET box_id=? WHERE seq=0", (second,))  # a message moved into the next box
    db.execute("UPDATE boxes SET status='lost' WHERE id=?", (first,))
    db.execute("DELETE FROM messages WHERE seq=5")
    db.commit()
    db.close()
    problems = check_store(folder, inputs=inputs, complete=True)
    assert any("not contiguous" in p for p in problems)
    assert any("status 'lost'" in p for p in problems)
    assert any("seqs are not" in p for p in problems)
    assert message_counts(folder, inputs)["lost"] == 1
    assert memory_digest(folder)["messages"] != before["messages"]


def test_an_index_whose_save_was_killed_is_rebuilt(tmp_path):
    path = tmp_path / "boxes.hnsw"
    vecs = np.eye(5, 8, dtype=np.float32)
    idx = VectorIndex(path, 8)
    idx.add([1, 2, 3], ["c"] * 3, vecs[:3])
    idx.save()
    assert len(VectorIndex(path, 8)) == 3
    # a save killed inside the id map's write (older versions truncated it in place): an empty map
    ids = path.with_suffix(".ids.json")
    old = ids.read_text()
    ids.write_text("")
    assert len(VectorIndex(path, 8)) == 0
    # killed between the two renames: the index has 5 vectors, the id map still 3
    idx.add([4, 5], ["c"] * 2, vecs[3:])
    idx.save()
    ids.write_text(old)
    assert len(VectorIndex(path, 8)) == 0
    assert not path.with_suffix(".ids.tmp").exists()


def test_a_memory_with_a_truncated_index_map_opens_and_syncs(tmp_path):
    folder = _built(tmp_path)
    (folder / "boxes.ids.json").write_text("")
    assert check_store(folder, FakeEmbedder(), crash_config()) == []
    assert json.loads((folder / "boxes.ids.json").read_text())["ids"]


def test_the_crash_inputs_are_the_demo_and_a_shorter_copy():
    msgs = crash_messages(2)
    assert len(msgs) == 66 and len({m.conversation_id for m in msgs}) == 2
