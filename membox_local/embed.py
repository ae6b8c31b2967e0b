"""Sentence embeddings, normalised, with a per-store cache so no text is embedded twice."""
from __future__ import annotations

import os

import numpy as np

from .backends.base import Embedder
from .config import EmbedderConfig
from .native import onednn_off
from .store import Store, text_key


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model folder. A mean-pooled, normalised BERT (the shipped all-MiniLM-L6-v2) runs in
    plain torch (minilm.py: the same vectors within 1e-6, without the 6.5 s of importing sentence-transformers and
    transformers on a cold `membox ask`); any other folder is read by sentence-transformers itself."""

    def __init__(self, cfg: EmbedderConfig):
        from .weights import resolve_model

        path = resolve_model(cfg.model)
        self.model_name, self.batch_size = cfg.model, cfg.batch_size
        self.model = self.lean = None
        if cfg.device == "cpu":
            from . import minilm

            try:
                self.lean = minilm.SentenceEncoder(path)
            except ValueError:  # not a mean-pooled, normalised BERT: sentence-transformers reads it
                self.lean = None
        if self.lean is not None:
            self.dim = self.lean.dim
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        # transformers draws a "Loading weights" bar of its own, even under `--quiet`: a local file loads in
        # milliseconds, and the command line's bar says what is going on
        hf_logging.disable_progress_bar()
        self.model = SentenceTransformer(str(path), device=cfg.device)
        dim_of = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim_of())

    def parameters(self):
        return (self.lean.model if self.lean is not None else self.model).parameters()

    def make_resident(self) -> None:
        """Read every weight once. safetensors maps the weights file, so a page of the word-embedding table becomes
        resident only when a text first uses one of its words: a server's resident memory would grow with the
        vocabulary it meets, up to the whole table (30,522 words x 384 floats, 47 MB). Read at start, the pages are
        there from then on (file-backed, shared with every process mapping the file; tests/test_native.py)."""
        import torch

        with torch.no_grad():
            for weight in self.parameters():
                weight.sum()

    def encode(self, texts):
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with onednn_off():  # no native state kept per input shape (native.py)
            if self.lean is not None:
                return self.lean.encode(list(texts), self.batch_size)
            vecs = self.model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
        return vecs.astype(np.float32)


class CachedEmbedder(Embedder):
    """Looks texts up in the store first; embeds only the unseen ones, once each, in one batch."""

    def __init__(self, inner: Embedder, store: Store):
        self.inner, self.store = inner, store
        self.model_name, self.dim = inner.model_name, inner.dim
        self.computed = 0

    def encode(self, texts):
        texts = list(texts)
        cached = self.store.cached_vectors(self.model_name, texts)
        missing = list(dict.fromkeys(t for t in texts if text_key(t) not in cached))
        if missing:
            vecs = self.inner.encode(missing)
            self.store.put_vectors(self.model_name, missing, vecs)
            cached.update({text_key(t): v for t, v in zip(missing, vecs)})
            self.computed += len(missing)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([cached[text_key(t)] for t in texts]).astype(np.float32)


def make_embedder(cfg: EmbedderConfig) -> Embedder:
    if cfg.backend == "sentence-transformers":
        return SentenceTransformerEmbedder(cfg)
    if cfg.backend == "openai":
        from .backends.openai import OpenAIEmbedder

        return OpenAIEmbedder(cfg)
    raise ValueError(f"unknown embedder backend '{cfg.backend}'; choose sentence-transformers or openai")
