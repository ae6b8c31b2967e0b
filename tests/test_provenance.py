"""Records a person can trust (issue 50): each event carries the messages it was read from (Event.sources) and each
box what the code dropped or corrected in its record (Box.dropped), everywhere a record goes: the Python verbs,
`membox show`, `membox view`, export and import (REST and MCP: tests/test_server.py). A store or an export made
before events kept their sources still opens and imports, its events with no sources, and `show` says how to get
them. Through the deterministic doubles; events with sources are written with Store.save_extraction, as an
extraction that keeps them writes them."""
from __future__ import annotations

import dataclasses
import json
import re
import sqlite3

import pytest

from membox_local.cli import main
from membox_local.exchange import export_to_file, import_export, read_export
from membox_local.ingest import InputError, load_jsonl
from membox_local.memory import Memory
from membox_local.records import Event
from membox_local.show import dropped_text, format_boxes, sources_text
from membox_local.testing import FakeBackend, FakeEmbedder
from membox_local.view import collect, render_html, write_page

import browser
import test_view
from conftest import DEMO
from test_view import Elements, problems, visible

chrome = test_view.chrome  # the headless Chromium fixture

CONV = "maya-tom"
# what the code dropped or corrected in the first box's record (Box.dropped)
DROPPED = {"question": 1, "unsupported": 2, "subject corrected": 1, "topic placeholder": 1}


def open_memory(path, cfg) -> Memory:
    return Memory(path, cfg, backend=FakeBackend(), embedder=FakeEmbedder())


def give_sources(store, boxes) -> None:
    """Record each box again as an extraction that keeps sources writes it: its events each citing the box's
    messages (the first: its first two; the others: the last one), the first box with DROPPED."""
    for n, b in enumerate(boxes):
        ids = [m.message_id for m in b.messages]
        events = [Event(0, b.id, b.conversation_id, f"event {i} of box {b.id}", b.session_date, 1.0,
                        ids[:2] if i == 0 else ids[-1:]) for i in range(2)]
        store.save_extraction(b.id, b.topic, b.keywords, events, dropped=DROPPED if n == 0 else {})


@pytest.fixture
def cited(tmp_path, cfg):
    """The demo conversation filed by the doubles (no traces: a record is written again here), every box's
    events with their sources."""
    cfg = dataclasses.replace(cfg, weaver=dataclasses.replace(cfg.weaver, enabled=False))
    mem = open_memory(tmp_path / "mem", cfg)
    mem.add(load_jsonl(DEMO), seal=True)
    give_sources(mem.store, mem.boxes(CONV))
    yield mem
    mem.close()


def make_schema_2(path) -> None:
    """Turn a store into one as membox schema 2 left it: no events.sources, no boxes.dropped, version 2."""
    db = sqlite3.connect(path)
    for stmt in ("ALTER TABLE events DROP COLUMN sources", "ALTER TABLE boxes DROP COLUMN dropped",
                 "UPDATE meta SET value='2' WHERE key='schema_version.membox'"):
        db.execute(stmt)
    db.commit()
    db.close()


# ---- the Python verbs ------------------------------------------------------------------------------------------------
def test_the_verbs_return_sources_and_dropped(cited):
    first, second = cited.boxes(CONV)[:2]
    box = cited.get(first.id)
    assert box.dropped == DROPPED and second.dropped == {}
    assert [e.sources for e in box.events] == [[m.message_id for m in first.messages[:2]],
                                               [first.messages[-1].message_id]]
    page = cited.get_all(CONV, limit=500)
    assert page == cited.boxes(CONV) and all(e.sources for b in page for e in b.events)


# ---- a store of the schema before ------------------------------------------------------------------------------------
def test_a_store_of_schema_2_opens_with_no_sources_and_show_says_so(tmp_path, cfg, capsys):
    with open_memory(tmp_path / "old", cfg) as mem:
        mem.add(load_jsonl(DEMO)[:12], seal=True)
        n_events = len(mem.store.events())
    make_schema_2(tmp_path / "old" / "memory.db")
    assert main(["show", str(tmp_path / "old")]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert notes == [f"note: the events of conversation {CONV} were extracted before events kept the messages they "
                     f"were read from; build the memory again from its data into a new folder (membox build DATA "
                     f"--store NEW_DIR) to give them their sources"]
    assert out.splitlines()[-1] == notes[0]  # said once, after the boxes
    events = [line for line in out.splitlines() if line.startswith("  - ")]
    assert events and not [line for line in events if line.endswith("]")]  # no sources shown, none invented
    assert "dropped:" not in out
    with open_memory(tmp_path / "old", cfg) as mem:
        events = mem.store.events()
        assert len(events) == n_events > 0 and {e.sources for e in events} == {None}
        assert {json.dumps(b.dropped) for b in mem.boxes()} == {"{}"}
        assert mem.store.get_meta("schema_version.membox") == "4"


# ---- membox show -----------------------------------------------------------------------------------------------------
def test_show_prints_each_events_sources_and_what_was_dropped(cited, capsys):
    first = cited.boxes(CONV)[0]
    ids = [m.message_id for m in first.messages]
    cited.close()
    assert main(["show", str(cited.path), "--conversation", CONV]) == 0
    out = capsys.readouterr().out.splitlines()
    head = out.index(next(line for line in out if line.startswith(f"box {first.id} ")))
    assert "  dropped: 1 question, 2 unsupported, the topic (placeholder); corrected: 1 subject" in out[head:head + 6]
    assert f"  - event 0 of box {first.id}  [{ids[0]}, {ids[1]}]" in out
    assert f"  - event 1 of box {first.id}  [{ids[-1]}]" in out
    assert not [line for line in out if line.startswith("note:")]  # every event has its sources
    assert sum(line.startswith("  dropped:") for line in out) == 1  # only the first box dropped anything


def test_the_printouts_of_sources_and_dropped():
    assert sources_text(None) == "" and sources_text([]) == "[no source]"
    assert sources_text(["D1:3"]) == "[D1:3]" and sources_text(["a\x1b[2J"]) == "[a\\x1b[2J]"  # escaped
    assert sources_text([f"m{i}" for i in range(8)]) == "[m0, m1, m2, m3, m4, m5, +2]"
    assert dropped_text({}) == "" and dropped_text({"question": 0}) == ""
    assert dropped_text({"subject corrected": 2}) == "corrected: 2 subject"
    assert dropped_text(DROPPED) == "dropped: 1 question, 2 unsupported, the topic (placeholder); corrected: 1 subject"


def test_show_names_each_conversation_with_events_without_sources_once(cited):
    first, second = cited.boxes(CONV)[:2]
    for b in (first, second):  # two boxes recorded as before sources were kept
        cited.store.save_extraction(b.id, b.topic, b.keywords, [Event(0, b.id, CONV, "an older event", "", 1.0)])
    lines = list(format_boxes(cited.store))
    assert sum(line.startswith("note:") for line in lines) == 1
    assert lines[-1].startswith(f"note: the events of conversation {CONV} were extracted before")
    assert "  - an older event" in lines  # no sources shown, none invented


# ---- export and import -----------------------------------------------------------------------------------------------
def test_export_and_import_keep_sources_and_dropped(tmp_path, cfg, cited):
    path = tmp_path / "m.jsonl"
    export_to_file(cited.store, path)
    boxes = [json.loads(line) for line in path.read_text().splitlines()[1:] if '"type": "box"' in line]
    first = cited.boxes(CONV)[0]
    line = next(b for b in boxes if b["id"] == first.id)
    assert line["dropped"] == DROPPED
    assert line["events"][0]["sources"] == [m.message_id for m in first.messages[:2]]
    with open_memory(tmp_path / "copy", cited.config) as copy:
        import_export(copy, read_export(path))
        assert copy.boxes() == cited.boxes()  # Box equality: its dropped and every event's sources
        export_to_file(copy.store, tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_text() == path.read_text()


def rewrite(path, change) -> None:
    """Rewrite every line of an export with `change(record)`."""
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in recs:
        change(rec)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def older_export(rec: dict) -> None:
    """An export as version 2 wrote it: no sources, nothing dropped."""
    if "format" in rec:
        rec["version"] = 2
    if rec.get("type") == "box":
        rec.pop("dropped")
        for e in rec["events"]:
            e.pop("sources")


def test_an_export_written_before_sources_imports_with_none(tmp_path, cited):
    path = tmp_path / "m.jsonl"
    export_to_file(cited.store, path)
    rewrite(path, older_export)
    with open_memory(tmp_path / "copy", cited.config) as copy:
        import_export(copy, read_export(path))
        assert {e.sources for e in copy.store.events()} == {None}
        assert all(b.dropped == {} for b in copy.boxes())
        assert [e.text for e in copy.store.events()] == [e.text for e in cited.store.events()]


@pytest.mark.parametrize("change,error", [
    (lambda b: b["events"][0].update(sources="s1-1"), "field 'sources' must be a list of message ids"),
    (lambda b: b["events"][0].update(sources=["s1-1", 3]), "field 'sources' must be a list of message ids"),
    (lambda b: b["events"][0].update(sources=[""]), "field 'sources' must be a list of message ids"),
    (lambda b: b["events"][0].pop("sources"), "event 0 lacks sources"),
    (lambda b: b.update(dropped={"question": -1}), "box field 'dropped' must be an object of reason -> count"),
    (lambda b: b.update(dropped={"question": True}), "box field 'dropped' must be an object of reason -> count"),
    (lambda b: b.update(dropped=["question"]), "box field 'dropped' must be an object of reason -> count"),
    (lambda b: b.pop("dropped"), "box lacks dropped"),
])
def test_a_bad_source_or_dropped_is_one_line_and_nothing_is_written(tmp_path, cited, change, error):
    path = tmp_path / "m.jsonl"
    export_to_file(cited.store, path)
    first = cited.boxes(CONV)[0].id
    rewrite(path, lambda r: change(r) if r.get("type") == "box" and r["id"] == first else None)
    lineno = next(n for n, line in enumerate(path.read_text().splitlines(), 1)
                  if json.loads(line).get("type") == "box" and json.loads(line)["id"] == first)
    with pytest.raises(InputError, match=rf"m\.jsonl line {lineno}: .*{re.escape(error)}") as exc:
        read_export(path)
    assert "\n" not in str(exc.value)
    assert main(["import", str(tmp_path / "new"), str(path)]) == 2
    assert not (tmp_path / "new").exists()


# ---- membox view -----------------------------------------------------------------------------------------------------
def test_the_page_links_each_event_to_the_messages_it_was_read_from(cited):
    first = cited.boxes(CONV)[0]
    data = collect(cited.store)
    page = render_html(data)
    box = next(b for b in data["conversations"][0]["boxes"] if b["id"] == first.id)
    assert box["dropped"] == DROPPED
    assert box["events"][0]["sources"] == [{"id": m.message_id, "box": first.id, "at": i}
                                           for i, m in enumerate(first.messages[:2])]
    chips = Elements(page).with_class("span", "source")
    mine = [c for c in chips if c.get("data-cite-box") == str(first.id)]
    assert [c["data-cite"] for c in mine] == [f"msg-{first.id}-0", f"msg-{first.id}-1",
                                              f"msg-{first.id}-{len(first.messages) - 1}"]
    assert "dropped: 1 question, 2 unsupported, the topic (placeholder); corrected: 1 subject" in page
    assert "extracted before events kept" not in page


def test_the_page_says_when_events_have_no_sources(cited):
    b = cited.boxes(CONV)[0]
    cited.store.save_extraction(b.id, b.topic, b.keywords, [Event(0, b.id, CONV, "an older event", "", 1.0)])
    page = render_html(collect(cited.store))
    assert page.count("extracted before events kept the messages they were read from") == 1


def test_a_source_opens_its_message_in_chromium(cited, tmp_path, chrome):
    first = cited.boxes(CONV)[1]
    out = write_page(tmp_path / "memory.html", render_html(collect(cited.store)))
    chrome.get(browser.file_url(out))
    chip = chrome.find_element("css selector", f'.source[data-cite="msg-{first.id}-1"]')
    chip.click()
    band = chrome.find_element("css selector", f'article.box[data-box="{first.id}"]')
    assert "selected" in band.get_attribute("class")
    shown = visible(chrome, ".detail-body ol.messages li.cited")
    assert [li.get_attribute("id") for li in shown] == [f"msg-{first.id}-1"]
    assert first.messages[1].text in shown[0].text
    assert problems(chrome) == []


# ---- sharded builds --------------------------------------------------------------------------------------------------
def test_a_merge_of_shards_keeps_sources_and_dropped(tmp_path, cfg):
    """Sources are message ids, not row ids: a merge (execution/merge.py) shifts the row ids and keeps them as they
    are; a shard of schema 2 merges with its events' sources NULL."""
    from membox_local.execution.merge import merge_stores

    cfg = dataclasses.replace(cfg, weaver=dataclasses.replace(cfg.weaver, enabled=False))
    shards, want = [], {}
    for n, conv in enumerate(("a", "b", "c")):
        with open_memory(tmp_path / f"s{n}", cfg) as mem:
            mem.add([dataclasses.replace(m, conversation_id=conv) for m in load_jsonl(DEMO)[:8]], seal=True)
            if conv != "c":
                give_sources(mem.store, mem.boxes(conv))
            want[conv] = [(b.dropped, [(e.text, e.sources) for e in b.events]) for b in mem.boxes(conv)]
        shards.append(tmp_path / f"s{n}" / "memory.db")
    make_schema_2(shards[-1])
    want["c"] = [({}, [(text, None) for text, _ in events]) for _, events in want["c"]]
    (tmp_path / "merged").mkdir()
    merge_stores(tmp_path / "merged" / "memory.db", shards)
    with open_memory(tmp_path / "merged", cfg) as merged:
        for conv in want:
            assert [(b.dropped, [(e.text, e.sources) for e in b.events]) for b in merged.boxes(conv)] == want[conv]
        assert merged.boxes("b")[0].dropped == DROPPED
