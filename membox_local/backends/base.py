"""The one interface every language-model backend implements.

Three kinds of request, each answered in batches: pick one label from a fixed set, produce JSON that
matches a bounded schema, or write free text. Every answer carries its token usage tagged by stage.
Backends subclass `Backend` and implement the three `*_batch` methods; everything else is shared.
A fourth kind, `ScoreRequest` (the log-likelihood of a given text), serves likelihood-based judges; backends
that can read prompt log-probabilities implement `score_batch`, the others refuse it with a BackendError.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence, Union

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Prompt:
    """A chat prompt: fixed instructions first (system), variable text last (user), for prefix caching."""

    system: str
    user: str

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


@dataclass(frozen=True)
class LabelRequest:
    prompt: Prompt
    labels: tuple[str, ...]
    stage: str
    logprobs: bool = False  # also return a probability for every label


@dataclass(frozen=True)
class JsonRequest:
    prompt: Prompt
    schema: dict[str, Any] = field(hash=False)
    stage: str
    max_tokens: int = 400


@dataclass(frozen=True)
class TextRequest:
    prompt: Prompt
    stage: str
    max_tokens: int = 64


@dataclass(frozen=True)
class ScoreRequest:
    """log p(continuation | context) under the model, on raw text (no chat template). The two parts are
    tokenized separately and joined, so a context's tokens are the same whatever follows it."""

    context: str
    continuation: str
    stage: str


LLMRequest = Union[LabelRequest, JsonRequest, TextRequest, ScoreRequest]


@dataclass
class Usage:
    stage: str
    prompt_tokens: int
    completion_tokens: int


@dataclass
class LabelResult:
    label: str
    usage: Usage
    probs: dict[str, float] | None = None


@dataclass
class JsonResult:
    data: dict[str, Any]
    usage: Usage
    raw: str = ""


@dataclass
class TextResult:
    text: str
    usage: Usage


@dataclass
class ScoreResult:
    logprob: float  # sum over the continuation's tokens
    tokens: int  # continuation tokens scored
    usage: Usage


class BackendError(RuntimeError):
    """A model call failed in a way the caller must see (never swallowed into an empty answer)."""


class StructuredOutputError(BackendError):
    """The model's output did not parse as the requested JSON, even after retries."""

    def __init__(self, message: str, raw: str, usage: Usage | None = None):
        super().__init__(message)
        self.raw = raw
        self.usage = usage


def continuation_logprob(logits, start: int, tokens: Sequence[int]) -> float:
    """Sum of log p(tokens[i] | tokens[:i]) for i >= start, from next-token logits of shape (len(tokens), vocab)
    where row j predicts token j + 1."""
    return next_token_logprob(logits[start - 1:len(tokens) - 1], tokens[start:])


def next_token_logprob(rows, targets: Sequence[int]) -> float:
    """Sum over i of log softmax(rows[i])[targets[i]]: `rows` are the logits that predict each target."""
    import numpy as np

    rows = np.asarray(rows, dtype=np.float64)
    if len(rows) != len(targets):
        raise ValueError(f"{len(rows)} logit rows for {len(targets)} target tokens")
    m = rows.max(axis=1, keepdims=True)
    lse = np.log(np.exp(rows - m).sum(axis=1)) + m[:, 0]
    picked = rows[np.arange(len(rows)), np.asarray(targets)]
    return float((picked - lse).sum())


def fit_score_tokens(ctx: list[int], cont: list[int], limit: int) -> tuple[list[int], list[int]]:
    """Cut (context, continuation) tokens to `limit` in all: the continuation keeps at most half (its start),
    the context its end. Likelihood judges compare short texts, so a cut is rare and never silent to callers
    that check `ScoreResult.tokens`."""
    cont = cont[: max(1, limit // 2)] if len(ctx) + len(cont) > limit else cont
    ctx = ctx[-(limit - len(cont)):] if len(ctx) + len(cont) > limit else ctx
    return ctx, cont


def label_distribution(labels: Sequence[str], scores: Sequence[float]) -> dict[str, float]:
    """Softmax of per-label scores (logits or log-probabilities of each label's first token)."""
    import numpy as np

    z = np.asarray(scores, dtype=np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    return dict(zip(labels, map(float, p)))


def validate_label_request(req: LabelRequest) -> None:
    if len(req.labels) < 2 or len(set(req.labels)) != len(req.labels) or not all(req.labels):
        raise ValueError(f"label request ({req.stage}) needs two or more distinct, non-empty labels: {req.labels}")


def check_schema_bounded(schema: dict[str, Any], path: str = "$") -> None:
    """Small models loop until max_tokens on open-ended schemas: every list and string must be bounded."""
    t = schema.get("type")
    if t == "array":
        if "maxItems" not in schema:
            raise ValueError(f"schema {path}: array without maxItems")
        check_schema_bounded(schema.get("items", {}), path + "[]")
    elif t == "string":
        if "maxLength" not in schema and "enum" not in schema:
            raise ValueError(f"schema {path}: string without maxLength")
    elif t == "object":
        for name, sub in schema.get("properties", {}).items():
            check_schema_bounded(sub, f"{path}.{name}")


def validate_json(data: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """A small validator for the schema subset we emit; returns problems (empty when valid)."""
    problems: list[str] = []
    t = schema.get("type")
    if t == "object":
        if not isinstance(data, dict):
            return [f"{path}: expected object"]
        for name in schema.get("required", []):
            if name not in data:
                problems.append(f"{path}: missing '{name}'")
        for name, sub in schema.get("properties", {}).items():
            if name in data:
                problems += validate_json(data[name], sub, f"{path}.{name}")
    elif t == "array":
        if not isinstance(data, list):
            return [f"{path}: expected array"]
        if len(data) > schema.get("maxItems", len(data)):
            problems.append(f"{path}: more than {schema['maxItems']} items")
        for i, item in enumerate(data):
            problems += validate_json(item, schema.get("items", {}), f"{path}[{i}]")
    elif t == "string":
        if not isinstance(data, str):
            return [f"{path}: expected string"]
        if "enum" in schema and data not in schema["enum"]:
            problems.append(f"{path}: {data!r} not in {schema['enum']}")
    elif t == "integer":
        if not isinstance(data, int) or isinstance(data, bool):
            return [f"{path}: expected integer"]
        if "minimum" in schema and data < schema["minimum"]:
            problems.append(f"{path}: below {schema['minimum']}")
        if "maximum" in schema and data > schema["maximum"]:
            problems.append(f"{path}: above {schema['maximum']}")
    return problems


def parse_json_output(raw: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Parse constrained output strictly: no repair. Raises ValueError naming the problem."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at char {exc.pos}): {raw[:200]!r}") from None
    problems = validate_json(data, schema)
    if problems:
        raise ValueError("; ".join(problems[:5]))
    return data


class Backend(ABC):
    """Base class: subclasses answer batches; `run` dispatches a mixed batch in order."""

    name = "base"

    def label(self, requests: Sequence[LabelRequest]) -> list[LabelResult]:
        for r in requests:
            validate_label_request(r)
        return self.label_batch(list(requests))

    def json(self, requests: Sequence[JsonRequest]) -> list[JsonResult]:
        for r in requests:
            check_schema_bounded(r.schema)
        return self.json_batch(list(requests))

    def text(self, requests: Sequence[TextRequest]) -> list[TextResult]:
        return self.text_batch(list(requests))

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        for r in requests:
            if not r.context or not r.continuation:
                raise ValueError(f"score request ({r.stage}): needs a non-empty context and continuation")
        return self.score_batch(list(requests))

    def run(self, requests: Sequence[LLMRequest]) -> list[Any]:
        """Answer a mixed batch: one batched call per request kind, results in request order."""
        results: list[Any] = [None] * len(requests)
        for kind, method in ((LabelRequest, self.label), (JsonRequest, self.json), (TextRequest, self.text),
                             (ScoreRequest, self.score)):
            idx = [i for i, r in enumerate(requests) if isinstance(r, kind)]
            if idx:
                for i, res in zip(idx, method([requests[i] for i in idx])):
                    results[i] = res
        return results

    @abstractmethod
    def label_batch(self, requests: list[LabelRequest]) -> list[LabelResult]: ...

    @abstractmethod
    def json_batch(self, requests: list[JsonRequest]) -> list[JsonResult]: ...

    @abstractmethod
    def text_batch(self, requests: list[TextRequest]) -> list[TextResult]: ...

    def score_batch(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        raise BackendError(f"the {self.name} backend cannot score text (no prompt log-probabilities); "
                           f"likelihood features (the hybrid judge's lm_* weights, as in configs/cpu.toml) need "
                           f"llamacpp, transformers or vllm; with this backend use a [loom] without lm_* weights "
                           f"(configs/cpu-minilm.toml) or another judge (e.g. --set loom.judge=embedding)")

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` for this model; backends with a tokenizer override this."""
        return max(1, round(len(text.split()) * 1.3))

    def close(self) -> None:
        """Free the model (GPU memory, server connections)."""


class Embedder:
    """The embedder contract (sentence-transformers in embed.py, OpenAI-compatible in backends/openai.py):
    `encode` returns an (n, dim) float32 array of unit vectors."""

    model_name = "base"
    dim = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError
