"""The continuity cross-encoder: the shipped MiniLM (all-MiniLM-L6-v2) reading the open box's last lines and the new
line together, with a low-rank adapter (LoRA) and a one-unit head fitted on TIAGE train by
`membox fit crossencoder`. Its logit, "the new line continues", is the hybrid judge's `ce_continue` feature: no LLM
call, one MiniLM forward pass of about three lines per judged message.

The weights file (configs/content/ce-tiage-all-minilm-l6-v2.safetensors, ~1 MB) holds only the adapter's A/B
matrices and the head; the base model is the embedder's own package (`weights.resolve_model`), so nothing is
downloaded. Loading merges W + (alpha / r) * B @ A into the base's linear layers once; inference is plain MiniLM.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

from .config import CONFIG_DIR, ConfigError, read_ce_meta as read_meta, resolve_ce_weights as resolve_weights  # noqa: F401
from .native import onednn_off
from .records import Message

# the Linear layers of each BERT layer that get an adapter (names inside transformers' BertLayer)
LORA_TARGETS = ("attention.self.query", "attention.self.value", "intermediate.dense", "output.dense")
MAX_LENGTH = 128  # tokens of one (context, new line) pair; the context is cut from its start, the new line at its end
CONTEXT_WORDS = 48  # each context line keeps its last words, the new line its first NEW_WORDS
NEW_WORDS = 64
MAX_NEW_TOKENS = MAX_LENGTH - 3 - 16  # the new line's word pieces at most: the context keeps 16, [CLS] and 2 [SEP]
MAX_QUESTION_TOKENS = 64  # the evidence reading's question cut to its first 64 word pieces, so the line keeps room


def pair_text(context: Sequence[Message], new: Message) -> tuple[str, str]:
    """What the cross-encoder reads: the context lines (oldest first, each cut to its last words) and the new line
    (cut to its first words). Speakers are left out: TIAGE's are A/B, LoCoMo's names."""
    ctx = " [SEP] ".join(" ".join(m.text.split()[-CONTEXT_WORDS:]) for m in context)
    return ctx, " ".join(new.text.split()[:NEW_WORDS])


# how a pair is read: "continuity" (context, new line): the context loses its oldest words first; "evidence"
# (question, line), box-hits' second stage ([retrieve] evidence_model): the line loses its last words first
READINGS = ("continuity", "evidence")


class PairModel:
    """MiniLM + adapter + head over mean-pooled tokens: a pair -> one logit ("continues" for the continuity
    reading, "holds the answer" for the evidence reading). Built for training (`trainable=True`: adapters as
    separate parameters) or from a weights file (merged)."""

    def __init__(self, base: str, rank: int = 8, alpha: float = 16.0, trainable: bool = False,
                 reading: str = "continuity"):
        import torch

        from . import minilm
        from .weights import resolve_model

        if reading not in READINGS:
            raise ConfigError(f"cross-encoder reading '{reading}': expected one of {', '.join(READINGS)}")
        self.base, self.rank, self.alpha, self.reading = base, rank, alpha, reading
        # the base read in plain torch (minilm.py: transformers' BertModel's outputs, without its import)
        self.encoder, self.tokenizer = minilm.load(resolve_model(base))
        # a long pair loses the context's oldest words first (continuity), or the line's last words (evidence)
        self.tokenizer.truncation_side = "left" if reading == "continuity" else "right"
        self.head = torch.nn.Linear(self.encoder.hidden_size, 1)
        self.adapters: dict[str, tuple] = {}
        if trainable:
            self._add_adapters()

    def _targets(self):
        for i, layer in enumerate(self.encoder.encoder.layer):
            for name in LORA_TARGETS:
                mod = layer
                for part in name.split("."):
                    mod = getattr(mod, part)
                yield f"layer.{i}.{name}", mod

    def _add_adapters(self) -> None:
        import torch

        for p in self.encoder.parameters():
            p.requires_grad_(False)
        scale = self.alpha / self.rank
        for key, lin in self._targets():
            a = torch.nn.Parameter(torch.randn(self.rank, lin.in_features) / lin.in_features ** 0.5)
            b = torch.nn.Parameter(torch.zeros(lin.out_features, self.rank))
            self.adapters[key] = (a, b)

            def forward(x, lin=lin, a=a, b=b, orig=lin.forward):
                return orig(x) + (x @ a.T @ b.T) * scale
            lin.forward = forward

    def parameters(self):
        return [p for ab in self.adapters.values() for p in ab] + list(self.head.parameters())

    def logits(self, pairs: Sequence[tuple[str, str]]):
        if self.reading == "evidence":
            questions = {q: self.cut(q, MAX_QUESTION_TOKENS) for q in dict.fromkeys(q for q, _ in pairs)}
            enc = self.tokenizer([questions[q] for q, _ in pairs], [line for _, line in pairs],
                                 truncation="only_second", max_length=MAX_LENGTH)
        else:
            enc = self.tokenizer([c for c, _ in pairs], [self.cut(n, MAX_NEW_TOKENS) for _, n in pairs],
                                 truncation="only_first", max_length=MAX_LENGTH)
        out = self.encoder(**enc)
        mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
        pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled).squeeze(-1)

    def cut(self, text: str, most: int) -> str:
        """The text cut to its first `most` word pieces when longer (64 words of code or URLs can be), so that the
        other side of the pair keeps some room: only that side is truncated, and a text longer than the whole pair
        cannot be (a question of 300 words made the evidence reading fail before)."""
        ids = self.tokenizer.ids(text)
        return text if len(ids) <= most else self.tokenizer.decode(ids[:most])

    def save(self, path: Path, meta: dict) -> None:
        from safetensors.torch import save_file

        tensors = {f"{k}.lora_a": a.detach().contiguous() for k, (a, _) in self.adapters.items()}
        tensors.update({f"{k}.lora_b": b.detach().contiguous() for k, (_, b) in self.adapters.items()})
        tensors["head.weight"] = self.head.weight.detach().contiguous()
        tensors["head.bias"] = self.head.bias.detach().contiguous()
        meta = {**meta, "base": self.base, "rank": self.rank, "alpha": self.alpha, "targets": list(LORA_TARGETS),
                "max_length": MAX_LENGTH, "reading": self.reading}
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.half() if k.endswith(("lora_a", "lora_b")) else v for k, v in tensors.items()}, str(path),
                  metadata={"membox": json.dumps(meta)})
        path.chmod(0o644)  # safetensors writes 0600; the file is package data

    @classmethod
    def load(cls, path: Path) -> "PairModel":
        import torch
        from safetensors.torch import load_file

        meta = read_meta(path)
        model = cls(meta["base"], int(meta["rank"]), float(meta["alpha"]), reading=meta.get("reading", "continuity"))
        tensors = load_file(str(path))
        scale = model.alpha / model.rank
        with torch.no_grad():
            for key, lin in model._targets():
                if f"{key}.lora_a" not in tensors:
                    raise ConfigError(f"{path}: no adapter for {key}; refit it (`membox fit crossencoder`)")
                a, b = tensors[f"{key}.lora_a"].float(), tensors[f"{key}.lora_b"].float()
                lin.weight += scale * (b @ a)
            model.head.weight.copy_(tensors["head.weight"])
            model.head.bias.copy_(tensors["head.bias"])
        model.meta = meta
        return model


class ContinuityScorer:
    """A weights file's model, scoring (context, new line) pairs; logits kept per pair (least recently used
    dropped), so a fit that asks the same pair twice and a judge that is asked again pay once."""

    # pairs kept by default: a judge asks again for the last [loom] history (30) messages of the conversation it files,
    # so 8,192 serve ~270 conversations filed in turn, in ~6 MB; a fit keeps every pair of its data (keep())
    CACHE = 8_192

    def __init__(self, path: Path):
        import torch

        self.path = path
        self.model = PairModel.load(path)
        self.meta = self.model.meta
        self.embedder = self.meta["base"]
        self._torch = torch
        self._cache: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.capacity = self.CACHE

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        missing = list(dict.fromkeys(p for p in pairs if p not in self._cache))
        for i in range(0, len(missing), 32):
            with self._torch.no_grad(), onednn_off():  # no native state kept per input shape (native.py)
                vals = self.model.logits(missing[i:i + 32]).tolist()
            self._cache.update(zip(missing[i:i + 32], vals))
        out = []
        for p in pairs:
            self._cache.move_to_end(p)
            out.append(float(self._cache[p]))
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return out

    def make_resident(self) -> None:
        """Read every weight once: the encoder's word-embedding table is the mapped file's (as the embedder's:
        embed.py), a page of it resident only once a line uses one of its words; a server reads it at start."""
        with self._torch.no_grad():
            for weight in self.model.encoder.parameters():
                weight.sum()

    def keep(self, pairs: int) -> None:
        """Keep the logits of at least this many pairs (a fit scores every pair of its data once, then asks again)."""
        self.capacity = max(self.capacity, pairs)

    def known(self) -> dict[tuple[str, str], float]:
        return dict(self._cache)

    def remember(self, logits: dict[tuple[str, str], float]) -> None:
        self._cache.update(logits)


def load_scorer(path: Path) -> ContinuityScorer:
    return ContinuityScorer(path)


# what makes a scorer from a weights file: tests put membox_local.testing's double here
MODELS = {"scorer": load_scorer}
_LOADED: dict[tuple, object] = {}


def continuity_scorer(name: str):
    """The scorer of [loom] ce_model, loaded once per process."""
    return _loaded(resolve_weights(name))


def evidence_scorer(name: str):
    """The scorer of [retrieve] evidence_model (question, line) -> logit of "the line holds the answer", loaded once
    per process; a file fitted for another reading (the continuity judge's) is refused."""
    scorer = _loaded(resolve_weights(name, "[retrieve] evidence_model"))
    reading = scorer.meta.get("reading", "continuity")
    if reading != "evidence":
        raise ConfigError(f"[retrieve] evidence_model: {name!r} is a {reading} cross-encoder; expected one written "
                          "by `membox fit evidence`")
    return scorer


def _loaded(path: Path):
    key = (MODELS["scorer"], str(path.resolve()))
    if key not in _LOADED:
        _LOADED[key] = MODELS["scorer"](path)
    return _LOADED[key]
