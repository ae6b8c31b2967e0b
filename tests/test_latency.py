"""The answer-latency benchmark (membox_local/evaluation/latency.py, benchmarks/answer_latency.py): which questions,
the order of the phases, the figures and the report on test doubles (no model, no server); and one run on the demo
with the real stack (integration)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from membox_local.evaluation import latency as L
from membox_local.ingest import InputError

REPO = Path(__file__).resolve().parent.parent
SECRET = "secret question text"


def test_spread_takes_n_evenly_with_a_fixed_stride():
    assert L.spread(list(range(25)), 10) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    assert L.spread(list(range(30)), 10) == list(range(0, 30, 3))
    assert L.spread(list(range(4)), 10) == [0, 1, 2, 3]
    assert L.spread(list(range(4)), 0) == []


def test_the_phases_alternate_cold_and_warm_by_budget():
    assert L.plan([500, 1000]) == [(500, "cold"), (500, "warm"), (1000, "warm"), (1000, "cold")]
    assert [m for _, m in L.plan([1, 2, 3])] == ["cold", "warm", "warm", "cold", "cold", "warm"]


def test_summary_gives_linear_percentiles_and_the_mean_of_known_tokens():
    s = L.summary([1.0, 2.0, 3.0, 4.0, 10.0], [100, None, 300, 200, 400])
    assert s == {"n": 5, "p50_s": 3.0, "p90_s": 7.6, "mean_s": 4.0, "max_s": 10.0, "context_tokens_mean": 250.0}
    assert L.summary([], [])["n"] == 0 and L.summary([], [])["p50_s"] is None
    assert L.summary([2.0], [None])["context_tokens_mean"] is None


def locomo_file(tmp_path: Path) -> Path:
    cats = [1, 5, 2, 3, 5, 4, 1, 2, 5, 3, 4, 1]  # 9 of categories 1-4, at qa 0 2 3 5 6 7 9 10 11
    qa = [{"question": f"{SECRET} {i}", "answer": "a", "category": c, "evidence": []} for i, c in enumerate(cats)]
    sample = {"sample_id": "conv-x", "qa": qa, "conversation": {"speaker_a": "A", "speaker_b": "B"}}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    return path


def test_locomo_questions_are_categories_1_to_4_spread_evenly_by_their_place_in_qa(tmp_path):
    qs = L.locomo_questions(locomo_file(tmp_path), "conv-x", 4)
    assert [q.index for q in qs] == [0, 3, 6, 9]  # stride 9 // 4 = 2 over the answerable ones
    assert [q.category for q in qs] == [1, 3, 1, 3] and {q.conversation for q in qs} == {"conv-x"}
    assert qs[0].label() == {"index": 0, "category": 1}
    with pytest.raises(InputError):
        L.locomo_questions(locomo_file(tmp_path), "conv-nope", 4)


def test_a_questions_file_gives_line_numbers_and_the_default_conversation(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "one?", "conversation_id": "c1"}\n\n{"question": "two?"}\n')
    qs = L.file_questions(path, 5, "dflt")
    assert [(q.index, q.conversation, q.category) for q in qs] == [(1, "c1", None), (3, "dflt", None)]
    path.write_text('{"question": ""}\n')
    with pytest.raises(InputError, match=":1:"):
        L.file_questions(path, 5)


def test_the_cold_command_is_membox_ask_quiet_with_json_at_the_budget():
    q = L.Question(3, 1, SECRET, "conv-x")
    cmd = L.cold_command(Path("/m"), q, 500, None)
    assert cmd[-9:] == ["ask", "/m", SECRET, "--budget", "500", "--quiet", "--json", "--conversation", "conv-x"]
    assert L.cold_command(Path("/m"), L.Question(1, None, SECRET, None), 200, "cpu-fast")[-2:] == ["--config",
                                                                                                   "cpu-fast"]


class FakeServer:
    stopped = False
    port = 1

    def stop(self):
        FakeServer.stopped = True


def doubles(monkeypatch, calls: list):
    def start_warm(store, config, log, first, budget, timeout_s):
        calls.append(("start", budget))
        return FakeServer(), {"start_s": 1.0, "warmup_s": 2.0, "load_before": 0.1, "load_after": 0.2}

    monkeypatch.setattr(L, "start_warm", start_warm)
    monkeypatch.setattr(L, "ask_cold", lambda store, q, b, config, t: calls.append(("cold", b, q.index)) or
                        (4.0 + q.index, b // 2))
    monkeypatch.setattr(L, "ask_warm", lambda port, q, b, t: calls.append(("warm", b, q.index)) or
                        (1.0 + q.index, b // 2))


def test_a_run_on_doubles_keeps_numbers_only_in_the_order_planned(monkeypatch, tmp_path):
    calls: list = []
    doubles(monkeypatch, calls)
    FakeServer.stopped = False
    qs = [L.Question(i, 1, f"{SECRET} {i}", "c") for i in (0, 2)]
    res = L.measure(tmp_path / "mem", qs, [500, 1000], log=tmp_path / "serve.log")
    assert calls[0] == ("start", 500) and FakeServer.stopped
    assert [c[:2] for c in calls[1::2]] == [("cold", 500), ("warm", 500), ("warm", 1000), ("cold", 1000)]
    assert [(p["budget"], p["mode"]) for p in res["phases"]] == L.plan([500, 1000])
    cold = res["phases"][0]
    assert cold["n"] == 2 and cold["p50_s"] == 5.0 and cold["max_s"] == 6.0 and cold["context_tokens_mean"] == 250
    assert cold["answers"][1] == {"index": 2, "category": 1, "seconds": 6.0, "context_tokens": 250}
    assert set(cold) >= {"load_before", "load_after", "p90_s", "mean_s"}
    assert res["ratios"] == {"500": 2.5, "1000": 2.5} and res["questions"] == [{"index": 0, "category": 1},
                                                                               {"index": 2, "category": 1}]
    text = json.dumps(res) + L.table(res)
    assert SECRET not in text and "| 1000 | warm | 2 | 2.0 |" in L.table(res)


def test_the_server_is_stopped_when_a_phase_fails(monkeypatch, tmp_path):
    doubles(monkeypatch, [])
    FakeServer.stopped = False

    def fails(*_):
        raise RuntimeError("membox ask (question 0) exited 1")

    monkeypatch.setattr(L, "ask_cold", fails)
    with pytest.raises(RuntimeError):
        L.measure(tmp_path / "mem", [L.Question(0, 1, SECRET, "c")], [500], log=tmp_path / "serve.log")
    assert FakeServer.stopped


def script():
    spec = importlib.util.spec_from_file_location("answer_latency", REPO / "benchmarks" / "answer_latency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_script_saves_the_command_date_machine_and_indices_but_no_text(monkeypatch, tmp_path, capsys):
    doubles(monkeypatch, [])
    (tmp_path / "mem").mkdir()
    (tmp_path / "mem" / "memory.db").write_bytes(b"")
    data, out = locomo_file(tmp_path), tmp_path / "res.json"
    mod = script()
    monkeypatch.setattr(L, "config_name", lambda store, config: "cpu-ce")
    assert mod.main(["--store", str(tmp_path / "mem"), "--data", str(data), "--conversation", "conv-x",
                     "--questions", "3", "--budgets", "200", "400", "--save", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert {"command", "date", "machine", "server", "phases", "ratios"} <= set(saved)
    assert saved["machine"]["cores"] >= 1 and saved["config"] == "cpu-ce" and len(saved["phases"]) == 4
    assert [q["index"] for q in saved["questions"]] == [0, 5, 9]
    printed = capsys.readouterr()
    assert "| 200 | cold | 3 |" in printed.out and SECRET not in out.read_text() + printed.out + printed.err


@pytest.mark.integration
@pytest.mark.long
def test_one_question_per_mode_on_the_demo_with_the_real_stack(tmp_path):
    """The demo's first session built with cpu-fast (SmolLM2), one question cold (`membox ask`) and warm (`membox
    serve`)."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("fastapi")
    store, first = tmp_path / "demo", tmp_path / "first-session.jsonl"
    first.write_text("".join((REPO / "membox_local" / "data" / "demo.jsonl").read_text().splitlines(True)[:14]))
    subprocess.run([sys.executable, "-c", "from membox_local.cli import main; main()", "build", str(first),
                    "--store", str(store), "--config", "cpu-fast", "--quiet"], check=True, capture_output=True,
                   timeout=1800)
    qs = [L.Question(1, None, "What race is Maya training for?", "maya-tom")]
    res = L.measure(store, qs, [200], log=tmp_path / "serve.log", timeout_s=900)
    assert res["config"] == "cpu-fast" and res["tracebacks"] == 0
    assert res["server"]["start_s"] > 0 and res["server"]["warmup_s"] > 0
    assert [p["mode"] for p in res["phases"]] == ["cold", "warm"]
    for p in res["phases"]:
        assert p["n"] == 1 and p["p50_s"] > 0 and p["p90_s"] > 0 and p["max_s"] > 0
        assert p["context_tokens_mean"] > 0 and p["answers"][0]["index"] == 1
