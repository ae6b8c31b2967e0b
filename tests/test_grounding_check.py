"""benchmarks/grounding_check.py's counting, on made-up rows (the script itself reads the dev data)."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import grounding_check as gc  # noqa: E402

ROWS = [{"id": "conv-1:0", "abstention": False, "unmentioned": {"box-hits": ["Vivaldi"], "turn-rag": []}},
        {"id": "conv-1:3", "abstention": False, "unmentioned": {"box-hits": [], "turn-rag": ["Rome"]}},
        {"id": "q_abs", "abstention": True, "unmentioned": {"box-hits": ["Seattle"], "turn-rag": ["Seattle"]}}]


def test_counts_split_answerable_from_abstention():
    assert gc.check(ROWS, "box-hits") == {"questions": 3, "answerable": 2, "abstention": 1, "fired_answerable": 1,
                                          "fired_abstention": 1}
    assert gc.check(ROWS, "turn-rag")["fired_answerable"] == 1


def test_locomo_cost_sums_the_f1_the_guard_would_take_over(tmp_path):
    path = tmp_path / "answers.jsonl.gz"
    recs = [{"answerer": "qwen2.5-coder-1.5b", "conversation": "conv-1", "qid": 0, "scores": {"locomo_f1": 0.5}},
            {"answerer": "qwen2.5-coder-1.5b", "conversation": "conv-1", "qid": 3, "scores": {"locomo_f1": 1.0}},
            {"answerer": "qwen2.5-coder-0.5b", "conversation": "conv-1", "qid": 0, "scores": {"locomo_f1": 1.0}}]
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in recs))
    cost = gc.locomo_cost(ROWS, path)
    assert cost["questions"] == 2 and cost["fired"] == 1 and cost["points_lost"] == 25.0  # 0.5 of 2 answers
