"""The unmentioned-term guard (`[answer] check_terms`, grounding.py): what a question names, when the context
mentions it, and the answer that skips the model when it does not."""
from __future__ import annotations

import pytest

from membox_local.config import load_config
from membox_local.evaluation.scorers import abstains
from membox_local.grounding import not_mentioned_reply, question_terms, stem, unmentioned
from membox_local.memory import Memory
from membox_local.testing import FakeBackend, FakeEmbedder


@pytest.mark.parametrize("word, stemmed", [
    ("peppers", "pepper"), ("jogging", "jog"), ("cities", "city"), ("serviced", "servic"), ("Seattle", "seattle"),
    ("Emma's", "emma"), ("yoga", "yoga"), ("bus", "bus"),
])
def test_stem_strips_one_suffix(word, stemmed):
    assert stem(word) == stemmed


@pytest.mark.parametrize("question, terms", [
    ("How often do I see Dr. Johnson?", ["Johnson"]),  # a title's full stop does not start a sentence
    ("How many days did I spend in total traveling in Hawaii and in Seattle?", ["Hawaii", "Seattle"]),
    ("How many plants did I initially plant for tomatoes and chili peppers?", ["tomatoes", "peppers"]),
    ("How many hours of jogging and yoga did I do last week?", ["jogging", "yoga"]),
    ("Which bike did I fixed or serviced the past weekend?", []),  # verbs after a pronoun: not two things
    ("When did Jon and Gina decide to collaborate?", ["Jon", "Gina"]),  # after a name: no two-word thing
    ("Where is the painting 'Ethereal Dreams' by Emma Taylor hanging?", ["Ethereal", "Dreams", "Emma", "Taylor"]),
    ("What did I buy in March and on Monday?", []),  # months and weekdays are dates, checked by retrieval
    ("Thanks. Can you remind me of it?", []),  # a capital that starts a sentence is not a name
    ("What is my sister's name?", []),
])
def test_what_a_question_names(question, terms):
    assert question_terms(question) == terms


def test_a_term_is_mentioned_when_its_stem_starts_a_word_of_the_context():
    ctx = "[1 May 2023]\nuser: I went for a 30-minute jog, then an hour of yoga. I planted 5 tomato plants."
    assert unmentioned("How many hours of jogging and yoga did I do?", ctx) == []
    assert unmentioned("How many plants did I plant for tomatoes and chili peppers?", ctx) == ["peppers"]
    assert unmentioned("How long did I stay in Hawaii and in Seattle?", ctx) == ["Hawaii", "Seattle"]
    assert unmentioned("Did I go to Tokyo?", "user: I loved Kyoto") == ["Tokyo"]  # a word start, not inside one


def test_the_reply_names_what_is_missing_and_reads_as_an_abstention():
    reply = not_mentioned_reply(["Hawaii", "Seattle"])
    assert "Hawaii or Seattle" in reply and abstains(reply)
    assert "about Super Bowl)" in not_mentioned_reply(["Super", "Bowl"], "When did I watch the Super Bowl?")


MESSAGES = [{"conversation_id": "c", "message_id": f"m{i}", "speaker": sp, "text": t, "session": "1",
             "session_date": "1:56 pm on 8 May, 2023"} for i, (sp, t) in enumerate([
                 ("Ann", "I spent ten days in Hawaii with my family"),
                 ("Bob", "Hawaii in spring sounds wonderful"),
                 ("Ann", "We surfed every morning in Hawaii")])]


@pytest.mark.parametrize("check, question, asked", [
    (True, "How many days did I spend in Hawaii and in Seattle?", False),  # Seattle unmentioned: no model call
    (True, "How many days did I spend in Hawaii?", True),  # everything mentioned: the model answers
    (False, "How many days did I spend in Hawaii and in Seattle?", True),  # off (the default): the model answers
    (True, "Can you suggest some things to do in Seattle?", True),  # a request may name something new
])
def test_the_guard_answers_for_the_model_only_when_on_and_a_term_is_missing(tmp_path, check, question, asked):
    cfg = load_config("cpu", {"loom.judge": "embedding", "weaver.enabled": False, "answer.check_terms": check})
    answer = FakeBackend()
    with Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder(), answer_backend=answer) as mem:
        mem.add(MESSAGES, seal=True)
        got = mem.answer(question)
    assert bool(answer.calls) is asked
    if not asked:
        assert got.unmentioned == ("Seattle",) and "Seattle" in got.text and abstains(got.text)
        assert "Hawaii" in got.context.text  # the context is still returned, for the caller to show
    else:
        assert got.unmentioned == ()


def test_the_cpu_default_leaves_the_guard_off():
    assert load_config("cpu").answer.check_terms is False
    assert load_config("cpu-ce").answer.check_terms is False


def test_sources_are_the_shown_lines_holding_the_answers_own_words():
    from membox_local.grounding import sources
    from membox_local.records import Message

    shown = [Message("c", "D1:1", "Ann", "I used to play the guitar as a kid", "1", "8 May 2023"),
             Message("c", "D1:2", "Bob", "I played drums in a band", "1", "8 May 2023"),
             Message("c", "D2:1", "Ann", "My guitar teacher was strict", "2", "20 June 2023")]
    q = "What instrument did Ann play when she was younger?"
    assert [m.message_id for m in sources("guitar", q, shown, ["D2:1", "D1:1"])] == ["D2:1", "D1:1"]
    assert [m.message_id for m in sources("In June 2023", q, shown, [])] == ["D2:1"]  # the session date counts
    assert sources("Yes, she did", q, shown, []) == []  # no word of its own: no source claimed
    assert sources("piano", q, shown, []) == []  # a word no line holds
