"""Reading by meaning: `search` (boxes near a question), `context` (a retrieval mode's context within a token budget)
and `answer` (the answering model over it), each inside the conversations a call names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .backends.base import Backend, JsonRequest, StructuredOutputError, TextRequest
from .dates import parse_session_date, resolve_relative
from .grounding import NOTHING_TO_READ, not_mentioned_reply, sources as cited, unmentioned
from .index import VectorIndex
from .ingest import InputError
from .prompts import answer_prompt, asks_for_advice, asks_for_total, tally_prompt, tally_schema
from .records import Box, Message
from .retrieval import RETRIEVERS, Context, make_retriever
from .systems import SYSTEMS
from .tally import parts, total_reply

@dataclass
class Answer:
    text: str
    context: Context
    question: str
    # what the question names that no excerpt mentions, when `[answer] check_terms` answered for the model
    unmentioned: tuple[str, ...] = ()
    # the parts the model listed and the code added up, when `[answer] tally` answered a total question (tally.py)
    parts: tuple[tuple[str, float], ...] = ()
    # the shown lines the answer was read from, decided by code (grounding.sources): where a person checks it
    sources: tuple[Message, ...] = ()


def source_list(ans: Answer) -> list[dict[str, str]]:
    """The answer's sources as the servers and `membox ask --json` give them: message id, conversation, speaker, date."""
    return [{"message_id": m.message_id, "conversation_id": m.conversation_id, "speaker": m.speaker,
             "date": m.session_date} for m in ans.sources]


def check_question(question: object, where: str) -> None:
    """A question is a non-empty string that can be written as UTF-8 (no lone surrogate): else an InputError."""
    if not isinstance(question, str):
        raise InputError(f"{where}: the question must be a string, got {type(question).__name__}")
    if not question.strip():
        raise InputError(f"{where}: the question is empty")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{where}: the question is not valid Unicode (a lone surrogate at character "
                         f"{exc.start})") from None


def check_today(today: str) -> None:
    """`today` is empty or a date: else an InputError."""
    if today and parse_session_date(today) is None:
        raise InputError(f"today: not a date: {today!r} (e.g. '2023-03-16' or '14:24 on 16 March, 2023')")


class Stripped:
    """Pieces of a text handed on as they come, but as the stripped text: white space before the first visible
    character dropped, white space held back until something follows it (so the end's is never handed on). The
    pieces handed on join to `text.strip()`."""

    def __init__(self, on_text: Callable[[str], None]):
        self.on_text, self.held, self.started = on_text, "", False

    def __call__(self, piece: str) -> None:
        if not self.started:
            piece = piece.lstrip()
            self.started = bool(piece)
        body = piece.rstrip()
        if body:
            self.on_text(self.held + body)
            self.held = ""
        self.held += piece[len(body):]


class Reading:
    """A part of `Memory` (memory.py: the class is made of these parts); it uses the attributes and models
    Memory.__init__ sets (store, config, components, the write lock)."""

    def boxes(self, conversation_id: str | None = None) -> list[Box]:
        """The box memory's boxes, with their messages and events."""
        self.system("membox")
        return self.store.boxes(conversation_id)

    def index(self, name: str) -> VectorIndex:
        """A vector index kept beside the store (`<name>.hnsw`), derived from it and rebuilt when deleted."""
        if name not in self._indexes:
            self._indexes[name] = VectorIndex(self.path / f"{name}.hnsw", self.embedder.dim)
        return self._indexes[name]

    def retriever(self, mode: str):
        """The mode's retriever, kept while the rows it reads are unchanged (Store.generation: any write of
        messages, boxes, events, traces or the event graph, by this process or another, makes the next question build
        it anew, or, where messages were only added and filed, bring it up to date: Retriever.refresh), so that a
        question does not read and index the whole scope again: box-hits' box map, BM25 index and window vectors are
        made once and extended as the memory grows."""
        with self._retrievers_lock:  # one thread at a time brings them up to date
            now = self.store.generation()
            kept = self._retrievers.get(mode)
            if kept is None or kept[0][1] != now[1] or (kept[0] != now and not kept[1].refresh()):
                kept = (now, make_retriever(mode, self))  # new, after an erasure, or not to be brought up to date
            self._retrievers[mode] = (now, kept[1])
            return kept[1]

    def evidence_scorer(self):
        """[retrieve] evidence_model's scorer (box-hits' second stage), or None where the config names none."""
        name = self.config.retrieve.evidence_model
        if not name:
            return None
        from .continuity import evidence_scorer

        return evidence_scorer(name)

    def held_bytes(self) -> int:
        """Bytes this Memory's open vector indexes hold (VectorIndex.held_bytes): the data it keeps in memory."""
        return sum(index.held_bytes() for index in list(self._indexes.values()))

    def _default_conversation(self, conversation_id: str | None, where: str = "search") -> str | None:
        """The conversation a read sees: the one named, else the memory's only one. Conversations are the
        isolation unit, so a read of a memory holding several must say which (or, for search, which several)."""
        if conversation_id is not None:
            return conversation_id
        convs = self.store.conversations()
        if len(convs) > 1:
            shown = ", ".join(convs[:5]) + (", ..." if len(convs) > 5 else "")
            raise InputError(f"{where}: this memory holds {len(convs)} conversations ({shown}); name one with "
                             f"conversation_id (--conversation), or several with conversation_ids (search)")
        return convs[0] if convs else None

    def search(self, question: str, k: int | None = None, conversation_id: str | None = None, *,
               conversation_ids: Iterable[str] | None = None, user_id: str | None = None, agent_id: str | None = None,
               filters: Mapping[str, Any] | None = None) -> list[tuple[Box, float]]:
        """The k extracted boxes nearest the question (default [retrieve] k), as (Box, cosine), best first.

        Within one conversation (`conversation_id`: nothing of another one is seen) or several
        (`conversation_ids`); naming none is allowed only when the memory holds one conversation. With `user_id`, `agent_id` or `filters` (metadata key -> value, equal as
        JSON), among the boxes holding a message that matches them all (as Memory.get_all)."""
        check_question(question, "search")
        k = k or self.config.retrieve.k
        if conversation_ids is None and user_id is None and agent_id is None and filters is None:
            return self.system("membox").search(question, k, self._default_conversation(conversation_id))
        convs = self._scope("search", conversation_id, conversation_ids)
        return self.system("membox").search(question, k, None,
                                            boxes=self._matching_boxes(convs, user_id, agent_id, filters))

    def modes(self) -> list[str]:
        """Retrieval modes this memory can serve: the message-only ones and those of its systems."""
        claimed = {m for info in SYSTEMS.values() for m in info.modes}
        own = {m for n in self.config.memory.systems for m in SYSTEMS[n].modes}
        return sorted(m for m in RETRIEVERS if m not in claimed or m in own)

    def context(self, question: str, conversation_id: str | None = None, mode: str | None = None,
                k: int | None = None, budget_tokens: int | None = None) -> Context:
        check_question(question, "retrieve")
        rc = self.config.retrieve
        mode = mode or rc.mode
        if mode in RETRIEVERS and mode not in self.modes():
            raise ValueError(f"retrieval mode '{mode}' reads a memory system this config does not build; "
                             f"choose one of {self.modes()}")
        for name, value in (("k", k), ("budget_tokens", budget_tokens)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise InputError(f"{name} must be a whole number of at least 1 (got {value!r})")
        retriever = self.retriever(mode)
        k = rc.k if k is None else k
        budget_tokens = rc.budget_tokens if budget_tokens is None else budget_tokens
        return retriever.retrieve(question, self._default_conversation(conversation_id, "retrieve"), k, budget_tokens)

    def answer(self, question: str, conversation_id: str | None = None, today: str = "",
               on_text: Callable[[str], None] | None = None, **kw) -> Answer:
        """The answering model over the question's context (`kw`: mode, k, budget_tokens). `today`: when the
        question is asked ("14:24 on 16 March, 2023", "2023-03-16"): the model is told the date, each excerpt's
        date line says how long before it was, and "two weeks ago" in the question is resolved against it.
        `on_text`: the answer's text as the model writes it (answer_from)."""
        check_today(today)
        ctx = self.context(question, conversation_id, **kw)
        return self.answer_from(self.asked(question, today), ctx, conversation_id, today=today, on_text=on_text)

    def asked(self, question: str, today: str = "") -> str:
        """The question as the answering model reads it: "two weeks ago" resolved against `today` when given (and
        `[retrieve] resolve_dates`). A server retrieves and answers on separate threads (service.Service.answer)."""
        check_today(today)
        return resolve_relative(question, today) if today and self.config.retrieve.resolve_dates else question

    def answer_from(self, question: str, ctx: Context, conversation_id: str | None = None,
                    backend: Backend | None = None, today: str = "",
                    on_text: Callable[[str], None] | None = None) -> Answer:
        """Answer from a context already retrieved (evaluations reuse one retriever across questions, and may
        pass another answering backend); `today`: when the question is asked, said to the model. With `[answer]
        check_terms` a question naming something the context never mentions is answered "not mentioned" here.
        `on_text`: called with the answer as the model writes it, only where the model's text is the answer (the
        plain answer call, not "not mentioned" decided here nor a total added up from a list): the pieces it gets
        join to Answer.text exactly; when it got none, the answer is printed whole (`membox ask`). A context that
        shows nothing (no message, box or event) is answered "not mentioned" without a model call."""
        if not (ctx.message_ids or ctx.box_ids or ctx.event_ids):
            return Answer(NOTHING_TO_READ, ctx, question)
        if self.config.answer.check_terms and not asks_for_advice(question):  # a request may name what is new
            missing = unmentioned(question, ctx.text)
            if missing:
                return Answer(not_mentioned_reply(missing, question), ctx, question, tuple(missing))
        backend = backend or self.answer_backend
        if self.config.answer.tally and asks_for_total(question):
            listed = self._tally(backend, ctx, question, conversation_id, today)
            if listed is not None:
                items = tuple(parts(listed))
                return Answer(total_reply(listed, question), ctx, question, parts=items,
                              sources=self.sources(" ".join(w for w, _ in items), question, ctx))
        res = backend.text([TextRequest(answer_prompt(ctx.text, question, today), "answer",
                                        self.config.answer.max_tokens,
                                        on_text=Stripped(on_text) if on_text is not None else None)])[0]
        if isinstance(res, BaseException):
            raise res
        self.store.record_usage(conversation_id or "", "answer", res.usage.prompt_tokens,
                                res.usage.completion_tokens, cached_tokens=res.usage.cached_tokens)
        return Answer(res.text.strip(), ctx, question, sources=self.sources(res.text, question, ctx))

    @staticmethod
    def sources(answer: str, question: str, ctx: Context) -> tuple[Message, ...]:
        """The shown lines the answer was read from (grounding.sources); none for a "not mentioned" answer."""
        if answer.strip().lower().startswith("not mentioned"):
            return ()
        return tuple(cited(answer, question, ctx.shown, ctx.ranked_ids or ctx.message_ids))

    def _tally(self, backend: Backend, ctx: Context, question: str, conversation_id: str | None,
               today: str) -> dict[str, Any] | None:
        """The parts of a total question as the model lists them (prompts.tally_schema); None when the list is
        empty or its output does not fit the schema (cut at max_tokens): the question is then answered as any
        other (the plain prompt says "not mentioned" itself)."""
        cfg = self.config.answer
        res = backend.json([JsonRequest(tally_prompt(ctx.text, question, today), tally_schema(cfg.tally_items),
                                        "answer", cfg.tally_max_tokens)])[0]
        usage = getattr(res, "usage", None)  # a refused list was generated too: its tokens count
        if usage is not None:
            self.store.record_usage(conversation_id or "", "answer", usage.prompt_tokens, usage.completion_tokens,
                                    cached_tokens=usage.cached_tokens)
        if isinstance(res, StructuredOutputError):
            return None
        if isinstance(res, BaseException):
            raise res
        return res.data if parts(res.data) else None
