"""Every prompt and output schema the pipeline sends to a model, in one place.

Layout rule (for prefix caching): the fixed instructions are the system part, the variable text comes
last in the user part. Every schema bounds its lists and strings: small models otherwise run on until
max_tokens.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from .backends.base import Prompt
from .config import ExtractConfig
from .dates import with_distance
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


# The paper's setting (its Table 9), paraphrased: the two previous messages, a bare three-way question.
AUTHORS_CONTINUITY_SYSTEM = (
    "Decide whether the current message carries on the main topic of the previous messages. "
    "Reply with one word only: yes, partly (the topic has partly shifted) or no."
)


def authors_continuity_prompt(previous: Sequence[Message], new: Message) -> Prompt:
    context = "\n".join(m.render() for m in previous)
    return Prompt(AUTHORS_CONTINUITY_SYSTEM, f"Previous messages:\n{context}\nCurrent message:\n{new.render()}\nAnswer:")


# ---- Topic Loom: extraction on seal -------------------------------------------------------------
# Likelihood features (the hybrid judge's lm_* weights): plain text, no chat template, no instructions.
# How likely is the new line after the open box's last lines, against after this header alone?
DIALOGUE_HEADER = "A conversation between two people.\n\n"


def dialogue_line(m: Message) -> str:
    return f"{m.speaker}: {m.text.strip()}\n"


def dialogue_context(recent: Sequence[Message]) -> str:
    return DIALOGUE_HEADER + "".join(dialogue_line(m) for m in recent)


_EXTRACT_KEYWORDS = (
    "In \"keywords\", list the most specific nouns and names the lines use (people, places, objects, activities).\n")
# Each event cites the number of its line and repeats it in that speaker's words: code, not the model, then decides
# whose it is, what "I" and "you" mean and which date "yesterday" is (attribution.py). Instructions in sentences, not
# "key: description" lines, which a small model copies into the key's value.
EXTRACT_SYSTEM = (
    "You write the memory record of a short piece of conversation, as JSON. The lines are numbered.\n"
    "In \"topic\", name in two to five words what the lines talk about.\n"
    + _EXTRACT_KEYWORDS +
    "In \"events\", list what the speakers tell: things that happened, are true now, or are planned. For each, "
    "\"line\" is the number of the line that tells it, and \"event\" repeats it as that speaker said it, in their own "
    "words with their I, me, my and you, and with any date or time it gives. Greetings, questions, thanks and "
    "reactions are not events.\n"
    "Write only what the lines say."
)


# [extract] events = "lines": code takes every line's statements as events (attribution.model_items), the model
# writes the topic only: what the 0.5B and 1.5B wrote as events were copies of the box's first lines anyway
_EXTRACT_EVENTS = EXTRACT_SYSTEM[EXTRACT_SYSTEM.index("In \"events\""):EXTRACT_SYSTEM.index("Write only")]


def extract_system(cfg: ExtractConfig) -> str:
    """The extraction call's instructions for these settings: keywords asked for only when the model writes them
    ([extract] keywords = "model"); events asked for only when the model writes them ([extract] events)."""
    text = EXTRACT_SYSTEM if cfg.keywords == "model" else EXTRACT_SYSTEM.replace(_EXTRACT_KEYWORDS, "")
    if cfg.events == "written":
        return text
    # the record's shape said outright: without it the 0.5B went on writing the topic as if events followed; with
    # it a topic is about 10 generated tokens (conv-30: 491 for 50 boxes, benchmarks/build_speed.py)
    shape = '{"topic": "..."' + (', "keywords": ["..."]' if cfg.keywords == "model" else "") + "}"
    return text.replace(_EXTRACT_EVENTS, "") + f"\nAnswer as JSON: {shape}"


def extract_schema(cfg: ExtractConfig, n_lines: int) -> dict[str, Any]:
    """The record of a box shown as `n_lines` numbered lines: each event names one of those numbers."""
    props: dict[str, Any] = {"topic": {"type": "string", "maxLength": cfg.max_topic_chars}}
    if cfg.events == "lines":
        # the topic is the record's last field: a model that goes on as if another came (`",` is one token) would
        # run on inside the string to its bound ("Dance Studio Business, ..."); one phrase, no comma, ends it
        props["topic"]["pattern"] = f'^[^,"\\\\\\n]{{1,{cfg.max_topic_chars}}}$'
    if cfg.keywords == "model":
        props["keywords"] = {"type": "array", "maxItems": cfg.max_keywords,
                             "items": {"type": "string", "maxLength": cfg.max_keyword_chars}}
    if cfg.events == "written":  # ("lines": code makes the events, attribution.model_items)
        line = {"type": "integer", "minimum": 1, "maximum": max(1, n_lines),
                "enum": list(range(1, max(1, n_lines) + 1))}
        props["events"] = {"type": "array", "maxItems": cfg.max_events, "items": {
            "type": "object",
            "properties": {"line": line, "event": {"type": "string", "maxLength": cfg.max_event_chars}},
            "required": ["line", "event"]}}
    return {"type": "object", "properties": props, "required": list(props)}


def numbered_lines(messages: Sequence[Message]) -> str:
    """A box's lines as the extraction call shows them, numbered from 1 ("2. Tom: I start at 5 am")."""
    return "\n".join(f"{i}. {m.render()}" for i, m in enumerate(messages, 1))


def extract_prompt(messages: Sequence[Message], date: str, cfg: ExtractConfig | None = None) -> Prompt:
    """The extraction call's prompt under the settings `cfg` (default: keywords and events written by the model)."""
    when = f" (conversation date: {date})" if date else ""
    return Prompt(extract_system(cfg or ExtractConfig()),
                  f"Conversation{when}:\n{numbered_lines(messages)}\n\nJSON record:")


# ---- Trace Weaver: linking and new traces -------------------------------------------------------
# Event lists are numbered from 1; the model answers with those numbers, never with event text.
LINK_SYSTEM = (
    "You follow storylines across a long conversation. A storyline is one activity, goal, plan, problem or "
    "situation of a person that comes back over time.\n"
    "You get one storyline (its events so far, with dates) and a numbered list of new events from a later "
    "conversation. Pick the new events that carry this storyline forward: a next step, progress, a result, "
    "a change of plan, or the same activity happening again for the same person.\n"
    "Do not pick an event that only shares a word or a broad subject with the storyline but is about "
    "another activity, or small talk.\n"
    'Answer as JSON: {"continues": [numbers of the new events that continue the storyline]}. '
    "Use an empty list when none does."
)


def _numbers(n: int) -> dict[str, Any]:
    """Up to n numbers from 1..n; the enum lets grammar engines that skip minimum/maximum
    (llama-cpp-python's converter) still constrain the numbers."""
    return {"type": "array", "maxItems": n,
            "items": {"type": "integer", "minimum": 1, "maximum": n, "enum": list(range(1, n + 1))}}


def link_schema(n_new: int) -> dict[str, Any]:
    return {"type": "object", "properties": {"continues": _numbers(n_new)}, "required": ["continues"]}


def _dated(text: str, date: str) -> str:
    return f"[{date}] {text}" if date else text


def _numbered(items: Sequence[str]) -> str:
    """Events listed 1..n: the model answers with these numbers (see _numbers)."""
    return "\n".join(f"{i}. {t}" for i, t in enumerate(items, 1))


def link_prompt(summary: str, trace_events: Sequence[tuple[str, str]], new_events: Sequence[str],
                new_date: str) -> Prompt:
    """`trace_events` are (text, date) pairs in time order; `new_events` come from one box dated `new_date`."""
    chain = "\n".join(f"- {_dated(t, d)}" for t, d in trace_events)
    when = f" ({new_date})" if new_date else ""
    return Prompt(LINK_SYSTEM, f"Storyline: {summary}\nEvents so far:\n{chain}\n\n"
                               f"New events{when}:\n{_numbered(new_events)}\n\nJSON:")


TRACE_INIT_SYSTEM = (
    "You sort events from a conversation into storylines. A storyline groups events about the same "
    "activity, goal, plan, problem or situation of a person.\n"
    "You get a numbered list of events. List the main storyline first, then any other storylines. "
    "Give each storyline a short title that says whose it is and what it is about, and the numbers of "
    "its events. An event that goes with no other event is a storyline of its own. Use each number once.\n"
    'Answer as JSON: {"storylines": [{"title": "...", "events": [numbers]}]}.'
)


def trace_init_schema(n_events: int, max_traces: int, max_title_chars: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"storylines": {
            "type": "array", "maxItems": max_traces,
            "items": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": max_title_chars},
                    "events": _numbers(n_events),
                },
                "required": ["title", "events"],
            },
        }},
        "required": ["storylines"],
    }


def trace_init_prompt(events: Sequence[str], date: str) -> Prompt:
    when = f" ({date})" if date else ""
    return Prompt(TRACE_INIT_SYSTEM, f"Events{when}:\n{_numbered(events)}\n\nJSON:")


# ---- EventWeave: events of one turn pair, a session's summary (systems/eventweave.py) -------------
# An empty list is the "no event" answer (it stands in for the paper's trained event classifier).
TURN_EVENTS_SYSTEM = (
    "You keep a diary of what people share in a chat. You see the turn before (only to understand the new one) "
    "and the new turn. Write down what the new turn tells about its speaker's life or someone close to them: "
    "something that happened, a change, a plan, a decision, a lasting fact. Each item is one short sentence in "
    "the third person that names the person, in your own words; never copy the turn, never start with 'Name:'.\n"
    "- when: the words of the new turn that say when it happens or happened (e.g. 'last Friday', 'next month'), "
    "copied as written; an empty string when it gives no time.\n"
    "Greetings, thanks, questions, compliments and reactions are not items. Most turns have none: then the answer "
    "is {\"events\": []}.\n"
    "Example. New turn: \"Ben: Great! I adopted a puppy named Rex on Saturday. How are you?\" Answer: "
    "{\"events\": [{\"text\": \"Ben adopted a puppy named Rex\", \"when\": \"on Saturday\"}]}. "
    "New turn: \"Ana: Wow, congrats! What breed is he?\" Answer: {\"events\": []}."
)


def turn_events_schema(max_events: int, max_event_chars: int, max_when_chars: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"events": {
            "type": "array", "maxItems": max_events,
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "maxLength": max_event_chars},
                    "when": {"type": "string", "maxLength": max_when_chars},
                },
                "required": ["text", "when"],
            },
        }},
        "required": ["events"],
    }


def turn_events_prompt(previous: Message | None, new: Message) -> Prompt:
    when = f"Chat date: {new.session_date}\n" if new.session_date else ""
    before = previous.render() if previous is not None else "(none: the chat starts here)"
    return Prompt(TURN_EVENTS_SYSTEM, f"{when}Turn before:\n{before}\n\nNew turn:\n{new.render()}\n\nJSON:")


SESSION_SUMMARY_SYSTEM = (
    "You get the diary items written during one chat session, in order. Sum the session up in one or two "
    "sentences: whose news it was and what the main thread was. Use only the items.\n"
    'Answer as JSON: {"summary": "..."}.'
)


def session_summary_schema(max_chars: int) -> dict[str, Any]:
    return {"type": "object", "properties": {"summary": {"type": "string", "maxLength": max_chars}},
            "required": ["summary"]}


def session_summary_prompt(events: Sequence[str], date: str) -> Prompt:
    when = f" ({date})" if date else ""
    return Prompt(SESSION_SUMMARY_SYSTEM, f"Session{when}, diary items:\n{_numbered(events)}\n\nJSON:")


# ---- Answering ----------------------------------------------------------------------------------
ANSWER_SYSTEM = (
    "You answer questions about past conversations using only the memory excerpts given. "
    "Each excerpt starts with the date it happened; a relative time in a message is followed by its date in "
    "brackets, e.g. 'yesterday (8 June 2023)'. Answer in a few words, not a sentence. "
    "When the question asks when, give that date, or work it out from the excerpt's date "
    "(for example 'last week' in an excerpt dated 9 June 2023 means the week before 9 June 2023). "
    "If the excerpts do not contain the answer, say: not mentioned."
)


# with the moment a question is asked (an assistant's memory of a user: LongMemEval): today's date, and which of two
# excerpts that disagree holds
ANSWER_TODAY = (" Today is {today}; each excerpt's date line also says how long ago it was: use that for 'how many "
                "days ago' and the like. When two excerpts disagree (a value that changed), the more recent one holds.")


# A request for a suggestion ("Can you suggest...", "Any recommendations?", "Do you think it would be a good idea...")
# is not a question about the past: "not mentioned" fails it; what the memory tells of the person should shape the
# answer (LongMemEval's preference questions). Recognised by wording, and not when it asks what was said before
# ("you suggested", "our previous chat"): the rule was written on LongMemEval's dev questions, where it picks the 6
# preference questions and nothing else (and none of LoCoMo's 1,157 dev questions).
_ADVICE = re.compile(r"\b(can you (suggest|recommend)|any (\w+ )?(recommendations|suggestions|ideas|tips)|"
                     r"do you think (it|i|that)|should i|what should i)\b", re.IGNORECASE)
_RECALL = re.compile(r"\b(previous|earlier|last time|you (told|said|suggested|mentioned|recommended)|remind me)\b",
                     re.IGNORECASE)
ADVICE_SYSTEM = (
    "You help a person with a request, using what the memory excerpts tell about them: their tastes, habits, plans "
    "and situation. Give one or two short, concrete suggestions that fit those details, each naming the detail it "
    "builds on. If the excerpts tell nothing that fits, give a sensible general suggestion."
)


def asks_for_advice(question: str) -> bool:
    """A request for a suggestion or an opinion, not a question about what was said (see _ADVICE)."""
    return bool(_ADVICE.search(question)) and not _RECALL.search(question)


# A question asking for a total across the history ("What is the total cost of...", "how many fish in total"): the
# model lists the parts, the code adds them up (tally.py). Recognised by wording; written on LongMemEval's dev
# questions, where it picks 11 of 98 (all multi-session), and none of LoCoMo's 1,157 dev questions
# (benchmarks/grounding_check.py). "How many different..." was left out: the model listed kinds and their count
# side by side ("citrus fruits: 3" beside lemon, lime...).
_TOTAL = re.compile(r"\b(total|in all|altogether|combined)\b", re.IGNORECASE)
TALLY_SYSTEM = (
    "You add things up from memory excerpts of a person's conversations. The question asks for a total or a count. "
    "List each thing that counts toward it once, even when several excerpts mention it:\n"
    "- what: the thing, in a few words;\n"
    "- amount: how much it adds, with the number the excerpt gives: its price for money, its length for time, "
    "its count for things ('5 lunches' is 5, 'my third meal' is 3); 1 for one thing given no number.\n"
    "- unit: one unit for all amounts (dollars, minutes, days, meals...); convert when an excerpt uses another.\n"
    "Count what the person says they have, did, bought or spent, not what someone suggested to them. Leave out what "
    "the question does not ask about (another period, another kind of thing). When two excerpts give different "
    "values for the same thing, use the more recent one. The list is empty only when no excerpt tells of any part."
)


def asks_for_total(question: str) -> bool:
    """A question whose answer adds up parts told across the history (see _TOTAL)."""
    return bool(_TOTAL.search(question))


def tally_schema(max_items: int = 12, max_chars: int = 60) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "maxLength": 16},
            "items": {"type": "array", "maxItems": max_items, "items": {
                "type": "object",
                "properties": {"what": {"type": "string", "maxLength": max_chars},
                               # a bound on what one part can add: a runaway number fails the schema and the
                               # question gets the plain answer (a 1.5B model once wrote 1,000,000,000,000,000)
                               "amount": {"type": "number", "minimum": 0, "maximum": 10_000_000}},
                "required": ["what", "amount"]}},
        },
        "required": ["unit", "items"],
    }


def tally_prompt(context: str, question: str, today: str = "") -> Prompt:
    """`today` as in answer_prompt: the date said, each date line with how long before it was."""
    shown = with_distance(context, today) if today else context
    when = f" Today is {today}." if today else ""
    return Prompt(TALLY_SYSTEM + when, f"Memory:\n{shown}\n\nQuestion: {question}\nJSON:")


def answer_prompt(context: str, question: str, today: str = "") -> Prompt:
    """`today`: when the question is asked ("" for a question asked after the conversation, as LoCoMo's); each
    date line of the context then says how long before today it was (dates.with_distance). A request for advice
    gets ADVICE_SYSTEM instead of the short-answer instructions."""
    shown = with_distance(context, today) if today else context
    if asks_for_advice(question):
        return Prompt(ADVICE_SYSTEM + (f" Today is {today}." if today else ""),
                      f"Memory:\n{shown}\n\nRequest: {question}\nSuggestion:")
    return Prompt(ANSWER_SYSTEM + (ANSWER_TODAY.format(today=today) if today else ""),
                  f"Memory:\n{shown}\n\nQuestion: {question}\nShort answer:")


# The next turn of a conversation (EventWeave's own task; evaluation/next_turn.py), with or without memory of the
# earlier sessions.
NEXT_TURN_SYSTEM = (
    "You continue a chat between two friends. Write the next message of the person named at the end: one or two "
    "sentences in their own voice, replying to what was just said. Write only that message."
)
NEXT_TURN_MEMORY = (
    " Notes from their earlier chats are given; use what fits, and never invent facts about them."
)


def next_turn_prompt(recent: str, speaker: str, memory: str = "") -> Prompt:
    """`recent`: the last turns of the session, one "Speaker: text" line each; `memory`: a retrieved context
    ("" none)."""
    if memory:
        return Prompt(NEXT_TURN_SYSTEM + NEXT_TURN_MEMORY,
                      f"Notes from earlier chats:\n{memory}\n\nThe chat now:\n{recent}\n{speaker}:")
    return Prompt(NEXT_TURN_SYSTEM, f"The chat now:\n{recent}\n{speaker}:")
