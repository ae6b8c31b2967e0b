"""The peers harness's own logic (benchmarks/peers/), on deterministic doubles: a fake worker speaking the same
JSON-lines protocol, a fake answerer, a fake OpenAI-compatible server. The peers themselves (.venv-peers) are
never needed here."""
from __future__ import annotations

import json
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from membox_local.evaluation import peers as report  # noqa: E402
from benchmarks.peers.harness import (  # noqa: E402
    Conversation, PeerSystem, Question, Retrieved, Settings, fit_budget, grade, items_context, run_all,
    select_questions, slice_messages)
from benchmarks.peers.llm_server import UsageProxy, cap, server_command, translate  # noqa: E402
from benchmarks.peers.workers import RequestFailed, WorkerClient, WorkerError  # noqa: E402
from membox_local.records import Message  # noqa: E402
from membox_local.retrieval.base import Context, count_tokens  # noqa: E402

FAKE_WORKER = textwrap.dedent('''
    import os, sys
    sys.path.insert(0, {peers!r})
    from workers import serve

    notes = []

    def init(req):
        print("fake worker loading", flush=True)  # stdout is moved to stderr: the protocol stays clean
        return {{"info": {{"system": "fake", "store": req["store"]}}}}

    def add(req):
        m = req["message"]
        if m["text"] == "DIE":
            sys.stderr.write("fatal: the fake worker died on purpose\\n")
            sys.stderr.flush()
            os._exit(3)
        if m["text"] == "FAIL":
            raise RuntimeError("the model call failed")
        notes.append(m)
        return {{"memories": 1, "failed": False, "errors": 1 if m["text"].startswith("WARN") else 0}}

    def search(req):
        words = set(req["question"].lower().split())
        hits = [n for n in notes if words & set(n["text"].lower().split())]
        return {{"items": [{{"text": f"{{n['speaker']}}: {{n['text']}}", "sources": [n["id"]]}}
                          for n in hits[: req["k"]]]}}

    def stats(req):
        return {{"stats": {{"notes": len(notes)}}}}

    serve({{"init": init, "add": add, "search": search, "stats": stats}})
''')


@pytest.fixture
def fake_worker(tmp_path) -> Path:
    path = tmp_path / "fake_worker.py"
    path.write_text(FAKE_WORKER.format(peers=str(REPO / "benchmarks" / "peers")))
    return path


def msg(i: int, text: str, session: str = "1") -> Message:
    return Message("c1", f"D{session}:{i}", "Ann" if i % 2 else "Bob", text, session, "8 May, 2023")


def conversation(texts: list[str], questions: list[Question] | None = None) -> Conversation:
    return Conversation("c1", [msg(i + 1, t) for i, t in enumerate(texts)], questions or [], True)


class EchoAnswerer:
    """Answers with the context's first line after the speaker, or "not mentioned"."""

    name = "echo"

    def __init__(self):
        self.seen: list[tuple[str, str]] = []

    def answer(self, question: str, ctx: Context) -> str:
        self.seen.append((question, ctx.text))
        first = ctx.text.splitlines()[0] if ctx.text else ""
        return first.split(": ", 1)[1] if ": " in first else "not mentioned"


# ---- budget --------------------------------------------------------------------------------------
def test_fit_budget_takes_items_best_first_and_skips_what_does_not_fit():
    items = [{"text": "one two three"}, {"text": " ".join(["long"] * 50)}, {"text": "four  five\nsix"},
             {"text": ""}]
    kept = fit_budget(items, 10)
    assert [it["text"] for it in kept] == ["one two three", "four five six"]  # the long one skipped, spaces folded
    assert sum(count_tokens(f"- {it['text']}") for it in kept) <= 10
    assert fit_budget(items, 3) == []


def test_items_context_keeps_sources_of_what_is_shown_only():
    items = [{"text": "a b", "sources": ["D1:1"]}, {"text": " ".join(["x"] * 40), "sources": ["D1:2"]},
             {"text": "c d", "sources": ["D1:3", "D1:1"]}]
    ctx, sources, shown = items_context(items, 12)
    assert ctx.text == "- a b\n- c d" and shown == 2
    assert sources == ["D1:1", "D1:3"] and ctx.message_ids == sources
    _, none, _ = items_context([{"text": "a b"}], 12, gives_sources=False)
    assert none is None  # a system that gives no sources has no evidence recall


# ---- data ----------------------------------------------------------------------------------------
def test_questions_of_a_slice_need_all_their_evidence_inside_it():
    qa = [{"question": "q0", "answer": "a", "category": 1, "evidence": ["D1:1"]},
          {"question": "q1", "answer": "b", "category": 2, "evidence": ["D1:1", "D2:4"]},
          {"question": "q2", "answer": 2023, "category": 4, "evidence": ["D1:2"]},
          {"question": "q3", "category": 5, "evidence": ["D1:1"]},
          {"question": "q4", "answer": "c", "category": 3, "evidence": []}]
    known = {"D1:1", "D1:2"}
    assert [q.qid for q in select_questions(qa, known, whole=False)] == [0, 2]
    assert [q.qid for q in select_questions(qa, known, whole=True)] == [0, 1, 2, 4]  # whole: every question
    assert [q.qid for q in select_questions(qa, known, whole=False, limit=1)] == [0]
    assert select_questions(qa, known, whole=False)[1].gold == "2023"


def test_slice_messages_sessions_then_count():
    ms = [msg(1, "a"), msg(2, "b"), msg(1, "c", "2"), msg(2, "d", "3")]
    assert [m.text for m in slice_messages(ms, sessions=2)] == ["a", "b", "c"]
    assert [m.text for m in slice_messages(ms, sessions=2, limit=2)] == ["a", "b"]
    assert slice_messages(ms) == ms


# ---- the process protocol ------------------------------------------------------------------------
def test_worker_protocol_round_trip(fake_worker, tmp_path):
    with WorkerClient("fake", [sys.executable, str(fake_worker)], tmp_path / "w.log", timeout=30) as w:
        assert w.request("init", store="S")["info"] == {"system": "fake", "store": "S"}
        w.request("add", message={"id": "D1:1", "speaker": "Ann", "text": "I adopted a cat"})
        with pytest.raises(RequestFailed, match="the model call failed"):
            w.request("add", message={"id": "D1:2", "speaker": "Bob", "text": "FAIL"})
        items = w.request("search", question="which cat", k=5)["items"]  # the worker goes on after a failure
        assert items == [{"text": "Ann: I adopted a cat", "sources": ["D1:1"]}]
        with pytest.raises(RequestFailed, match="unknown op"):
            w.request("nonsense")
    assert "fake worker loading" in (tmp_path / "w.log").read_text()  # what the worker printed went to its log


def test_a_worker_that_dies_is_one_clear_error_line(fake_worker, tmp_path):
    w = WorkerClient("fake", [sys.executable, str(fake_worker)], tmp_path / "w.log", timeout=30)
    w.request("init", store="S")
    with pytest.raises(WorkerError) as err:
        w.request("add", message={"id": "D1:1", "speaker": "Ann", "text": "DIE"})
    line = str(err.value)
    assert "\n" not in line
    assert "fake worker exited during 'add' (exit code 3)" in line
    assert "fatal: the fake worker died on purpose" in line
    with pytest.raises(WorkerError, match="had exited"):
        w.request("stats")
    w.close()


def test_a_worker_that_cannot_start_or_answers_late(tmp_path):
    with pytest.raises(WorkerError, match="could not start"):
        WorkerClient("ghost", [str(tmp_path / "no-such-python")], tmp_path / "g.log")
    slow = tmp_path / "slow.py"
    slow.write_text("import time, sys\nsys.stdin.readline()\ntime.sleep(30)\n")
    w = WorkerClient("slow", [sys.executable, str(slow)], tmp_path / "s.log")
    with pytest.raises(WorkerError, match="gave no answer to 'init' in 1 s"):
        w.request("init", timeout=1)
    assert w.proc.poll() is not None  # killed
    w.close()


def test_a_reply_that_is_not_json_is_an_error(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.stdin.readline()\nprint('Loading model...', flush=True)\nsys.stdin.readline()\n")
    w = WorkerClient("bad", [sys.executable, str(bad)], tmp_path / "b.log", timeout=30)
    with pytest.raises(WorkerError, match="not JSON: 'Loading model...'"):
        w.request("init")
    w.close()


# ---- a run on the doubles ------------------------------------------------------------------------
def _peer(fake_worker, tmp_path, budget=40):
    return PeerSystem("fake", sys.executable, tmp_path / "work", budget, 10, script=fake_worker, timeout=30)


def test_run_builds_asks_and_grades_each_system(fake_worker, tmp_path):
    qs = [Question(0, "Which cat did Ann adopt?", "a cat", 4, ["D1:1"]),
          Question(3, "What did Bob say about the weather", "rain", 1, ["D1:2"])]
    conv = conversation(["I adopted a cat", "FAIL", "WARN it may rain", "fine"], qs)
    answerer = EchoAnswerer()
    settings = Settings(data="x", systems=["fake", "absent"])
    made = {"fake": _peer(fake_worker, tmp_path), "absent": "no peers venv at .venv-peers/bin/python"}
    results = run_all(settings, [conv], made.__getitem__, answerer, {"date": "d"})
    fake = results["systems"]["fake"]
    assert results["systems"]["absent"] == {"status": "unavailable", "reason": made["absent"], "conversations": {}}
    assert fake["status"] == "ok" and fake["info"]["system"] == "fake"
    build = fake["conversations"]["c1"]["build"]
    assert (build["messages"], build["failed_messages"], build["degraded_messages"]) == (4, 1, 1)
    assert build["detail"] == {"notes": 3} and "llm_calls" not in build  # no proxy: no LLM figures
    recs = fake["conversations"]["c1"]["questions"]
    assert [r["qid"] for r in recs] == [0, 3]
    assert recs[0]["recall"] == 1.0 and recs[0]["scores"]["locomo_f1"] > 0
    assert recs[1]["recall"] == 0.0  # "weather" matched nothing the worker kept: no source shown
    assert "question" not in recs[0] and "prediction" not in recs[0]  # no dataset text saved
    assert answerer.seen[0] == ("Which cat did Ann adopt?", "- Ann: I adopted a cat")


def test_a_worker_that_dies_costs_its_conversation_only(fake_worker, tmp_path):
    good = conversation(["I adopted a cat"], [Question(0, "cat?", "a cat", 4, ["D1:1"])])
    dying = Conversation("c2", [msg(1, "hello"), msg(2, "DIE")], [], True)
    saved = tmp_path / "out" / "peers.json"
    results = run_all(Settings(data="x", systems=["fake"]), [dying, good],
                      lambda name: _peer(fake_worker, tmp_path), EchoAnswerer(), {}, save_to=str(saved))
    fake = results["systems"]["fake"]
    assert fake["status"] == "partial" and "exit code 3" in fake["reason"]
    assert "build" not in fake["conversations"]["c2"] and len(fake["conversations"]["c1"]["questions"]) == 1
    assert json.loads(saved.read_text()) == results  # written as it went, and at the end


def test_keep_text_saves_the_texts_for_a_run_outside_the_repo():
    q = Question(0, "Which cat?", "a cat", 4, ["D1:1"])
    rec = grade(q, Retrieved(Context("- Ann: a cat", message_ids=["D1:1"]), ["D1:1"]), EchoAnswerer(), True)
    assert (rec["question"], rec["gold"], rec["prediction"]) == ("Which cat?", "a cat", "a cat")
    assert rec["scores"]["locomo_f1"] == 1.0 and rec["recall"] == 1.0


# ---- the report ----------------------------------------------------------------------------------
def _q(cat, f1, recall=None, answer_s=1.0):
    return {"qid": 0, "category": cat, "context_tokens": 100, "answer_s": answer_s, "search_s": 0.1,
            "recall": recall, "scores": {"locomo_f1": f1, "mem0_f1": f1, "mem0_bleu1": f1 / 2, "membox_f1": f1}}


def _results():
    def build(n, s, prompt=None):
        b = {"messages": n, "build_s": s, "failed_messages": 0, "degraded_messages": 0}
        if prompt is not None:
            b.update(llm_calls=n, prompt_tokens=prompt, completion_tokens=n * 10)
        return b

    return {"date": "2026-12-06T07:00:00Z", "machine": {"cpu": "test cpu"}, "budget_tokens": 1500,
            "conversations": {"c1": {"messages": 10, "questions": 3}, "c2": {"messages": 10, "questions": 1}},
            "systems": {
                "membox": {"status": "ok", "sources": "the messages shown", "conversations": {
                    "c1": {"build": build(10, 10.0, 500), "questions": [_q(1, 0.5, 1.0), _q(2, 0.3, 0.5),
                                                                         _q(2, 0.1, 0.0)]},
                    "c2": {"build": build(10, 6.0, 700), "questions": [_q(4, 0.9, 1.0)]}}},
                "mem0": {"status": "ok", "conversations": {
                    "c1": {"build": build(10, 40.0, 80000), "questions": [_q(1, 0.2), _q(2, 0.4), _q(2, 0.0)]},
                    "c2": {"build": build(10, 20.0, 80000), "questions": [_q(4, 0.6)]}}},
                "amem": {"status": "failed", "reason": "amem worker exited during 'init' (exit code 1): boom",
                         "conversations": {}}}}


def test_summary_pools_conversations_and_averages_by_category():
    rows = report.summarise(_results())
    ours, mem0 = rows["membox"], rows["mem0"]
    assert ours["build_s_per_message"] == pytest.approx(0.8)
    assert ours["prompt_tokens_per_message"] == pytest.approx(60.0)
    assert ours["locomo_f1"] == pytest.approx(0.45) and ours["recall"] == pytest.approx(0.625)
    assert ours["by_category"] == {1: {"questions": 1, "locomo_f1": 0.5}, 2: {"questions": 2, "locomo_f1": 0.2},
                                   4: {"questions": 1, "locomo_f1": 0.9}}
    assert mem0["recall"] is None and mem0["by_category"][2]["locomo_f1"] == pytest.approx(0.2)
    assert rows["amem"]["status"] == "failed" and rows["amem"]["questions"] == 0


def test_markdown_table_and_targets():
    text = report.markdown(_results())
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("| system"))
    assert "F1 1 multi-hop" in header and "F1 2 temporal" in header and "F1 4 single-hop" in header
    ours = next(ln for ln in lines if ln.startswith("| membox_local"))
    assert "| 0.80 |" in ours and "| 45.0 |" in ours and "| 62.5 |" in ours
    assert any(ln.startswith("| A-Mem | failed: amem worker exited during 'init'") for ln in lines)
    assert "- LoCoMo F1, membox_local 45.0 against mem0 30.0: met (+15.0 points)" in text
    assert "- build seconds per message, mem0 / membox_local = 3.75x (target 3x): met" in text
    assert "budget 1500 tokens" in lines[0] and "c1, c2 (20 messages, 4 questions)" in lines[0]


def test_missed_targets_say_by_how_much():
    res = _results()
    res["systems"]["mem0"]["conversations"]["c2"]["build"]["build_s"] = 0.0
    res["systems"]["mem0"]["conversations"]["c2"]["questions"] = [_q(4, 1.0), _q(4, 1.0), _q(4, 1.0)]
    text = report.markdown(res)
    assert "against mem0 60.0: missed (-15.0 points)" in text
    assert "mem0 / membox_local = 2.50x (target 3x): missed" in text


def test_report_cli_prints_saved_runs_as_one_table(tmp_path, capsys):
    from benchmarks.peers.harness import main

    full = _results()
    ours = {**full, "systems": {"membox": full["systems"]["membox"]}}
    theirs = {**full, "systems": {"mem0": full["systems"]["mem0"]}}
    for name, run in (("a", ours), ("b", theirs)):
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
    assert main(["report", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "| membox_local (default) |" in out and "| mem0 |" in out and "mem0 / membox_local = 3.75x" in out
    other = {**theirs, "budget_tokens": 500}
    (tmp_path / "c.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="differ in budget_tokens"):
        main(["report", str(tmp_path / "a.json"), str(tmp_path / "c.json")])


def test_report_pools_runs_of_other_conversations_of_the_same_slice():
    full = _results()
    full["settings"] = {"sessions": 2, "threads": 2}

    def only(conv):
        return {**full, "conversations": {conv: full["conversations"][conv]},
                "systems": {name: {**entry, "conversations": {c: v for c, v in entry["conversations"].items()
                                                             if c == conv}}
                            for name, entry in full["systems"].items()}}

    merged = report.merge([only("c1"), only("c2")])
    assert set(merged["conversations"]) == {"c1", "c2"}
    assert report.summarise(merged) == report.summarise(full)  # the same pooled rows as one run of both
    with pytest.raises(SystemExit, match="differ in settings.sessions"):
        report.merge([only("c1"), {**only("c2"), "settings": {"sessions": 3, "threads": 2}}])
    fewer = only("c2")
    fewer["systems"] = {"membox": fewer["systems"]["membox"]}
    with pytest.raises(SystemExit, match="every system must be in every conversation"):
        report.merge([only("c1"), fewer])
    with pytest.raises(SystemExit, match="in two runs of different conversations"):
        report.merge([only("c1"), full])


# ---- the server and its proxy --------------------------------------------------------------------
def test_json_schema_response_format_becomes_the_servers_json_object_with_schema():
    schema = {"type": "object", "properties": {"keywords": {"type": "array", "items": {"type": "string"}}}}
    body = {"model": "m", "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema,
                                                                                    "strict": True}}}
    new, changed = translate(body)
    assert changed and new["response_format"] == {"type": "json_object", "schema": schema}
    assert translate({"response_format": {"type": "json_object"}}) == ({"response_format": {"type": "json_object"}},
                                                                       False)
    assert translate({"messages": []}) == ({"messages": []}, False)


def test_server_command_uses_the_models_own_template_on_loopback():
    cmd = server_command("/py", "/m.gguf", 8123, 16384, 1, "qwen")
    assert cmd[:3] == ["/py", "-m", "llama_cpp.server"] and "--chat_format" not in cmd
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--n_threads") + 1] == "1"
    assert cmd[cmd.index("--logits_all") + 1] == "false" and cmd[cmd.index("--n_ctx") + 1] == "16384"


class FakeOpenAI(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeOpenAI.seen.append(body)
        fmt = body.get("response_format") or {}
        status = 400 if fmt.get("type") == "json_schema" else 200  # as llama-cpp-python's server refuses it
        finish = "length" if body.get("max_tokens") == 5 else "stop"
        payload = json.dumps({"choices": [{"message": {"content": "{}"}, "finish_reason": finish}],
                              "usage": {"prompt_tokens": 100, "completion_tokens": 7}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_usage_proxy_counts_tokens_and_adapts_the_response_format():
    import urllib.request

    fake = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    FakeOpenAI.seen = []
    try:
        with UsageProxy(f"http://127.0.0.1:{fake.server_address[1]}/v1", max_tokens=5) as proxy:
            before = proxy.snapshot()
            for fmt, limit in (({"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
                                None), (None, 100)):
                body = {"model": "m", "response_format": fmt, "max_tokens": limit}
                req = urllib.request.Request(f"{proxy.base_url}/chat/completions", method="POST",
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=10) as r:
                    assert r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] == 7
            used = proxy.snapshot().minus(before)
    finally:
        fake.shutdown()
        fake.server_close()
    assert (used.calls, used.prompt_tokens, used.completion_tokens, used.failed, used.translated) == (2, 200, 14, 0, 1)
    assert (used.capped, used.cut) == (1, 1)  # the request with no limit got the proxy's, and stopped at it
    assert FakeOpenAI.seen[0]["response_format"] == {"type": "json_object", "schema": {"type": "object"}}
    assert [b["max_tokens"] for b in FakeOpenAI.seen] == [5, 100]


def test_a_request_with_no_output_limit_gets_the_proxys():
    assert cap({"messages": []}, 1024) == ({"messages": [], "max_tokens": 1024}, True)
    assert cap({"max_tokens": 50}, 1024) == ({"max_tokens": 50}, False)
    assert cap({"max_completion_tokens": 50}, 1024) == ({"max_completion_tokens": 50}, False)
    assert cap({"messages": []}, 0) == ({"messages": []}, False)
