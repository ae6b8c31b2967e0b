"""Forgetting (Memory.forget, `membox forget`): the forgotten text leaves every file of the memory folder, what
was derived from it goes or is rebuilt, and the rest of the memory keeps working. Through the doubles."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from membox_local.cli import main
from membox_local.ingest import load_jsonl
from membox_local.memory import Memory
from membox_local.records import Message
from membox_local.retrieval import box_index_text, make_retriever, quoting_texts
from membox_local.store import StoreError, text_key
from membox_local.systems.base import Component

from conftest import DEMO

CONV = "maya-tom"
MARKER = "zebracorn-7f3a"
WORD = b"zebracorn"  # the FakeBackend's keywords, topics and trace titles keep only the letters
SECRET_ID = "s1-3"
SECRET = f"Never. I booked a {MARKER} coach to plan my training."
MODES = ("compact", "trace", "box-hits", "box-hits-trace", "turn-rag", "chunk-rag")


def demo_messages() -> list[Message]:
    return [dataclasses.replace(m, text=SECRET) if m.message_id == SECRET_ID else m for m in load_jsonl(DEMO)]


def files_holding(folder: Path, needle: bytes) -> list[str]:
    """Every file under the folder (memory.db, -wal, -shm, *.hnsw, *.ids.json, ...) whose bytes hold `needle`."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes())


def use_everything(mem: Memory, question: str) -> None:
    """Search and answer in every mode, so indexes and the embedding cache hold whatever they derive."""
    mem.search(question, conversation_id=CONV)
    for mode in MODES:
        assert mem.answer(question, CONV, mode=mode).text


def derived_texts(mem: Memory) -> list[str]:
    """The texts whose embeddings the memory caches that quote the secret message."""
    msgs = mem.store.messages(CONV)
    secret = next(m for m in msgs if m.message_id == SECRET_ID)
    box = next(b for b in mem.boxes(CONV) if any(m.message_id == SECRET_ID for m in b.messages))
    return [secret.text, box_index_text(box), *quoting_texts(msgs, [SECRET_ID]),
            *quoting_texts(box.messages, [SECRET_ID])] + [e.text for e in box.events if MARKER in e.text]


def cached(mem: Memory, texts: list[str]) -> set[str]:
    keys = {text_key(t) for t in texts}
    return {r[0] for r in mem.store.db.execute("SELECT key FROM embeddings") if r[0] in keys}


def lexical_hits(mem: Memory, query: str) -> list[str]:
    """Ids of the messages box-hits' BM25 index (built in memory from the stored messages) scores above 0."""
    bm = make_retriever("box-hits", mem).box_map(CONV)
    return [m.message_id for m, s in zip(bm.messages, bm.lexical_index().scores(query)) if s > 0]


def no_marker_in_memory(mem: Memory) -> None:
    for b in mem.boxes():
        shown = [b.topic, b.error, *b.keywords, *(m.text for m in b.messages), *(e.text for e in b.events)]
        assert not any("zebracorn" in x for x in shown), b
    assert not any("zebracorn" in t.summary for t in mem.store.traces())


@pytest.fixture
def built(memory):
    memory.add(demo_messages(), seal=True)
    assert MARKER in SECRET and any(MARKER in e.text for e in memory.store.events(CONV))  # it has a derived event
    use_everything(memory, f"Who booked the {MARKER} coach?")
    return memory


def test_forgetting_a_message_erases_it_from_every_file(built):
    mem, folder = built, built.path
    assert files_holding(folder, MARKER.encode()) and files_holding(folder, WORD)
    assert (folder / "boxes.hnsw").exists() and (folder / "boxes.ids.json").exists()
    texts = derived_texts(mem)
    assert len(cached(mem, texts)) >= 4  # the message, its turn, its chunk, its box's index text
    before = {m.message_id for m in mem.store.messages(CONV)}
    box = next(b for b in mem.boxes(CONV) if any(m.message_id == SECRET_ID for m in b.messages))
    assert len(box.messages) > 1 and box.status == "extracted"
    # what an index save killed midway leaves behind (index.py writes `<name>.<pid>.tmp` then renames it)
    (folder / "boxes.4242-1.tmp").write_bytes((folder / "boxes.hnsw").read_bytes() + WORD)
    assert lexical_hits(mem, MARKER) == [SECRET_ID]

    n = mem.forget(CONV, [SECRET_ID])

    assert n["messages"] == 1 and n["boxes"] == 0 and n["boxes_to_extract"] == 1 and n["scrubbed"] == 1
    assert n["events"] >= 1 and n["traces"] >= 1 and n["cached_vectors"] >= 4
    assert files_holding(folder, WORD) == [], "the forgotten text is still on disk"
    assert cached(mem, texts) == set()
    assert {m.message_id for m in mem.store.messages(CONV)} == before - {SECRET_ID}
    kept = mem.store.box(box.id)  # the box keeps its other messages and is extracted again by the next build
    assert kept.status == "sealed" and not kept.events and not kept.topic and not kept.keywords
    assert [m.message_id for m in kept.messages] == [m.message_id for m in box.messages if m.message_id != SECRET_ID]
    assert all(set(t.event_ids) <= {e.id for e in mem.store.events()} for t in mem.store.traces())
    # boxes that shared a deleted trace are woven again by the next build
    assert mem.system("membox").unwoven([CONV]) == n["boxes_to_weave"]
    no_marker_in_memory(mem)
    assert lexical_hits(mem, MARKER) == []  # the lexical index, in memory only, is built from what is stored
    # the box index was rebuilt without the reset box; searching and answering work
    assert box.id not in {b.id for b, _ in mem.search("coach training plan", k=50)}
    assert mem.answer("Which race did Maya sign up for?").text

    mem.add([], seal=True)  # the next build extracts the box again, from the messages it kept
    again = mem.store.box(box.id)
    assert again.status == "extracted" and again.topic
    assert {b.status for b in mem.boxes()} == {"extracted"} and mem.system("membox").unwoven([CONV]) == 0
    assert mem.stats()["messages"] == len(before) - 1
    assert box.id in {b.id for b, _ in mem.search("coach training plan", k=50)}
    use_everything(mem, "How many days a week does the plan want you to run?")
    no_marker_in_memory(mem)
    assert files_holding(folder, WORD) == []
    mem.close()
    assert files_holding(folder, WORD) == []


def test_a_box_that_loses_every_message_is_deleted(built):
    mem = built
    box = next(b for b in mem.boxes(CONV) if any(m.message_id == SECRET_ID for m in b.messages))
    ids = [m.message_id for m in box.messages]
    n = mem.forget(CONV, ids)
    assert n["messages"] == len(ids) and n["boxes"] == 1 and n["boxes_to_extract"] == 0
    assert box.id not in {b.id for b in mem.boxes()}
    assert files_holding(mem.path, WORD) == []
    assert mem.answer("Which race did Maya sign up for?").text


def test_forgetting_a_whole_conversation(memory):
    other = [Message("other", f"o{i}", "Ana", t, "1", "1 May 2024") for i, t in enumerate(
        [f"I booked the {MARKER} tour for Friday.", f"The {MARKER} tour leaves at noon.", "I made soup."])]
    memory.add(load_jsonl(DEMO), seal=True)  # maya-tom, without the marker
    memory.add(other, seal=True)
    use_everything(memory, "Which race did Maya sign up for?")
    memory.search(f"When does the {MARKER} tour leave?", conversation_id="other")
    assert memory.answer(f"When does the {MARKER} tour leave?", "other").text
    assert files_holding(memory.path, WORD)
    kept = [(b.id, b.status, b.topic) for b in memory.boxes(CONV)]
    assert memory.store.get_meta("weaver:other") is not None and memory.store.usage_by_stage("other")

    n = memory.forget("other")

    assert n["messages"] == 3 and n["boxes"] >= 1 and n["boxes_to_extract"] == 0 and n["scrubbed"] == 1
    assert memory.store.conversations() == [CONV]
    assert memory.boxes("other") == [] and memory.store.events("other") == [] and memory.store.traces("other") == []
    assert memory.store.get_meta("weaver:other") is None and memory.store.usage_by_stage("other") == {}
    assert [(b.id, b.status, b.topic) for b in memory.boxes(CONV)] == kept  # the other conversation untouched
    assert files_holding(memory.path, WORD) == []
    assert memory.search("Maya race", k=3) and memory.answer("Which race did Maya sign up for?").text
    with pytest.raises(StoreError, match="no conversation 'other'"):
        memory.forget("other")


def test_forgetting_in_the_open_box_and_pending_messages_then_building_on(memory):
    msgs = demo_messages()
    cut = 19
    memory.add(msgs[:cut])  # the last box stays open
    while len(memory.store.current_open_box(CONV).messages) < 2:
        memory.add([msgs[cut]])
        cut += 1
    memory.store.add_messages(msgs[cut:cut + 2])  # stored, not filed yet
    open_box = memory.store.current_open_box(CONV)
    gone = [open_box.messages[-1].message_id, msgs[cut + 1].message_id, SECRET_ID]
    n = memory.forget(CONV, gone)
    assert n["messages"] == 3
    left = memory.store.current_open_box(CONV)
    assert left.id == open_box.id and left.status == "open"
    assert [m.message_id for m in left.messages] == [m.message_id for m in open_box.messages[:-1]]
    memory.add(msgs[cut + 2:], seal=True)  # the loom carries on from the open box as it is now
    stored = [m.message_id for m in memory.store.messages(CONV)]
    assert stored == [m.message_id for m in msgs if m.message_id not in gone]
    filed = [m.message_id for b in memory.boxes(CONV) for m in b.messages]
    assert sorted(filed) == sorted(stored) and {b.status for b in memory.boxes()} == {"extracted"}
    assert files_holding(memory.path, WORD) == []


def test_unknown_ids_and_sharded_memories_are_refused_and_change_nothing(built):
    mem = built
    before = len(mem.store.messages(CONV))
    with pytest.raises(StoreError, match="has no message 'nope'; nothing forgotten"):
        mem.forget(CONV, [SECRET_ID, "nope"])
    with pytest.raises(StoreError, match="no message ids"):
        mem.forget(CONV, [])
    (mem.path / "shards.json").write_text("{}")
    with pytest.raises(StoreError, match="sharded"):
        mem.forget(CONV, [SECRET_ID])
    assert len(mem.store.messages(CONV)) == before and files_holding(mem.path, WORD)


def test_a_system_with_tables_must_say_how_it_forgets(memory):
    class Silent(Component):
        name, tables = "silent", object

    with pytest.raises(NotImplementedError, match="'silent' memory system cannot forget"):
        Silent(memory).forget(CONV, ["x"])
    assert Component(memory).forget(CONV, ["x"]) == {}


def test_membox_forget_cli(memory, capsys):
    memory.add(demo_messages(), seal=True)
    memory.sync()
    folder = memory.path
    memory.close()

    assert main(["forget", str(folder), "--conversation", "nobody"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--conversation nobody: no such conversation" in err[0]
    assert main(["forget", str(folder / "missing"), "--conversation", CONV]) == 2
    assert "no memory here" in capsys.readouterr().err
    assert main(["forget", str(folder), "--conversation", CONV, "--messages"]) == 2
    assert "at least one message id" in capsys.readouterr().err
    assert files_holding(folder, WORD)

    # no model is loaded to forget: the box index is deleted here and rebuilt by the next search
    assert main(["forget", str(folder), "--conversation", CONV, "--messages", SECRET_ID]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"forgot messages of conversation {CONV}: 1 message(s), 0 box(es)")
    assert "1 box(es) to re-extract" in out[0]
    assert files_holding(folder, WORD) == [] and not list(folder.glob("*.hnsw"))

    assert main(["forget", str(folder), "--conversation", CONV]) == 0
    assert capsys.readouterr().out.startswith(f"forgot conversation {CONV}: {len(load_jsonl(DEMO)) - 1} message(s)")
    with pytest.raises(SystemExit):
        main(["forget", str(folder)])  # --conversation is required (argparse's usage error)


def test_a_reader_left_open_keeps_the_log_and_is_reported(built):
    import sqlite3

    reader = sqlite3.connect(str(built.path / "memory.db"))
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM messages").fetchone()  # a read transaction pins the write-ahead log
    built.store.db.execute("PRAGMA busy_timeout=200")  # how long the checkpoint waits for the reader
    try:
        n = built.forget(CONV, [SECRET_ID])
    finally:
        reader.close()
    assert n["messages"] == 1 and n["scrubbed"] == 0
    assert built.store.db.execute("SELECT COUNT(*) FROM messages WHERE text LIKE '%zebracorn%'").fetchone()[0] == 0
    built.close()  # the last connection checkpoints the log and removes it; deleted cells were zeroed
    assert files_holding(built.path, WORD) == []


def test_a_storyline_through_a_forgotten_event_is_deleted_and_its_other_boxes_woven_again(memory):
    lines = [("1", f"I booked the {MARKER} coach for the trip."), ("1", "Nice, where does the trip go?"),
             ("2", "I booked a second coach seat for the trip."), ("2", "Great, the trip will be fun.")]
    memory.add([Message("t", f"m{i}", "Ana" if i % 2 == 0 else "Ben", text, s, f"{s} May 2024")
                for i, (s, text) in enumerate(lines)], seal=True)
    [(trace, events)] = memory.store.traces_with_events("t")
    second = next(b for b in memory.boxes("t") if b.session == "2")
    assert len({e.box_id for e in events}) == 2  # one storyline through both boxes

    n = memory.forget("t", ["m0"])

    assert n["traces"] == 1 and n["boxes_to_weave"] == 1 and n["boxes"] == 0 and n["boxes_to_extract"] == 1
    assert memory.store.traces("t") == [] and memory.store.unwoven_boxes("t")[0].id == second.id
    memory.add([], seal=True)  # extracts the first box again and weaves both
    assert memory.store.unwoven_boxes("t") == [] and {b.status for b in memory.boxes("t")} == {"extracted"}
    woven = {e.box_id for _, evs in memory.store.traces_with_events("t") for e in evs}
    assert second.id in woven
    assert files_holding(memory.path, WORD) == []


def test_the_event_graph_forgets_what_it_derived_from_every_file(tmp_path, cfg):
    """EventWeave (systems/eventweave.py) beside the box memory: the events, summaries and cached vectors derived
    from a forgotten message leave every file; the graph is replayed from the events left and the next build
    extracts again the pair that showed the message as its turn before."""
    from membox_local.testing import FakeBackend, FakeEmbedder

    cfg.memory.systems = ["membox", "eventweave"]
    with Memory(tmp_path / "ew", cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        mem.add(demo_messages(), seal=True)
        assert any(MARKER in e.text for e in mem.store.ew_events(CONV))
        assert any(MARKER in r["text"] for r in mem.store.ew_summaries(CONV))
        use_everything(mem, f"Who booked the {MARKER} coach?")
        for mode in ("event-graph", "event-graph-boxes"):
            assert MARKER in mem.context(f"Who booked the {MARKER} coach?", CONV, mode=mode).text
        assert files_holding(mem.path, WORD)

        n = mem.forget(CONV, [SECRET_ID])

        assert n["ew_events"] >= 1 and n["ew_summaries"] == 1 and n["ew_pairs_to_extract"] == 1 and n["scrubbed"]
        assert files_holding(mem.path, WORD) == [], "the forgotten text is still on disk"
        assert not any("zebracorn" in e.text for e in mem.store.ew_events())
        assert mem.context("Who booked a coach?", CONV, mode="event-graph").text
        mem.add([], seal=True)  # the pair after it and the session's summary are made again
        assert not mem.has_work() and files_holding(mem.path, WORD) == []
        folder = mem.path
    assert files_holding(folder, WORD) == []
