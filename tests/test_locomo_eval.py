"""`membox eval locomo` on a tiny LoCoMo-format file, with the deterministic doubles."""
from __future__ import annotations

import gzip
import json

import pytest

from membox_local.retrieval.baselines import window_tokens
from membox_local.retrieval.layout import Layout, chunk_session_messages, render_messages
from membox_local.evaluation.locomo import Settings, evidence_recall, markdown, parse_evidence, run
from membox_local.evaluation.scorers import metric_names
from membox_local.ingest import InputError
from membox_local.records import Message
from membox_local.retrieval import count_tokens, make_retriever

from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import benchmark_script

SESSION_1 = [
    ("Ann", "I planted cherry tomatoes in my garden this weekend"),
    ("Bob", "Cherry tomatoes need lots of sun in the garden"),
    ("Ann", "The garden gets sun all afternoon, the tomatoes love it"),
    ("Bob", "My car broke down on the highway yesterday"),
    ("Ann", "Oh no, did the car need a tow truck?"),
    ("Bob", "Yes, a tow truck took the car to the mechanic"),
]
SESSION_2 = [
    ("Ann", "I adopted a grey kitten named Pixel"),
    ("Bob", "Pixel is a lovely name for a kitten"),
    ("Ann", "Pixel sleeps on the piano every evening"),
    ("Bob", "I booked a trip to Lisbon for the spring"),
    ("Ann", "Lisbon in spring sounds wonderful, enjoy the trip"),
]
QA = [
    {"question": "What did Ann plant in her garden?", "answer": "cherry tomatoes", "evidence": ["D1:1"],
     "category": 4},
    {"question": "Where did the tow truck take Bob's car?", "answer": "the mechanic",
     "evidence": ["D1:6; D1:4"], "category": 1},
    {"question": "What is the kitten's name?", "answer": "Pixel", "evidence": ["D2:1", "D", "D9:9"],
     "category": 2},
    {"question": "Where is Bob travelling in spring?", "answer": "Lisbon; in spring", "evidence": ["D2:04"],
     "category": 3},
    {"question": "What did Bob plant?", "adversarial_answer": "tomatoes", "evidence": ["D1:1"], "category": 5},
]
MODES = ["compact", "turn-rag", "chunk-rag", "full-context"]


def _turns(rows, session):
    return [{"speaker": sp, "dia_id": f"D{session}:{i + 1}", "text": t} for i, (sp, t) in enumerate(rows)]


@pytest.fixture
def data(tmp_path):
    sample = {"sample_id": "tiny", "qa": QA, "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "1:00 pm on 8 May, 2023", "session_1": _turns(SESSION_1, 1),
        "session_2_date_time": "2:00 pm on 20 May, 2023", "session_2": _turns(SESSION_2, 2)}}
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps([sample]))
    return path


def _settings(tmp_path, data, **kw):
    base = dict(data=str(data), config="cpu", modes=MODES, k=[1, 3], budgets=[30, 60, 120],
                out=str(tmp_path / "run"), builds=str(tmp_path / "builds"))
    base.update(kw)
    return Settings(**base)


script = benchmark_script


def _event_graph_build(tmp_path, data):
    """The tiny conversation's eventweave build (boxes filed, the event graph in full) under tmp_path/builds."""
    run(_settings(tmp_path, data, config="eventweave", qa=False, modes=["event-graph"], build=False,
                  boxes_only=True), backend=FakeBackend(), embedder=FakeEmbedder(), progress=False)


def _graph_rows(db) -> dict:
    """Every row of a build's event-graph tables (what a measurement must leave as it was)."""
    import sqlite3

    con = sqlite3.connect(str(db))
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'ew_%'")]
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}"))) for t in tables}
    finally:
        con.close()


def _lines(tmp_path):
    return [json.loads(l) for l in (tmp_path / "run" / "questions.jsonl").read_text().splitlines()]


def test_run_writes_records_summary_and_tables(tmp_path, data):
    backend = FakeBackend()
    summary = run(_settings(tmp_path, data), backend=backend, embedder=FakeEmbedder(), progress=False)
    recs = _lines(tmp_path)
    assert len(recs) == 4 * len(MODES)  # categories 1-4 by default: the category-5 question is left out
    for r in recs:
        assert r["prediction"] and set(r["scores"]) == set(metric_names())
        assert r["context_tokens"] > 0 and r["message_ids"]
        assert set(r["recall"]) == {"k=1", "k=3", "budget=30", "budget=60", "budget=120"}
    compact = [r for r in recs if r["mode"] == "compact"]
    assert all(r["box_ids"] for r in compact)
    assert sum(1 for s, _ in backend.calls if s == "answer") == len(recs)
    md = (tmp_path / "run" / "summary.md").read_text()
    for name in metric_names():
        assert name in md
    for mode in MODES:
        assert f"| {mode} |" in md
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["modes"]["turn-rag"]["qa"]["n"] == 4
    b = summary["builds"]["tiny"]
    assert b["utterances"] == 11 and b["boxes"] >= 2 and b["by_stage"]["extract"]["calls"] == b["boxes"]
    assert b["time_by_stage"]["extract"]["calls"] == b["boxes"] and b["time_by_stage"]["extract"]["wall_s"] >= 0
    assert summary["evidence_issues"] == {"split": 1, "malformed": 1, "unknown": 1, "questions_without_evidence": 0}
    assert "Per conversation" not in md  # one conversation: the pooled table is its table
    two = {**summary, "per_conversation": {"tiny": summary["per_conversation"]["tiny"],
                                           "other": summary["per_conversation"]["tiny"]}}
    rows = [l for l in markdown(two).split("Per conversation")[1].split("Evidence ids")[0].splitlines() if l.startswith(("| tiny", "| other"))]
    turn = summary["per_conversation"]["tiny"]["turn-rag"]["recall"]
    assert len(rows) == 2 and "/".join(f"{100 * turn[f'budget={b}']:.1f}" for b in (30, 60, 120)) in rows[0]


def test_rerun_resumes_and_reuses_the_build(tmp_path, data):
    run(_settings(tmp_path, data), backend=FakeBackend(), embedder=FakeEmbedder(), progress=False)
    path = tmp_path / "run" / "questions.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-2]) + "\n")  # as if interrupted two questions before the end
    again = FakeBackend()
    run(_settings(tmp_path, data), backend=again, embedder=FakeEmbedder(), progress=False)
    stages = [s for s, _ in again.calls]
    assert stages == ["answer", "answer"]  # no extraction (build reused), only the two missing answers
    recs = _lines(tmp_path)
    assert len({(r["conversation"], r["mode"], r["qid"]) for r in recs}) == len(lines)


def test_no_qa_then_qa_answers_the_same_questions(tmp_path, data):
    backend = FakeBackend()
    s = run(_settings(tmp_path, data, qa=False), backend=backend, embedder=FakeEmbedder(), progress=False)
    assert all(r["prediction"] is None for r in _lines(tmp_path))
    assert s["modes"]["compact"]["qa"] is None
    assert not [c for c, _ in backend.calls if c == "answer"]
    s = run(_settings(tmp_path, data), backend=backend, embedder=FakeEmbedder(), progress=False)
    assert s["modes"]["compact"]["qa"]["n"] == 4


def test_other_settings_in_the_same_run_folder_are_refused(tmp_path, data):
    run(_settings(tmp_path, data, qa=False), backend=FakeBackend(), embedder=FakeEmbedder(), progress=False)
    with pytest.raises(InputError, match="other settings"):
        run(_settings(tmp_path, data, qa=False, budgets=[50]), backend=FakeBackend(), embedder=FakeEmbedder(),
            progress=False)


def test_budgets_are_respected_and_recall_matches_the_context(tmp_path, data):
    run(_settings(tmp_path, data, qa=False, categories=[1, 2, 3, 4, 5]), backend=FakeBackend(),
        embedder=FakeEmbedder(), progress=False)
    for r in _lines(tmp_path):
        for b in (30, 60, 120):
            assert r["tokens"][f"budget={b}"] <= b, (r["mode"], b)
        assert r["qa_recall"] == evidence_recall(r["evidence"], r["message_ids"])
    by = {(r["mode"], r["qid"]): r for r in _lines(tmp_path)}
    # full-context without a budget shows the whole (tiny) conversation; with 30 tokens only the end
    assert by[("full-context", 0)]["recall"]["k=1"] == 1.0
    assert by[("full-context", 0)]["recall"]["budget=30"] == 0.0
    assert by[("full-context", 3)]["recall"]["budget=60"] == 1.0  # D2:4 is the second-to-last message
    # "kitten's name": D2:2 (kitten, name) outranks the evidence D2:1 (kitten) under the bag-of-words double
    assert by[("turn-rag", 2)]["recall"]["k=1"] == 0.0 and by[("turn-rag", 2)]["recall"]["k=3"] == 1.0
    assert by[("turn-rag", 2)]["evidence"] == ["D2:1"]
    assert by[("turn-rag", 1)]["evidence"] == ["D1:6", "D1:4"]


def test_baseline_contexts_show_exactly_their_message_ids(tmp_path, data, cfg):
    from membox_local.evaluation.locomo import Shared, open_build
    from membox_local.ingest import load_locomo

    msgs = load_locomo(data)
    mem = open_build("tiny", msgs, cfg, tmp_path / "b", Shared(cfg, FakeBackend(), FakeEmbedder()))
    try:
        text_of = {m.message_id: m.render() for m in msgs}
        for mode in ("turn-rag", "chunk-rag", "full-context"):
            ctx = make_retriever(mode, mem).retrieve("Where did Bob go in spring with the trip?", "tiny", 3, 80)
            assert ctx.tokens <= 80 and ctx.tokens == count_tokens(ctx.text)
            shown = [line for line in ctx.text.splitlines() if line and not line.startswith("[")]
            assert shown == [text_of[i] for i in ctx.message_ids], mode
        turn = make_retriever("turn-rag", mem).retrieve("Lisbon trip in spring", "tiny", 1, 10**6)
        assert turn.message_ids == ["D2:4"] and turn.text.startswith("[2:00 pm on 20 May, 2023]")
    finally:
        mem.close()


def test_layout_counts_exactly_what_it_renders():
    ms = [Message("c", f"m{i}", "A", f"word number {i}, here", session=str(1 + i // 3), session_date=f"day {i // 3}",
                  seq=i) for i in range(7)]
    layout = Layout(10**6)
    for m in (ms[5], ms[0], ms[3], ms[1]):
        assert layout.try_add([m])
    assert layout.tokens == count_tokens(render_messages(layout.messages))
    assert layout.context().message_ids == ["m0", "m1", "m3", "m5"]
    small = Layout(layout.tokens - 1)
    assert small.try_add(ms[:2]) and not small.try_add([ms[3], ms[5]])


def test_chunks_stay_inside_a_session_and_near_the_word_size():
    ms = [Message("c", f"m{i}", "A", "one two three four five", session=str(1 + i // 5), seq=i) for i in range(10)]
    chunks = chunk_session_messages(ms, 12)
    assert [len(c) for c in chunks] == [2, 2, 1, 2, 2, 1]
    assert all(len({m.session for m in c}) == 1 for c in chunks)
    assert [len(c) for c in chunk_session_messages(ms, 0)] == [1] * 10


def test_parse_evidence_counts_each_problem():
    known = {"D1:1", "D1:2", "D8:6", "D9:17", "D3:5"}
    ids, issues = parse_evidence(["D8:6; D9:17", "D", "D:11:26", "D3:05", "D10:19", "D1:1", "D1:1"], known)
    assert ids == ["D8:6", "D9:17", "D3:5", "D1:1"]
    assert issues == {"split": 1, "malformed": 2, "unknown": 1}
    assert evidence_recall([], ["D1:1"]) is None
    assert evidence_recall(["D1:1", "D1:2"], ["D1:2", "D5:5"]) == 0.5


def test_window_tokens_leave_room_for_the_prompt(cfg):
    assert 0 < window_tokens(cfg) < cfg.llm.n_ctx - cfg.answer.max_tokens


def test_a_build_in_progress_elsewhere_is_not_built_twice(tmp_path, data, cfg):
    import fcntl

    from membox_local.evaluation.locomo import Shared, build_dir, open_build
    from membox_local.ingest import load_locomo

    folder = build_dir(tmp_path / "b", cfg, "tiny")
    folder.mkdir(parents=True)
    with open(folder / "build.lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as another process building it
        from membox_local.store import StoreBusy

        with pytest.raises(StoreBusy, match="is in use by another process"):  # it wrote no pid into the file
            open_build("tiny", load_locomo(data), cfg, tmp_path / "b", Shared(cfg, FakeBackend(), FakeEmbedder()))


def test_no_build_runs_the_message_baselines_without_a_model(tmp_path, data):
    backend = FakeBackend()
    s = run(_settings(tmp_path, data, qa=False, modes=[], build=False), backend=backend, embedder=FakeEmbedder(),
            progress=False)
    assert sorted(s["modes"]) == ["chunk-rag", "full-context", "session-rag", "turn-rag"] and s["builds"] == {}
    assert backend.calls == []
    with pytest.raises(InputError, match="need a built memory"):
        run(_settings(tmp_path, data, qa=False, modes=["compact"], build=False), backend=backend,
            embedder=FakeEmbedder(), progress=False)


def test_a_session_prefix_is_its_own_build_with_only_its_questions(tmp_path, data):
    s = run(_settings(tmp_path, data, qa=False, sessions=1), backend=FakeBackend(), embedder=FakeEmbedder(),
            progress=False)
    recs = _lines(tmp_path)
    assert {r["qid"] for r in recs} == {0, 1}  # evidence in session 1 only
    assert all(m.startswith("D1:") for r in recs for m in r["message_ids"])
    assert s["builds"]["tiny"]["utterances"] == 6
    assert (tmp_path / "builds" / "cpu" / "tiny-s1" / "memory.db").exists()


def test_saved_results_pool_like_one_run_and_hold_no_dataset_text(tmp_path, data):
    from membox_local.evaluation.results import pooled_summary, save_results

    samples = json.loads(data.read_text())
    samples.append({**samples[0], "sample_id": "tiny2"})
    data.write_text(json.dumps(samples))
    kw = dict(backend=FakeBackend(), embedder=FakeEmbedder(), progress=False)
    for conv in ("tiny", "tiny2"):  # measured on different days, each in its own run folder
        run(_settings(tmp_path, data, conversations=[conv], out=str(tmp_path / conv)), **kw)
    results = tmp_path / "results" / "locomo.jsonl.gz"
    save_results([tmp_path / "tiny"], results, "2026-11-29")
    save_results([tmp_path / "tiny2"], results, "2026-11-30")
    save_results([tmp_path / "tiny2"], results, "2026-12-01")  # saving again replaces, never doubles
    pooled = pooled_summary(results, data)
    direct = run(_settings(tmp_path, data, conversations=["tiny", "tiny2"], out=str(tmp_path / "both")), **kw)
    assert pooled["modes"].keys() == direct["modes"].keys()
    for mode in MODES:
        assert pooled["modes"][mode]["recall"] == direct["modes"][mode]["recall"]
        assert pooled["modes"][mode]["qa"]["overall"] == direct["modes"][mode]["qa"]["overall"]
    assert (pooled["settings"]["qa_k"], pooled["settings"]["qa_budget"]) == (direct["settings"]["qa_k"],
                                                                             direct["settings"]["qa_budget"])
    assert markdown(pooled).split("## QA")[1].splitlines()[0] == markdown(direct).split("## QA")[1].splitlines()[0]
    assert pooled["evidence_issues"] == direct["evidence_issues"]
    assert pooled["builds"].keys() == {"tiny", "tiny2"}
    assert pooled["dates"] == {"tiny": ["2026-11-29"], "tiny2": ["2026-11-30"]}  # unchanged records keep their date
    text = gzip.decompress(results.read_bytes()).decode()
    assert len(text.splitlines()) == 2 * 4 * len(MODES)
    text += (tmp_path / "results" / "locomo.json").read_text()
    for phrase in ("cherry tomatoes", "What did Ann plant", "Pixel", "Lisbon"):
        assert phrase not in text
    run(_settings(tmp_path, data, conversations=["tiny"], budgets=[50], out=str(tmp_path / "other")), **kw)
    with pytest.raises(InputError, match="settings .* differ"):
        save_results([tmp_path / "other"], results, "2026-11-30")
    with pytest.raises(InputError, match="no records of \\['nope'\\]"):
        pooled_summary(results, data, conversations=["nope"])
    run(_settings(tmp_path, data, conversations=["tiny2"], qa_budget=77, out=str(tmp_path / "qa77")), **kw)
    mixed = tmp_path / "results" / "mixed.jsonl.gz"
    save_results([tmp_path / "tiny", tmp_path / "qa77"], mixed, "2026-11-30")
    with pytest.raises(InputError, match="different k and budgets"):
        pooled_summary(mixed, data)


def test_answering_models_side_by_side_answer_the_same_contexts(tmp_path, data):
    small, large = FakeBackend(), FakeBackend()
    s = _settings(tmp_path, data, modes=["turn-rag", "chunk-rag"], build=False, stride=2,
                  answer_models=["small", "large"])
    summary = run(s, embedder=FakeEmbedder(), progress=False, answer_backends={"small": small, "large": large})
    recs = _lines(tmp_path)
    assert {r["qid"] for r in recs} == {0, 2}  # every second question of categories 1-4
    assert len(recs) == 2 * 2 * 2 and {r["answerer"] for r in recs} == {"small", "large"}
    by = {(r["mode"], r["qid"], r["answerer"]): r for r in recs}
    for (mode, qid, _), r in by.items():  # one retrieval, the same context for both models
        assert r["message_ids"] == by[(mode, qid, "small")]["message_ids"]
    assert len([c for c in small.calls if c[0] == "answer"]) == len([c for c in large.calls if c[0] == "answer"]) == 4
    assert set(summary["modes"]) == {"turn-rag · small", "turn-rag · large", "chunk-rag · small", "chunk-rag · large"}
    assert "| turn-rag · large |" in markdown(summary)
    # a rerun with one more model answers only what is missing, on the same records
    extra = FakeBackend()
    run(_settings(tmp_path, data, modes=["turn-rag", "chunk-rag"], build=False, stride=2,
                  answer_models=["small", "large", "extra"]), embedder=FakeEmbedder(), progress=False,
        answer_backends={"small": small, "large": large, "extra": extra})
    assert len([c for c in extra.calls if c[0] == "answer"]) == 4 and len(small.calls) == 4


def test_run_overrides_keep_the_build_and_change_what_is_shown(tmp_path, data):
    base = dict(modes=["turn-rag"], build=False, categories=[4])
    run(_settings(tmp_path, data, **base, out=str(tmp_path / "on")), backend=FakeBackend(),
        embedder=FakeEmbedder(), progress=False)
    run(_settings(tmp_path, data, **base, out=str(tmp_path / "off"), overrides={"retrieve.resolve_dates": False}),
        backend=FakeBackend(), embedder=FakeEmbedder(), progress=False)
    assert (tmp_path / "builds" / "cpu" / "tiny").is_dir() and len(list((tmp_path / "builds").iterdir())) == 1


def test_boxes_only_builds_the_other_systems_in_full_on_the_same_boxes(tmp_path, data):
    """--boxes-only with the eventweave config: boxes without box records, the event graph built in full, so the
    event-graph modes and box-hits run side by side on the same boxes (no box extraction, no Weaver)."""
    backend = FakeBackend()
    s = run(_settings(tmp_path, data, config="eventweave", qa=False, modes=[], build=False, boxes_only=True),
            backend=backend, embedder=FakeEmbedder(), progress=False)
    assert {"box-hits", "event-graph", "event-graph-boxes", "turn-rag"} <= set(s["modes"])
    assert "compact" not in s["modes"] and "trace" not in s["modes"]
    stages = {stage for stage, _ in backend.calls}
    assert "ew-extract" in stages and not stages & {"extract", "link", "trace-init"}
    assert sum(stage == "ew-extract" for stage, _ in backend.calls) == 11  # one call per message
    recs = _lines(tmp_path)
    assert {r["mode"] for r in recs} == set(s["modes"])
    assert all(r["recall"] for r in recs if r["mode"].startswith("event-graph"))
    # a second run reuses both builds: no model call at all
    again = FakeBackend()
    run(_settings(tmp_path, data, config="eventweave", qa=False, modes=[], build=False, boxes_only=True),
        backend=again, embedder=FakeEmbedder(), progress=False)
    assert [c for c in again.calls if c[0] != "score"] == []
    with pytest.raises(InputError, match="need a built memory"):
        run(_settings(tmp_path, data, config="eventweave", qa=False, modes=["compact"], build=False,
                      boxes_only=True, out=str(tmp_path / "run2")), backend=backend, embedder=FakeEmbedder(),
            progress=False)


def test_answer_models_report_saves_only_the_questions_every_model_answered(tmp_path, data, capsys):
    import gzip
    am = script("answer_models")
    backends = {"small": FakeBackend(), "large": FakeBackend()}
    run(_settings(tmp_path, data, modes=["box-hits"], build=False, boxes_only=True, answer_models=["small"],
                  out=str(tmp_path / "a")), embedder=FakeEmbedder(), progress=False, answer_backends=backends)
    run(_settings(tmp_path, data, modes=["box-hits"], build=False, boxes_only=True, answer_models=["large"],
                  stride=2, out=str(tmp_path / "b")), embedder=FakeEmbedder(), progress=False, answer_backends=backends)
    saved = tmp_path / "answers.jsonl.gz"
    assert am.main(["report", "--data", str(data), "--runs", str(tmp_path / "a"), str(tmp_path / "b"),
                    "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "2 questions answered by every model" in out and "saved 4 answers" in out
    recs = [json.loads(l) for l in gzip.decompress(saved.read_bytes()).decode().splitlines()]
    assert sorted((r["qid"], r["answerer"]) for r in recs) == [(0, "large"), (0, "small"), (2, "large"),
                                                                (2, "small")]
    assert all("question" not in r and "prediction" not in r and r["date"] for r in recs)




