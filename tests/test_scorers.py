"""The three LoCoMo answer scorers on hand-checked cases."""
from __future__ import annotations

import pytest

from membox_local.evaluation.scorers import (bleu1, locomo_normalize, locomo_tokens, metric_names, score_all,
                                             score_locomo, score_mem0, score_membox)


def test_locomo_normalisation_drops_commas_punctuation_and_articles():
    assert locomo_normalize("The cat, and a dog!") == "cat dog"
    assert locomo_normalize("7 May, 2023") == "7 may 2023"
    assert locomo_tokens("Running races") == ["run", "race"]  # Porter stems


def test_locomo_f1_is_stemmed_multiset_f1():
    # gold: [adopt, agenc]; prediction: [she, research, adopt, agenc] -> p=2/4, r=1, f1=2/3
    assert score_locomo("She researched adoption agencies", "Adoption agencies", 4)["f1"] == pytest.approx(2 / 3)
    # stemming makes "painted"/"painting" one token: exact match
    assert score_locomo("painting", "painted", 2)["f1"] == 1.0
    assert score_locomo("", "Paris", 4)["f1"] == 0.0
    # multiset: a repeated word counts twice only if the gold has it twice
    assert score_locomo("dog dog", "dog", 4)["f1"] == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_locomo_category_1_averages_best_match_per_gold_part():
    # gold parts: "pottery", "camping"; prediction parts: "camping", "painting"
    # pottery -> best 0, camping -> best 1 (camping) -> mean 0.5
    assert score_locomo("camping, painting", "Pottery, camping", 1)["f1"] == pytest.approx(0.5)
    # the same strings outside category 1 are one multiset: [camp, paint] vs [potteri, camp] -> 0.5
    assert score_locomo("camping, painting", "Pottery, camping", 4)["f1"] == pytest.approx(0.5)
    # each gold part ("beach", "sunset") against the one prediction part "beach sunset": f1 = 2/3 each
    assert score_locomo("beach sunset", "beach, sunset", 1)["f1"] == pytest.approx(2 / 3)


def test_locomo_category_3_cuts_gold_at_first_semicolon():
    gold = "Likely yes; she loves hiking"
    assert score_locomo("likely yes", gold, 3)["f1"] == 1.0
    assert score_locomo("likely yes", gold, 4)["f1"] < 1.0


def test_category_5_scores_abstention():
    for fn in (score_locomo, score_membox):
        assert fn("Not mentioned in the conversation", "", 5)["f1"] == 1.0
        assert fn("She went to Paris", "", 5)["f1"] == 0.0
    assert score_mem0("No information available", "", 5) == {"f1": 1.0, "bleu1": 1.0}


def test_mem0_set_f1_without_stemming():
    # set tokens: pred {adoption, agencies}, gold {adoption, agency} -> 1 common, f1 = 0.5 (no stemming)
    assert score_mem0("Adoption agencies.", "adoption agency", 4)["f1"] == pytest.approx(0.5)
    # sets: a repeated word counts once, punctuation . , ! ? split words
    assert score_mem0("dog, dog!", "dog", 4)["f1"] == 1.0
    assert score_mem0("", "dog", 4) == {"f1": 0.0, "bleu1": 0.0}


def test_mem0_bleu1_with_smoothing():
    assert bleu1("the cat sat", "the cat sat") == pytest.approx(1.0)
    # unigram precision 2/4 with brevity penalty 1 (prediction longer than reference)
    assert bleu1("the cat sat down", "the cat") == pytest.approx(0.5)
    # shorter prediction: precision 1, brevity penalty exp(1 - 3/1)
    import math

    assert bleu1("cat", "the cat sat") == pytest.approx(math.exp(1 - 3))
    assert bleu1("dog", "cat") == 0.0  # no unigram in common


def test_membox_f1_alnum_tokens_no_stemming():
    # tokens: [7, may, 2023] vs [may, 7th, 2023]: 2 common -> f1 = 2/3
    assert score_membox("7 May 2023", "May 7th, 2023", 2)["f1"] == pytest.approx(2 / 3)
    assert score_membox("painting", "painted", 2)["f1"] == 0.0
    # category rules are locomo's only: membox scores category 1 and 3 golds whole
    assert score_membox("likely yes", "Likely yes; she loves hiking", 3)["f1"] < 1.0


def test_score_all_names_every_metric():
    got = score_all("Paris", "Paris", 4)
    assert list(got) == metric_names() == ["locomo_f1", "mem0_f1", "mem0_bleu1", "membox_f1"]
    assert all(v == pytest.approx(1.0) for v in got.values())
    assert score_all(2022, 2022, 2)["locomo_f1"] == 1.0  # integer golds (LoCoMo has some) are text
