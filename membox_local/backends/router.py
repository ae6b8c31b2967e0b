"""Stage routing: the requests of some stages answered by a model of their own (`[eventweave] llm`, e.g. the event
graph's extraction on a larger model while the box memory's judge keeps the small one), the rest by the default.

A `StageRouter` is a Backend, so the driver, the steps and the batching stay as they are: each batched call is
split by stage into one call per backend, and the answers come back in request order.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .base import Backend


class StageRouter(Backend):
    name = "router"

    def __init__(self, default: Backend, routes: dict[str, Backend]):
        self.default, self.routes = default, dict(routes)

    def backend_for(self, stage: str) -> Backend:
        return self.routes.get(stage, self.default)

    def _split(self, method: str, requests: Sequence[Any]) -> list[Any]:
        out: list[Any] = [None] * len(requests)
        groups: dict[int, tuple[Backend, list[int]]] = {}
        for i, r in enumerate(requests):
            b = self.backend_for(r.stage)
            groups.setdefault(id(b), (b, []))[1].append(i)
        for b, idx in groups.values():
            for i, res in zip(idx, getattr(b, method)([requests[i] for i in idx])):
                out[i] = res
        return out

    def label_batch(self, requests):
        return self._split("label_batch", requests)

    def json_batch(self, requests):
        return self._split("json_batch", requests)

    def text_batch(self, requests):
        return self._split("text_batch", requests)

    def score_batch(self, requests):
        return self._split("score_batch", requests)

    def prepare(self, stages):
        for stage in stages:
            self.backend_for(stage).prepare([stage])

    def count_tokens(self, text: str) -> int:
        return self.default.count_tokens(text)

    def close(self) -> None:
        for b in {id(b): b for b in [self.default, *self.routes.values()]}.values():
            b.close()


def build_backend(config, make: Callable | None = None, made: dict[str, Backend] | None = None) -> Backend:
    """The backend a build of `config` uses: its [llm] model, with a StageRouter in front when a memory system
    names a model of its own for its stages (`Config.stage_llms`). `made`: backends already made, by
    `llm_key`, shared (one model loaded once, e.g. the event graph's and the answering model)."""
    from . import make_backend

    make = make or make_backend
    made = {} if made is None else made

    def get(llm) -> Backend:
        key = llm_key(llm)
        if key not in made:
            made[key] = make(llm)
        return made[key]

    default = get(config.llm)
    routes = {stage: get(llm) for stage, llm in config.stage_llms().items()}
    return StageRouter(default, routes) if routes else default


def llm_key(llm) -> str:
    import dataclasses
    import json

    return json.dumps(dataclasses.asdict(llm), sort_keys=True, default=str)
