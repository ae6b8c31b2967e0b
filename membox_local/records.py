"""Plain records that flow through the pipeline: messages, boxes, events, traces."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Message:
    """One utterance of a conversation, as it arrives."""

    conversation_id: str
    message_id: str
    speaker: str
    text: str
    session: str = "1"
    session_date: str = ""
    seq: int = -1  # arrival order inside the conversation, set by the store

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
