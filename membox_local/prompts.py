"""Every prompt and output schema the pipeline sends to a model, in one place.

Layout rule (for prefix caching): the fixed instructions are the system part, the variable text comes
last in the user part. Every schema bounds its lists and strings: small models otherwise run on until
max_tokens.
"""
from __future__ import annotations

from typing import Any, Sequence

from .backends.base import Prompt
from .config import ExtractConfig
from .records import Message

# ---- Topic Loom: continuity ---------------------------------------------------------------------
CONTINUITY_LABELS = ("yes", "partly", "no")

CONTINUITY_SYSTEM = (
    "You watch a conversation as it happens and keep it organised by topic. "
    "You are shown the latest messages of the current topic and one new message. "
    "Decide whether the new message stays on that topic.\n"
    "Answer 'yes' if it keeps talking about the same thing (a reply, a follow-up, a detail, a reaction).\n"
    "Answer 'partly' if it drifts to a related but different subject.\n"
    "Answer 'no' if it starts a different subject.\n"
    "Answer with exactly one word: yes, partly or no."
)


def continuity_prompt(recent: Sequence[Message], new: Message) -> Prompt:
    context = "\n".join(m.render() for m in recent)
    return Prompt(CONTINUITY_SYSTEM, f"Current topic, latest messages:\n{context}\n\nNew message:\n{new.render()}\n\nSame topic?")


# ---- Topic Loom: extraction on seal -------------------------------------------------------------
EXTRACT_SYSTEM = (
    "You turn a short piece of conversation into a memory record, as JSON.\n"
    "- topic: one short phrase naming what the piece is about.\n"
    "- keywords: the most specific nouns and names (people, places, objects, activities); no filler words.\n"
    "- events: things the speakers say happened, are true now, or are planned, each as a short standalone "
    "sentence that names who did it and keeps the speakers' own words where possible. "
    "Include dates or times that are mentioned. Leave out greetings, questions, feelings and vague wishes. "
    "Use an empty list when nothing happened.\n"
    "Only use what the text says; never invent."
)


def extract_schema(cfg: ExtractConfig) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "topic": {"type": "string", "maxLength": cfg.max_topic_chars},
            "keywords": {
                "type": "array", "maxItems": cfg.max_keywords,
                "items": {"type": "string", "maxLength": cfg.max_keyword_chars},
            },
            "events": {
                "type": "array", "maxItems": cfg.max_events,
                "items": {"type": "string", "maxLength": cfg.max_event_chars},
            },
        },
        "required": ["topic", "keywords", "events"],
    }


def extract_prompt(messages: Sequence[Message], date: str) -> Prompt:
    when = f" (conversation date: {date})" if date else ""
    body = "\n".join(m.render() for m in messages)
    return Prompt(EXTRACT_SYSTEM, f"Conversation{when}:\n{body}\n\nJSON record:")


# ---- Answering ----------------------------------------------------------------------------------
ANSWER_SYSTEM = (
    "You answer questions about past conversations using only the memory excerpts given. "
    "Each excerpt starts with the date it happened. Answer in a few words, not a sentence. "
    "When the question asks when, give the date worked out from the excerpt's date "
    "(for example 'last week' in an excerpt dated 9 June 2023 means the week before 9 June 2023). "
    "If the excerpts do not contain the answer, say: not mentioned."
)


def answer_prompt(context: str, question: str) -> Prompt:
    return Prompt(ANSWER_SYSTEM, f"Memory:\n{context}\n\nQuestion: {question}\nShort answer:")
