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


def preflight(cfg: LLMConfig) -> None:
    """The model checks of the backend `cfg` names (Backend.preflight), without loading it: llama.cpp finds the
    GGUF file and reads its magic bytes; openai asks the server for its model list (a short time-out)."""
    if cfg.backend == "llamacpp":
        from .llamacpp import LlamaCppBackend

        LlamaCppBackend.preflight(cfg)
    elif cfg.backend == "openai":
        from .openai import OpenAIBackend

        OpenAIBackend.preflight(cfg)


__all__ = ["Backend", "BackendError", "JsonRequest", "JsonResult", "LabelRequest", "LabelResult", "Prompt",
           "ScoreRequest", "ScoreResult", "StructuredOutputError", "TextRequest", "TextResult", "Usage", "make_backend", "preflight", "BACKENDS"]
