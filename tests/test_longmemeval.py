"""`membox eval longmemeval` (issue 37): the file read and checked, each history its own dated conversation, the
paper's rank metrics computed by hand, the judge's rules, a resumable run on the doubles, the command's errors,
and one question on the real CPU stack."""
from __future__ import annotations

import gzip
import dataclasses
import json
import math

import pytest

from membox_local.cli import main
from membox_local.evaluation import longmemeval as lme
from membox_local.ingest import InputError
from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import benchmark_script

pytestmark = pytest.mark.numeric  # rankings go through BLAS cosines


def session(*turns, answer_at=()):
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t, **({"has_answer": True}
                                                                            if i in answer_at else {})}
            for i, t in enumerate(turns)]


def record(qid, qtype, question, answer, sessions, evidence, date="2023/06/01 (Thu) 10:00"):
    return {"question_id": qid, "question_type": qtype, "question": question, "answer": answer,
            "question_date": date, "haystack_session_ids": [f"{qid}-s{i}" for i in range(len(sessions))],
            "haystack_dates": [f"2023/05/{10 + i:02d} (Wed) 0{i}:30" for i in range(len(sessions))],
            "haystack_sessions": sessions, "answer_session_ids": [f"{qid}-s{i}" for i in evidence]}


RECORDS = [
    record("q1", "single-session-user", "What breed is my dog?", "a beagle", [
        session("I need tips for planning a trip to Lisbon.", "Lisbon is lovely in spring; book early."),
        session("My dog is a beagle named Rex and he loves long walks.", "Beagles do need plenty of exercise.",
                answer_at=(0,)),
        session("Can you suggest a pasta recipe?", "Try a simple carbonara with eggs and cheese."),
    ], [1]),
    record("q2", "knowledge-update", "Where do I work now?", "Acme Labs", [
        session("I work at Globex as an engineer.", "Nice, what do you build there?", answer_at=(0,)),
        session("Tell me about tomatoes.", "Tomatoes grow best in warm sunny spots."),
        session("I moved jobs: I work at Acme Labs now.", "Congratulations on the new job at Acme Labs!",
                answer_at=(0,)),
    ], [0, 2]),
    record("q3_abs", "single-session-user", "What is my sister's name?", "You did not mention it", [
        session("I like jazz music a lot.", "Jazz is great; try Coltrane."),
        session("My car needs new tyres.", "Check the tread depth first."),
    ], []),
]


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "lme.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(RECORDS, fh)
    return path


def test_a_file_reads_the_same_gzipped_or_not(tmp_path, data):
    plain = tmp_path / "lme.json"
    plain.write_text(json.dumps(RECORDS))
    assert lme.read_file(plain) == lme.read_file(data) == RECORDS


def test_each_history_is_a_dated_conversation_of_user_and_assistant_turns(data):
    q = lme.to_question(lme.read_file(data)[1])
    assert q.id == "q2" and q.date == "10:00 on 1 June, 2023" and not q.abstention
    assert [m.speaker for m in q.messages] == ["user", "assistant"] * 3
    assert {m.conversation_id for m in q.messages} == {"q2"}
    assert q.messages[0].message_id == "q2-s0:0" and q.messages[0].session_date == "00:30 on 10 May, 2023"
    assert q.evidence_turns == ["q2-s0:0", "q2-s2:0"] and q.evidence_sessions == ["q2-s0", "q2-s2"]
    assert lme.to_question(RECORDS[2]).abstention


@pytest.mark.parametrize("change, error", [
    (lambda r: r.pop("question"), "field 'question' must be a str"),
    (lambda r: r["haystack_dates"].pop(), "differ in length"),
    (lambda r: r["haystack_dates"].__setitem__(0, "yesterday"), "haystack_dates[0] = 'yesterday' is not a date"),
    (lambda r: r["haystack_sessions"][0].append({"role": "system", "content": "x"}), "must be a list of"),
])
def test_a_bad_record_is_one_error_naming_the_record_and_field(tmp_path, change, error):
    recs = json.loads(json.dumps(RECORDS))
    change(recs[1])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(recs))
    with pytest.raises(InputError, match=r"record 1 \(q2\)") as exc:
        lme.read_file(path)
    assert error in str(exc.value)


def test_a_session_id_the_history_repeats_gets_a_key_of_its_own():
    rec = json.loads(json.dumps(RECORDS[1]))
    rec["haystack_session_ids"][1] = rec["haystack_session_ids"][0]  # as gpt4_76048e76 in the released file
    q = lme.to_question(rec)
    assert len({m.message_id for m in q.messages}) == len(q.messages)
    assert [m.message_id for m in q.messages][2:4] == ["q2-s0#2:0", "q2-s0#2:1"]
    assert q.evidence_sessions == ["q2-s0", "q2-s0#2", "q2-s2"]
    assert lme.session_keys(["a", "b", "a", "a"]) == ["a", "b", "a#2", "a#3"]


def test_rank_metrics_by_hand():
    ranked = ["a", "b", "c", "d"]
    assert lme.recall_any(ranked, ["c", "z"], 2) == 0 and lme.recall_any(ranked, ["c", "z"], 3) == 1
    assert lme.recall_all(ranked, ["a", "c"], 3) == 1 and lme.recall_all(ranked, ["a", "z"], 4) == 0
    assert lme.ndcg(ranked, ["b"], 5) == pytest.approx(1 / math.log2(3))
    assert lme.ndcg(ranked, ["a", "b"], 5) == pytest.approx(1.0)
    assert lme.ndcg(ranked, [], 5) == 0.0
    assert lme.sessions_of(["s2:1", "s1:0", "s2:0", "s3:4"]) == ["s2", "s1", "s3"]


def test_sampling_by_type_stride_and_limit():
    assert [r["question_id"] for r in lme.sample(RECORDS, [], 0, 2)] == ["q1", "q3_abs"]
    assert [r["question_id"] for r in lme.sample(RECORDS, ["knowledge-update"], 0, 1)] == ["q2"]
    assert len(lme.sample(RECORDS, [], 1, 1)) == 1
    with pytest.raises(InputError, match="--types nope: not a LongMemEval question type"):
        lme.sample(RECORDS, ["nope"], 0, 1)
    assert [r["question_id"] for r in lme.sample(RECORDS, [], 0, 1, ["q3_abs", "q1"])] == ["q1", "q3_abs"]
    with pytest.raises(InputError, match="--questions q9: no such question_id"):
        lme.sample(RECORDS, [], 0, 1, ["q1", "q9"])


def test_the_judge_rules_and_the_deterministic_check():
    q2, q3 = lme.to_question(RECORDS[1]), lme.to_question(RECORDS[2])
    assert "updated (most recent) value" in lme.judge_prompt(q2, "Acme Labs").user
    # abstention: is an answer given at all (right: no); the gold's explanation is not shown
    assert "Does the reply give an answer" in lme.judge_prompt(q3, "not mentioned").user
    assert q3.answer not in lme.judge_prompt(q3, "not mentioned").user
    assert (lme.right_label(q3), lme.right_label(q2)) == ("no", "yes")
    assert q2.answer in lme.judge_prompt(q2, "Acme Labs").user
    assert lme.deterministic(q2, "You work at Acme Labs.")["right"] == 1.0
    assert lme.deterministic(q2, "Globex")["right"] == 0.0
    assert lme.deterministic(q3, "Not mentioned.")["right"] == 1.0
    assert lme.deterministic(q3, "Her name is Anna.")["right"] == 0.0
    assert lme.lme_date("2023/05/30 (Tue) 23:42") == "23:42 on 30 May, 2023"


def test_a_run_on_the_doubles_measures_every_mode_and_resumes(tmp_path, data):
    s = lme.Settings(data=str(data), config="cpu-minilm", out=str(tmp_path / "out"), builds=str(tmp_path / "b"),
                     modes=["box-hits", "turn-rag", "session-rag", "full-context"])
    backend = FakeBackend()
    summary = lme.run(s, backend=backend, embedder=FakeEmbedder(), judge=FakeBackend(), progress=False)
    assert summary["questions"] == 3 and set(summary["modes"]) == set(s.modes)
    turn = summary["modes"]["turn-rag"]
    assert turn["questions"] == 3 and turn["qa"]["n"] == 3
    assert all(0 <= v <= 100 for v in turn["retrieval"].values() if v is not None)
    assert turn["retrieval"]["session_any@10"] == 100.0  # 3 sessions: every one is among the first 10
    records = (tmp_path / "out" / "records.jsonl").read_text().splitlines()
    assert len(records) == 12 and all("reply" in json.loads(r) for r in records)
    assert any(stage == "answer" and "Acme" in user for stage, user in backend.calls)
    assert "| session-rag |" in (tmp_path / "out" / "summary.md").read_text()
    again = lme.run(s, backend=FakeBackend(), embedder=FakeEmbedder(), judge=FakeBackend(), progress=False)
    assert len((tmp_path / "out" / "records.jsonl").read_text().splitlines()) == 12  # nothing done twice
    assert again["modes"]["turn-rag"]["retrieval"] == turn["retrieval"]


def test_redo_answers_the_named_questions_again_and_keeps_the_rest(tmp_path, data, capsys):
    s = lme.Settings(data=str(data), config="cpu-minilm", out=str(tmp_path / "out"), builds=str(tmp_path / "b"),
                     modes=["box-hits", "turn-rag"])
    lme.run(s, backend=FakeBackend(), embedder=FakeEmbedder(), judge=FakeBackend(), progress=False)
    path = tmp_path / "out" / "records.jsonl"
    first = [json.loads(x) for x in path.read_text().splitlines()]
    qid = first[0]["qid"]
    again = FakeBackend()
    s.redo = [qid]
    lme.run(s, backend=again, embedder=FakeEmbedder(), judge=FakeBackend(), progress=False)
    after = [json.loads(x) for x in path.read_text().splitlines()]
    assert sorted((r["qid"], r["mode"]) for r in after) == sorted((r["qid"], r["mode"]) for r in first)
    assert sum(stage == "answer" for stage, _ in again.calls) == 2  # that question, in both modes; nothing else
    assert [r for r in after if r["qid"] != qid] == [r for r in first if r["qid"] != qid]
    s.redo, s.questions = [qid], [r["qid"] for r in first if r["qid"] != qid][:1]
    with pytest.raises(InputError, match=f"--redo {qid}: not among the questions this run chooses"):
        lme.run(s, backend=FakeBackend(), embedder=FakeEmbedder(), judge=FakeBackend(), progress=False)
    assert [json.loads(x) for x in path.read_text().splitlines()] == after  # nothing dropped by a refused run
    assert main(["eval", "longmemeval", "--data", str(data), "--out", str(tmp_path / "o2"), "--redo", "nope"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --redo nope: not among the questions this run chooses (see "
                                               "--questions, --types, --stride, --limit)")


class FreedWhenClosed(FakeBackend):
    """A backend double that refuses every call once closed, as a llama.cpp model that was freed."""

    def __init__(self):
        super().__init__()
        self.closed = 0

    def close(self):
        self.closed += 1

    def json_batch(self, requests):
        assert not self.closed, "a closed model was called"
        return super().json_batch(requests)


def test_a_full_build_of_several_histories_keeps_the_shared_model_open(tmp_path, data):
    """Each history's memory is closed before the next is built; the model they share stays loaded (it was freed
    after the first history once: the second build failed on it)."""
    s = lme.Settings(data=str(data), config="cpu-minilm", out=str(tmp_path / "out"), builds=str(tmp_path / "b"),
                     modes=["box-hits", "compact"], boxes_only=False, qa=False)
    backend = FreedWhenClosed()
    summary = lme.run(s, backend=backend, embedder=FakeEmbedder(), progress=False)
    assert summary["questions"] == 3 and backend.closed == 0  # passed in: the caller's to close
    assert sum(stage == "extract" for stage, _ in backend.calls) >= 3  # every history was extracted


class Approves:
    """A judge double that grades every reply right (an abstention reply: "no", it gives no answer), and keeps
    its prompts."""

    def __init__(self):
        self.prompts = []

    def label(self, requests):
        from membox_local.backends.base import LabelResult, Usage

        self.prompts += [r.prompt.user for r in requests]
        return [LabelResult("no" if "Does the reply give an answer" in r.prompt.user else "yes", Usage(r.stage, 1, 1))
                for r in requests]


def test_rejudge_grades_the_saved_replies_again_without_answering(tmp_path, data, capsys):
    s = lme.Settings(data=str(data), config="cpu-minilm", out=str(tmp_path / "out"), builds=str(tmp_path / "b"),
                     modes=["turn-rag", "full-context"])
    first = lme.run(s, backend=FakeBackend(), embedder=FakeEmbedder(), judge=FakeBackend(), progress=False)
    path = tmp_path / "out" / "records.jsonl"
    before = [json.loads(line) for line in path.read_text().splitlines()]
    judge = Approves()
    again = lme.run(dataclasses.replace(s, rejudge=True, modes=["turn-rag"]), judge=judge, progress=False)
    after = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(judge.prompts) == 3 and list(again["modes"]) == ["turn-rag"]
    assert again["modes"]["turn-rag"]["qa"]["judge"] == 100.0
    assert [r["reply"] for r in after] == [r["reply"] for r in before]  # nothing answered again
    assert [r["judge"] for r in after if r["mode"] == "full-context"] == \
        [r["judge"] for r in before if r["mode"] == "full-context"]  # a mode not chosen is left as it was
    assert first["modes"]["turn-rag"]["retrieval"] == again["modes"]["turn-rag"]["retrieval"]
    assert not path.with_suffix(".jsonl.tmp").exists()
    assert main(["eval", "longmemeval", "--data", str(data), "--out", str(tmp_path / "none"), "--rejudge"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --rejudge: ") and "holds no saved reply" in err and "\n" not in err


def test_set_turns_the_guard_on_and_a_run_folder_refuses_other_settings(tmp_path, capsys):
    rec = json.loads(json.dumps(RECORDS[0]))
    rec.update(question_id="q9_abs", question="How many days did I spend in Lisbon and in Porto?")
    path = tmp_path / "one.json"
    path.write_text(json.dumps([rec, RECORDS[0]]))
    s = lme.Settings(data=str(path), config="cpu-minilm", out=str(tmp_path / "o"), builds=str(tmp_path / "b"),
                     modes=["turn-rag"], overrides={"answer.check_terms": True})
    backend = FakeBackend()
    summary = lme.run(s, backend=backend, embedder=FakeEmbedder(), judge=FakeBackend(), progress=False)
    recs = {r["qid"]: r for r in map(json.loads, (tmp_path / "o" / "records.jsonl").read_text().splitlines())}
    assert "Porto" in recs["q9_abs"]["reply"] and recs["q9_abs"]["abstained"] == 1.0  # Lisbon is in the history
    assert [stage for stage, _ in backend.calls].count("answer") == 1  # only q1 went to the model
    assert summary["overrides"] == {"answer.check_terms": True}
    assert "answer.check_terms = true" in (tmp_path / "o" / "summary.md").read_text()
    argv = ["eval", "longmemeval", "--data", str(path), "--out", str(tmp_path / "o"), "--config", "cpu-minilm",
            "--builds", str(tmp_path / "b"), "--modes", "turn-rag"]
    assert main(argv) == 2  # resumed without the guard: refused before anything is answered
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {tmp_path / 'o'} holds a run with other settings") and "\n" not in err
    assert main(argv[:-2] + ["--set", "answer.check_terms=maybe"]) == 2  # not a boolean: one line
    assert "answer.check_terms" in capsys.readouterr().err


def test_a_relative_time_in_the_question_is_resolved_against_its_date(tmp_path, data):
    rec = json.loads(json.dumps(RECORDS[0]))
    rec["question"] = "What breed was the dog I talked about two weeks ago?"
    path = tmp_path / "one.json"
    path.write_text(json.dumps([rec]))
    backend = FakeBackend()
    lme.run(lme.Settings(data=str(path), config="cpu-minilm", out=str(tmp_path / "o"), builds=str(tmp_path / "b"),
                         modes=["turn-rag"]), backend=backend, embedder=FakeEmbedder(), judge=FakeBackend(),
            progress=False)
    asked = [user for stage, user in backend.calls if stage == "answer"]
    assert len(asked) == 1 and "two weeks ago (" in asked[0] and "2023)" in asked[0]


def test_the_answering_prompt_says_today_only_when_asked_at_a_date():
    from membox_local.prompts import ANSWER_SYSTEM, answer_prompt

    assert answer_prompt("ctx", "q?").system == ANSWER_SYSTEM  # LoCoMo's prompt unchanged
    dated = answer_prompt("ctx", "q?", today="10:00 on 1 June, 2023").system
    assert "Today is 10:00 on 1 June, 2023" in dated and "the more recent one holds" in dated
    ctx = "[09:30 on 10 May, 2023]\nuser: I ran a half marathon."
    assert answer_prompt(ctx, "q?").user.startswith(f"Memory:\n{ctx}\n")  # no date asked at: the context as it is
    assert "[09:30 on 10 May, 2023; 22 days (about 3 weeks) ago]\nuser: I ran" in \
        answer_prompt(ctx, "q?", today="10:00 on 1 June, 2023").user


@pytest.mark.parametrize("question, advice", [
    ("Can you suggest some activities I can do during my commute?", True),
    ("I've got some free time tonight, any documentary recommendations?", True),
    ("Do you think it would be a good idea to attend my reunion?", True),
    ("In our previous chat, you suggested a few options. Can you remind me of the fourth?", False),  # recall
    ("What did I buy for my sister's birthday?", False),
    ("Which restaurant did you recommend for dinner?", False),
])
def test_a_request_for_advice_gets_its_own_instructions(question, advice):
    from membox_local.prompts import ADVICE_SYSTEM, answer_prompt, asks_for_advice

    assert asks_for_advice(question) is advice
    prompt = answer_prompt("[1 May, 2023]\nuser: I love documentaries about the sea.", question, "1 June, 2023")
    assert prompt.system.startswith(ADVICE_SYSTEM) is advice
    assert "31 days (about 4 weeks) ago]" in prompt.user  # the date lines are marked either way


@pytest.mark.parametrize("day, said", [
    ("1 June, 2023", "today"), ("31 May, 2023", "1 day ago"), ("19 May, 2023", "13 days ago"),
    ("18 May, 2023", "14 days (about 2 weeks) ago"), ("3 April, 2023", "59 days (about 8 weeks) ago"),
    ("2 April, 2023", "60 days (about 2 months) ago"), ("1 June, 2022", "365 days (about 12 months) ago"),
    ("2 June, 2023", None),  # after the question's day: nothing said
])
def test_how_long_ago_a_date_line_was(day, said):
    from membox_local.dates import ago, parse_session_date

    assert ago(parse_session_date(day), parse_session_date("10:00 on 1 June, 2023")) == said


def test_only_date_lines_are_marked():
    from membox_local.dates import with_distance

    ctx = "[1 May, 2023]\nuser: [2 May, 2023] was a Tuesday\n\n[session 3]\nassistant: ok"
    assert with_distance(ctx, "1 June, 2023") == ("[1 May, 2023; 31 days (about 4 weeks) ago]\nuser: [2 May, 2023] "
                                                 "was a Tuesday\n\n[session 3]\nassistant: ok")
    assert with_distance(ctx, "not a date") == ctx


def test_the_command_refuses_a_bad_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert main(["eval", "longmemeval", "--data", str(bad), "--out", str(tmp_path / "o"), "--no-qa"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {bad}: expected a non-empty JSON list of question records"
    assert main(["eval", "longmemeval", "--data", str(tmp_path / "none.json"), "--no-qa"]) == 2
    assert main(["eval", "longmemeval", "--modes", "box-hitz", "--out", str(tmp_path / "o"), "--no-qa"]) == 2
    assert "--modes box-hitz: not a retrieval mode" in capsys.readouterr().err


@pytest.mark.integration
def test_one_question_on_the_real_cpu_stack(tmp_path, data):
    """MiniLM files the history (the cross-encoder judge), SmolLM2 answers and judges: structure only."""
    cfg = tmp_path / "small.toml"
    cfg.write_text('extends = "cpu-ce"\n[answer]\nllm = { backend = "llamacpp", model = "smollm2-135m" }\n')
    s = lme.Settings(data=str(data), config=str(cfg), out=str(tmp_path / "out"), builds=str(tmp_path / "b"),
                     modes=["box-hits", "turn-rag"], limit=2)
    summary = lme.run(s, progress=False)
    for mode in s.modes:
        row = summary["modes"][mode]
        assert row["qa"]["n"] == 2 and row["retrieval"]["recall@2000"] is not None
    recs = [json.loads(x) for x in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert all(r["reply"].strip() and r["judge"] in (0.0, 1.0) for r in recs)


@pytest.mark.integration
def test_the_guard_on_the_real_cpu_stack(tmp_path):
    """The cross-encoder files the history, MiniLM retrieves, SmolLM2 answers what the guard lets through."""
    cfg = tmp_path / "small.toml"
    cfg.write_text('extends = "cpu-ce"\n[answer]\nllm = { backend = "llamacpp", model = "smollm2-135m" }\n')
    rec = json.loads(json.dumps(RECORDS[0]))
    rec.update(question_id="q9_abs", question="How long did I stay in Lisbon and in Porto?")
    path = tmp_path / "two.json"
    path.write_text(json.dumps([RECORDS[0], rec]))
    s = lme.Settings(data=str(path), config=str(cfg), out=str(tmp_path / "out"), builds=str(tmp_path / "b"),
                     modes=["box-hits"], overrides={"answer.check_terms": True})
    summary = lme.run(s, progress=False)
    recs = {r["qid"]: r for r in map(json.loads, (tmp_path / "out" / "records.jsonl").read_text().splitlines())}
    assert recs["q9_abs"]["reply"].startswith("not mentioned") and "Porto" in recs["q9_abs"]["reply"]
    assert recs["q1"]["reply"].strip() and "Porto" not in recs["q1"]["reply"]  # the model's own answer
    assert summary["modes"]["box-hits"]["qa"]["abstention"]["abstained"] == 100.0


def test_the_report_splits_questions_by_which_context_held_more_evidence():
    """evaluation/paired.py compare (benchmarks/longmemeval_report.py compare): answerable questions only, both modes
    needed, each part's counts."""
    from membox_local.evaluation import paired

    report = benchmark_script("longmemeval_report")

    def rec(qid, mode, recall, judge, abstention=False):
        return {"qid": qid, "mode": mode, "recall@1000": recall, "judge": judge, "abstention": abstention}

    records = [rec("a", "box-hits", 1.0, 0.0), rec("a", "turn-rag", 0.5, 1.0),   # box-hits showed more
               rec("b", "box-hits", 0.5, 1.0), rec("b", "turn-rag", 0.5, 1.0),   # as much
               rec("c", "box-hits", 0.0, 0.0), rec("c", "turn-rag", 1.0, 1.0),   # turn-rag showed more
               rec("d", "box-hits", 1.0, 1.0),                                    # one mode only: left out
               rec("e_abs", "box-hits", 1.0, 1.0, True), rec("e_abs", "turn-rag", 0.0, 0.0, True)]  # abstention
    rows = {r["part"]: r for r in paired.compare(records, "box-hits", "turn-rag")}
    assert [(r["questions"], r["box-hits right"], r["turn-rag right"]) for r in rows.values()] == [
        (1, 0.0, 1.0), (1, 1.0, 1.0), (1, 0.0, 1.0)]
    assert rows["box-hits more"]["box-hits recall"] == 1.0 and rows["box-hits more"]["turn-rag recall"] == 0.5
    table = report._compare_table(list(rows.values()))
    assert table.splitlines()[2] == "| box-hits more | 1 | 0 | 1 | 100.0 | 50.0 |"

    for r in records:  # `versus`: two runs of the same questions; the second with one recall changed
        r.update({k: 1.0 for k in paired.VERSUS_KEYS if k != "recall@1000"})
    old = [dict(r, **({"recall@1000": 0.0} if (r["qid"], r["mode"]) == ("b", "box-hits") else {})) for r in records]
    rows = {(r["mode"], r["run"]): r for r in paired.versus(records, old, ["box-hits", "turn-rag"])}
    box, box_old, turn = rows[("box-hits", "new")], rows[("box-hits", "old")], rows[("turn-rag", "new")]
    assert (box["questions"], turn["questions"]) == (4, 3)  # per mode, the answerable questions both runs hold
    assert (box["recall@1000"], box_old["recall@1000"], box["recall@500"]) == (62.5, 50.0, 100.0)
    assert (box["recall@1000 differs"], turn["recall@1000 differs"]) == (1, 0)


