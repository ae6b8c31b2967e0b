"""Chat exports from the apps people use, read into messages (issue 67): ChatGPT's and Claude's data exports
(`conversations.json`), Telegram Desktop's JSON (`result.json`), WhatsApp's "Export chat" text, a Slack workspace
export (its folder or zip: users.json and a folder of per-day JSON files per channel), DiscordChatExporter's JSON
(one channel) and a plain transcript ("Name: text" lines, with optional date lines between them).

`load_input(path, conversations, fmt)` is what `membox build FILE` reads: the format is told by the file's content
(`detect`), or forced (`--format NAME`); LoCoMo JSON and messages JSONL go to ingest.load_messages as before. Every
message is checked as a JSONL record is (ingest.message_from_record) before anything is written.

What each becomes: a conversation per chat (ChatGPT and Claude: the export's conversation id; WhatsApp and a
transcript: the file's name; Slack: each channel's folder, a thread's replies in it in time order; Discord: the
channel), speakers by name ("user" / "assistant" where the export names none, or the name given
for the user), the session a calendar day (its ISO date), a message id that is the export's own where it has one
and else derived from speaker, text and time (ingest.MessageIds), so that reading the same export again adds
nothing. Skipped and counted (`Read.skipped`): system and tool messages, attachments and media, empty messages, and
ChatGPT's regenerated or abandoned branches (the kept branch is the one that ends at the conversation's
`current_node`). Nothing else of an export is stored.
"""
from __future__ import annotations

import json
import re
import zipfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from .dates import absolute_day
from .ingest import (InputError, MessageIds, load_messages, message_from_record, read_json, read_text, require_file,
                     select_conversations)
from .jsonstream import CHUNK, reading
from .records import Message

FORMATS = ("chatgpt", "claude", "telegram", "whatsapp", "slack", "discord", "transcript")


@dataclass
class Read:
    """Messages read from an export, the format they were read as, and what was skipped (reason -> count)."""

    messages: list[Message]
    format: str
    skipped: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items())) or "nothing"
        convs = len(dict.fromkeys(m.conversation_id for m in self.messages))
        return f"read as {self.format}: {len(self.messages)} messages in {convs} conversation(s); skipped {skipped}"


def load_input(path: str | Path, conversations: list[str] | None = None, fmt: str | None = None,
               user: str = "") -> Read:
    """The messages of a conversation file: a chat export (its format detected, or `fmt`), else LoCoMo JSON or
    messages JSONL (ingest.load_messages). `user`: the name of the export's own person ("user" when not given)."""
    path = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"--format {fmt}: not a format this reads; it reads {', '.join(FORMATS)}")
    require_file(path)
    fmt = fmt or detect(path)
    if fmt is None:
        return Read(load_messages(path, conversations), "locomo json" if path.suffix == ".json" else "messages jsonl")
    read = READERS[fmt](path, user or "user")
    read.skipped = Counter({why: n for why, n in read.skipped.items() if n})  # a count of 0 is nothing skipped
    read.messages = select_conversations(read.messages, conversations, path)
    if not read.messages:
        raise InputError(f"{path}: read as {fmt}, but it holds no message to file ({read.summary()})")
    return read


def detect(path: Path) -> str | None:
    """The export format a file's content shows, or None (LoCoMo JSON, messages JSONL: ingest's formats)."""
    if path.suffix == ".jsonl":
        return None
    if path.is_dir() or path.suffix == ".zip":
        with _archive(path) as files:
            if _slack_root(files) is not None:
                return "slack"
        raise InputError(f"{path}: not a Slack export (a folder or zip holding users.json and a folder per channel)")
    try:
        head = _text_head(path).lstrip("\ufeff \t\r\n")
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None
    if re.match(r"\{|\[\s*[\[{\"\]]", head):  # JSON (not WhatsApp's "[3/4/24, ..."): its keys near the start tell it
        return ("chatgpt" if '"mapping"' in head else "claude" if '"chat_messages"' in head
                else "telegram" if '"messages"' in head and '"from_id"' in head
                else "discord" if '"guild"' in head and '"channel"' in head else None)
    if path.suffix == ".json":  # not an export's JSON: LoCoMo's reader says what is wrong with it
        return None
    lines = [line for line in _text(path).splitlines()[:50] if line.strip()]
    if any(_WHATSAPP.match(line.lstrip("\u200e")) for line in lines):
        return "whatsapp"
    if sum(bool(_NAMED.match(line)) for line in lines) >= max(1, len(lines) // 2):
        return "transcript"
    raise InputError(f"{path}: not a format this reads: LoCoMo .json, messages .jsonl, ChatGPT or Claude "
                     f"conversations.json, Telegram's result.json, WhatsApp's exported chat, a Slack export, "
                     f"DiscordChatExporter's JSON, or a transcript of 'Name: text' lines")


def _text(path: Path) -> str:
    return read_text(path, encoding="utf-8-sig")  # an exported chat may open with a byte order mark


def _message(out: Read, ids: MessageIds, where: str, conv: str, speaker: str, text: str, moment: datetime | None,
             message_id: str = "") -> None:
    """One message checked as a JSONL record is, its session the calendar day of `moment` (None: no date known,
    session "1"); an empty one is skipped and counted."""
    if not text.strip():
        out.skipped["empty"] += 1
        return
    day = moment.date().isoformat() if moment is not None else ""
    rec = {"conversation_id": conv, "speaker": speaker, "text": text.strip(), "session": day or "1",
           "session_date": day}
    out.messages.append(message_from_record(ids.fill({**rec, "message_id": message_id} if message_id else rec),
                                            where, ids))


def _moment(value: object, where: str) -> datetime:
    """Seconds since 1970 or an ISO 8601 string, as a naive UTC datetime."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, timezone.utc).replace(tzinfo=None)
        if isinstance(value, str):
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment
    except (ValueError, OverflowError, OSError):
        pass
    raise InputError(f"{where}: no time in {value!r:.60} (seconds since 1970 or an ISO 8601 date)")


# ---- ChatGPT and Claude: conversations.json ---------------------------------------------------------------------

def _conversations(path: Path, app: str, chunk: int = CHUNK) -> Iterator:
    """The conversations of a `conversations.json` export (a JSON list, else refused naming the app), one at a time
    (jsonstream.py: an export of years is never held whole as JSON, only the messages read from it); a malformed
    one is refused with its number and line."""
    with reading(path, chunk) as r:
        if r.peek() != "[":
            raise InputError(f"{path}: a {app} export is a list of conversations")
        yield from r.elements("conversation")


def _telegram_chats(path: Path, chunk: int = CHUNK) -> Iterator:
    """The chats of Telegram's export of all chats (`chats.list`), one at a time as conversations.json's are; of
    one chat's export (an object with its "messages"), that chat, read whole."""
    with reading(path, chunk) as r:
        if r.peek() != "{":
            raise InputError(f"{path}: a Telegram export holds 'chats' with a 'list', or one chat's 'messages'")
        head = _text_head(path)
        if '"messages"' in head and ('"chats"' not in head or head.index('"messages"') < head.index('"chats"')):
            yield r.value("the chat")
            return
        for key in r.members():
            if key != "chats":
                r.skip(key)  # left_chats and the rest: a chat at a time, not kept
                continue
            for inner in r.members():
                if inner == "list":
                    yield from r.elements("chat")
                else:
                    r.skip(inner)


def _text_head(path: Path) -> str:
    with path.open("rb") as fh:
        return fh.read(1 << 16).decode("utf-8", "ignore")


def read_chatgpt(path: Path, user: str) -> Read:
    out, ids = Read([], "chatgpt"), MessageIds()
    for n, conv in enumerate(_conversations(path, "ChatGPT")):
        where = f"{path} conversation {n}"
        mapping = conv.get("mapping") if isinstance(conv, dict) else None
        if not isinstance(mapping, dict):
            raise InputError(f"{where}: no 'mapping' of messages")
        cid = str(conv.get("conversation_id") or conv.get("id") or f"chatgpt-{n}")
        branch = _kept_branch(mapping, conv.get("current_node"), where)
        out.skipped["regenerated or abandoned"] += sum(
            1 for k, node in mapping.items() if k not in branch and isinstance(node, dict) and node.get("message"))
        for node_id in branch:
            try:
                _chatgpt_node(out, ids, f"{where} node {node_id}", cid, mapping[node_id], conv, user)
            except (AttributeError, TypeError):  # a field of another shape than the export's
                raise InputError(f"{where} node {node_id}: not a ChatGPT message (a field of another shape)") from None
    return out


def _chatgpt_node(out: Read, ids: MessageIds, where: str, cid: str, node: dict, conv: dict, user: str) -> None:
    msg = node.get("message")
    if not isinstance(msg, dict):
        return
    role = (msg.get("author") or {}).get("role")
    if role not in ("user", "assistant"):
        out.skipped[f"{role or 'unknown'} message"] += 1
        return
    parts = (msg.get("content") or {}).get("parts") or []
    texts = [p for p in parts if isinstance(p, str)] if isinstance(parts, list) else []
    out.skipped["attachment"] += len(parts) - len(texts) if isinstance(parts, list) else 1
    moment = _moment(msg.get("create_time") or conv.get("create_time") or 0, where)
    _message(out, ids, where, cid, user if role == "user" else "assistant", "\n".join(texts), moment,
             str(node.get("id") or ""))


def _kept_branch(mapping: dict, current: object, where: str) -> list[str]:
    """The node ids from the root to `current_node` (the branch the person kept), or, without one, down the last
    child of each node; a parent link that loops or names no node is refused."""
    if current in mapping:
        path, seen = [], set()
        while current is not None:
            if current in seen or current not in mapping:
                raise InputError(f"{where}: node {current!r} loops or is missing in the mapping")
            seen.add(current)
            path.append(current)
            current = mapping[current].get("parent")
        return path[::-1]
    roots = [k for k, node in mapping.items() if not (node or {}).get("parent")]
    path = roots[:1]
    while path and (children := (mapping.get(path[-1]) or {}).get("children")) and len(path) <= len(mapping):
        path.append(children[-1])
    return [k for k in path if k in mapping]


def read_claude(path: Path, user: str) -> Read:
    out, ids = Read([], "claude"), MessageIds()
    for n, conv in enumerate(_conversations(path, "Claude")):
        where = f"{path} conversation {n}"
        if not isinstance(conv, dict) or not isinstance(conv.get("chat_messages"), list):
            raise InputError(f"{where}: no 'chat_messages'")
        cid = str(conv.get("uuid") or f"claude-{n}")
        for k, msg in enumerate(conv["chat_messages"]):
            here = f"{where} message {k}"
            if not isinstance(msg, dict):
                raise InputError(f"{here}: expected an object")
            text = msg.get("text")
            if not isinstance(text, str) or not text.strip():
                content = msg.get("content") if isinstance(msg.get("content"), list) else []
                text = "\n".join(str(c.get("text", "")) for c in content
                                 if isinstance(c, dict) and c.get("type") == "text")
            out.skipped["attachment"] += sum(len(x) for x in (msg.get("attachments"), msg.get("files"))
                                             if isinstance(x, list))
            speaker = user if msg.get("sender") == "human" else "assistant"
            _message(out, ids, here, cid, speaker, text, _moment(msg.get("created_at"), here), str(msg.get("uuid", "")))
    return out


# ---- Telegram Desktop's JSON export -------------------------------------------------------------------------------

def read_telegram(path: Path, user: str) -> Read:
    """`result.json` of all chats ({"chats": {"list": [...]}}) or of one chat ({"name", "id", "messages"}): a
    conversation per chat; a message's text is a string or a list of strings and parts ({"type", "text"}); service
    messages (joins, calls, pins) and media are skipped."""
    del user  # Telegram names every sender
    out, ids = Read([], "telegram"), MessageIds()
    for n, chat in enumerate(_telegram_chats(path)):
        where = f"{path} chat {n}"
        if not isinstance(chat, dict) or not isinstance(chat.get("messages"), list):
            raise InputError(f"{where}: no 'messages'")
        cid = f"telegram-{chat.get('id', n)}"
        for k, here, msg in _chat_messages(out, where, chat["messages"], ("message",), "service message"):
            if any(key in msg for key in ("photo", "file", "media_type", "sticker_emoji")):
                out.skipped["attachment"] += 1
            text = msg.get("text", "")
            if isinstance(text, list):
                text = "".join(p if isinstance(p, str) else str(p.get("text", "")) if isinstance(p, dict) else ""
                               for p in text)
            unix = msg.get("date_unixtime")
            moment = _moment(int(unix) if isinstance(unix, str) and unix.isdigit() else msg.get("date"), here)
            speaker = str(msg.get("from") or msg.get("from_id") or "unknown")  # a deleted account has no name
            _message(out, ids, here, cid, speaker, str(text), moment, f"{cid}-{msg.get('id', k)}")
    return out


# ---- WhatsApp's exported chat and plain transcripts --------------------------------------------------------------

# [04/03/2024, 09:12:33] Maya: ...   (iOS)      04/03/2024, 09:12 - Maya: ...   (Android)      3/4/24, 9:12 PM - ...
_WHATSAPP = re.compile(r"^\[?(\d{1,4})[./-](\d{1,2})[./-](\d{1,4}),? (\d{1,2}):(\d{2})(?::(\d{2}))?"
                       r"\s*([AaPp]\.?[Mm]\.?)?\]?(?: [-\u2013]|:)? (.*)$")
_NAMED = re.compile(r"^([^:\n]{1,40}?):\s+(.*)$", re.S)  # a message's further lines in its text
_MEDIA = re.compile(r"^(<media omitted>|<attached: .*>|(image|video|audio|sticker|gif|document) omitted)$", re.I)


def read_whatsapp(path: Path, user: str) -> Read:
    """A line per message, a message's further lines joined to it; a line with no "Name: " is a system line."""
    out, ids, lines = Read([], "whatsapp"), MessageIds(), _text(path).splitlines()
    heads = [(n, m) for n, line in enumerate(lines, 1) if (m := _WHATSAPP.match(line.lstrip("\u200e")))]
    day_first = _day_first([m for _, m in heads])
    for i, (n, m) in enumerate(heads):
        end = heads[i + 1][0] - 1 if i + 1 < len(heads) else len(lines)
        body = "\n".join([m.group(8)] + lines[n:end])
        named = _NAMED.match(body.lstrip("\u200e"))
        if named is None:
            out.skipped["system line"] += 1
            continue
        speaker, text = named.group(1).strip("\u200e "), named.group(2).strip("\u200e ")
        if _MEDIA.match(text.strip()):
            out.skipped["attachment"] += 1
            continue
        _message(out, ids, f"{path} line {n}", path.stem, speaker, text, _whatsapp_time(m, day_first,
                                                                                       f"{path} line {n}"))
    return out


def _day_first(heads: list[re.Match]) -> bool:
    """Whether the file writes the day first (04/03 is 4 March): what its dates show, or the day first when none
    tells (most locales)."""
    firsts = [int(m.group(1)) for m in heads if len(m.group(1)) <= 2]
    seconds = [int(m.group(2)) for m in heads]
    return not (any(s > 12 for s in seconds) and not any(f > 12 for f in firsts))


def _whatsapp_time(m: re.Match, day_first: bool, where: str) -> datetime:
    a, b, c = int(m.group(1)), int(m.group(2)), int(m.group(3))
    year, month, day = (a, b, c) if len(m.group(1)) == 4 else (c, b, a) if day_first else (c, a, b)
    year += 2000 if year < 100 else 0
    hour, minute, second = int(m.group(4)), int(m.group(5)), int(m.group(6) or 0)
    half = (m.group(7) or "").lower().replace(".", "")
    hour = hour % 12 + (12 if half == "pm" else 0) if half else hour
    try:
        return datetime(year, month, day, hour, minute, second)
    except ValueError:
        raise InputError(f"{where}: not a date and time: {m.group(0)[:40]!r}") from None


def read_transcript(path: Path, user: str) -> Read:
    """"Name: text" lines; a line that is a date by itself (a "#" or "---" around it allowed) starts that day's
    session; any other line continues the message before it. Before any date line the session is "1", undated."""
    out, ids = Read([], "transcript"), MessageIds()
    moment, pending = None, None
    for n, line in enumerate(_text(path).splitlines(), 1):
        stripped = line.strip().strip("#-= ").strip()
        named = _NAMED.match(line.strip())
        try:
            day = absolute_day(stripped) if stripped and (named is None or not named.group(2).strip()) else None
        except (ValueError, OverflowError):  # a date the parser cannot hold: not a date line
            day = None
        if day is not None:
            pending = _flush(out, ids, path, pending)
            moment = datetime(day.year, day.month, day.day)
        elif named is not None:
            pending = _flush(out, ids, path, pending)
            pending = [n, named.group(1).strip(), named.group(2), moment]
        elif pending is not None and line.strip():
            pending[2] += "\n" + line.strip()
        elif line.strip():
            raise InputError(f"{path} line {n}: expected 'Name: text' or a date, got {line.strip()[:60]!r}")
    _flush(out, ids, path, pending)
    return out


def _flush(out: Read, ids: MessageIds, path: Path, pending: list | None) -> None:
    if pending is not None:
        n, speaker, text, moment = pending
        _message(out, ids, f"{path} line {n}", path.stem, speaker, text, moment)
    return None


# ---- Slack's workspace export and DiscordChatExporter's JSON --------------------------------------------------------

_DAY_FILE = re.compile(r"^(?:(.+)/)?([^/]+)/(\d{4}-\d{2}-\d{2})\.json$")  # [root/]channel/YYYY-MM-DD.json
_SLACK_SYSTEM = {"channel_join", "channel_leave", "channel_topic", "channel_purpose", "channel_name", "channel_archive",
                 "channel_unarchive", "group_join", "group_leave", "bot_message", "bot_add", "bot_remove",
                 "pinned_item", "unpinned_item", "reminder_add", "tombstone", "sh_room_created", "huddle_thread"}
_SLACK_LINK = re.compile(r"<([@#!])?([^>|]*)(?:\|([^>]*))?>")  # <@U123>, <#C1|general>, <https://x|label>, <!here>


@contextmanager
def _archive(path: Path):
    """A Slack export's JSON files as {name relative to the folder or zip: a function reading its bytes}."""
    if path.is_dir():
        yield {p.relative_to(path).as_posix(): p.read_bytes for p in sorted(path.rglob("*.json"))}
        return
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(f"{path}: not a zip file a Slack export is ({exc})") from None
    with zf:
        yield {n: (lambda n=n: zf.read(n)) for n in zf.namelist() if n.endswith(".json")}


def _slack_root(files: dict) -> str | None:
    """The folder inside the export that holds users.json ("" at the top), or None: not a Slack export."""
    roots = sorted((n[:-len("users.json")] for n in files if n == "users.json" or n.endswith("/users.json")), key=len)
    return roots[0] if roots else None


def _json_of(files: dict, name: str, where: str):
    try:
        return json.loads(files[name]().decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{where}: not JSON ({exc})") from None
    except (OSError, zipfile.BadZipFile) as exc:  # a file that cannot be read, a damaged zip member
        raise InputError(f"{where}: cannot read it ({exc})") from None


def _slack_text(text: str, names: dict[str, str]) -> str:
    """Slack's markup as a person reads it: <@U1> -> @Maya, <#C1|general> -> #general, <url|label> -> label."""
    def link(m: re.Match) -> str:
        kind, target, label = m.group(1), m.group(2), m.group(3)
        if kind == "@":
            return "@" + names.get(target, label or target)
        if kind == "#":
            return "#" + (label or target)
        if kind == "!":
            return "@" + (label or target)
        return label or target
    return _SLACK_LINK.sub(link, text).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def read_slack(path: Path, user: str) -> Read:
    """A conversation per channel folder (`slack-<folder>`), its days in order and each day's messages by time;
    replies in a thread stay in their channel, in time order. Senders are named through users.json (display name,
    else real name, else user name); joins, topics, bots and other system messages are skipped, files counted."""
    del user  # Slack names every sender
    out, ids = Read([], "slack"), MessageIds()
    with _archive(path) as files:
        root = _slack_root(files)
        if root is None:
            raise InputError(f"{path}: a Slack export holds users.json (and a folder per channel)")
        names = _slack_users(_json_of(files, root + "users.json", f"{path}: {root}users.json"), path)
        days = sorted((m.group(2), m.group(3), n) for n in files
                      if (m := _DAY_FILE.match(n)) and (m.group(1) or "") == root.rstrip("/"))
        for channel, _, name in days:
            msgs = _json_of(files, name, f"{path}: {name}")
            if not isinstance(msgs, list):
                raise InputError(f"{path}: {name}: a Slack day is a list of messages")
            for k, msg in sorted(enumerate(msgs), key=lambda km: _slack_ts(km[1], f"{path}: {name} message {km[0]}")):
                _slack_message(out, ids, f"{path}: {name} message {k}", f"slack-{channel}", msg, names)
    return out


def _slack_users(users: object, path: Path) -> dict[str, str]:
    if not isinstance(users, list):
        raise InputError(f"{path}: users.json is a list of users")
    out = {}
    for u in users:
        if isinstance(u, dict) and u.get("id"):
            profile = u.get("profile") if isinstance(u.get("profile"), dict) else {}
            out[str(u["id"])] = str(profile.get("display_name") or profile.get("real_name") or u.get("real_name")
                                    or u.get("name") or u["id"])
    return out


def _slack_ts(msg: object, where: str) -> float:
    try:
        return float(msg["ts"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        raise InputError(f"{where}: no time ('ts', seconds since 1970)") from None


def _slack_message(out: Read, ids: MessageIds, where: str, conv: str, msg: dict, names: dict[str, str]) -> None:
    if msg.get("type") != "message" or msg.get("subtype") in _SLACK_SYSTEM:
        out.skipped["system message"] += 1
        return
    out.skipped["attachment"] += len(msg.get("files") or [])
    sender = str(msg.get("user") or "")
    profile = msg.get("user_profile") if isinstance(msg.get("user_profile"), dict) else {}
    speaker = names.get(sender) or str(profile.get("display_name") or profile.get("real_name") or sender or "unknown")
    ts = _slack_ts(msg, where)
    _message(out, ids, where, conv, speaker, _slack_text(str(msg.get("text") or ""), names), _moment(ts, where),
             f"{conv}-{msg['ts']}")


def read_discord(path: Path, user: str) -> Read:
    """DiscordChatExporter's JSON of one channel ({"guild", "channel", "messages"}): a conversation per channel
    (`discord-<channel id>`), each sender by nickname else name; joins, pins, calls and other non-chat types skipped,
    attachments and stickers counted; an edited message is its last text."""
    del user  # Discord names every sender
    out, ids, data = Read([], "discord"), MessageIds(), read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("channel"), dict) or not isinstance(data.get("messages"),
                                                                                                 list):
        raise InputError(f"{path}: a DiscordChatExporter export holds 'channel' and 'messages'")
    cid = f"discord-{data['channel'].get('id') or path.stem}"
    for k, here, msg in _chat_messages(out, str(path), data["messages"], ("Default", "Reply"), "system message"):
        out.skipped["attachment"] += len(msg.get("attachments") or []) + len(msg.get("stickers") or [])
        author = msg.get("author") if isinstance(msg.get("author"), dict) else {}
        speaker = str(author.get("nickname") or author.get("name") or "unknown")
        _message(out, ids, here, cid, speaker, str(msg.get("content") or ""), _moment(msg.get("timestamp"), here),
                 f"{cid}-{msg.get('id', k)}")
    return out


def _chat_messages(out: Read, where: str, messages: list, kinds: tuple[str, ...], other: str) -> Iterator:
    """(number, place, message) of each message of an export's list whose "type" is one of `kinds`; the others are
    skipped and counted as `other`; an entry that is not an object is refused, naming its place."""
    for k, msg in enumerate(messages):
        here = f"{where} message {k}"
        if not isinstance(msg, dict):
            raise InputError(f"{here}: expected an object")
        if msg.get("type") not in kinds:
            out.skipped[other] += 1
            continue
        yield k, here, msg


READERS = {"chatgpt": read_chatgpt, "claude": read_claude, "telegram": read_telegram, "whatsapp": read_whatsapp,
           "slack": read_slack, "discord": read_discord, "transcript": read_transcript}
