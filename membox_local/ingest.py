"""Read conversations from files, validating every record before anything is written.

Two formats:
- LoCoMo JSON: a list of samples with `sample_id` and `conversation` (`session_N`, `session_N_date_time`).
- JSONL of messages, one object per line:
    {"conversation_id": "u1", "message_id": "m1", "speaker": "Ann", "text": "...",
     "session": "1", "session_date": "8 May 2023"}      # session and session_date optional
  Messages are taken in file order within each conversation. Field values are strings or integers (not booleans,
  null, fractions, lists, objects); unknown fields, blank required ones, a repeated (conversation_id, message_id)
  are refused. Optional tags: "user_id" and "agent_id" (strings), "metadata" (a JSON object of at most
  METADATA_MAX_BYTES, see check_metadata).
  A line may also be a message in the OpenAI / mem0 chat shape (from_chat_shape):
    {"conversation_id": "u1", "role": "user", "content": "...", "name": "Ann", "timestamp": "2024-03-04T10:15:00Z"}
  role (or name, when given) is the speaker, content the text, timestamp the session date; without a "session"
  the session is the timestamp's calendar day, and without a "message_id" one is derived from the content
  (derived_message_id), so that adding the same messages again is idempotent.
Files must be UTF-8; a string with a lone surrogate (a JSON escape such as \\ud800) is refused, as SQLite stores
UTF-8. Every refusal is an InputError naming the file and, where there is one, the line (JSONL) or the sample,
session and turn (LoCoMo), and the field. Memory.add checks the dicts it is given with the JSONL rules
(`as_messages`).
"""
from __future__ import annotations

import json
import re
import hashlib
import math
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path

from .dates import absolute_day
from .records import Message


class InputError(ValueError):
    """Bad input: the message names the file and the record."""


def _session_key(name: str) -> int:
    return int(name.rsplit("_", 1)[1])


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError as exc:  # a name too long for the file system
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None


def _parse_json(text: str, where: str) -> object:
    """json.loads with every failure an InputError: malformed JSON, an integer of more digits than Python
    converts, nesting deeper than the parser recurses."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except ValueError as exc:
        raise InputError(f"{where}: not valid JSON ({exc})") from None
    except RecursionError:
        raise InputError(f"{where}: not valid JSON (nested too deeply)") from None


def require_file(path: Path, hint: str = "") -> None:
    """A path that does not exist, or cannot be asked about, is an InputError naming it."""
    if not _exists(path):
        raise InputError(f"{path}: no such file{hint}")


def read_text(path: str | Path, hint: str = "", encoding: str = "utf-8") -> str:
    """A text file's content; a missing, unreadable (a directory) or non-UTF-8 file is an InputError naming it (and
    the line of the first bad byte)."""
    path = Path(path)
    require_file(path, hint)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path} line {line}: not valid UTF-8 (byte 0x{data[exc.start]:02x})") from None


def read_json(path: str | Path, hint: str = "") -> object:
    """Parse a JSON file; a missing, unreadable (a directory), non-UTF-8 or malformed file is an InputError
    naming it."""
    return _parse_json(read_text(path, hint), str(path))


def _check_unicode(msg: Message, where: str, names: dict[str, str] | None = None) -> Message:
    """A string with a lone surrogate (a JSON escape such as \\ud800) cannot be stored as UTF-8: refused."""
    for f in ("conversation_id", "message_id", "speaker", "text", "session", "session_date", "user_id", "agent_id"):
        value = getattr(msg, f)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(f"{where}: field '{(names or {}).get(f, f)}' is not valid Unicode (a lone surrogate "
                             f"{value[exc.start]!r} at character {exc.start})") from None
    return msg


LOCOMO_FIELDS = {"conversation_id": "sample_id", "message_id": "dia_id", "session_date": "date_time"}


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
        sid = sample["sample_id"]
        if isinstance(sid, bool) or not isinstance(sid, (str, int)) or not str(sid).strip():
            raise InputError(f"{where}: 'sample_id' must be a non-empty string, got {sid!r}")
        conv_id = str(sid)
        if conversations and conv_id not in conversations:
            continue
        conv = sample["conversation"]
        if not isinstance(conv, dict):
            raise InputError(f"{where} ({conv_id!r}): 'conversation' must be an object of sessions")
        names = [k for k in conv if re.fullmatch(r"session_\d+", k)]
        if any(len(k) > 20 for k in names):
            raise InputError(f"{where} ({conv_id!r}): session number too large in "
                             f"{next(k for k in names if len(k) > 20)[:40]!r}...")
        sessions = sorted(names, key=_session_key)
        for a, b in zip(sessions, sessions[1:]):
            if _session_key(a) == _session_key(b):
                raise InputError(f"{where} ({conv_id!r}): {a} and {b} name the same session")
        for s in sessions:
            date = conv.get(f"{s}_date_time", "")
            if not isinstance(date, str):
                raise InputError(f"{where} ({conv_id!r}) {s}_date_time: expected a string, got {date!r:.80}")
            turns = conv[s]
            if not isinstance(turns, list):
                raise InputError(f"{where} ({conv_id!r}) {s}: expected a list of turns")
            for k, t in enumerate(turns):
                if not isinstance(t, dict) or not all(isinstance(t.get(f), str) and t.get(f).strip()
                                                      for f in ("speaker", "dia_id")) \
                        or not isinstance(t.get("text"), str):
                    raise InputError(f"{where} ({conv_id!r}) {s} turn {k}: needs string 'speaker', 'dia_id', 'text'")
                text = t["text"]
                caption = t.get("blip_caption")
                if caption is not None and not isinstance(caption, str):
                    raise InputError(f"{where} ({conv_id!r}) {s} turn {k}: 'blip_caption' must be a string")
                if caption:
                    text = f"{text} [shares a photo: {caption}]"
                if not text.strip():
                    raise InputError(f"{where} ({conv_id!r}) {s} turn {k} ({t['dia_id']!r}): empty text")
                out.append(_check_unicode(Message(conv_id, t["dia_id"], t["speaker"], text, str(_session_key(s)),
                                                  date), f"{where} ({conv_id!r}) {s} turn {k}", LOCOMO_FIELDS))
    if not out:
        raise InputError(f"{path}: no messages")
    _check_unique(out, path)
    return out


REQUIRED = ("conversation_id", "message_id", "speaker", "text")
OPTIONAL = ("session", "session_date", "user_id", "agent_id")
METADATA = "metadata"  # the free JSON object a message may carry (check_metadata)
METADATA_MAX_BYTES = 4096


def metadata_text(metadata: Mapping) -> str:
    """A metadata object as the store keeps it: canonical JSON (sorted keys, UTF-8, no spaces)."""
    return json.dumps(metadata, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def check_metadata(metadata: object, where: str) -> dict:
    """A message's metadata: a JSON object with string keys that survives JSON unchanged (no tuple, no non-string
    key, no NaN or infinity, no lone surrogate) and takes at most METADATA_MAX_BYTES as stored; else an InputError.
    Returns a copy, so that the caller's object can change afterwards without changing what is stored."""
    if not isinstance(metadata, Mapping):
        raise InputError(f"{where}: metadata must be a JSON object (a dict), got {type(metadata).__name__}")
    try:
        text = metadata_text(metadata)
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a ValueError: caught first
        raise InputError(f"{where}: metadata is not valid Unicode (a lone surrogate)") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise InputError(f"{where}: metadata is not JSON-serialisable ({_reason(exc)})") from None
    if size > METADATA_MAX_BYTES:
        raise InputError(f"{where}: metadata takes {size} bytes as JSON, more than the {METADATA_MAX_BYTES} allowed")
    copy = json.loads(text)
    if copy != metadata:
        raise InputError(f"{where}: metadata does not survive JSON unchanged (a tuple, or a key that is not a "
                         f"string?); pass plain dicts, lists, strings, numbers, booleans and null")
    return copy


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__


def _field(value: object) -> bool:
    """A field's value may be a string or an integer (ids), never a boolean, a number with a fraction, null."""
    return isinstance(value, (str, int)) and not isinstance(value, bool)


CHAT = ("role", "content", "name", "timestamp")  # the OpenAI / mem0 message fields (from_chat_shape)
CHAT_ALLOWED = ("conversation_id", "message_id") + CHAT + ("session", "user_id", "agent_id", METADATA)


def is_chat_shaped(rec: Mapping) -> bool:
    return "role" in rec or "content" in rec


def from_chat_shape(rec: Mapping, where: str) -> dict:
    """A message in the OpenAI / mem0 shape as the JSONL fields: `name` (when given) or `role` is the speaker,
    `content` (a string) the text, `timestamp` (a date string, or seconds since 1970 as a number, read as UTC)
    the session date; without a `session`, the session is the timestamp's calendar day (2024-03-04), so that a
    new day seals the open box. `message_id` stays missing when it is (MessageIds derives one)."""
    unknown = [k for k in rec if k not in CHAT_ALLOWED]
    if unknown:
        raise InputError(f"{where}: unknown fields {sorted(map(str, unknown))}; a message with role and content "
                         f"allows: {CHAT_ALLOWED}")
    for f in ("role", "content"):
        if not isinstance(rec.get(f), str) or not rec[f].strip():
            got = "missing or empty" if isinstance(rec.get(f), (str, type(None))) else \
                f"not a string ({type(rec[f]).__name__}{'; content parts are not read' if f == 'content' else ''})"
            raise InputError(f"{where}: field '{f}' is {got}")
    name = rec.get("name")
    if "name" in rec and (not isinstance(name, str) or not name.strip()):
        raise InputError(f"{where}: field 'name' must be a non-empty string, got {name!r:.80}")
    out = {k: v for k, v in rec.items() if k not in CHAT}
    out["speaker"], out["text"] = name or rec["role"], rec["content"]
    if "timestamp" in rec:
        out["session_date"], day = _timestamp(rec["timestamp"], where)
        if "session" not in rec:
            out["session"] = day or _day(out["session_date"], where)
    return out


def _timestamp(value: object, where: str) -> tuple[str, str]:
    """A timestamp as the session date, and its day when it is a number: a non-empty string as given (its day read
    by _day when needed); seconds since 1970 as ISO 8601 UTC, with that day."""
    if isinstance(value, str) and value.strip():
        return value, ""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        try:
            moment = datetime.fromtimestamp(value, timezone.utc).replace(microsecond=0, tzinfo=None)
        except (OverflowError, OSError, ValueError):
            pass
        else:
            return moment.isoformat() + "Z", moment.date().isoformat()
    raise InputError(f"{where}: field 'timestamp' must be a date string or seconds since 1970, got {value!r:.80}")


TIMESTAMP_MAX_CHARS = 100


def _day(timestamp: str, where: str) -> str:
    """The session of a timestamp: the calendar day it names by itself (dates.absolute_day), ISO (2024-03-04)."""
    try:
        timestamp.encode("utf-8")
        day = absolute_day(timestamp) if len(timestamp) <= TIMESTAMP_MAX_CHARS else None
    except (UnicodeEncodeError, ValueError, OverflowError):  # a lone surrogate; a date the parser cannot hold
        day = None
    if day is None:
        raise InputError(f"{where}: field 'timestamp': no calendar day in {timestamp!r:.80} (give a date such as "
                         f"2024-03-04T10:15:00Z or 4 March 2024, or a 'session')")
    return day.isoformat()


def derived_message_id(speaker: str, text: str, session_date: str) -> str:
    """The id of a message that brings none: "m-" and 12 hex digits of the sha256 of its speaker, text and
    session date. Stable: the same message added again gets the same id, and is skipped as stored."""
    digest = hashlib.sha256("\x1f".join((speaker, text, session_date)).encode("utf-8", "surrogatepass"))
    return "m-" + digest.hexdigest()[:12]


class MessageIds:
    """Fills in derived message ids over one input (a file, one Memory.add call): the k-th repeat of the same
    speaker, text and session date in a conversation gets "-k" after the id (m-0123456789ab-2). A repeat added by
    a later call cannot be told from the same message added again: give such messages their own message_id."""

    def __init__(self):
        self.seen: dict[tuple[str, str], int] = {}

    def fill(self, rec: dict) -> dict:
        if "message_id" in rec:
            return rec
        base = derived_message_id(*(str(rec.get(f, "")) for f in ("speaker", "text", "session_date")))
        key = (str(rec.get("conversation_id")), base)
        n = self.seen[key] = self.seen.get(key, 0) + 1
        return {**rec, "message_id": base if n == 1 else f"{base}-{n}"}


def message_from_record(rec: object, where: str, ids: MessageIds | None = None) -> Message:
    """A Message from one record (a JSONL line's object, or a dict given to Memory.add), every field checked:
    the required ones present and non-empty, no unknown ones, strings or integers, valid Unicode. A record in the
    chat shape (role, content: from_chat_shape) is read as one in the JSONL fields; in either shape a record with no
    message_id gets one derived (`ids`, one per input)."""
    if not isinstance(rec, Mapping):
        raise InputError(f"{where}: expected a JSON object")
    names = None  # the record's own name of each Message field, for errors
    if is_chat_shaped(rec):
        names = {"speaker": "name" if rec.get("name") else "role", "text": "content", "session_date": "timestamp"}
        rec = (ids or MessageIds()).fill(from_chat_shape(rec, where))
    elif "message_id" not in rec:  # either shape: an id derived from speaker, text and date (MessageIds)
        rec = (ids or MessageIds()).fill(dict(rec))
    allowed = REQUIRED + OPTIONAL + (METADATA,)
    unknown = [k for k in rec if k not in allowed]
    if unknown:
        raise InputError(f"{where}: unknown fields {sorted(map(str, unknown))}; allowed: {allowed}")
    for f in REQUIRED:
        if not _field(rec.get(f)) or not str(rec[f]).strip():
            raise InputError(f"{where}: field '{f}' is missing or empty")
    for f in OPTIONAL:
        if f in rec and not _field(rec[f]):
            raise InputError(f"{where}: field '{f}' must be a string, got {rec[f]!r:.80}")
    return _check_unicode(Message(
        str(rec["conversation_id"]), str(rec["message_id"]), str(rec["speaker"]), str(rec["text"]),
        str(rec.get("session", "1")), str(rec.get("session_date", "")), user_id=str(rec.get("user_id", "")),
        agent_id=str(rec.get("agent_id", "")), metadata=check_metadata(rec.get(METADATA, {}), where),
    ), where, names)


def as_messages(items: object, where: str = "add", conversation_id: str | None = None, user_id: str | None = None,
                agent_id: str | None = None, metadata: Mapping | None = None) -> list[Message]:
    """Memory.add's argument checked in full before anything is written: Message objects or dicts with the
    JSONL fields (see message_from_record). The other arguments apply to every message: `conversation_id` is the
    conversation of dicts that name none (a message of another one is refused), `user_id` and `agent_id` tag the
    messages that carry none, `metadata` is under each message's own (its keys win)."""
    if isinstance(items, (str, bytes, Mapping, Message)):
        raise InputError(f"{where}: expected a list of messages, got {type(items).__name__}")
    try:
        items = list(items)
    except TypeError:
        raise InputError(f"{where}: expected a list of messages, got {type(items).__name__}") from None
    tags = _call_tags(where, conversation_id, user_id, agent_id, metadata)
    out, ids = [], MessageIds()
    for n, item in enumerate(items):
        if isinstance(item, Message):
            item = {f: getattr(item, f) for f in REQUIRED + OPTIONAL + (METADATA,)}
        elif not isinstance(item, Mapping):
            raise InputError(f"{where}: message {n}: expected a Message or a dict, got {type(item).__name__}")
        out.append(message_from_record(_tagged(item, tags, f"{where}: message {n}"), f"{where}: message {n}", ids))
    return out


def _call_tags(where: str, conversation_id, user_id, agent_id, metadata) -> dict:
    """as_messages' call-wide values, checked: ids are non-empty strings, metadata a JSON object."""
    tags = {}
    for name, value in (("conversation_id", conversation_id), ("user_id", user_id), ("agent_id", agent_id)):
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{where}: {name} must be a non-empty string, got {value!r:.80}")
        tags[name] = value
    if metadata is not None:
        tags[METADATA] = check_metadata(metadata, f"{where}: metadata")
    return tags


def _tagged(item: Mapping, tags: dict, where: str) -> dict:
    """One message's fields under the call-wide tags (see as_messages)."""
    rec = dict(item)
    conv = tags.get("conversation_id")
    if conv is not None:
        if str(rec.setdefault("conversation_id", conv)) != conv:
            raise InputError(f"{where}: it belongs to conversation {rec['conversation_id']!r:.80}, not {conv!r:.80}")
    for name in ("user_id", "agent_id"):
        if name in tags and not rec.get(name):
            rec[name] = tags[name]
    if METADATA in tags:
        own = rec.get(METADATA, {})
        rec[METADATA] = {**tags[METADATA], **own} if isinstance(own, Mapping) else own  # a bad one is refused later
    return rec


def read_jsonl(path: str | Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed JSON value) for every non-blank line of a JSONL file; a file that cannot be read, a
    line that is not UTF-8 or not JSON, is an InputError naming the file and the line."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{path} line {lineno}"
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError as exc:  # an undecodable byte, kept as a surrogate by surrogateescape
                    raise InputError(f"{where}: not valid UTF-8 (byte 0x{ord(line[exc.start]) - 0xDC00:02x} at "
                                     f"column {exc.start + 1})") from None
                yield lineno, _parse_json(line, where)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None


def load_jsonl(path: str | Path) -> list[Message]:
    path = Path(path)
    out: list[Message] = []
    seen: dict[tuple[str, str], int] = {}
    ids = MessageIds()
    for lineno, rec in read_jsonl(path):
        where = f"{path} line {lineno}"
        m = message_from_record(rec, where, ids)
        first = seen.setdefault((m.conversation_id, m.message_id), lineno)
        if first != lineno:
            raise InputError(f"{where}: message id {m.message_id} appears twice in conversation "
                             f"{m.conversation_id} (first on line {first})")
        out.append(m)
    if not out:
        raise InputError(f"{path}: no messages")
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
    if not _exists(path):
        raise InputError(f"{path}: no such file")
    if path.suffix == ".jsonl":
        return select_conversations(load_jsonl(path), conversations, path)
    return load_locomo(path, conversations)


def select_conversations(msgs: list[Message], conversations: list[str] | None, path: Path) -> list[Message]:
    """The messages of the conversations asked for (all when None); one that is not in the file is an error, not
    an empty build (as load_locomo)."""
    if not conversations:
        return msgs
    known = list(dict.fromkeys(m.conversation_id for m in msgs))
    missing = [c for c in conversations if c not in known]
    if missing:
        raise InputError(f"{path}: no conversation {missing}; the file has {known[:10]}")
    return [m for m in msgs if m.conversation_id in conversations]
