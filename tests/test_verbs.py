"""The verbs known from mem0 on Memory (add with tags, search with scopes and filters, get, get_all, update, delete,
delete_all, history, reset) and the store's schema migration, through the deterministic doubles."""
from __future__ import annotations

import dataclasses
import json
import re
import sqlite3

import pytest

from membox_local.ingest import METADATA_MAX_BYTES, InputError, load_jsonl
from membox_local.memory import Memory
from membox_local.records import Box, Message
from membox_local.store import SCHEMA_VERSION, NotFound, Store, StoreBusy, StoreError, WriteLock, text_key
from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import DEMO
from test_forget import files_holding

CONV = "maya-tom"
COPY = "ana-ben"  # the demo conversation again, under another id: the same words in another conversation
MARKER = "zebracorn-7f3a"
WORD = b"zebracorn"  # what the FakeBackend's keywords, topics and trace titles keep of the marker
UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def demo(conversation_id: str = CONV) -> list[Message]:
    return [dataclasses.replace(m, conversation_id=conversation_id) for m in load_jsonl(DEMO)]


@pytest.fixture
def two(memory):
    """The demo conversation twice: Maya's (user maya, messages tagged by session) and a copy (user ana)."""
    for m in demo():
        memory.add([m], user_id="maya", metadata={"session": int(m.session)})
    memory.add(demo(COPY), seal=True, user_id="ana", agent_id="helper")
    memory.seal()
    return memory


def box_of(mem: Memory, conversation_id: str, message_id: str) -> Box:
    return next(b for b in mem.boxes(conversation_id) if any(m.message_id == message_id for m in b.messages))


# ---- add: tags and metadata ------------------------------------------------------------------------------------------
def test_add_keeps_tags_and_metadata_and_stays_idempotent(memory):
    msgs = [{"message_id": "m1", "speaker": "Ann", "text": "I adopted a kitten", "metadata": {"mood": "glad"}},
            {"message_id": "m2", "speaker": "Bob", "text": "What is its name?", "user_id": "bob"}]
    tags = {"conversation_id": "c", "user_id": "ann", "agent_id": "bot", "metadata": {"src": "chat", "mood": 0}}
    assert memory.add(msgs, **tags) == 2
    m1, m2 = memory.get(("c", "m1")), memory.get(("c", "m2"))
    assert (m1.user_id, m1.agent_id, m1.metadata) == ("ann", "bot", {"src": "chat", "mood": "glad"})  # its own keys win
    assert (m2.user_id, m2.agent_id, m2.metadata) == ("bob", "bot", {"src": "chat", "mood": 0})
    assert memory.add(msgs, **tags) == 0
    assert memory.boxes("c")[0].messages[0].metadata == {"src": "chat", "mood": "glad"}  # boxes carry the tags too
    with pytest.raises(StoreError, match=r"c/m1 is already stored with other content \(metadata\)"):
        memory.add([msgs[0]], conversation_id="c", user_id="ann", agent_id="bot")
    with pytest.raises(InputError, match="message 0: it belongs to conversation 'd', not 'c'"):
        memory.add([{**msgs[0], "conversation_id": "d"}], conversation_id="c")


@pytest.mark.parametrize("metadata,error", [
    ([1, 2], "metadata must be a JSON object"),
    ({"when": {1, 2}}, "metadata is not JSON-serialisable"),
    ({"x": float("nan")}, "metadata is not JSON-serialisable"),
    ({"x": (1, 2)}, "does not survive JSON unchanged"),
    ({1: "one"}, "does not survive JSON unchanged"),
    ({"x": "\ud800"}, "not valid Unicode"),
    ({"blob": "x" * METADATA_MAX_BYTES}, f"more than the {METADATA_MAX_BYTES} allowed"),
])
def test_bad_metadata_is_one_line_naming_the_message_and_nothing_is_written(memory, metadata, error):
    good = {"conversation_id": "c", "message_id": "m0", "speaker": "A", "text": "hello there"}
    with pytest.raises(InputError, match=re.escape(error)) as exc:
        memory.add([good, {**good, "message_id": "m1", "metadata": metadata}])
    assert "add: message 1:" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(InputError, match="add: metadata"):
        memory.add([good], metadata=metadata)
    assert memory.store.message_rows() == [] and not (memory.path / "build.lock").exists()


def test_tags_in_a_jsonl_file(tmp_path):
    from membox_local.ingest import load_messages

    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"conversation_id": "c", "message_id": "1", "speaker": "A", "text": "hi",
                                "user_id": "u", "agent_id": "a", "metadata": {"k": [1, None]}}) + "\n")
    [m] = load_messages(path)
    assert (m.user_id, m.agent_id, m.metadata) == ("u", "a", {"k": [1, None]})
    path.write_text(json.dumps({"conversation_id": "c", "message_id": "1", "speaker": "A", "text": "hi",
                                "metadata": "k=1"}) + "\n")
    with pytest.raises(InputError, match="line 1: metadata must be a JSON object"):
        load_messages(path)


# ---- search: conversations are isolated ------------------------------------------------------------------------------
def test_search_sees_the_conversations_it_is_asked_for(two):
    q = "Which race did Maya sign up for?"
    assert {b.conversation_id for b, _ in two.search(q, k=50, conversation_id=CONV)} == {CONV}
    assert {b.conversation_id for b, _ in two.search(q, k=50, conversation_id=COPY)} == {COPY}
    both = two.search(q, k=50, conversation_ids=[CONV, COPY])
    assert {b.conversation_id for b, _ in both} == {CONV, COPY}
    with pytest.raises(InputError, match="holds 2 conversations"):  # naming none, with several: which ones?
        two.search(q, k=50)
    with pytest.raises(InputError, match="holds 2 conversations"):
        two.answer(q)
    assert all(isinstance(b, Box) and isinstance(s, float) for b, s in both)
    assert [s for _, s in both] == sorted((s for _, s in both), reverse=True)
    assert two.search(q, k=5, conversation_id="nobody") == []
    with pytest.raises(InputError, match="not both"):
        two.search(q, conversation_id=CONV, conversation_ids=[COPY])
    with pytest.raises(InputError, match="conversation ids must be a list of strings"):
        two.search(q, conversation_ids=CONV)


def test_search_filters_by_user_agent_and_metadata(two):
    q = "Which race did Maya sign up for?"
    assert {b.conversation_id for b, _ in two.search(q, k=50, user_id="maya")} == {CONV}
    assert {b.conversation_id for b, _ in two.search(q, k=50, agent_id="helper")} == {COPY}
    assert two.search(q, k=50, user_id="maya", conversation_id=COPY) == []  # the scope holds, whatever the filter
    session3 = {m.message_id for m in two.store.messages(CONV) if m.session == "3"}
    hits = two.search(q, k=50, filters={"session": 3})
    assert hits and all(b.conversation_id == CONV and {m.message_id for m in b.messages} <= session3 for b, _ in hits)
    assert two.search(q, k=50, filters={"session": "3"}) == []  # equal as JSON: 3 is not "3"
    assert two.search(q, k=50, filters={"session": 3.0}) == []


# ---- get, get_all ----------------------------------------------------------------------------------------------------
def test_get_a_box_or_a_message_and_name_what_is_missing(two):
    box = two.boxes(CONV)[0]
    assert two.get(box.id) == box
    m = two.get((CONV, "s1-3"))
    assert m.text.startswith("Never.") and m.user_id == "maya" and m.metadata == {"session": 1}
    with pytest.raises(KeyError) as exc:
        two.get(99999)
    assert isinstance(exc.value, NotFound) and str(exc.value) == f"{two.path}: no box 99999"
    with pytest.raises(NotFound, match=r"no message 'nope' in conversation 'maya-tom'"):
        two.get((CONV, "nope"))
    with pytest.raises(InputError, match="a box id .int. or a .conversation_id, message_id. pair"):
        two.get("s1-3")


def test_get_all_pages_and_filters(two):
    msgs = two.get_all(CONV, kind="messages", limit=1000)
    assert [m.message_id for m in msgs] == [m.message_id for m in demo()]
    assert [m.message_id for m in two.get_all(CONV, "messages", offset=5, limit=3)] == [m.message_id for m in msgs[5:8]]
    assert two.get_all(CONV, "messages", offset=1000) == []
    assert two.get_all(CONV) == two.boxes(CONV)[:100]  # default: boxes, by id
    assert two.get_all(CONV, offset=1, limit=2) == two.boxes(CONV)[1:3]
    assert len(two.get_all(kind="messages", limit=1000)) == 2 * len(msgs)  # naming none: every conversation
    assert {m.conversation_id for m in two.get_all(kind="messages", user_id="ana", limit=1000)} == {COPY}
    assert two.get_all(CONV, "messages", agent_id="helper") == []
    s2 = two.get_all(CONV, "messages", filters={"session": 2}, limit=1000)
    assert s2 and {m.session for m in s2} == {"2"}
    assert {b.session for b in two.get_all(CONV, filters={"session": 2})} == {"2"}
    assert two.get_all(conversation_ids=[CONV, COPY], limit=1000) == two.boxes()
    for bad, error in [({"kind": "events"}, "kind must be one of boxes, messages"),
                       ({"limit": 0}, "limit must be an integer of at least 1"),
                       ({"offset": -1}, "offset must be an integer of at least 0"),
                       ({"filters": ["session"]}, "filters: metadata must be a JSON object")]:
        with pytest.raises(InputError, match=re.escape(error)):
            two.get_all(CONV, **bad)


# ---- update ----------------------------------------------------------------------------------------------------------
def test_update_replaces_the_text_and_the_box_is_extracted_again(memory):
    memory.add(demo(), seal=True)
    memory.search("What did Maya book?")  # the box index and the embedding cache hold the old texts
    box = box_of(memory, CONV, "s1-1")
    old = memory.get((CONV, "s1-1")).text
    assert box.status == "extracted" and any("signed up" in e.text for e in box.events)
    assert text_key(old) in {r[0] for r in memory.store.db.execute("SELECT key FROM embeddings")}
    new = f"Hi Tom! Guess what, I booked a {MARKER} coach for the Lisbon half marathon."

    n = memory.update(CONV, "s1-1", new)

    assert n["messages"] == 1 and n["boxes_to_extract"] == 1 and n["events"] >= 1 and n["cached_vectors"] >= 2
    assert memory.get((CONV, "s1-1")).text == new
    kept = memory.get(box.id)
    assert kept.status == "sealed" and not kept.events and not kept.topic
    assert [m.message_id for m in kept.messages] == [m.message_id for m in box.messages]
    assert text_key(old) not in {r[0] for r in memory.store.db.execute("SELECT key FROM embeddings")}
    assert files_holding(memory.path, b"signed up for the Lisbon") == []  # the old text is in no file
    assert box.id not in {b.id for b, _ in memory.search("Lisbon half marathon", k=50)}
    memory.seal()  # the next build (or seal) extracts it again, from the new text, and weaves it
    again = memory.get(box.id)
    assert again.status == "extracted" and any(MARKER in e.text for e in again.events)
    assert memory.system("membox").unwoven([CONV]) == 0
    assert box.id in {b.id for b, _ in memory.search(f"Who booked the {MARKER} coach?", k=3)}
    events = [c.event for c in memory.history(box.id)]
    assert events[:3] == ["add", "seal", "extract"] and events[-3:] == ["invalidate", "re-extract", "weave"]
    assert [c.event for c in memory.history((CONV, "s1-1"))] == ["add", "update"]
    assert memory.update(CONV, "s1-1", new) == {"messages": 0}  # the same text changes nothing
    assert [c.event for c in memory.history((CONV, "s1-1"))] == ["add", "update"]


def test_update_refusals_name_the_record(memory):
    memory.add(demo()[:6], seal=True)
    with pytest.raises(NotFound, match=r"conversation 'maya-tom' has no message 'nope'; nothing updated"):
        memory.update(CONV, "nope", "x")
    with pytest.raises(NotFound, match="no conversation 'other'"):
        memory.update("other", "s1-1", "x")
    with pytest.raises(InputError, match="update: the text must be a non-empty string"):
        memory.update(CONV, "s1-1", "  ")
    (memory.path / "shards.json").write_text("{}")
    with pytest.raises(StoreError, match="updating in a sharded memory is not supported"):
        memory.update(CONV, "s1-1", "x")


def test_updating_a_pending_message_and_one_in_the_open_box(memory):
    msgs = demo()
    memory.add(msgs[:5])  # the last box stays open
    memory.store.add_messages(msgs[5:7])  # stored, not filed yet
    open_box = memory.store.current_open_box(CONV)
    memory.update(CONV, open_box.messages[-1].message_id, "I ran ten kilometres on Sunday morning.")
    memory.update(CONV, msgs[6].message_id, "I made soup with lentils.")
    assert memory.store.current_open_box(CONV).id == open_box.id
    memory.add(msgs[7:], seal=True)
    assert {b.status for b in memory.boxes()} == {"extracted"}
    texts = [m.text for b in memory.boxes() for m in b.messages]
    assert "I made soup with lentils." in texts and "I ran ten kilometres on Sunday morning." in texts


# ---- delete, delete_all, history -------------------------------------------------------------------------------------
def test_delete_is_forget_and_history_keeps_ids_not_text(memory):
    msgs = demo()
    secret = dataclasses.replace(msgs[2], text=f"Never. I booked a {MARKER} coach to plan my training.")
    memory.add(msgs[:2] + [secret] + msgs[3:], seal=True)
    memory.search(f"Who booked the {MARKER} coach?")
    box = box_of(memory, CONV, secret.message_id)
    assert files_holding(memory.path, WORD)

    n = memory.delete(CONV, [secret.message_id])

    assert n["messages"] == 1 and n["scrubbed"] == 1
    assert files_holding(memory.path, WORD) == []
    with pytest.raises(NotFound):
        memory.get((CONV, secret.message_id))
    changes = memory.history((CONV, secret.message_id))  # the message is gone, its history stays
    assert [c.event for c in changes] == ["add", "delete"] and all(UTC.match(c.at) for c in changes)
    assert changes[0].at <= changes[1].at and changes[1].detail == {}
    assert memory.history(box.id)[-1].event == "invalidate" and memory.history(box.id)[-1].detail == {"cause": "delete"}
    with pytest.raises(InputError, match="message ids must be a list of strings"):
        memory.delete(CONV, secret.message_id)
    with pytest.raises(NotFound, match="nothing forgotten"):
        memory.delete(CONV, ["s1-1", "nope"])
    with pytest.raises(NotFound, match=r"no box 99999"):
        memory.history(99999)


def test_delete_all_by_conversation_or_by_user(two):
    before = len(two.store.messages(COPY))
    n = two.delete_all(user_id="maya")
    assert n["messages"] == len(demo()) and two.store.conversations() == [COPY]
    assert len(two.store.messages(COPY)) == before and two.search("Pepper the cat", k=3)
    assert [c.event for c in two.history((CONV, "s1-1"))] == ["add", "delete"]
    with pytest.raises(NotFound, match="no message with user_id 'maya' in this memory; nothing deleted"):
        two.delete_all(user_id="maya")
    with pytest.raises(InputError, match="give exactly one of conversation_id, user_id, agent_id"):
        two.delete_all(conversation_id=COPY, user_id="ana")
    with pytest.raises(InputError, match="got none"):
        two.delete_all()
    assert two.delete_all(COPY)["messages"] == before and two.store.conversations() == []


def test_history_of_a_box_through_its_life(memory):
    memory.add(demo()[:12], seal=True)
    box = memory.boxes(CONV)[0]
    changes = memory.history(box.id)
    assert [c.event for c in changes][:3] == ["add", "seal", "extract"]
    assert changes[2].detail == {"events": len(box.events)} and {c.box_id for c in changes} == {box.id}
    assert [c.at for c in changes] == sorted(c.at for c in changes)
    ids = [m.message_id for m in box.messages]
    memory.delete(CONV, ids)
    assert memory.history(box.id)[-1].event == "delete"
    with pytest.raises(NotFound):
        memory.get(box.id)
    with pytest.raises(InputError):
        memory.history([CONV, "s1-1"])


# ---- reset -----------------------------------------------------------------------------------------------------------
def test_reset_empties_the_memory_and_leaves_no_text_on_disk(tmp_path, cfg, two):
    two.add([Message("z", "z1", "Ann", f"I booked the {MARKER} tour."),
             Message("z", "z2", "Bob", f"The {MARKER} tour leaves at noon.")], seal=True)
    two.answer(f"When does the {MARKER} tour leave?", "z")
    assert files_holding(two.path, WORD)

    n = two.reset()

    assert n["messages"] == 2 * len(demo()) + 2 and n["scrubbed"] == 1
    assert files_holding(two.path, WORD) == [] and files_holding(two.path, b"Pepper") == []
    db = two.store.db
    for table in ("messages", "boxes", "events", "traces", "trace_events", "history", "llm_usage", "embeddings"):
        assert db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0, table
    assert {r[0] for r in db.execute("SELECT key FROM meta")} == {"schema_version", "schema_version.membox",
                                                                   "embedder", "systems"}
    assert two.search("Pepper", k=3) == [] and two.reset()["messages"] == 0
    two.close()
    other = dataclasses.replace(cfg)
    other.loom = dataclasses.replace(cfg.loom, threshold=0.2)  # an emptied memory may be built with other settings
    with Memory(two.path, other, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        mem.add(demo()[:6], seal=True)
        assert mem.boxes()


def test_writes_take_the_write_lock(two):
    with WriteLock(two.path, "another writer"):
        for call in (lambda: two.update(CONV, "s1-1", "x y z"), lambda: two.delete(CONV, ["s1-1"]),
                     lambda: two.delete_all(user_id="ana"), two.reset):
            with pytest.raises(StoreBusy, match=r"in use by process \d+ \(another writer"):
                call()
    assert len(two.store.messages(CONV)) == len(demo())


# ---- the schema migration --------------------------------------------------------------------------------------------
def make_schema_1(path) -> None:
    """Turn a store into one as schema 1 left it: no tag columns, no history table, version 1."""
    db = sqlite3.connect(path)
    for stmt in ("DROP INDEX messages_user", "DROP INDEX messages_agent", "DROP TABLE history",
                 "ALTER TABLE messages DROP COLUMN user_id", "ALTER TABLE messages DROP COLUMN agent_id",
                 "ALTER TABLE messages DROP COLUMN metadata", "ALTER TABLE llm_usage DROP COLUMN cached_tokens",
                 "UPDATE meta SET value='1' WHERE key='schema_version'"):
        db.execute(stmt)
    db.commit()
    db.close()


def columns(path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {r[1] for r in db.execute("PRAGMA table_info(messages)")}
    finally:
        db.close()


def test_a_schema_1_store_opens_and_migrates(tmp_path, cfg):
    folder = tmp_path / "old"
    with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        mem.add(demo()[:12], seal=True)
        boxes = mem.boxes()
    make_schema_1(folder / "memory.db")
    assert "metadata" not in columns(folder / "memory.db")

    with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:  # migrated on open
        assert mem.store.get_meta("schema_version") == str(SCHEMA_VERSION) == "5"
        assert "read_tokens" not in mem.store.usage_by_stage()["extract"]  # old rows did not say
        assert mem.boxes() == boxes and mem.get((CONV, "s1-1")).metadata == {}
        assert mem.history((CONV, "s1-1")) == []  # a record's history starts with the migration
        mem.add(demo()[12:14], seal=True, user_id="maya", metadata={"late": True})
        assert mem.get((CONV, "s1-13")).metadata == {"late": True}
        assert [c.event for c in mem.history((CONV, "s1-13"))] == ["add"]
    assert {"user_id", "agent_id", "metadata"} <= columns(folder / "memory.db")
    again = Store(folder / "memory.db")  # opening again changes nothing (idempotent)
    try:
        assert again.get_meta("schema_version") == "5" and len(again.messages(CONV)) == 14
    finally:
        again.close()
