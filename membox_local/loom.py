"""Topic Loom: files each arriving message into the open box or seals it and opens a new one.

`Loom` is a per-conversation state machine. `process(message)` is a generator step that yields requests
(embeddings for the judge, a label call, the extraction call on seal) and writes its outcome to the store.
Decisions are online: the open box, the new message and (for judges that ask) the conversation's messages
before it are seen, never later messages.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Callable, Iterable, Sequence

from .backends.base import BackendError, JsonRequest, PromptTooLong
from .attribution import checked_keywords, checked_topic, extracted_events, model_topic
from .config import Config, LoomConfig
from .grounding import CHAT_WORDS, STOP_WORDS, content_words, grounding
from .judges import Decision, Judge, make_judge
from .prompts import extract_prompt, extract_schema, extract_system
from .records import Box, Message
from .requests import EmbedRequest, Step
from .worth import flat, line_sentences, load_keep_model
from .retrieval.layout import CHUNK_WORDS, chunk_session_messages, chunk_text
from .store import Store

_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9'’-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def text_keywords(messages: Sequence[Message], n: int, max_chars: int) -> list[str]:
    """A box's keywords without a model call (`[extract] keywords = "text"`): words written with a capital inside a
    sentence (names, places, titles) first, then content words by how often the box uses them, verb forms in -ing
    and -ed after the others, longer ones first (ties: first use); the speakers' names, contractions, stop words
    and chat fillers are left out. At most `n`, each at most `max_chars` characters."""
    speakers = {w.lower() for m in messages for w in m.speaker.split()}
    counts: dict[str, int] = {}
    shown: dict[str, str] = {}
    named: set[str] = set()
    for m in messages:
        for sentence in _SENTENCE_END.split(m.text):
            for i, tok in enumerate(_TOKEN.findall(sentence)):
                word = re.sub(r"['’]s$", "", tok).strip("'’-")
                low = word.lower()
                if ("'" in low or "’" in low or len(low) < 3 or len(low) > max_chars or low in STOP_WORDS
                        or low in CHAT_WORDS or low in speakers):
                    continue  # a contraction ("I'm", "don't"), too short or long, or a word about anything
                counts[low] = counts.get(low, 0) + 1
                if i > 0 and word[0].isupper():
                    named.add(low)
                    shown[low] = word
                shown.setdefault(low, low)
    order = {w: k for k, w in enumerate(counts)}
    ranked = sorted(counts, key=lambda w: (w not in named, -counts[w], w.endswith(("ing", "ed")), -len(w), order[w]))
    return [shown[w] for w in ranked[:n]]


def _name_pattern(name: str) -> re.Pattern:
    first = name.split()[0] if name.split() else name
    return re.compile(rf"\b{re.escape(first)}\b", re.IGNORECASE)


def speaker_grounding(event: str, messages: Sequence[Message]) -> float:
    """Grounding in the lines of the person the event is about: the first speaker of `messages` the event
    names is its subject, and its content words (speaker names left out) must be found in that speaker's own
    lines or in lines that name them ("Ana and Ben ...": in the lines of each). "Ben bought a red bicycle" scores
    low when only Ana's lines say so.
    An event that names no speaker gets the plain lexical grounding against every line."""
    speakers = list(dict.fromkeys(m.speaker for m in messages if m.speaker.strip()))
    subjects, rest = event_subjects(event, speakers)
    if not subjects:
        return grounding(event, "\n".join(m.render() for m in messages))
    if not content_words(rest):
        return 1.0
    return min(grounding(rest, "\n".join(m.text for m in messages if is_about(m, s))) for s in subjects)


def event_subjects(event: str, speakers: Sequence[str]) -> tuple[list[str], str]:
    """Whom an event is about: the first of `speakers` it names, and the second too in "Ana and Ben ..." (a joint
    claim must hold for each); with the event's text without the speakers' names. ([], text): it names none."""
    named = sorted((match.start(), sp) for sp in speakers if (match := _name_pattern(sp).search(event)))
    subjects = [named[0][1]] if named else []
    if len(named) > 1 and re.match(r"\s+and\s+$", event[named[0][0] + len(named[0][1].split()[0]):named[1][0]]):
        subjects.append(named[1][1])
    rest = event
    for sp in speakers:
        rest = _name_pattern(sp).sub(" ", rest)
    return subjects, rest


def is_about(m: Message, person: str) -> bool:
    """A line of `person`'s own, or one that names them."""
    return m.speaker == person or bool(_name_pattern(person).search(m.text))


def event_grounding(event: str, box: Box, by_speaker: bool) -> float:
    """What an event's `grounding` holds: its lexical grounding in the box text, and with `by_speaker` no more
    than its grounding in the lines of the person it names (`speaker_grounding`)."""
    lexical = grounding(event, box.text())
    return min(lexical, speaker_grounding(event, box.messages)) if by_speaker else lexical


def split_point(lc: LoomConfig, scores: Sequence[float | None]) -> int | None:
    """Where `cap_split = "weakest"` cuts a full box: the index of its message with the lowest continue score (the
    judge's Decision.score when it was filed) after the first `min_box_messages`, the later one on a tie; None when
    the rule is "at-cap" or no such message has a score (the box seals as it is)."""
    if lc.cap_split != "weakest":
        return None
    scored = [(s, -k) for k, s in enumerate(scores) if k >= lc.min_box_messages and s is not None]
    return -min(scored)[1] if scored else None


def decide(lc: LoomConfig, judge: Judge, open_box: Sequence[Message], m: Message,
           earlier: Sequence[Message] = (), scores: Sequence[float | None] = ()) -> Step:
    """The online continuity rule: does `m` continue the open box (its messages so far)? `earlier`: the
    conversation's messages before `m`, oldest first (only the judge's last `history` are used); `scores`: the
    open box's messages' Decision.score, in order (read by `cap_split = "weakest"` alone).

    The only place the rule lives: the Loom and `membox eval segmentation` both call it.
    """
    if not open_box:
        return Decision(False, "first")
    if lc.seal_on_session_change and m.session != open_box[-1].session:
        return Decision(False, "session")
    if len(open_box) < lc.min_box_messages:
        return Decision(True, "min-context")
    if len(open_box) >= lc.max_box_messages:
        if lc.cap_split == "weakest" and len(scores) != len(open_box):  # a caller's bug, never a silent at-cap
            raise ValueError(f"cap_split 'weakest' needs the open box's {len(open_box)} scores, got {len(scores)}")
        k = split_point(lc, scores)
        return Decision(False, "max-size") if k is None else Decision(True, "max-size-split", split_at=k)
    return (yield from judge.decide(open_box, m, list(earlier)[-judge.history:] if judge.history else []))


class Loom:
    def __init__(self, conversation_id: str, store: Store, cfg: Config, judge: Judge | None = None,
                 after_extract: Callable[[Box], Step] | None = None, extract: bool = True):
        self.conversation_id = conversation_id
        self.store = store
        self.cfg = cfg
        self.judge = judge or make_judge(cfg.loom)
        self.box: Box | None = store.current_open_box(conversation_id)
        # the open box's messages' continue scores, in order (cap_split "weakest" cuts at the lowest)
        self.scores: list[float | None] = store.box_scores(self.box.id) if self.box else []
        # the conversation's last messages before the next one, for judges that compare with them
        self.earlier: list[Message] = store.filed_messages(conversation_id, self.judge.history) \
            if self.judge.history else []
        self.after_extract = after_extract  # e.g. the Trace Weaver's step for a newly extracted box
        self.extracts = extract  # False: filing only, sealed boxes stay 'sealed' (a full build extracts them)

    # ---- the decision ---------------------------------------------------------------------------
    def process(self, m: Message) -> Step:
        """File one message; on a seal, extract the sealed box. Returns the Decision."""
        box = self.box
        decision = yield from decide(self.cfg.loom, self.judge, box.messages if box else [], m, self.earlier,
                                     self.scores)

        sealed = None
        with self.store.transaction():
            if decision.split_at is not None:
                sealed = self._split(decision.split_at)
            elif not decision.continues:
                if box is not None:
                    self.store.set_box_status(box.id, "sealed")
                    sealed = box
                box_id = self.store.open_box(m)
                self.box = Box(box_id, m.conversation_id, m.session, m.session_date)
                self.scores = []
            self.store.file_message(m, self.box.id, decision.label, decision.score)
        self.box.messages.append(m)
        self.scores.append(decision.score)
        if self.judge.history:
            self.earlier = (self.earlier + [m])[-self.judge.history:]
        if sealed is not None:
            sealed.status = "sealed"
            yield from self.windows(sealed)
            yield from self.extract(sealed)
        return decision

    def _split(self, k: int) -> Box:
        """Seal the open box's first `k` messages and keep the rest open as a new box (inside the caller's
        transaction); returns the sealed box."""
        box = self.box
        tail = box.messages[k:]
        self.store.set_box_status(box.id, "sealed")
        box_id = self.store.open_box(tail[0])
        self.store.move_messages(tail, box.id, box_id)
        box.messages, box.status = box.messages[:k], "sealed"
        self.box = Box(box_id, box.conversation_id, tail[0].session, tail[0].session_date)
        self.box.messages = list(tail)
        self.scores = self.scores[k:]
        return box

    def seal_open(self) -> Step:
        """Seal and extract the open box (end of a conversation or of a batch build)."""
        if self.box is not None and self.box.messages:
            box, self.box, self.scores = self.box, None, []
            self.store.set_box_status(box.id, "sealed")
            yield from self.windows(box)
            yield from self.extract(box)

    @staticmethod
    def windows(box: Box) -> Step:
        """Embed a sealed box's windows (its box-bounded chunks of about CHUNK_WORDS words, what box-hits ranks each
        message's neighbourhood by) now, into the store's vector cache: a question then reads them, and the first
        question on a large memory does not embed every window of it."""
        texts = tuple(chunk_text(c) for c in chunk_session_messages(box.messages, CHUNK_WORDS))
        if texts:
            yield EmbedRequest(texts)

    def worth_keeping(self, shown: list[Message]) -> Step:
        """Per shown line, which of its sentences the keep model ([extract] keep_model, worth.py) keeps."""
        model = load_keep_model(self.cfg.extract.keep_model, self.cfg.embedder.model)
        split = [line_sentences(m.text) for m in shown]
        texts = flat(split)
        return model.kept_per_line(split, (yield EmbedRequest(texts)) if texts else None)

    def finish_pending(self) -> Step:
        """Extract boxes sealed earlier whose extraction never finished or failed (resume)."""
        for box in self.store.boxes(self.conversation_id, status="sealed") + \
                self.store.boxes(self.conversation_id, status="failed"):
            yield from self.extract(box)

    # ---- extraction -----------------------------------------------------------------------------
    def extract(self, box: Box) -> Step:
        """The box's record from the model. A box too long for the model's context is read from a bounded
        excerpt (`excerpted_call`), said in the record's note."""
        if not self.extracts:
            return box
        ec = self.cfg.extract
        seen: list[list[Message]] = []

        def request(shown: list[Message]) -> JsonRequest:
            seen.append(shown)
            return JsonRequest(extract_prompt(shown, box.session_date, ec),
                               extract_schema(ec, len(shown)),
                               stage="extract", max_tokens=ec.max_tokens, about=f"box {box.id}")
        try:
            res, note = yield from excerpted_call(
                box.messages, excerpt_budget(self.cfg.llm.n_ctx, ec.max_tokens), request)
        except BackendError as exc:
            # Recorded, shown by `membox show` and the build summary, retried by the next build.
            self.store.set_box_status(box.id, "failed", error=f"extraction failed: {exc}")
            box.status = "failed"
            return box
        data = res.data
        instructions = extract_system(ec)
        participants = self.store.speakers(box.conversation_id, max(m.seq for m in box.messages))
        kept = (yield from self.worth_keeping(seen[-1])) if ec.events == "lines" and ec.keep_model else None
        events, box.dropped = extracted_events(data, box, seen[-1], participants, instructions, ec, kept)
        box.keywords = (checked_keywords(_dedupe(data.get("keywords", [])), box) if ec.keywords == "model"
                        else text_keywords(box.messages, ec.max_keywords, ec.max_keyword_chars))
        box.topic, why = checked_topic(model_topic(data, ec.events), box, box.keywords, instructions, participants,
                                       ec.max_topic_chars)
        if why:
            box.dropped[why] = 1
        box.note = note
        box.events = self.store.save_extraction(box.id, box.topic, box.keywords, events, note, box.dropped)
        box.status = "extracted"
        if self.after_extract is not None:
            yield from self.after_extract(box)
        return box


# An extraction prompt holds the box's messages and about 300 tokens of instructions and schema. The box's text is
# bounded in characters at CHARS_PER_TOKEN per token of the context left after those and the record's max_tokens:
# English runs about 4 characters per token in Qwen's and SmolLM's tokenizers, so 3 leaves room; a text that
# tokenizes worse (code, another script) is cut further when the backend says the prompt is too long.
CHARS_PER_TOKEN = 3
PROMPT_OVERHEAD_TOKENS = 300
EXCERPT_TRIES = 3
MIN_EXCERPT_CHARS = 200


def excerpt_budget(n_ctx: int, max_tokens: int) -> int:
    """Characters of message text a prompt may hold in a context of `n_ctx` tokens that leaves `max_tokens` to
    generate."""
    return max(MIN_EXCERPT_CHARS, CHARS_PER_TOKEN * (n_ctx - max_tokens - PROMPT_OVERHEAD_TOKENS))


def excerpted_call(messages: Sequence[Message], budget: int, request: Callable[[list[Message]], Any]) -> Step:
    """Yield `request(shown)` with `shown` the messages' excerpt within `budget` characters; when the backend still
    finds the prompt too long (PromptTooLong), again with the excerpt cut to fit, EXCERPT_TRIES times in all, so that
    a long message never fails the same way on every rerun. Returns (result, note: `excerpt`'s); the last
    PromptTooLong, or any other BackendError, is raised to the caller."""
    for attempt in range(EXCERPT_TRIES):
        shown, note = excerpt(messages, budget)
        try:
            res = yield request(shown)
        except PromptTooLong as exc:
            if attempt == EXCERPT_TRIES - 1:
                raise
            budget = shrunk_budget(budget, sum(len(m.text) for m in shown), exc)
            continue
        return res, note
    raise AssertionError("unreachable")


def shrunk_budget(budget: int, used: int, exc: PromptTooLong) -> int:
    """The budget after the backend refused a prompt of `used` box characters: cut to the share of the context
    the prompt overran by (with a margin), or halved where the backend did not say by how much."""
    if exc.tokens and exc.limit and exc.tokens > exc.limit:
        share = 0.9 * exc.limit / exc.tokens
    else:
        share = 0.5
    return max(MIN_EXCERPT_CHARS, int(min(budget, used) * share))


def excerpt(messages: Sequence[Message], budget: int) -> tuple[list[Message], str]:
    """The messages as they are when their texts fit `budget` characters, else each over its fair share cut to
    its head and tail around " [...] " (short messages kept whole, the rest of the budget shared among the long
    ones); the note names each message cut and by how much ("" when none was)."""
    lengths = [len(m.text) for m in messages]
    if sum(lengths) <= budget:
        return list(messages), ""
    share, rest = budget, sorted(lengths)  # the largest per-message cap c with sum(min(len, c)) <= budget
    for i, n in enumerate(rest):
        cap = share // (len(rest) - i)
        if n > cap:
            share = cap
            break
        share -= n  # the loop always breaks: the lengths sum to more than the budget
    out, cut = [], []
    for m in messages:
        if len(m.text) <= share:
            out.append(m)
            continue
        head = max(1, share * 2 // 3)
        tail = max(0, share - head)
        out.append(replace(m, text=m.text[:head] + " [...] " + (m.text[-tail:] if tail else "")))
        cut.append(f"{m.message_id} ({len(m.text):,} -> {share:,} characters)")
    return out, ("extracted from an excerpt, too long for the model's context: " + ", ".join(cut))


def _dedupe(items: Iterable[str]) -> list[str]:
    seen, out = set(), []
    for item in items:
        item = " ".join(str(item).split())
        if item and item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


def file_into_boxes(memory, conversation_id: str) -> int:
    """File the conversation's pending messages in `memory` (a Memory) into boxes with the Loom's continuity
    rule (the config's judge, online, as a build would), sealing every box but extracting none: what the
    box-hits modes need, without a language model for records. Returns how many messages were filed."""
    memory.check_build_settings()
    loom = Loom(conversation_id, memory.store, memory.config, extract=False)
    pending = memory.store.pending_messages(conversation_id)

    def step():
        for m in pending:
            yield from loom.process(m)
        yield from loom.seal_open()

    memory.driver().drive(step(), conversation_id)
    return len(pending)
