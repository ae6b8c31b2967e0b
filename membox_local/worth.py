"""What a record keeps of its lines ([extract] keep_model): a logistic model over a sentence's MiniLM vector and three
counts (words, content words, a question mark) that says how likely the sentence is to be what a later question
needs. Under [extract] events = "lines" a line's sentences below the model's threshold make no event: greetings,
thanks, agreement and reactions stay in the messages (retrieval reads every message) and leave the record.

Fitted on LoCoMo dev's evidence lines, cross-validated by conversation, by `membox fit keeping` (fit/keeping.py), which
also chooses the threshold: the highest at which at least 95% of the evidence lines keep a sentence in the record, out
of fold. The file is JSON: embedder, weights (the vector's, then FEATURES'), bias, threshold, and how it was fitted.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from .config import CONFIG_DIR, ConfigError
from .grounding import content_words

FEATURES = ("log_words", "log_content_words", "question")
SENTENCE = re.compile(r"(?<=[.!?])\s+")  # where a line's sentences end (attribution.py cuts them here too)


def line_sentences(text: str) -> list[str]:
    """A line's sentences, as attribution.line_pieces cuts them (after [.!?] and a space)."""
    return [s for s in SENTENCE.split(" ".join(text.split())) if s]


def flat(split: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """Lines' sentences one after another (what is embedded for `KeepModel.kept_per_line`)."""
    return tuple(x for sentences in split for x in sentences)


def counts(texts: Sequence[str]) -> np.ndarray:
    """FEATURES of each text, in that order."""
    return np.array([[np.log1p(len(t.split())), np.log1p(len(content_words(t))), float(t.rstrip().endswith("?"))]
                     for t in texts], dtype=np.float64).reshape(len(texts), len(FEATURES))


def features(texts: Sequence[str], vectors: np.ndarray) -> np.ndarray:
    """The model's inputs: each text's vector, then its counts."""
    return np.hstack([np.asarray(vectors, dtype=np.float64).reshape(len(texts), -1), counts(texts)])


class KeepModel:
    def __init__(self, weights: Sequence[float], bias: float, threshold: float, embedder: str, meta: dict | None = None):
        self.weights, self.bias = np.asarray(weights, dtype=np.float64), float(bias)
        self.threshold, self.embedder, self.meta = float(threshold), embedder, meta or {}

    def scores(self, texts: Sequence[str], vectors: np.ndarray) -> np.ndarray:
        """Each text's probability of being worth keeping."""
        if not len(texts):
            return np.zeros(0)
        x = features(texts, vectors)
        if x.shape[1] != len(self.weights):
            raise ConfigError(f"[extract] keep_model: fitted on {len(self.weights) - len(FEATURES)}-d vectors, the "
                              f"embedder gives {x.shape[1] - len(FEATURES)}-d ones")
        return 1.0 / (1.0 + np.exp(-(x @ self.weights + self.bias)))

    def kept(self, texts: Sequence[str], vectors: np.ndarray) -> list[bool]:
        return [bool(p >= self.threshold) for p in self.scores(texts, vectors)]

    def kept_per_line(self, split: Sequence[Sequence[str]], vectors) -> list[list[bool]]:
        """`kept` for lines' sentences (`split`: each line's, as `line_sentences` cuts them), given the vectors of
        all of them in order (`flat(split)`; None where there are none), as one list of flags per line."""
        flags = iter(self.kept(flat(split), vectors) if vectors is not None else [])
        return [[next(flags) for _ in sentences] for sentences in split]

    def to_json(self) -> dict:
        return {**self.meta, "embedder": self.embedder, "features": ["vector", *FEATURES],
                "weights": [round(float(w), 6) for w in self.weights], "bias": round(self.bias, 6),
                "threshold": self.threshold}


def resolve_keep_model(name: str) -> Path:
    """The keep model's file: absolute, or relative to the package's configs/ (then the working directory)."""
    p = Path(name)
    for c in ([p] if p.is_absolute() else [CONFIG_DIR / p, p]):
        if c.is_file():
            return c
    raise ConfigError(f"[extract] keep_model: {name!r} not found (looked in {CONFIG_DIR} and the working directory)")


@lru_cache(maxsize=4)
def load_keep_model(name: str, embedder: str) -> KeepModel:
    """The file's model, refused when it was fitted for another embedder (one ConfigError line)."""
    path = resolve_keep_model(name)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        model = KeepModel(data["weights"], data["bias"], data["threshold"], data["embedder"],
                          {k: v for k, v in data.items() if k not in ("weights", "bias", "threshold", "embedder")})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"[extract] keep_model: {path} is not a keep model file ({type(e).__name__}: {e})") from None
    if model.embedder != embedder:
        raise ConfigError(f"[extract] keep_model: {path.name} was fitted for the embedder {model.embedder!r}, the "
                          f"config uses {embedder!r}: fit one for it (`membox fit keeping`) or set keep_model = \"\"")
    return model
