"""What code decides about the events a model wrote for a box: which message each came from, whose it is, what its
"I", "you" and "yesterday" mean, and whether it is kept.

The extraction call (prompts.extract_prompt) shows the box's lines numbered and asks, for each event, the number of
the line that says it and the event in that speaker's own words. The model writes words; the data fixes the facts
around them:
- source: the cited line's message (Event.sources); its speaker is the event's person.
- person: "I", "me", "my", "mine", "myself" are the cited line's speaker; "you", "your", "yours" the other
  participant where the conversation has exactly two ("the user" and "the assistant" in a chat with an assistant);
  "we", "us", "our" the speaker and others. An event that opens with a verb gets the speaker as its subject. An
  event that opens with another participant's name when the cited line is not theirs and neither names them nor
  speaks to them ("you"), or that names that person again as if they acted on themselves ("Maya asks Maya ..."),
  gets the speaker back: counted as "subject corrected".
- time: each relative time of the cited line ("yesterday", "last year") is resolved against the line's session date
  (dates.py, as retrieval shows messages): written after the phrase where the event keeps it, else after the event.
- kept or not (Box.dropped counts each reason): "empty" (no words beyond names), "question", "prompt text" (words
  of the instructions, not of the box: a small model's placeholder), "unsupported" (under `min_grounding` of its
  content words are in the cited line or the line before it, which it may answer), "repeated" (the same event
  again). A topic that is the instructions' text, or names a thing the box never writes, is replaced by the box's
  first keywords ("topic prompt text", "topic not in box").
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Mapping, Sequence

from .dates import relative_phrases
from .grounding import CHAT_WORDS, content_words, grounding, stem
from .records import Box, Event, Message
from .worth import SENTENCE, line_sentences

# Chat histories with an assistant name their speakers by role; an event names them "the user", "the assistant".
ROLE_NAMES = {"user": "the user", "assistant": "the assistant", "system": "the system"}

# After "I" and before the verb: words that do not change the verb's form
_ADVERBS = frozenset("just really also still usually often always never actually finally recently already even "
                     "sometimes rarely mostly only totally definitely probably".split())
# verbs whose "I" form is not made third person by adding -s, and words after "I" that are no verb to inflect
_THIRD = {"am": "is", "are": "is", "were": "was", "have": "has", "do": "does", "go": "goes", "don't": "doesn't",
          "haven't": "hasn't", "aren't": "isn't", "weren't": "wasn't"}
_NO_S = frozenset("can could will would shall should may might must was were had got went made took saw came "
                  "found gave told felt left bought brought thought ran began met kept won wrote spent sent built "
                  "lost paid heard held sat stood understood taught caught fought sold slept drove ate drank swam "
                  "flew grew knew threw wore chose spoke broke forgot said did didn't wasn't couldn't wouldn't "
                  "won't can't shouldn't read put cut let set hit quit hurt cost shut spread became did used "
                  "tried".split())
# first words (past a leading name) that make an event a question; "when" may open a statement
_ASKS = frozenset("how what why where which whose whom".split())
# first words of a clause that are a verb, so the event needs a subject ("started a new job")
_VERB_START = frozenset("is was has had will would can could plans planned wants wanted likes liked loves loved "
                        "needs needed hopes hoped thinks feels works worked lives lived goes does enjoys enjoyed "
                        "got used started went made took bought visited joined finished tried learned".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_ECHO_RUN = 5  # a run of this many words shared with the instructions and absent from the box is prompt text


def display_name(speaker: str) -> str:
    """How an event names a speaker: their name, or "the user"/"the assistant" for a role."""
    return ROLE_NAMES.get(speaker.strip().lower(), speaker.strip())


def first_name(name: str) -> str:
    parts = name.split()
    return parts[-1] if parts and parts[0].lower() == "the" else (parts[0] if parts else name)


def _third_person(verb: str) -> str:
    low = verb.lower()
    if low in _THIRD:
        return _THIRD[low]
    if low in _NO_S or low.endswith(("ed", "ing", "s", "n't")) or not low.isalpha():
        return verb
    if low.endswith(("sh", "ch", "x", "z", "o")):
        return verb + "es"
    if low.endswith("y") and len(low) > 1 and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _subject_verb(text: str, pronoun: str, name: str) -> str:
    """`pronoun` (I / you, as a subject) replaced by `name`, the verb after it (past any adverbs) in the third
    person: "I really love it" -> "Tom really loves it"; "you're" -> "Maya is"."""
    def sub(m: re.Match) -> str:
        rest = m.group(2) or ""
        words = rest.split(" ")
        for i, w in enumerate(words):
            if w.lower() not in _ADVERBS:
                words[i] = _third_person(w)
                break
        return name + (m.group(1) or "") + " ".join(words)
    contracted = {"I": r"I'm|I've", "you": r"you're|you've"}[pronoun]
    text = re.sub(rf"\b({contracted})\b", lambda m: name + (" is" if m.group(1).lower().endswith(("'m", "'re"))
                                                            else " has"), text, flags=re.IGNORECASE)
    flags = 0 if pronoun == "I" else re.IGNORECASE
    # the subject pronoun with up to three words after it (adverbs, then the verb), none of them the pronoun again
    # ("I was glad I could": two subjects)
    word = rf"(?!{pronoun}\b)[A-Za-z'-]+"
    return re.sub(rf"\b{pronoun}\b(\s+)?((?:{word})(?:\s+{word}){{0,2}})?", sub, text, flags=flags)


# what follows "'d" when it means "had": a past participle that is not also the verb's plain form ("I'd come" is
# "would"), or "better" ("I'd better go")
_PARTICIPLES = frozenset("been gone done seen had known given taken forgotten written eaten driven flown grown thrown "
                         "worn chosen spoken broken begun got gotten made found told left bought brought thought met "
                         "kept won spent sent built lost paid heard held understood taught caught sold felt better".split())
_CONTRACTED = re.compile(r"\b(I|you|we|You|We)'(d|ll|re|ve|m)\b((?:\s+(?:%s)\b)*)(\s+[A-Za-z'-]+)?"
                         % "|".join(_ADVERBS))


def expand_contractions(text: str) -> str:
    """"I'd", "we're", "you've"... written out before the person is put in, "'d" as "had" before a past participle
    ("I'd never been") and as "would" otherwise ("I'd love to"), so that "Tom'd" and "Tom and others're" are never
    written."""
    def sub(m: re.Match) -> str:
        after = (m.group(4) or "").strip().lower()
        long = {"ll": "will", "re": "are", "ve": "have", "m": "am"}.get(m.group(2))
        if long is None:
            long = "had" if after in _PARTICIPLES or (after.endswith("ed") and not after.endswith("eed")) else "would"
        return f"{m.group(1)} {long}{m.group(3)}{m.group(4) or ''}"
    return _CONTRACTED.sub(sub, text)


def resolve_person(text: str, speaker: str, other: str | None) -> str:
    """`text` (the event as the cited line's speaker said it) with first person made the speaker's name and second
    person the other participant's (left as it is where there is no single other participant)."""
    s = display_name(speaker)
    text = expand_contractions(text.replace("\u2019", "'"))
    text = _subject_verb(text, "I", s)
    text = re.sub(r"\b(my|mine)\b", f"{s}'s", text, flags=re.IGNORECASE)
    text = re.sub(r"\b(me|myself)\b", s, text, flags=re.IGNORECASE)
    # case kept: "US" is a country
    text = re.sub(r"\b(we|We|us|ourselves|Ourselves)\b", f"{s} and others", text)
    text = re.sub(r"\b(our|Our|ours|Ours)\b", f"{s}'s", text)
    if other:
        o = display_name(other)
        text = re.sub(r"\b(your|yours)\b", f"{o}'s", text, flags=re.IGNORECASE)
        text = re.sub(r"\byourself\b", o, text, flags=re.IGNORECASE)
        # "you" after a verb or a preposition is an object: the name alone; at a clause's start, the subject
        text = re.sub(r"(?<=[a-z] )you\b(?!'|\s+(?:are|were|have|do|did|can|will|would|should|could|[a-z]+ed)\b)",
                      o, text)
        text = _subject_verb(text, "you", o)
    return _capitalise(text)


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:] if text[:1].islower() else text


def _names_in(text: str, participants: Sequence[str]) -> list[str]:
    """Participants `text` names (by their first name, whole word, any case), in the order they first appear."""
    found = []
    for p in participants:
        m = re.search(rf"\b{re.escape(first_name(display_name(p)))}\b", text, flags=re.IGNORECASE)
        if m:
            found.append((m.start(), p))
    return [p for _, p in sorted(found)]


# a clause that opens with these has left its subject out ("Lost my job", "Been running", "Can't wait"): the
# speaker's, with what the verb needs
_SUBJECTLESS = {"been": "has been", "gonna": "is gonna", "gotta": "has to", "wanna": "wants to"}
_MODALS = frozenset("can can't cannot will won't would could should might must".split())


def with_subject(text: str, speaker: str) -> str:
    """`text` with the speaker as its subject where it opens with a verb."""
    first, _, rest = text.partition(" ")
    low = first.lower()
    name = display_name(speaker)
    if low in _SUBJECTLESS:
        return f"{name} {_SUBJECTLESS[low]} {rest}".rstrip()
    if low in _VERB_START or low in _MODALS or (low in _NO_S and low not in ("read", "put", "cut", "set", "let")) \
            or (low.endswith("ed") and low.isalpha() and len(low) > 4):
        return f"{name} {low} {rest}".rstrip()
    return text


def fix_subject(text: str, line: Message, participants: Sequence[str], other: str | None) -> tuple[str, bool]:
    """The event with its person set from the cited line: (text, corrected). A text opening with a verb gets the
    speaker; one opening with another participant whom the line neither is by, names nor addresses ("you"), or who
    is named again after it, gets the speaker instead of that name."""
    subjected = with_subject(text, line.speaker)
    if subjected != text:
        return subjected, False
    lead = next((p for p in participants
                 if re.match(rf"{re.escape(display_name(p))}\b", text, flags=re.IGNORECASE)), None)
    if lead is None or lead == line.speaker:
        return text, False
    shown = display_name(lead)
    in_line = bool(_names_in(line.text, [lead])) or (lead == other and re.search(r"\byou", line.text, re.I))
    again = re.search(rf"\b{re.escape(first_name(shown))}\b", text[len(shown):], flags=re.IGNORECASE)
    if in_line and not again:
        return text, False
    return display_name(line.speaker) + text[len(shown):], True


def with_times(text: str, line: Message) -> str:
    """The event with each relative time of its cited line resolved after the phrase where the event keeps it; a
    line with one such time that the event left out gets it in parentheses after the event ("... (yesterday: 7 May
    2023)"; of several, which one the event means is not the code's to guess)."""
    out = text
    phrases = relative_phrases(line.text, line.session_date)
    for phrase, when in phrases:
        m = re.search(rf"\b{re.escape(phrase)}\b", out, flags=re.IGNORECASE)
        if m:
            out = f"{out[:m.end()]} ({when}){out[m.end():]}"
        elif len(phrases) == 1:
            out = f"{out.rstrip('. ')} ({phrase}: {when})"
    return out


def is_question(text: str, participants: Sequence[str]) -> bool:
    """An event that asks rather than tells: it ends with "?", or (past a leading name) opens with a question word
    and its own words are a question's ("Tom how many days a week ...")."""
    if text.rstrip().endswith("?"):
        return True
    rest = text
    for p in participants:
        rest = re.sub(rf"^{re.escape(display_name(p))}\b[,:]?\s*", "", rest, flags=re.IGNORECASE)
    first = rest.split(" ", 1)[0].lower().strip(",")
    return first in _ASKS


def echoes_prompt(text: str, instructions: str, box_text: str) -> bool:
    """`text` holds a run of _ECHO_RUN words of the instructions that the box does not hold."""
    words = [w.lower() for w in _WORD.findall(text)]
    said = " ".join(w.lower() for w in _WORD.findall(instructions))
    box = " ".join(w.lower() for w in _WORD.findall(box_text))
    for i in range(len(words) - _ECHO_RUN + 1):
        run = " ".join(words[i:i + _ECHO_RUN])
        if run in said and run not in box:
            return True
    return False


def tells_something(text: str) -> bool:
    """Two words that are neither chat nor a reaction ("Exactly", "That's brutal", "Tom will be cheering" do not
    tell a fact), or one written with a capital (a place, a thing's name: "went to Paris")."""
    facts = [w for w in content_words(text) if w not in CHAT_WORDS]
    return len(facts) >= 2 or (len(facts) == 1 and any(w[:1].isupper() and w.lower() == facts[0]
                                                         for w in _WORD.findall(text)))


def without_names(text: str, participants: Sequence[str]) -> str:
    """`text` without the participants' names: the words grounding counts."""
    for p in participants:
        text = re.sub(rf"\b{re.escape(first_name(display_name(p)))}\b", " ", text, flags=re.IGNORECASE)
    return text


def other_participant(speaker: str, participants: Sequence[str]) -> str | None:
    """Whom "you" means in `speaker`'s lines: the other participant of a two-person conversation."""
    others = [p for p in participants if p != speaker]
    return others[0] if len(others) == 1 else None


_SAYS = ("says|said|mentions|mentioned|adds|added|replies|replied|writes|wrote|shares|shared|explains|explained|"
         "tells us|notes|noted")

# what opens a sentence and tells nothing: an interjection with its comma ("Yes,", "Guess what,", "Oh no."), or a
# joining word ("And", "Also")
_OPENERS = re.compile(r"^(?:(?:(?:yes|yeah|yep|no|nope|well|oh|wow|ah|aw|hey|hi|haha|lol|ok|okay|sure|anyway|"
                      r"guess what|by the way|btw|thanks|thank you|good news|big news|oh no|no worries|sorry)"
                      r"(?:,? [A-Z][\w'-]*)?[,!.:]+"  # with the name it is said to ("Hey Mel!", "Thanks, Caroline!")
                      r"|(?:and|but|so|also|plus)\b,?)\s*)+", re.IGNORECASE)
_ASIDE = re.compile(r"\s*\[[^\]]*\]?\s*$")  # "[shares a photo: ...]" after the words: not what was said
_JUNK = "{}[]\"' ,"  # what a model's broken JSON leaves at the end of a string
WHOLE = 0.75  # an event whose content words its line's sentences hold to this share is kept in the line's words


def _names(participants: Sequence[str], full: bool = False) -> str:
    """A pattern of the participants' first names (`full`: their whole display names); one that never matches when
    there are none."""
    return "|".join(re.escape(display_name(p) if full else first_name(display_name(p))) for p in participants) or "(?!)"


def unwrapped(text: str, participants: Sequence[str]) -> str:
    """The model's event without what narrates it: a speaker's "Tom:" or "Tom says, '...'" around the words."""
    names = _names(participants, full=True)
    text = re.sub(rf"^(?:{names})\s*:\s*", "", text, flags=re.IGNORECASE)
    m = re.match(rf"^(?:{names}|[A-Z][\w'-]*|he|she|they)\s+(?:{_SAYS})(?:\s+that)?\s*[,:]?\s*", text,
                 flags=re.IGNORECASE)
    if m:
        text = text[m.end():]
    return text.strip().strip("'\"\u2018\u2019\u201c\u201d").strip()


def statements(text: str) -> str:
    """What `text` tells: without its questions (sentences that end with "?") and its bracketed asides ("[shares a
    photo: ...]", a caption, not the speaker's words: an event that only describes a picture is not supported)."""
    text = re.sub(r"\[[^\]]*\]?", " ", text)
    return " ".join(x for x in SENTENCE.split(text.strip()) if x and not x.rstrip().endswith("?"))


def said_sentences(event: str, line: Message, participants: Sequence[str]) -> str:
    """The sentences of the cited line that the event draws on, in the line's order, each without a leading "yes,",
    "wow," or a name the speaker addresses ("Tom, ..."); a question or a sentence without content words is never
    one, nor a sentence of one content word ("Really well.") beside others; "" when none."""
    words = {w[:5] for w in content_words(event)}
    names = _names(participants)
    picked = []
    for sentence in SENTENCE.split(statements(line.text)):
        sentence = re.sub(rf"^(?:{names})[,!]\s*", "", _OPENERS.sub("", sentence).strip(), flags=re.IGNORECASE)
        sentence = _ASIDE.sub("", sentence)
        own = content_words(sentence)
        if not tells_something(without_names(sentence, participants)):
            continue
        if sum(w[:5] in words for w in own) / len(own) >= 0.5 or grounding(event, sentence) >= WHOLE:
            picked.append((sentence[:1].upper() + sentence[1:], len(own)))
    if len(picked) > 1:
        picked = [p for p in picked if p[1] > 1] or picked
    return " ".join(sentence for sentence, _ in picked)


def source_line(rest: str, shown: Sequence[Message], n: int, min_grounding: float) -> tuple[int | None, float]:
    """(the line an event's words `rest` come from, their grounding): the cited line `n` where its statements hold
    at least `min_grounding` of them, or some of them and with the line before it (which the line may answer) at
    least that much; the line before instead when its own statements hold more of them than the cited line's and
    enough (a model citing the reply to what it read: "Now Mel is passionate about ..." from Caroline's line, cited
    at Mel's answer); (None, 0) when neither holds the event."""
    own = grounding(rest, statements(shown[n - 1].text))
    before = shown[n - 2].text if n > 1 else ""
    if own >= min_grounding:
        return n, own
    said_before = grounding(rest, statements(before)) if before else 0.0
    if said_before > own and said_before >= min_grounding:
        return n - 1, said_before
    both = grounding(rest, statements(shown[n - 1].text) + "\n" + before)
    return (n, both) if own > 0 and both >= min_grounding else (None, 0.0)


def _own_pronoun(text: str, speaker: str) -> str:
    """A sentence of the model's that opens with "He"/"She" ("He's", "She'd") for the speaker of a line that speaks
    of no "he" or "she": the speaker by name."""
    m = re.match(r"(?:he|she)(?:'(s|d|ll))?\s+(\S+)", text, re.IGNORECASE)
    if m is None:
        return text
    verb = {"d": "would ", "ll": "will "}.get((m.group(1) or "").lower(), "")
    if (m.group(1) or "").lower() == "s":
        verb = "has " if m.group(2).lower() in ("been", "got", "had") else "is "
    return f"{display_name(speaker)} {verb}{text[m.start(2):]}"


def cut_whole(text: str, max_chars: int) -> str:
    """The model's string without what its JSON left behind ("}, {") or an aside at the end ("[shares a photo: ..."),
    and, when the schema's maxLength cut it (`max_chars`; 0: unknown), cut back to its last whole sentence, or its
    last whole word."""
    text = " ".join(text.split())
    at_cap = bool(max_chars) and len(text) >= max_chars - 1
    text = _ASIDE.sub("", text.rstrip(_JUNK)).rstrip(_JUNK)
    if at_cap:
        ends = [m.end() for m in re.finditer(r"[.!?](?=\s|$)", text)]
        text = text[:ends[-1]] if ends else text.rsplit(" ", 1)[0]
    return text


def _joint_without_we(text: str, line: Message, participants: Sequence[str]) -> bool:
    """"Ana and Ben talk about their families": a claim about both participants from a line that says nothing of
    the two together (no "we", "us", "our", "both", "together"): a small model's summary, true of one at most."""
    names = _names(participants, full=True)
    joint = re.match(rf"^(?:{names}) and (?:{names})\b", text, re.IGNORECASE)
    return bool(joint) and not re.search(r"\b(?:we|us|our|ours|both|together)\b", statements(line.text), re.I)


def _self_reference(text: str, participants: Sequence[str]) -> bool:
    """"Maya asked Maya to ...": one person as subject and object of one verb, a model's mix-up."""
    return any(re.match(rf"^{re.escape(display_name(p))} \w+ {re.escape(display_name(p))}\b", text, re.IGNORECASE)
               for p in participants)


def cited_event(item: Mapping[str, Any], box: Box, shown: Sequence[Message], participants: Sequence[str],
                instructions: str, min_grounding: float, max_chars: int = 0) -> tuple[Event | None, str]:
    """One of the model's events ({"line": n, "event": text}, n counting the lines `shown` from 1) as the memory
    keeps it, with the reason it is dropped or corrected ("" when neither). Where the cited line's own sentences
    hold the event's words (WHOLE), the event is those sentences with their persons resolved: the data's words,
    not the model's; else the model's words (an answer that draws on the line before), persons resolved and its
    subject checked."""
    n = item.get("line")
    if not isinstance(n, int) or not 1 <= n <= len(shown):  # the schema's enum forbids it; a backend may not
        return None, "no line"
    raw = statements(unwrapped(cut_whole(str(item.get("event", "")), max_chars), participants))
    raw = re.sub(rf"^(?:{_names(participants)})[,!]\s*", "", _OPENERS.sub("", raw), flags=re.IGNORECASE)
    if not raw or is_question(raw, participants):
        return None, "question"
    if echoes_prompt(raw, instructions, box.text()):
        return None, "prompt text"
    rest = without_names(raw, participants)
    if not tells_something(rest):
        return None, "empty"
    k, support = source_line(rest, shown, n, min_grounding)
    if k is None:
        return None, "unsupported"
    line = shown[k - 1]  # an excerpt's message keeps its id, speaker and date
    other = other_participant(line.speaker, participants)
    said = said_sentences(rest, line, participants)
    corrected = False
    if item.get("whole_line") and not said:  # a line's own words ([extract] events = "lines") that tell nothing
        return None, "empty"
    if said and (item.get("whole_line") or grounding(rest, said) >= WHOLE):
        text = with_subject(resolve_person(said.rstrip(" ."), line.speaker, other), line.speaker)
    else:
        text = resolve_person(raw.rstrip(" ."), line.speaker, other)
        if not re.search(r"\b(?:he|she)\b", line.text, re.IGNORECASE):  # the model's "she" for the line's speaker
            text = _own_pronoun(text, line.speaker)
        if _joint_without_we(text, line, participants):
            return None, "joint claim"
        text, corrected = fix_subject(text, line, participants, other)
        if _self_reference(text, participants):
            return None, "self-reference"
    event = Event(0, box.id, box.conversation_id, with_times(text, line), line.session_date or box.session_date,
                  round(support, 3), [line.message_id])
    return event, "subject corrected" if corrected else ("line corrected" if k != n else "")


def model_items(data: Mapping[str, Any], shown: Sequence[Message], events: str = "written",
                max_chars: int = 0, kept: Sequence[Sequence[bool]] | None = None) -> list[dict[str, Any]]:
    """The events `attribute` reads ({"line": n, "event": text}): as the model wrote them ([extract] events =
    "written"), or ("lines") every line of the box in its own words, cut to `max_chars` as the schema cuts a written
    event (a longer line in pieces of whole sentences, `line_pieces`), each marked `whole_line`: `cited_event` keeps
    the line's sentences that tell something, persons and dates resolved (no model's subject to correct), and
    leaves out a line that only asks or tells nothing. `kept`: per shown line, which of its sentences
    (worth.line_sentences) are worth keeping ([extract] keep_model); the others make no event."""
    if events == "written":
        return list(data.get("events", []))
    texts = [m.text if kept is None else " ".join(s for s, k in zip(line_sentences(m.text), kept[i]) if k)
             for i, m in enumerate(shown)]
    return [{"line": n, "event": piece, "whole_line": True}
            for n, text in enumerate(texts, 1) if text for piece in line_pieces(text, max_chars)]


LINE_PIECES = 3  # events one line gives at most under [extract] events = "lines": no LoCoMo dev line needs more at
# 160 characters (26% are longer than 160, 1.2% than 320, none than 480); a longer one (an assistant's answer) is
# remembered by its start, its whole text staying in the message


def line_pieces(text: str, max_chars: int) -> list[str]:
    """`text` in at most LINE_PIECES pieces of whole sentences, each at most `max_chars` (0: one piece); a sentence
    longer than that is cut, and `cut_whole` cuts it back to a whole word."""
    text = " ".join(text.split())
    if not max_chars:
        return [text]
    pieces: list[str] = []
    for sentence in line_sentences(text):
        if pieces and len(pieces[-1]) + 1 + len(sentence) <= max_chars:
            pieces[-1] = f"{pieces[-1]} {sentence}"
        else:
            pieces.append(sentence)
    return [p[:max_chars] for p in pieces[:LINE_PIECES]]


# what a line that is not an event comes to under [extract] events = "lines": a line, not a dropped model event
NOT_EVENTS = ("question", "empty")


def model_topic(data: Mapping[str, Any], events: str = "written") -> str:
    """The topic the model wrote; under [extract] events = "lines" its first phrase (the schema's pattern forbids a
    comma there; a backend that ignores patterns may write one and run on)."""
    topic = str(data.get("topic", ""))
    return topic if events == "written" else topic.split(",")[0]


def extracted_events(data: Mapping[str, Any], box: Box, shown: Sequence[Message], participants: Sequence[str],
                     instructions: str, cfg, kept: Sequence[Sequence[bool]] | None = None
                     ) -> tuple[list[Event], dict[str, int]]:
    """The events kept from an extraction output `data` under the [extract] settings `cfg` (ExtractConfig), and
    what was dropped: written events, or the lines' own ("lines"), where a line that asks or tells nothing is no
    event the model wrote and lost (NOT_EVENTS are not counted), and the sentences `kept` marks not worth keeping
    are counted as such."""
    items = model_items(data, shown, cfg.events, cfg.max_event_chars, kept if cfg.events == "lines" else None)
    events, dropped = attribute(items, box, shown, participants, instructions, cfg.min_grounding, cfg.max_event_chars)
    if cfg.events == "lines":
        dropped = {k: n for k, n in dropped.items() if k not in NOT_EVENTS}
        left_out = sum(not k for flags in (kept or ()) for k in flags)
        if left_out:
            dropped["not worth keeping"] = left_out
    return events, dropped


def attribute(items: Sequence[Mapping[str, Any]], box: Box, shown: Sequence[Message], participants: Sequence[str],
              instructions: str, min_grounding: float, max_chars: int = 0) -> tuple[list[Event], dict[str, int]]:
    """The events kept from the model's `items`, and what was dropped or corrected (reason -> count)."""
    kept: list[Event] = []
    seen: list[list[str]] = []  # each kept event's content words, in order
    counts: Counter = Counter()
    for item in items:
        event, why = cited_event(item, box, shown, participants, instructions, min_grounding, max_chars)
        words = content_words(event.text) if event is not None else []
        if event is not None and words and any(_within(words, earlier) for earlier in seen):
            event, why = None, "repeated"  # says nothing an earlier event of the box did not, in the same order
        if why:
            counts[why] += 1
        if event is not None:
            seen.append(words)
            kept.append(event)
    return kept, dict(counts)


def _within(words: list[str], earlier: list[str]) -> bool:
    """`words` are `earlier`'s, in the same order, others between them allowed ("Maya ran 10 km" within "Maya ran 10
    km yesterday, Maya's longest run"; "Maya gave Tom a book" not within "Tom gave Maya a book")."""
    rest = iter(earlier)
    return all(w in rest for w in words)


def _bare(word: str) -> str:
    """A word without case and without a possessive "'s" (its first four letters, stemmed, stand for it in a topic:
    "Tasting" is in a box that says "taste")."""
    return re.sub(r"'s$", "", word.lower().replace("\u2019", "'"))


def checked_topic(topic: str, box: Box, keywords: Sequence[str], instructions: str,
                  participants: Sequence[str] = (), max_chars: int = 80) -> tuple[str, str]:
    """(the topic kept, the reason it was replaced: "" when it was not). A topic says what, not who: the
    participants' names are taken out of it ("Tom's knee pain" -> "knee pain": whose it is, the events say). A
    topic made of the instructions' words, naming something (a capitalised word) the box never writes, or none of
    whose words the box holds ("conversation", the prompt's own word), gives way to the box's first three keywords."""
    for p in participants:
        topic = re.sub(rf"\b{re.escape(first_name(display_name(p)))}(?:'s|\u2019s)?\b", " ", topic,
                       flags=re.IGNORECASE)
    topic = " ".join(topic.split()).strip(" ,&-")
    topic = re.sub(r"^(?:and|&)\s+|\s+(?:and|&)$", "", topic).strip()
    topic = ", ".join(dict.fromkeys(part.strip() for part in topic.split(",") if part.strip()))  # a looping model
    words = box_words(box)
    fallback = ""
    for k in keywords[:3]:  # as many of the first three keywords as fit the topic's bound
        if len(fallback) + len(k) + 2 * bool(fallback) <= max_chars:
            fallback = f"{fallback}, {k}" if fallback else k
    if echoes_prompt(topic, instructions, box.text()) or (topic and not content_words(topic)):
        return fallback, "topic prompt text"
    if _not_the_box(topic, words):
        return fallback, "topic not in box"
    return topic, ""


def _not_the_box(topic: str, words: set[str]) -> bool:
    """A topic naming something the box never writes (a capitalised word: "Paris" in a box about a trip to Rome), or
    none of whose words the box holds. A topic in title case ("Hiking And Outdoor Adventure") cannot tell names from
    words: at least half of its content words must be the box's (so a name the box never says can pass in one)."""
    tokens = _WORD.findall(topic)
    long = [w for w in tokens if len(w) > 3]
    if len(long) > 1 and all(w[:1].isupper() for w in long):  # title case
        found = [_in(w, words) for w in content_words(topic)]
        return not found or sum(found) < len(found) / 2
    named = [w for w in tokens if w[:1].isupper() and not _in(w, words)]
    return bool(named) or bool(topic and not in_box(topic, words))


def box_words(box: Box) -> set[str]:
    """The box's words as a topic or keyword is matched against them: each as written and stemmed, to four letters
    ("running" is "runn" and "run", so "Running", "runs" and "ran"... match as their own forms do)."""
    return {x for w in _WORD.findall(box.text()) for x in (_bare(w)[:4], stem(_bare(w))[:4])}


def _in(word: str, words: set[str]) -> bool:
    return stem(_bare(word))[:4] in words or _bare(word)[:4] in words


def in_box(text: str, words: set[str]) -> bool:
    """Some content word of `text` is a word of the box (`words`: box_words)."""
    return any(_in(w, words) for w in content_words(text))


def checked_keywords(keywords: Sequence[str], box: Box) -> list[str]:
    """The model's keywords that the box holds (a keyword of none of its words is the prompt's or invented), none a
    copied line ("2. Maya: ...")."""
    words = box_words(box)
    return [k for k in keywords if in_box(k, words) and not re.match(r"\d+\.\s|[^:]*:\s", k)]
