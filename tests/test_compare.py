"""`membox compare` on the deterministic doubles: identical sides agree fully; a different judge shows."""
from __future__ import annotations

import json

from membox_local.testing import FakeBackend, FakeEmbedder
from membox_local.cli import build_parser
from membox_local.compare import boundaries, compare, jaccard, to_markdown
from membox_local.ingest import load_messages
from membox_local.records import Box, Message

from conftest import DEMO


def test_jaccard_and_boundaries():
    assert jaccard(["Cat", "dog "], ["cat", "bird"]) == 1 / 3 and jaccard([], []) == 1.0
    boxes = [Box(i, "c", "1", "", [Message("c", f"m{j}", "A", "x") for j in range(n)]) for i, n in enumerate([3, 2, 4])]
    assert boundaries(boxes) == [3, 5]


def test_identical_configs_agree(tmp_path, cfg):
    msgs = load_messages(DEMO)
    questions = {"maya-tom": [{"question": "Which race did Maya sign up for?", "answer": "Lisbon half marathon",
                               "category": 4}]}
    r = compare(cfg, cfg, msgs, tmp_path, questions, k=3, backends=(FakeBackend(), FakeBackend()),
                embedders=(FakeEmbedder(), FakeEmbedder()), asks=["Who is Pepper?"])
    row = r["conversations"]["maya-tom"]
    assert row["failed_boxes"] == {"A": 0, "B": 0}
    [asked] = row["answers"]
    assert asked["A"] == asked["B"] and asked["f1_between"] == 1.0
    assert row["labels"]["agreement"] == 1.0
    assert row["segmentation"]["pk"] == 0.0 and row["segmentation"]["wd"] == 0.0
    assert row["boxes"]["A"] == row["boxes"]["B"] == row["extraction"]["boxes_same_span"]
    assert row["extraction"]["keyword_jaccard"] == 1.0 and row["retrieval"]["shown_message_jaccard"] == 1.0
    assert row["qa_f1"]["A"] == row["qa_f1"]["B"]
    assert r["cost"]["A"]["llm_usage"]["extract"]["calls"] == row["boxes"]["A"]
    assert r["cost"]["A"]["build_time"]["extract"]["calls"] == row["boxes"]["A"]  # seconds by stage kept too
    md = to_markdown(r)
    assert "| maya-tom | 1.000 | 0.000 |" in md and "| A |" in md and "| maya-tom | Who is Pepper? |" in md
    json.dumps(r)


def test_a_different_judge_is_measured(tmp_path, cfg):
    import copy

    msgs = load_messages(DEMO)
    cfg_b = copy.deepcopy(cfg)
    cfg_b.loom.threshold = 0.9  # seals far more often
    r = compare(cfg, cfg_b, msgs, tmp_path, backends=(FakeBackend(), FakeBackend()),
                embedders=(FakeEmbedder(), FakeEmbedder()))
    row = r["conversations"]["maya-tom"]
    assert row["boxes"]["B"] > row["boxes"]["A"]
    assert row["labels"]["agreement"] < 1.0 and row["segmentation"]["wd"] > 0.0


def test_compare_is_a_cli_command():
    args = build_parser().parse_args(["compare", "cpu", "cpu-fast", "--data", "x.jsonl", "--questions", "0"])
    assert args.func.__name__ == "cmd_compare" and args.questions == 0
