"""Export a memory to JSON lines, and import such a file into an empty memory (`membox export`, `membox import`).

One JSON object per line. The first is the header:

    {"format": "membox_local export", "version": 2, "systems": ["membox"], "embedder": "all-minilm-l6-v2",
     "llm": "qwen2.5-coder-0.5b", "build_settings": {...}, "config": {...},
     "counts": {"conversations": 1, "messages": 40, ...}}

`config` (from version 2) is the config the memory was built with (its stored snapshot, every key; null for a
memory built before configs were stored): `membox import` opens the new memory with it unless given --config, and
only when it asks for nothing beyond the shipped, offline settings (no network backend, key variable, model outside
the manifest or file outside configs/: trust.py); otherwise the import is refused, one line, nothing written, and
the user names a config of theirs. The header names no absolute path of the machine that wrote it (a path is kept
as its last name, trust.portable).

then, conversation after conversation (in id order): its messages in their order, its boxes, its traces:

    {"type": "message", "conversation_id": .., "message_id": .., "seq": 0, "speaker": .., "text": .., "session": ..,
     "session_date": .., "user_id": "", "agent_id": "", "metadata": {}, "box_id": 1, "decision": "first",
     "score": null, "processed": 1}
    {"type": "box", "id": 1, "conversation_id": .., "session": .., "session_date": .., "status": "extracted",
     "topic": .., "keywords": [..], "error": "", "woven": 1, "note": "", "dropped": {"question": 1},
     "events": [{"id": 1, "text": .., "date": .., "grounding": 1.0, "sources": ["m3", "m4"]}, ...]}
    {"type": "trace", "id": 1, "conversation_id": .., "summary": .., "events": [1, 4]}

A message line holds every column of the store's messages table (Store.MESSAGE_COLUMNS: the message, its tags and
how it was filed); a box line the box with its record (topic, keywords, events, and `dropped`: what the code dropped
or corrected in the model's record, reason -> count); each event its `sources` (from version 3: the ids of the
messages it was read from, in its conversation; null for an event extracted before events kept them). A file of
version 1 or 2 has neither: its events import with no sources, its boxes with nothing dropped. Ids of boxes, events
and traces
are the store's and an import keeps them, so that the imported memory answers the same questions with the same
contexts. Not exported: what is derived again from these (the embedding cache, the vector indexes), LLM usage,
the weaver's counters and the history (an import starts it: every message and box "add", via import).

An import reads and checks the whole file first (every field of every line, ids unique, every reference inside
its conversation, the header's counts against the lines, so that a cut file is refused), then refuses a memory
that is not empty or whose config does not fit the header (systems, embedder, build settings); only then does it
write, in one transaction. Every refusal is one InputError or StoreError line naming the file and the line.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from .ingest import InputError, message_from_record, read_jsonl
from .config import Config, ConfigError, config_from_dict
from .memory import CONFIG_KEY, Memory
from .private import private_open
from .records import Trace
from .store import Store, StoreError, built_systems
from .trust import check_from_data, portable

FORMAT = "membox_local export"
VERSION = 3  # 2: the header carries the memory's config; 3: events carry their sources, boxes what was dropped;
#              files of versions 1 and 2 (without them) are read too
SYSTEMS = ["membox"]  # the memory systems an export carries (the box memory's boxes, records and traces)
COUNTS = ("conversations", "messages", "boxes", "traces")
LINE_TYPES = {"message": "messages", "box": "boxes", "trace": "traces"}  # a line's type -> its count in the header
BOX_STATUSES = ("open", "sealed", "extracted", "failed")


@dataclass
class Export:
    """A checked export file: the header, and the records with the line each came from."""

    source: str
    header: dict[str, Any]
    messages: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # messages-table columns
    boxes: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # box columns and events
    traces: list[tuple[int, Trace]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        convs = {r["conversation_id"] for _, r in self.messages + self.boxes} | \
            {t.conversation_id for _, t in self.traces}
        return {"conversations": len(convs), "messages": len(self.messages), "boxes": len(self.boxes),
                "traces": len(self.traces)}


# ---- export ----------------------------------------------------------------------------------------------------------
def export_memory(store: Store, out: TextIO) -> dict[str, int]:
    """Write the memory in `store` to `out` as export lines (header first), from one consistent view of the store
    (a build writing meanwhile is not seen half-way). Returns the header's counts."""
    with store.reading():
        header = _header_of(store)
        convs = store.conversations()
        lines = [line for conv in convs for line in _conversation_lines(store, conv)]
    header["counts"] = {"conversations": len(convs),
                        **{plural: sum(r["type"] == kind for r in lines) for kind, plural in LINE_TYPES.items()}}
    for obj in [header] + lines:
        out.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return header["counts"]


def export_to_file(store: Store, path: str | Path) -> dict[str, int]:
    """export_memory into a file, owner-only (it holds the conversations), written beside and renamed into place:
    an interrupted export leaves no half file under `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with private_open(tmp, "w", encoding="utf-8") as fh:
            counts = export_memory(store, fh)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return counts


def _header_of(store: Store) -> dict[str, Any]:
    systems = built_systems(store.path)
    if systems != SYSTEMS:
        raise StoreError(f"{store.path.parent}: export writes memories of the systems {SYSTEMS}; this one has "
                         f"{systems or 'none'}")
    settings = store.get_meta("build_settings")
    if settings is None:
        raise StoreError(f"{store.path.parent}: nothing was built in this memory, there is nothing to export")
    settings = portable(json.loads(settings))  # what an older version stored with a path: its name
    snapshot = store.get_meta(CONFIG_KEY)
    return {"format": FORMAT, "version": VERSION, "systems": systems, "embedder": portable(store.get_meta("embedder")),
            "llm": settings.get("llm.model"), "build_settings": settings,
            "config": None if snapshot is None else portable(json.loads(snapshot)), "counts": {}}


def _conversation_lines(store: Store, conversation_id: str) -> list[dict]:
    out = []
    for row in store.message_rows(conversation_id):
        rec = {"type": "message", **{c: row[c] for c in Store.MESSAGE_COLUMNS}}
        rec["metadata"] = json.loads(row["metadata"])
        out.append(rec)
    for row in store.box_rows(conversation_id):
        out.append({"type": "box", "id": row["id"], "conversation_id": conversation_id, "session": row["session"],
                    "session_date": row["session_date"], "status": row["status"], "topic": row["topic"],
                    "keywords": json.loads(row["keywords"]), "error": row["error"], "woven": row["woven"],
                    "note": row["note"], "dropped": json.loads(row["dropped"]),
                    "events": [{"id": e.id, "text": e.text, "date": e.date, "grounding": e.grounding,
                                "sources": e.sources} for e in store.events_of_box(row["id"])]})
    for t in store.traces(conversation_id):
        out.append({"type": "trace", "id": t.id, "conversation_id": conversation_id, "summary": t.summary,
                    "events": t.event_ids})
    return out


# ---- reading and checking a file -------------------------------------------------------------------------------------
Check = tuple[Callable[[Any], bool], str]  # a field's test and what it wants, for the error


def _text(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a JSON escape such as \ud800) cannot be stored
        return False
    return True


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return (isinstance(v, float) or _int(v)) and math.isfinite(v)


TEXT: Check = (_text, "a string")
NAME: Check = (lambda v: _text(v) and bool(v.strip()), "a non-empty string")
ID: Check = (lambda v: _int(v) and v >= 1, "a positive integer")
SEQ: Check = (lambda v: _int(v) and v >= 0, "an integer of at least 0")
FLAG: Check = (lambda v: _int(v) and v in (0, 1), "0 or 1")
OPTIONAL_ID: Check = (lambda v: v is None or ID[0](v), "a positive integer or null")
OPTIONAL_TEXT: Check = (lambda v: v is None or _text(v), "a string or null")
OPTIONAL_NUMBER: Check = (lambda v: v is None or _number(v), "a number or null")
GROUNDING: Check = (lambda v: _number(v) and 0.0 <= v <= 1.0, "a number from 0 to 1")
STATUS: Check = (lambda v: v in BOX_STATUSES, f"one of {', '.join(BOX_STATUSES)}")
KEYWORDS: Check = (lambda v: isinstance(v, list) and all(map(_text, v)), "a list of strings")
EVENT_IDS: Check = (lambda v: isinstance(v, list) and all(map(ID[0], v)) and len(set(v)) == len(v),
                    "a list of distinct event ids")
OBJECTS: Check = (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "a list of objects")
# an event's sources: the message ids it was read from, or null (extracted before events kept them)
SOURCES: Check = (lambda v: v is None or isinstance(v, list) and all(NAME[0](x) for x in v),
                  "a list of message ids (non-empty strings) or null")
# a box's dropped: what the code dropped or corrected in its record, reason -> how many
DROPPED: Check = (lambda v: isinstance(v, dict) and all(NAME[0](k) and SEQ[0](n) for k, n in v.items()),
                  "an object of reason -> count (an integer of at least 0)")

# the fields of each line type that message_from_record does not check
FILING = {"seq": SEQ, "box_id": OPTIONAL_ID, "decision": OPTIONAL_TEXT, "score": OPTIONAL_NUMBER, "processed": FLAG}
BOX = {"id": ID, "conversation_id": NAME, "session": TEXT, "session_date": TEXT, "status": STATUS, "topic": TEXT,
       "keywords": KEYWORDS, "error": TEXT, "woven": FLAG, "events": OBJECTS, "note": TEXT, "dropped": DROPPED}
EVENT = {"id": ID, "text": TEXT, "date": TEXT, "grounding": GROUNDING, "sources": SOURCES}
TRACE = {"id": ID, "conversation_id": NAME, "summary": TEXT, "events": EVENT_IDS}
MESSAGE_FIELDS = tuple(c for c in Store.MESSAGE_COLUMNS if c not in FILING)  # the message: message_from_record's


def _check_fields(rec: dict, spec: dict[str, Check], where: str, what: str, also: tuple[str, ...] = ()) -> None:
    """Exactly the fields of `spec` (and `also`, checked elsewhere), each passing its test."""
    expected = set(spec) | set(also)
    missing, unknown = sorted(expected - set(rec)), sorted(map(str, set(rec) - expected))
    if missing or unknown:
        raise InputError(f"{where}: {what} " + "; ".join(
            ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"has unknown fields {', '.join(unknown)}"]
                                                                    if unknown else [])))
    for name, (test, wanted) in spec.items():
        if not test(rec[name]):
            raise InputError(f"{where}: {what} field {name!r} must be {wanted}, got {rec[name]!r:.80}")


def read_export(path: str | Path, progress: Callable[[int], None] | None = None) -> Export:
    """Read and check an export file in full (nothing is written): every line's fields, the header's counts against
    the lines, ids unique, references inside their conversation. An InputError names the file and the line.
    `progress(1)` as each line is read."""
    path = Path(path)
    lines = read_jsonl(path)
    first = next(lines, None)
    if first is None:
        raise InputError(f"{path}: empty, not a membox_local export")
    export = Export(str(path), _check_header(first[1], f"{path} line {first[0]}"))
    readers = {"message": _read_message, "box": _read_box, "trace": _read_trace}
    for lineno, rec in lines:
        where = f"{path} line {lineno}"
        kind = rec.get("type") if isinstance(rec, dict) else None
        if not isinstance(kind, str) or kind not in readers:
            raise InputError(f"{where}: expected an object with \"type\" one of {', '.join(readers)}, got "
                             f"{json.dumps(rec, ensure_ascii=False)[:80]}")
        readers[kind](export, lineno, {k: v for k, v in rec.items() if k != "type"}, where)
        if progress is not None:
            progress(1)
    _check_counts(export)  # first: a file cut short is told as such, not by the reference it cut
    _check_links(export)
    return export


def _check_header(rec: object, where: str) -> dict[str, Any]:
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise InputError(f"{where}: not a membox_local export (the first line must be its header, with "
                         f"\"format\": \"{FORMAT}\")")
    version = rec.get("version")
    if not _int(version) or version < 1:
        raise InputError(f"{where}: header field 'version' must be a positive integer, got {version!r:.80}")
    if version > VERSION:
        raise InputError(f"{where}: format version {version} is newer than this membox_local reads ({VERSION}); "
                         f"upgrade membox_local")
    spec = {"format": TEXT, "version": ID, "embedder": NAME, "llm": OPTIONAL_TEXT,
            "systems": (lambda v: isinstance(v, list) and all(map(_text, v)), "a list of strings"),
            "build_settings": (lambda v: isinstance(v, dict), "an object"),
            "counts": (lambda v: isinstance(v, dict) and set(v) == set(COUNTS) and all(SEQ[0](x) for x in v.values()),
                       f"an object of counts ({', '.join(COUNTS)})")}
    if version >= 2:
        spec["config"] = (lambda v: v is None or isinstance(v, dict), "an object or null")
    _check_fields(rec, spec, where, "header")
    if rec.get("config") is not None:
        try:
            config_from_dict(rec["config"], where=f"{where}: header field 'config'", read_files=False)
        except ConfigError as exc:
            raise InputError(str(exc)) from None
    if rec["llm"] != rec["build_settings"].get("llm.model"):
        raise InputError(f"{where}: header field 'llm' ({rec['llm']!r:.80}) is not the build settings' llm.model "
                         f"({rec['build_settings'].get('llm.model')!r:.80})")
    return rec


def _read_message(export: Export, lineno: int, rec: dict, where: str) -> None:
    _check_fields(rec, FILING, where, "message", also=MESSAGE_FIELDS)
    m = message_from_record({k: rec[k] for k in MESSAGE_FIELDS}, f"{where}: message")
    if (rec["box_id"] is None) == bool(rec["processed"]):
        raise InputError(f"{where}: message {m.message_id!r}: 'processed' is {rec['processed']} but 'box_id' is "
                         f"{rec['box_id']!r} (a filed message has a box, a pending one none)")
    export.messages.append((lineno, {**{k: getattr(m, k) for k in MESSAGE_FIELDS}, **{k: rec[k] for k in FILING}}))


def _read_box(export: Export, lineno: int, rec: dict, where: str) -> None:
    rec.setdefault("note", "")  # exports written before boxes had a note (membox schema 1)
    older = export.header["version"] < 3  # written before events kept their sources: none, nothing dropped
    if older:
        rec.setdefault("dropped", {})
    _check_fields(rec, BOX, where, "box")
    for n, event in enumerate(rec["events"]):
        if older:
            event.setdefault("sources", None)
        _check_fields(event, EVENT, where, f"box {rec['id']} event {n}")
    export.boxes.append((lineno, rec))


def _read_trace(export: Export, lineno: int, rec: dict, where: str) -> None:
    _check_fields(rec, TRACE, where, "trace")
    export.traces.append((lineno, Trace(rec["id"], rec["conversation_id"], rec["summary"], rec["events"])))


def _unique(items: list[tuple[int, Any]], key: Callable[[Any], Any], what: str, source: str) -> dict:
    """{key: the line it is on}; a key on two lines is an InputError naming the second."""
    first: dict = {}
    for lineno, item in items:
        k = key(item)
        if k in first:
            raise InputError(f"{source} line {lineno}: {what} {k!r:.80} again (first on line {first[k]})")
        first[k] = lineno
    return first


def _check_links(export: Export) -> None:
    """Ids unique; every box a message points to, every event a trace holds, in the same conversation; every box
    holding a message."""
    src = export.source
    _unique(export.messages, lambda r: (r["conversation_id"], r["message_id"]), "message", src)
    _unique(export.messages, lambda r: (r["conversation_id"], r["seq"]), "message seq", src)
    _unique(export.boxes, lambda b: b["id"], "box id", src)
    _unique([(n, e["id"]) for n, b in export.boxes for e in b["events"]], lambda i: i, "event id", src)
    _unique(export.traces, lambda t: t.id, "trace id", src)
    box_conv = {b["id"]: b["conversation_id"] for _, b in export.boxes}
    event_conv = {e["id"]: b["conversation_id"] for _, b in export.boxes for e in b["events"]}
    for lineno, r in export.messages:
        if r["box_id"] is not None and box_conv.get(r["box_id"]) != r["conversation_id"]:
            raise InputError(f"{src} line {lineno}: message {r['message_id']!r} is filed in box {r['box_id']}, "
                             f"which conversation {r['conversation_id']!r} does not have in this file")
    for lineno, t in export.traces:
        stray = [e for e in t.event_ids if event_conv.get(e) != t.conversation_id]
        if stray:
            raise InputError(f"{src} line {lineno}: trace {t.id} holds events {stray[:5]} that conversation "
                             f"{t.conversation_id!r} does not have in this file")
    filled = {r["box_id"] for _, r in export.messages}
    for lineno, b in export.boxes:
        if b["id"] not in filled:
            raise InputError(f"{src} line {lineno}: box {b['id']} holds no message of this file")


def _check_counts(export: Export) -> None:
    want, got = export.header["counts"], export.counts()
    diff = [f"{want[k]} {k} in the header, {got[k]} in the file" for k in COUNTS if want[k] != got[k]]
    if diff:
        raise InputError(f"{export.source}: {'; '.join(diff)} (a file cut short, or edited?); nothing imported")


# ---- import ----------------------------------------------------------------------------------------------------------
def export_config(export: Export) -> Config | None:
    """The config the exported memory was built with (the header's, checked when read), to open the new memory
    with when the user names none; None when the file has none (version 1, or a memory built before configs were
    stored). A config that asks for more than the shipped, offline settings is refused (ConfigError, one line:
    trust.check_from_data)."""
    data = export.header.get("config")
    if data is None:
        return None
    cfg = config_from_dict(data, where=f"{export.source}: header field 'config'", read_files=False)
    return check_from_data(cfg, export.source, "its header's config")


def import_export(mem: Memory, export: Export) -> dict[str, int]:
    """Write a checked export (read_export) into an empty memory, in one transaction, holding its write lock.
    Refused, with nothing written: a memory holding messages or boxes, a config whose systems, embedder or build
    settings differ from the header's. Returns the counts imported. The vector indexes are built by the first
    search, the embeddings they need computed then."""
    with mem.writing("membox import"):
        _check_fits(mem, export)
        detail = {"via": "import"}
        with mem.store.transaction():
            mem.store.restore_messages([r for _, r in export.messages], detail)
            mem.store.restore_boxes([b for _, b in export.boxes], detail)
            mem.store.restore_traces([t for _, t in export.traces])
            mem.store.set_meta("build_settings", json.dumps(portable(export.header["build_settings"]), sort_keys=True))
            mem.record_config()  # the config it was imported with, the memory's own from now on (fits: checked)
        mem.drop_indexes()  # whatever an earlier memory left in the folder
    return export.counts()


def _check_fits(mem: Memory, export: Export) -> None:
    src, header = export.source, export.header
    if mem.store.conversations() or mem.store.box_ids():
        raise StoreError(f"{mem.path} is not empty ({len(mem.store.conversations())} conversation(s)); import "
                         f"into a new memory folder, or empty this one first (Memory.reset)")
    if header["systems"] != list(mem.config.memory.systems):
        raise StoreError(f"{src} holds the systems {header['systems']}, the config {mem.config.name!r} builds "
                         f"{list(mem.config.memory.systems)}; import it with a config that builds the same")
    if portable(header["embedder"]) != portable(mem.config.embedder.model):
        raise StoreError(f"{src} was embedded with {header['embedder']!r}, the config {mem.config.name!r} embeds "
                         f"with {mem.config.embedder.model!r}; import it with the config it was built with")
    diff = mem.settings_differences(header["build_settings"])
    if diff:
        raise StoreError(f"{src} was built with other settings than the config {mem.config.name!r} ({diff}); "
                         f"import it with the config it was built with")
