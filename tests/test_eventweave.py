"""EventWeave (systems/eventweave.py): extraction per turn pair, the graph's operations, resuming, idempotence,
forgetting, the retrieval modes within their budget, `membox show --graph` and `membox export-graph`. Through the
deterministic doubles (the FakeBackend's `responder` scripts the extraction), plus one build on the real CPU stack."""
from __future__ import annotations

import copy
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest

from membox_local.cli import main
from membox_local.config import ConfigError, load_config
from membox_local.ingest import load_jsonl
from membox_local.memory import Memory
from membox_local.records import Message
from membox_local.store import StoreError
from membox_local.systems.eventweave_graph import GraphWeaver, networkx_graph, utilities
from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import DEMO

CONV = "ab"
S1, S2, S3 = "1:00 pm on 8 May, 2023", "10:00 am on 9 May, 2023", "6:00 pm on 20 May, 2023"
# (session, date, speaker, text, events the scripted extraction finds in it as the new turn)
SCRIPT = [
    ("1", S1, "Ana", "I adopted a grey cat named Pepper yesterday.",
     [("Ana adopted a grey cat named Pepper", "yesterday")]),
    ("1", S1, "Ben", "Nice! What does she eat?", []),
    ("1", S1, "Ana", "Pepper eats tuna and sleeps all day.", [("Pepper the cat eats tuna every day", "")]),
    ("1", S1, "Ben", "I am training for the Lisbon marathon next month.",
     [("Ben trains for the Lisbon marathon", "next month")]),
    ("2", S2, "Ana", "Sadly Pepper went missing the day before yesterday.",
     [("Ana's grey cat Pepper went missing", "the day before yesterday")]),
    ("2", S2, "Ben", "Oh no, I hope she comes back.", []),
    ("2", S2, "Ana", "Pepper, the grey cat I adopted, came back home today, hungry for tuna!",
     [("Ana adopted a grey cat named Pepper returned home", "today")]),
    ("3", S3, "Ben", "I ran the Lisbon marathon last Sunday in four hours.",
     [("Ben ran the Lisbon marathon in four hours", "last Sunday")]),
    ("3", S3, "Ana", "Congratulations, that is fast!", []),
]


def script_messages(conv: str = CONV) -> list[Message]:
    return [Message(conv, f"m{i}", sp, text, s, d) for i, (s, d, sp, text, _) in enumerate(SCRIPT)]


def new_turn(user: str) -> str:
    lines = user.splitlines()
    return lines[lines.index("New turn:") + 1].partition(": ")[2]


class Script:
    """The FakeBackend's responder for ew-extract: the scripted events of the new turn (other stages: the double's
    own rules). `fail`: texts whose extraction answers with output the schema refuses (once each)."""

    def __init__(self, fail: tuple[str, ...] = ()):
        self.events = {text: evs for *_, text, evs in SCRIPT}
        self.fail = set(fail)
        self.prompts: list[str] = []

    def __call__(self, r):
        if r.stage != "ew-extract":
            return None
        self.prompts.append(r.prompt.user)
        text = new_turn(r.prompt.user)
        if text in self.fail:
            self.fail.discard(text)
            return {"events": "not a list"}
        return {"events": [{"text": t, "when": w} for t, w in self.events.get(text, [])]}


def ew_config(cfg, systems=("membox", "eventweave"), **eventweave):
    c = copy.deepcopy(cfg)
    c.memory.systems = list(systems)
    c.retrieve.mode = "event-graph"
    # the FakeEmbedder's bag-of-words cosines: events sharing most words cluster, the pairs' contexts link
    c.eventweave.reasoning_threshold = 0.45
    for key, value in eventweave.items():
        setattr(c.eventweave, key, value)
    return c


def scripted_backend(script: Script | None = None) -> FakeBackend:
    b = FakeBackend()
    b.responder = script or Script()
    return b


@pytest.fixture
def ew(tmp_path, cfg):
    mem = Memory(tmp_path / "ew", ew_config(cfg), backend=scripted_backend(), embedder=FakeEmbedder())
    yield mem
    mem.close()


def canonical(store, conv: str = CONV) -> dict:
    """The graph with nodes named by their events' texts: equal for equal graphs, whatever the ids."""
    events = store.ew_events(conv, woven=True)
    key = {}
    for e in events:
        key.setdefault(e.node_id, []).append(e.text)
    name = {n: tuple(v) for n, v in key.items()}
    return {
        "events": [(e.text, e.when, e.date, e.first_day, e.last_day, tuple(e.sources)) for e in events],
        "nodes": sorted(name.values()),
        "edges": sorted((r["kind"], name[r["src"]], name[r["dst"]], round(r["weight"], 5))
                        for r in store.ew_edges(conv)),
        "updates": sorted((name[r["node_id"]], r["session"], round(r["cosine"], 5)) for r in store.ew_updates(conv)),
        "summaries": sorted((r["session"], r["status"], r["text"]) for r in store.ew_summaries(conv)),
    }


def stage_calls(backend: FakeBackend, stage: str) -> int:
    return sum(s == stage for s, _ in backend.calls)


# ---- selection and configuration ----------------------------------------------------------------
def test_the_eventweave_config_selects_both_systems_and_the_event_graph_mode():
    cfg = load_config("eventweave")
    assert cfg.memory.systems == ["membox", "eventweave"] and cfg.retrieve.mode == "event-graph"
    assert cfg.eventweave.max_nodes == 0  # bounded memory is off by default
    with pytest.raises(ConfigError, match="half_life_unit: unknown half-life unit 'weeks'"):
        load_config("eventweave", {"eventweave.half_life_unit": "weeks"})


def test_retrieval_weights_are_not_build_settings_and_graph_settings_are(tmp_path, cfg):
    c = ew_config(cfg)
    with Memory(tmp_path / "m", c, backend=scripted_backend(), embedder=FakeEmbedder()) as mem:
        mem.add(script_messages()[:3])
    free = copy.deepcopy(c)
    free.eventweave.recency_weight, free.eventweave.half_life_unit = 0.7, "days"
    with Memory(tmp_path / "m", free, backend=scripted_backend(), embedder=FakeEmbedder()) as mem:
        mem.add(script_messages()[3:5])
    other = copy.deepcopy(c)
    other.eventweave.cluster_threshold = 0.5
    with Memory(tmp_path / "m", other, backend=scripted_backend(), embedder=FakeEmbedder()) as mem:
        with pytest.raises(StoreError, match=r"eventweave.cluster_threshold: 0.8 then, 0.5 now"):
            mem.add(script_messages()[5:])


def test_an_event_graph_is_added_to_a_built_box_memory_by_the_store_migration(tmp_path, cfg):
    msgs = script_messages()
    with Memory(tmp_path / "m", cfg, backend=scripted_backend(), embedder=FakeEmbedder()) as mem:
        mem.add(msgs, seal=True)
        boxes = [(b.id, b.topic) for b in mem.boxes()]
        assert not mem.store.db.execute("SELECT 1 FROM sqlite_master WHERE name='ew_events'").fetchone()
    with Memory(tmp_path / "m", ew_config(cfg), backend=scripted_backend(), embedder=FakeEmbedder()) as mem:
        assert mem.store.get_meta("schema_version.eventweave") == "2"
        assert json.loads(mem.store.get_meta("systems")) == ["membox", "eventweave"]
        assert mem.has_work()
        mem.add([], seal=True)  # the stored messages are extracted into the graph; the boxes stay as they were
        assert [(b.id, b.topic) for b in mem.boxes()] == boxes
        assert len(mem.store.ew_pairs(CONV)) == len(msgs)
        assert "eventweave.cluster_threshold" in json.loads(mem.store.get_meta("build_settings"))
    with Memory(tmp_path / "m", ew_config(cfg), backend=scripted_backend(), embedder=FakeEmbedder()) as mem:
        assert not mem.has_work()  # opened again (migration idempotent), nothing to do
        pairs = {k: dict(r) for k, r in mem.store.ew_pairs(CONV).items()}
        # a version-1 graph (no `dropped` column) is lifted to version 2 when opened, its rows kept
        mem.store.db.execute("ALTER TABLE ew_pairs DROP COLUMN dropped")
        mem.store.set_meta("schema_version.eventweave", "1")
    with Memory(tmp_path / "m", ew_config(cfg), backend=scripted_backend(), embedder=FakeEmbedder()) as mem:
        assert mem.store.get_meta("schema_version.eventweave") == "2"
        assert {k: dict(r) for k, r in mem.store.ew_pairs(CONV).items()} == {
            k: dict(r, dropped="{}") for k, r in pairs.items()}
        assert not mem.has_work()


def test_a_memory_of_the_event_graph_alone_and_modes_it_cannot_serve(tmp_path, cfg, capsys):
    with Memory(tmp_path / "m", ew_config(cfg, systems=("eventweave",)), backend=scripted_backend(),
                embedder=FakeEmbedder()) as mem:
        mem.add(script_messages(), seal=True)
        assert main(["show", str(mem.path)]) == 0  # no boxes to show: the graph
        assert capsys.readouterr().out.startswith(f"conversation {CONV}: 5 event node(s)")
        assert mem.modes() == ["chunk-rag", "event-graph", "event-graph-boxes", "full-context", "session-rag",
                               "turn-rag"]
        assert "Ben trains for the Lisbon marathon" in mem.context("Which marathon does Ben train for?").text
        with pytest.raises(ValueError, match="builds no 'membox' memory"):
            mem.context("Which marathon?", mode="event-graph-boxes")
        with pytest.raises(ValueError, match="reads a memory system this config does not build"):
            mem.context("Which marathon?", mode="box-hits")
    with Memory(tmp_path / "box", cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        mem.add(script_messages(), seal=True)
        with pytest.raises(ValueError, match="reads a memory system this config does not build"):
            mem.context("Which marathon?", mode="event-graph")


# ---- extraction ---------------------------------------------------------------------------------
def test_one_bounded_extraction_per_turn_pair_with_resolved_dates(ew):
    script = ew.backend.responder
    ew.add(script_messages())
    assert stage_calls(ew.backend, "ew-extract") == len(SCRIPT)
    first, second, fifth = script.prompts[0], script.prompts[1], script.prompts[4]
    assert "Turn before:\n(none" in first and "New turn:\nAna: I adopted" in first and f"Chat date: {S1}" in first
    assert "Turn before:\nAna: I adopted a grey cat" in second and "New turn:\nBen: Nice!" in second
    assert "Turn before:\n(none" in fifth  # the first turn of a session has no turn before it
    pairs = ew.store.ew_pairs(CONV)
    assert {r["status"] for r in pairs.values()} == {"done"} and pairs["m1"]["previous_id"] == "m0"
    assert pairs["m4"]["previous_id"] == ""
    events = {e.text: e for e in ew.store.ew_events(CONV)}
    assert len(events) == sum(len(x[-1]) for x in SCRIPT[:8])  # a turn with no event (an empty list) has none
    adopted = events["Ana adopted a grey cat named Pepper"]
    assert adopted.sources == ["m0"] and adopted.session_date == S1
    assert (adopted.when, adopted.date, adopted.first_day, adopted.last_day) == \
        ("yesterday", "7 May 2023", "2023-05-07", "2023-05-07")
    missing = events["Ana's grey cat Pepper went missing"]
    assert missing.sources == ["m4"] and (missing.date, missing.first_day) == ("7 May 2023", "2023-05-07")
    marathon = events["Ben trains for the Lisbon marathon"]
    assert marathon.sources == ["m2", "m3"] and (marathon.first_day, marathon.last_day) == ("2023-06-01", "2023-06-30")
    assert events["Pepper the cat eats tuna every day"].date == ""  # no time given: none resolved
    assert np.isclose(np.linalg.norm(adopted.vector), 1.0) and not np.allclose(adopted.vector, adopted.context_vector)


@pytest.mark.parametrize("text, why", [
    ("Ben trains for the Lisbon marathon", ""),
    ("Pepper the cat eats tuna every day", ""),  # names no speaker: grounded in the turns' words
    ("Ben: I am training for the Lisbon marathon next month.", "copied turn"),
    ("Is Ben training for a marathon?", "question"),
    ("Ben trains trains trains trains trains trains trains", "repetition"),
    ("Ana trains for the Lisbon marathon", "about another person"),  # Ben's news, told as Ana's
    ("Ana and Ben train for the Lisbon marathon", "about another person"),  # a joint claim holds for each
    ("Ben bought a red bicycle in Porto", "not grounded"),
])
def test_what_a_pair_keeps_of_its_items(text, why):
    from membox_local.systems.eventweave import unkept

    before = Message(CONV, "m2", "Ana", "Pepper eats tuna every day, she loves it.")
    new = Message(CONV, "m3", "Ben", "I am training for the Lisbon marathon next month.")
    assert unkept(text, before, new, 0.5) == why
    # a person the new turn names is fine: "Ana told me ..." may be about Ana
    assert unkept("Ana runs the Lisbon marathon", before,
                  Message(CONV, "m3", "Ben", "Ana runs the Lisbon marathon next month."), 0.5) == ""


def test_items_not_kept_are_counted_by_reason(tmp_path, cfg):
    script = Script()
    script.events["I am training for the Lisbon marathon next month."] = [
        ("Ben trains for the Lisbon marathon", "next month"), ("Ana trains for the Lisbon marathon", ""),
        ("Ben: I am training for the Lisbon marathon next month.", "")]  # max_events = 3
    script.events["Nice! What does she eat?"] = [("What does Pepper eat?", "")]
    with Memory(tmp_path / "m", ew_config(cfg), backend=scripted_backend(script), embedder=FakeEmbedder()) as mem:
        mem.add(script_messages(), seal=True)
        assert [e.text for e in mem.store.ew_events(CONV) if e.sources[-1] == "m3"] == [
            "Ben trains for the Lisbon marathon"]
        assert json.loads(mem.store.ew_pairs(CONV)["m3"]["dropped"]) == {"about another person": 1, "copied turn": 1}
        assert json.loads(mem.store.ew_pairs(CONV)["m1"]["dropped"]) == {"question": 1}
        assert mem.stats(CONV)["eventweave"]["dropped_items"] == {
            "about another person": 1, "copied turn": 1, "question": 1}


def test_the_extraction_schema_is_bounded():
    from membox_local.backends.base import check_schema_bounded
    from membox_local.prompts import turn_events_schema

    schema = turn_events_schema(3, 160, 40)
    check_schema_bounded(schema)
    items = schema["properties"]["events"]
    assert items["maxItems"] == 3 and items["items"]["properties"]["when"]["maxLength"] == 40


def test_a_time_expression_must_be_words_of_the_turns(tmp_path, cfg):
    answers = {"I ran 10k last week!": {"text": "Ana ran 10k last week", "when": ""},  # taken from the text
               "Then I rested.": {"text": "Ana rested", "when": S1},  # the chat date copied: no time given
               "We met on Friday.": {"text": "Ana met Ben", "when": "last Friday"}}  # not what was said
    b = FakeBackend()
    b.responder = lambda r: {"events": [answers[new_turn(r.prompt.user)]]} if r.stage == "ew-extract" else None
    with Memory(tmp_path / "m", ew_config(cfg), backend=b, embedder=FakeEmbedder()) as mem:
        mem.add([Message("c", f"x{i}", "Ana", text, "1", S1) for i, text in enumerate(answers)])
        ran, rested, met = mem.store.ew_events("c")
        assert (ran.when, ran.date, ran.first_day, ran.last_day) == \
            ("last week", "the week before 8 May 2023", "2023-05-01", "2023-05-07")
        assert (rested.when, rested.date, met.when, met.date) == ("", "", "", "")


# ---- the graph ----------------------------------------------------------------------------------
def test_clusters_edges_updates_and_summaries(ew):
    ew.add(script_messages())
    s = ew.store
    events = {e.text: e for e in s.ew_events(CONV, woven=True)}
    adopted, returned = events["Ana adopted a grey cat named Pepper"], \
        events["Ana adopted a grey cat named Pepper returned home"]
    missing = events["Ana's grey cat Pepper went missing"]
    # clustering: the return joins the adoption's node (cosine above delta); the node's vector is their mean
    assert adopted.node_id == returned.node_id != missing.node_id
    node = next(n for n in s.ew_nodes(CONV) if n.id == adopted.node_id)
    assert node.size == 2 and np.allclose(node.vector, (adopted.vector + returned.vector) / 2, atol=1e-6)
    assert np.allclose(node.context_vector, (adopted.context_vector + returned.context_vector) / 2, atol=1e-6)
    assert len(s.ew_nodes(CONV)) == len(events) - 1
    edges = {(r["kind"], r["src"], r["dst"]): r["weight"] for r in s.ew_edges(CONV)}
    # sequential: each event's node after the previous event's, in conversation order
    order = [e.node_id for e in s.ew_events(CONV, woven=True)]
    expected = {(a, b) for a, b in zip(order, order[1:]) if a != b}
    assert {(a, b) for k, a, b in edges if k == "sequential"} == expected
    # temporal: "yesterday" on 8 May and "the day before yesterday" on 9 May are both 7 May
    pair = tuple(sorted((adopted.node_id, missing.node_id)))
    assert ("temporal", *pair) in edges
    assert {(a, b) for k, a, b in edges if k == "temporal"} == {pair}
    # reasoning: weighted by the context cosine, above theta
    reasoning = {(a, b): w for (k, a, b), w in edges.items() if k == "reasoning"}
    assert reasoning and all(w > ew.config.eventweave.reasoning_threshold for w in reasoning.values())
    # update: the node's mean moved in session 2 below beta (0.97) from its session-1 vector: the change shows
    [update] = s.ew_updates(CONV)
    assert update["node_id"] == adopted.node_id and update["session"] == "2" and update["event_id"] == returned.id
    assert update["cosine"] < ew.config.eventweave.update_threshold
    # summaries: sessions 1 and 2 are complete (session 3 started); session 3 waits for the seal
    assert [(r["session"], r["status"]) for r in s.ew_summaries(CONV)] == [("1", "done"), ("2", "done")]
    assert stage_calls(ew.backend, "ew-summary") == 2
    ew.seal()
    assert [r["session"] for r in s.ew_summaries(CONV)] == ["1", "2", "3"]
    assert s.ew_summaries(CONV)[0]["text"].startswith("Ana adopted a grey cat")
    stats = ew.stats()["eventweave"]
    assert stats["events"] == len(events) and stats["summaries"] == 3 and stats["updates"] == 1
    assert stats["edges"]["temporal"] == 1 and stats["failed_pairs"] == 0


def test_events_of_one_date_are_chained_not_all_linked(tmp_path, cfg):
    said = ["Today I painted the fence.", "Today I baked rye bread.", "Today I washed my car."]
    b = FakeBackend()
    b.responder = lambda r: {"events": [{"text": "Ana " + new_turn(r.prompt.user)[8:], "when": "Today"}]} \
        if r.stage == "ew-extract" else None
    with Memory(tmp_path / "m", ew_config(cfg, reasoning_threshold=0.99), backend=b, embedder=FakeEmbedder()) as mem:
        mem.add([Message("c", f"x{i}", "Ana", text, "1", S1) for i, text in enumerate(said)])
        nodes = [e.node_id for e in mem.store.ew_events("c")]
        assert len(set(nodes)) == 3 and {e.date for e in mem.store.ew_events("c")} == {"8 May 2023"}
        temporal = {(r["src"], r["dst"]) for r in mem.store.ew_edges("c") if r["kind"] == "temporal"}
        assert temporal == {(nodes[0], nodes[1]), (nodes[1], nodes[2])}


def test_networkx_views_and_pagerank(ew):
    import networkx as nx

    ew.add(script_messages(), seal=True)
    g = ew.system("eventweave").graph(CONV)
    kinds = {d["kind"] for _, _, d in g.edges(data=True)}
    assert kinds == {"sequential", "temporal", "reasoning", "summary", "update"}
    assert sum(d["kind"] == "summary" for _, d in g.nodes(data=True)) == 3
    assert nx.is_connected(nx.Graph(g.to_undirected()))
    ranking = networkx_graph(ew.store, CONV, ranking=True)
    assert isinstance(ranking, nx.DiGraph) and not any(d["kind"] == "update" for *_, d in ranking.edges(data=True))
    snap = ew.system("eventweave").snapshot(CONV)
    assert set(snap.pagerank) == {n.id for n in ew.store.ew_nodes(CONV)}
    assert abs(sum(snap.pagerank.values()) + sum(v for k, v in nx.pagerank(ranking).items() if k[0] == "s")
               - 1.0) < 1e-6
    assert snap.sessions == {"1": 0, "2": 1, "3": 2}


def test_a_rebuild_replays_the_same_graph(ew):
    ew.add(script_messages(), seal=True)
    before = canonical(ew.store)
    GraphWeaver(ew.store, ew.config.eventweave).rebuild(CONV)
    assert canonical(ew.store) == before


def test_adding_the_same_messages_again_changes_nothing(ew):
    msgs = script_messages()
    ew.add(msgs, seal=True)
    before, calls = canonical(ew.store), len(ew.backend.calls)
    assert ew.add(msgs, seal=True) == 0
    ew.seal()
    assert canonical(ew.store) == before and len(ew.backend.calls) == calls and not ew.has_work()


def test_bounded_memory_evicts_by_utility_and_never_splits_the_graph(tmp_path, cfg):
    import networkx as nx

    msgs = load_jsonl(DEMO)
    with Memory(tmp_path / "m", ew_config(cfg, max_nodes=5), backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        mem.add(msgs, seal=True)
        conv = msgs[0].conversation_id
        nodes = mem.store.ew_nodes(conv)
        assert len(nodes) == 5
        stats = mem.stats()["eventweave"]
        assert stats["evicted_nodes"] > 0 and stats["events"] == sum(n.size for n in nodes)
        g = networkx_graph(mem.store, conv).to_undirected()
        assert nx.is_connected(g)
        u = utilities(mem.store, conv, mem.config.eventweave)
        assert set(u) == {n.id for n in nodes}
        # the latest event's node is the most recent, never the one evicted for it
        last = mem.store.ew_last_woven(conv)
        assert last.node_id in u


def test_bounded_recall_replays_the_built_graph_with_a_cap_in_a_copy(tmp_path, cfg):
    from membox_local.evaluation.bounded import capped_recall

    msgs = load_jsonl(DEMO)
    conv = msgs[0].conversation_id
    with Memory(tmp_path / "capped", ew_config(cfg, max_nodes=5), backend=FakeBackend(),
                embedder=FakeEmbedder()) as mem:
        mem.add(msgs, seal=True)
        built_capped = canonical(mem.store, conv)
    c = ew_config(cfg)
    with Memory(tmp_path / "m", c, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        mem.add(msgs, seal=True)
        whole = canonical(mem.store, conv)
        nodes = len(mem.store.ew_nodes(conv))
    db = tmp_path / "m" / "memory.db"
    questions = [{"qid": 0, "question": "Which race did Maya sign up for?", "evidence": [msgs[1].message_id]},
                 {"qid": 1, "question": "What is the name of Tom's cat?", "evidence": [msgs[-1].message_id]},
                 {"qid": 2, "question": "No evidence", "evidence": []}]
    rows = capped_recall(tmp_path / "m", c, conv, questions, caps=[0, 5], budgets=[60, 400], embedder=FakeEmbedder())
    free, capped = rows
    assert (free.cap, free.nodes, free.evicted_nodes, free.questions) == (0, nodes, 0, 2)
    assert capped.nodes == 5 and capped.evicted_nodes == nodes - 5 and capped.events < free.events
    assert set(free.recall) == {60, 400} and all(0.0 <= v <= 1.0 for r in rows for v in r.recall.values())
    assert 0.0 <= capped.reachable <= free.reachable <= 1.0  # an evicted node's events take their turns along
    assert len(capped.per_question) == 2 * 2
    with Memory(tmp_path / "m", c, embedder=FakeEmbedder()) as mem:
        assert canonical(mem.store, conv) == whole  # the built memory is not written
    # the replay with a cap weaves what a build with that cap wove (the summaries aside: a replay keeps them)
    with tempfile.TemporaryDirectory() as tmp:
        from membox_local.store import copy_db
        from membox_local.systems.eventweave_graph import GraphWeaver

        copy_db(db, Path(tmp) / "memory.db")
        capped_cfg = ew_config(cfg, max_nodes=5)
        with Memory(Path(tmp), capped_cfg, embedder=FakeEmbedder()) as mem:
            GraphWeaver(mem.store, capped_cfg.eventweave).rebuild(conv)
            replayed = canonical(mem.store, conv)
    assert {k: v for k, v in replayed.items() if k != "summaries"} == \
        {k: v for k, v in built_capped.items() if k != "summaries"}


def test_each_term_of_the_utility(ew):
    ew.add(script_messages())
    c = copy.deepcopy(ew.config.eventweave)
    e = {x.text: x for x in ew.store.ew_events(CONV)}
    cat = e["Ana adopted a grey cat named Pepper"].node_id  # two mentions, a temporal link, recent, long
    tuna = e["Pepper the cat eats tuna every day"].node_id  # one mention, early, short
    c.utility_uniqueness, c.utility_reference, c.utility_cost = 0.0, 1.0, 0.0
    future = utilities(ew.store, CONV, c)
    assert future[cat] > future[tuna] and all(0.0 < v <= 1.0 for v in future.values())
    c.utility_reference, c.utility_cost = 0.0, 1.0
    cost = utilities(ew.store, CONV, c)
    assert min(cost, key=cost.get) == cat and min(cost.values()) == -1.0  # the most tokens: the largest cost
    c.utility_uniqueness, c.utility_cost = 1.0, 0.0
    unique = utilities(ew.store, CONV, c)
    assert all(0.0 <= v <= 1.0 for v in unique.values())
    vec = {n.id: n.vector / np.linalg.norm(n.vector) for n in ew.store.ew_nodes(CONV)}
    for node in (cat, tuna):  # 1 - the cosine to the nearest other node
        assert unique[node] == pytest.approx(1 - max(float(vec[node] @ v) for k, v in vec.items() if k != node))


# ---- resuming -----------------------------------------------------------------------------------
class Interrupt(BaseException):
    """Stands in for a kill: not an error a step catches."""


class DiesAfter(FakeBackend):
    def __init__(self, n: int, script: Script):
        super().__init__()
        self.left, self.responder = n, script

    def json_batch(self, requests):
        self.left -= sum(r.stage == "ew-extract" for r in requests)
        if self.left < 0:
            raise Interrupt
        return super().json_batch(requests)


@pytest.mark.parametrize("cut", [0, 3, 5, 8])
def test_an_interrupted_build_resumes_with_nothing_lost_or_doubled(tmp_path, cfg, cut):
    c = ew_config(cfg)
    with Memory(tmp_path / "ref", c, backend=scripted_backend(), embedder=FakeEmbedder()) as ref:
        ref.add(script_messages(), seal=True)
        want = canonical(ref.store)
    dying = DiesAfter(cut, Script())
    mem = Memory(tmp_path / "m", c, backend=dying, embedder=FakeEmbedder())
    with pytest.raises(Interrupt):
        mem.add(script_messages(), seal=True)
    mem.close()
    assert cut <= len(SCRIPT)
    backend = scripted_backend()
    with Memory(tmp_path / "m", c, backend=backend, embedder=FakeEmbedder()) as mem:
        assert mem.has_work()
        mem.add([], seal=True)
        assert canonical(mem.store) == want
        assert stage_calls(dying, "ew-extract") + stage_calls(backend, "ew-extract") == len(SCRIPT)
        assert len(mem.store.ew_pairs(CONV)) == len(SCRIPT) and not mem.has_work()


def test_events_left_unwoven_by_an_interruption_are_woven_by_the_next_build(tmp_path, cfg, monkeypatch):
    c = ew_config(cfg)
    with Memory(tmp_path / "ref", c, backend=scripted_backend(), embedder=FakeEmbedder()) as ref:
        ref.add(script_messages(), seal=True)
        want = canonical(ref.store)
    real, calls = GraphWeaver.add, []

    def dies_on_the_fourth(self, e):
        calls.append(e.text)
        if len(calls) == 4:
            raise Interrupt
        return real(self, e)

    monkeypatch.setattr(GraphWeaver, "add", dies_on_the_fourth)
    mem = Memory(tmp_path / "m", c, backend=scripted_backend(), embedder=FakeEmbedder())
    with pytest.raises(Interrupt):
        mem.add(script_messages(), seal=True)
    mem.close()
    monkeypatch.setattr(GraphWeaver, "add", real)
    with Memory(tmp_path / "m", c, backend=scripted_backend(), embedder=FakeEmbedder()) as mem:
        assert mem.store.ew_counts(CONV)["ew_events_unwoven"] == 1 and mem.has_work()
        mem.add([], seal=True)
        assert canonical(mem.store) == want


def test_a_failed_pair_is_recorded_retried_and_woven_in_its_place(tmp_path, cfg, capsys):
    c = ew_config(cfg)
    with Memory(tmp_path / "ref", c, backend=scripted_backend(), embedder=FakeEmbedder()) as ref:
        ref.add(script_messages(), seal=True)
        want = canonical(ref.store)
    failing = SCRIPT[2][3]  # Ana's tuna line: an event in session 1
    with Memory(tmp_path / "m", c, backend=scripted_backend(Script(fail=(failing,))), embedder=FakeEmbedder()) \
            as mem:
        mem.add(script_messages())
        pair = mem.store.ew_pairs(CONV)["m2"]
        assert pair["status"] == "failed" and "extraction failed" in pair["error"] and "schema" in pair["error"]
        comp = mem.system("eventweave")
        assert comp.failures([CONV]) == (1, len(SCRIPT))
        assert "1 turn pair(s) failed event extraction" in comp.warnings([CONV])[0]
        assert [r["session"] for r in mem.store.ew_summaries(CONV)] == ["2"]  # session 1 waits for its pair
        assert mem.has_work()
        mem.add([], seal=True)  # retried: its event comes before others, so the graph is replayed in order
        assert canonical(mem.store) == want and comp.failures([CONV]) == (0, len(SCRIPT))
        mem.close()
        assert main(["show", str(mem.path), "--graph"]) == 0
        assert "failed pair" not in capsys.readouterr().out


def test_shards_of_event_graphs_merge_into_one_store(tmp_path, cfg):
    """A sharded build (--engine ray) joins shards with the tables' merge rules: ids shifted, graphs intact."""
    from membox_local.execution.merge import merge_stores
    from membox_local.memory import open_store

    c = ew_config(cfg)
    want, shards = {}, []
    for conv in ("a", "b"):
        with Memory(tmp_path / conv, c, backend=scripted_backend(), embedder=FakeEmbedder()) as mem:
            mem.add(script_messages(conv), seal=True)
            want[conv] = canonical(mem.store, conv)
        shards.append(tmp_path / conv / "memory.db")
    merge_stores(tmp_path / "merged.db", shards)
    (tmp_path / "joined").mkdir()
    (tmp_path / "merged.db").rename(tmp_path / "joined" / "memory.db")
    store = open_store(tmp_path / "joined")
    try:
        assert {conv: canonical(store, conv) for conv in want} == want
    finally:
        store.close()


# ---- forgetting and changing --------------------------------------------------------------------
def test_forgetting_deletes_what_was_derived_and_the_next_build_redoes_the_rest(ew):
    from membox_local.store import text_key

    ew.add(script_messages(), seal=True)
    ew.context("Where did Ben run the marathon?")
    s = ew.store
    gone = s.ew_events_of_pairs(s.ew_pairs_touching(CONV, ["m4"]))
    assert [e.text for e in gone] == ["Ana's grey cat Pepper went missing"]
    keys = {text_key(e.text) for e in gone}
    assert keys <= {r[0] for r in s.db.execute("SELECT key FROM embeddings")}

    n = ew.forget(CONV, ["m4"])

    assert n["ew_events"] == 1 and n["ew_summaries"] == 1 and n["ew_pairs_to_extract"] == 1  # m5, after m4
    assert not any("missing" in e.text for e in s.ew_events(CONV))
    assert not keys & {r[0] for r in s.db.execute("SELECT key FROM embeddings")}
    assert "m4" not in s.ew_pairs(CONV) and "m5" not in s.ew_pairs(CONV)
    assert [r["session"] for r in s.ew_summaries(CONV)] == ["1", "3"]
    assert s.ew_counts(CONV)["ew_events_unwoven"] == 0  # the graph was replayed from the events left
    assert not any(r["kind"] == "temporal" for r in s.ew_edges(CONV))  # the 7 May link went with the event
    assert ew.has_work()
    ew.add([], seal=True)
    assert s.ew_pairs(CONV)["m5"]["previous_id"] == ""  # m5 opens session 2 now
    assert sorted(r["session"] for r in s.ew_summaries(CONV)) == ["1", "2", "3"] and not ew.has_work()
    with Memory(ew.path.parent / "fresh", ew.config, backend=scripted_backend(), embedder=FakeEmbedder()) as fresh:
        fresh.add([m for m in script_messages() if m.message_id != "m4"], seal=True)
        assert canonical(fresh.store) == canonical(s)  # as if m4 had never been said


def test_updating_a_message_extracts_its_pairs_again(ew):
    ew.add(script_messages(), seal=True)
    n = ew.update(CONV, "m7", "I ran the Porto marathon last Sunday in four hours.")
    assert n["ew_events"] == 1 and n["ew_pairs_to_extract"] == 2  # m7's own pair and m8's (m7 was before it)
    ew.backend.responder.events["I ran the Porto marathon last Sunday in four hours."] = \
        [("Ben ran the Porto marathon in four hours", "last Sunday")]
    ew.add([], seal=True)
    texts = [e.text for e in ew.store.ew_events(CONV)]
    assert "Ben ran the Porto marathon in four hours" in texts and not any("Lisbon marathon in four" in t
                                                                           for t in texts)


def test_forgetting_a_whole_conversation_leaves_the_others(ew):
    ew.add(script_messages(), seal=True)
    ew.add(script_messages("other"), seal=True)
    kept = canonical(ew.store, "other")
    n = ew.forget(CONV)
    assert n["ew_events"] == 6 and n["ew_nodes"] == 5
    for table in ("ew_pairs", "ew_events", "ew_nodes", "ew_edges", "ew_updates", "ew_summaries"):
        assert ew.store.db.execute(f"SELECT COUNT(*) FROM {table} WHERE conversation_id=?", (CONV,)).fetchone()[0] == 0
    assert canonical(ew.store, "other") == kept


# ---- retrieval ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["event-graph", "event-graph-boxes"])
@pytest.mark.parametrize("budget", [15, 40, 120, 400, 5000])
def test_modes_stay_inside_the_budget(ew, mode, budget):
    ew.add(script_messages(), seal=True)
    for q in ("Which marathon did Ben run?", "What happened to Pepper the grey cat?", "tuna"):
        ctx = ew.context(q, mode=mode, budget_tokens=budget, k=10)
        assert ctx.tokens <= budget
        assert set(ctx.message_ids) <= {m.message_id for m in script_messages()}
        lines = [line for line in ctx.text.splitlines() if line.startswith("- [")]
        assert len(lines) == len(ctx.event_ids) and set(ctx.scores) == set(ctx.event_ids)
        if budget >= 120:
            assert ctx.text.startswith("Events:\n- [") and ctx.event_ids


def test_event_graph_shows_the_top_events_with_their_dated_source_turns(ew):
    ew.add(script_messages(), seal=True)
    ctx = ew.context("Which marathon did Ben run in four hours?", budget_tokens=400, k=1)
    assert ctx.text.splitlines()[1] == f"- [{S3}] Ben ran the Lisbon marathon in four hours (when: 14 May 2023)"
    assert ctx.message_ids == ["m7"] and f"[{S3}]\nBen: I ran the Lisbon marathon" in ctx.text
    ctx = ew.context("What happened to Pepper the grey cat?", budget_tokens=2000)
    assert ctx.text.index("Ana adopted a grey cat named Pepper") < ctx.text.index("went missing")  # time order
    assert sorted(ctx.event_ids) == [e.id for e in ew.store.ew_events(CONV)]  # k = 10: every event fits


def test_the_score_weights_are_config_values(ew):
    from membox_local.retrieval import make_retriever

    ew.add(script_messages(), seal=True)
    cfg = ew.config.eventweave
    cfg.recency_weight, cfg.relevance_weight, cfg.pagerank_weight = 1.0, 0.0, 0.0
    ranked = make_retriever("event-graph", ew).rank("anything at all", CONV)
    assert ranked[0][0].session == "3" and ranked[-1][0].session == "1"  # recency alone: the latest first
    assert ranked[0][1] == pytest.approx(1.0) and ranked[-1][1] == pytest.approx(2 ** (-2 / cfg.half_life))
    cfg.recency_weight, cfg.pagerank_weight = 0.0, 1.0
    ranked = make_retriever("event-graph", ew).rank("anything at all", CONV)
    assert ranked[0][1] == pytest.approx(1.0)  # the node of highest PageRank
    cfg.half_life_unit, cfg.recency_weight, cfg.pagerank_weight = "days", 1.0, 0.0
    ranked = make_retriever("event-graph", ew).rank("anything at all", CONV)
    assert ranked[-1][1] == pytest.approx(2 ** (-12 / cfg.half_life))  # 8 May to 20 May: 12 days


def test_event_graph_boxes_reads_the_events_inside_their_boxes(ew):
    ew.add(script_messages(), seal=True)
    ctx = ew.context("Which marathon did Ben run in four hours?", mode="event-graph-boxes", k=1, budget_tokens=400)
    box = next(b for b in ew.boxes(CONV) if any(m.message_id == "m7" for m in b.messages))
    assert box.id in ctx.box_ids and "m7" in ctx.message_ids
    assert set(ctx.message_ids) <= {m.message_id for b in ew.boxes(CONV) if b.id in ctx.box_ids for m in b.messages}
    assert "Ben ran the Lisbon marathon in four hours" in ctx.text


# ---- command line -------------------------------------------------------------------------------
def test_show_graph_and_export_graph(ew, tmp_path, capsys):
    import networkx as nx

    ew.add(script_messages(), seal=True)
    folder = ew.path
    ew.close()
    assert main(["show", str(folder), "--graph"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"conversation {CONV}: 5 event node(s), 6 event(s), 3 summary node(s)")
    assert f"- [{S1}] Ana adopted a grey cat named Pepper (when: 'yesterday' = 7 May 2023) {{m0}}" in out
    assert re.search(r"  sequential: n\d+->n\d+", out) and re.search(r"  temporal: n\d+--n\d+", out)
    assert re.search(r"  update: n\d+ moved in session 2 \(cosine 0\.9\d\d", out)

    path = tmp_path / "graph.graphml"
    assert main(["export-graph", str(folder), "--conversation", CONV, "-o", str(path)]) == 0
    g = nx.read_graphml(path)
    assert g.number_of_nodes() == 8 and (path.stat().st_mode & 0o077) == 0
    assert {d["kind"] for _, d in g.nodes(data=True)} == {"event", "summary"}
    assert {d["kind"] for *_, d in g.edges(data=True)} == {"sequential", "temporal", "reasoning", "summary", "update"}
    assert any(d["dates"] == "7 May 2023" for _, d in g.nodes(data=True))
    capsys.readouterr()
    assert main(["export-graph", str(folder), "-o", str(tmp_path / "g.json"), "--format", "json"]) == 0
    data = json.loads((tmp_path / "g.json").read_text())
    assert nx.node_link_graph(data, edges="edges").number_of_nodes() == 8
    capsys.readouterr()
    assert main(["export-graph", str(folder), "--conversation", "nobody", "-o", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no conversation 'nobody'" in err[0]


def test_show_graph_on_a_box_memory_says_there_is_none(memory, capsys):
    memory.add(script_messages(), seal=True)
    memory.close()
    assert main(["show", str(memory.path), "--graph"]) == 2
    assert "no event graph here" in capsys.readouterr().err


# ---- the real CPU stack -------------------------------------------------------------------------
@pytest.mark.integration
def test_the_demo_on_the_real_cpu_stack(tmp_path):
    """SmolLM2-135M on llama.cpp and MiniLM: structure only (a small model's events are not checked)."""
    import networkx as nx

    pytest.importorskip("llama_cpp")
    from membox_local.backends.router import StageRouter

    # the event graph's calls on an llama.cpp instance of their own (the same small model, another context size)
    cfg = load_config("cpu-fast", {"memory.systems": ["membox", "eventweave"], "retrieve.mode": "event-graph",
                                   "eventweave.llm": {"n_ctx": 3072}})
    msgs = load_jsonl(DEMO)
    with Memory(tmp_path / "real", cfg) as mem:
        mem.add(msgs, seal=True)
        assert isinstance(mem.backend, StageRouter) and mem.backend.routes["ew-extract"] is not mem.backend.default
        conv = msgs[0].conversation_id
        pairs = mem.store.ew_pairs(conv)
        assert set(pairs) == {m.message_id for m in msgs}
        assert all(r["status"] == "done" or r["error"] for r in pairs.values())  # never silent
        ec = cfg.eventweave
        events = mem.store.ew_events(conv)
        for e in events:
            assert len(e.text) <= ec.max_event_chars and len(e.when) <= ec.max_when_chars and e.node_id
            assert set(e.sources) <= set(pairs) and e.session_date
        assert mem.store.usage_by_stage(conv)["ew-extract"]["calls"] >= len(msgs)
        if events:
            assert nx.is_connected(networkx_graph(mem.store, conv).to_undirected())
        ctx = mem.context("Which race did Maya sign up for?", budget_tokens=300)
        assert ctx.tokens <= 300
        # the next-turn task on the real model: both conditions generated and scored
        from membox_local.evaluation.next_turn import generate, sample_targets

        targets = sample_targets(mem.store.messages(conv), 1)
        recs = generate(mem, conv, targets, mem.answer_backend, budget=200, max_tokens=24)
        assert [r["condition"] for r in recs] == ["none", "event-graph"]
        assert all(0 <= r["bleu4"] <= 100 and 0 <= r["rougeL"] <= 100 and r["seconds"] > 0 for r in recs)



@pytest.mark.parametrize("mode", ["event-graph", "event-graph-boxes"])
def test_backtracking_removes_connections_from_what_retrieval_reads_not_from_the_store(ew, mode):
    from membox_local.evaluation.backtracking import backtracking, connections, remove_connections

    ew.add(script_messages(), seal=True)
    graph = networkx_graph(ew.store, CONV, ranking=True)
    pairs = connections(graph)
    reduced, removed = remove_connections(graph, 0.5, seed=3)
    assert len(removed) == round(0.5 * len(pairs)) and remove_connections(graph, 0.5, seed=3)[1] == removed
    assert all(not reduced.has_edge(a, b) and not reduced.has_edge(b, a) for a, b in removed)
    assert len(connections(reduced)) == len(pairs) - len(removed)
    edges = len(ew.store.ew_edges(CONV))
    questions = [{"qid": i, "question": q, "evidence": ev} for i, (q, ev) in enumerate([
        ("What is the name of Ana's cat?", ["m0"]), ("Where did Ben run a marathon?", ["m7"]),
        ("What did Ana say?", []), ("How fast was Ben?", ["m7", "m8"])])]
    cfg = ew.config.eventweave
    cfg.pagerank_weight = 0.0  # retrieval reads the edges only through PageRank: nothing can change
    rows = backtracking(ew, CONV, questions, shares=(0.0, 0.5, 1.0), seeds=(0, 1), budget=60, mode=mode)
    assert [(r.share, r.seed) for r in rows] == [(s, d) for s in (0.0, 0.5, 1.0) for d in (0, 1)]
    assert rows[0].removed == 0 and rows[0].questions == 0  # nothing removed: no question is about a removal
    full = rows[-1]
    assert full.removed == full.connections == len(pairs) and full.questions == 3  # the one without evidence: out
    assert all(p["intact"] == p["removed"] for r in rows for p in r.per_question)
    cfg.relevance_weight, cfg.recency_weight, cfg.pagerank_weight = 0.0, 0.0, 1.0  # PageRank alone decides
    rows = backtracking(ew, CONV, questions, shares=(1.0,), budget=60, mode=mode)
    assert rows[0].questions == 3 and rows[0].recall_intact is not None
    assert len(ew.store.ew_edges(CONV)) == edges  # the stored graph is untouched


def test_next_turn_targets_and_a_memory_of_earlier_turns_only(ew):
    from membox_local.evaluation.next_turn import corpus_bleu, generate, sample_targets, scores

    msgs = script_messages()
    ew.add(msgs, seal=True)
    stored = ew.store.messages(CONV)
    targets = sample_targets(stored, n=10, recent=2, min_recent=1)
    # later sessions only, each with its session's turns before it
    assert [t.message.message_id for t in targets] == ["m5", "m6", "m8"]
    assert [m.message_id for m in targets[1].recent] == ["m4", "m5"]
    assert [t.message.message_id for t in sample_targets(stored, n=2, recent=2, min_recent=1)] == ["m5", "m6"]
    backend = FakeBackend()
    recs = generate(ew, CONV, targets, backend, budget=200)
    assert [(r["message_id"], r["condition"]) for r in recs] == [
        (m, c) for m in ("m5", "m6", "m8") for c in ("none", "event-graph")]
    prompts = [user for stage, user in backend.calls if stage == "next-turn"]
    assert len(prompts) == 6 and all(p.rstrip().endswith(":") for p in prompts)
    with_memory = dict(zip([(r["message_id"], r["condition"]) for r in recs], prompts))
    # the memory for m8 (session 3) holds session 1-2 events, never session 3's marathon result
    assert "Notes from earlier chats" in with_memory[("m8", "event-graph")]
    assert "four hours" not in with_memory[("m8", "event-graph")].split("The chat now:")[0]
    assert "Notes" not in with_memory[("m8", "none")]
    # for m5 the memory is session 1 only: the cat going missing (m4, shown as a recent turn) is not in the notes
    assert "missing" not in with_memory[("m5", "event-graph")].split("The chat now:")[0]
    assert all(r["memory_tokens"] > 0 for r in recs if r["condition"] == "event-graph")
    assert all(0 <= r["bleu4"] <= 100 and 0 <= r["rougeL"] <= 100 for r in recs)
    same = scores("Ben ran the marathon in four hours", "Ben ran the marathon in four hours")
    assert same == {"bleu4": pytest.approx(100.0), "rougeL": pytest.approx(100.0)}
    assert scores("cats", "the weather is nice today")["rougeL"] == 0.0
    assert corpus_bleu(["a b c d e"], ["a b c d e"]) == pytest.approx(100.0)
    with pytest.raises(ValueError, match="only 'none' and 'event-graph'"):
        generate(ew, CONV, targets, backend, conditions=("event-graph-boxes",))
    # the cut snapshot: earlier events and turns only, PageRank over their nodes
    from membox_local.evaluation.next_turn import earlier_snapshot

    snap = ew.system("eventweave").snapshot(CONV)
    cut = {m.message_id: m.seq for m in stored}["m7"]  # session 3's first turn
    part = earlier_snapshot(ew, CONV, snap, cut)
    assert part.events and all(e.seq < cut for e in part.events) and len(part.events) < len(snap.events)
    assert set(part.pagerank) == {e.node_id for e in part.events}
    assert all(m.seq < cut for m in part.messages.values()) and len(snap.events) == len(
        ew.system("eventweave").snapshot(CONV).events)  # the whole snapshot is left as it was


def test_the_event_graph_can_have_a_model_of_its_own(tmp_path, cfg, monkeypatch):
    """`[eventweave] llm`: its stages go to that model (a StageRouter), the box memory's to [llm]; an answering
    model that is the same is loaded once; another event-graph model is another build."""
    from membox_local.backends import router
    from membox_local.backends.router import StageRouter

    made: dict[str, FakeBackend] = {}

    def make(llm):
        b = scripted_backend()
        made[llm.model] = b
        return b

    monkeypatch.setattr("membox_local.backends.make_backend", make)
    c = ew_config(cfg, llm={"model": "qwen2.5-coder-1.5b", "n_threads": 1})
    c.answer.llm = {"model": "qwen2.5-coder-1.5b", "n_threads": 1}
    assert set(c.stage_llms()) == {"ew-extract", "ew-summary"}
    with Memory(tmp_path / "m", c, embedder=FakeEmbedder()) as mem:
        mem.add(script_messages(), seal=True)
        assert isinstance(mem.backend, StageRouter) and set(made) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
        small, large = made["qwen2.5-coder-0.5b"], made["qwen2.5-coder-1.5b"]
        assert {s for s, _ in large.calls} == {"ew-extract", "ew-summary"}
        assert "ew-extract" not in {s for s, _ in small.calls} and {"extract"} <= {s for s, _ in small.calls}
        assert mem.answer_backend is large  # the same model answers: loaded once
        settings = json.loads(mem.store.get_meta("build_settings"))
        assert settings["eventweave.llm"] == {"backend": "llamacpp", "model": "qwen2.5-coder-1.5b", "temperature": 0.0}
    other = ew_config(cfg, llm={"model": "qwen2.5-coder-0.5b"})
    with pytest.raises(StoreError, match="eventweave.llm"):
        with Memory(tmp_path / "m", other, embedder=FakeEmbedder()) as mem:
            mem.add([], seal=True)
    # threads are not a build setting: the same model with other threads continues the memory
    with Memory(tmp_path / "m", ew_config(cfg, llm={"model": "qwen2.5-coder-1.5b", "n_threads": 2}),
                embedder=FakeEmbedder()) as mem:
        mem.add([], seal=True)
    with pytest.raises(ConfigError, match=r"\[eventweave\] llm"):
        load_config("eventweave", {"eventweave.llm": {"modle": "x"}})
    assert router.llm_key(c.llm) != router.llm_key(c.stage_llms()["ew-extract"])


def test_a_stage_router_answers_in_request_order_and_closes_each_model_once():
    from membox_local.backends.base import Prompt, TextRequest
    from membox_local.backends.router import StageRouter

    class Closing(FakeBackend):
        closed = 0

        def close(self):
            self.closed += 1

    a, b = Closing(), Closing()
    r = StageRouter(a, {"ew-extract": b, "ew-summary": b})
    reqs = [TextRequest(Prompt("s", f"Memory:\nAna: answer {i}\n\nQuestion: answer {i}?"), stage)
            for i, stage in enumerate(["answer", "ew-extract", "answer", "ew-summary"])]
    out = r.text(reqs)
    assert [o.text for o in out] == ["answer 0", "answer 1", "answer 2", "answer 3"]  # in request order
    assert [u for _, u in a.calls] == [reqs[0].prompt.user, reqs[2].prompt.user]
    assert [s for s, _ in b.calls] == ["ew-extract", "ew-summary"]
    r.close()
    assert (a.closed, b.closed) == (1, 1)
