"""Answer scorers for LoCoMo QA. Every reported figure names the scorer it used.

- `locomo`: the benchmark authors' rule. Normalise (drop commas, lowercase, strip punctuation, drop
  a/an/the/and), Porter-stem, multiset token F1. Category 1 (multi-hop) splits gold and prediction on ','
  and averages, over gold parts, the best F1 against any prediction part; category 3 keeps the gold text
  before the first ';'; category 5 (adversarial) scores 1 when the prediction says the answer is not there.
- `mem0`: mem0's harness. Set F1 over lowercase tokens split on whitespace after '.', ',', '!', '?' become
  spaces (no stemming), and BLEU-1 with nltk's smoothing method1 over nltk word tokens.
- `membox`: ours, the plainest. Multiset F1 over lowercase [A-Za-z0-9]+ tokens.

Category 5 has no gold answer in LoCoMo (only `adversarial_answer`); every scorer uses the abstention rule
for it, so all three agree there.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

SCORERS = ("locomo", "mem0", "membox")
# the numbers each scorer reports per question, in table order
METRICS = {"locomo": ("f1",), "mem0": ("f1", "bleu1"), "membox": ("f1",)}
ABSTAIN_PHRASES = ("no information available", "not mentioned")


def metric_names() -> list[str]:
    """Flat names as they appear in JSONL records and tables: locomo_f1, mem0_f1, mem0_bleu1, membox_f1."""
    return [f"{s}_{m}" for s in SCORERS for m in METRICS[s]]


def multiset_f1(pred: list[str], gold: list[str]) -> float:
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    p, r = common / len(pred), common / len(gold)
    return 2 * p * r / (p + r)


def set_f1(pred: list[str], gold: list[str]) -> float:
    ps, gs = set(pred), set(gold)
    if not ps or not gs:
        return 0.0
    common = len(ps & gs)
    if common == 0:
        return 0.0
    p, r = common / len(ps), common / len(gs)
    return 2 * p * r / (p + r)


def abstains(prediction: str) -> bool:
    low = prediction.lower()
    return any(p in low for p in ABSTAIN_PHRASES)


# ---- locomo --------------------------------------------------------------------------------------
_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def locomo_normalize(text: str) -> str:
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def locomo_tokens(text: str) -> list[str]:
    stem = _stemmer().stem
    return [stem(w) for w in locomo_normalize(text).split()]


def locomo_f1(prediction: str, gold: str) -> float:
    return multiset_f1(locomo_tokens(prediction), locomo_tokens(gold))


def locomo_multihop_f1(prediction: str, gold: str) -> float:
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(locomo_f1(p, g) for p in preds) for g in golds) / len(golds)


def score_locomo(prediction: str, gold: str, category: int) -> dict[str, float]:
    if category == 5:
        return {"f1": float(abstains(prediction))}
    gold = str(gold)
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category == 1:
        return {"f1": locomo_multihop_f1(prediction, gold)}
    return {"f1": locomo_f1(prediction, gold)}


# ---- mem0 ----------------------------------------------------------------------------------------
def mem0_tokens(text: str) -> list[str]:
    text = str(text).lower()
    for ch in ".,!?":
        text = text.replace(ch, " ")
    return text.split()


@lru_cache(maxsize=1)
def _word_tokenizer():
    # nltk.word_tokenize needs the downloadable punkt sentence model; answers are one short sentence, so
    # its word tokenizer (what word_tokenize runs on each sentence) is used directly.
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer()


def bleu1(prediction: str, gold: str) -> float:
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    tok = _word_tokenizer().tokenize
    pred, ref = tok(str(prediction).lower()), tok(str(gold).lower())
    if not pred or not ref:
        return 0.0
    return float(sentence_bleu([ref], pred, weights=(1, 0, 0, 0),
                               smoothing_function=SmoothingFunction().method1))


def score_mem0(prediction: str, gold: str, category: int) -> dict[str, float]:
    if category == 5:
        v = float(abstains(prediction))
        return {"f1": v, "bleu1": v}
    prediction, gold = str(prediction).strip(), str(gold).strip()
    if not prediction or not gold:
        return {"f1": 0.0, "bleu1": 0.0}
    return {"f1": set_f1(mem0_tokens(prediction), mem0_tokens(gold)), "bleu1": bleu1(prediction, gold)}


# ---- membox --------------------------------------------------------------------------------------
_ALNUM = re.compile(r"[A-Za-z0-9]+")


def membox_tokens(text: str) -> list[str]:
    return [t.lower() for t in _ALNUM.findall(str(text))]


def score_membox(prediction: str, gold: str, category: int) -> dict[str, float]:
    if category == 5:
        return {"f1": float(abstains(prediction))}
    return {"f1": multiset_f1(membox_tokens(prediction), membox_tokens(gold))}


_SCORE = {"locomo": score_locomo, "mem0": score_mem0, "membox": score_membox}


def score_all(prediction: str, gold: str, category: int) -> dict[str, float]:
    """Every scorer's numbers for one answer, keyed like `metric_names()`."""
    out = {}
    for name in SCORERS:
        for metric, value in _SCORE[name](prediction, gold, category).items():
            out[f"{name}_{metric}"] = round(value, 6)
    return out
