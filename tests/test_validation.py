"""Structured output is re-validated with jsonschema (issue 24): every bound of the schema is enforced (maxLength,
maxItems, minimum/maximum, enum, required, types) and objects are closed (no keys the schema does not name); a
failure is one line naming the stage and the failing path. The schemas sent to the grammar engines stay as
they are."""
from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest

from membox_local.backends.base import (Backend, JsonRequest, Prompt, StructuredOutputError, closed_schema,
                                        parse_json_output, validate_json)
from membox_local.config import ExtractConfig
from membox_local.prompts import extract_schema, link_schema, trace_init_schema

EXTRACT = extract_schema(ExtractConfig(max_topic_chars=20, max_keywords=3, max_keyword_chars=10, max_events=2,
                                       max_event_chars=30), 3)
LINK = link_schema(3)
TRACES = trace_init_schema(3, 2, 12)
GOOD = {"topic": "marathon", "keywords": ["run", "Lisbon"], "events": [{"line": 2, "event": "I signed up for a race"}]}


def rejected(data, schema) -> str:
    """The one-line error parse_json_output raises for `data`."""
    with pytest.raises(ValueError) as exc:
        parse_json_output(json.dumps(data), schema)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_valid_output_is_accepted_as_parsed():
    assert parse_json_output(json.dumps(GOOD), EXTRACT) == GOOD
    assert parse_json_output('{"topic": "", "keywords": [], "events": []}', EXTRACT)["events"] == []
    assert parse_json_output('{"continues": [1, 3]}', LINK) == {"continues": [1, 3]}
    assert parse_json_output('{"continues": []}', LINK) == {"continues": []}
    ok = {"storylines": [{"title": "Maya's race", "events": [1, 2]}, {"title": "cat", "events": [3]}]}
    assert parse_json_output(json.dumps(ok), TRACES) == ok
    assert validate_json(ok, TRACES) == []


@pytest.mark.parametrize("data, schema, expected", [
    ({**GOOD, "topic": "t" * 21}, EXTRACT, "$.topic: 21 characters, more than maxLength 20"),
    ({**GOOD, "keywords": ["k" * 11]}, EXTRACT, "$.keywords[0]: 11 characters, more than maxLength 10"),
    ({**GOOD, "events": [{"line": 1, "event": "e" * 31}]}, EXTRACT,
     "$.events[0].event: 31 characters, more than maxLength 30"),
    ({"storylines": [{"title": "x" * 13, "events": [1]}]}, TRACES, "$.storylines[0].title: 13 characters"),
])
def test_over_long_strings_are_rejected(data, schema, expected):
    assert expected in rejected(data, schema)


@pytest.mark.parametrize("data, schema, expected", [
    ({**GOOD, "topic": 7}, EXTRACT, "$.topic: expected string, got integer 7"),
    ({**GOOD, "topic": None}, EXTRACT, "$.topic: expected string, got null"),
    ({**GOOD, "keywords": "run, Lisbon"}, EXTRACT, "$.keywords: expected array, got string"),
    ({**GOOD, "events": ["x"]}, EXTRACT, "$.events[0]: expected object, got string"),
    ({**GOOD, "events": [{"line": 4, "event": "x"}]}, EXTRACT, "$.events[0].line: "),  # the box has 3 lines
    ({"continues": ["1"]}, LINK, "$.continues[0]: expected integer, got string"),
    ({"continues": [1.0]}, LINK, "$.continues[0]: expected integer, got number 1.0"),  # 1.0 is not an index
    ({"continues": [True]}, LINK, "$.continues[0]: expected integer, got boolean"),
    ({"continues": {"1": True}}, LINK, "$.continues: expected array, got object"),
    (["not", "an", "object"], LINK, "$: expected object, got array"),
])
def test_wrong_types_are_rejected(data, schema, expected):
    assert expected in rejected(data, schema)


@pytest.mark.parametrize("data, schema, expected", [
    ({**GOOD, "mood": "happy"}, EXTRACT, "$: unexpected key(s) 'mood'"),
    ({"continues": [1], "reason": "same race", "also": 1}, LINK, "$: unexpected key(s) 'also', 'reason'"),
    ({"storylines": [{"title": "t", "events": [1], "why": "x"}]}, TRACES, "$.storylines[0]: unexpected key(s) 'why'"),
])
def test_extra_keys_are_rejected(data, schema, expected):
    assert expected in rejected(data, schema)


@pytest.mark.parametrize("data, schema, expected", [
    ({**GOOD, "keywords": ["a", "b", "c", "d"]}, EXTRACT, "$.keywords: 4 items, more than maxItems 3"),
    ({**GOOD, "events": GOOD["events"] * 3}, EXTRACT, "$.events: 3 items, more than maxItems 2"),
    ({"continues": [1, 2, 3, 1]}, LINK, "$.continues: 4 items, more than maxItems 3"),
    ({"storylines": [{"title": "t", "events": [1]}] * 3}, TRACES, "$.storylines: 3 items, more than maxItems 2"),
])
def test_too_many_items_are_rejected(data, schema, expected):
    assert expected in rejected(data, schema)


@pytest.mark.parametrize("value, bound", [(0, "minimum 1"), (4, "maximum 3"), (-2, "minimum 1")])
def test_out_of_range_integers_are_rejected(value, bound):
    msg = rejected({"continues": [1, value]}, LINK)
    assert f"$.continues[1]: {value} is out of range ({bound})" in msg and "is not one of [1, 2, 3]" in msg
    # minimum/maximum hold on their own, without the enum that llama.cpp's converter needs
    bare = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3}}, "required": ["n"]}
    assert f"$.n: {value} is out of range ({bound})" in rejected({"n": value}, bare)
    nested = {"storylines": [{"title": "t", "events": [value]}]}
    assert f"$.storylines[0].events[0]: {value} is out of range ({bound})" in rejected(nested, TRACES)


def test_missing_keys_enums_and_non_json_are_rejected():
    assert "$: missing required 'keywords', 'events'" in rejected({"topic": "t"}, EXTRACT)
    assert "$.storylines[0]: missing required 'events'" in rejected({"storylines": [{"title": "t"}]}, TRACES)
    labels = {"type": "object", "properties": {"label": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["label"]}
    assert '$.label: "maybe" is not one of ["yes", "no"]' in rejected({"label": "maybe"}, labels)
    for raw in ('{"continues": [NaN]}', '{"continues": [1]', "yes", '{"continues": [Infinity]}'):
        with pytest.raises(ValueError, match="not JSON"):
            parse_json_output(raw, LINK)


def test_many_problems_make_one_line_that_says_how_many_more():
    msg = rejected({"topic": 1, "keywords": [1, 2, 3, 4], "events": [1, 2, 3], "x": 0}, EXTRACT)
    assert msg.count(";") == 4 and msg.endswith("more)")


def test_the_schemas_sent_to_the_engines_are_left_as_they_are():
    """Only the check closes objects: the schema a request carries (llama.cpp's grammar, vLLM's constraint, the
    OpenAI strict schema built from it) is never changed, and a schema that opens an object stays open."""
    before = copy.deepcopy(EXTRACT)
    validate_json(GOOD, EXTRACT)
    with pytest.raises(ValueError):
        parse_json_output(json.dumps({**GOOD, "extra": 1}), EXTRACT)
    assert EXTRACT == before and "additionalProperties" not in EXTRACT
    closed = closed_schema(TRACES)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["storylines"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in TRACES["properties"]["storylines"]["items"]
    open_schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}},
                   "additionalProperties": True}
    assert validate_json({"a": "x", "b": 1}, open_schema) == []

    from membox_local.backends.openai import OpenAIAdapter, strict_schema
    from membox_local.config import LLMConfig

    req = JsonRequest(Prompt("s", "u"), EXTRACT, "extract")
    body = OpenAIAdapter(LLMConfig(backend="openai"), "m").json_body(req)
    assert body["response_format"]["json_schema"]["schema"] == strict_schema(before) and EXTRACT == before


def test_a_malformed_schema_is_refused_before_any_model_call():
    class Never(Backend):
        def label_batch(self, requests): raise AssertionError
        def json_batch(self, requests): raise AssertionError
        def text_batch(self, requests): raise AssertionError

    bad = {"type": "object", "properties": {"a": {"type": "strng", "maxLength": 3}}}
    with pytest.raises(ValueError, match="invalid output schema"):
        Never().json([JsonRequest(Prompt("s", "u"), bad, "extract")])


def test_a_backend_names_the_stage_and_the_path_and_retries():
    """Through a real backend class (OpenAI's, on an in-process client): a reply with an extra key is retried, then
    returned as one StructuredOutputError line naming the stage and the failing path."""
    pytest.importorskip("openai")
    from membox_local.backends.openai import OpenAIBackend
    from membox_local.config import LLMConfig

    replies = [json.dumps({**GOOD, "mood": "ok"}), json.dumps({**GOOD, "topic": "t" * 25}), json.dumps(GOOD)]

    class Client:
        def __init__(self):
            self.chat = SimpleNamespace(completions=self)

        def create(self, **body):
            content = replies.pop(0)
            return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=content),
                                                            finish_reason="stop", logprobs=None)],
                                   usage=SimpleNamespace(prompt_tokens=5, completion_tokens=7))

    b = OpenAIBackend(LLMConfig(backend="openai", model="m", max_retries=1), client=Client())
    try:
        err = b.json([JsonRequest(Prompt("s", "u"), EXTRACT, "extract")])[0]
        assert isinstance(err, StructuredOutputError) and "\n" not in str(err)
        assert str(err).startswith("extract: output did not match the schema: $.topic: 25 characters, more than "
                                   "maxLength 20")
        assert err.usage.completion_tokens == 14  # both attempts counted
        ok = b.json([JsonRequest(Prompt("s", "u"), EXTRACT, "extract")])[0]
        assert ok.data == GOOD
    finally:
        b.close()
