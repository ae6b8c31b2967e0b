"""OpenAI-compatible backend: chat completions over HTTP (OpenAI, vLLM serve, llama.cpp server, ...).

- labels: structured output with a JSON schema whose one field is an enum of the labels
  ({"label": "yes"}); with `LabelRequest.logprobs`, the top log-probabilities of the first token of the
  label value give the label probabilities (labels outside the returned top list get 0);
- JSON: `response_format` json_schema, strict, with `additionalProperties: false` added to every object;
  the output is still parsed and validated here (a server may ignore keywords such as maxLength).
  llama-cpp-python's server ignores json_schema (it constrains only {"type": "json_object", "schema":
  ...}): set `[llm] response_format = "json_object"` for it. A label that comes back outside the
  label set fails loudly, so an ignored constraint never passes silently;
- text: plain completion.
A batch runs as concurrent requests, at most `cfg.max_concurrency` at once (a thread pool). Requests
that fail on 429, 5xx, time-outs or a dropped connection are retried with exponential backoff, a
bounded number of times; any other error (bad key, bad model name, schema rejected) fails at once and
names the stage and the server's message.

Settings: `cfg.model` is the served model name; `cfg.extra_body` adds server-specific request fields
(e.g. `{repeat_penalty = 1.0}` for llama-cpp-python, whose default is 1.1); `cfg.base_url` (or OPENAI_BASE_URL) the server; the key
is read from the variable named by `cfg.api_key_env` (default OPENAI_API_KEY). Local servers that need
no key get a placeholder. A plain http:// base_url to another machine is refused (the text would cross the network
unencrypted) unless `cfg.allow_insecure_http`; https:// and http://localhost need nothing.

`OpenAIAdapter` builds the request bodies and reads responses (tested without a server);
`OpenAIBackend` is the thin wrapper that sends them.
"""
from __future__ import annotations

import copy
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np

from ..config import ConfigError, EmbedderConfig, LLMConfig
from .base import (Backend, BackendError, Embedder, JsonRequest, JsonResult, LabelRequest, LabelResult, Prompt,
                   PromptTooLong, StructuredOutputError, TextRequest, TextResult, Usage, parse_json_output)

INSTALL = 'pip install "openai>=1.40"  (or: pip install -e ".[openai]")'
TOP_LOGPROBS = 20  # the most the OpenAI API returns per token
PREFLIGHT_TIMEOUT_S = 5.0  # the longest OpenAIBackend.preflight waits for the server's model list


LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def check_base_url(url: str | None, allow_insecure_http: bool, section: str = "llm", from_env: bool = False) -> None:
    """Refuse plain http:// to another machine: the conversation text and the API key would cross the network
    unencrypted. https://, and http:// to this machine, pass; so does anything with `allow_insecure_http`. A
    ConfigError, so that `membox` prints it as its one `error:` line."""
    from urllib.parse import urlsplit

    if not url or allow_insecure_http:
        return
    parts = urlsplit(url.strip())
    if parts.scheme.lower() == "http" and (parts.hostname or "").lower() not in LOCAL_HOSTS:
        where = f"$OPENAI_BASE_URL (used by [{section}])" if from_env else f"[{section}] base_url"
        raise ConfigError(f"{where} {url!r} is plain http to another machine: conversation text and key would "
                           f"cross the network unencrypted; use https://, a server on localhost, or set "
                           f"[{section}] allow_insecure_http = true")


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of `schema` as strict mode wants it: closed objects, every property required."""
    out = copy.deepcopy(schema)

    def walk(node: dict[str, Any]) -> None:
        if node.get("type") == "object":
            node["additionalProperties"] = False
            node["required"] = list(node.get("properties", {}))
            for sub in node.get("properties", {}).values():
                walk(sub)
        elif node.get("type") == "array":
            walk(node.get("items", {}))

    walk(out)
    return out


def label_schema(labels: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": {"label": {"type": "string", "enum": list(labels)}},
            "required": ["label"], "additionalProperties": False}


class OpenAIAdapter:
    """Pure translation: requests to chat-completion bodies, responses to results."""

    def __init__(self, cfg: LLMConfig, model: str):
        self.cfg = cfg
        self.model = model

    FORMATS = ("json_schema", "json_object")

    def _body(self, prompt: Prompt, max_tokens: int) -> dict[str, Any]:
        body = {"model": self.model, "messages": prompt.messages(), "max_tokens": max_tokens,
                "temperature": self.cfg.temperature, "seed": self.cfg.seed}
        if self.cfg.extra_body:  # server-specific fields travel in the JSON body, not as client arguments
            body["extra_body"] = dict(self.cfg.extra_body)
        return body

    def _format(self, name: str, schema: dict[str, Any]) -> dict[str, Any]:
        kind = self.cfg.response_format
        if kind == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}
        if kind == "json_object":  # llama-cpp-python's server constrains only this form
            return {"type": "json_object", "schema": schema}
        raise ValueError(f"[llm] response_format = {kind!r}; choose one of {self.FORMATS}")

    def label_body(self, req: LabelRequest) -> dict[str, Any]:
        longest = max(len(label) for label in req.labels)
        body = self._body(req.prompt, 16 + longest)  # {"label": "..."} in any tokenizer
        body["response_format"] = self._format("label", label_schema(req.labels))
        if req.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = TOP_LOGPROBS
        return body

    def json_body(self, req: JsonRequest) -> dict[str, Any]:
        body = self._body(req.prompt, req.max_tokens)
        body["response_format"] = self._format(req.stage or "record", strict_schema(req.schema))
        return body

    def text_body(self, req: TextRequest) -> dict[str, Any]:
        body = self._body(req.prompt, req.max_tokens)
        if req.on_text is not None:  # Server-Sent Events; usage in a last chunk where the server honours stream_options
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def read_stream(self, chunks, req: TextRequest, count_tokens: Callable[[str], int]) -> tuple[str, Usage]:
        """The text of a streamed answer, each piece handed to `req.on_text` as it arrives, and its usage: the
        server's (the chunk that carries it, asked for with stream_options.include_usage). A server that sends none
        (one that ignores stream_options) still gets its call recorded: the tokens are then counted here, as
        `count_tokens` counts them (the backend's estimate), and cached_tokens left unknown (None)."""
        pieces: list[str] = []
        usage = None
        for chunk in chunks:
            if getattr(chunk, "usage", None) is not None:
                usage = self.usage(chunk, req.stage)
            for choice in chunk.choices or ():
                piece = getattr(choice.delta, "content", None) if choice.delta is not None else None
                if piece:
                    pieces.append(piece)
                    req.on_text(piece)
        text = "".join(pieces)
        if usage is None:
            usage = Usage(req.stage, count_tokens(req.prompt.system + "\n" + req.prompt.user),
                          count_tokens(text) if text else 0)
        return text, usage

    # ---- reading responses --------------------------------------------------------------------
    @staticmethod
    def content(resp: Any) -> tuple[str, str]:
        choice = resp.choices[0]
        return choice.message.content or "", choice.finish_reason or ""

    @staticmethod
    def usage(resp: Any, stage: str) -> Usage:
        u = resp.usage
        if u is None:
            raise BackendError(f"{stage}: the server returned no token usage; it is required for accounting")
        details = getattr(u, "prompt_tokens_details", None)  # a server's prompt cache, when it reports one
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        return Usage(stage, int(u.prompt_tokens), int(u.completion_tokens), None if cached is None else int(cached))

    @staticmethod
    def label_probs(resp: Any, labels: Sequence[str]) -> dict[str, float]:
        """Label probabilities from the top log-probabilities where the label value starts.

        Walks the generated tokens until their text reaches the opening quote of the value; that
        position's top tokens are matched to the labels they begin (a token that begins two labels
        counts for neither). Probabilities are renormalised over the labels.
        """
        lp = resp.choices[0].logprobs
        tokens = getattr(lp, "content", None) if lp is not None else None
        if not tokens:
            raise BackendError("the server returned no log-probabilities; it does not support label probabilities")
        prefix, seen = '{"label":"', ""
        for tok in tokens:
            seen += tok.token
            head = seen.replace(" ", "")
            if head.startswith(prefix) and len(head) > len(prefix):
                break  # this token holds the first character of the value
        else:
            raise BackendError(f"could not find the label value in the output {seen!r}")
        mass = {label: 0.0 for label in labels}
        for cand in tok.top_logprobs or []:
            text = cand.token.lstrip('" ')
            hits = [label for label in labels if text and label.startswith(text)]
            if len(hits) == 1:
                mass[hits[0]] += math.exp(cand.logprob)
        total = sum(mass.values())
        if total <= 0:
            raise BackendError(f"none of the labels {tuple(labels)} is among the top {TOP_LOGPROBS} tokens")
        return {label: p / total for label, p in mass.items()}


def _transient_errors():
    import openai

    return (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
            openai.APIConnectionError)


class OpenAIBackend(Backend):
    name = "openai"

    @classmethod
    def preflight(cls, cfg: LLMConfig) -> None:
        """One cheap request (the model list), with a short time-out and no retry: a server that does not answer,
        or refuses the key, is one error line naming base_url before anything is filed. A server without a model
        list (HTTP 404 there) answered, and passes."""
        try:
            import openai
        except ImportError:
            raise BackendError(f"the openai backend needs the openai package: {INSTALL}") from None
        base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL") or None
        check_base_url(base_url, cfg.allow_insecure_http, "llm", from_env=not cfg.base_url)
        key = os.environ.get(cfg.api_key_env or "OPENAI_API_KEY")
        if not key and base_url is None:
            raise BackendError(f"the openai backend needs an API key in ${cfg.api_key_env}, "
                               f"or llm.base_url pointing at a local OpenAI-compatible server")
        where = f"[llm] base_url {base_url}" if cfg.base_url else \
            (f"$OPENAI_BASE_URL {base_url}" if base_url else "the OpenAI API (no [llm] base_url)")
        client = openai.OpenAI(api_key=key or "not-needed", base_url=base_url,
                               timeout=min(cfg.timeout_s, PREFLIGHT_TIMEOUT_S), max_retries=0)
        try:
            client.models.list()
        except openai.APITimeoutError:
            raise BackendError(f"{where}: the server did not answer within "
                               f"{min(cfg.timeout_s, PREFLIGHT_TIMEOUT_S):g} s; is it running?") from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise BackendError(f"{where}: no OpenAI-compatible server answers there ({type(cause).__name__}: "
                               f"{' '.join(str(cause).split())[:160]}); start it, or fix base_url") from None
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise BackendError(f"{where}: the server refused the key in ${cfg.api_key_env} "
                                   f"(HTTP {exc.status_code}): {exc.message}") from None
            if exc.status_code >= 500:
                raise BackendError(f"{where}: the server failed (HTTP {exc.status_code}): {exc.message}") from None
        finally:
            client.close()

    def __init__(self, cfg: LLMConfig, client: Any = None):
        try:
            import openai
        except ImportError:
            raise ImportError(f"the openai backend needs the openai package: {INSTALL}") from None
        self.cfg = cfg
        self.adapter = OpenAIAdapter(cfg, cfg.model)
        self.retries = 4  # attempts after the first, on 429 / 5xx / time-out / connection errors
        self.backoff_s = 0.5  # first wait; doubles each retry
        self.sleep: Callable[[float], None] = time.sleep
        if client is None:
            base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL") or None
            check_base_url(base_url, cfg.allow_insecure_http, "llm", from_env=not cfg.base_url)
            key = os.environ.get(cfg.api_key_env or "OPENAI_API_KEY")
            if not key:
                if base_url is None:
                    raise BackendError(f"the openai backend needs an API key in ${cfg.api_key_env}, "
                                       f"or llm.base_url pointing at a local OpenAI-compatible server")
                key = "not-needed"  # local servers accept any key
            client = openai.OpenAI(api_key=key, base_url=base_url, timeout=cfg.timeout_s, max_retries=0)
        self.client = client
        self._pool = ThreadPoolExecutor(max_workers=max(1, cfg.max_concurrency))

    # ---- one request, with retries --------------------------------------------------------------
    def _create(self, body: dict[str, Any], stage: str) -> Any:
        import openai

        transient = _transient_errors()
        for attempt in range(self.retries + 1):
            try:
                return self.client.chat.completions.create(**body)
            except transient as exc:
                if attempt == self.retries:
                    raise BackendError(f"{stage}: the server kept failing after {attempt + 1} attempts "
                                       f"({type(exc).__name__}: {exc})") from exc
                self.sleep(self.backoff_s * 2 ** attempt)
            except openai.APIStatusError as exc:
                if _context_overflow(exc):  # the caller shortens the prompt (Loom.extract); a retry would fail too
                    raise PromptTooLong(f"{stage}: the prompt is too long for the server's model: "
                                        f"{exc.message}") from exc
                raise BackendError(f"{stage}: the server refused the request (HTTP {exc.status_code}): "
                                   f"{exc.message}") from exc
        raise AssertionError("unreachable")

    def _map(self, fn, requests: list) -> list:
        return list(self._pool.map(fn, requests))

    # ---- the three request kinds -----------------------------------------------------------------
    def label_batch(self, requests: list[LabelRequest]) -> list[LabelResult]:
        def one(req: LabelRequest) -> LabelResult:
            resp = self._create(self.adapter.label_body(req), req.stage)
            raw, _ = self.adapter.content(resp)
            usage = self.adapter.usage(resp, req.stage)
            try:
                label = parse_json_output(raw, label_schema(req.labels))["label"]
            except ValueError as exc:
                raise BackendError(f"{req.stage}: the server ignored the label schema: {exc}") from None
            probs = self.adapter.label_probs(resp, req.labels) if req.logprobs else None
            return LabelResult(label, usage, probs)

        return self._map(one, requests)

    def json_batch(self, requests: list[JsonRequest]) -> list[JsonResult | StructuredOutputError]:
        def one(req: JsonRequest) -> JsonResult | StructuredOutputError:
            total = Usage(req.stage, 0, 0)
            error: StructuredOutputError | None = None
            for _ in range(1 + max(0, self.cfg.max_retries)):
                resp = self._create(self.adapter.json_body(req), req.stage)
                raw, finish = self.adapter.content(resp)
                u = self.adapter.usage(resp, req.stage)
                total.prompt_tokens += u.prompt_tokens
                total.completion_tokens += u.completion_tokens
                if u.cached_tokens is not None:
                    total.cached_tokens = (total.cached_tokens or 0) + u.cached_tokens
                try:
                    return JsonResult(parse_json_output(raw, req.schema), total, raw)
                except ValueError as exc:
                    hint = " (hit max_tokens)" if finish == "length" else ""
                    error = StructuredOutputError(f"{req.stage}: output did not match the schema{hint}: {exc}",
                                                  raw, total)
            return error

        return self._map(one, requests)

    def text_batch(self, requests: list[TextRequest]) -> list[TextResult]:
        def one(req: TextRequest) -> TextResult:
            resp = self._create(self.adapter.text_body(req), req.stage)
            if req.on_text is not None:
                text, usage = self._read_stream(resp, req)
                return TextResult(text.strip(), usage)
            text, _ = self.adapter.content(resp)
            return TextResult(text.strip(), self.adapter.usage(resp, req.stage))

        return self._map(one, requests)

    def _read_stream(self, resp, req: TextRequest) -> tuple[str, Usage]:
        """A streamed answer read to its end (the request was retried until the server answered; a failure once
        the text flows is not retried: part of it was handed over)."""
        import openai

        try:
            return self.adapter.read_stream(resp, req, self.count_tokens)
        except Exception as exc:
            # the client's errors, and its HTTP library's (httpx, under whatever name the client imports it); an
            # error of on_text (the caller's) is raised as it is
            if isinstance(exc, openai.APIError) or type(exc).__module__.startswith("httpx"):
                raise BackendError(f"{req.stage}: the server's stream broke off ({type(exc).__name__}: "
                                   f"{exc})") from exc
            raise
        finally:
            close = getattr(resp, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        close = getattr(self.client, "close", None)
        if close is not None:
            close()


class OpenAIEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible /v1/embeddings endpoint, unit-normalised."""

    def __init__(self, cfg: EmbedderConfig, client: Any = None, base_url: str = "", api_key_env: str = "OPENAI_API_KEY"):
        try:
            import openai
        except ImportError:
            raise ImportError(f"the openai embedder needs the openai package: {INSTALL}") from None
        if client is None:
            url = base_url or os.environ.get("OPENAI_BASE_URL") or None
            check_base_url(url, cfg.allow_insecure_http, "embedder", from_env=not base_url)
            key = os.environ.get(api_key_env)
            if not key and url is None:
                raise BackendError(f"the openai embedder needs an API key in ${api_key_env} or OPENAI_BASE_URL")
            client = openai.OpenAI(api_key=key or "not-needed", base_url=url, max_retries=3)
        self.client = client
        self.model_name = cfg.model
        self.batch_size = cfg.batch_size
        self.dim = len(self._embed(["dimension probe"])[0])

    def _embed(self, texts: list[str]) -> np.ndarray:
        resp = self.client.embeddings.create(model=self.model_name, input=texts)
        rows = sorted(resp.data, key=lambda d: d.index)
        vecs = np.asarray([r.embedding for r in rows], dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.where(norms == 0, 1.0, norms)

    def encode(self, texts):
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate([self._embed(texts[i:i + self.batch_size])
                               for i in range(0, len(texts), self.batch_size)])


def _context_overflow(exc) -> bool:
    """A 400 saying the prompt does not fit the model's context: OpenAI's error code, or vLLM's and llama.cpp's
    servers' wording."""
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    err = body["error"] if isinstance(body.get("error"), dict) else body
    code = err.get("code")
    text = str(getattr(exc, "message", "")).lower()
    return exc.status_code == 400 and (code == "context_length_exceeded" or "maximum context length" in text
                                       or "exceeds the available context size" in text)
