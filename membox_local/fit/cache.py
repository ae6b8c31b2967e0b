"""The fits' caches and batch scoring: embedding vectors computed once per text (runs/segmentation/vectors.npz),
LLM scores kept in a committed, text-free file (benchmarks/cache/lm-scores-<backend>-<model>.tsv) so that a
rerun does not spend hours re-scoring, and the order in which a batch asks the judge's score requests so that
the llama.cpp scorer reuses each prefix.

What a cache misses is computed by the config's own models, made by `MODELS` at the first miss; tests put the
doubles of membox_local.testing there.
"""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import numpy as np

from ..backends.base import Backend, Embedder, ScoreRequest, ScoreResult, Usage
from ..config import Config
from ..judges import likelihood_features

DEFAULT_CACHE_DIR = Path("benchmarks") / "cache"  # relative to the working directory: a checkout's root


def config_embedder(cfg: Config) -> Embedder:
    from ..embed import make_embedder

    return make_embedder(cfg.embedder)


def config_backend(cfg: Config) -> Backend:
    from ..backends import make_backend

    return make_backend(cfg.llm)


MODELS = {"embedder": config_embedder, "backend": config_backend}
_MADE: dict[tuple, Backend] = {}


def config_model(cfg: Config) -> Backend:
    """The config's LLM for online runs that have no score cache (e.g. a MiniLM-only candidate of a config whose
    switch rule reads the PMI), made by `MODELS` once per LLM setting and kept for the process."""
    key = (MODELS["backend"], repr(cfg.llm))
    if key not in _MADE:
        _MADE[key] = MODELS["backend"](cfg)
    return _MADE[key]


def score_cache_path(cfg: Config, folder: str | Path = DEFAULT_CACHE_DIR) -> Path:
    return Path(folder) / f"lm-scores-{cfg.llm.backend}-{cfg.llm.model}.tsv"


class LookupEmbedder(Embedder):
    """Vectors computed once for every text of a fit and kept in `cache`; unknown texts go to the config's
    embedder (`MODELS`)."""

    def __init__(self, cfg: Config, texts: list[str], cache: Path):
        self.cfg = cfg
        self.table: dict[str, np.ndarray] = {}
        self._model = None
        if cache.exists():
            z = np.load(cache, allow_pickle=False)
            if str(z["model"]) == cfg.embedder.model:
                self.table = dict(zip(z["texts"].tolist(), z["vecs"]))
        missing = sorted(set(texts) - set(self.table))
        if missing:
            t0 = time.time()
            vecs = self.model.encode(missing)
            print(f"embedded {len(missing)} texts in {time.time() - t0:.0f}s", file=sys.stderr)
            self.table.update(zip(missing, vecs))
            cache.parent.mkdir(parents=True, exist_ok=True)
            keys = list(self.table)
            np.savez(cache, model=cfg.embedder.model, texts=np.array(keys), vecs=np.stack([self.table[k] for k in keys]))
        self.model_name = cfg.embedder.model
        self.dim = len(next(iter(self.table.values())))

    @property
    def model(self) -> Embedder:
        if self._model is None:
            self._model = MODELS["embedder"](self.cfg)
        return self._model

    def encode(self, texts):
        missing = [t for t in texts if t not in self.table]
        if missing:
            self.table.update(zip(missing, self.model.encode(missing)))
        return np.stack([self.table[t] for t in texts]).astype(np.float32) if texts else np.zeros((0, self.dim))


def score_key(context: str, continuation: str) -> str:
    """A score request's name in the cache: a hash, so the committed cache holds no dialogue text."""
    return hashlib.sha256(f"{context}\x00{continuation}".encode("utf-8")).hexdigest()[:24]


class ScoreCache(Backend):
    """Score requests answered from `path` (default: benchmarks/cache/lm-scores-<backend>-<model>.tsv, committed,
    so a rerun does not spend hours re-scoring); missing ones go to `backend` (default: the config's model, made
    by `MODELS` at the first miss) and are appended, so a long scoring run resumes where it stopped. Rows are
    `key<TAB>logprob<TAB>tokens`, the key a hash of the request's text (`score_key`). Other request kinds are
    refused."""

    name = "score-cache"

    def __init__(self, cfg: Config, path: Path | None = None, backend: Backend | None = None):
        self.cfg, self.model = cfg, cfg.llm.model
        self.path = Path(path) if path else score_cache_path(cfg)
        self.table: dict[str, tuple[float, int]] = {}
        self._backend = backend  # default: the config's model, loaded at the first missing score
        self.computed = 0
        if self.path.exists():
            for n, line in enumerate(self.path.open(encoding="utf-8"), 1):
                if line.startswith("#") or not line.strip():
                    continue
                try:
                    key, lp, tokens = line.rstrip("\n").split("\t")
                    self.table[key] = (float(lp), int(tokens))
                except ValueError as e:  # e.g. a row cut short when a run was killed mid-write
                    print(f"{self.path}:{n}: skipped a malformed row ({e}); it will be scored again",
                          file=sys.stderr)

    def __contains__(self, req: ScoreRequest) -> bool:
        return score_key(req.context, req.continuation) in self.table

    def score_batch(self, requests):
        out = []
        for req in requests:
            key = score_key(req.context, req.continuation)
            if key not in self.table:
                if self._backend is None:
                    self._backend = MODELS["backend"](self.cfg)
                res = self._backend.score([req])[0]
                self.table[key] = (res.logprob, res.tokens)
                new_file = not self.path.exists()
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as fh:
                    if new_file:
                        fh.write(f"# LLM scores of {self.model} ({self.cfg.llm.backend}): sha256(context NUL "
                                 "continuation)[:24], log-likelihood of the continuation, its tokens. Written by "
                                 "membox fit (membox_local/fit/cache.py)\n")
                    fh.write(f"{key}\t{res.logprob!r}\t{res.tokens}\n")
                self.computed += 1
                if self.computed % 100 == 0:
                    print(f"  scored {self.computed} new texts ({len(self.table)} cached)", file=sys.stderr, flush=True)
            lp, n = self.table[key]
            out.append(ScoreResult(lp, n, Usage(req.stage, 0, 0)))
        return out

    def label_batch(self, requests):
        raise NotImplementedError("ScoreCache answers score requests only")

    json_batch = text_batch = label_batch


def answer(step, backend: Backend | None, emb: Embedder | None = None):
    """Run a judge step to its value: score requests go to `backend`, embedding requests to `emb`."""
    from ..requests import EmbedRequest

    try:
        req = next(step)
        while True:
            req = step.send(emb.encode(list(req.texts)) if isinstance(req, EmbedRequest) else backend.score([req])[0])
    except StopIteration as stop:
        return stop.value


def step_requests(step) -> list[ScoreRequest]:
    """The score requests a judge step asks, answered with placeholders (only the requests matter)."""
    seen = []
    try:
        req = next(step)
        while True:
            seen.append(req)
            req = step.send(ScoreResult(-1.0, 1, Usage(req.stage, 0, 0)))
    except StopIteration:
        return seen


def judge_order(msgs, window: int) -> list[list[ScoreRequest]]:
    """Per message of one dialogue that has `window` earlier messages, the judge's own score requests (from
    `likelihood_features`), in the order the judge asks them: after the window, then after a bare header."""
    return [step_requests(likelihood_features(msgs[i - window:i], msgs[i], window)) for i in range(window, len(msgs))]


def score_order(msgs, window: int) -> list[ScoreRequest]:
    """The same requests (`judge_order`) ordered for a batch: the bare-header request of message i - window
    comes right before message i's request after its window, whose text starts with it, so the llama.cpp
    scorer (it keeps the KV cache of the prefix a request shares with the previous one) evaluates about three
    lines per message instead of four. Values do not depend on the order."""
    per, out = judge_order(msgs, window), []
    for j, (after_window, *_) in enumerate(per):
        if j >= window:
            out.extend(per[j - window][1:])  # the bare-header request of message i - window
        out.append(after_window)
    for rest in per[max(0, len(per) - window):]:  # bare-header requests no later message came to
        out.extend(rest[1:])
    return out


def precompute_scores(groups, backend: ScoreCache, window: int, label: str) -> None:
    """Score every message that could be judged (it has `window` earlier messages in its dialogue/session):
    with min_box_messages >= window the judge's context is always the previous `window` messages, so this
    covers every decision of every setting, teacher-forced or online."""
    t0, total = time.time(), sum(max(0, len(msgs) - window) for msgs in groups)
    done = 0
    for msgs in groups:
        for req in score_order(msgs, window):
            backend.score([req])
        before, done = done, done + max(0, len(msgs) - window)
        if before // 200 != done // 200 or done == total:
            print(f"{label}: {done}/{total} messages scored or cached ({time.time() - t0:.0f}s)", file=sys.stderr,
                  flush=True)


def precompute_ce(groups, lc, label: str) -> None:
    """The continuity cross-encoder's logit ([loom] ce_model) for every message with `window` earlier messages in
    its group, in batches: every pair a judge with min_box_messages >= window asks. Kept in
    runs/segmentation/ce-logits-<sha256 of the weights file>.json (text in it: not committed), so a rerun reads
    them (logits differ between CPU builds, so they are never compared across machines)."""
    import json

    from ..continuity import continuity_scorer, pair_text, resolve_weights
    from .report import RUNS

    scorer = continuity_scorer(lc.ce_model)
    digest = hashlib.sha256(resolve_weights(lc.ce_model).read_bytes()).hexdigest()[:16]
    path = RUNS / f"ce-logits-{digest}.json"
    w = lc.window
    pairs = list(dict.fromkeys(pair_text(msgs[i - w:i], msgs[i]) for msgs in groups for i in range(w, len(msgs))))
    saved = json.loads(path.read_text()) if path.exists() else []
    scorer.keep(len(saved) + len(pairs))  # the judges of the fit ask for each of these again
    scorer.remember({(c, n): v for c, n, v in saved})
    known = scorer.known()
    missing = [p for p in pairs if p not in known]
    t0 = time.time()
    for k in range(0, len(missing), 512):
        scorer.score(missing[k:k + 512])
        print(f"{label}: {min(k + 512, len(missing))}/{len(missing)} cross-encoder pairs ({time.time() - t0:.0f}s)",
              file=sys.stderr, flush=True)
    if missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([[c, n, v] for (c, n), v in scorer.known().items()]))
