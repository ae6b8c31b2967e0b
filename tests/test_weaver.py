"""Trace Weaver and trace-expanded retrieval, through the deterministic doubles (plus one real-stack test)."""
from __future__ import annotations

import pytest

from membox_local.backends.base import StructuredOutputError
from membox_local.config import load_config
from membox_local.execution.driver import Driver
from membox_local.embed import CachedEmbedder
from membox_local.memory import Memory
from membox_local.records import Event, Message
from membox_local.show import format_traces
from membox_local.systems.membox_tables import BoxStore as Store
from membox_local.weaver import Weaver, weave_counters

from membox_local.testing import FakeBackend, FakeEmbedder

CONV = "c"


# ---- hand-made boxes, woven one at a time ---------------------------------------------------------
class Bench:
    """A store, a weaver and a driver over the doubles; `box(...)` files a hand-made extracted box."""

    def __init__(self, tmp_path, cfg, backend=None):
        self.store = Store(tmp_path / "memory.db")
        self.cfg = cfg
        self.backend = backend or FakeBackend()
        self.driver = Driver(self.store, CachedEmbedder(FakeEmbedder(), self.store), self.backend)
        self.weaver = Weaver(self.store, cfg)
        self.n = 0

    def box(self, session: str, events: list[str], grounding: float = 1.0):
        date = f"{session} May 2024"
        msgs = [Message(CONV, f"m{self.n + i}", "A", t, session, date) for i, t in enumerate(events or ["hello"])]
        self.n += len(msgs)
        self.store.add_messages(msgs)
        bid = self.store.open_box(msgs[0])
        for m in msgs:
            self.store.file_message(m, bid, "test", None)
        self.store.save_extraction(bid, "t", [], [Event(0, bid, CONV, t, date, grounding) for t in events])
        return self.store.box(bid)

    def weave(self, box):
        return self.driver.drive(self.weaver.weave(box), CONV)

    def prompts(self, stage):
        return [p for s, p in self.backend.calls if s == stage]

    def members(self):
        return {t.id: set(t.event_ids) for t in self.store.traces(CONV)}


@pytest.fixture
def bench(tmp_path, cfg):
    b = Bench(tmp_path, cfg)
    yield b
    b.store.close()


def numbered(prompt: str) -> list[str]:
    return [l.split(". ", 1)[1] for l in prompt.splitlines() if l[:1].isdigit() and ". " in l]


def test_weaver_schemas_are_bounded_index_lists():
    from membox_local.backends.base import check_schema_bounded, validate_json
    from membox_local.prompts import link_schema, trace_init_schema

    for schema in (link_schema(3), trace_init_schema(3, 2, 80)):
        check_schema_bounded(schema)
    assert validate_json({"continues": [1, 3]}, link_schema(3)) == []
    assert validate_json({"continues": [0]}, link_schema(3)) and validate_json({"continues": [4]}, link_schema(3))
    assert validate_json({"continues": ["1"]}, link_schema(3))  # numbers, not text
    ok = {"storylines": [{"title": "x", "events": [2, 1]}]}
    assert validate_json(ok, trace_init_schema(3, 2, 80)) == []
    assert validate_json({"storylines": [ok["storylines"][0]] * 3}, trace_init_schema(3, 2, 80))


def test_first_box_initialises_traces_and_leftovers_become_single_traces(bench):
    # the model groups events 1 and 3 and forgets event 2: event 2 still gets a trace of its own
    bench.backend.responder = lambda r: ({"storylines": [{"title": "Ann's marathon", "events": [1, 3, 3]}]}
                                         if r.stage == "trace-init" else None)
    box = bench.box("1", ["Ann signed up for the city marathon", "Ann adopted a kitten", "Ann bought running shoes"])
    out = bench.weave(box)
    assert out.error == "" and out.candidates == [] and out.leftovers == 1
    traces = bench.store.traces(CONV)
    assert [t.summary for t in traces] == ["Ann's marathon", "Ann adopted a kitten"]
    ev = {e.text: e.id for e in box.events}
    assert traces[0].event_ids == [ev["Ann signed up for the city marathon"], ev["Ann bought running shoes"]]
    assert traces[1].event_ids == [ev["Ann adopted a kitten"]]
    assert len(bench.prompts("trace-init")) == 1 and bench.prompts("link") == []
    assert bench.store.unwoven_boxes(CONV) == []
    counts = weave_counters(bench.store, CONV)
    assert counts["boxes"] == 1 and counts["new_traces"] == 2 and counts["leftovers"] == 1


def test_single_unlinked_event_becomes_a_trace_without_a_call(bench):
    bench.weave(bench.box("1", ["Ann signed up for the city marathon"]))
    assert [t.summary for t in bench.store.traces(CONV)] == ["Ann signed up for the city marathon"]
    assert bench.backend.calls == []


def test_events_vote_for_the_trace_of_their_most_similar_event(bench):
    bench.weave(bench.box("1", ["Ann signed up for the city marathon"]))
    bench.weave(bench.box("2", ["Ben adopted a grey kitten"]))
    bench.weave(bench.box("3", ["Ann paid the electricity bill"]))
    marathon, kitten, bill = [t.id for t in bench.store.traces(CONV)]
    out = bench.weave(bench.box("4", ["Ben took the grey kitten to the vet", "Ann ran the city marathon",
                                      "Ann trained for the city marathon", "Ann baked sourdough bread"]))
    # two votes for the marathon trace, one for the kitten trace, none for the bill trace
    assert out.candidates == [marathon, kitten]
    assert len(bench.prompts("link")) == 2
    link = bench.prompts("link")[0]
    assert "Ann signed up for the city marathon" in link and "[1 May 2024]" in link
    assert numbered(link) == ["Ben took the grey kitten to the vet", "Ann ran the city marathon",
                              "Ann trained for the city marathon", "Ann baked sourdough bread"]
    ev = {e.text: e.id for e in bench.store.events_of_box(out.box_id)}
    assert out.linked == {marathon: [ev["Ann ran the city marathon"], ev["Ann trained for the city marathon"]],
                          kitten: [ev["Ben took the grey kitten to the vet"]]}
    assert bill not in out.candidates
    # the one event accepted nowhere opens a new trace
    assert len(out.new_traces) == 1
    assert bench.store.traces_of_event(ev["Ann baked sourdough bread"]) == out.new_traces


def test_candidates_are_capped(bench):
    bench.cfg.weaver.max_candidates = 1
    bench.weave(bench.box("1", ["Ann signed up for the city marathon"]))
    bench.weave(bench.box("2", ["Ben adopted a grey kitten"]))
    out = bench.weave(bench.box("3", ["Ben took the grey kitten to the vet", "Ann ran the city marathon"]))
    assert len(out.candidates) == 1 and len(bench.prompts("link")) == 1


def test_similarity_below_threshold_does_not_vote(bench):
    bench.weave(bench.box("1", ["Ann signed up for the city marathon in October"]))
    # shares one word of five with the trace's event: cosine 0.2
    out = bench.weave(bench.box("2", ["Ann bought marathon shoes yesterday"]))
    assert out.candidates == [] and bench.prompts("link") == []
    assert len(bench.store.traces(CONV)) == 2


def test_threshold_is_configurable(bench):
    bench.cfg.weaver.vote_threshold = 0.15
    bench.weave(bench.box("1", ["Ann signed up for the city marathon in October"]))
    out = bench.weave(bench.box("2", ["Ann bought marathon shoes yesterday"]))
    assert len(out.candidates) == 1 and len(bench.prompts("link")) == 1


def test_sure_votes_link_without_a_call(bench):
    bench.cfg.weaver.auto_link = 0.95
    bench.weave(bench.box("1", ["Ann signed up for the city marathon"]))
    (marathon,) = [t.id for t in bench.store.traces(CONV)]
    out = bench.weave(bench.box("2", ["Ann signed up for the city marathon"]))  # cosine 1: sure
    assert out.candidates == [marathon] and bench.prompts("link") == []
    assert out.linked == {marathon: [e.id for e in bench.store.events_of_box(out.box_id)]}
    # a voter under the bar is still asked about, alone (the sure one is not shown again)
    out = bench.weave(bench.box("3", ["Ann signed up for the city marathon", "Ann ran the city marathon"]))
    (link,) = bench.prompts("link")
    assert numbered(link) == ["Ann ran the city marathon"]
    ev = {e.text: e.id for e in bench.store.events_of_box(out.box_id)}
    assert out.linked[marathon][0] == ev["Ann signed up for the city marathon"]


@pytest.mark.parametrize("voters_only", [False, True])
def test_auto_link_off_asks_about_every_candidate(bench, voters_only):
    bench.cfg.weaver.link_voters_only = voters_only
    bench.weave(bench.box("1", ["Ann signed up for the city marathon"]))
    bench.weave(bench.box("2", ["Ann signed up for the city marathon", "Ann baked sourdough bread"]))
    (link,) = bench.prompts("link")
    want = ["Ann signed up for the city marathon"] + ([] if voters_only else ["Ann baked sourdough bread"])
    assert numbered(link) == want


def test_weakly_grounded_events_are_not_woven(bench):
    bench.weave(bench.box("1", ["Ann signed up for the city marathon"]))
    out = bench.weave(bench.box("2", ["Ann ran the city marathon"], grounding=0.1))
    assert out.events == 0 and bench.backend.calls == []
    assert len(bench.store.traces(CONV)) == 1
    assert bench.store.unwoven_boxes(CONV) == []  # nothing to do is done


def test_an_event_may_join_several_traces(bench):
    bench.weave(bench.box("1", ["Ann signed up for the city marathon"]))
    bench.weave(bench.box("2", ["Ann injured her left knee"]))
    marathon, knee = [t.id for t in bench.store.traces(CONV)]
    # each event votes for one trace, but verification of each candidate sees every new event
    bench.backend.responder = lambda r: {"continues": [1]} if r.stage == "link" else None
    out = bench.weave(bench.box("3", ["Ann injured her left knee during marathon training",
                                      "Ann ran the city marathon"]))
    assert set(out.candidates) == {marathon, knee}
    both = bench.store.events_of_box(out.box_id)[0].id
    assert sorted(bench.store.traces_of_event(both)) == [marathon, knee]


def test_weaving_a_box_only_adds_its_own_events(bench):
    for s, text in enumerate(["Ann signed up for the city marathon", "Ben adopted a grey kitten",
                              "Ann ran the city marathon"], 1):
        bench.weave(bench.box(str(s), [text]))
    before, calls = bench.members(), len(bench.backend.calls)
    out = bench.weave(bench.box("4", ["Ben took the grey kitten to the vet"]))
    after = bench.members()
    new_ids = {e.id for e in bench.store.events_of_box(out.box_id)}
    for tid, ids in before.items():
        assert after[tid] - ids <= new_ids and ids <= after[tid]  # old memberships untouched
    assert len(bench.backend.calls) - calls <= bench.cfg.weaver.max_candidates + 1


class FailingLinks(FakeBackend):
    """Fails every link call while `failing` is set (as a backend does when output never parses)."""

    failing = True

    def json_batch(self, requests):
        out = super().json_batch(requests)
        return [StructuredOutputError("link: output did not match the schema", "{", res.usage)
                if self.failing and r.stage == "link" else res for r, res in zip(requests, out)]


def test_failed_call_loses_no_event_and_is_retried(bench):
    bench.backend = bench.driver._backend = FailingLinks()
    bench.weave(bench.box("1", ["Ann signed up for the city marathon"]))
    box = bench.box("2", ["Ann ran the city marathon", "Ann ate pasta"])
    out = bench.weave(box)
    assert out.error.startswith("weaving failed") and out.linked == {} and out.new_traces == []
    assert [b.id for b in bench.store.unwoven_boxes(CONV)] == [box.id]
    assert bench.store.box(box.id).error.startswith("weaving failed")
    assert all(bench.store.traces_of_event(e.id) == [] for e in box.events)  # nothing half-written
    assert weave_counters(bench.store, CONV)["failures"] == 1
    assert bench.store.usage_by_stage(CONV)["link"]["calls"] == 1  # failed calls still cost tokens

    bench.backend.failing = False
    bench.driver.drive(bench.weaver.weave_pending(CONV), CONV)
    assert bench.store.unwoven_boxes(CONV) == [] and bench.store.box(box.id).error == ""
    assert all(bench.store.traces_of_event(e.id) for e in box.events)


# ---- through Memory: wiring, retries on the next build, retrieval ---------------------------------
def msgs(rows, session, date, start):
    return [Message(CONV, f"s{session}-{start + i}", sp, t, str(session), date) for i, (sp, t) in enumerate(rows)]


SESSIONS = [
    [("A", "I signed up for the city marathon"), ("B", "Great, the city marathon is a big race")],
    [("A", "I adopted a kitten named Luna"), ("B", "Cute, what colour is Luna the kitten?")],
    [("A", "I ran the city marathon"), ("B", "Wow, how was the city marathon race?")],
]
DATES = ["1 May 2024", "9 May 2024", "20 June 2024"]


def conversation():
    out = []
    for s, (rows, date) in enumerate(zip(SESSIONS, DATES), 1):
        out += msgs(rows, s, date, len(out))
    return out


def test_memory_weaves_each_box_after_extraction(memory, fake_backend):
    memory.add(conversation(), seal=True)
    boxes = memory.boxes(CONV)
    assert len(boxes) == 3 and memory.store.unwoven_boxes(CONV) == []
    traces = memory.store.traces_with_events(CONV)
    spans = [{e.date for e in evs} for _, evs in traces]
    assert {"1 May 2024", "20 June 2024"} in spans  # the marathon trace crosses sessions
    assert len(traces) == 2
    assert [s for s, _ in fake_backend.calls].count("link") == 1
    memory.add([])  # nothing left to weave: no new calls
    assert [s for s, _ in fake_backend.calls].count("link") == 1


def test_weaving_failure_is_retried_by_the_next_build(tmp_path, cfg):
    backend = FailingLinks()
    mem = Memory(tmp_path / "m", cfg, backend=backend, embedder=FakeEmbedder())
    mem.add(conversation(), seal=True)
    assert len(mem.store.unwoven_boxes(CONV)) == 1
    backend.failing = False
    mem.add([])
    assert mem.store.unwoven_boxes(CONV) == []
    assert any(len({e.date for e in evs}) == 2 for _, evs in mem.store.traces_with_events(CONV))
    mem.close()


def test_trace_events_follow_the_conversation_after_a_late_extraction(memory, fake_backend):
    fake_backend.fail_extract = 1  # the first box's extraction fails: it is extracted and woven last
    memory.add(conversation(), seal=True)
    memory.add([])
    marathon = next(evs for _, evs in memory.store.traces_with_events(CONV) if len(evs) == 2)
    assert [e.date for e in marathon] == ["1 May 2024", "20 June 2024"]
    assert marathon[0].id > marathon[1].id  # stored later, shown in conversation order


def test_weaver_can_be_disabled(tmp_path, cfg):
    cfg.weaver.enabled = False
    mem = Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    mem.add(conversation(), seal=True)
    assert mem.store.traces(CONV) == [] and len(mem.store.unwoven_boxes(CONV)) == 3
    mem.close()


def test_trace_retrieval_adds_dated_events_from_other_sessions(memory):
    memory.add(conversation(), seal=True)
    memory.config.retrieve.event_k = 2
    q = "How did the city marathon race go?"
    compact = memory.context(q, CONV, mode="compact", k=1, budget_tokens=500)
    ctx = memory.context(q, CONV, mode="trace", k=1, budget_tokens=500)
    assert ctx.box_ids == compact.box_ids and compact.event_ids == []
    assert ctx.text.startswith(compact.text)
    assert len(ctx.event_ids) == 1
    event = memory.store.event(ctx.event_ids[0])
    shown = memory.store.box(ctx.box_ids[0])
    assert event.box_id not in ctx.box_ids and event.date != shown.session_date
    assert f"[{event.date}] {event.text}" in ctx.text
    assert ctx.tokens <= 500


def test_trace_retrieval_respects_the_budget(memory):
    memory.add(conversation(), seal=True)
    q = "How did the city marathon race go?"
    box_only = memory.context(q, CONV, mode="compact", k=1, budget_tokens=500).tokens
    for budget in range(box_only - 2, box_only + 30, 2):
        ctx = memory.context(q, CONV, mode="trace", k=1, budget_tokens=budget)
        assert ctx.tokens <= max(budget, 0)
        if budget < box_only + 10:
            assert ctx.event_ids == []  # the event (and its heading) does not fit yet
    assert memory.context(q, CONV, mode="trace", k=1, budget_tokens=box_only + 30).event_ids


def test_event_k_limits_events_per_box(memory):
    rows = [("A", "I ran the city marathon"), ("B", "The city marathon, again?")]
    sessions = conversation() + msgs(rows, 4, "1 July 2024", 6) + msgs(rows[::-1], 5, "1 Aug 2024", 8)
    memory.add(sessions, seal=True)
    q = "Tell me about my marathon"
    got = {}
    for n in (1, 2, 0):
        memory.config.retrieve.event_k = n
        got[n] = memory.context(q, CONV, mode="trace", k=1, budget_tokens=2000).event_ids
    assert len(got[1]) == 1 and len(got[2]) == 2 and len(got[0]) >= 2
    assert len(set(got[0])) == len(got[0])


def test_show_traces_prints_events_in_time_order(memory):
    memory.add(conversation(), seal=True)
    text = format_traces(memory.store, CONV)
    assert text.count("trace ") == 2
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if "2 events" in l)
    assert "1 May 2024 (box" in lines[start + 2] and "20 June 2024 (box" in lines[start + 3]
    assert "no traces" in format_traces(memory.store, "nobody")


# ---- the real CPU stack ----------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize("config", [pytest.param("cpu", marks=pytest.mark.long), "cpu-ce"])
def test_real_models_link_events_across_sessions(tmp_path, config):
    """cpu-ce also drives its cheaper build on the real stack: the cross-encoder judge (no judge call), keywords
    picked from the text (the extraction call writes none) and links made without a call (`auto_link`)."""
    pytest.importorskip("llama_cpp")
    from conftest import DEMO
    from membox_local.ingest import load_jsonl
    from membox_local.loom import text_keywords

    # Qwen2.5-Coder-0.5B: SmolLM2-135M's events are mostly fragments that never vote for a trace
    cfg = load_config(config)
    cfg.llm.n_threads = 1  # on a shared 2-core machine one thread is several times faster than two
    with Memory(tmp_path / "real", cfg) as mem:
        mem.add([m for m in load_jsonl(DEMO) if m.session in ("1", "2")], seal=True)  # traces across two sessions
        store = mem.store
        conv = store.conversations()[0]
        woven = [b for b in store.boxes(conv) if b.status == "extracted" and b not in store.unwoven_boxes(conv)]
        unwoven = store.unwoven_boxes(conv)
        assert all(b.error.startswith("weaving failed") for b in unwoven)  # never silent
        assert len(unwoven) <= len(woven)
        for b in woven:  # every grounded event of a woven box is in some trace
            for e in b.events:
                if e.grounding >= cfg.extract.min_grounding:
                    assert store.traces_of_event(e.id), f"event {e.id} of box {b.id} is in no trace"
        traces = store.traces_with_events(conv)
        assert traces and all(evs and len(t.summary) <= 80 for t, evs in traces)
        sessions = {b.id: b.session for b in store.boxes(conv)}
        assert any(len({sessions[e.box_id] for e in evs}) >= 2 for _, evs in traces)
        if config == "cpu-ce":
            stages = store.usage_by_stage(conv)
            assert "judge" not in stages and stages["extract"]["calls"] >= len(store.boxes(conv))
            assert "link" not in stages  # auto_link = vote_threshold: every vote links without a call
            extracted = [b for b in store.boxes(conv) if b.status == "extracted"]
            assert any(b.keywords for b in extracted)
            for b in extracted:  # the code's keywords are the box's own words
                assert all(k.lower() in b.text().lower() for k in b.keywords), (b.keywords, b.text())
                assert b.keywords == text_keywords(b.messages, cfg.extract.max_keywords, cfg.extract.max_keyword_chars)
        ctx = mem.context("How is Maya's knee?", conv, mode="trace", k=3, budget_tokens=800)
        assert ctx.tokens <= 800
        assert all(store.event(i).box_id not in ctx.box_ids for i in ctx.event_ids)
