"""The unmentioned-term guard (`[answer] check_terms`): a question that names something no excerpt of its context
mentions is answered "not mentioned" without asking the model.

Why: a small answering model asked "How many days did I spend in Hawaii and in Seattle?" over excerpts that tell of
Hawaii only answers with Hawaii's days. LongMemEval builds its abstention questions exactly so (a real memory with
one name changed or one item added), and users are better served by "not mentioned (nothing about Seattle)" than by
a confident half answer.

What a question names (a lexical rule, no model):
- names: capitalised words that do not start a sentence ("Dr. Johnson", "Seattle", 'Ethereal Dreams'), months,
  weekdays and titles left out;
- the two sides of "X and Y" / "X or Y" between things ("tomatoes and chili peppers": tomatoes, peppers), not
  between verbs ("did I fix or service": a pronoun before it) and not after a name ("Jon and Gina decide": the
  names are checked as names).
A term counts as mentioned when its stem (plural, -ing and -ed stripped) starts a word of the context.

Fitted on: the 5 abstention questions of the LongMemEval dev slice, with its 93 answerable questions and LoCoMo's
885 dev questions as the false-alarm check (`python benchmarks/grounding_check.py`; docs/longmemeval.md). A lexical
rule misses paraphrase ("an online group" for "mates"), so it is off by default.

Below the guard: the lexical grounding of an event in the text it came from (`grounding`, `content_words`), which
the Loom's records (attribution.py) and the event graph use to drop what their source does not say.
"""
from __future__ import annotations

import re
from typing import Sequence

from .records import Message

_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
# the two sides of a conjunction, an article or preposition skipped on the right; an optional next word makes a
# two-word thing ("chili peppers": its head is the second word)
_PAIR = re.compile(r"([A-Za-z'’-]+) (?:and|or) (?:(?:in|the|my|at|to|a|an) )?([A-Za-z'’-]+)(?: ([A-Za-z'’-]+))?")
_STOP = frozenset("""a an the i me my we our you your he she it they them their his her is are was were be been do does
did have has had how many much what which when where who whom why to of in on at for from with by and or but not no
so as this that these those there here then than any some all each every about into over after before during since
total both first last get go few other more several""".split())
_NOT_NAMES = frozenset("""january february march april may june july august september october november december monday
tuesday wednesday thursday friday saturday sunday""".split())
_TITLES = ("dr.", "mr.", "mrs.", "ms.", "prof.", "st.")
_SUBJECTS = frozenset(("i", "you", "we", "to", "get"))  # before "X and Y": a verb phrase, not two things
_SUFFIXES = (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""))


def stem(word: str) -> str:
    """Lower case, a possessive and one suffix stripped ("peppers" pepper, "jogging" jog, "cities" city)."""
    w = word.lower().strip("'’")
    w = w[:-2] if w.endswith(("'s", "’s")) else w
    for suffix, repl in _SUFFIXES:
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            w = w[:-len(suffix)] + repl
            if suffix in ("ing", "ed") and len(w) > 2 and w[-1] == w[-2]:
                w = w[:-1]  # a doubled consonant: "jogging" -> "jogg" -> "jog"
            return w
    return w


def _starts_sentence(question: str, at: int) -> bool:
    before = question[:at].rstrip(" '\"‘“(")
    if not before:
        return True
    return before[-1] in ".?!:" and not before.lower().endswith(_TITLES)


def question_terms(question: str) -> list[str]:
    """The things a question names (see the module text), in order, each once."""
    terms: list[str] = []
    for m in _WORD.finditer(question):
        word = m.group(0).rstrip("'’")
        low = word.lower()
        if (word[0].isupper() and word != "I" and not _starts_sentence(question, m.start())
                and low not in _NOT_NAMES and low not in _STOP
                and low + "." not in _TITLES and word not in terms):
            terms.append(word)
    for m in _PAIR.finditer(question):
        left, right, after = (w.rstrip("'’") if w else w for w in m.groups())
        before = question[:m.start()].split()[-1:]
        if before and before[0].lower() in _SUBJECTS:
            continue
        if after and not right[0].isupper() and after.lower() not in _STOP:
            right = after
        for word in (left, right):
            if word.lower() not in _STOP and word[0].islower() and word not in terms:
                terms.append(word)
    return terms


def unmentioned(question: str, context: str) -> list[str]:
    """The question's terms that no word of `context` starts with (by stem)."""
    low = context.lower()
    return [t for t in question_terms(question) if not re.search(r"\b" + re.escape(stem(t)), low)]


# the answer when retrieval found nothing to read (an empty memory, a conversation it does not hold): decided here,
# with no model call, so that a model never answers from an empty context (it invents one)
NOTHING_TO_READ = "not mentioned (the memory holds nothing to answer this from)"


def not_mentioned_reply(terms: list[str], question: str = "") -> str:
    """The answer when the guard holds: the scorers' abstention phrase, with what was not found (terms side by
    side in the question shown as one: "Super Bowl")."""
    shown: list[str] = []
    for t in terms:
        if shown and f"{shown[-1]} {t}" in question:
            shown[-1] = f"{shown[-1]} {t}"
        else:
            shown.append(t)
    return "not mentioned (the memory says nothing about " + " or ".join(shown) + ")"


# ---- lexical grounding: how much of an event the text it came from holds ----------------------------
_CONTENT_WORD = re.compile(r"[a-z0-9]+")
STOP_WORDS = frozenset(
    "a an the and or but if of to in on at for with by from about as is are was were be been being i you he "
    "she it we they me him her us them my your his its our their this that these those do did does have has "
    "had will would can could should just so very really too also not no yes up out over then than there "
    "here what when where who how which im ive its dont going went get got "
    # the pieces of a contraction the word pattern splits ("I'll" -> "i", "ll")
    "ll ve re don didn doesn isn wasn aren weren haven hasn couldn wouldn shouldn".split()
)


def content_words(text: str) -> list[str]:
    return [w for w in _CONTENT_WORD.findall(text.lower()) if w not in STOP_WORDS and len(w) > 1]


def grounding(event: str, source: str) -> float:
    """Share of the event's content words found in the source (matched on a 5-letter prefix)."""
    words = content_words(event)
    if not words:
        return 0.0
    have = {w[:5] for w in content_words(source)}
    return sum(w[:5] in have for w in words) / len(words)


def sources(answer: str, question: str, shown: Sequence[Message], ranked: Sequence[str],
            at_most: int = 3) -> list[Message]:
    """The shown lines an answer was read from, decided by code: the lines (their text and session date) holding the
    most of the answer's own content words (not in the question; matched on a 5-letter prefix), at most `at_most`,
    best ranked first (`ranked`: the mode's order of message ids); none for an answer with no word of its own."""
    own = {w[:5] for w in content_words(answer)} - {w[:5] for w in content_words(question)}
    if not own:
        return []
    rank = {mid: i for i, mid in enumerate(ranked)}
    held = [(len(own & {w[:5] for w in content_words(f"{m.text} {m.session_date}")}), m) for m in shown]
    most = max((n for n, _ in held), default=0)
    best = [m for n, m in held if n == most and most > 0]
    return sorted(best, key=lambda m: rank.get(m.message_id, len(rank)))[:at_most]


# words a chat uses about anything, and reactions: never keywords (loom.text_keywords), never a fact on their own
# (attribution.py)
CHAT_WORDS = frozenset(
    "like know think thanks thank great good love hey wow yeah oh sounds sound glad cool awesome fun happy nice "
    "thing things lot lots one make made take see want feel felt time times much well sure totally amazing "
    "definitely way something anything everything always never still even back new day today let lets youre "
    "keep right look looks looking shares shared gonna wanna some into myself yourself yours ones btw lol congrats "
    "mean means find done other others exactly brilliant brutal huge deal sensible classic aww ha haha hmm doable "
    "sorry sad wish hope hoping excited exciting cute lovely wonderful fantastic incredible".split()
)
