"""Bad input tried systematically (issue 24): property-based fuzzing (hypothesis) of the input readers (JSONL
messages, LoCoMo JSON), `membox build` and `membox ask` run in-process with the models replaced by the test
doubles, the Python API (Memory.add, search, context, answer) and the TOML configs.

For every generated case:
- no traceback: the input is accepted, or refused with one of the library's own errors (InputError and
  ConfigError, both ValueError subclasses; StoreError; ModelNotFound); the command line exits 0, or 2 with
  exactly one line on stderr, `error: ...`, that names the file (and the line and the field where one is at
  fault), the same message the reader raises;
- accepted input is accepted consistently: the verdict is the one the format's rules give (an oracle below),
  reading a file twice gives the same messages, a record gets the same verdict as a JSONL line and as a dict
  given to Memory.add, a rebuild adds nothing, a question asked twice gets the same answer, a config loads to
  the values its file holds;
- refused input leaves the memory folder byte for byte as it was (every file in it hashed before and after)
  and creates no folder where there was none. One file is let off when the refusal comes from a check that is
  made under the write lock (a message id stored with other text, other build settings): build.lock, which
  names the lock's last holder; a refusal of the input itself happens before the lock is taken, and changes
  that file neither.

MEMBOX_FUZZ_EXAMPLES sets the examples per property (scaled by each property's weight; default 25, so that the
suite stays fast, with a fixed seed). `benchmarks/fuzz.py` runs the full run (2000: over 10,000 cases, random
seed) and writes the counts kept here (MEMBOX_FUZZ_REPORT) to benchmarks/results/fuzz.json. Hypothesis keeps no
example database (database=None): nothing is written under .hypothesis/.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections import Counter, defaultdict
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from membox_local import backends, continuity, memory
from membox_local.cli import main, one_line
from membox_local.config import DEFAULT_CONFIG, ConfigError, load_config
from membox_local.dates import absolute_day
from membox_local.exports import load_input
from membox_local.ingest import (CHAT, OPTIONAL, REQUIRED, TIMESTAMP_MAX_CHARS, InputError, as_messages, load_jsonl,
                                 load_messages)
from membox_local.memory import Memory
from membox_local.records import Message
from membox_local.store import StoreError
from membox_local.testing import FakeBackend, FakeContinuityScorer, FakeEmbedder
from membox_local.weights import ModelNotFound, load_manifest, resolve_model

N = int(os.environ.get("MEMBOX_FUZZ_EXAMPLES", "25"))
FULL = "MEMBOX_FUZZ_EXAMPLES" in os.environ
OWN = (InputError, ConfigError, StoreError, ModelNotFound)  # the library's own errors: a refusal, not a crash
FIELDS = REQUIRED + OPTIONAL


def fuzz(weight: float = 1.0):
    """`weight` times MEMBOX_FUZZ_EXAMPLES examples (at least 3); no example database; a fixed seed in the
    default run (the suite stays deterministic), a random one in the full run."""
    return settings(max_examples=max(3, int(N * weight)), deadline=None, database=None, derandomize=not FULL,
                    suppress_health_check=list(HealthCheck), print_blob=True)


# ---- counting: cases, verdicts, tracebacks, changed stores, per property ------------------------------------
TALLY: dict[str, Counter] = defaultdict(Counter)


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    path = os.environ.get("MEMBOX_FUZZ_REPORT")
    if path:
        Path(path).write_text(json.dumps({k: dict(v) for k, v in TALLY.items()}, indent=2))


def attempt(prop: str, fn):
    """(result, None) when `fn` accepts, (None, error) when it refuses with an own error; anything else is
    counted as a traceback and raised (hypothesis then shrinks it to a minimal case)."""
    TALLY[prop]["cases"] += 1
    try:
        out = fn()
    except OWN as exc:
        TALLY[prop]["rejected"] += 1
        return None, exc
    except Exception:
        TALLY[prop]["tracebacks"] += 1
        raise
    TALLY[prop]["accepted"] += 1
    return out, None


def folder_state(path: Path) -> dict[str, str] | None:
    """sha256 of every file under a memory folder (None: no folder)."""
    if not path.exists():
        return None
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


LOCK = "build.lock"  # the write lock's file: it names its last holder (a token that changes with each)


def assert_unchanged(prop: str, before, after, lock_taken: bool = False) -> None:
    """Every file of the folder as it was. `lock_taken`: the refusal came from a check made under the write
    lock (a message id stored with other text, other build settings), so build.lock names a new holder; every
    other file must be unchanged, and build.lock there still (released: the next writer takes it)."""
    if lock_taken and before is not None and after is not None:
        expect(prop, (LOCK in before) <= (LOCK in after), "build.lock went away")
        before, after = ({k: v for k, v in x.items() if k != LOCK} for x in (before, after))
    if before != after:
        TALLY[prop]["store_changed"] += 1
    assert before == after, f"a refused input changed the memory folder: {before} -> {after}"


def expect(prop: str, ok: bool, why: str = "") -> None:
    """A property beside the two above (verdict as the oracle says, consistency, messages naming the place)."""
    if not ok:
        TALLY[prop]["other_violations"] += 1
    assert ok, why


@contextlib.contextmanager
def scratch():
    d = tempfile.mkdtemp(prefix="membox-fuzz-")
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def check_error_line(prop: str, stderr: str, exc: Exception | None = None) -> str:
    """Exactly one line on stderr, `error: ...` (the reader's own message when given)."""
    lines = stderr.splitlines()
    expect(prop, len(lines) == 1 and lines[0].startswith("error: "), f"stderr is not one error line: {stderr!r}")
    if exc is not None:
        expect(prop, lines[0] == f"error: {one_line(str(exc))}", f"{lines[0]!r} is not the reader's {exc}")
    return lines[0]


# ---- value strategies ------------------------------------------------------------------------------------------
WORDS = ("I adopted a cat named Tom we ran the Lisbon marathon my knee hurts physio said rest book flight Porto "
         "garden roses sister wedding").split()
IDENT = st.text(alphabet="abcxyz019-_:", min_size=1, max_size=6)
SPEAKER = st.sampled_from(["Ann", "Bob", "Émile", "李", "O'Neil"])
GOOD_TEXT = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
HUGE = st.builds(lambda ch, n: (ch * n)[:n], st.sampled_from(["word ", "é", "😀 cat ", "a\x00"]),
                 st.sampled_from([100_000, 1_000_000]))  # 100 kB and 1 MB (characters)
# what builds take (the test doubles embed word by word: 1 MB of one-letter words takes them half a minute)
HUGE_BUILD = st.builds(lambda ch, n: (ch * n)[:n], st.sampled_from(["word ", "é", "😀"]),
                       st.sampled_from([100_000, 100_000, 1_000_000]))
NASTY = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=30),  # any code point, lone surrogates too
    st.sampled_from(["", " ", "\t\n", "\x00", "a\x00b", "\x1b[31mred\x1b[0m", "\u2028x", "\ufeffx", "\ud800",
                     "x\udfffy", "é😀", "\x7f", "\x85", "\u200b", "\x1c", "line\nbreak", "\r"]),
)
WRONG = st.one_of(st.none(), st.booleans(), st.floats(), st.lists(st.integers(-5, 5), max_size=2),
                  st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2))
SMALL_INT = st.integers(-10**6, 10**6)


def text_ok(v) -> bool:
    """A field value the readers accept: a string or an integer (not a boolean), non-blank, valid Unicode."""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        return False
    s = str(v)
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return bool(s.strip())


def optional_ok(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        return False
    try:
        str(v).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def question_ok(q) -> bool:
    """A question the API answers: a string, non-blank, valid Unicode."""
    return isinstance(q, str) and text_ok(q)


def record_verdict(rec) -> str | None:
    """The oracle for one JSONL record / Memory.add dict: None (accepted) or what the error must name."""
    if not isinstance(rec, dict):
        return "object"
    if any(k not in FIELDS for k in rec):
        return "unknown fields"
    for f in REQUIRED:
        if f == "message_id" and f not in rec:
            continue  # derived from speaker, text and date (ingest.MessageIds), in either shape
        if f not in rec or not text_ok(rec[f]):
            return f
    for f in OPTIONAL:
        if f in rec and not optional_ok(rec[f]):
            return f
    return None


def key_of(rec: dict) -> tuple[str, str]:
    """A record's key; a derived id is its own (a repeat of the same words gets "-k": never "appears twice")."""
    return str(rec["conversation_id"]), str(rec["message_id"]) if "message_id" in rec else f"derived {id(rec)}"


def message_invariants(msgs: list[Message]) -> bool:
    """What every accepted message satisfies: string fields, valid Unicode, non-blank ids, speaker and text,
    (conversation, id) unique."""
    keys = set()
    for m in msgs:
        vals = [m.conversation_id, m.message_id, m.speaker, m.text, m.session, m.session_date]
        if not all(isinstance(v, str) for v in vals):
            return False
        try:
            [v.encode("utf-8") for v in vals]
        except UnicodeEncodeError:
            return False
        if not all(v.strip() for v in vals[:4]):
            return False
        keys.add((m.conversation_id, m.message_id))
    return len(keys) == len(msgs)


# ---- JSONL files ---------------------------------------------------------------------------------------------
JSONL_MUTATIONS = ("none", "none", "drop", "drop_optional", "wrong_type", "int_value", "blank", "extra",
                   "nasty", "huge", "duplicate", "not_object", "truncated_line", "raw_control", "surrogate")


def base_records(draw, convs: list[str], n: int) -> list[dict]:
    recs = []
    for i in range(n):
        r = {"conversation_id": draw(st.sampled_from(convs)), "message_id": f"m{i}", "speaker": draw(SPEAKER),
             "text": draw(GOOD_TEXT)}
        if draw(st.booleans()):
            r["session"] = draw(st.sampled_from(["1", "2", 3, "10", "0"]))  # sessions out of order too
        if draw(st.booleans()):
            r["session_date"] = draw(st.sampled_from(["8 May 2023", "", "yesterday", "2023-13-45"]))
        recs.append(r)
    return recs


@st.composite
def jsonl_files(draw, convs=None, huge=HUGE):
    """(bytes, expected): expected None (accepted) or (line number, what the error names)."""
    n = draw(st.integers(1, 5))
    convs = convs or draw(st.lists(IDENT, min_size=1, max_size=2, unique=True))
    recs: list = base_records(draw, convs, n)
    i = draw(st.integers(0, n - 1))
    kind = draw(st.sampled_from(JSONL_MUTATIONS))
    if kind == "drop":
        del recs[i][draw(st.sampled_from(REQUIRED))]
    elif kind == "drop_optional":
        for f in OPTIONAL:
            recs[i].pop(f, None)
    elif kind == "wrong_type":
        recs[i][draw(st.sampled_from(FIELDS))] = draw(WRONG)
    elif kind == "int_value":
        recs[i][draw(st.sampled_from(FIELDS))] = draw(SMALL_INT)
    elif kind == "blank":
        recs[i][draw(st.sampled_from(REQUIRED))] = draw(st.sampled_from(["", " ", "\n\t", "\u3000"]))
    elif kind == "extra":
        recs[i][draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in FIELDS + CHAT))] = draw(
            st.one_of(WRONG, GOOD_TEXT))  # role or content would make it a chat-shaped record (chat_records)
    elif kind == "nasty":
        recs[i][draw(st.sampled_from(FIELDS))] = draw(NASTY)
    elif kind == "huge":
        recs[i]["text"] = draw(huge)
    elif kind == "duplicate" and n > 1:
        j = draw(st.integers(0, n - 1).filter(lambda j: j != i))
        recs[i]["conversation_id"], recs[i]["message_id"] = recs[j]["conversation_id"], recs[j]["message_id"]
    elif kind == "not_object":
        recs[i] = draw(st.one_of(st.lists(st.integers(), max_size=2), st.text(max_size=5), st.integers(),
                                 st.none(), st.booleans()))
    elif kind == "surrogate":
        recs[i][draw(st.sampled_from(FIELDS))] = draw(st.sampled_from(["\ud800", "a\udc80b", "\udfff"]))
    ascii_only = draw(st.booleans())  # False: non-ASCII raw in the file; a lone surrogate becomes invalid UTF-8

    lines = [json.dumps(r, ensure_ascii=ascii_only) for r in recs]
    expected = None
    if kind == "truncated_line":
        full = lines[i]
        lines[i] = full[: draw(st.integers(1, len(full) - 1))]  # a proper prefix of an object: never valid JSON
        expected = (i, "JSON")
    elif kind == "raw_control":
        ch = draw(st.sampled_from(["\x00", "\x01", "\x1b", "\r"]))
        lines[i] = lines[i].replace('"text": "', '"text": "' + ch, 1)  # raw in a string: invalid JSON
        expected = (i, "JSON")
    else:
        seen: set = set()
        for k, rec in enumerate(recs):
            why = record_verdict(rec)
            if why is None:
                if key_of(rec) in seen:
                    why = "appears twice"
                seen.add(key_of(rec))
            if why is not None:
                if not ascii_only and isinstance(rec, dict) and why in FIELDS and isinstance(rec.get(why), str) \
                        and not optional_ok(rec[why]):
                    why = "UTF-8"  # the lone surrogate was written raw: the line is not UTF-8
                expected = (k, why)
                break
    # blank lines between records are skipped but counted
    origin: list = list(range(len(lines)))
    blanks = draw(st.lists(st.sampled_from(["", " ", "\t"]), max_size=2))
    pos = draw(st.integers(0, len(lines)))
    lines[pos:pos] = blanks
    origin[pos:pos] = [None] * len(blanks)
    if expected is not None:
        expected = (origin.index(expected[0]) + 1, expected[1])
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join(lines) + draw(st.sampled_from(["", newline]))
    data = text.encode("utf-8", errors="surrogatepass")
    return data, expected


def read_twice(prop: str, path: Path, conversations=None):
    """The reader's verdict, and the same messages on a second read (accepted input is accepted consistently)."""
    got, err = attempt(prop, lambda: load_messages(path, conversations))
    if err is None:
        again = load_messages(path, conversations)
        expect(prop, again == got, "a second read gave other messages")
        expect(prop, message_invariants(got), f"accepted messages break an invariant: {got[:3]}")
    else:
        expect(prop, str(path) in str(err), f"the error does not name the file: {err}")
    return got, err


def read_file_twice(prop: str, name: str, data: bytes):
    """Write the case's bytes to a scratch file and read it twice (read_twice): (messages, error)."""
    with scratch() as d:
        p = d / name
        p.write_bytes(data)
        return read_twice(prop, p)


@fuzz(1.0)
@given(case=jsonl_files())
def test_jsonl_records(case):
    data, expected = case
    got, err = read_file_twice("jsonl_records", "messages.jsonl", data)
    if expected is None:
        expect("jsonl_records", err is None, f"valid file refused: {err}")
        expect("jsonl_records", len(got) == len([l for l in data.splitlines() if l.strip()]), "messages lost")
    else:
        line, what = expected
        expect("jsonl_records", err is not None, f"accepted, but line {line} is bad ({what})")
        expect("jsonl_records", f"line {line}:" in str(err) and what in str(err),
               f"the error should name line {line} and {what!r}: {err}")


# ---- the OpenAI / mem0 chat shape ------------------------------------------------------------------------------
CHAT_TEXT = st.one_of(GOOD_TEXT, st.sampled_from(["user", "assistant", "tool"]))
CHAT_BAD = st.one_of(NASTY, WRONG, SMALL_INT)
STAMPS = st.one_of(st.sampled_from(["2024-03-04T10:15:00Z", "4 March 2024", "1:56 pm on 8 May, 2023", "yesterday",
                                    "now", "2024-13-45", "12", "", " ", "\ud800", "2024-03-04" * 12]),
                   st.integers(-10**12, 10**12), st.floats(), st.booleans(), st.none(), NASTY)


@st.composite
def chat_records(draw):
    """A chat-shaped record: each field good, bad, or left out."""
    rec = {"conversation_id": draw(st.sampled_from(["c", "d"]))}
    for f, good, keep in (("role", CHAT_TEXT, 0.9), ("content", GOOD_TEXT, 0.9), ("name", SPEAKER, 0.4),
                          ("timestamp", STAMPS, 0.6), ("session", st.sampled_from(["1", 2, "s"]), 0.3),
                          ("message_id", IDENT, 0.3)):
        if draw(st.floats(0, 1)) < keep:
            rec[f] = draw(good) if draw(st.floats(0, 1)) < 0.8 else draw(CHAT_BAD)
    if draw(st.floats(0, 1)) < 0.05:
        rec["speaker"] = "Ann"  # the two shapes mixed: an unknown field
    return rec


def stamp_ok(v) -> bool:
    """A timestamp the reader takes: a non-blank string, or seconds since 1970 within datetime's years."""
    if isinstance(v, str):
        return bool(v.strip())
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        datetime.fromtimestamp(v, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return False
    return True


def has_day(v: str) -> bool:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(v) <= TIMESTAMP_MAX_CHARS and absolute_day(v) is not None


def chat_verdict(rec: dict) -> str | None:
    """The oracle for one chat-shaped record: None (accepted) or the field its error must name, in the order the
    reader checks them (ingest.from_chat_shape, then the JSONL rules on what it maps to). A record with neither role
    nor content is read by the JSONL rules alone."""
    if "role" not in rec and "content" not in rec:
        return record_verdict(rec)
    if "speaker" in rec:
        return "unknown fields"
    for f in ("role", "content"):
        if not isinstance(rec.get(f), str) or not rec[f].strip():
            return f
    if "name" in rec and (not isinstance(rec["name"], str) or not rec["name"].strip()):
        return "name"
    stamp = rec.get("timestamp")
    if "timestamp" in rec and (not stamp_ok(stamp) or "session" not in rec and isinstance(stamp, str)
                               and not has_day(stamp)):
        return "timestamp"
    if "message_id" in rec and not text_ok(rec["message_id"]):
        return "message_id"
    if "session" in rec and not optional_ok(rec["session"]):
        return "session"
    for f in ("name" if rec.get("name") else "role", "content", "timestamp"):
        if isinstance(rec.get(f), str) and not optional_ok(rec[f]):
            return f
    return None


@fuzz(0.6)
@given(recs=st.lists(chat_records(), min_size=1, max_size=3))
def test_chat_records(recs):
    """Chat-shaped records, alone or beside a JSONL one: the oracle's verdict, naming the line and the field; the
    same verdict and the same derived ids from Memory.add's reader (as_messages); the same ids on a second read."""
    native = {"conversation_id": "c", "message_id": "n0", "speaker": "Ann", "text": "hello"}
    verdicts = [chat_verdict(rec) for rec in recs]
    bad_in_add = next(((k + 2, why) for k, why in enumerate(verdicts) if why is not None), None)
    expected, seen = None, set()
    for k, (rec, why) in enumerate(zip(recs, verdicts)):  # a file also refuses an id given twice (add: the store)
        key = (rec["conversation_id"], str(rec.get("message_id")))
        if why is None and "message_id" in rec and key in seen:
            why = "appears twice"
        seen.add(key)
        if why is not None:
            expected = (k + 2, why)
            break
    with scratch() as d:
        p = d / "chat.jsonl"
        p.write_text("\n".join(json.dumps(r) for r in [native] + recs) + "\n")
        got, err = read_twice("chat_records", p)
    via_add, add_err = attempt("chat_records", lambda: as_messages([native] + recs))
    if expected is None:
        expect("chat_records", err is None, f"valid records refused: {err}")
        expect("chat_records", [m.message_id for m in got] == [m.message_id for m in via_add],
               "the file and Memory.add derive other ids")
    else:
        line, what = expected
        expect("chat_records", err is not None and f"line {line}:" in str(err) and what in str(err),
               f"line {line} should be refused naming {what!r}: {err}")
    if bad_in_add is None:
        expect("chat_records", add_err is None, f"Memory.add refused valid records: {add_err}")
    else:
        line, what = bad_in_add
        expect("chat_records", add_err is not None and f"message {line - 1}:" in str(add_err) and what in str(add_err),
               f"Memory.add should refuse message {line - 1} naming {what!r}: {add_err}")


def cut_verdict(data: bytes, k: int):
    """A valid JSONL file cut after k bytes: "accept", "no messages", or the line number the reader must name
    (the cut line, unless the cut falls at its end or in a blank line)."""
    head = data[:k]
    lines = head.splitlines()
    if not any(l.strip() for l in lines):
        return "no messages"
    complete = k == len(data) or head.endswith((b"\n", b"\r")) or data[k:k + 1] in (b"\n", b"\r")
    return "accept" if complete or not lines[-1].strip() else len(lines)


@st.composite
def damaged_bytes(draw):
    """(bytes, expected for a .jsonl name): random bytes, a valid file cut anywhere (expected: cut_verdict), a
    valid file with bytes flipped or garbage after it (expected None: not predicted)."""
    how = draw(st.sampled_from(["random", "truncated", "truncated", "at_line_end", "flipped", "garbage_tail"]))
    if how == "random":
        return draw(st.binary(max_size=300)), None
    recs = base_records(draw, draw(st.lists(IDENT, min_size=1, max_size=2, unique=True)), draw(st.integers(1, 5)))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    data = (newline.join(json.dumps(r, ensure_ascii=draw(st.booleans())) for r in recs)
            + draw(st.sampled_from(["", newline]))).encode()
    if how == "truncated":
        k = draw(st.integers(0, len(data)))
        return data[:k], cut_verdict(data, k)
    if how == "at_line_end":  # a file cut between two lines (an interrupted writer): what is there is read
        ends = [k for k in range(1, len(data) + 1) if data[k - 1:k] == b"\n"] or [len(data)]
        k = draw(st.sampled_from(ends))
        return data[:k], cut_verdict(data, k)
    if how == "garbage_tail":
        return data + draw(st.binary(min_size=1, max_size=40)), None
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        buf[draw(st.integers(0, len(buf) - 1))] = draw(st.sampled_from([0x00, 0xFF, 0xC3, 0x80, 0x0A, 0x22, 0x7B]))
    return bytes(buf), None


@fuzz(1.0)
@given(case=damaged_bytes(), suffix=st.sampled_from([".jsonl", ".jsonl", ".json"]))
def test_damaged_files(case, suffix):
    """Binary garbage, invalid UTF-8, NUL, truncation, in either format: accepted, or refused naming the file; a
    JSONL file cut mid-line is refused at that line, one cut between lines is read."""
    data, expected = case
    with scratch() as d:
        p = d / f"messages{suffix}"
        p.write_bytes(data)
        got, err = read_twice("damaged_files", p)
    if suffix == ".jsonl" and expected is not None:
        if expected == "accept":
            expect("damaged_files", err is None, f"a file cut between lines refused: {err}")
        elif expected == "no messages":
            expect("damaged_files", err is not None and "no messages" in str(err), f"{err}")
        else:
            expect("damaged_files", err is not None and f"line {expected}:" in str(err),
                   f"a file cut in line {expected}: {err}")


# ---- LoCoMo files --------------------------------------------------------------------------------------------
LOCOMO_MUTATIONS = ("none", "none", "sample_not_object", "sample_id_type", "sample_id_int", "conversation_type",
                    "session_type", "date_type", "date_missing", "turn_not_object", "turn_field_type",
                    "turn_field_missing", "turn_field_blank", "caption_type", "caption_null", "extra_keys",
                    "empty_text", "huge_text", "nasty_text", "surrogate", "duplicate_dia_id", "same_session",
                    "other_session_name", "no_samples", "not_a_list", "reorder_sessions")


@st.composite
def locomo_files(draw, huge=HUGE):
    """(data, expected): expected None (accepted) or a fragment the error names; also the expected message ids
    in order (None when not checked)."""
    samples = []
    for s in range(draw(st.integers(1, 2))):
        conv: dict = {"speaker_a": "Ann", "speaker_b": "Bob"}
        numbers = draw(st.lists(st.integers(1, 12), min_size=1, max_size=3, unique=True))
        for num in numbers:  # written in drawn order: out of order sessions
            conv[f"session_{num}_date_time"] = draw(st.sampled_from(["1:56 pm on 8 May, 2023", "", "soon"]))
            turns = []
            for k in range(draw(st.integers(1, 3))):
                t = {"speaker": draw(SPEAKER), "dia_id": f"D{num}:{k + 1}", "text": draw(GOOD_TEXT)}
                if draw(st.integers(0, 4)) == 0:
                    t["blip_caption"] = "a photo of a cat"
                turns.append(t)
            conv[f"session_{num}"] = turns
        samples.append({"sample_id": f"conv-{s}", "conversation": conv, "qa": [], "event_summary": {}})
    kind = draw(st.sampled_from(LOCOMO_MUTATIONS))
    si = draw(st.integers(0, len(samples) - 1))
    sample = samples[si]
    conv = sample["conversation"]
    sessions = [k for k in conv if k.startswith("session_") and not k.endswith("date_time")]
    sess = draw(st.sampled_from(sessions))
    ti = draw(st.integers(0, len(conv[sess]) - 1))
    turn = conv[sess][ti]
    expected: str | None = None
    data: object = samples
    if kind == "sample_not_object":
        samples[si] = draw(st.one_of(st.lists(st.integers(), max_size=2), st.text(max_size=4), st.none()))
        expected = "needs 'sample_id'"
    elif kind == "sample_id_type":
        sample["sample_id"] = draw(st.one_of(st.none(), st.booleans(), st.floats(), st.lists(st.integers(),
                                                                                              max_size=1)))
        expected = "sample_id"
    elif kind == "sample_id_int":
        sample["sample_id"] = 100 + si  # an integer id is read as its string
    elif kind == "conversation_type":
        sample["conversation"] = draw(st.one_of(st.lists(st.text(max_size=3), max_size=2), st.text(max_size=9),
                                                st.integers(), st.none()))
        expected = "'conversation' must be an object"
    elif kind == "session_type":
        conv[sess] = draw(st.one_of(st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
                                    st.text(max_size=4), st.integers(), st.none()))
        expected = "expected a list of turns"
    elif kind == "date_type":
        conv[f"{sess}_date_time"] = draw(WRONG.filter(lambda v: not isinstance(v, str)))
        expected = "_date_time: expected a string"
    elif kind == "date_missing":
        del conv[f"{sess}_date_time"]
    elif kind == "turn_not_object":
        conv[sess][ti] = draw(st.one_of(st.lists(st.integers(), max_size=2), st.text(max_size=4), st.none()))
        expected = "needs string 'speaker', 'dia_id', 'text'"
    elif kind == "turn_field_type":
        turn[draw(st.sampled_from(["speaker", "dia_id", "text"]))] = draw(st.one_of(WRONG, SMALL_INT))
        expected = "needs string 'speaker', 'dia_id', 'text'"
    elif kind == "turn_field_missing":
        del turn[draw(st.sampled_from(["speaker", "dia_id", "text"]))]
        expected = "needs string 'speaker', 'dia_id', 'text'"
    elif kind == "turn_field_blank":
        turn[draw(st.sampled_from(["speaker", "dia_id"]))] = draw(st.sampled_from(["", " ", "\n"]))
        expected = "needs string 'speaker', 'dia_id', 'text'"
    elif kind == "caption_type":
        turn["blip_caption"] = draw(st.one_of(st.booleans(), st.integers(1, 9), st.lists(st.integers(),
                                                                                          min_size=1, max_size=2)))
        expected = "'blip_caption' must be a string"
    elif kind == "caption_null":
        turn["blip_caption"] = None
    elif kind == "extra_keys":
        target = draw(st.sampled_from(["sample", "conv", "turn"]))
        key = draw(st.text(min_size=1, max_size=8).filter(lambda k: not k.startswith("session_")))
        {"sample": sample, "conv": conv, "turn": turn}[target].setdefault(key, draw(st.one_of(WRONG, GOOD_TEXT)))
    elif kind == "empty_text":
        turn["text"] = draw(st.sampled_from(["", " ", "\n\t"]))
        expected = None if turn.get("blip_caption") else "empty text"
    elif kind == "huge_text":
        turn["text"] = draw(huge)
        expected = None if turn["text"].strip() else "empty text"
    elif kind == "nasty_text":
        turn["text"] = draw(NASTY)
        full = turn["text"] + (f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else "")
        if not full.strip():
            expected = "empty text"
        elif not optional_ok(full):
            expected = "not valid Unicode"
    elif kind == "surrogate":
        where = draw(st.sampled_from(["sample_id", "speaker", "dia_id", "text", "date"]))
        bad = "x\ud83d"
        if where == "sample_id":
            sample["sample_id"] = bad
        elif where == "date":
            conv[f"{sess}_date_time"] = bad
        else:
            turn[where] = bad
        expected = "not valid Unicode"
    elif kind == "duplicate_dia_id":
        others = [(k, j) for k in sessions for j in range(len(conv[k])) if (k, j) != (sess, ti)]
        if others:
            k, j = draw(st.sampled_from(others))
            turn["dia_id"] = conv[k][j]["dia_id"]
            expected = "appears twice"
    elif kind == "same_session":
        num = int(sess.rsplit("_", 1)[1])
        conv[f"session_0{num}"] = [{"speaker": "Ann", "dia_id": f"X{num}", "text": "hello there"}]
        expected = "name the same session"
    elif kind == "other_session_name":
        conv[draw(st.sampled_from(["Session_1", "session_x", "session_1_extra", "session-2"]))] = 5  # not a session
    elif kind == "no_samples":
        data = []
        expected = "no messages"
    elif kind == "not_a_list":
        data = draw(st.one_of(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.text(max_size=5),
                              st.integers(), st.none()))
        expected = "expected a list of LoCoMo samples"
    elif kind == "reorder_sessions":
        items = list(conv.items())
        conv.clear()
        conv.update(reversed(items))
    ascii_only = draw(st.booleans())
    text = json.dumps(data, ensure_ascii=ascii_only, indent=draw(st.sampled_from([None, 1])))
    if not ascii_only and expected == "not valid Unicode":
        expected = "not valid UTF-8"  # the lone surrogate was written raw
    order = None
    if expected is None and isinstance(data, list) and all(isinstance(s, dict) for s in data):
        order = []
        for s in data:
            c = s["conversation"]
            for k in sorted((k for k in c if k.startswith("session_") and k[8:].isdigit()), key=lambda k: int(k[8:])):
                order += [(str(s["sample_id"]), t["dia_id"]) for t in c[k]]
    return text.encode("utf-8", errors="surrogatepass"), expected, order


@fuzz(1.0)
@given(case=locomo_files())
def test_locomo_records(case):
    data, expected, order = case
    got, err = read_file_twice("locomo_records", "locomo.json", data)
    if expected is None:
        expect("locomo_records", err is None, f"valid file refused: {err}")
        if order is not None:
            expect("locomo_records", [(m.conversation_id, m.message_id) for m in got] == order,
                   "messages not in session order")
            expect("locomo_records", all(int(a.session) <= int(b.session) for a, b in zip(got, got[1:])
                                         if a.conversation_id == b.conversation_id), "sessions out of order")
    else:
        expect("locomo_records", err is not None and expected in str(err), f"expected {expected!r}, got {err}")


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.floats(), SMALL_INT, st.text(st.characters(exclude_categories=()),
                                                                        max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.one_of(st.sampled_from(["sample_id", "conversation", "session_1",
                                                                       "session_1_date_time", "speaker", "dia_id",
                                                                       "text", "blip_caption", "session_02"]),
                                                      st.text(max_size=5)), inner, max_size=4)),
    max_leaves=20)


@fuzz(1.0)
@given(value=JSON_VALUES, grafted=st.booleans(), where=st.integers(0, 8))
def test_locomo_any_json(value, grafted, where):
    """Any JSON value, alone or grafted into a valid LoCoMo file: accepted, or refused naming the file."""
    if grafted:
        conv = {"session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "hi"},
                              {"speaker": "Bob", "dia_id": "D1:2", "text": "hello"}],
                "session_1_date_time": "8 May 2023"}
        sample = {"sample_id": "c", "conversation": conv}
        slots = [(sample, "sample_id"), (sample, "conversation"), (conv, "session_1"), (conv, "session_1_date_time"),
                 (conv, "session_2"), (conv["session_1"][0], "speaker"), (conv["session_1"][0], "dia_id"),
                 (conv["session_1"][1], "text"), (conv["session_1"][1], "blip_caption")]
        holder, key = slots[where]
        holder[key] = value
        value = [sample]
    with scratch() as d:
        p = d / "locomo.json"
        p.write_bytes(json.dumps(value).encode())
        read_twice("locomo_any_json", p)


PATH_KINDS = ("missing", "directory.json", "directory.jsonl", "directory", "empty.json", "empty.jsonl",
              "blank.jsonl", "blank.json", "long_name", "dangling_link", "link_loop", "nul_in_name",
              "valid_via_link", "bom.jsonl")


@fuzz(0.1)
@given(kind=st.sampled_from(PATH_KINDS))
def test_reader_paths(kind):
    """A directory instead of a file, an empty file, a missing one, a name too long, links: refused naming the
    path (a valid file through a link is read)."""
    with scratch() as d:
        good = d / "good.jsonl"
        good.write_text(json.dumps({"conversation_id": "c", "message_id": "1", "speaker": "A", "text": "hi"}))
        p = d / kind
        if kind.startswith("directory"):
            p.mkdir()
        elif kind.startswith("empty"):
            p.write_bytes(b"")
        elif kind.startswith("blank"):
            p.write_bytes(b"\n \n\t\n")
        elif kind == "long_name":
            p = d / ("x" * 300 + ".jsonl")
        elif kind == "dangling_link":
            p = d / "link.jsonl"
            p.symlink_to(d / "nowhere.jsonl")
        elif kind == "link_loop":
            p = d / "loop.jsonl"
            p.symlink_to(p)
        elif kind == "nul_in_name":
            p = Path(str(d / "a\x00b.jsonl"))
        elif kind == "valid_via_link":
            p = d / "link.jsonl"
            p.symlink_to(good)
        elif kind == "bom.jsonl":
            p.write_bytes(b"\xef\xbb\xbf" + good.read_bytes())
        got, err = attempt("reader_paths", lambda: load_messages(p))
    if kind == "valid_via_link":
        expect("reader_paths", err is None and len(got) == 1, f"a valid file through a link: {err}")
    elif kind != "bom.jsonl":  # a byte order mark: either verdict
        expect("reader_paths", err is not None, f"{kind} accepted")


# ---- the command line ----------------------------------------------------------------------------------------
BASE = [{"conversation_id": "c0", "message_id": f"m{i}", "speaker": "AB"[i % 2], "text": t}
        for i, t in enumerate(["I adopted a cat named Tom", "what a lovely cat", "we ran the Lisbon marathon",
                               "my knee hurts after the marathon", "the physio said rest", "book a flight to Porto"])]


# one model instance: with several (the default for several conversations on llama.cpp) `membox build` makes a
# llama.cpp pool itself, which the doubles do not replace
ONE = ["--jobs", "1", "--json"]  # one model instance; the build's stats as JSON


@pytest.fixture(scope="module")
def doubles():
    """The models replaced by the test doubles, as tests/test_offline.py does for the command line."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(backends, "make_backend", lambda llm: FakeBackend())
        mp.setattr(memory, "make_embedder", lambda emb: FakeEmbedder())
        mp.setitem(continuity.MODELS, "scorer", FakeContinuityScorer)  # the default's cross-encoder
        # the models' checks before a build (files found, servers answering) are for the real models: the model
        # names a config gives are fuzzed in test_configs (resolve_model)
        mp.setattr(memory, "preflight_models", lambda *a, **kw: None, raising=False)
        yield


@pytest.fixture(scope="module")
def built(doubles, tmp_path_factory) -> Path:
    """A memory folder built by `membox build` from BASE (conversation c0, m0..m5): copied for each case."""
    d = tmp_path_factory.mktemp("fuzz-store")
    data = d / "base.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in BASE))
    rc, out, err = run_cli(["build", str(data), "--store", str(d / "store"), *ONE])
    assert rc == 0, err
    return d / "store"


@st.composite
def any_data_file(draw):
    """(name, bytes): structured JSONL (some touching the built store's conversation c0), LoCoMo, or garbage,
    under either suffix."""
    kind = draw(st.sampled_from(["jsonl", "jsonl", "jsonl_c0", "locomo", "locomo", "garbage"]))
    if kind.startswith("jsonl"):
        data = draw(jsonl_files(convs=["c0", "c1"] if kind == "jsonl_c0" else None, huge=HUGE_BUILD))[0]
        suffix = draw(st.sampled_from([".jsonl"] * 5 + [".json"]))
    elif kind == "locomo":
        data = draw(locomo_files(huge=HUGE_BUILD))[0]
        suffix = draw(st.sampled_from([".json"] * 5 + [".jsonl", ""]))
    else:
        data, _ = draw(damaged_bytes())
        suffix = draw(st.sampled_from([".json", ".jsonl"]))
    return f"data{suffix}", data


@fuzz(0.5)
@given(case=any_data_file(), existing=st.booleans(), select=st.one_of(st.none(), st.lists(
    st.sampled_from(["c0", "c1", "conv-0", "conv-1", "nope"]), min_size=1, max_size=2, unique=True)))
def test_cli_build(built, case, existing, select):
    """`membox build FILE --store DIR`: exit 0, or 2 with the reader's one-line error (or the store's, for a
    message id stored with other text); a refusal leaves DIR byte for byte as it was, or absent."""
    name, data = case
    prop = "cli_build"
    with scratch() as d:
        p = d / name
        p.write_bytes(data)
        store = d / "store"
        if existing:
            shutil.copytree(built, store)
        before = folder_state(store)
        sel = ["--conversations", *select] if select else []
        reader_err = None
        try:
            load_input(p, select)  # the command's reader: a chat export, or ingest.load_messages
        except InputError as exc:
            reader_err = exc
        rc, out, err = _cli_case(prop, ["build", str(p), "--store", str(store), *ONE, *sel])
        if reader_err is not None:
            expect(prop, rc == 2, f"the reader refuses ({reader_err}) but the build exited {rc}")
            check_error_line(prop, err, reader_err)
            assert_unchanged(prop, before, folder_state(store))
        elif rc == 2:
            line = check_error_line(prop, err)
            expect(prop, existing and "already stored with other content" in line, f"valid file refused: {line}")
            assert_unchanged(prop, before, folder_state(store), lock_taken=True)
        elif rc == 1:  # built, but more boxes failed than [extract] max_failed_share allows: one error line
            errors = [l for l in err.splitlines() if l.startswith("error: ")]
            expect(prop, len(errors) == 1, f"exit 1 with {len(errors)} error lines: {err[-500:]}")
        else:
            expect(prop, rc == 0 and json.loads(out)["conversations"] >= 1, f"exit {rc}")
            rc2, _, err2 = run_cli(["build", str(p), "--store", str(store), *ONE, *sel])
            expect(prop, rc2 == 0 and " 0 new messages" in err2, f"a rebuild of accepted input: {rc2} {err2[-300:]}")


class Refused(StoreError):
    """_cli_verdict's way to report `exit 2` to attempt() as a refusal (args: message, rc, stdout, stderr)."""


def _cli_verdict(argv):
    rc, out, err = run_cli(argv)
    if rc == 2:
        raise Refused(err, rc, out, err)
    return rc, out, err


def _cli_case(prop, argv):
    """attempt() over a command: (rc, stdout, stderr), counted accepted (exit 0) or rejected (exit 2)."""
    res, refused = attempt(prop, lambda: _cli_verdict(argv))
    return res if refused is None else refused.args[1:]


QUESTION = st.one_of(GOOD_TEXT.map(lambda t: t + "?"), NASTY, HUGE.map(lambda t: t[:100_000]),
                     st.sampled_from(["", " ", "\n", "?", "\x00", "cat\x00", "\udcff", "cat \ud800"]))


@fuzz(0.2)
@given(question=QUESTION, as_json=st.booleans())
def test_cli_ask(built, question, as_json):
    """`membox ask DIR -- QUESTION`: exit 0, or 2 with one error line (an empty or non-UTF-8 question, as argv
    carries undecodable bytes as lone surrogates), the store unchanged."""
    prop = "cli_ask"
    with scratch() as d:
        store = d / "store"
        shutil.copytree(built, store)
        before = folder_state(store)
        rc, out, err = _cli_case(prop, ["ask", str(store), *(["--json"] if as_json else []), "--", question])
        if rc == 2:
            check_error_line(prop, err)
            expect(prop, not question_ok(question), f"a valid question refused: {err}")
            assert_unchanged(prop, before, folder_state(store))
        else:
            expect(prop, rc == 0 and question_ok(question), f"exit {rc} for {question[:40]!r}")


# ---- the Python API ------------------------------------------------------------------------------------------
class Opaque:
    """An object no reader knows."""


API_WRONG = st.one_of(WRONG, st.just(b"bytes"), st.builds(Opaque), st.just(("a",)))


@st.composite
def api_items(draw):
    kind = draw(st.sampled_from(["dict", "dict", "message", "mutated_dict", "mutated_dict", "mutated_message",
                                 "not_a_record", "base_conflict", "base_same"]))
    rec = {"conversation_id": draw(st.sampled_from(["c0", "c1", "c2"])), "message_id": f"x{draw(IDENT)}",
           "speaker": draw(SPEAKER), "text": draw(GOOD_TEXT)}
    if draw(st.booleans()):
        rec["session"] = draw(st.sampled_from(["1", "2", 7]))
    if kind == "base_conflict":  # an id the built store holds, with other text: StoreError
        rec = dict(draw(st.sampled_from(BASE)), text="something else entirely")
    elif kind == "base_same":  # a stored message again: skipped
        rec = dict(draw(st.sampled_from(BASE)))
    elif kind in ("mutated_dict", "mutated_message"):
        how = draw(st.sampled_from(["drop", "extra", "wrong", "int", "nasty", "huge", "blank"]))
        f = draw(st.sampled_from(FIELDS if how != "drop" else REQUIRED))
        if how == "drop":
            del rec[f]
        elif how == "extra":
            rec[draw(st.sampled_from(["seq", "foo", "Text", "box_id", ""]))] = draw(st.one_of(API_WRONG, GOOD_TEXT))
        elif how == "wrong":
            rec[f] = draw(API_WRONG)
        elif how == "int":
            rec[f] = draw(SMALL_INT)
        elif how == "nasty":
            rec[f] = draw(NASTY)
        elif how == "huge":
            rec["text"] = draw(HUGE_BUILD)
        else:
            rec[draw(st.sampled_from(REQUIRED))] = draw(st.sampled_from(["", "  ", "\n"]))
        if kind == "mutated_message" and set(rec) <= set(FIELDS) and set(REQUIRED) <= set(rec):
            return Message(**rec)
    elif kind == "not_a_record":
        return draw(st.one_of(st.integers(), st.text(max_size=3), st.none(), st.lists(st.integers(), max_size=2),
                              st.builds(Opaque)))
    return Message(**rec) if kind == "message" else rec


def item_verdict(item) -> str | None:
    if isinstance(item, Message):
        item = {f: getattr(item, f) for f in FIELDS}
    elif not isinstance(item, dict):
        return "expected a Message or a dict"
    return record_verdict(item)


API_BATCHES = st.one_of(  # (how the batch is passed, its items or the value itself)
    st.tuples(st.sampled_from(["list", "list", "tuple", "generator"]), st.lists(api_items(), max_size=4)),
    st.tuples(st.just("value"), st.one_of(st.sampled_from([None, 5, 2.5, "text", b"bytes", {"text": "x"}]),
                                          st.builds(Message, IDENT, IDENT, SPEAKER, GOOD_TEXT))),
)


def api_config():
    cfg = load_config(DEFAULT_CONFIG)  # the config `membox build` gave the built store
    cfg.answer.llm = {}  # the double that builds also answers
    return cfg


CPU = api_config()


def open_memory(store: Path) -> Memory:
    return Memory(store, copy.deepcopy(CPU), backend=FakeBackend(), embedder=FakeEmbedder())


def as_record(x):
    """A batch item as a JSONL line would hold it (a Message by its fields; its seq is not read)."""
    return {f: getattr(x, f) for f in FIELDS} if isinstance(x, Message) else x


@fuzz(0.5)
@given(batch=API_BATCHES)
def test_api_add(built, batch):
    """Memory.add with wrong types, missing fields, extra keys, non-str or huge text: accepted, or InputError
    (StoreError for an id stored with other text) and the store unchanged; the verdict is the JSONL reader's for
    the same records; accepted messages added again add nothing."""
    prop = "api_add"
    how, items = batch
    arg = {"list": list, "tuple": tuple, "generator": lambda xs: (x for x in xs), "value": lambda v: v}[how](items)
    with scratch() as d:
        store = d / "store"
        shutil.copytree(built, store)
        before = folder_state(store)
        with open_memory(store) as mem:
            _, err = attempt(prop, lambda: mem.add(arg))
        if err is not None:
            assert_unchanged(prop, before, folder_state(store), lock_taken=isinstance(err, StoreError))
        if how == "value":
            expect(prop, isinstance(err, InputError) and "expected a list of messages" in str(err), f"{err!r}")
            return
        whys = [item_verdict(x) for x in items]
        bad = next(((k, w) for k, w in enumerate(whys) if w is not None), None)
        if bad is not None:
            expect(prop, isinstance(err, InputError) and f"message {bad[0]}:" in str(err) and bad[1] in str(err),
                   f"item {bad[0]} is bad ({bad[1]}): {err!r}")
        elif err is not None:
            expect(prop, isinstance(err, StoreError) and "already stored with other content" in str(err),
                   f"valid messages refused: {err!r}")
        else:
            with open_memory(store) as mem:
                expect(prop, mem.add(items) == 0, "the same messages added again were added twice")
        # the same records as JSONL lines get the same verdict (aside: an empty batch, which add takes to resume
        # a build; a repeated id, which add skips; an id stored with other text; values JSON cannot hold)
        records = [as_record(x) for x in items]
        try:
            lines = [json.dumps(x) for x in records]
        except (TypeError, ValueError):
            return
        keys = [key_of(x) for x in records if record_verdict(x) is None]
        if lines and len(keys) == len(set(keys)) and not isinstance(err, StoreError):
            p = d / "same.jsonl"
            p.write_text("\n".join(lines), encoding="utf-8")
            _, jsonl_err = attempt("api_add_as_jsonl", lambda: load_jsonl(p))
            expect(prop, (jsonl_err is None) == (err is None),
                   f"add says {err!r}, the JSONL reader {jsonl_err!r}, for {records!r:.300}")


@fuzz(0.5)
@given(method=st.sampled_from(["search", "context", "answer"]), question=st.one_of(QUESTION, API_WRONG))
def test_api_questions(built, method, question):
    """search/context/answer with empty, 100 kB, NUL, lone-surrogate or non-text questions: an answer (the same
    when asked again), or InputError and the store unchanged."""
    prop = "api_questions"
    with scratch() as d:
        store = d / "store"
        shutil.copytree(built, store)
        before = folder_state(store)

        def ask(mem):
            res = getattr(mem, method)(question)
            if method == "search":
                return [(b.id, round(s, 6)) for b, s in res]
            return res.text if method == "context" else (res.text, res.context.text)

        with open_memory(store) as mem:
            first, err = attempt(prop, lambda: ask(mem))
            if err is None:
                expect(prop, ask(mem) == first, "the same question answered differently")
        expect(prop, (err is None) == question_ok(question), f"{method}({question!r:.60}): {err!r}")
        if err is not None:
            expect(prop, isinstance(err, InputError), f"{err!r}")
            assert_unchanged(prop, before, folder_state(store))


# ---- configs -------------------------------------------------------------------------------------------------
class Raw(str):
    """A TOML value written as is (a date, an unterminated array)."""


def toml_value(v) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(v), repr(v))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def toml_doc(top: dict, sections: dict) -> str:
    out = [f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in top.items()]
    out += [f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in sections.items()
            if not isinstance(v, dict)]  # before the first [header], or it would land in that table
    for name, table in sections.items():
        if not isinstance(table, dict):
            continue
        out.append(f"[{json.dumps(name, ensure_ascii=False)}]")
        out += [f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(out) + "\n"


# values each key accepts, chosen so that no two conflict (cross-key rules are their own mutations)
VALID = {
    "llm": {"backend": ["llamacpp", "openai", "vllm", "transformers"], "n_ctx": [256, 4096], "n_threads": [0, 2],
            "temperature": [0.0, 0.7, 2, 1], "seed": [0, -3, 42], "max_retries": [0, 10], "base_url": ["", "https://x"],
            "timeout_s": [0.1, 60], "response_format": ["json_object"], "extra_body": [{}, {"repeat_penalty": 1.0}],
            "dtype": ["auto", "bfloat16"], "allow_insecure_http": [True, False]},
    "embedder": {"batch_size": [1, 64], "device": ["cpu"]},
    "loom": {"window": [1, 64], "threshold": [-1.0, 0.3, 1], "prob_threshold": [0.0, 1.0], "bias": [0.0, -2.5],
             "seal_on_session_change": [True, False], "lm_knot": [0.5], "switch_ratio": [0.0, 0.4]},
    "extract": {"max_topic_chars": [8, 80], "max_keywords": [1, 8], "min_grounding": [0.0, 1.0],
                "speaker_grounding": [False]},
    "weaver": {"enabled": [True, False], "vote_threshold": [-1.0, 1.0], "max_candidates": [1, 4]},
    "retrieve": {"mode": ["box-hits", "compact"], "k": [1, 10], "budget_tokens": [1, 1500], "event_k": [0, 2],
                 "resolve_dates": [False]},
    "answer": {"max_tokens": [1, 48], "llm": [{}, {"model": "qwen2.5-coder-0.5b"}, {"temperature": 0.5}]},
    "memory": {"systems": [["membox"]]},
}
DEFAULTS = {s: asdict(CPU)[s] for s in VALID}
CONFIG_MUTATIONS = ("none", "none", "unknown_section", "unknown_key", "wrong_type", "out_of_range", "bad_choice",
                    "not_a_table", "bad_extends", "good_extends", "extends_loop", "model_name", "min_over_max",
                    "systems", "weights", "garbage", "deep", "duplicate_key", "date_value", "nasty_string")


KEY = st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=10)  # TOML can quote these


def wrong_for(default):
    """A value of another type than the key's (an int where a float goes is accepted, so not drawn for floats)."""
    if isinstance(default, bool):
        return st.one_of(st.integers(0, 1), st.sampled_from(["true", "yes"]))
    if isinstance(default, int):
        return st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.just("7"), st.just([1]))
    if isinstance(default, float):
        return st.one_of(st.booleans(), st.just("0.5"), st.just([0.5]), st.just({"a": 1}))
    if isinstance(default, str):
        return st.one_of(st.integers(), st.booleans(), st.just(["x"]), st.just({"x": 1}), st.just(Raw("1979-05-27")))
    if isinstance(default, dict):
        return st.one_of(st.integers(), st.just("x"), st.just([1]))
    return st.one_of(st.integers(), st.just("membox"))


@st.composite
def config_files(draw):
    """(files {name: text or bytes}, expected): expected None (accepted), a fragment the error names, or
    "either" (a verdict not predicted)."""
    top: dict = {}
    sections: dict = {}
    for name in draw(st.lists(st.sampled_from(sorted(VALID)), max_size=3, unique=True)):
        keys = draw(st.lists(st.sampled_from(sorted(VALID[name])), min_size=1, max_size=3, unique=True))
        sections[name] = {k: draw(st.sampled_from(VALID[name][k])) for k in keys}
    if draw(st.booleans()):
        top["name"] = draw(st.one_of(IDENT, st.integers()))
    kind = draw(st.sampled_from(CONFIG_MUTATIONS))
    extra: dict = {}
    expected: str | None = None
    sec = draw(st.sampled_from(sorted(VALID)))
    if kind == "unknown_section":
        name = draw(KEY.filter(lambda s: s not in VALID and s not in ("name", "extends")))
        sections[name] = {"x": 1}
        expected = "unknown section"
    elif kind == "unknown_key":
        key = draw(KEY.filter(lambda k: k not in DEFAULTS[sec]))
        sections.setdefault(sec, {})[key] = draw(st.one_of(st.integers(), GOOD_TEXT))
        expected = "unknown key"
    elif kind == "wrong_type":
        key = draw(st.sampled_from(sorted(DEFAULTS[sec])))
        sections.setdefault(sec, {})[key] = draw(wrong_for(DEFAULTS[sec][key]))
        expected = f"{key}"
    elif kind == "out_of_range":
        sec, key, value = draw(st.sampled_from([("llm", "n_ctx", 255), ("llm", "temperature", 2.5),
                                                ("llm", "temperature", -0.1), ("loom", "window", 0),
                                                ("loom", "window", 65), ("llm", "max_retries", 11),
                                                ("retrieve", "k", 0), ("extract", "min_grounding", 1.5),
                                                ("llm", "timeout_s", 0), ("loom", "threshold", float("nan")),
                                                ("loom", "bias", float("inf")), ("llm", "gpu_memory_utilization", 0)]))
        sections.setdefault(sec, {})[key] = value
        expected = key
    elif kind == "bad_choice":
        sec, key = draw(st.sampled_from([("llm", "backend"), ("embedder", "backend"), ("loom", "judge"),
                                         ("llm", "response_format"), ("retrieve", "mode")]))
        sections.setdefault(sec, {})[key] = draw(st.sampled_from(["", "LLAMACPP", "psychic", "box hits"]))
        expected = key if key != "mode" else "mode"
    elif kind == "not_a_table":
        sections[sec] = draw(st.one_of(st.integers(), GOOD_TEXT, st.just([1, 2])))
        expected = "must be a table"
    elif kind == "bad_extends":
        top["extends"] = draw(st.one_of(st.integers(), st.just(["cpu"]), st.just({"a": 1}), st.just("no-such-config"),
                                        st.just("nope.toml"), st.just("x" * 300), st.just("x" * 300 + ".toml"),
                                        st.just("a\x00b.toml"), st.just("../configs"), st.just("dir.toml"),
                                        st.just("bad.toml")))
        extra["bad.toml"] = "[loom]\nthreshhold = 0.4\n"
        expected = "extends" if top["extends"] != "bad.toml" else "threshhold"
    elif kind == "good_extends":
        top["extends"] = draw(st.sampled_from(["cpu", "cpu-fast", "openai", "vllm", "base.toml"]))
        extra["base.toml"] = "extends = \"cpu\"\n[retrieve]\nk = 3\n"
    elif kind == "extends_loop":
        top["extends"] = draw(st.sampled_from(["config.toml", "other.toml"]))
        extra["other.toml"] = "extends = \"config.toml\"\n"
        expected = "loop"
    elif kind == "model_name":  # a model no manifest names: the config loads, the model is not found
        sections.setdefault("llm", {})["model"] = draw(st.one_of(st.sampled_from(["", " ", "x" * 300, "no-such",
                                                                                 "~nobody/m.gguf"]), IDENT))
    elif kind == "min_over_max":
        sections.setdefault("loom", {}).update(min_box_messages=5, max_box_messages=4)
        expected = "exceeds max_box_messages"
    elif kind == "systems":
        sections["memory"] = {"systems": draw(st.sampled_from([[], ["membox", "membox"], ["nope"], [1], [[1]],
                                                               [{"a": 1}], ["membox", 2]]))}
        expected = "systems"
    elif kind == "weights":
        sections.setdefault("loom", {}).update(judge="hybrid", weights=draw(st.sampled_from(
            [{"cos_psychic": 1.0}, {"cos_last": "x"}, {"cos_last": True}, {}, {"cos_last": float("nan")}])))
        expected = "weights"
    elif kind == "garbage":
        body = draw(st.one_of(st.binary(max_size=200), st.text(st.characters(exclude_categories=()), max_size=80)))
        return {"config.toml": body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")}, "either"
    elif kind == "deep":
        return {"config.toml": b"a = " + b"[" * draw(st.sampled_from([50, 5000, 100_000])) + b"\n"}, "either"
    elif kind == "duplicate_key":
        return {"config.toml": b"[llm]\nseed = 1\nseed = 2\n"}, "not valid TOML"
    elif kind == "date_value":
        sections.setdefault("llm", {})["model"] = Raw(draw(st.sampled_from(["1979-05-27", "07:32:00",
                                                                            "1979-05-27T07:32:00Z"])))
        expected = "model"
    elif kind == "nasty_string":
        sections.setdefault("llm", {})["model"] = draw(NASTY)
        expected = "either"
    text = toml_doc(top, sections)
    files = {"config.toml": text.encode("utf-8", errors="surrogatepass"), **extra}
    return files, expected


def written_values(files) -> dict | None:
    """What the file sets, for checking a loaded config against (None when it extends another)."""
    import tomllib

    try:
        data = tomllib.loads(files["config.toml"].decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return None if "extends" in data else data


def write_config_files(d, files) -> None:
    """The case's files in the scratch folder `d`, beside a directory named like a config (dir.toml)."""
    (d / "dir.toml").mkdir()
    for name, body in files.items():
        (d / name).write_bytes(body if isinstance(body, bytes) else body.encode())


@fuzz(1.0)
@given(case=config_files())
def test_configs(case):
    """TOML configs with unknown sections and keys, wrong types, values out of range, bad extends, garbage: a
    Config, or a ConfigError naming the file and the key; an accepted config holds what its file says, loads
    the same twice, and a model name it gives that no manifest has is ModelNotFound, not a crash."""
    files, expected = case
    prop = "configs"
    with scratch() as d:
        write_config_files(d, files)
        path = d / "config.toml"
        cfg, err = attempt(prop, lambda: load_config(path))
        if err is None:
            expect(prop, expected in (None, "either"), f"accepted, expected a refusal naming {expected!r}")
            expect(prop, load_config(path).to_dict() == cfg.to_dict(), "loaded twice, two configs")
            data = written_values(files)
            for sec, table in (data or {}).items():
                if isinstance(table, dict):
                    for key, value in table.items():
                        got = getattr(getattr(cfg, sec), key)
                        expect(prop, got == value or (value != value and got != got),
                               f"[{sec}] {key} = {value!r} loaded as {got!r}")
            model = cfg.llm.model
            if model not in load_manifest():
                attempt("model_names", lambda: resolve_model(model))
        else:
            expect(prop, isinstance(err, ConfigError), f"{err!r}")
            expect(prop, expected is not None, f"valid config refused: {err}")
            if expected not in (None, "either"):
                expect(prop, expected in str(err), f"the error should name {expected!r}: {err}")
            expect(prop, str(d) in str(err), f"the error names no file: {err}")


@fuzz(0.2)
@given(case=config_files(), existing=st.booleans())
def test_cli_config(built, case, existing):
    """`membox build DATA --store DIR --config FILE` with fuzzed configs: exit 0, or 2 with one error line; a
    refusal leaves DIR as it was (a store built with other settings is not written to), or absent."""
    files, _ = case
    prop = "cli_config"
    with scratch() as d:
        write_config_files(d, files)
        data = d / "data.jsonl"
        data.write_text("\n".join(json.dumps(dict(r, conversation_id="c9")) for r in BASE[:3]))
        store = d / "store"
        if existing:
            shutil.copytree(built, store)
        before = folder_state(store)
        rc, out, err = _cli_case(prop, ["build", str(data), "--store", str(store), *ONE,
                                        "--config", str(d / "config.toml")])
        if rc == 2:
            line = check_error_line(prop, err)
            assert_unchanged(prop, before, folder_state(store), lock_taken="built with other settings" in line)
        else:  # 0, or 1: built, more boxes failed than the config's [extract] max_failed_share allows
            expect(prop, rc in (0, 1) and len([l for l in err.splitlines() if l.startswith("error: ")]) == rc,
                   f"exit {rc}: {err[-500:]}")
