"""The slice of a LoCoMo-format file every system gets: each conversation's messages (optionally its first N
sessions, then its first N messages) and the questions whose every gold evidence message is inside that slice
(the whole conversation: every question of the chosen categories; optionally only the first N of them)."""
from __future__ import annotations

from dataclasses import dataclass, field

from membox_local.evaluation.locomo import load_samples, parse_evidence
from membox_local.ingest import load_locomo
from membox_local.records import Message

DEFAULT_CATEGORIES = (1, 2, 3, 4)


@dataclass
class Question:
    qid: int
    question: str
    gold: str
    category: int
    evidence: list[str] = field(default_factory=list)


@dataclass
class Conversation:
    conversation_id: str
    messages: list[Message]
    questions: list[Question]
    whole: bool  # the whole conversation (no session or message limit)


def slice_messages(messages: list[Message], sessions: int = 0, limit: int = 0) -> list[Message]:
    kept = [m for m in messages if not sessions or int(m.session) <= sessions]
    return kept[:limit] if limit else kept


def select_questions(qa: list[dict], known: set[str], categories: tuple[int, ...] = DEFAULT_CATEGORIES,
                     whole: bool = True, limit: int = 0) -> list[Question]:
    """Questions of `categories` in file order; on a slice (whole=False) only those with evidence, all of it in
    `known`; at most `limit` (0: all)."""
    out: list[Question] = []
    for qid, q in enumerate(qa):
        cat = q.get("category")
        if cat not in categories or not isinstance(q.get("question"), str) or not q["question"].strip():
            continue
        evidence, issues = parse_evidence(q.get("evidence", []), known)
        if not whole and (not evidence or issues["unknown"] or issues["malformed"]):
            continue
        out.append(Question(qid, q["question"], str(q.get("answer", "")), cat, evidence))
        if limit and len(out) >= limit:
            break
    return out


def load(path: str, conversations: list[str], sessions: int = 0, messages: int = 0, questions: int = 0,
         categories: tuple[int, ...] = DEFAULT_CATEGORIES) -> list[Conversation]:
    samples = load_samples(path, conversations)
    out = []
    for sample in samples:
        conv = str(sample["sample_id"])
        every = load_locomo(path, [conv])
        kept = slice_messages(every, sessions, messages)
        whole = len(kept) == len(every)
        qs = select_questions(sample["qa"], {m.message_id for m in kept}, categories, whole, questions)
        out.append(Conversation(conv, kept, qs, whole))
    return out


def message_dict(m: Message) -> dict:
    """A message as a worker receives it."""
    return {"id": m.message_id, "speaker": m.speaker, "text": m.text, "session": m.session, "date": m.session_date}
