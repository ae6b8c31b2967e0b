"""transformers backend through outlines: a local Hugging Face model folder, or a GGUF file that
transformers can de-quantise (llama, qwen2, ... architectures; needs the `gguf` and `accelerate`
packages), on CPU or GPU (`[llm] device`).

- labels: one batched forward pass (left padding, explicit position ids) and the next-token logits
  of each label's first token, as the llama.cpp backend does: exact and constrained by construction;
  labels that share a first token are generated under an outlines `Literal` constraint instead;
- JSON: `outlines.from_transformers(...).batch(prompts, JsonSchema(schema))`, one call per batch;
- text: the same batch call without a constraint.
outlines returns text only, so completion tokens of JSON and text are counted by re-tokenising the
output (prompt tokens are exact). GGUF weights are de-quantised to float32, so a GGUF model loaded
here is slower and larger in memory than under llama.cpp.

`TransformersAdapter` holds the translation (load arguments, generation arguments, label maths) and
is tested without the engine; `TransformersBackend` is the thin wrapper that owns the model.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..config import LLMConfig
from .base import (Backend, BackendError, JsonRequest, JsonResult, LabelRequest, LabelResult, Prompt, label_distribution,
                   ScoreRequest, ScoreResult, StructuredOutputError, TextRequest, TextResult, Usage,
                   continuation_logprob, fit_score_tokens, parse_json_output)
from .llamacpp import LlamaCppAdapter

INSTALL = 'pip install "transformers>=4.45" "outlines>=1.2" (plus gguf and accelerate for GGUF files), or pip install -e ".[transformers]"'


class TransformersAdapter:
    def __init__(self, cfg: LLMConfig):
        self.cfg = cfg

    @staticmethod
    def load_args(path: Path) -> tuple[str, dict[str, Any]]:
        """from_pretrained arguments: a folder as is; a .gguf file as (its folder, gguf_file=name)."""
        if path.is_file():
            if path.suffix != ".gguf":
                raise BackendError(f"{path}: the transformers backend takes a model folder or a .gguf file")
            return str(path.parent), {"gguf_file": path.name}
        if not (path / "config.json").exists():
            raise BackendError(f"{path}: not a Hugging Face model folder (no config.json)")
        return str(path), {}

    def generate_kwargs(self, max_tokens: int) -> dict[str, Any]:
        if self.cfg.temperature > 0:
            return {"max_new_tokens": max_tokens, "do_sample": True, "temperature": self.cfg.temperature}
        return {"max_new_tokens": max_tokens, "do_sample": False}

    @staticmethod
    def label_probs(logits: np.ndarray, first_tokens: list[int], labels: tuple[str, ...]) -> dict[str, float]:
        return label_distribution(labels, logits[first_tokens])


class TransformersBackend(Backend):
    name = "transformers"

    def __init__(self, cfg: LLMConfig, model_path: str | None = None):
        try:
            import outlines
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise ImportError(f"the transformers backend needs transformers and outlines: {INSTALL}") from None
        from ..weights import resolve_model

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.cfg = cfg
        self.adapter = TransformersAdapter(cfg)
        self.model_path = Path(model_path) if model_path else resolve_model(cfg.model)
        folder, kw = self.adapter.load_args(self.model_path)
        torch.manual_seed(cfg.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(folder, **kw)
        if not self.tokenizer.chat_template:
            raise BackendError(f"{self.model_path}: the tokenizer has no chat template; use a chat/instruct model")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(folder, **kw).to(cfg.device).eval()
        self.om = outlines.from_transformers(self.model, self.tokenizer)
        self._torch = torch

    # ---- helpers ---------------------------------------------------------------------------------
    def format(self, prompt: Prompt) -> str:
        return self.tokenizer.apply_chat_template(prompt.messages(), tokenize=False, add_generation_prompt=True)

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def _next_logits(self, texts: list[str]) -> np.ndarray:
        """Last-position logits of each text, in one left-padded forward pass."""
        torch = self._torch
        self.tokenizer.padding_side = "left"
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.cfg.device)
        pos = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            out = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], position_ids=pos)
        return out.logits[:, -1, :].float().cpu().numpy()

    def _batch(self, prompts: list[str], output_type, max_tokens: int) -> list[str]:
        self.tokenizer.padding_side = "left"
        outs = self.om.batch(prompts, output_type, **self.adapter.generate_kwargs(max_tokens))
        return [o if isinstance(o, str) else o[0] for o in outs]

    def _usage(self, stage: str, prompt_text: str, output: str) -> Usage:
        return Usage(stage, self.count_tokens(prompt_text), self.count_tokens(output))

    # ---- the three request kinds -----------------------------------------------------------------
    def label_batch(self, requests: list[LabelRequest]) -> list[LabelResult]:
        from typing import Literal

        texts = [self.format(r.prompt) for r in requests]
        firsts = [LlamaCppAdapter.label_first_tokens(r.labels, self.tokenize) for r in requests]
        by_logits = [i for i, f in enumerate(firsts) if f is not None]
        logits = self._next_logits([texts[i] for i in by_logits]) if by_logits else None
        results: list[Any] = [None] * len(requests)
        for row, i in enumerate(by_logits):
            req = requests[i]
            probs = self.adapter.label_probs(logits[row], firsts[i], req.labels)
            results[i] = LabelResult(max(probs, key=probs.get), Usage(req.stage, self.count_tokens(texts[i]), 1),
                                     probs if req.logprobs else None)
        for i, req in enumerate(requests):
            if results[i] is not None:
                continue
            if req.logprobs:
                raise BackendError(f"labels {req.labels} share a first token: no label probabilities")
            longest = max(len(self.tokenize(label)) for label in req.labels)
            label = self._batch([texts[i]], Literal[req.labels], longest + 1)[0].strip()
            results[i] = LabelResult(label, self._usage(req.stage, texts[i], label))
        return results

    def json_batch(self, requests: list[JsonRequest]) -> list[JsonResult | StructuredOutputError]:
        from outlines.types import JsonSchema

        texts = [self.format(r.prompt) for r in requests]
        results: list[Any] = [None] * len(requests)
        totals = [Usage(r.stage, 0, 0) for r in requests]
        todo = list(range(len(requests)))
        for _ in range(1 + max(0, self.cfg.max_retries)):
            # one outlines call per distinct (schema, max_tokens): a batch shares one constraint
            groups: dict[tuple[str, int], list[int]] = {}
            for i in todo:
                groups.setdefault((json.dumps(requests[i].schema), requests[i].max_tokens), []).append(i)  # key order = generation order
            failed = []
            for (key, max_tokens), idx in groups.items():
                raws = self._batch([texts[i] for i in idx], JsonSchema(key), max_tokens)
                for i, raw in zip(idx, raws):
                    req, total = requests[i], totals[i]
                    u = self._usage(req.stage, texts[i], raw)
                    total.prompt_tokens += u.prompt_tokens
                    total.completion_tokens += u.completion_tokens
                    try:
                        results[i] = JsonResult(parse_json_output(raw, req.schema), total, raw)
                    except ValueError as exc:
                        hint = " (hit max_tokens)" if u.completion_tokens >= max_tokens else ""
                        results[i] = StructuredOutputError(f"{req.stage}: output did not match the schema{hint}: {exc}",
                                                           raw, total)
                        failed.append(i)
            todo = failed
            if not todo:
                break
        return results

    def text_batch(self, requests: list[TextRequest]) -> list[TextResult]:
        texts = [self.format(r.prompt) for r in requests]
        results: list[Any] = [None] * len(requests)
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.max_tokens, []).append(i)
        for max_tokens, idx in groups.items():
            for i, out in zip(idx, self._batch([texts[i] for i in idx], None, max_tokens)):
                results[i] = TextResult(out.strip(), self._usage(requests[i].stage, texts[i], out))
        return results

    def score_batch(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        """Prompt log-likelihoods, one forward pass per request (no padding to get wrong)."""
        torch = self._torch
        limit = getattr(self.model.config, "max_position_embeddings", 4096)
        results = []
        for req in requests:
            ctx, cont = fit_score_tokens(self.tokenize(req.context), self.tokenize(req.continuation), limit)
            toks = ctx + cont
            with torch.no_grad():
                logits = self.model(input_ids=torch.tensor([toks], device=self.cfg.device)).logits[0]
            lp = continuation_logprob(logits.float().cpu().numpy(), len(ctx), toks)
            results.append(ScoreResult(lp, len(cont), Usage(req.stage, len(toks), 0)))
        return results

    def close(self) -> None:
        model, self.model, self.om = getattr(self, "model", None), None, None
        if model is None:
            return
        del model
        import gc

        gc.collect()
        if self._torch.cuda.is_available():
            self._torch.cuda.empty_cache()
