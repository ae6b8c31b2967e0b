"""Read conversations from files, validating every record before anything is written.

Two formats:
- LoCoMo JSON: a list of samples with `sample_id` and `conversation` (`session_N`, `session_N_date_time`).
- JSONL of messages, one object per line:
    {"conversation_id": "u1", "message_id": "m1", "speaker": "Ann", "text": "...",
     "session": "1", "session_date": "8 May 2023"}      # session and session_date optional
  Messages are taken in file order within each conversation.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .records import Message


class InputError(ValueError):
    """Bad input: the message names the file and the record."""


def _session_key(name: str) -> int:
    return int(name.rsplit("_", 1)[1])


def read_json(path: str | Path, hint: str = "") -> object:
    """Parse a JSON file; a missing or malformed file is an InputError naming it."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file{hint}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None


def load_locomo(path: str | Path, conversations: list[str] | None = None) -> list[Message]:
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a list of LoCoMo samples")
    known = [s.get("sample_id") for s in data if isinstance(s, dict)]
    if conversations:
        missing = [c for c in conversations if c not in known]
        if missing:
            raise InputError(f"{path}: no conversation {missing}; the file has {known}")
    out: list[Message] = []
    for n, sample in enumerate(data):
        where = f"{path} sample {n}"
        if not isinstance(sample, dict) or "sample_id" not in sample or "conversation" not in sample:
            raise InputError(f"{where}: needs 'sample_id' and 'conversation'")
        conv_id = str(sample["sample_id"])
        if conversations and conv_id not in conversations:
            continue
        conv = sample["conversation"]
        sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=_session_key)
        for s in sessions:
            date = str(conv.get(f"{s}_date_time", ""))
            turns = conv[s]
            if not isinstance(turns, list):
                raise InputError(f"{where} ({conv_id}) {s}: expected a list of turns")
            for k, t in enumerate(turns):
                if not isinstance(t, dict) or not all(isinstance(t.get(f), str) and t.get(f) for f in ("speaker", "dia_id")) \
                        or not isinstance(t.get("text"), str):
                    raise InputError(f"{where} ({conv_id}) {s} turn {k}: needs string 'speaker', 'dia_id', 'text'")
                text = t["text"]
                if t.get("blip_caption"):
                    text = f"{text} [shares a photo: {t['blip_caption']}]"
                if not text.strip():
                    raise InputError(f"{where} ({conv_id}) {s} turn {k} ({t['dia_id']}): empty text")
                out.append(Message(conv_id, t["dia_id"], t["speaker"], text, str(_session_key(s)), date))
    _check_unique(out, path)
    return out


REQUIRED = ("conversation_id", "message_id", "speaker", "text")
OPTIONAL = ("session", "session_date")


def load_jsonl(path: str | Path) -> list[Message]:
    path = Path(path)
    out: list[Message] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path} line {lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise InputError(f"{where}: expected a JSON object")
            unknown = set(rec) - set(REQUIRED) - set(OPTIONAL)
            if unknown:
                raise InputError(f"{where}: unknown fields {sorted(unknown)}; allowed: {REQUIRED + OPTIONAL}")
            for f in REQUIRED:
                if not isinstance(rec.get(f), (str, int)) or not str(rec[f]).strip():
                    raise InputError(f"{where}: field '{f}' is missing or empty")
            out.append(Message(
                str(rec["conversation_id"]), str(rec["message_id"]), str(rec["speaker"]), str(rec["text"]),
                str(rec.get("session", "1")), str(rec.get("session_date", "")),
            ))
    if not out:
        raise InputError(f"{path}: no messages")
    _check_unique(out, path)
    return out


def _check_unique(messages: list[Message], path: Path) -> None:
    seen = set()
    for m in messages:
        key = (m.conversation_id, m.message_id)
        if key in seen:
            raise InputError(f"{path}: message id {m.message_id} appears twice in conversation {m.conversation_id}")
        seen.add(key)


def load_messages(path: str | Path, conversations: list[str] | None = None) -> list[Message]:
    """Load a LoCoMo .json or a messages .jsonl file."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.suffix == ".jsonl":
        msgs = load_jsonl(path)
        if conversations:
            msgs = [m for m in msgs if m.conversation_id in conversations]
        return msgs
    return load_locomo(path, conversations)
