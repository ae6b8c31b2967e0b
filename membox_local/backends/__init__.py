"""Language-model backends behind one interface (see base.py). Heavy imports happen on construction."""
from __future__ import annotations

from ..config import LLM_BACKENDS as BACKENDS  # the names a config accepts
from ..config import LLMConfig
from .base import (Backend, BackendError, JsonRequest, JsonResult, LabelRequest, LabelResult, Prompt, ScoreRequest,
                   ScoreResult, StructuredOutputError, TextRequest, TextResult, Usage)


def make_backend(cfg: LLMConfig) -> Backend:
    if cfg.backend == "llamacpp":
        from .llamacpp import LlamaCppBackend

        return LlamaCppBackend(cfg)
    if cfg.backend == "openai":
        from .openai import OpenAIBackend

        return OpenAIBackend(cfg)
    if cfg.backend == "vllm":
        from .vllm import VLLMBackend

        return VLLMBackend(cfg)
    if cfg.backend == "transformers":
        from .transformers import TransformersBackend

        return TransformersBackend(cfg)
    raise ValueError(f"unknown LLM backend '{cfg.backend}'; choose one of {BACKENDS}")


__all__ = ["Backend", "BackendError", "JsonRequest", "JsonResult", "LabelRequest", "LabelResult", "Prompt",
           "ScoreRequest", "ScoreResult", "StructuredOutputError", "TextRequest", "TextResult", "Usage", "make_backend", "BACKENDS"]
