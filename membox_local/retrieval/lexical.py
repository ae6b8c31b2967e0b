"""Lexical retrieval over messages: BM25 (the `bm25s` library), the first stage box-hits fuses with its cosines.

MiniLM's cosine misses what a question shares with a message word for word but not in meaning as the small
embedder sees it: names, rare nouns, numbers ("Pixel", "the Lisbon half marathon", "3 hours"). BM25 over the
messages' words finds those. Text is lowercased and cut into words of two or more letters or digits, common
English words dropped (bm25s' `en_plus` list, 179 words) and the rest stemmed (Snowball English, PyStemmer: "groups"
and "group" meet).

The index lives in memory, with the rest of box-hits' per-scope BoxMap, and is never written to disk: a Memory keeps
it while the store's rows are unchanged, extends it (`extend`) as messages are filed, and builds it anew after an
erasure (Memory.retriever, Store.generation), so a forgotten message's words are in no index and there is no copy on
disk for forgetting to erase (the erasure tests check that a forgotten message's words find nothing). It keeps its
postings itself (bm25s' index cannot grow) and scores as bm25s' "lucene" variant does (a test compares them); the
words are bm25s' tokenizer's. Building it from scratch costs seconds only at tens of thousands of messages
(BENCHMARKS.md, "Scale": the first question after opening).
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
        self.docs: list[list[int]] = []  # term id -> the texts holding it (postings), and their counts there
        self.counts: list[list[int]] = []
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
                if t == len(self.docs):
                    self.docs.append([])
                    self.counts.append([])
                self.docs[t].append(n)
                self.counts[t].append(count)
                self._arrays.pop(t, None)

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
            if t not in self._arrays:
                self._arrays[t] = (np.asarray(self.docs[t]), np.asarray(self.counts[t], dtype=float))
            docs, tf = self._arrays[t]
            idf = math.log(1 + (self.size - len(docs) + 0.5) / (len(docs) + 0.5))
            out[docs] += idf * tf / (tf + K1 * ((1 - B) + B * lengths[docs] / mean))
        return out

    def normalised(self, query: str) -> np.ndarray:
        """scores / the best text's score: 1 for the best match, 0 where no query term occurs."""
        s = self.scores(query)
        top = s.max() if s.size else 0.0
        return s / top if top > 0 else s
