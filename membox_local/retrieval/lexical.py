"""Lexical retrieval over messages: BM25 (the `bm25s` library), the first stage box-hits fuses with its cosines.

MiniLM's cosine misses what a question shares with a message word for word but not in meaning as the small
embedder sees it: names, rare nouns, numbers ("Pixel", "the Lisbon half marathon", "3 hours"). BM25 over the
messages' words finds those. Text is lowercased and cut into words of two or more letters or digits, common
English words dropped (bm25s' `en_plus` list, 179 words) and the rest stemmed (Snowball English, PyStemmer: "groups"
and "group" meet).

The index lives in memory, with the rest of box-hits' per-scope BoxMap: a Memory keeps it while the store's rows are
unchanged, extends it (`extend`) as messages are filed, and builds it anew after an erasure (Memory.retriever,
Store.generation), so a forgotten message's words are in no index (the erasure tests check that they find nothing).
A scope of 5,000 messages or more is also written beside the store (retrieval/snapshot.py: `arrays`, `from_arrays`),
deleted by every erasure and never read after one. It keeps its
postings itself (bm25s' index cannot grow) and scores as bm25s' "lucene" variant does (a test compares them); the
words are bm25s' tokenizer's. Building it from scratch costs seconds only at tens of thousands of messages
(BENCHMARKS.md, "Scale": the first question after opening, which the snapshot spares).
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import bm25s
import numpy as np
import Stemmer

STOPWORDS = "en_plus"  # bm25s' longer English list (Lucene's 33 words miss "when", "did", "what")
_STEMMER = Stemmer.Stemmer("english")


def words(texts: Sequence[str]) -> list[list[str]]:
    """Each text's index terms: lowercased words of 2+ characters, stop words dropped, stemmed (bm25s' tokenizer)."""
    return bm25s.tokenize(list(texts), lower=True, stopwords=STOPWORDS, stemmer=_STEMMER.stemWords,
                          return_ids=False, show_progress=False)


K1, B = 1.5, 0.75  # bm25s' defaults (its "lucene" variant, the one this index reproduces)


class LexicalIndex:
    """BM25 over a list of texts (one per message, in the order given) that grows: `extend` adds texts at the end,
    so that a memory's index follows its filing without being built again. The scores are bm25s' "lucene" BM25
    (idf = ln(1 + (N - df + 0.5) / (df + 0.5)), tf / (tf + k1 (1 - b + b len / mean len))), computed at question
    time from the postings, with the texts' words as bm25s tokenizes them (`words`)."""

    def __init__(self):
        self.vocab: dict[str, int] = {}
        # term id -> the texts holding it and their counts there: a flat part (offsets per term, texts, counts; what
        # `from_arrays` reads) and what was added since, per term (what `extend` appends)
        self._flat = (np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32))
        self._more: dict[int, tuple[list[int], list[int]]] = {}
        self.lengths: list[int] = []  # text -> its number of index terms
        self._arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # postings as arrays, made when first asked for
        self._lengths: np.ndarray | None = None  # `lengths` as an array, and their sum
        self._total = 0

    @classmethod
    def build(cls, texts: Sequence[str]) -> "LexicalIndex":
        index = cls()
        index.extend(texts)
        return index

    @property
    def size(self) -> int:
        return len(self.lengths)

    def extend(self, texts: Sequence[str]) -> None:
        """Add texts after those indexed."""
        texts = list(texts)
        for terms in (words(texts) if texts else []):
            n = len(self.lengths)
            self.lengths.append(len(terms))
            self._total += len(terms)
            self._lengths = None
            for term, count in Counter(terms).items():
                t = self.vocab.setdefault(term, len(self.vocab))
                docs, counts = self._more.setdefault(t, ([], []))
                docs.append(n)
                counts.append(count)
                self._arrays.pop(t, None)

    def postings(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Term `t`'s texts and counts (as floats), as arrays, kept for the next question that names it."""
        if t not in self._arrays:
            docs, counts = self._joined(t)
            self._arrays[t] = (docs, counts.astype(float))
        return self._arrays[t]

    def _joined(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Term `t`'s postings: its flat part, then what was added since."""
        offsets, docs, counts = self._flat
        lo, hi = (int(offsets[t]), int(offsets[t + 1])) if t + 1 < len(offsets) else (0, 0)
        more_docs, more_counts = self._more.get(t, ((), ()))
        return (np.concatenate([docs[lo:hi], np.asarray(more_docs, dtype=np.int32)]),
                np.concatenate([counts[lo:hi], np.asarray(more_counts, dtype=np.int32)]))

    def arrays(self) -> dict[str, np.ndarray]:
        """The index as flat arrays (retrieval/snapshot.py writes them beside the store): its terms (UTF-8, one per
        line, in id order), each term's postings (texts and counts) one after another with their offsets, and the
        texts' lengths."""
        offsets, docs, counts = self._flat
        if self._more:
            parts = [self._joined(t) for t in range(len(self.vocab))]  # not kept: only the questions' terms are
            sizes = np.array([len(d) for d, _ in parts], dtype=np.int64)
            offsets = np.concatenate([[0], np.cumsum(sizes)])
            docs = np.concatenate([d for d, _ in parts]).astype(np.int32) if parts else docs
            counts = np.concatenate([c for _, c in parts]).astype(np.int32) if parts else counts
        return {"terms": np.frombuffer("\n".join(self.vocab).encode(), dtype=np.uint8),  # terms hold no newline
                "offsets": offsets, "docs": docs, "counts": counts, "lengths": np.asarray(self.lengths, dtype=np.int32)}

    @classmethod
    def from_arrays(cls, terms: np.ndarray, offsets: np.ndarray, docs: np.ndarray, counts: np.ndarray,
                    lengths: np.ndarray) -> "LexicalIndex":
        """`arrays`' output as an index again (one that can still grow)."""
        index = cls()
        names = terms.tobytes().decode().split("\n") if len(offsets) > 1 else []
        index.vocab = {t: i for i, t in enumerate(names)}
        index._flat = (np.asarray(offsets, dtype=np.int64), np.asarray(docs, dtype=np.int32),
                       np.asarray(counts, dtype=np.int32))
        index.lengths = lengths.tolist()
        index._total = int(lengths.sum())
        return index

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every text for the query (0 where no query term occurs); a term the query repeats counts
        as often as it is said."""
        out = np.zeros(self.size)
        if not self._total:
            return out
        mean = self._total / self.size
        if self._lengths is None:
            self._lengths = np.asarray(self.lengths, dtype=float)
        lengths = self._lengths
        for term in words([query])[0] if query.strip() else []:
            t = self.vocab.get(term)
            if t is None:
                continue
            docs, tf = self.postings(t)
            idf = math.log(1 + (self.size - len(docs) + 0.5) / (len(docs) + 0.5))
            out[docs] += idf * tf / (tf + K1 * ((1 - B) + B * lengths[docs] / mean))
        return out

    def normalised(self, query: str) -> np.ndarray:
        """scores / the best text's score: 1 for the best match, 0 where no query term occurs."""
        s = self.scores(query)
        top = s.max() if s.size else 0.0
        return s / top if top > 0 else s
