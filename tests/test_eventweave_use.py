"""EventWeave (systems/eventweave.py), using the graph: forgetting and changing messages, the retrieval modes within
their budget, `membox show --graph` and `membox export-graph`, backtracking, next-turn targets, a model of its own for
the graph's calls, and one build on the real CPU stack. Building it: tests/test_eventweave.py."""
from __future__ import annotations

import json
import re

import pytest

from membox_local.cli import main
from membox_local.config import ConfigError, load_config
from membox_local.ingest import load_jsonl
from membox_local.memory import Memory
from membox_local.store import StoreError
from membox_local.systems.eventweave_graph import networkx_graph
from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import DEMO
from eventweave_doubles import CONV, S1, S3, canonical, ew_config, script_messages, scripted_backend


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
    cfg = load_config("cpu-fast", {"memory.systems": ["eventweave"], "retrieve.mode": "event-graph",
                                   "eventweave.llm": {"n_ctx": 3072}})
    demo = load_jsonl(DEMO)
    msgs = [m for s in ("1", "2") for m in [x for x in demo if x.session == s][:4]]  # 4 lines of two sessions each
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
