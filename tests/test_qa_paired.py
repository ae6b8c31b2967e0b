"""membox_local/evaluation/paired.py (benchmarks/qa_paired.py): arms compared on the questions every one answered; and
evaluation/scale.py (benchmarks/scale.py) on a tiny pool."""
from __future__ import annotations

import json

from conftest import benchmark_script


def _run(folder, mode, budget, answered, overrides=None):
    folder.mkdir()
    lines = []
    for qid, f1 in answered:
        lines.append({"conversation": "c", "qid": qid, "category": 2, "mode": mode, "qa_budget": budget,
                      "context_tokens": budget - 3, "qa_recall": 1.0, "answer_s": 2.0, "prediction": f"p{f1}",
                      "scores": {"locomo_f1": f1, "mem0_f1": f1, "mem0_bleu1": f1 / 2}})
    if overrides is not None:  # what `membox eval locomo --set` leaves in the run's settings
        (folder / "settings.json").write_text(json.dumps({"fixed": {"qa_budget": budget, "overrides": overrides}}))
    lines.append({"conversation": "c", "qid": 99, "category": 2, "mode": mode, "qa_budget": budget,
                  "context_tokens": 0, "scores": None})  # retrieval only: not an answer
    (folder / "questions.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    return folder


def test_arms_are_scored_on_the_questions_all_of_them_answered(tmp_path):
    qp = benchmark_script("qa_paired")
    a = _run(tmp_path / "a", "box-hits", 500, [(1, 0.5), (2, 1.0), (3, 0.0)])
    b = _run(tmp_path / "b", "box-hits", 1000, [(1, 1.0), (2, 1.0)])  # stopped before question 3
    common, table = qp.paired(qp.arms([a, b]))
    assert common == [("c", 1), ("c", 2)]
    assert table["box-hits@500"]["locomo_f1"] == 75.0 and table["box-hits@1000"]["locomo_f1"] == 100.0
    assert table["box-hits@500"]["questions"] == 2 and table["box-hits@1000"]["context_tokens"] == 997
    diffs = qp.differences(qp.arms([a, b]), common)  # question by question: -50 and 0
    assert diffs["box-hits@500 - box-hits@1000"] == {"mean": -25.0, "se": 25.0, "same_answers": 1}
    out = tmp_path / "out.json"
    assert qp.main([str(a), str(b), "--save", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert [q["qid"] for q in saved["per_question"]] == [1, 2] and "question" not in saved["per_question"][0]
    assert saved["differences"] == diffs


def test_runs_that_differ_only_in_set_keys_are_two_arms_and_say_how_many_answers_are_the_same(tmp_path):
    qp = benchmark_script("qa_paired")
    off = _run(tmp_path / "off", "box-hits", 1000, [(1, 0.5), (2, 1.0)], {"llm.flash_attn": False})
    on = _run(tmp_path / "on", "box-hits", 1000, [(1, 0.5), (2, 0.0)], {"llm.flash_attn": True})
    by_arm = qp.arms([off, on])
    assert set(by_arm) == {"box-hits@1000 llm.flash_attn=false", "box-hits@1000 llm.flash_attn=true"}
    common, _ = qp.paired(by_arm)
    diff = qp.differences(by_arm, common)["box-hits@1000 llm.flash_attn=false - box-hits@1000 llm.flash_attn=true"]
    assert diff["mean"] == 50.0 and diff["same_answers"] == 1


def test_a_new_run_is_paired_with_a_saved_result(tmp_path):
    qp = benchmark_script("qa_paired")
    a = _run(tmp_path / "a", "box-hits", 500, [(1, 0.5), (2, 1.0), (3, 0.0)])
    b = _run(tmp_path / "b", "box-hits", 1000, [(1, 1.0), (2, 1.0)])
    saved = tmp_path / "saved.json"
    assert qp.main([str(b), "--save", str(saved)]) == 0
    out = tmp_path / "out.json"
    assert qp.main([str(a), "--saved", str(saved), "--save", str(out)]) == 0
    result = json.loads(out.read_text())
    arm = next(k for k in result["arms"] if k.startswith("box-hits@1000 (saved "))
    assert result["arms"][arm]["questions"] == 2 and result["arms"][arm]["locomo_f1"] == 100.0
    assert result["differences"][f"box-hits@500 - {arm}"] == {"mean": -25.0, "se": 25.0, "same_answers": 0}


def test_the_scale_curve_grows_one_scope_and_times_it(tmp_path):
    """membox_local/evaluation/scale.py (benchmarks/scale.py) on a tiny pool: the sizes, the writes, the timings."""
    from membox_local.config import load_config
    from membox_local.evaluation.scale import CONV, PER_BOX, grow, measure
    from membox_local.memory import Memory
    from membox_local.testing import FakeEmbedder

    cfg = load_config("cpu-ce")
    cfg.retrieve.evidence_model = ""
    pool = [("Ann", "I planted tomatoes in the garden"), ("Bob", "My car broke down on the highway")]
    mem = Memory(tmp_path / "m", cfg, embedder=FakeEmbedder())
    try:
        assert grow(mem, pool, 0, 40) > 0 and grow(mem, pool, 40, 64) > 0
        assert len(mem.store.messages(CONV)) == 64 and len(mem.boxes(CONV)) == 64 // PER_BOX
        row = measure(tmp_path / "m", cfg, ["Who planted tomatoes?", "What broke down?", "Where?"],
                      lambda: grow(mem, pool, 64, 80))
    finally:
        mem.close()
    assert row["context_warm_p50_ms"] > 0 and row["search_warm_p95_ms"] >= row["search_warm_p50_ms"]
    assert row["context_after_write_ms"] > 0
    with Memory(tmp_path / "many", cfg, embedder=FakeEmbedder()) as mem:  # a folder of several: a session each in turn
        grow(mem, pool, 0, 120, conversations=3)
        assert [len(mem.store.messages(c)) for c in mem.store.conversations()] == [40, 40, 40]
        assert all({m.conversation_id for m in b.messages} == {b.conversation_id} for b in mem.boxes(CONV + "-0"))


def test_runs_answered_with_each_conversations_fold_model_are_one_arm():
    """A conversation answered with the evidence model fitted without it (`membox fit evidence`'s fold models) is
    the same arm as another conversation answered with its own fold's model: "out-of-fold"."""
    from membox_local.evaluation.paired import out_of_fold

    assert out_of_fold("/w/runs/evidence/evidence-fold0.safetensors") == out_of_fold("runs/evidence/evidence-fold2.safetensors")
    assert out_of_fold("/w/runs/evidence/evidence-fold0.safetensors") == "out-of-fold"
    assert out_of_fold("content/evidence-locomo-all-minilm-l6-v2.safetensors") != "out-of-fold"
    assert out_of_fold(16.0) == "16.0"
