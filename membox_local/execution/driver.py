"""Drivers execute the requests that pipeline steps yield.

`Driver.drive` runs one step to completion; `Driver.drive_many` advances many steps together and answers
every pending request of one kind with one batched call (one generate over all prompts on vLLM, a batch on
llama.cpp, concurrent requests on OpenAI). Both produce the same store: the steps are identical.
Both time what they run, by conversation and stage, into the store's build_time table (profile.py).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Hashable, Iterable

from ..backends.base import Backend, BackendError, JsonRequest, LabelRequest, ScoreRequest, TextRequest
from ..embed import Embedder
from ..profile import EMBED, PIPELINE, StageClock, span, token_weights
from ..requests import EmbedRequest, Request, Step
from ..store import Store

KINDS = (EmbedRequest, LabelRequest, JsonRequest, TextRequest, ScoreRequest)


class Driver:
    def __init__(self, store: Store, embedder: Embedder, backend: Backend | Callable[[], Backend] | None):
        self.store = store
        self.embedder = embedder
        self._backend = backend
        self.clock = StageClock(store)  # seconds and calls by conversation and stage (profile.py)

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            raise RuntimeError("this step needs a language model, but the driver was given none")
        if not isinstance(self._backend, Backend):
            self._backend = self._backend()  # loaded on first use
        return self._backend

    def execute(self, requests: list[Request], conversations: list[str]) -> list[Any]:
        """Answer a mixed list of requests, one batched call per kind; failures come back as exceptions."""
        results: list[Any] = [None] * len(requests)
        for kind in KINDS:
            idx = [i for i, r in enumerate(requests) if isinstance(r, kind)]
            if not idx:
                continue
            batch = [requests[i] for i in idx]
            convs = [conversations[i] for i in idx]
            if kind is EmbedRequest:
                texts = [t for r in batch for t in r.texts]
                with span(self.store) as sp:
                    vecs = self.embedder.encode(texts)
                self.clock.charge(sp, convs, [EMBED] * len(batch), [len(r.texts) for r in batch], [1] * len(batch))
                pos = 0
                for i, r in zip(idx, batch):
                    results[i] = vecs[pos:pos + len(r.texts)]
                    pos += len(r.texts)
                continue
            method = {LabelRequest: self.backend.label, JsonRequest: self.backend.json,
                      TextRequest: self.backend.text, ScoreRequest: self.backend.score}[kind]
            with span(self.store) as sp:
                try:
                    answers = method(batch)
                except (BackendError, TimeoutError) as exc:
                    answers = self._failed(batch, exc)
            # the call's seconds split over its requests by tokens (profile.py); calls: those with usage
            self.clock.charge(sp, convs, [r.stage for r in batch], token_weights(answers),
                              [getattr(a, "usage", None) is not None for a in answers])
            with span(self.store) as sp:
                self._record(idx, answers, conversations, results)
            self.clock.charge(sp, convs, [PIPELINE] * len(batch), [1] * len(batch), [0] * len(batch))
        return results

    @staticmethod
    def _failed(batch: list[Request], exc: BaseException) -> list[BaseException]:
        """A call that failed as a whole (the server kept failing, a time-out) fails each of its requests: each
        step sees the error where it asked (an extraction records it on its box, which is then 'failed'; a
        continuity decision cannot be skipped, and ends the build with it)."""
        if not isinstance(exc, BackendError):
            exc = BackendError(f"{batch[0].stage}: the model timed out ({type(exc).__name__}: {exc})")
        return [exc] * len(batch)

    def _record(self, idx: list[int], answers: list[Any], conversations: list[str], results: list[Any]) -> None:
        """Place the answers in `results` and record each one's token usage."""
        for i, res in zip(idx, answers):
            results[i] = res
            usage = getattr(res, "usage", None)
            if usage is not None:
                self.store.record_usage(conversations[i], usage.stage, usage.prompt_tokens, usage.completion_tokens,
                                        cached_tokens=usage.cached_tokens)

    def drive(self, step: Step, conversation_id: str) -> Any:
        return self.drive_many({0: (conversation_id, step)})[0]

    def drive_many(self, steps: dict[Hashable, tuple[str, Step]] | Iterable[tuple[Hashable, tuple[str, Step]]],
                   limit: int | None = None,
                   on_done: Callable[[Hashable, Any], None] | None = None) -> dict[Hashable, Any]:
        """Advance steps together; returns each step's return value by key.

        `steps` is a dict or an iterable of (key, (conversation id, step)) pairs, taken lazily: at most
        `limit` steps are in flight, and a finished one is replaced by the next (`on_done(key, value)` is
        called as each finishes). Every round answers all pending requests with one call per kind. What it
        timed is written to the store every profile.FLUSH_S seconds and when it returns or fails.
        """
        try:
            done = self._drive_many(steps, limit, on_done)
        except BaseException:
            with contextlib.suppress(Exception):  # the build's own error is the one to see
                self.clock.flush()
            raise
        self.clock.flush()
        return done

    def _drive_many(self, steps, limit: int | None, on_done: Callable[[Hashable, Any], None] | None) -> dict:
        source = iter(steps.items() if isinstance(steps, dict) else steps)
        live: dict[Hashable, tuple[str, Step]] = {}
        done: dict[Hashable, Any] = {}
        pending: dict[Hashable, Request] = {}

        def finish(key: Hashable) -> None:
            if key in done:
                live.pop(key)
                if on_done is not None:
                    on_done(key, done[key])

        def refill() -> None:
            while limit is None or len(live) < limit:
                try:
                    key, item = next(source)
                except StopIteration:
                    return
                if key in live or key in done:
                    raise ValueError(f"drive_many: step key {key!r} given twice")
                live[key] = item
                self._advance(key, item, None, pending, done)
                finish(key)

        refill()
        while pending:
            keys = list(pending)
            results = self.execute([pending[k] for k in keys], [live[k][0] for k in keys])
            pending = {}
            for key, res in zip(keys, results):
                self._advance(key, live[key], res, pending, done)
                finish(key)
            refill()
            if self.clock.due():
                self.clock.flush()
        return done

    def _advance(self, key: Hashable, item: tuple[str, Step], value: Any, pending: dict, done: dict) -> None:
        """Resume one step, timed as the `pipeline` stage of its conversation (its store writes as `store`)."""
        with span(self.store) as sp:
            _advance(key, item[1], value, pending, done)
        self.clock.charge(sp, [item[0]], [PIPELINE], [1.0], [1])


def _advance(key, step: Step, value: Any, pending: dict, done: dict) -> None:
    try:
        if isinstance(value, BaseException):
            pending[key] = step.throw(value)
        else:
            pending[key] = step.send(value)
    except StopIteration as stop:
        done[key] = stop.value
