"""Box-hits' lexical stage (retrieval/lexical.py, `[retrieve] lexical_weight`): BM25 over the stored messages,
fused with the cosines into each message's relevance. Through the deterministic doubles (tests/test_boxaware.py's
boxes); forgetting's side is in tests/test_forget.py."""
from __future__ import annotations

import numpy as np
import pytest

from membox_local.config import ConfigError, load_config
from membox_local.retrieval import make_retriever
from membox_local.retrieval.lexical import LexicalIndex, words

from test_boxaware import CONV, _file

pytestmark = pytest.mark.numeric  # scores through BLAS: rerun on another kernel (make test-numeric)


def test_words_are_lowercased_stemmed_and_stop_words_dropped():
    assert words(["When did Ann plant the Cherry TOMATOES?", "the of a"]) == [["ann", "plant", "cherri", "tomato"], []]
    assert words(["planted", "plants", "planting"]) == [["plant"]] * 3


def test_bm25_scores_the_message_holding_a_rare_word_first_and_normalises_to_one():
    ix = LexicalIndex.build(["Ann: I adopted a grey kitten named Pixel", "Bob: Pixel is a lovely name",
                             "Ann: the weather was grey", "Bob: ok"])
    s = ix.scores("Which kitten is named Pixel?")
    assert s[0] > s[1] > 0 and s[2] == 0 and s[3] == 0
    n = ix.normalised("Which kitten is named Pixel?")
    assert n.max() == pytest.approx(1.0) and np.allclose(n, s / s.max())
    assert not ix.scores("zebra unicorn").any() and not ix.scores("the of").any()  # unknown words, stop words only
    empty = LexicalIndex.build(["the", "a"])
    assert empty.scores("the kitten").tolist() == [0.0, 0.0] and LexicalIndex.build([]).scores("x").size == 0


def test_the_index_grows_and_scores_as_bm25s_does():
    """LexicalIndex keeps its own postings so that it can grow (`extend`): built in two steps it is the index built
    at once, and its scores are bm25s' "lucene" BM25 (float32 there)."""
    import bm25s

    from membox_local.retrieval.lexical import STOPWORDS, _STEMMER

    texts = ["Ann: I adopted a grey kitten named Pixel", "Bob: Pixel is a lovely name for a kitten",
             "Ann: the weather was grey and the garden wet", "Bob: my car broke down, the car needed a tow",
             "Ann: cherry tomatoes, cherry pie, cherry everything", "Bob: ok"]
    grown = LexicalIndex.build(texts[:2])
    grown.extend(texts[2:])
    ref = bm25s.BM25()
    ref.index(bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=_STEMMER.stemWords, show_progress=False),
              show_progress=False)
    for q in ("Which kitten is named Pixel?", "cherry car grey", "the car the car"):
        known = [t for t in words([q])[0] if t in ref.vocab_dict]
        assert np.allclose(grown.scores(q), ref.get_scores(known), rtol=1e-5, atol=1e-6), q
        assert np.array_equal(grown.scores(q), LexicalIndex.build(texts).scores(q))


def test_fusion_adds_the_weighted_normalised_bm25_score_to_each_relevance(memory):
    _file(memory)
    r = make_retriever("box-hits", memory)
    bm = r.box_map(CONV)
    question = "When was the cherry tomato planting?"
    qv = memory.embedder.encode([question])[0]
    r.lexical_weight = 0.0
    dense, prio0 = r.priorities(bm, qv, question)
    r.lexical_weight = 0.3
    fused, prio = r.priorities(bm, qv, question)
    lexical = bm.lexical_index().normalised(question)
    assert np.allclose(fused - dense, 0.3 * lexical) and lexical.max() == pytest.approx(1.0)
    assert (prio > prio0 - 1e-9).all() and (prio > prio0).any()  # priority is built from the fused relevance
    assert np.allclose(r.priorities(bm, qv)[0], dense)  # no question text: the cosines alone
    # the index holds the messages as shown, in BoxMap order, and is built once per scope
    assert bm.lexical_index() is bm.lexical_index() and bm.lexical_index().size == len(bm.messages)


def test_bm25_finds_what_the_cosine_misses_and_feeds_the_context(memory):
    """The doubles' cosine matches words exactly: "planting" and "tomato" miss "planted" and "tomatoes"; the stemmed
    BM25 finds the turn, and box-hits then shows it with its box neighbours first."""
    _file(memory)
    r = make_retriever("box-hits", memory)
    question = "cherry tomato planting"
    budget = 16  # the date line and one message: the best one
    r.lexical_weight = 0.0
    by_dense = r.retrieve(question, CONV, 1, budget).message_ids
    r.lexical_weight, r.dense_weight = 1.0, 0.0
    bm = r.box_map(CONV)
    top = int(np.argmax(bm.lexical_index().scores(question)))
    assert bm.messages[top].message_id == "D1:1"  # "I planted cherry tomatoes in my garden this weekend"
    assert r.retrieve(question, CONV, 1, budget).message_ids == ["D1:1"] and by_dense and by_dense != ["D1:1"]
    r.dense_weight = 1.0  # fused: the stemmed match still comes first
    assert r.retrieve(question, CONV, 1, budget).message_ids == ["D1:1"]


def test_the_config_key_is_checked(tmp_path):
    assert load_config("cpu").retrieve.lexical_weight == load_config("cpu-ce").retrieve.lexical_weight
    bad = tmp_path / "bad.toml"
    bad.write_text('extends = "cpu"\n[retrieve]\nlexical_weight = -0.1\n')
    with pytest.raises(ConfigError, match="lexical_weight"):
        load_config(str(bad))
