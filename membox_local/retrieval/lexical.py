"""Lexical retrieval over messages: BM25 (the `bm25s` library), the first stage box-hits fuses with its cosines.

MiniLM's cosine misses what a question shares with a message word for word but not in meaning as the small
embedder sees it: names, rare nouns, numbers ("Pixel", "the Lisbon half marathon", "3 hours"). BM25 over the
messages' words finds those. Text is lowercased and cut into words of two or more letters or digits, common
English words dropped (bm25s' `en_plus` list, 179 words) and the rest stemmed (Snowball English, PyStemmer: "groups"
and "group" meet).

Why the index lives in memory only: it is built from the store's messages when a retriever first reads a scope
(`LexicalIndex.build`, kept in box-hits' per-scope BoxMap beside the message vectors) and never written to disk.
Memory.context makes a retriever per question, so every index is built from the messages stored at that moment: a
filed message is in it and a forgotten one cannot be, and there is no copy on disk for forgetting to erase (the
erasure tests check that a forgotten message's words find nothing). Building it costs little beside the seconds an
answer takes: 58 ms on average for a LoCoMo dev conversation (~570 turns) and 237 ms (at most 670) for a LongMemEval-S
dev history (~500 turns, many of them an assistant's long answers), a question 0.3-2 ms, measured on the 2-core VM
while it ran other jobs (load 7.5; `python benchmarks/lexical_fit.py speed --stride 4`, lexical-speed.json).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import bm25s
import numpy as np
import Stemmer

STOPWORDS = "en_plus"  # bm25s' longer English list (Lucene's 33 words miss "when", "did", "what")
_STEMMER = Stemmer.Stemmer("english")


def words(texts: Sequence[str], ids: bool = False):
    """Each text's index terms: lowercased words of 2+ characters, stop words dropped, stemmed (with `ids`: as
    bm25s' Tokenized, term ids and the vocabulary, which the index takes without mapping strings again)."""
    return bm25s.tokenize(list(texts), lower=True, stopwords=STOPWORDS, stemmer=_STEMMER.stemWords,
                          return_ids=ids, show_progress=False)


@dataclass
class LexicalIndex:
    """BM25 over a fixed list of texts (one per message, in the order given)."""

    bm25: bm25s.BM25 | None  # None: no text has an index term
    size: int

    @classmethod
    def build(cls, texts: Sequence[str]) -> "LexicalIndex":
        terms = words(texts, ids=True)
        if not any(terms.ids):
            return cls(None, len(terms.ids))
        bm25 = bm25s.BM25()
        bm25.index(terms, show_progress=False)
        return cls(bm25, len(terms.ids))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every text for the query (0 where no query term occurs)."""
        if self.bm25 is None:
            return np.zeros(self.size)
        known = [t for t in words([query])[0] if t in self.bm25.vocab_dict]
        if not known:
            return np.zeros(self.size)
        return np.asarray(self.bm25.get_scores(known), dtype=float)

    def normalised(self, query: str) -> np.ndarray:
        """scores / the best text's score: 1 for the best match, 0 where no query term occurs."""
        s = self.scores(query)
        top = s.max() if s.size else 0.0
        return s / top if top > 0 else s
