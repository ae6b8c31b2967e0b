"""Totals the code adds up (`[answer] tally`, tally.py): the model lists the parts of a total question, the code
sums them; a list that does not fit the schema falls back to the plain answer; the real CPU stack once."""
from __future__ import annotations

import json

import pytest

from membox_local.backends.base import parse_json_output
from membox_local.config import load_config
from membox_local.memory import Memory
from membox_local.prompts import asks_for_total, tally_prompt, tally_schema
from membox_local.tally import parts, total_reply
from membox_local.testing import FakeBackend, FakeEmbedder

DAY = "1:56 pm on 8 May, 2023"


@pytest.mark.parametrize("question, picked", [
    ("What is the total cost of the car cover and detailing spray I purchased?", True),
    ("How many different museums or galleries did I visit in February?", False),  # a count of kinds: listed wrong
    ("How many fish are there in total in both of my aquariums?", True),
    ("How much did I spend altogether on the trip?", True),
    ("How many bikes do I currently own?", False),  # the newest value, not a sum
    ("How many days ago did I attend a networking event?", False),
    ("What did Caroline research?", False),
])
def test_the_total_rule_picks_questions_that_add_up(question, picked):
    assert asks_for_total(question) is picked


def test_parts_are_summed_with_their_unit_each_named_once():
    data = {"unit": "dollars", "items": [{"what": "car cover", "amount": 120}, {"what": "Car  cover", "amount": 120},
                                         {"what": "detailing spray", "amount": 20}]}
    assert parts(data) == [("car cover", 120.0), ("detailing spray", 20.0)]
    assert total_reply(data) == "$140 (car cover: $120; detailing spray: $20)"
    assert total_reply({"unit": "meals", "items": [{"what": "fajitas", "amount": 3},
                                                   {"what": "lentil soup", "amount": 5}]}) \
        == "8 meals (fajitas: 3 meals; lentil soup: 5 meals)"
    assert total_reply({"unit": "hours", "items": [{"what": "jogging", "amount": 0.25},
                                                   {"what": "yoga", "amount": 0.25}]}).startswith("0.5 hours (")
    assert total_reply({"unit": "", "items": [{"what": "a", "amount": 2500}]}, "How much in $?") == "$2,500 (a: $2,500)"
    assert total_reply({"unit": "days", "items": []}) == "not mentioned"


def test_the_schema_is_bounded_and_refuses_what_cannot_be_summed():
    schema = tally_schema(3)
    ok = parse_json_output('{"unit": "days", "items": [{"what": "Japan", "amount": 7}]}', schema)
    assert ok["items"][0]["amount"] == 7
    for bad in ('{"unit": "days", "items": [{"what": "Japan", "amount": -1}]}',
                '{"unit": "days", "items": [{"what": "Japan", "amount": "seven"}]}',
                '{"unit": "dollars", "items": [{"what": "workshops", "amount": 1000000000000000}]}',
                '{"unit": "days", "items": ' + json.dumps([{"what": "x", "amount": 1}] * 4) + "}"):
        with pytest.raises(ValueError):
            parse_json_output(bad, schema)
    prompt = tally_prompt(f"[{DAY}]\nAnn: I spent 7 days in Japan", "How many days in total?", "2023-05-22")
    assert "Today is 2023-05-22" in prompt.system and "14 days (about 2 weeks) ago]" in prompt.user


MESSAGES = [{"conversation_id": "c", "message_id": f"m{i}", "speaker": "Ann", "text": t, "session": "1",
             "session_date": DAY} for i, t in enumerate([
                 "I bought a car cover for 120 dollars", "The detailing spray cost me 20 dollars",
                 "My kitten Pixel sleeps on the piano"])]


def _memory(path, answer, **overrides):
    cfg = load_config("cpu", {"loom.judge": "embedding", "weaver.enabled": False, **overrides})
    return Memory(path, cfg, backend=FakeBackend(), embedder=FakeEmbedder(), answer_backend=answer)


def _lister(request):
    """A model that lists each shown line holding a number, with that number."""
    if request.stage != "answer":
        return None
    items = [{"what": " ".join(line.split()[1:4]), "amount": int(w)} for line in request.prompt.user.splitlines()
             for w in line.split() if w.isdigit() and line.startswith("Ann:")]
    return {"unit": "dollars", "items": items}


def test_a_total_question_is_answered_by_the_sum_of_the_listed_parts(tmp_path):
    answer = FakeBackend()
    answer.responder = _lister
    with _memory(tmp_path / "m", answer) as mem:
        mem.add(MESSAGES, seal=True)
        got = mem.answer("What is the total cost of the car cover and the detailing spray?")
        assert got.text.startswith("$140 (") and sum(a for _, a in got.parts) == 140
        assert "Memory:" in answer.calls[-1][1] and mem.store.usage_by_stage()["answer"]["calls"] == 1
        plain = mem.answer("What does the kitten do?")  # not a total: the short answer, no list
        assert plain.parts == () and mem.store.usage_by_stage()["answer"]["calls"] == 2
    with _memory(tmp_path / "m", answer, **{"answer.tally": False}) as mem:
        got = mem.answer("What is the total cost of the car cover and the detailing spray?")
        assert got.parts == () and not got.text.startswith("$140")


@pytest.mark.parametrize("listed", [{"unit": "dollars", "items": "many"}, {"unit": "dollars", "items": []}])
def test_an_empty_list_or_one_that_does_not_fit_falls_back_to_the_plain_answer(tmp_path, listed):
    answer = FakeBackend()
    answer.responder = lambda r: listed if r.stage == "answer" else None
    with _memory(tmp_path / "m", answer) as mem:
        mem.add(MESSAGES, seal=True)
        got = mem.answer("What is the total cost of the car cover and the detailing spray?")
        assert got.parts == () and got.text.strip() and "Short answer:" in answer.calls[-1][1]
        usage = mem.store.usage_by_stage()["answer"]
        assert usage["calls"] == 2  # the list asked for is counted, then the plain answer


@pytest.mark.integration
def test_a_total_on_the_real_cpu_stack(tmp_path):
    """SmolLM2 lists through llama.cpp's grammar: whatever it lists, the reply is their sum, or the fallback."""
    cfg = {"loom.judge": "embedding", "weaver.enabled": False, "llm.backend": "llamacpp", "llm.model": "smollm2-135m"}
    with Memory(tmp_path / "m", load_config("cpu", cfg), embedder=FakeEmbedder()) as mem:
        mem.add(MESSAGES, seal=True)
        got = mem.answer("What is the total cost of the car cover and the detailing spray?")
        assert got.text.strip()
        # the list was asked for through the grammar: one call when it was summed, a second for the plain answer
        assert mem.store.usage_by_stage()["answer"]["calls"] == (1 if got.parts else 2)
        if got.parts:
            total = sum(a for _, a in got.parts)
            assert f"{total:,.0f}" in got.text.replace("$", "") or f"{total:g}" in got.text
