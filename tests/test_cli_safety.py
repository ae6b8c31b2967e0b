"""The command line refuses what it cannot do and keeps data from the terminal (issue 34): every numeric option of
every subcommand checked (one line naming it, exit status 2, nothing written), unknown conversation ids refused,
control characters from data printed visibly, Ctrl-C as one line and exit status 130 with nothing lost, and a
message too long for the model read from a bounded excerpt instead of failing its box on every rerun."""
from __future__ import annotations

import argparse
import json
import random

import pytest

from membox_local import backends, memory
from membox_local.argtypes import count, number
from membox_local.backends.base import PromptTooLong, StructuredOutputError
from membox_local.cli import build_parser, main
from membox_local.config import load_config
from membox_local.ingest import InputError
from membox_local.loom import excerpt, excerpt_budget
from membox_local.memory import Memory
from membox_local.records import Message
from membox_local.terminal import bar_filtered, filtered, visible
from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import DEMO
from test_cli import FAST, config, doubles, walk  # noqa: F401  (doubles: a fixture)

ESCAPES = "\x1b]0;owned\x07\x1b[2J\r\u202e\x85"


# ---- every option checked ---------------------------------------------------------------------------------------
def numeric_options():
    """(command path, action) for every option whose value is a number."""
    return [(path, a) for path, a in walk(build_parser()) if getattr(a.type, "minimum", None) is not None]


def test_no_option_takes_a_bare_int_or_float():
    bare = [f"{' '.join(path)} {a.option_strings}" for path, a in walk(build_parser()) if a.type in (int, float)]
    assert not bare, f"use argtypes.count/number so that bad values are refused: {bare}"
    assert len(numeric_options()) >= 30  # the walk reaches the modules' subcommands too


def bad_values(kind) -> list[str]:
    low = kind.minimum
    values = ["seven", "nan", "inf", "-inf", str(low - 1)] if kind.__name__ == "number" else ["seven", "1.5", str(low - 1)]
    if kind.maximum not in (None, float("inf")):
        values.append(str(kind.maximum + 1))
    return values


@pytest.mark.parametrize("path,action", numeric_options(), ids=lambda x: " ".join(x) if isinstance(x, tuple)
                         else "/".join(getattr(x, "option_strings", [])))
def test_a_bad_number_is_one_line_naming_the_option_and_writes_nothing(tmp_path, monkeypatch, capsys, path,
                                                                        action):
    monkeypatch.chdir(tmp_path)
    option = action.option_strings[-1]
    for value in bad_values(action.type):
        with pytest.raises(SystemExit) as exc:
            main([*path[1:], f"{option}={value}"] if option.startswith("--") else [*path[1:], option, value])
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 2, (option, value)
        assert len(err.splitlines()) == 1 and "error: argument" in err and option in err, err
        assert value.lstrip("-") in err or "must be" in err, err
    assert list(tmp_path.iterdir()) == []


def test_counts_and_numbers_say_their_bounds():
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be at least 1 \(got 0\)"):
        count(1)("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be from 1 to 5 \(got 6\)"):
        count(1, 5)("6")
    with pytest.raises(argparse.ArgumentTypeError, match="finite number above 0"):
        number(0, low_open=True)("0")
    assert count(0)("0") == 0 and number(0)("2.5") == 2.5


@pytest.fixture
def built(tmp_path, doubles, capsys):  # noqa: F811
    """The demo conversation built through the command line with the doubles, a speaker and a message full of
    escape sequences added."""
    data = tmp_path / "data.jsonl"
    lines = DEMO.read_text().splitlines()
    rec = json.loads(lines[0])
    rec.update(message_id="evil-1", speaker=f"Mallory{ESCAPES}", text=f"I signed up for the race{ESCAPES} today")
    data.write_text("\n".join([*lines, json.dumps(rec)]) + "\n")
    store = tmp_path / "store"
    assert main(["build", str(data), "--store", str(store), "--config", str(config(tmp_path)), "--quiet"]) == 0
    capsys.readouterr()
    return store


@pytest.mark.parametrize("command", [["ask", "{store}", "q?", "--conversation", "nope"],
                                     ["show", "{store}", "--conversation", "nope"],
                                     ["forget", "{store}", "--conversation", "nope"]])
def test_an_unknown_conversation_is_refused(built, capsys, command):
    before = (built / "memory.db").stat().st_mtime_ns
    assert main([c.format(store=built) for c in command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --conversation nope: no such conversation in this memory (it holds 1: maya-tom)"]
    assert (built / "memory.db").stat().st_mtime_ns == before


def test_zero_k_and_budget_are_refused_by_the_api_too(memory):
    memory.add([Message("c", "m1", "A", "hello there")], seal=True)
    for kw in ({"k": 0}, {"budget_tokens": -10}, {"k": True}):
        with pytest.raises(InputError, match="must be a whole number of at least 1"):
            memory.context("hello?", **kw)


# ---- terminal safety --------------------------------------------------------------------------------------------
def raw_controls(text: str) -> list[str]:
    return sorted({c for c in text if c in "\x1b\x07\r\x85\u202e"})


def test_text_from_data_reaches_the_terminal_visibly(built, capsys):
    for command in (["show", str(built), "--messages"], ["show", str(built), "--traces"],
                    ["ask", str(built), f"what did Mallory{ESCAPES} do?", "-v"]):
        assert main(command) == 0
        out, err = capsys.readouterr()
        assert raw_controls(out + err) == [], command
    assert main(["show", str(built), "--messages"]) == 0
    assert "Mallory\\x1b]0;owned\\x07" in capsys.readouterr().out


def test_json_keeps_the_text_as_it_is(built, capsys, tmp_path):
    assert main(["export", str(built)]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []
    texts = [json.loads(line).get("speaker") for line in out.split("\n") if line]
    assert f"Mallory{ESCAPES}" in texts  # the guard's \uXXXX escapes parse back to the same characters
    assert main(["export", str(built), "-o", str(tmp_path / "x.jsonl")]) == 0
    assert f"Mallory{ESCAPES}" in [json.loads(line).get("speaker") for line in
                                   (tmp_path / "x.jsonl").read_text().split("\n") if line]


def test_visible_and_filtered():
    assert visible("a\x1b[2Jb\nc\u202e") == "a\\x1b[2Jb\\x0ac\\u202e"
    assert visible("Zoë 猫 🐈") == "Zoë 猫 🐈"
    assert filtered("line\n\tx\x1b\x85") == "line\n\tx\\u001b\\u0085"
    assert bar_filtered("\rLoading: 50%\x1b[A\x1b]0;x\x07") == "\rLoading: 50%\x1b[A\\u001b]0;x\\u0007"


@pytest.mark.parametrize("quiet", [False, True])
def test_a_library_progress_bar_draws_or_is_quiet_and_data_stays_escaped(tmp_path, monkeypatch, capsys, quiet):
    """A library's own tqdm bar (transformers' "Loading weights") under the command line's guard: drawn with its
    carriage returns, not shown as "\\u000dLoading weights"; with --quiet not at all. Data printed meanwhile is
    escaped as always."""
    import sys

    from tqdm import tqdm

    from membox_local import exchange

    def loading_then_refusing(path, progress=None):
        for _ in tqdm(range(3), desc="Loading weights", mininterval=0):  # on sys.stderr: the guarded stream
            pass
        print(f"data: {ESCAPES}", file=sys.stderr)
        raise InputError("refused")

    monkeypatch.setattr(exchange, "read_export", loading_then_refusing)
    assert main(["import", str(tmp_path / "m"), "x.jsonl"] + (["--quiet"] if quiet else [])) == 2
    err = capsys.readouterr().err
    assert "\\u000dLoading" not in err and filtered(f"data: {ESCAPES}") in err and "error: refused" in err
    if quiet:
        assert "Loading weights" not in err and "\r" not in err  # nor the command's own bar
    else:
        assert "\rLoading weights: 100%" in err


# ---- Ctrl-C ------------------------------------------------------------------------------------------------------
def test_ctrl_c_during_a_build_is_one_line_130_and_the_rerun_finishes(tmp_path, monkeypatch, capsys):
    calls = {"n": 0}

    def interrupting():
        fake = FakeBackend()

        def responder(req):
            calls["n"] += req.stage == "extract"
            if calls["n"] == 3:
                raise KeyboardInterrupt
            return None
        fake.responder = responder
        return fake

    monkeypatch.setattr(backends, "make_backend", lambda llm: interrupting())
    monkeypatch.setattr(memory, "make_embedder", lambda emb: FakeEmbedder())
    monkeypatch.setattr(memory, "preflight_models", lambda cfg, **kw: None)
    store, cfg = tmp_path / "store", str(config(tmp_path))
    args = ["build", str(DEMO), "--store", str(store), "--config", cfg, "--quiet"]
    assert main(args) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("interrupted: what was filed is stored in") and "membox build" in err[0]
    assert main(args) == 0  # the rerun goes on from where the first stopped
    again = json.loads(_stats(store, capsys))
    assert main(["build", str(DEMO), "--store", str(tmp_path / "clean"), "--config", cfg, "--quiet"]) == 0
    clean = json.loads(_stats(tmp_path / "clean", capsys))
    assert (again["messages"], again["failed_boxes"]) == (clean["messages"], 0) == (40, 0)


def _stats(store, capsys) -> str:
    capsys.readouterr()
    assert main(["build", str(DEMO), "--store", str(store), "--json", "--quiet"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["serve", "eval", "import", "show"])
def test_ctrl_c_anywhere_is_one_line_and_130(command, monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    argv = {"serve": ["serve", "s"], "eval": ["eval", "segmentation", "--data", "d"], "import": ["import", "s", "f"],
            "show": ["show", "s"]}[command]
    parser = build_parser()
    real = parser.parse_args

    monkeypatch.setattr("membox_local.cli.build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda a: argparse.Namespace(**{**vars(real(a)), "func": interrupted}))
    assert main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("interrupted: ")


# ---- a message too long for the model ---------------------------------------------------------------------------
def msg(i: int, text: str) -> Message:
    return Message("c", f"m{i}", "A", text)


def test_an_excerpt_keeps_short_messages_whole_and_shares_the_rest():
    msgs = [msg(1, "short one"), msg(2, "x" * 5000), msg(3, "y" * 3000)]
    cut, note = excerpt(msgs, 2009)
    assert cut[0].text == "short one" and sum(len(m.text) for m in cut) <= 2009 + 2 * len(" [...] ")
    assert cut[1].text.startswith("xxx") and " [...] " in cut[1].text and cut[2].text.endswith("yyy")
    assert note.startswith("extracted from an excerpt") and "m2 (5,000 -> 1,000 characters)" in note
    assert "m1" not in note
    assert excerpt(msgs[:1], 100) == ([msgs[0]], "")


class Refusing(FakeBackend):
    """Refuses an extraction prompt over `limit` characters as llama.cpp does one over its context (PromptTooLong,
    counting a token per character); the other requests as the double answers them."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.sizes = limit, []

    def json_batch(self, requests):
        out = []
        for r in requests:
            size = len(r.prompt.user) + len(r.prompt.system)
            self.sizes.append(size)
            if r.stage == "extract" and size > self.limit:
                out.append(PromptTooLong("extract: too long", size, self.limit))
            else:
                out.extend(super().json_batch([r]))
        return out


def test_a_message_longer_than_the_context_is_extracted_from_an_excerpt(tmp_path, cfg):
    rng = random.Random(0)
    words = "we talked about training plans shoes knees hills tempo runs recovery sleep food".split()
    huge = "I signed up for the marathon. " + " ".join(rng.choice(words) for _ in range(1 << 17))
    backend = Refusing(limit=2000)  # far below the config's own budget: the backend's refusals cut the excerpt
    with Memory(tmp_path / "m", cfg, backend=backend, embedder=FakeEmbedder()) as mem:
        mem.add([msg(1, "Hi, how are you?"), msg(2, huge), msg(3, "Good luck with the marathon!")], seal=True)
        boxes = mem.boxes("c")
        assert [b.status for b in boxes] == ["extracted"] * len(boxes), [b.error for b in boxes]
        long_box = next(b for b in boxes if any(m.message_id == "m2" for m in b.messages))
        assert f"m2 ({len(huge):,} ->" in long_box.note and long_box.topic
        assert max(backend.sizes) > 2000 >= backend.sizes[-1]
        assert len(next(m for m in long_box.messages if m.message_id == "m2").text) == len(huge)  # stored whole
    cpu = load_config("cpu")
    assert excerpt_budget(cpu.llm.n_ctx, cpu.extract.max_tokens) == 3 * (4096 - 400 - 300)


def test_a_prompt_that_never_fits_fails_its_box_with_the_reason(tmp_path, cfg):
    backend = Refusing(limit=10)  # not even the instructions fit
    with Memory(tmp_path / "m", cfg, backend=backend, embedder=FakeEmbedder()) as mem:
        mem.add([msg(1, "x" * 5000)], seal=True)
        box = mem.boxes("c")[0]
    assert box.status == "failed" and "too long" in box.error
    assert not isinstance(PromptTooLong("x"), StructuredOutputError)


@pytest.mark.integration
def test_a_message_too_long_for_llama_cpp_is_extracted_from_an_excerpt(tmp_path):
    """The real CPU stack: a text that tokenizes far worse than the excerpt's estimate (numbers, about a
    token per two characters) overruns SmolLM2's context; llama.cpp says by how much, the excerpt is cut to fit."""
    cfg = load_config("cpu-fast")
    cfg.llm.n_ctx = 1024
    cfg.weaver.enabled = False
    rng = random.Random(1)
    dense = " ".join(f"lap {rng.randrange(10**6)} in {rng.randrange(10**4)}s" for _ in range(10_000))
    with Memory(tmp_path / "m", cfg) as mem:
        mem.add([msg(1, "I booked a flight to Lisbon for the race."), msg(2, f"Here is the log: {dense}")],
                seal=True)
        boxes = mem.boxes("c")
    assert [b.status for b in boxes] == ["extracted"] * len(boxes), [b.error for b in boxes]
    noted = [b for b in boxes if b.note]
    assert len(noted) == 1 and f"m2 ({len(dense) + 17:,} ->" in noted[0].note


def test_an_eventweave_turn_too_long_is_read_from_an_excerpt(tmp_path, cfg):
    from eventweave_doubles import ew_config

    backend = Refusing(limit=3000)
    refused = []
    plain_json_batch = backend.json_batch

    def json_batch(requests):  # the event graph's extraction refused as the box extraction is
        out = []
        for r in requests:
            size = len(r.prompt.user) + len(r.prompt.system)
            if r.stage == "ew-extract" and size > backend.limit:
                refused.append(size)
                out.append(PromptTooLong("ew-extract: too long", size, backend.limit))
            else:
                out.extend(plain_json_batch([r]))
        return out

    backend.json_batch = json_batch
    long_turn = "I adopted a cat named Miso last week. " + "She sleeps on the sofa all day. " * 3000
    with Memory(tmp_path / "m", ew_config(cfg), backend=backend, embedder=FakeEmbedder()) as mem:
        mem.add([msg(1, "How was your week?"), msg(2, long_turn), msg(3, "A cat! What is she like?")], seal=True)
        pairs = mem.store.ew_pairs("c")
    assert refused and {r["status"] for r in pairs.values()} == {"done"}, pairs
