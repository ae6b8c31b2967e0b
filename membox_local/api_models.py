"""The request bodies of `membox serve` (server.py) and the tool inputs of `membox mcp` (mcp_server.py), bounded.

Every string has a maximum length and every list a maximum size, checked before a request reaches the memory; the
memory then checks what it checks for any caller (ingest.as_messages: empty fields, Unicode, metadata size), so a
bad value is one 422 line either way. pydantic is imported here, not by the modules the `membox` command loads.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, RootModel, StringConstraints, Tag

# the bounds (a request past one is refused with a 422 naming the field)
MAX_ID_CHARS = 200  # a conversation, message, user or agent id, a speaker's name
MAX_LABEL_CHARS = 100  # a session name or a session date as written ("4 March 2024")
MAX_TEXT_CHARS = 10_000  # one message's text (a new one too)
MAX_QUERY_CHARS = 2_000  # a search query or a question
MAX_METADATA_KEYS = 64  # keys of a message's metadata object (ingest checks its size: at most 4 KB as JSON)
MAX_MESSAGES = 1_000  # messages in one POST /memories or add_memory call
MAX_K = 100  # boxes one search returns
MAX_PAGE = 500  # records one page of get_all holds
MAX_BUDGET_TOKENS = 32_000  # an answer's context budget

Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS)]
Label = Annotated[str, StringConstraints(max_length=MAX_LABEL_CHARS)]
Text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS)]
Query = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS)]
# when a question is asked ("2024-06-20", "14:24 on 16 March, 2023"): the answer is told the date and how long before
# it each excerpt was (Memory.answer's `today`); a text that is no date is refused in one line
Today = Annotated[str, StringConstraints(min_length=1, max_length=60)]
Metadata = Annotated[dict[str, Any], Field(max_length=MAX_METADATA_KEYS)]
K = Annotated[int, Field(ge=1, le=MAX_K)]
Kind = Literal["boxes", "messages"]  # Memory.KINDS


class Strict(BaseModel):
    # an unknown field is an error (a typo must not be dropped silently); ids may be given as numbers
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


class MessageIn(Strict):
    """One message, as a line of a messages JSONL file (README, "Messages JSONL"); the conversation is the
    request's `conversation_id` unless the message names one; without a `message_id` one is derived from speaker,
    text and date (as for the chat shape)."""

    conversation_id: Id | None = None
    message_id: Id | None = Field(None, description="stable id: posting the same message again is a no-op "
                                                    "(derived when missing)")
    speaker: Id
    text: Text
    session: Label | None = Field(None, description="a new session seals the open box (default: '1')")
    session_date: Label | None = None
    user_id: Id | None = None
    agent_id: Id | None = None
    metadata: Metadata | None = Field(None, description="a JSON object, at most 4 KB as JSON")

    def record(self) -> dict[str, Any]:
        """The fields given, as Memory.add takes a message."""
        return self.model_dump(exclude_none=True)


class ChatMessageIn(Strict):
    """One message in the OpenAI / mem0 chat shape (ingest.from_chat_shape): `name`, else `role`, is the speaker;
    `timestamp` (a date string, or seconds since 1970) the session date, and its day the session unless one is
    given; the conversation is the request's `conversation_id` unless the message names one; without a
    `message_id` one is derived from the conversation and the message's place and text."""

    role: Id
    content: Text
    name: Id | None = None
    timestamp: Label | float | None = Field(None, description="a date string, or seconds since 1970 (UTC)")
    conversation_id: Id | None = None
    message_id: Id | None = Field(None, description="stable id (derived when missing)")
    session: Label | None = None
    user_id: Id | None = None
    agent_id: Id | None = None
    metadata: Metadata | None = Field(None, description="a JSON object, at most 4 KB as JSON")

    def record(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


def _message_kind(value: Any) -> str:
    chat = isinstance(value, ChatMessageIn) or isinstance(value, dict) and "role" in value
    return "chat-shape" if chat else "message-shape"


# the tags of the discriminated unions: left out of the field paths an error line names (server.validation_line)
UNION_TAGS = ("request", "message-shape", "chat-shape")
AnyMessage = Annotated[Annotated[MessageIn, Tag("message-shape")] | Annotated[ChatMessageIn, Tag("chat-shape")],
                       Discriminator(_message_kind)]
Messages = Annotated[list[AnyMessage], Field(min_length=1, max_length=MAX_MESSAGES)]


class AddIn(Strict):
    """Messages to file, with tags for those that carry none (as Memory.add's keyword arguments)."""

    messages: Messages
    seal: bool = Field(False, description="seal each conversation's open box once these are filed (its end)")
    conversation_id: Id | None = Field(None, description="the conversation of messages that name none (either shape)")
    user_id: Id | None = None
    agent_id: Id | None = None
    metadata: Metadata | None = Field(None, description="under each message's own metadata (its keys win)")


def _body_kind(value: Any) -> str:
    return "messages" if isinstance(value, list) else "request"


class AddBody(RootModel[Annotated[Annotated[AddIn, Tag("request")] | Annotated[Messages, Tag("messages")],
                                   Discriminator(_body_kind)]]):
    """POST /memories takes the object, or a bare list of messages."""

    def request(self) -> AddIn:
        return AddIn(messages=self.root) if isinstance(self.root, list) else self.root


class TextIn(Strict):
    text: Text


class AnswerIn(Strict):
    question: Query
    conversation_id: Id | None = Field(None, description="required when the memory holds several conversations")
    mode: Annotated[str, StringConstraints(min_length=1, max_length=40)] | None = Field(
        None, description="retrieval mode (default: the config's [retrieve] mode)")
    k: K | None = None
    budget_tokens: Annotated[int, Field(ge=50, le=MAX_BUDGET_TOKENS)] | None = None
    today: Today | None = None
    stream: bool = Field(False, description="answer in Server-Sent Events: `text` events with the answer's pieces "
                                             "as the model writes them, then one `answer` event (the JSON answered "
                                             "without stream) or one `error` event")


class ResetIn(Strict):
    confirm: bool = Field(False, description="must be true: reset erases every conversation")
