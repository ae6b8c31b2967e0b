"""`membox eval longmemeval`: LongMemEval (Wu et al., ICLR 2025) end to end, on the project's own builds.

Each question has its own history: 38-62 user/assistant sessions, each dated. A history becomes one conversation
(id = the question id; speakers "user" and "assistant"; message ids "<session id>:<turn>"), built once into
`--builds` and reused. The question is asked at its own `question_date`, which the answering prompt says.

Retrieval, as the paper measures it, for every mode side by side: recall_any@k, recall_all@k and NDCG@k of the
evidence sessions and of the evidence turns (`has_answer`), k = 5 and 10, over the ranking a mode makes (the
messages in the order it takes them in, `Context.ranked_ids`; sessions in the order their first message comes);
and evidence-turn recall at 500/1000/2000 context tokens. Abstention questions (`_abs`) have no evidence: they
count for QA only.

QA: the answer from the mode's context at `--qa-budget` tokens, judged by an LLM that answers yes or no with an
instruction per question type (`JUDGE_RULES`, in our words after the paper's protocol) and by deterministic
checks (token F1; the gold answer contained; an abstention said). `--judge-llm` takes any backend; the local
default is a far weaker judge than the paper's GPT-4o, so its agreement with the deterministic check is reported.
Resumable: records are appended to `<out>/records.jsonl` and a rerun does only what is missing.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..argtypes import count
from ..backends.base import LabelRequest, Prompt
from ..config import DEFAULT_CONFIG, Config, load_config, parse_assignment
from ..dates import resolve_relative
from ..ingest import InputError
from ..records import Message
from .locomo import FILL_K, UNBOUNDED, Shared, check_run_settings, evidence_recall, open_build, write_run_settings
from .scorers import abstains, locomo_f1, locomo_normalize

DEFAULT_DATA = Path(os.environ.get("MEMBOX_DATA", "../shared/data")) / "longmemeval" / "longmemeval_s_dev.json.gz"
TYPES = ("single-session-user", "single-session-assistant", "single-session-preference", "temporal-reasoning",
         "knowledge-update", "multi-session")
DEFAULT_MODES = ("box-hits", "turn-rag", "chunk-rag", "session-rag", "full-context")
KS = (5, 10)
RANKED_UNITS = 50  # units (boxes, turns, chunks, sessions) a mode ranks for the @k metrics: far more than k = 10
BUDGETS = (500, 1000, 2000)
FIELDS = {"question_id": str, "question_type": str, "question": str, "question_date": str,
          "haystack_session_ids": list, "haystack_dates": list, "haystack_sessions": list}


# ---- data --------------------------------------------------------------------------------------------------------
@dataclass
class Question:
    id: str
    type: str
    question: str
    answer: str
    date: str  # when it is asked, as the answering prompt says it
    messages: list[Message]
    evidence_sessions: list[str] = field(default_factory=list)
    evidence_turns: list[str] = field(default_factory=list)

    @property
    def abstention(self) -> bool:
        return self.id.endswith("_abs")


def lme_date(text: str) -> str:
    """LongMemEval's "2023/05/30 (Tue) 23:42" as the project's session dates read ("23:42 on 30 May, 2023")."""
    m = re.fullmatch(r"\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\(\w+\))?(?:\s+(\d{1,2}):(\d{2}))?\s*", text)
    if not m:
        raise ValueError(f"not a LongMemEval date: {text!r}")
    day = datetime(int(m[1]), int(m[2]), int(m[3]))
    when = f"{int(m[4]):02d}:{m[5]} on " if m[4] else ""
    return f"{when}{day.day} {day.strftime('%B')}, {day.year}"


def read_file(path: str | Path) -> list[dict]:
    """The records of a LongMemEval file (S, M or oracle; .json or .json.gz), each checked: an InputError names the
    file, the record and the field."""
    path = Path(path)
    try:
        raw = gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")
        with raw as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (LongMemEval's longmemeval_s/m/oracle JSON, gzip or not)") from None
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{path}: not a LongMemEval JSON file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, list) or not data:
        raise InputError(f"{path}: expected a non-empty JSON list of question records")
    for i, rec in enumerate(data):
        check_record(rec, f"{path} record {i}")
    return data


def check_record(rec: Any, where: str) -> None:
    if not isinstance(rec, dict):
        raise InputError(f"{where}: expected an object, got {type(rec).__name__}")
    for name, kind in FIELDS.items():
        if not isinstance(rec.get(name), kind):
            raise InputError(f"{where} ({rec.get('question_id', '?')}): field {name!r} must be a {kind.__name__}")
    n = len(rec["haystack_sessions"])
    if len(rec["haystack_session_ids"]) != n or len(rec["haystack_dates"]) != n:
        raise InputError(f"{where} ({rec['question_id']}): haystack_session_ids, haystack_dates and "
                         f"haystack_sessions differ in length")
    for j, (date, session) in enumerate(zip(rec["haystack_dates"], rec["haystack_sessions"])):
        try:
            lme_date(date)
        except (ValueError, TypeError):
            raise InputError(f"{where} ({rec['question_id']}): haystack_dates[{j}] = {date!r} is not a date like "
                             f"'2023/05/30 (Tue) 23:42'") from None
        if not isinstance(session, list) or not all(isinstance(t, dict) and t.get("role") in ("user", "assistant")
                                                    and isinstance(t.get("content"), str) for t in session):
            raise InputError(f"{where} ({rec['question_id']}): haystack_sessions[{j}] must be a list of "
                             f"{{\"role\": \"user\" | \"assistant\", \"content\": str}}")


def to_question(rec: dict) -> Question:
    """A checked record as a conversation of its own: one message per turn, each session dated."""
    qid, msgs, turns = rec["question_id"], [], []
    keys = session_keys([str(s) for s in rec["haystack_session_ids"]])
    for sid, date, session in zip(keys, rec["haystack_dates"], rec["haystack_sessions"]):
        for j, t in enumerate(session):
            if not t["content"].strip():
                continue  # an empty turn says nothing (a message must have text)
            mid = f"{sid}:{j}"
            msgs.append(Message(qid, mid, t["role"], t["content"], session=str(sid), session_date=lme_date(date)))
            if t.get("has_answer"):
                turns.append(mid)
    gold = {str(s) for s in rec.get("answer_session_ids", [])}
    return Question(qid, rec["question_type"], rec["question"], str(rec.get("answer", "")),
                    lme_date(rec["question_date"]), msgs, [k for k in dict.fromkeys(keys) if k.split("#")[0] in gold],
                    turns)


def session_keys(ids: list[str]) -> list[str]:
    """Each session's key in message ids: its id, and "<id>#2", "#3"... for a session id the history repeats (the
    released S file repeats one, in gpt4_76048e76), so that no two turns share a message id."""
    seen: dict[str, int] = {}
    out = []
    for sid in ids:
        seen[sid] = seen.get(sid, 0) + 1
        out.append(sid if seen[sid] == 1 else f"{sid}#{seen[sid]}")
    return out


def sample(records: list[dict], types: list[str], limit: int, stride: int, ids: list[str] = ()) -> list[dict]:
    """The records of these types (all when empty) and ids (all when empty), every `stride`-th, at most `limit`
    (0: all)."""
    unknown = sorted(set(types) - set(TYPES))
    if unknown:
        raise InputError(f"--types {' '.join(unknown)}: not a LongMemEval question type; known: {', '.join(TYPES)}")
    missing = sorted(set(ids) - {r["question_id"] for r in records})
    if missing:
        raise InputError(f"--questions {' '.join(missing)}: no such question_id in the file")
    chosen = [r for r in records if (not types or r["question_type"] in types)
              and (not ids or r["question_id"] in ids)][::stride]
    return chosen[:limit] if limit else chosen


# ---- retrieval metrics -------------------------------------------------------------------------------------------
def recall_any(ranked: list[str], gold: list[str], k: int) -> float:
    return float(bool(set(ranked[:k]) & set(gold)))


def recall_all(ranked: list[str], gold: list[str], k: int) -> float:
    return float(set(gold) <= set(ranked[:k]))


def ndcg(ranked: list[str], gold: list[str], k: int) -> float:
    """Binary-relevance NDCG@k: each gold item found at rank r adds 1/log2(r + 1), over the best possible."""
    gold_set = set(gold)
    dcg = sum(1 / math.log2(r + 2) for r, item in enumerate(ranked[:k]) if item in gold_set)
    ideal = sum(1 / math.log2(r + 2) for r in range(min(k, len(gold_set))))
    return dcg / ideal if ideal else 0.0


def sessions_of(ranked_ids: list[str]) -> list[str]:
    """Sessions in the order their first message comes in a ranking of message ids ("<session>:<turn>")."""
    return list(dict.fromkeys(mid.rpartition(":")[0] for mid in ranked_ids))


def retrieval_record(q: Question, retriever) -> dict[str, Any]:
    """The paper's rank metrics over the mode's ranking, and evidence-turn recall at each budget."""
    rec: dict[str, Any] = {}
    ctx = retriever.retrieve(q.question, q.id, RANKED_UNITS, UNBOUNDED)  # full-context ignores k: all turns
    turns = ctx.ranked_ids or ctx.message_ids
    for level, ranked, gold in (("session", sessions_of(turns), q.evidence_sessions),
                                ("turn", turns, q.evidence_turns)):
        for k in KS:
            rec[f"{level}_any@{k}"] = recall_any(ranked, gold, k)
            rec[f"{level}_all@{k}"] = recall_all(ranked, gold, k)
            rec[f"{level}_ndcg@{k}"] = round(ndcg(ranked, gold, k), 4)
    for b in BUDGETS:
        ctx = retriever.retrieve(q.question, q.id, FILL_K, b)
        rec[f"recall@{b}"] = evidence_recall(q.evidence_turns, ctx.message_ids)
        rec[f"tokens@{b}"] = ctx.tokens
    return rec


# ---- QA: the judge -----------------------------------------------------------------------------------------------
JUDGE_SYSTEM = ("You grade an assistant's reply against the correct answer. Reply with one word: yes if the reply "
                "is right by the rule given, no otherwise.")
JUDGE_RULES = {
    "default": "Right means the reply gives the correct answer or an equivalent one; a reply that only gives part "
               "of it is wrong.",
    "temporal-reasoning": "Right means the reply gives the correct answer; a count of days, weeks or months that "
                          "is off by one from the correct one is also right.",
    "knowledge-update": "Right means the reply gives the updated (most recent) value; a reply that also mentions "
                        "an older value is still right as long as it gives the updated one as the answer.",
    "single-session-preference": "The correct answer is a rubric of what a good personalised reply uses. Right "
                                 "means the reply follows the rubric and uses the user's own preferences.",
}


# abstention questions: whether the reply answers at all (right: it does not)
ANSWERS_SYSTEM = ("You read a question and a reply to it. Reply with one word: yes if the reply gives an answer (a "
                  "number, a name, a date, a place, a fact), no if it says it does not know or that this is not "
                  "mentioned.")


def judge_prompt(q: Question, reply: str) -> Prompt:
    """An abstention question shows no gold text: its gold is an explanation of why the history does not tell
    ("You mentioned Dr. Smith but not Dr. Johnson"), which a small judge took for an answer the reply had to match
    (it marked "not mentioned" wrong on 2 of 2 dev questions). Asked instead whether the reply declines, the 1.5B
    said yes to "2 days" too; so the question is whether the reply gives an answer, and right is no
    (`right_label`)."""
    if q.abstention:
        return Prompt(ANSWERS_SYSTEM, f"Question: {q.question}\nReply: {reply}\n\nDoes the reply give an answer "
                                      f"(yes or no)?")
    rule = JUDGE_RULES[q.type if q.type in JUDGE_RULES else "default"]
    return Prompt(JUDGE_SYSTEM, f"Rule: {rule}\n\nQuestion: {q.question}\nCorrect answer: {q.answer}\n"
                                f"Reply: {reply}\n\nIs the reply right (yes or no)?")


def right_label(q: Question) -> str:
    """The judge's word for a right reply: "no" (no answer given) for an abstention question, else "yes"."""
    return "no" if q.abstention else "yes"


def deterministic(q: Question, reply: str) -> dict[str, float]:
    """Checks without a model: token F1 against the gold answer, the gold answer contained, an abstention said;
    `right`: abstained for an abstention question, else contained or F1 >= 0.5."""
    said = abstains(reply)  # "not mentioned", as the answering prompt asks
    f1 = locomo_f1(reply, q.answer) if not q.abstention else 0.0
    gold = locomo_normalize(q.answer)
    contained = bool(gold) and gold in locomo_normalize(reply) and not q.abstention
    right = said if q.abstention else (contained or f1 >= 0.5)
    return {"f1": round(f1, 4), "contained": float(contained), "abstained": float(said), "right": float(right)}


def asked(q: Question, cfg: Config) -> str:
    """The question as the answering model reads it: "two weeks ago" in it resolved against the day it is asked,
    as the excerpts' relative times are."""
    return resolve_relative(q.question, q.date) if cfg.retrieve.resolve_dates else q.question


def qa_record(q: Question, mem, retriever, answerer, judge, budget: int) -> dict[str, Any]:
    ctx = retriever.retrieve(q.question, q.id, FILL_K, budget)
    reply = mem.answer_from(asked(q, mem.config), ctx, q.id, backend=answerer, today=q.date).text
    return {"reply": reply, "context_tokens": ctx.tokens, **grade(q, reply, judge)}


def grade(q: Question, reply: str, judge) -> dict[str, float]:
    """The judge's verdict (1.0 yes) and the deterministic checks of one reply."""
    verdict = judge.label([LabelRequest(judge_prompt(q, reply), ("yes", "no"), "qa-judge")])[0]
    if isinstance(verdict, BaseException):
        raise verdict
    return {"judge": float(verdict.label == right_label(q)), **deterministic(q, reply)}


# ---- the run -----------------------------------------------------------------------------------------------------
@dataclass
class Settings:
    data: str = str(DEFAULT_DATA)
    config: str = "cpu-ce"  # the continuity judge without an LLM call: a history of ~490 turns files in minutes
    types: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)  # only these question ids (all when empty)
    modes: list[str] = field(default_factory=lambda: list(DEFAULT_MODES))
    limit: int = 0
    stride: int = 1
    qa: bool = True
    qa_budget: int = 1000
    judge_llm: str = ""  # "" : the config's answering model
    out: str = "runs/longmemeval"
    builds: str = "runs/builds-lme"
    boxes_only: bool = True  # box-hits needs boxes, not records; `--full-build` extracts records (compact)
    rejudge: bool = False  # grade the saved replies again (another judge, a changed rule); nothing built or answered
    # these questions' records of the chosen modes are dropped from --out and answered again (a changed prompt or
    # rule measured on the questions it touches; the rest of the run is kept)
    redo: list[str] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)  # config keys set for this run ("answer.check_terms")

    def fixed(self) -> dict[str, Any]:
        """What a resumed run must share with the records already written (the sample may grow or shrink)."""
        return {"data": self.data, "config": self.config, "qa_budget": self.qa_budget, "judge_llm": self.judge_llm,
                "overrides": self.overrides}


def judge_backend(cfg: Config, spec: str, shared: Shared):
    """`--judge-llm`: "" the config's answering model; "NAME" a model of the manifest (or a path) on the config's
    backend; "openai:MODEL" or "openai:MODEL@BASE_URL" any OpenAI-compatible server."""
    if not spec:
        return shared.answerer(cfg.answer_llm().model)
    backend, sep, rest = spec.partition(":")
    if not sep or "/" in backend:  # no backend named ("NAME", a path)
        backend, rest = "", spec
    model, _, base_url = rest.partition("@")
    from ..backends import make_backend

    llm = dataclasses.replace(cfg.answer_llm(), model=model, **({"backend": backend} if backend else {}),
                              **({"base_url": base_url} if base_url else {}))
    return make_backend(llm)


def run(s: Settings, backend=None, embedder=None, judge=None, progress: bool = True) -> dict[str, Any]:
    """Build what is missing, evaluate what is missing, write `<out>/summary.json` and `summary.md`. Doubles may be
    passed for tests (`backend` answers and builds, `judge` grades)."""
    from ..retrieval import RETRIEVERS, make_retriever

    cfg = load_config(s.config, s.overrides or None)
    bad = [m for m in s.modes if m not in RETRIEVERS]
    if bad:
        raise InputError(f"--modes {' '.join(bad)}: not a retrieval mode; choose from {', '.join(RETRIEVERS)}")
    questions = [to_question(r) for r in sample(read_file(s.data), s.types, s.limit, s.stride, s.questions)]
    if s.rejudge and s.redo:
        raise InputError("--redo answers again and --rejudge answers nothing: give one of them")
    missing = [q for q in s.redo if q not in {x.id for x in questions}]
    if missing:  # its records would be dropped and never answered again
        raise InputError(f"--redo {' '.join(missing)}: not among the questions this run chooses (see --questions, "
                         "--types, --stride, --limit)")
    if s.rejudge:
        return rejudge(s, cfg, questions, judge, progress)
    out = Path(s.out)
    out.mkdir(parents=True, exist_ok=True)
    check_run_settings(out, s.fixed())
    write_run_settings(out, s.fixed(), dataclasses.asdict(s))
    path = out / "records.jsonl"
    if s.redo:
        redo(path, s)
    done = {(r["qid"], r["mode"]): r for r in _read(path)}
    shared = Shared(cfg, backend, embedder)
    grader = judge if judge is not None else (judge_backend(cfg, s.judge_llm, shared) if s.qa else None)
    bar = _bar(len(questions) * len(s.modes), progress)
    try:
        with open(path, "a", encoding="utf-8") as fh:
            for q in questions:
                todo = [m for m in s.modes if not _complete(done.get((q.id, m)), s.qa)]
                if not todo:
                    bar.update(len(s.modes))
                    continue
                mem = open_build(q.id, q.messages, cfg, s.builds, shared, build=not s.boxes_only,
                                 boxes_only=s.boxes_only, progress=False)
                try:
                    for mode in todo:
                        retriever = make_retriever(mode, mem)
                        rec = {"qid": q.id, "type": q.type, "abstention": q.abstention, "mode": mode}
                        if not q.abstention:
                            rec.update(retrieval_record(q, retriever))
                        if s.qa:
                            answerer = shared.answerer(cfg.answer_llm().model)
                            rec.update(qa_record(q, mem, retriever, answerer, grader, s.qa_budget))
                        fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                        fh.flush()
                        done[(q.id, mode)] = rec
                        bar.update(1)
                finally:
                    mem.close(models=False)  # the models serve the next history: closed once, below
    finally:
        shared.close()
    bar.close()
    return write_summary(out, [done[(q.id, m)] for q in questions for m in s.modes if (q.id, m) in done], s, cfg)


def write_summary(out: Path, chosen: list[dict], s: Settings, cfg: Config) -> dict[str, Any]:
    """Summarise the chosen records into `<out>/summary.json` and `summary.md`; returns the summary."""
    summary = summarise(chosen, s, cfg)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "summary.md").write_text(markdown(summary))
    return summary


def rejudge(s: Settings, cfg: Config, questions: list[Question], judge=None, progress: bool = True) -> dict[str, Any]:
    """`--rejudge`: grade the saved replies of the chosen questions and modes again, without building or answering
    (another `--judge-llm` on the same replies, or a changed rule). `records.jsonl` is rewritten whole through a
    temporary file, so that an interrupted run leaves the old one as it was."""
    path = Path(s.out) / "records.jsonl"
    records = _read(path)
    by_id = {q.id: q for q in questions}
    todo = [r for r in records if r["qid"] in by_id and r["mode"] in s.modes and "reply" in r]
    if not todo:
        raise InputError(f"--rejudge: {path} holds no saved reply of the chosen questions and modes")
    check_run_settings(Path(s.out), s.fixed(), free=("judge_llm",))  # a regrade may change the judge only
    grader = judge if judge is not None else judge_backend(cfg, s.judge_llm, Shared(cfg))
    bar = _bar(len(todo), progress)
    for r in todo:
        r.update(grade(by_id[r["qid"]], r["reply"], grader))
        bar.update(1)
    bar.close()
    _write_records(path, records)
    write_run_settings(Path(s.out), s.fixed(), dataclasses.asdict(s))  # the judge the records now carry
    return write_summary(Path(s.out), [r for r in records if r["qid"] in by_id and r["mode"] in s.modes], s, cfg)


def redo(path: Path, s: Settings) -> None:
    """`--redo`: drop the records of these question ids (among those the run chose: `run` checks) in the chosen
    modes, so that the run answers them again."""
    records = _read(path)
    kept = [r for r in records if not (r["qid"] in s.redo and r["mode"] in s.modes)]
    if len(kept) < len(records):
        _write_records(path, kept)


def _write_records(path: Path, records: list[dict]) -> None:
    """records.jsonl rewritten whole through a temporary file: an interruption leaves the old one as it was."""
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _complete(rec: dict | None, qa: bool) -> bool:
    return rec is not None and (not qa or "judge" in rec)


def _bar(total: int, on: bool):
    from ..execution.progress import Bar

    return Bar(total, "longmemeval", unit="q", quiet=not on)


# ---- the summary -------------------------------------------------------------------------------------------------
RETRIEVAL_KEYS = [f"{lvl}_{m}@{k}" for lvl in ("session", "turn") for m in ("any", "all", "ndcg") for k in KS] + \
    [f"recall@{b}" for b in BUDGETS]
QA_KEYS = ("judge", "right", "f1", "contained", "abstained")


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(100 * sum(xs) / len(xs), 1) if xs else None


def summarise(recs: list[dict], s: Settings, cfg: Config) -> dict[str, Any]:
    """Per mode: retrieval over the answerable questions; QA overall, by type, abstention apart; the judge's
    agreement with the deterministic check; the false-abstention rate on answerable questions."""
    modes = {}
    for mode in s.modes:
        rs = [r for r in recs if r["mode"] == mode]
        answerable = [r for r in rs if not r["abstention"]]
        row: dict[str, Any] = {"questions": len(rs), "retrieval": {k: _mean(r.get(k) for r in answerable)
                                                                   for k in RETRIEVAL_KEYS}}
        graded = [r for r in rs if "judge" in r]
        if graded:
            by_type = {t: {k: _mean(r[k] for r in graded if r["type"] == t and not r["abstention"]) for k in QA_KEYS}
                       for t in TYPES}
            row["qa"] = {
                "n": len(graded), "judge": _mean(r["judge"] for r in graded),
                "right": _mean(r["right"] for r in graded), "by_type": by_type,
                "abstention": {k: _mean(r[k] for r in graded if r["abstention"]) for k in ("judge", "abstained")},
                "false_abstention": _mean(r["abstained"] for r in graded if not r["abstention"]),
                "judge_agreement": _mean(float(r["judge"] == r["right"]) for r in graded),
            }
        modes[mode] = row
    return {"data": s.data, "config": cfg.name, "embedder": cfg.embedder.model, "answer_llm": cfg.answer_llm().model,
            "judge_llm": s.judge_llm or cfg.answer_llm().model, "qa_budget": s.qa_budget, "types": s.types or "all",
            "overrides": s.overrides, "questions": len({r["qid"] for r in recs}), "modes": modes}


def markdown(summary: dict) -> str:
    modes = summary["modes"]
    lines = [f"# LongMemEval: config {summary['config']} ({summary['questions']} questions; embedder "
             f"{summary['embedder']}; answers {summary['answer_llm']}, judged by {summary['judge_llm']}"
             + "".join(f"; {k} = {json.dumps(v)}" for k, v in summary.get("overrides", {}).items()) + ")", "",
             "## Retrieval (%, answerable questions)", "",
             "| mode | session any@5 | any@10 | all@10 | NDCG@10 | turn any@5 | any@10 | all@10 | NDCG@10 | "
             "turns at 500 | 1000 | 2000 |", "|" + "---|" * 12]
    cols = ["session_any@5", "session_any@10", "session_all@10", "session_ndcg@10", "turn_any@5", "turn_any@10",
            "turn_all@10", "turn_ndcg@10", "recall@500", "recall@1000", "recall@2000"]
    for mode, row in modes.items():
        lines.append(f"| {mode} | " + " | ".join(_cell(row["retrieval"][c]) for c in cols) + " |")
    graded = {m: r["qa"] for m, r in modes.items() if "qa" in r}
    if graded:
        lines += ["", f"## QA at {summary['qa_budget']} context tokens (%, LLM judge / deterministic check)", "",
                  "| mode | n | all | " + " | ".join(TYPES) + " | abstention said | false abstention | agreement |",
                  "|" + "---|" * (len(TYPES) + 6)]
        for mode, qa in graded.items():
            types = " | ".join(f"{_cell(qa['by_type'][t]['judge'])} / {_cell(qa['by_type'][t]['right'])}"
                               for t in TYPES)
            lines.append(f"| {mode} | {qa['n']} | {_cell(qa['judge'])} / {_cell(qa['right'])} | {types} | "
                         f"{_cell(qa['abstention']['abstained'])} | {_cell(qa['false_abstention'])} | "
                         f"{_cell(qa['judge_agreement'])} |")
    return "\n".join(lines) + "\n"


def _cell(x) -> str:
    return "-" if x is None else f"{x:.1f}"


# ---- the command -------------------------------------------------------------------------------------------------
def cmd_longmemeval(args) -> int:
    s = Settings(data=args.data, config=args.config, types=args.types or [], questions=args.questions or [],
                 modes=args.modes or list(DEFAULT_MODES), limit=args.limit, stride=args.stride, qa=not args.no_qa,
                 qa_budget=args.qa_budget, judge_llm=args.judge_llm or "", out=args.out, builds=args.builds,
                 boxes_only=not args.full_build, rejudge=args.rejudge, redo=args.redo or [],
                 overrides=dict(parse_assignment(a) for a in args.set))
    summary = run(s, progress=not args.quiet)
    print(markdown(summary))
    print(f"saved: {Path(s.out) / 'summary.json'}, {Path(s.out) / 'records.jsonl'}", file=sys.stderr)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("longmemeval", help="LongMemEval: session/turn retrieval and judged QA per mode")
    p.add_argument("--data", default=str(DEFAULT_DATA), help="a LongMemEval file (S, M or oracle; .json or .json.gz)")
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"config name or .toml path (default {DEFAULT_CONFIG}: no "
                                                             "LLM call to file a message)")
    p.add_argument("--types", nargs="*", metavar="TYPE", help=f"only these question types ({', '.join(TYPES)})")
    p.add_argument("--questions", nargs="*", metavar="ID", help="only these question ids (e.g. the abstention "
                                                                "ones, whose ids end in _abs)")
    p.add_argument("--modes", nargs="*", help=f"retrieval modes (default: {' '.join(DEFAULT_MODES)})")
    p.add_argument("--limit", type=count(0), default=0, help="at most this many questions (0: all)")
    p.add_argument("--stride", type=count(1), default=1, help="every N-th question only (a sample spread evenly)")
    p.add_argument("--no-qa", action="store_true", help="retrieval metrics only (no answering model, no judge)")
    p.add_argument("--qa-budget", type=count(1), default=1000, help="context tokens for answering (default 1000)")
    p.add_argument("--judge-llm", help="the judge: a model name or path on the config's backend, or "
                                       "openai:MODEL[@BASE_URL] (default: the config's answering model)")
    p.add_argument("--rejudge", action="store_true", help="grade the replies saved in --out again (e.g. with "
                                                          "another --judge-llm); builds and answers nothing")
    p.add_argument("--redo", nargs="*", metavar="ID", help="answer these questions again: their records in --out "
                                                           "(of the chosen --modes) are dropped first")
    p.add_argument("--full-build", action="store_true", help="extract box records too (for `compact`; an LLM call "
                                                             "per box)")
    p.add_argument("--out", default="runs/longmemeval", help="run folder: records.jsonl, summary.json, summary.md")
    p.add_argument("--builds", default="runs/builds-lme", help="where each history's memory is kept")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="config keys for this run, e.g. answer.check_terms=true (the unmentioned-term guard)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_longmemeval)
