"""Plain records that flow through the pipeline: messages, boxes, events, traces."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Message:
    """One utterance of a conversation, as it arrives. `user_id`, `agent_id` and `metadata` are the caller's tags
    (mem0's scopes and a free JSON object, at most ingest.METADATA_MAX_BYTES): kept, filtered on, never read by the
    memory itself ("" and {} when untagged)."""

    conversation_id: str
    message_id: str
    speaker: str
    text: str
    session: str = "1"
    session_date: str = ""
    seq: int = -1  # arrival order inside the conversation, set by the store
    user_id: str = ""
    agent_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)  # compared, not hashed (a dict)

    def render(self) -> str:
        return f"{self.speaker}: {' '.join(self.text.split())}"


@dataclass
class Event:
    """A concrete happening, fact or plan extracted from a box and grounded in its text."""

    id: int
    box_id: int
    conversation_id: str
    text: str
    date: str = ""
    grounding: float = 1.0
    # the ids of the messages the event was read from (the lines its extraction cited); None: extracted before
    # events kept their sources (a memory built with membox_local before schema 3 of the box tables)
    sources: list[str] | None = None


@dataclass
class Box:
    """A span of consecutive messages that develop one local topic."""

    id: int
    conversation_id: str
    session: str
    session_date: str
    messages: list[Message] = field(default_factory=list)
    status: str = "open"  # open -> sealed -> extracted (or failed)
    topic: str = ""
    keywords: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    error: str = ""
    note: str = ""  # what the record was made from when it is not the whole box (an excerpt of an over-long box)
    # what the code did to the model's record (attribution.py): reason -> count of events dropped ("question",
    # "unsupported", ...), "subject corrected" for events whose person was set to the cited line's speaker; a
    # dropped topic counts as "topic <reason>". Empty: nothing dropped, or extracted before this was kept.
    dropped: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        return "\n".join(m.render() for m in self.messages)

    def header(self) -> str:
        date = self.session_date or f"session {self.session}"
        topic = f" | topic: {self.topic}" if self.topic else ""
        return f"[{date}{topic}]"


@dataclass
class Trace:
    """A macro-topic thread: events from several boxes, in time order."""

    id: int
    conversation_id: str
    summary: str
    event_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Change:
    """One entry of a box's or a message's history (Memory.history): what happened (`event`), when (`at`, UTC,
    ISO 8601), to which record (`message_id`, or `box_id`), and facts about it (`detail`: ids and counts, never the
    text of a message, so that forgetting leaves none behind).

    Message events: add, update, delete. Box events: add (opened, or imported), seal, split (its last messages
    refiled into a new box, detail `to_box`: loom.cap_split "weakest"), extract, extract-failed,
    invalidate (its record dropped: a message of it was updated or deleted), re-extract (extracted after that),
    weave, delete."""

    at: str
    event: str
    conversation_id: str
    message_id: str | None = None
    box_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict, hash=False)
