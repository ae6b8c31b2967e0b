"""EventWeave (systems/eventweave.py), building the graph: the config's choice of systems, extraction per turn pair,
the graph's operations (clusters, edges, updates, summaries, bounded memory), resuming and idempotence. Through the
deterministic doubles (tests/eventweave_doubles.py: the FakeBackend's `responder` scripts the extraction); reading,
changing and showing the graph, and the real CPU stack: tests/test_eventweave_use.py."""
from __future__ import annotations

import copy
import json
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
from eventweave_doubles import (CONV, S1, SCRIPT, Script, canonical, ew_config, new_turn, script_messages,
                                scripted_backend, stage_calls)


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
        assert mem.store.get_meta("schema_version.eventweave") == "3"
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
        assert mem.store.get_meta("schema_version.eventweave") == "3"
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
