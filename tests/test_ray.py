"""`--engine ray`: conversations sharded over two local Ray actors (CPU, the doubles), merged into one store.

The merged store must hold what a one-process build holds, be queryable through `Memory`, and a rerun must
resume and re-merge without doubling. Skipped when Ray is not installed (`pip install -e ".[ray]"`).
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from membox_local.execution.merge import merge_stores
from membox_local.memory import Memory
from membox_local.store import StoreError

from membox_local.testing import FakeBackend, FakeEmbedder
from test_batch import conversations, snapshot, weaving_backend

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}})  # the workers import the doubles
    yield ray
    ray.shutdown()


@pytest.fixture
def cfg(cfg):
    cfg.weaver.vote_threshold = 0.2
    return cfg


def test_ray_build_equals_one_process_build(tmp_path, cfg, ray_local):
    from membox_local.execution.ray_engine import build_with_ray

    convs = conversations()
    ref = Memory(tmp_path / "ref", cfg, backend=weaving_backend(), embedder=FakeEmbedder())
    for msgs in convs.values():
        ref.add(msgs, seal=True)
    msgs = [m for ms in convs.values() for m in ms]
    filed = []
    report = build_with_ray(tmp_path / "target", msgs, cfg, jobs=2, batch_size=2, backend_factory=weaving_backend,
                            embedder_factory=FakeEmbedder, progress=filed.append)
    assert report["actors"] == 2 and sum(filed) == report["messages_filed"] == len(msgs)
    manifest = json.loads((tmp_path / "target" / "shards.json").read_text())
    assert set(manifest["assignment"].values()) == {0, 1}  # both shards hold conversations
    for s in (0, 1):  # each shard holds only its own conversations
        shard = sqlite3.connect(tmp_path / "target" / "shards" / f"0{s}" / "memory.db")
        owned = {r[0] for r in shard.execute("SELECT DISTINCT conversation_id FROM messages")}
        assert owned == {c for c, k in manifest["assignment"].items() if k == s}

    merged = Memory(tmp_path / "target", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    for c in convs:
        assert snapshot(merged, c) == snapshot(ref, c)
    hits = merged.search("Which race did Maya sign up for?", k=3, conversation_id="c3")
    assert hits and all(b.conversation_id == "c3" for b, _ in hits)
    merged.close()

    # a rerun (nothing new) resumes nothing, re-merges, and doubles nothing
    again = build_with_ray(tmp_path / "target", msgs, cfg, jobs=2, batch_size=2, backend_factory=weaving_backend,
                           embedder_factory=FakeEmbedder)
    assert again["messages_filed"] == 0
    merged = Memory(tmp_path / "target", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    assert {c: snapshot(merged, c) for c in convs} == {c: snapshot(ref, c) for c in convs}
    merged.close()
    ref.close()

    with pytest.raises(StoreError, match="--jobs 2"):
        build_with_ray(tmp_path / "target", msgs, cfg, jobs=3, batch_size=2, backend_factory=weaving_backend,
                       embedder_factory=FakeEmbedder)


def test_node_local_shards_are_shipped_back(tmp_path, cfg, ray_local):
    """With shard_dir (no shared disk), actors build node-locally and the driver keeps the shipped copy."""
    from membox_local.execution.ray_engine import build_with_ray

    convs = conversations()
    msgs = [m for ms in convs.values() for m in ms]
    report = build_with_ray(tmp_path / "t", msgs, cfg, jobs=2, batch_size=3, shard_dir=str(tmp_path / "local"),
                            backend_factory=weaving_backend, embedder_factory=FakeEmbedder)
    assert report["messages_filed"] == len(msgs)
    assert (tmp_path / "local" / "t" / "00" / "memory.db").exists()
    assert (tmp_path / "t" / "shards" / "00" / "memory.db").exists()
    merged = Memory(tmp_path / "t", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    assert len(merged.store.message_rows()) == len(msgs)
    merged.close()


def test_merge_refuses_overlapping_shards(tmp_path, cfg):
    convs = conversations()
    paths = []
    for name in ("a", "b"):  # the same conversation in two shards
        mem = Memory(tmp_path / name, cfg, backend=weaving_backend(), embedder=FakeEmbedder())
        mem.add(convs["c4"], seal=True)
        mem.close()
        paths.append(tmp_path / name / "memory.db")
    with pytest.raises(StoreError, match="exactly one shard"):
        merge_stores(tmp_path / "merged.db", paths)


def test_ray_engine_names_the_install_command(monkeypatch):
    import builtins

    from membox_local.execution import ray_engine

    real = builtins.__import__

    def no_ray(name, *a, **kw):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ImportError, match=r"pip install"):
        ray_engine.require_ray()
