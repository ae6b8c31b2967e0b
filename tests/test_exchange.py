"""Export and import (membox_local/exchange.py, `membox export`, `membox import`): a memory exported and imported
into an empty folder answers the same questions with the same contexts; a file is checked in full before anything
is written, and one that does not fit is refused in one line. Through the deterministic doubles."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import stat

import pytest

from membox_local.cli import main
from membox_local.exchange import VERSION, export_memory, export_to_file, import_export, read_export
from membox_local.ingest import InputError, load_jsonl
from membox_local.memory import Memory
from membox_local.records import Message
from membox_local.store import StoreError
from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import DEMO
from test_concurrency import config_file

CONV = "maya-tom"
QUESTIONS = ("Which race did Maya sign up for?", "What is the name of Tom's cat?", "What does Tom bake at work?",
             "What did the physio say about the knee?")
MODES = ("compact", "trace", "box-hits", "box-hits-trace", "turn-rag", "chunk-rag", "full-context")


def open_memory(path, cfg) -> Memory:
    return Memory(path, cfg, backend=FakeBackend(), embedder=FakeEmbedder())


@pytest.fixture
def source(memory):
    """A memory with all there is to carry: extracted boxes, events and traces, tags and metadata, a second
    conversation whose last box is still open and a message stored but not filed yet, answer usage."""
    memory.add(load_jsonl(DEMO), seal=True, user_id="maya", metadata={"source": "demo", "n": [1, {"x": None}]})
    other = [Message("pia", f"p{i}", "Pia" if i % 2 == 0 else "Leo", text, "1", "1 May 2024") for i, text in
             enumerate(["I started pottery classes on Monday.", "Pottery sounds relaxing, what did you make?",
                        "I made a bowl, a bit wonky.", "Wonky bowls are the best bowls."])]
    memory.add(other, agent_id="bot")  # the last box stays open
    memory.store.add_messages([Message("pia", "p4", "Pia", "I also adopted a hamster.", "1", "1 May 2024")])
    memory.answer(QUESTIONS[0], CONV)
    memory.update(CONV, "s1-5", "Four: two easy runs, one tempo session and a long run on Sundays.")
    memory.seal(CONV)
    return memory


def exported(store) -> str:
    out = io.StringIO()
    export_memory(store, out)
    return out.getvalue()


def contexts(mem: Memory) -> dict:
    got = {}
    for conv in (CONV, "pia"):
        for q in QUESTIONS:
            for mode in MODES:
                ctx = mem.context(q, conv, mode=mode)
                got[conv, q, mode] = (ctx.text, ctx.box_ids, ctx.message_ids, ctx.event_ids)
    return got


def test_an_imported_memory_answers_with_the_same_contexts(tmp_path, cfg, source):
    path = tmp_path / "memory.jsonl"
    counts = export_to_file(source.store, path)
    assert counts == {"conversations": 2, "messages": 45, "boxes": len(source.boxes()),
                      "traces": len(source.store.traces())}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and not list(tmp_path.glob(".*.tmp"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["format"] == "membox_local export" and lines[0]["version"] == VERSION
    assert lines[0]["embedder"] == "all-minilm-l6-v2" and lines[0]["llm"] == source.config.llm.model
    assert lines[0]["build_settings"] == json.loads(source.store.get_meta("build_settings"))
    assert [r["type"] for r in lines[1:] if r["conversation_id"] == CONV][:1] == ["message"]

    with open_memory(tmp_path / "copy", cfg) as copy:
        assert import_export(copy, read_export(path)) == counts
        assert copy.boxes() == source.boxes()
        assert copy.store.traces() == source.store.traces()
        assert copy.get_all(kind="messages", limit=1000) == source.get_all(kind="messages", limit=1000)
        assert copy.get(("pia", "p4")).text == "I also adopted a hamster." and copy.store.pending_messages("pia")
        # the vector indexes are derived, and built in the order boxes came (the source's box 3, extracted again
        # after its update, came last): boxes of equal similarity at the k-th place are cut by the graph's shape.
        # Rebuilt from its store, as the copy's was built from the file, the source's cuts them the same way.
        source.drop_indexes()
        assert contexts(copy) == contexts(source)
        assert [(b.id, s) for b, s in copy.search(QUESTIONS[1], k=5, user_id="maya")] == \
            [(b.id, s) for b, s in source.search(QUESTIONS[1], k=5, user_id="maya")]
        assert exported(copy.store) == exported(source.store)  # exported again: the same file
        assert [c.event for c in copy.history((CONV, "s1-1"))] == ["add"]
        assert copy.history((CONV, "s1-1"))[0].detail == {"via": "import"}
        copy.add([], seal=True)  # the imported memory builds on: its pending message is filed, its open box sealed
        assert {b.status for b in copy.boxes()} == {"extracted"}
        assert "I also adopted a hamster." in [m.text for b in copy.boxes("pia") for m in b.messages]
        box = next(b for b in copy.boxes(CONV) if b.messages[0].message_id == "s1-1")
        copy.update(CONV, "s1-2", "No way! Have you ever run a half marathon before?")
        copy.seal(CONV)
        assert [c.event for c in copy.history(box.id)] == ["add", "invalidate", "re-extract", "weave"]


def test_the_command_line_exports_and_imports(tmp_path, cfg, source, capsys):
    cfg_path = config_file(tmp_path)  # the fixture's config as a file, for --config
    folder = source.path
    want = exported(source.store)
    boxes, traces = len(source.boxes()), len(source.store.traces())
    source.close()

    assert main(["export", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert out == want and err.strip() == \
        f"{folder}: exported 45 message(s), {boxes} box(es), {traces} trace(s) of 2 conversation(s)"
    assert main(["export", str(folder), "-o", str(tmp_path / "m.jsonl")]) == 0
    assert (tmp_path / "m.jsonl").read_text() == want
    capsys.readouterr()

    # without --config the import opens the new memory with the config the file carries: the same file back
    assert main(["import", str(tmp_path / "copy"), str(tmp_path / "m.jsonl")]) == 0
    assert "imported 45 message(s)" in capsys.readouterr().err
    with open_memory(tmp_path / "copy", cfg) as copy:
        assert exported(copy.store) == want
    # with --config, that config becomes the memory's own: only the header's config differs
    assert main(["import", str(tmp_path / "copy2"), str(tmp_path / "m.jsonl"), "--config", str(cfg_path)]) == 0
    with open_memory(tmp_path / "copy2", cfg) as copy:
        got = exported(copy.store).splitlines()
    header, header_want = json.loads(got[0]), json.loads(want.splitlines()[0])
    # the config file by its name: an export names no path of the machine that wrote it
    assert header["config"]["source"] == cfg_path.name and header_want["config"]["source"] == "cpu.toml"
    assert str(tmp_path) not in "\n".join(got)
    for h in (header, header_want):
        h["config"].pop("source"), h["config"].pop("name")
    assert header == header_want and got[1:] == want.splitlines()[1:]
    capsys.readouterr()
    assert main(["import", str(tmp_path / "copy"), str(tmp_path / "m.jsonl"), "--config", str(cfg_path),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # --quiet: no progress bar, the error line alone
    assert len(err) == 1 and "is not empty (2 conversation(s))" in err[0]
    assert main(["export", str(tmp_path / "nothing")]) == 2
    assert "no memory here" in capsys.readouterr().err


def corrupt(path, lineno: int, change) -> None:
    """Rewrite line `lineno` (1-based) of a file with `change(record)`."""
    lines = path.read_text().splitlines()
    rec = json.loads(lines[lineno - 1])
    change(rec)
    lines[lineno - 1] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


def line_of(path, test) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if test(json.loads(line)))


@pytest.mark.parametrize("what,change,error", [
    ("a message's seq", lambda r: r.update(seq="7"), "message field 'seq' must be an integer of at least 0"),
    ("a message field", lambda r: r.update(mood="glad"), "message has unknown fields mood"),
    ("a message's text", lambda r: r.update(text=" "), "message: field 'text' is missing or empty"),
    ("a message's metadata", lambda r: r.update(metadata=[1]), "metadata must be a JSON object"),
    ("a message's box", lambda r: r.update(box_id=99999), "is filed in box 99999, which conversation"),
    ("a filing", lambda r: r.update(processed=0), "'processed' is 0 but 'box_id' is"),
    ("a line type", lambda r: r.update(type="note"), "expected an object with \"type\" one of message, box, trace"),
    ("a box's status", lambda r: r.update(status="done"), "box field 'status' must be one of open, sealed"),
    ("an event", lambda r: r["events"][0].update(grounding=2), "event 0 field 'grounding' must be a number from 0"),
    ("a box id", lambda r: r.update(id=1), "box id 1 again (first on line"),
    ("a trace's events", lambda r: r.update(events=[99999]), "holds events [99999] that conversation"),
])
def test_a_bad_line_is_named_and_nothing_is_written(tmp_path, cfg, source, what, change, error):
    path = tmp_path / "m.jsonl"
    export_to_file(source.store, path)
    kind = "message" if "message" in what or "filing" in what or "line type" in what else \
        "trace" if "trace" in what else "box"
    n = line_of(path, lambda r: r.get("type") == kind and (kind != "box" or r["id"] != 1 and r["events"])
                and (kind != "message" or r["box_id"] is not None))
    assert n > 1
    corrupt(path, n, change)
    with pytest.raises(InputError, match=rf"m\.jsonl line {n}: .*{re.escape(error)}") as exc:
        read_export(path)
    assert "\n" not in str(exc.value)
    assert main(["import", str(tmp_path / "new"), str(path)]) == 2  # refused before the folder is made
    assert not (tmp_path / "new").exists()


def test_the_header_carries_the_config_and_version_1_files_still_read(tmp_path, source):
    from membox_local.exchange import export_config

    path = tmp_path / "m.jsonl"
    export_to_file(source.store, path)
    cfg = export_config(read_export(path))
    assert cfg is not None and cfg.source == "cpu.toml"  # the config file by its name, not its path
    assert cfg.to_dict() == {**source.config.to_dict(), "source": "cpu.toml"}  # every key, as the memory stored it
    corrupt(path, 1, lambda r: r["config"]["loom"].update(no_such_key=1))
    with pytest.raises(InputError, match=r"m\.jsonl line 1: header field 'config'.*no_such_key"):
        read_export(path)
    corrupt(path, 1, lambda r: (r.pop("config"), r.update(version=1)))  # a file written before version 2
    assert export_config(read_export(path)) is None
    corrupt(path, 1, lambda r: r.update(config=None))  # version 1 has no such field
    with pytest.raises(InputError, match="unknown fields config"):
        read_export(path)


def test_cut_files_and_other_formats_are_refused(tmp_path, source):
    path = tmp_path / "m.jsonl"
    export_to_file(source.store, path)
    lines = path.read_text().splitlines()
    (tmp_path / "cut.jsonl").write_text("\n".join(lines[:-3]) + "\n")
    with pytest.raises(InputError, match=r"cut.jsonl: .* traces in the header, .* in the file \(a file cut short"):
        read_export(tmp_path / "cut.jsonl")
    (tmp_path / "msgs.jsonl").write_text(DEMO.read_text())
    with pytest.raises(InputError, match=r"msgs.jsonl line 1: not a membox_local export"):
        read_export(tmp_path / "msgs.jsonl")
    corrupt(path, 1, lambda r: r.update(version=VERSION + 1))
    with pytest.raises(InputError, match=rf"line 1: format version {VERSION + 1} is newer than this membox_local"):
        read_export(path)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(InputError, match="empty, not a membox_local export"):
        read_export(tmp_path / "empty.jsonl")
    with pytest.raises(InputError, match="cannot read it"):
        read_export(tmp_path / "missing.jsonl")


def test_import_refuses_a_store_that_is_not_empty_or_a_config_that_does_not_fit(tmp_path, cfg, source):
    path = tmp_path / "m.jsonl"
    export_to_file(source.store, path)
    export = read_export(path)
    with pytest.raises(StoreError, match="is not empty"):
        import_export(source, export)
    assert len(source.store.messages(CONV)) == 40

    other = dataclasses.replace(cfg)
    other.loom = dataclasses.replace(cfg.loom, threshold=0.4)
    with open_memory(tmp_path / "a", other) as mem:
        with pytest.raises(StoreError, match=r"built with other settings than the config .* \(loom.threshold: 0.15 "
                                             r"then, 0.4 now\); import it with the config it was built with"):
            import_export(mem, export)
        assert mem.store.message_rows() == [] and mem.store.get_meta("build_settings") is None
    export.header = {**export.header, "embedder": "another-embedder"}
    with open_memory(tmp_path / "b", cfg) as mem:
        with pytest.raises(StoreError, match="was embedded with 'another-embedder'"):
            import_export(mem, export)

    # an emptied memory (Memory.reset) takes an import
    source.reset()
    assert import_export(source, read_export(path))["messages"] == 45
    assert exported(source.store) == path.read_text()


def test_nothing_built_is_nothing_to_export(tmp_path, cfg):
    with open_memory(tmp_path / "m", cfg) as mem:
        with pytest.raises(StoreError, match="nothing was built in this memory"):
            export_memory(mem.store, io.StringIO())
