"""The build-speed scripts' own logic (benchmarks/build_speed.py, json_levers.py, link_precision.py), on test
doubles: the session prefix, the replayed requests (extraction, then a link request, alternating, each valid for its
schema's bounds), the refusal of a used work folder, the Markdown table, the links woven again and graded. The levers
themselves are tested on the real engine in tests/test_backend_details.py."""
from __future__ import annotations

import pytest

from membox_local.records import Message

from conftest import benchmark_script

script = benchmark_script


def test_prefix_keeps_the_first_sessions_in_the_order_they_appear():
    prefix = script("build_speed").prefix
    msgs = [Message("c", str(i), "A", "x", session=s) for i, s in enumerate(["2", "2", "10", "1", "10", "3"])]
    assert [m.message_id for m in prefix(msgs, 2)] == ["0", "1", "2", "4"]  # sessions "2" and "10", as they came
    assert prefix(msgs, 0) == msgs


def test_build_speed_refuses_a_work_folder_that_holds_memories(tmp_path, capsys):
    (tmp_path / "conv-26").mkdir()
    (tmp_path / "conv-26" / "memory.db").write_text("")
    with pytest.raises(SystemExit):
        script("build_speed").main(["--workdir", str(tmp_path), "--conversations", "conv-26"])
    assert "holds memories already" in capsys.readouterr().err


def test_build_speed_markdown_reports_each_conversation_and_the_ratio():
    md = script("build_speed").markdown({
        "date": "2026-12-03", "machine": "x86_64, 2 cores", "config": "cpu", "before": ["llm.stage_contexts=false"],
        "rows": [{"conversation": "conv-26", "messages": 58, "before_s": 500.0, "after_s": 250.0,
                  "before_msg_per_s": 0.116, "after_msg_per_s": 0.232, "ratio": 2.0, "labels": {"agreement": 1.0},
                  "segmentation": {"pk": 0.0}, "extraction": {"event_jaccard": 0.9}, "failed_boxes": {"A": 0, "B": 1}}],
        "total": {"messages": 58, "before_s": 500.0, "after_s": 250.0, "ratio": 2.0}})
    assert "| conv-26 | 58 | 500 | 250 | 0.116 | 0.232 | 2.0 | 1.0 | 0.0 | 0.9 | 0/1 |" in md
    assert "**2.0**" in md and "before = llm.stage_contexts=false" in md


def test_build_speed_reports_tokens_per_message_by_stage_and_the_load():
    bs = script("build_speed")
    usage = {"judge": {"calls": 20, "prompt_tokens": 1460, "completion_tokens": 0},
             "link": {"calls": 2, "prompt_tokens": 232, "completion_tokens": 8}}
    pm = bs.per_message(usage, 10)
    assert pm["judge"] == {"calls": 2.0, "prompt_tokens": 146.0, "completion_tokens": 0.0}
    assert pm["all"] == {"calls": 2.2, "prompt_tokens": 169.2, "completion_tokens": 0.8}
    row = {"conversation": "conv-26", "messages": 10, "before_s": 25.0, "after_s": 5.0, "before_msg_per_s": 0.4,
           "after_msg_per_s": 2.0, "ratio": 5.0, "labels": {}, "segmentation": {}, "extraction": {},
           "failed_boxes": {"A": 0, "B": 0}, "before_s_per_msg": 2.5, "after_s_per_msg": 0.5,
           "load_1min": {"start": 0.1, "end": 1.9}, "per_message": {"before": pm, "after": bs.per_message({}, 10)}}
    md = bs.markdown({"date": "2026-12-04", "machine": "x86_64, 2 cores", "config": "cpu-ce", "before_config": "cpu",
                      "before": [], "rows": [row], "total": {"messages": 10, "before_s": 25.0, "after_s": 5.0,
                                                             "ratio": 5.0}})
    assert "config cpu-ce; before = cpu\n" in md
    assert "| conv-26 | before | 2.5 | 0.1-1.9 | 146 + 0 | 0 | 23.2 + 0.8 | 0 | 169.2 | 2.2 |" in md
    assert "| conv-26 | after | 0.5 | 0.1-1.9 | 0 | 0 | 0 | 0 | 0 | 0 |" in md
    # tokens read (sent less those kept from the KV cache), where every stage said
    read = {"extract": {"calls": 2, "prompt_tokens": 800, "completion_tokens": 100, "read_tokens": 500},
            "link": {"calls": 2, "prompt_tokens": 600, "completion_tokens": 4, "read_tokens": 300}}
    pm = bs.per_message(read, 10)
    assert pm["extract"]["read_tokens"] == 50.0 and pm["all"]["read_tokens"] == 80.0
    assert "read_tokens" not in bs.per_message(dict(read, judge=usage["judge"]), 10)["all"]
    row["per_message"]["after"] = pm
    assert "| 140 (80 read) | 0.4 |" in bs.markdown({"date": "2026-12-04", "machine": "m", "config": "cpu-ce",
                                                    "before": [], "rows": [row], "total": {
                                                        "messages": 10, "before_s": 25.0, "after_s": 5.0, "ratio": 5.0}})


