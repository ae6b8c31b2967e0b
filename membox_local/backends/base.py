"""The one interface every language-model backend implements.

Three kinds of request, each answered in batches: pick one label from a fixed set, produce JSON that
matches a bounded schema, or write free text. Every answer carries its token usage tagged by stage.
Backends subclass `Backend` and implement the three `*_batch` methods; everything else is shared. JSON output
is checked again here (`parse_json_output`, with jsonschema), whatever the engine constrained: every bound of the
schema, and no keys it does not name.
A text request may carry `on_text`, a callback that receives the text as the model writes it (pieces that join to
the text before its final strip); backends that generate token by token (llama.cpp, OpenAI-compatible servers) call
it as they go, the others (vLLM's offline batch, transformers) once with the whole text at the end (`Backend.text`).
A fourth kind, `ScoreRequest` (the log-likelihood of a given text), serves likelihood-based judges; backends
that can read prompt log-probabilities implement `score_batch`, the others refuse it with a BackendError.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

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
    about: str = field(default="", compare=False)  # what it is for, as a progress bar says it ("box 12")


@dataclass(frozen=True)
class TextRequest:
    prompt: Prompt
    stage: str
    max_tokens: int = 64
    # called with each piece of the text as the model writes it (on the thread that runs the model); the pieces join
    # to the text before the result's strip. Usage and the result are the same with it or without it.
    on_text: Callable[[str], None] | None = field(default=None, compare=False, hash=False, repr=False)


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
    prompt_tokens: int  # tokens sent
    completion_tokens: int
    # of prompt_tokens, those the engine did not read again: a prefix still in its KV cache from an earlier call
    # (llama.cpp) or a prompt cache the server reports (OpenAI's cached_tokens); None: the backend does not say
    cached_tokens: int | None = None


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


class PromptTooLong(BackendError):
    """The prompt and the tokens asked for do not fit the model's context window: the same request fails the same
    way on every retry, so a caller shortens the prompt (Loom.extract) instead. `tokens` and `limit` in model tokens
    (tokens None where the server did not say)."""

    def __init__(self, message: str, tokens: int | None = None, limit: int | None = None):
        super().__init__(message)
        self.tokens, self.limit = tokens, limit


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


def closed_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of `schema` with `additionalProperties: false` on every object that does not set it: our schemas
    list every field a record has, so a key they do not name is an error. Used only to check output; the grammar
    (llama.cpp), the strict schema (OpenAI: openai.strict_schema) and vLLM's constraint get the schema as it is."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if not isinstance(node, dict):
            return
        if node.get("type") == "object" or "properties" in node:
            node.setdefault("additionalProperties", False)
        for key in ("properties", "patternProperties", "$defs", "definitions"):
            for sub in (node.get(key) or {}).values():
                walk(sub)
        for key in ("items", "additionalProperties", "contains", "not"):
            walk(node.get(key))
        for key in ("prefixItems", "anyOf", "oneOf", "allOf"):
            for sub in node.get(key) or ():
                walk(sub)

    walk(out)
    return out


@functools.lru_cache(maxsize=1)
def _validator_class() -> type:
    """jsonschema's Draft 2020-12 validator, where "integer" means an integer as Python reads JSON (1, not 1.0):
    the pipeline indexes lists with these numbers."""
    from jsonschema import Draft202012Validator, validators

    checker = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool))
    return validators.extend(Draft202012Validator, type_checker=checker)


def _validator(schema: dict[str, Any]):
    """A validator for the closed copy of `schema`, cached by the schema's text. The schema itself is checked
    first: a malformed one fails here, naming the problem, and never lets output through."""
    return _validator_for(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=512)
def _validator_for(schema_text: str):
    from jsonschema.exceptions import SchemaError

    cls = _validator_class()
    closed = closed_schema(json.loads(schema_text))
    try:
        cls.check_schema(closed)
    except SchemaError as exc:
        raise ValueError(f"invalid output schema at {'/'.join(map(str, exc.path)) or 'its top'}: "
                         f"{exc.message}") from None
    return cls(closed)


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
               (dict, "object"), (type(None), "null"))


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def _problem(error, root: str = "$") -> str:
    """One line for one jsonschema error: the failing path ($.events[2]) and the bound it breaks."""
    path = root + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    kw, bound, value = error.validator, error.validator_value, error.instance
    if kw == "maxLength":
        return f"{path}: {len(value)} characters, more than maxLength {bound}"
    if kw == "minLength":
        return f"{path}: {len(value)} characters, fewer than minLength {bound}"
    if kw == "maxItems":
        return f"{path}: {len(value)} items, more than maxItems {bound}"
    if kw == "minItems":
        return f"{path}: {len(value)} items, fewer than minItems {bound}"
    if kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{path}: {_short(value)} is out of range ({kw} {bound})"
    if kw == "enum":
        return f"{path}: {_short(value)} is not one of {_short(bound, 80)}"
    if kw == "type":
        got = next(name for t, name in _JSON_TYPES if isinstance(value, t))
        return f"{path}: expected {bound if isinstance(bound, str) else ' or '.join(bound)}, got {got} {_short(value)}"
    if kw == "required":  # one error per missing key, each naming them all (deduplicated by validate_json)
        missing = [name for name in bound if isinstance(value, dict) and name not in value]
        return f"{path}: missing required {', '.join(repr(m) for m in missing)}"
    if kw == "additionalProperties":
        extra = sorted(k for k in value if k not in error.schema.get("properties", {}))
        return f"{path}: unexpected key(s) {', '.join(repr(k) for k in extra)} (the schema allows no others)"
    return f"{path}: {' '.join(error.message.split())[:160]}"


def validate_json(data: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Check `data` against `schema` with jsonschema, every bound enforced (types, required, maxLength, maxItems,
    minimum/maximum, enum) and objects closed (closed_schema); returns one line per problem, empty when valid."""
    errors = sorted(_validator(schema).iter_errors(data),  # by path; at one path, a wrong type first
                    key=lambda e: (list(map(str, e.absolute_path)), e.validator != "type", str(e.validator)))
    return list(dict.fromkeys(_problem(e, path) for e in errors))


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_json_output(raw: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Parse constrained output strictly: no repair. Raises ValueError with one line naming the failing path
    and bound (callers prefix the stage)."""
    try:
        data = json.loads(raw, parse_constant=_no_constant)  # NaN and Infinity are not JSON
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at char {exc.pos}): {raw[:200]!r}") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc}): {raw[:200]!r}") from None
    problems = validate_json(data, schema)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ValueError("; ".join(problems[:5]) + more)
    return data


class _Told:
    """A request's `on_text`, noting whether the backend called it."""

    def __init__(self, on_text: Callable[[str], None]):
        self.on_text, self.called = on_text, False

    def __call__(self, piece: str) -> None:
        self.called = True
        self.on_text(piece)


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
            _validator(r.schema)  # a malformed schema fails here, before any model call
        return self.json_batch(list(requests))

    def text(self, requests: Sequence[TextRequest]) -> list[TextResult]:
        """Answer text requests. A request's `on_text` that the backend never called (it cannot stream: vLLM's
        offline batch, transformers; or the model wrote nothing) gets the whole text once, at the end."""
        told = [_Told(r.on_text) if r.on_text is not None else None for r in requests]
        results = self.text_batch([dataclasses.replace(r, on_text=t) if t else r for r, t in zip(requests, told)])
        for t, res in zip(told, results):
            if t is not None and not t.called and isinstance(res, TextResult) and res.text:
                t(res.text)
        return results

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

    @classmethod
    def preflight(cls, cfg) -> None:
        """Check, cheaply and without loading the model, that the backend the config ([llm]) describes can work:
        the model is there and is one, the server answers. Raises one clear error (ModelNotFound, BackendError,
        ConfigError). `Memory.add` and `membox build` call it before the first message is filed."""

    def prepare(self, stages: Sequence[str]) -> None:
        """Allocate now what the first generation of each of these stages would allocate (in the order a build
        first sends them): a long-running server calls it at start, so that its resident memory after start-up
        grows only with the data it holds. Nothing to do for most backends."""

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

    def make_resident(self) -> None:
        """Bring the model's weights into memory now (a long-running server, at start): nothing to do where no
        weights are held here (a remote embedder)."""
