"""The command line as a newcomer meets it (issue 26, items 5-7): help for every option, `--version`, a build that
ends with a summary and the next command, a memory that remembers its config, messages in the OpenAI / mem0 chat
shape, progress that says what the model is doing, and the README's Python snippet run as written. Through the
test doubles (the models replaced as tests/test_offline.py does)."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from membox_local import backends, continuity, memory
from membox_local.backends.base import JsonRequest, LabelRequest, Prompt
from membox_local.cli import build_parser, main
from membox_local.config import DEFAULT_CONFIG, load_config
from membox_local.execution.progress import describe_requests
from membox_local.ingest import InputError, load_jsonl, load_messages
from membox_local.memory import Memory, stored_config
from membox_local.requests import EmbedRequest
from membox_local.retrieval import RETRIEVERS
from membox_local.testing import FakeBackend, FakeContinuityScorer, FakeEmbedder

from conftest import DEMO, REPO
from test_batch import weaving_backend

# a quick build: the cosine judge the doubles are calibrated for (conftest.cfg)
FAST = 'extends = "cpu"\n[loom]\njudge = "embedding"\nthreshold = 0.15\n'


@pytest.fixture
def doubles(monkeypatch):
    """Every model the command line makes is a test double; no model file is looked for."""
    monkeypatch.setattr(backends, "make_backend", lambda llm: FakeBackend())
    monkeypatch.setattr(memory, "make_embedder", lambda emb: FakeEmbedder())
    monkeypatch.setattr(memory, "preflight_models", lambda cfg, **kw: None)
    monkeypatch.setitem(continuity.MODELS, "scorer", FakeContinuityScorer)  # the default's cross-encoder


def config(tmp_path: Path, text: str = FAST, name: str = "fast") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error: ")]


# ---- help, --version, --mode ------------------------------------------------------------------------------------
def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("membox",)):
    """(command path, action) for every action of every (sub)command; subcommands as their choice pseudo-actions."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield path, choice
            for name, sub in action.choices.items():
                yield from walk(sub, path + (name,))
        else:
            yield path, action


def test_every_option_of_every_command_has_help():
    missing = [f"{' '.join(path)} {'/'.join(a.option_strings) or a.dest}" for path, a in walk(build_parser())
               if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()]
    assert not missing, f"options without help text: {missing}"


def test_ask_mode_lists_the_retrieval_modes(capsys):
    ask = build_parser()._subparsers._group_actions[0].choices["ask"]
    mode = next(a for a in ask._actions if "--mode" in a.option_strings)
    assert list(mode.choices) == sorted(RETRIEVERS)
    assert all(m in mode.help for m in RETRIEVERS)
    with pytest.raises(SystemExit) as exc:
        main(["ask", "somewhere", "q?", "--mode", "nonsense"])
    assert exc.value.code == 2 and "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_version_is_the_package_version(capsys):
    import tomllib

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"membox {version}"


# ---- build ----------------------------------------------------------------------------------------------------
def test_conversations_not_in_a_jsonl_file_are_an_error(tmp_path, doubles, capsys):
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--conversations", "maya-tom", "nobody"]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {DEMO}: no conversation ['nobody']; the file has ['maya-tom']"]
    assert not store.exists()  # refused before anything was written
    with pytest.raises(InputError, match=r"no conversation \['nobody'\]"):
        load_messages(DEMO, ["nobody"])


def test_build_ends_with_a_summary_and_the_next_command(tmp_path, doubles, capsys):
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(config(tmp_path))]) == 0
    out, err = capsys.readouterr()
    first, nxt = out.strip().splitlines()
    assert re.fullmatch(rf"{re.escape(str(store))}: 1 conversation\(s\); 40 messages filed in \d+ boxes \(0 failed\), "
                        r"\d+ traces; this build took \d+\.\d s", first), first
    assert nxt.startswith(f'next: membox ask {store} "your question"')
    assert "40 to file" in err and "build" in err  # the line before the bar, and the bar

    assert main(["build", str(DEMO), "--store", str(store), "--json", "--quiet"]) == 0
    out, err = capsys.readouterr()
    stats = json.loads(out)
    assert stats["messages"] == 40 and stats["failed_boxes"] == 0 and "llm_usage" in stats
    assert err == ""  # --quiet: no bar, no progress line


def test_progress_says_what_the_model_is_doing(tmp_path, cfg):
    said, ticks = [], []
    with Memory(tmp_path / "m", cfg, backend=weaving_backend(), embedder=FakeEmbedder()) as mem:
        assert mem.to_file() == {"membox": 0}
        mem.add(load_jsonl(DEMO), seal=True, progress=ticks.append, describe=said.append)
        boxes = [b.id for b in mem.boxes()]
    assert sum(ticks) == 40
    assert {f"extracting box {b}" for b in boxes} <= set(said)
    assert any(s.startswith("weaving box ") for s in said)


def test_a_batch_of_requests_is_described_in_one_line():
    p = Prompt("s", "u")

    def extraction(box: int) -> JsonRequest:
        return JsonRequest(p, {}, "extract", about=f"box {box}")

    assert describe_requests([extraction(12)]) == "extracting box 12"
    assert describe_requests([extraction(b) for b in (3, 4, 5, 6, 7)]) == "extracting boxes 3, 4, 5 +2 more"
    judge = LabelRequest(p, ("yes", "no"), "judge")
    assert describe_requests([judge, judge, extraction(1), EmbedRequest(("x",))]) == \
        "judging continuity x2, extracting box 1"
    assert describe_requests([EmbedRequest(("x",))]) == ""  # quick: nothing to say
    assert JsonRequest(p, {}, "extract", about="box 1") == JsonRequest(p, {}, "extract")  # not part of the request


def test_an_eventweave_only_memory_counts_its_own_work(tmp_path, doubles, capsys):
    """The "to file" line and the bar ask every memory system (Component.pending), not the box memory's filing."""
    ew = config(tmp_path, FAST + '[memory]\nsystems = ["eventweave"]\n[retrieve]\nmode = "event-graph"\n', "ew")
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(ew)]) == 0
    out, err = capsys.readouterr()
    assert "40 to file" in err and "event graph: 40 turns read (0 failed)" in out
    assert main(["build", str(DEMO), "--store", str(store)]) == 0  # its own config, stored: nothing left
    assert "0 to file" in capsys.readouterr().err
    both = config(tmp_path, FAST + '[memory]\nsystems = ["membox", "eventweave"]\n', "both")
    assert main(["build", str(DEMO), "--store", str(tmp_path / "two"), "--config", str(both)]) == 0
    assert "80 to file (40 membox, 40 eventweave)" in capsys.readouterr().err


# ---- a memory remembers its config ----------------------------------------------------------------------------
def test_a_memory_remembers_the_config_it_was_built_with(tmp_path, doubles, capsys, monkeypatch):
    path = config(tmp_path, FAST + "window = 3\n")  # a build setting other than cpu's
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(path), "--quiet"]) == 0
    capsys.readouterr()
    cfg = stored_config(store)
    assert cfg.name == "fast" and cfg.source == path.name and cfg.loom.window == 3  # the file's name, not its path
    with Memory(store) as mem:  # the Python API opens it with the same
        assert mem.config == cfg

    assert main(["ask", str(store), "What is the name of Tom's cat?"]) == 0  # no --config
    assert "A: " in capsys.readouterr().out
    made = []
    monkeypatch.setattr(backends, "make_backend", lambda llm: made.append(FakeBackend()) or made[-1])
    assert main(["ask", str(store), "What is the name of Tom's cat?", "--today", "2024-06-20"]) == 0
    asked = [user for b in made for stage, user in b.calls if stage == "answer"]
    assert len(asked) == 1 and " days (about 4 months) ago]" in asked[0]  # the date lines say how long before
    capsys.readouterr()
    assert main(["ask", str(store), "Who?", "--today", "someday"]) == 2
    [line] = error_lines(capsys.readouterr().err)
    assert "today: not a date: 'someday'" in line
    assert main(["build", str(DEMO), "--store", str(store)]) == 0  # continued with it, not with cpu
    capsys.readouterr()
    for command in (["show", str(store)], ["export", str(store)], ["view", str(store), "-o", str(tmp_path / "v.html")]):
        assert main(command) == 0, command

    assert main(["ask", str(store), "Who?", "--config", "cpu"]) == 2  # other build settings: one line
    [line] = error_lines(capsys.readouterr().err)
    assert "was built with other settings (loom.judge: 'embedding' then, 'hybrid' now" in line
    assert "use the config it was built with ('fast', stored in the folder: give no --config" in line

    answering = config(tmp_path, path.read_text() + '[answer.llm]\nmodel = "smollm2-135m"\n[retrieve]\nk = 3\n',
                       "answering")  # another answering model, other retrieval: free to change
    assert main(["ask", str(store), "What is the name of Tom's cat?", "--config", str(answering)]) == 0
    assert stored_config(store).name == "fast"  # asking never changes what the memory remembers


def test_a_memory_built_with_the_old_default_keeps_it_and_a_new_one_takes_the_default(tmp_path, doubles, capsys):
    """The CPU default moved from cpu to cpu-ce (DEFAULT_CONFIG): a memory built with cpu goes on with cpu when no
    config is named (build, ask, the Python API); a new memory, given none, is built with cpu-ce."""
    old, new = tmp_path / "old", tmp_path / "new"
    assert main(["build", str(DEMO), "--store", str(old), "--config", "cpu", "--quiet"]) == 0
    assert main(["build", str(DEMO), "--store", str(old), "--quiet"]) == 0  # no --config: its own, nothing refiled
    assert main(["ask", str(old), "What is the name of Tom's cat?"]) == 0
    with Memory(old) as mem:
        assert mem.config.name == "cpu" and mem.config.loom.ce_model != load_config(DEFAULT_CONFIG).loom.ce_model
    assert main(["build", str(DEMO), "--store", str(new), "--quiet"]) == 0
    assert stored_config(new).name == DEFAULT_CONFIG == "cpu-ce"
    capsys.readouterr()
    assert main(["build", str(DEMO), "--store", str(old), "--config", DEFAULT_CONFIG]) == 2  # other build settings
    [line] = error_lines(capsys.readouterr().err)
    assert "was built with other settings" in line and "('cpu', stored in the folder" in line


def test_serve_needs_no_config(tmp_path, doubles):
    from membox_local.server import open_service

    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(config(tmp_path)), "--quiet"]) == 0
    service = open_service(store)
    try:
        assert service.writer.config.name == service.reader.config.name == "fast"
    finally:
        service.close()


def test_import_stores_the_config_and_its_errors_stay_one_line(tmp_path, doubles, capsys):
    path = config(tmp_path)
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(path), "--quiet"]) == 0
    assert main(["export", str(store), "-o", str(tmp_path / "m.jsonl")]) == 0
    assert main(["import", str(tmp_path / "copy"), str(tmp_path / "m.jsonl"), "--config", str(path)]) == 0
    assert "imported 40 message(s)" in capsys.readouterr().err
    assert stored_config(tmp_path / "copy").name == "fast"
    assert main(["import", str(tmp_path / "copy"), str(tmp_path / "m.jsonl"), "--config", str(path)]) == 2
    assert len(error_lines(capsys.readouterr().err)) == 1  # after the bar, one error line


# ---- the OpenAI / mem0 chat shape -----------------------------------------------------------------------------
CHAT = [
    {"conversation_id": "a", "role": "user", "name": "Ann", "content": "I adopted a cat.",
     "timestamp": "2024-03-04T10:15:00Z"},
    {"conversation_id": "a", "role": "assistant", "content": "What is its name?", "timestamp": 1709547300},
    {"conversation_id": "a", "role": "user", "name": "Ann", "content": "I adopted a cat.",
     "timestamp": "2024-03-04T10:15:00Z"},  # said twice: a repeat within one input
    {"conversation_id": "a", "role": "user", "name": "Ann", "content": "Pepper.", "session": "s9",
     "message_id": "own", "metadata": {"source": "app"}},
    {"conversation_id": "a", "role": "user", "content": "Bye", "timestamp": "5 March 2024"},
]


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_chat_shaped_messages_are_read(tmp_path):
    msgs = load_jsonl(write_jsonl(tmp_path / "chat.jsonl", CHAT))
    assert [(m.speaker, m.text, m.session, m.session_date) for m in msgs] == [
        ("Ann", "I adopted a cat.", "2024-03-04", "2024-03-04T10:15:00Z"),
        ("assistant", "What is its name?", "2024-03-04", "2024-03-04T10:15:00Z"),  # seconds since 1970, as UTC
        ("Ann", "I adopted a cat.", "2024-03-04", "2024-03-04T10:15:00Z"),
        ("Ann", "Pepper.", "s9", ""),
        ("user", "Bye", "2024-03-05", "5 March 2024")]
    ids = [m.message_id for m in msgs]
    assert re.fullmatch(r"m-[0-9a-f]{12}", ids[0]) and ids[2] == ids[0] + "-2" and ids[3] == "own"
    assert msgs[3].metadata == {"source": "app"}
    assert [m.message_id for m in load_jsonl(tmp_path / "chat.jsonl")] == ids  # stable


def test_chat_shaped_messages_are_added_once(tmp_path, cfg):
    chat = [{k: v for k, v in r.items() if k != "conversation_id"} for r in CHAT]
    with Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        assert mem.add(chat, conversation_id="a") == 5
        assert mem.add(chat, conversation_id="a") == 0  # the same ids again: idempotent
        assert mem.add(chat[:2], conversation_id="a") == 0
        assert [m.message_id for m in mem.store.messages("a")] == \
            [m.message_id for m in load_jsonl(write_jsonl(tmp_path / "c.jsonl", CHAT))]


@pytest.mark.parametrize("record,error", [
    ({"conversation_id": "a", "content": "x"}, "field 'role' is missing or empty"),
    ({"conversation_id": "a", "role": "user"}, "field 'content' is missing or empty"),
    ({"conversation_id": "a", "role": "user", "content": "  "}, "field 'content' is missing or empty"),
    ({"conversation_id": "a", "role": "user", "content": [{"type": "text", "text": "x"}]},
     "field 'content' is not a string (list; content parts are not read)"),
    ({"conversation_id": "a", "role": 7, "content": "x"}, "field 'role' is not a string (int)"),
    ({"conversation_id": "a", "role": "user", "content": "x", "speaker": "Ann"}, "unknown fields ['speaker']"),
    ({"conversation_id": "a", "role": "user", "content": "x", "name": ""}, "field 'name' must be a non-empty"),
    ({"conversation_id": "a", "role": "user", "content": "x", "timestamp": True}, "field 'timestamp' must be"),
    ({"conversation_id": "a", "role": "user", "content": "x", "timestamp": ""}, "field 'timestamp' must be"),
    ({"conversation_id": "a", "role": "user", "content": "x", "timestamp": 1e300}, "field 'timestamp' must be"),
    ({"conversation_id": "a", "role": "user", "content": "x", "timestamp": float("nan")}, "field 'timestamp' must be"),
    ({"conversation_id": "a", "role": "user", "content": "x", "timestamp": "yesterday"},
     "field 'timestamp': no calendar day in 'yesterday'"),
    ({"conversation_id": "a", "role": "user", "content": "x", "timestamp": "2024-03-04" * 20},
     "field 'timestamp': no calendar day"),
    ({"conversation_id": "a", "role": "user", "content": "x", "timestamp": "\ud800"}, "field 'timestamp'"),
    ({"conversation_id": "a", "role": "\ud800", "content": "x"}, "field 'role' is not valid Unicode"),
    ({"conversation_id": "a", "role": "user", "name": "A\udc80", "content": "x"}, "field 'name' is not valid Unicode"),
    ({"conversation_id": "a", "role": "user", "content": "\udfff"}, "field 'content' is not valid Unicode"),
    ({"role": "user", "content": "x"}, "field 'conversation_id' is missing or empty"),
    ({"conversation_id": "a", "role": "user", "content": "x", "metadata": []}, "metadata must be a JSON object"),
])
def test_bad_chat_shaped_messages_name_the_line_and_field(tmp_path, cfg, record, error):
    path = tmp_path / "bad.jsonl"
    good = {"conversation_id": "a", "message_id": "0", "speaker": "A", "text": "ok"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(record, allow_nan=True) + "\n")
    with pytest.raises(InputError) as exc:
        load_jsonl(path)
    assert str(exc.value).startswith(f"{path} line 2: ") and error in str(exc.value), str(exc.value)
    with Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        with pytest.raises(InputError, match=re.escape(error.split(" in ")[0])):  # the same verdict in add
            mem.add([record])
        assert mem.store.message_rows() == []  # nothing written


def test_a_repeat_and_an_id_given_twice_in_a_file(tmp_path):
    line = {"conversation_id": "a", "role": "user", "content": "ok"}
    msgs = load_jsonl(write_jsonl(tmp_path / "r.jsonl", [line, line, line]))
    base = msgs[0].message_id
    assert [m.message_id for m in msgs] == [base, base + "-2", base + "-3"]
    with pytest.raises(InputError, match=f"line 2: message id {base} appears twice"):
        load_jsonl(write_jsonl(tmp_path / "d.jsonl", [line, dict(line, message_id=base)]))


# ---- the README's Python snippet --------------------------------------------------------------------------------
def readme_python_api_snippet() -> str:
    section = (REPO / "README.md").read_text().split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_python_snippet_runs_as_written(tmp_path, doubles, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(readme_python_api_snippet(), "README.md (Python API)", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert out.strip(), "the snippet prints its search hits and the answer"
    with Memory("stores/alice") as mem:
        msgs = mem.store.messages("alice")
        assert [m.speaker for m in msgs] == ["Alice", "Coach", "Alice"] and mem.boxes()
        assert mem.config.name == DEFAULT_CONFIG and stored_config("stores/alice").name == DEFAULT_CONFIG


def test_build_reads_a_chat_export_says_what_it_read_and_files_it_once(tmp_path, doubles, capsys):
    """`membox build FILE` on a transcript (membox_local/exports.py; every format: tests/test_exports.py): the format
    told by the content or forced, what was read and skipped said in one line, a second build adds nothing."""
    from test_exports import TRANSCRIPT

    data, store = tmp_path / "talk.txt", tmp_path / "mem"
    data.write_text(TRANSCRIPT)
    assert main(["build", str(data), "--store", str(store), "--config", str(config(tmp_path))]) == 0
    assert main(["build", str(data), "--store", str(store), "--format", "transcript"]) == 0
    err = capsys.readouterr().err
    assert err.count("read as transcript: 3 messages in 1 conversation(s); skipped nothing") == 2
    assert "3 new messages" in err and "0 new messages (3 already stored)" in err
    with pytest.raises(SystemExit) as exit_:
        main(["build", str(data), "--store", str(store), "--format", "teams"])
    assert exit_.value.code == 2 and "invalid choice: 'teams'" in capsys.readouterr().err
