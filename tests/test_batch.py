"""The batch scheduler: N conversations advanced together, at most B in flight, one call per kind and round.

Built with the deterministic doubles, the store must equal a one-at-a-time build for every batch size.
"""
from __future__ import annotations

import re

import pytest

from membox_local.ingest import load_jsonl
from membox_local.memory import Memory
from membox_local.records import Message
from membox_local.execution.batch import build_conversations

from conftest import DEMO
from membox_local.testing import FakeBackend, FakeContinuityScorer, FakeEmbedder

LENGTHS = (40, 26, 12, 33, 7)  # unequal conversations, so slots free up at different rounds


@pytest.fixture
def cfg(cfg):
    cfg.weaver.vote_threshold = 0.2  # bag-of-words cosines are low: let the double's events vote and link
    return cfg


def weaving_backend() -> FakeBackend:
    """The double, answering extraction with one event per message so the weaver links and groups them."""
    b = FakeBackend()

    def respond(r):
        if r.stage == "extract":
            lines = [l.split(": ", 1)[1] for l in r.prompt.user.splitlines() if re.match(r"^\d+\. [A-Z][\w ]*: ", l)]
            words = [w for w in re.findall(r"[a-z]+", " ".join(lines).lower()) if len(w) > 3]
            kws = list(dict.fromkeys(words))[:4]
            events = [{"line": n, "event": l[:150]} for n, l in enumerate(lines, 1)]
            out = {"topic": " ".join(kws[:2]), "keywords": kws, "events": events[:4]}
            return {k: v for k, v in out.items() if k in r.schema["properties"]}  # keywords = "text": none asked
        if r.stage == "link":
            return {"continues": [1]}
        if r.stage == "trace-init":
            n = r.schema["properties"]["storylines"]["items"]["properties"]["events"]["maxItems"]
            return {"storylines": [{"title": "main storyline", "events": list(range(1, n + 1))}]}
        return None

    b.responder = respond
    return b


def conversations() -> dict[str, list[Message]]:
    demo = load_jsonl(DEMO)
    return {f"c{k}": [Message(f"c{k}", m.message_id, m.speaker, m.text, m.session, m.session_date)
                      for m in demo[:n]] for k, n in enumerate(LENGTHS)}


def snapshot(mem: Memory, conv: str):
    boxes = [(b.session, [m.message_id for m in b.messages], b.status, b.topic, b.keywords,
              [e.text for e in b.events]) for b in mem.boxes(conv)]
    text_of = {e.id: e.text for e in mem.store.events(conv)}
    traces = sorted((t.summary, sorted(text_of[i] for i in t.event_ids)) for t in mem.store.traces(conv))
    usage = {s: (u["calls"], u["prompt_tokens"], u["completion_tokens"])
             for s, u in mem.store.usage_by_stage(conv).items()}
    return boxes, traces, usage


@pytest.fixture
def reference(tmp_path, cfg):
    mem = Memory(tmp_path / "one", cfg, backend=weaving_backend(), embedder=FakeEmbedder())
    for msgs in conversations().values():
        mem.add(msgs, seal=True)
    ref = {c: snapshot(mem, c) for c in conversations()}
    mem.close()
    stages = {s for _, _, usage in ref.values() for s in usage}
    assert {"extract", "link", "trace-init"} <= stages  # the weaver's calls are part of the comparison
    return ref


@pytest.mark.parametrize("batch_size", [1, 2, 3, 8])
def test_batched_build_equals_one_at_a_time(tmp_path, cfg, reference, batch_size):
    backend = weaving_backend()
    mem = Memory(tmp_path / f"b{batch_size}", cfg, backend=backend, embedder=FakeEmbedder())
    convs = conversations()
    mem.store.add_messages([m for ms in convs.values() for m in ms])
    finished, filed = [], []
    report = build_conversations(mem, list(convs), batch_size=batch_size, progress=filed.append,
                                 on_conversation=finished.append)
    assert {c: snapshot(mem, c) for c in convs} == reference
    assert sorted(finished) == sorted(convs) and sum(filed) == report.messages == sum(LENGTHS)
    # never more than B conversations in one call, and batching really gathers them
    assert max(backend.batches) <= batch_size
    if batch_size > 1:
        assert max(backend.batches) == min(batch_size, len(convs))
        assert report.calls["JsonRequest"] < report.requests["JsonRequest"]
    else:
        assert report.calls["JsonRequest"] == report.requests["JsonRequest"]
    mem.close()


def test_refill_keeps_the_batch_full(tmp_path, cfg):
    """With B=2 and a long conversation, a slot freed by a short one is taken by the next at once."""
    mem = Memory(tmp_path / "m", cfg, backend=weaving_backend(), embedder=FakeEmbedder())
    convs = conversations()
    mem.store.add_messages([m for ms in convs.values() for m in ms])
    order = []
    build_conversations(mem, list(convs), batch_size=2, on_conversation=order.append)
    # c0 (40) and c1 (26) start; c2 (12) takes c1's slot the moment it is free and still ends before c0
    assert order[:3] == ["c1", "c2", "c0"] and sorted(order) == sorted(convs)
    mem.close()


def test_interrupted_batched_build_resumes(tmp_path, cfg, reference):
    class Crash(Exception):
        pass

    convs = conversations()
    mem = Memory(tmp_path / "m", cfg, backend=weaving_backend(), embedder=FakeEmbedder())
    mem.store.add_messages([m for ms in convs.values() for m in ms])
    seen = []

    def progress(n):
        seen.append(n)
        if len(seen) == 50:
            raise Crash()

    with pytest.raises(Crash):
        build_conversations(mem, list(convs), batch_size=3, progress=progress)
    mem.close()
    again = Memory(tmp_path / "m", cfg, backend=weaving_backend(), embedder=FakeEmbedder())
    report = build_conversations(again, list(convs), batch_size=3)
    assert 0 < report.messages <= sum(LENGTHS) - 50  # only what was left
    assert {c: snapshot(again, c)[:2] for c in convs} == {c: r[:2] for c, r in reference.items()}
    again.close()


def test_batch_size_must_be_positive(memory):
    with pytest.raises(ValueError, match="batch_size"):
        build_conversations(memory, ["x"], batch_size=0)


def test_llamacpp_pool_splits_a_batch_and_keeps_order(cfg):
    """The pool's plumbing, with doubles standing in for the llama.cpp instances."""
    from membox_local.backends.base import JsonRequest, Prompt
    from membox_local.backends.llamacpp import LlamaCppPool
    from membox_local.prompts import extract_schema

    made = []

    def make(sub):
        made.append(sub.n_threads)
        return FakeBackend()

    cfg.llm.n_threads = 4
    pool = LlamaCppPool(cfg.llm, 2, make=make)
    assert made == [2, 2]  # the threads are split between the instances
    reqs = [JsonRequest(Prompt("s", f"1. Ann: I ran {k} miles to Town{k}"), extract_schema(cfg.extract, 1),
                        "extract")
            for k in range(5)]
    out = pool.json(reqs)
    assert [r.data["keywords"] for r in out] == [FakeBackend().json([q])[0].data["keywords"] for q in reqs]
    assert [w.batches for w in pool.workers] == [[3], [2]]
    pool.close()
    with pytest.raises(ValueError, match="workers"):
        LlamaCppPool(cfg.llm, 5, make=make)


def test_default_jobs_pool_llamacpp_only_for_several_conversations(cfg):
    from membox_local.cli import auto_jobs

    cfg.llm.n_threads = 2
    assert auto_jobs(cfg, conversations=6, batch_size=8) == 2  # one instance per core
    assert auto_jobs(cfg, conversations=1, batch_size=8) == 1  # requests come one by one: keep the threads
    assert auto_jobs(cfg, conversations=6, batch_size=1) == 1
    cfg.llm.backend = "openai"
    assert auto_jobs(cfg, conversations=6, batch_size=8) == 1  # batches by itself


def test_cli_build_batches_and_resumes(tmp_path, monkeypatch, capsys):
    """`membox build --batch-size`: validation first, one batched call per stage, a rerun files nothing."""
    import json

    from membox_local import backends, continuity, memory
    from membox_local.cli import main

    backend = weaving_backend()
    monkeypatch.setattr(backends, "make_backend", lambda cfg: backend)
    monkeypatch.setattr(memory, "make_embedder", lambda cfg: FakeEmbedder())
    monkeypatch.setitem(continuity.MODELS, "scorer", FakeContinuityScorer)  # the default's cross-encoder
    data = tmp_path / "many.jsonl"
    with open(data, "w") as fh:
        for conv, msgs in conversations().items():
            for m in msgs:
                fh.write(json.dumps({"conversation_id": conv, "message_id": m.message_id, "speaker": m.speaker,
                                     "text": m.text, "session": m.session, "session_date": m.session_date}) + "\n")
    store = tmp_path / "store"
    assert main(["build", str(data), "--store", str(store), "--batch-size", "4", "--jobs", "1", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["conversations"] == len(LENGTHS) and stats["messages"] == sum(LENGTHS)
    assert stats["requests"]["JsonRequest"] > stats["batched_calls"]["JsonRequest"]
    assert max(backend.batches) == 4
    assert main(["build", str(data), "--store", str(store), "--batch-size", "4", "--jobs", "1"]) == 0
    assert "0 to file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # refused by the option's type (argtypes.count), one line
        main(["build", str(data), "--store", str(store), "--batch-size", "0"])
    assert exc.value.code == 2
    assert main(["build", str(data), "--store", str(store), "--jobs", "2", "--engine", "ray", "--ray-address",
                 "nowhere:1"]) == 2  # a local-engine store is not resharded
