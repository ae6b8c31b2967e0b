"""The shipped MiniLM (all-MiniLM-L6-v2, a 6-layer BERT) in plain torch, read from its package folder (config.json,
model.safetensors, tokenizer.json) by `tokenizers` and `safetensors` alone: the embedder (embed.py) and the
cross-encoders (continuity.py) run it without importing transformers or sentence-transformers, whose imports took
several seconds of a cold `membox ask` on the 2-core VM (`import sentence_transformers` 8.2 s against `import torch`
1.6 s, timed with a job beside them; a cold ask side by side before and after: BENCHMARKS.md, "Latency"). The layers
keep transformers' BertModel names, so the weights file loads as it is and the cross-encoders' adapters find their
Linear layers by the same paths; tests/test_native.py holds the outputs to sentence-transformers' vectors and to
transformers' BertModel states within float tolerance.

Import this module inside functions: it imports torch.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x, bias):
        b, n, h = x.shape

        def split(t):
            return t.view(b, n, self.heads, h // self.heads).transpose(1, 2)
        out = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)),
                                             attn_mask=bias)
        return out.transpose(1, 2).reshape(b, n, h)


class Output(nn.Module):
    """dense, then LayerNorm over the sum with the residual (BertSelfOutput / BertOutput)."""

    def __init__(self, inner: int, hidden: int, eps: float):
        super().__init__()
        self.dense, self.LayerNorm = nn.Linear(inner, hidden), nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, eps: float):
        super().__init__()
        self.self, self.output = SelfAttention(hidden, heads), Output(hidden, hidden, eps)

    def forward(self, x, bias):
        return self.output(self.self(x, bias), x)


class Intermediate(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.dense = nn.Linear(hidden, inner)

    def forward(self, x):
        return F.gelu(self.dense(x))  # BERT's "gelu": the exact (erf) form


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, inner: int, eps: float):
        super().__init__()
        self.attention = Attention(hidden, heads, eps)
        self.intermediate, self.output = Intermediate(hidden, inner), Output(inner, hidden, eps)

    def forward(self, x, bias):
        x = self.attention(x, bias)
        return self.output(self.intermediate(x), x)


class Embeddings(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        hidden = cfg["hidden_size"]
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], hidden, padding_idx=cfg.get("pad_token_id", 0))
        self.position_embeddings = nn.Embedding(cfg["max_position_embeddings"], hidden)
        self.token_type_embeddings = nn.Embedding(cfg["type_vocab_size"], hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=cfg["layer_norm_eps"])

    def forward(self, ids, types):
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        return self.LayerNorm(self.word_embeddings(ids) + self.position_embeddings(positions)
                              + self.token_type_embeddings(types))


class Stack(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.layer = nn.ModuleList(
            Layer(cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"], cfg["layer_norm_eps"])
            for _ in range(cfg["num_hidden_layers"]))


class Bert(nn.Module):
    """BertModel's encoder without its pooler: token ids in, the last layer's token states out."""

    def __init__(self, cfg: dict):
        super().__init__()
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu" or \
                cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"minilm: only BERT models with gelu and absolute positions are read here "
                             f"(got {cfg.get('model_type')}, {cfg.get('hidden_act')})")
        self.config = cfg
        self.hidden_size = cfg["hidden_size"]
        self.embeddings, self.encoder = Embeddings(cfg), Stack(cfg)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(input_ids, token_type_ids)
        # padding keys get -inf-like bias, as transformers' extended attention mask does (dtype's min)
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.encoder.layer:
            x = layer(x, bias)
        return x


class Encoded(dict):
    """A tokenized batch: input_ids, attention_mask, token_type_ids as int64 tensors (a dict, as transformers')."""


class Tokenizer:
    """tokenizer.json read by `tokenizers`, called as transformers' tokenizer is here: a batch of texts (or of pairs)
    padded to its longest, cut to `max_length` (longest_first for texts; only_first / only_second for pairs, from
    `side`, "right" or "left")."""

    def __init__(self, folder: Path):
        from tokenizers import Tokenizer as Fast

        self.fast = Fast.from_file(str(folder / "tokenizer.json"))
        self.fast.no_truncation()
        self.fast.no_padding()
        self.truncation_side = "right"

    def __call__(self, first: Sequence[str], second: Sequence[str] | None = None, *, max_length: int,
                 truncation: str = "longest_first") -> Encoded:
        self.fast.enable_truncation(max_length, strategy=truncation, direction=self.truncation_side)
        pad = self.fast.token_to_id("[PAD]")
        self.fast.enable_padding(pad_id=pad, pad_token="[PAD]")
        try:
            inputs = list(first) if second is None else list(zip(first, second))
            enc = self.fast.encode_batch(inputs)
        finally:
            self.fast.no_truncation()
            self.fast.no_padding()
        return Encoded(input_ids=torch.tensor([e.ids for e in enc], dtype=torch.long),
                       attention_mask=torch.tensor([e.attention_mask for e in enc], dtype=torch.long),
                       token_type_ids=torch.tensor([e.type_ids for e in enc], dtype=torch.long))

    def ids(self, text: str) -> list[int]:
        """The text's word pieces, without [CLS] and [SEP]."""
        return self.fast.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.fast.decode(list(ids))


def load(folder: Path) -> tuple[Bert, Tokenizer]:
    """The model (eval mode, float32) and its tokenizer. The weights are model.safetensors' tensors themselves,
    which safetensors maps from the file: pages are read as they are used (embed.make_resident reads them all), and
    every process mapping the file shares them."""
    from safetensors.torch import load_file

    model = Bert(json.loads((folder / "config.json").read_text()))  # (made on "meta" it imports torch._dynamo: 1.9 s)
    state = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if not k.startswith("pooler.")}
    state.pop("embeddings.position_ids", None)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if missing or unexpected:
        raise ValueError(f"minilm: {folder}/model.safetensors does not fit a BERT of its config.json "
                         f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.eval()
    return model, Tokenizer(folder)


def max_seq_length(folder: Path, default: int = 512) -> int:
    """sentence-transformers' max_seq_length of the folder (sentence_bert_config.json), else `default`."""
    path = folder / "sentence_bert_config.json"
    return int(json.loads(path.read_text()).get("max_seq_length", default)) if path.exists() else default


def mean_pooled(states, mask):
    """Mean of the token states over the real (unpadded) tokens."""
    m = mask.unsqueeze(-1).to(states.dtype)
    return (states * m).sum(1) / m.sum(1).clamp(min=1e-9)


class SentenceEncoder:
    """sentence-transformers' mean-pooled, normalised sentence embedding of a folder whose modules.json is
    Transformer -> Pooling(mean) -> Normalize (what all-MiniLM-L6-v2 ships); any other folder is refused."""

    def __init__(self, folder: Path):
        modules = json.loads((folder / "modules.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling = folder / "1_Pooling" / "config.json"
        mean = pooling.exists() and json.loads(pooling.read_text()).get("pooling_mode_mean_tokens")
        if kinds != ["Transformer", "Pooling", "Normalize"] or not mean:
            raise ValueError(f"minilm: {folder} is not a mean-pooled, normalised sentence model ({kinds})")
        self.model, self.tokenizer = load(folder)
        self.max_length = max_seq_length(folder)
        self.dim = self.model.hidden_size

    def encode(self, texts: Sequence[str], batch_size: int = 32):
        """Unit vectors (numpy float32), batches of similar length (as sentence-transformers sorts them)."""
        import numpy as np

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with torch.no_grad():
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                enc = self.tokenizer([texts[i] for i in idx], max_length=self.max_length)
                vecs = F.normalize(mean_pooled(self.model(**enc), enc["attention_mask"]), p=2, dim=1)
                out[idx] = vecs.numpy()
        return out
