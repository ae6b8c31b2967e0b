"""The answer stage: a separate answering model, dated context, speaker-checked events (issue 22)."""
from __future__ import annotations

import pytest

from membox_local.config import ConfigError, load_config, parse_assignment
from membox_local.ingest import InputError
from membox_local.dates import parse_session_date, resolve_relative
from membox_local.loom import event_grounding, speaker_grounding
from membox_local.memory import Memory
from membox_local.records import Box, Message
from membox_local.retrieval.layout import Layout, dated, plain
from membox_local.testing import FakeBackend, FakeEmbedder

DAY = "1:56 pm on 8 May, 2023"  # a Monday


@pytest.mark.parametrize("text, shown", [
    ("I went to a support group yesterday.", "yesterday (7 May 2023)"),
    ("the day before yesterday", "the day before yesterday (6 May 2023)"),
    ("Last week I painted.", "Last week (the week before 8 May 2023)"),
    ("two weeks ago", "two weeks ago (about 24 April 2023)"),
    ("3 days ago", "3 days ago (5 May 2023)"),
    ("last Friday", "last Friday (5 May 2023)"),
    ("next Friday", "next Friday (12 May 2023)"),
    ("last weekend", "last weekend (the weekend of 6 May 2023)"),
    ("next month", "next month (June 2023)"),
    ("a couple of months ago", "a couple of months ago (March 2023)"),
    ("last year", "last year (2022)"),
    ("tonight", "tonight (8 May 2023)"),
])
def test_relative_time_resolved_against_the_session_date(text, shown):
    assert shown in resolve_relative(text, DAY)


def test_words_that_only_look_like_dates_are_left_alone():
    text = "May I say now is the time? I march on, second to none."
    assert resolve_relative(text, DAY) == text


def test_unreadable_session_dates_leave_the_text_as_it_is():
    assert parse_session_date("session 4") is None
    assert parse_session_date("") is None
    assert resolve_relative("yesterday", "session 4") == "yesterday"
    assert parse_session_date("2023-05-08").isoformat() == "2023-05-08"


def test_dated_layout_counts_what_it_shows():
    msgs = [Message("c", str(i), "Ann", "I ran a race yesterday and last week too", "1", DAY, i) for i in range(5)]
    layout = Layout(10_000, render=dated)
    assert layout.try_add(msgs)
    ctx = layout.context()
    from membox_local.retrieval import count_tokens

    assert "yesterday (7 May 2023)" in ctx.text
    assert layout.tokens == count_tokens(ctx.text)
    plain_layout = Layout(10_000, render=plain)
    plain_layout.try_add(msgs)
    assert "(7 May 2023)" not in plain_layout.context().text


BOX = [Message("c", "1", "Ana", "I finally bought a red bicycle last week!"),
       Message("c", "2", "Ben", "Nice! I started learning the cello with Mrs. Okafor."),
       Message("c", "3", "Ana", "Mrs. Okafor used to play in an orchestra, right?")]


@pytest.mark.parametrize("event, ok", [
    ("Ana bought a red bicycle", True),
    ("Ben bought a red bicycle", False),  # the people swapped: every word is in the box, not in Ben's lines
    ("Ben used to play in an orchestra", False),  # his teacher did
    ("Mrs. Okafor used to play in an orchestra", True),
    ("Ben is learning the cello from Mrs. Okafor", True),
    ("Ana learned to play the cello", False),
    ("Ana and Ben bought a red bicycle", False),  # a joint claim holds for each person named
    ("Ana and Mrs. Okafor", True),  # nothing claimed beyond the names
])
def test_events_are_grounded_in_the_lines_of_the_person_they_name(event, ok):
    assert (speaker_grounding(event, BOX) >= 0.5) == ok
    box = Box(1, "c", "1", "", BOX)
    assert event_grounding(event, box, by_speaker=False) == 1.0  # the words alone pass
    assert event_grounding(event, box, by_speaker=True) == pytest.approx(min(1.0, speaker_grounding(event, BOX)))


def test_answer_llm_takes_the_build_settings_it_does_not_name(tmp_path):
    cfg = load_config("cpu", {"answer.llm.model": "qwen2.5-coder-1.5b", "llm.n_threads": 1})
    assert cfg.answer_llm().model == "qwen2.5-coder-1.5b"
    assert cfg.answer_llm().n_threads == 1 and cfg.answer_llm().backend == cfg.llm.backend
    with pytest.raises(ConfigError, match=r"\[answer.llm\].*unknown key 'modle'"):
        load_config("cpu", {"answer.llm.modle": "x"})
    with pytest.raises(ConfigError, match=r"\[answer.llm\].*LLM backend"):
        load_config("cpu", {"answer.llm.backend": "nope"})
    assert parse_assignment("retrieve.resolve_dates=false") == ("retrieve.resolve_dates", False)
    assert parse_assignment("answer.llm.model=qwen2.5-coder-1.5b") == ("answer.llm.model", "qwen2.5-coder-1.5b")


def _memory(path, cfg, build, answer=None):
    return Memory(path, cfg, backend=build, embedder=FakeEmbedder(), answer_backend=answer)


MESSAGES = [{"conversation_id": "c", "message_id": f"m{i}", "speaker": sp, "text": t, "session": "1",
             "session_date": DAY} for i, (sp, t) in enumerate([
                 ("Ann", "I adopted a grey kitten named Pixel yesterday"),
                 ("Bob", "Pixel is a lovely name for a kitten"),
                 ("Ann", "Pixel sleeps on the piano every evening")])]


def test_another_answering_model_answers_and_never_invalidates_the_build(tmp_path):
    build_cfg = load_config("cpu", {"loom.judge": "embedding", "weaver.enabled": False})
    build, answer = FakeBackend(), FakeBackend()
    with _memory(tmp_path / "m", build_cfg, build) as mem:
        mem.add(MESSAGES, seal=True)
        n_build = len(build.calls)
    answer_cfg = load_config("cpu", {"loom.judge": "embedding", "weaver.enabled": False,
                                     "answer.llm.model": "qwen2.5-coder-1.5b"})
    with _memory(tmp_path / "m", answer_cfg, FakeBackend(), answer) as mem:
        mem.check_build_settings()  # not refused: the answering model is not a build setting
        got = mem.answer("What is the kitten called?")
        assert [s for s, _ in answer.calls] == ["answer"]
        assert "(7 May 2023)" in got.context.text  # shown messages carry resolved dates
        assert mem.store.usage_by_stage()["answer"]["calls"] == 1
    assert len(build.calls) == n_build


def test_a_question_asked_on_a_day_is_told_the_day_and_how_long_ago_each_excerpt_was(tmp_path):
    cfg = load_config("cpu", {"loom.judge": "embedding", "weaver.enabled": False})
    answer = FakeBackend()
    with _memory(tmp_path / "m", cfg, FakeBackend(), answer) as mem:
        mem.add(MESSAGES, seal=True)
        mem.answer("What did Ann adopt two weeks ago?", today="2023-05-22")
        user = answer.calls[-1][1]
        assert "8 May, 2023; 14 days (about 2 weeks) ago]" in user and "two weeks ago (about 8 May 2023)" in user
        mem.answer("What is the kitten called?")
        assert "ago]" not in answer.calls[-1][1]  # no day given: the dates as they are
        with pytest.raises(InputError, match="today: not a date: 'someday'"):
            mem.answer("What is the kitten called?", today="someday")


def test_same_answering_model_reuses_the_build_backend(tmp_path):
    cfg = load_config("cpu", {"loom.judge": "embedding", "weaver.enabled": False, "answer.llm": {}})
    build = FakeBackend()
    with _memory(tmp_path / "m", cfg, build) as mem:
        mem.add(MESSAGES, seal=True)
        assert mem.answer_backend is mem.backend
        mem.answer("What is the kitten called?")
        assert build.calls[-1][0] == "answer"


def test_a_record_that_swaps_the_people_is_corrected_by_code_and_counted_in_the_build_stats(tmp_path):
    cfg = load_config("cpu", {"loom.judge": "embedding", "loom.threshold": -1.0, "weaver.enabled": False})
    fake = FakeBackend()
    # the model gives Ann's kitten to Bob (citing Ann's line), and asks a question of its own
    fake.responder = lambda r: {"topic": "kitten", "keywords": ["Pixel"], "events": [
        {"line": 1, "event": "Bob adopted a grey kitten named Pixel"},
        {"line": 3, "event": "Does Pixel sleep on the piano?"}]} if r.stage == "extract" else None
    with _memory(tmp_path / "m", cfg, fake) as mem:
        mem.add(MESSAGES, seal=True)
        stats = mem.stats()
        (event,) = mem.store.events("c")
    assert event.text == f"Ann adopted a grey kitten named Pixel yesterday ({event.text.split('(')[1]}"
    assert event.sources == ["m0"]
    assert stats["events"] == 1 and stats["events_dropped"] == {"question": 1}
    assert stats["events_weakly_grounded"] == 0  # what its line does not hold is not kept
