"""The hybrid judge's weights: teacher-forced feature states, a logistic regression over a feature set, and
the knot of lm_pmi_low chosen by validation AUC."""
from __future__ import annotations

import copy
import sys

import numpy as np

from ..backends.base import Backend
from ..config import CE_FEATURES, CONV_FEATURES, FEATURES, LM_FEATURES
from .cache import LookupEmbedder, answer
from .measure import with_loom

FEATURE_SETS = {
    "cos": ["cos_last", "cos_prev", "cos_window", "cos_box"],
    "cos+rel": ["cos_last", "cos_prev", "cos_window", "cos_box", "cohesion", "rel_last", "rel_window", "max_box"],
    "cos+rel+context": ["cos_last", "cos_prev", "cos_window", "cos_box", "cohesion", "rel_last", "rel_window",
                        "max_box", "last_question", "box_age"],
    # speakers alternate in TIAGE
    "all": [f for f in FEATURES if f not in ("speaker_change", "content") + CE_FEATURES + LM_FEATURES + CONV_FEATURES],
    "all-noage": [f for f in FEATURES
                  if f not in ("speaker_change", "box_age", "content") + CE_FEATURES + LM_FEATURES + CONV_FEATURES],
    # "all" with its question and length cues taken against the conversation's own level (*_conv)
    "conv": [f for f in FEATURES if f not in ("speaker_change", "new_question", "last_question", "len_new", "len_last",
                                              "content") + CE_FEATURES + LM_FEATURES + CONV_FEATURES] + ["new_question_conv", "last_question_conv", "len_new_conv", "len_last_conv"],
}
# with the continuity cross-encoder's logit (`membox fit hybrid --ce`)
CE_FEATURE_SETS = {"ce": ["ce_continue"], "cos+ce": FEATURE_SETS["cos"] + ["ce_continue"],
                   "conv+ce": FEATURE_SETS["conv"] + ["ce_continue"],
                   "conv+ce_conv": FEATURE_SETS["conv"] + ["ce_continue", "ce_conv_low"]}
LM_FEATURE_SETS = {
    "lm": ["lm_pmi", "lm_cond", "lm_pmi_low"],
    "cos+lm": FEATURE_SETS["cos"] + ["lm_pmi", "lm_cond", "lm_pmi_low"],
    "cos+rel+lm": FEATURE_SETS["cos+rel"] + ["lm_pmi", "lm_cond", "lm_pmi_low"],
    "all+lm": FEATURE_SETS["all"] + ["lm_pmi", "lm_cond", "lm_pmi_low"],
    # every cue against the conversation's own level, the model's PMI included
    "conv+lm": FEATURE_SETS["conv"] + ["lm_pmi_conv", "lm_pmi_conv_low"],
}


def teacher_forced(dialogues, emb: LookupEmbedder, lc, min_box: int, scorer: Backend | None = None,
                   vectors: bool = False, ce: bool = False):
    """(features, continues) for every turn judged with the reference segment so far as the open box and the
    dialogue's earlier turns as its history, computed by the hybrid judge's own code (`lc`: a LoomConfig; its
    window, history and lm_knot). Likelihood features (lm_*) come from `scorer`; without one they are 0.
    With `vectors`, also each judged message's embedding (what the `content` feature reads); with `ce`, the
    cross-encoder of lc.ce_model gives `ce_continue` (0 without)."""
    from ..judges import HybridJudge

    lc = copy.deepcopy(lc)
    lc.switch_ratio = lc.ce_switch = 0.0
    # every feature but `content`, which needs a fitted vector (`membox fit content` adds it)
    # and `ce_continue` only with a cross-encoder ([loom] ce_model), so that a fit without one runs as before
    lc.weights = {f: 1.0 for f in FEATURES if f != "content" and (scorer is not None or f not in LM_FEATURES)
                  and (f not in CE_FEATURES or ce)}
    judge = HybridJudge(lc)
    X, y, V = [], [], []
    for d in dialogues:
        starts = set(d.boundaries)
        seg_start = 0
        for i in range(1, len(d.messages)):
            if i - seg_start >= min_box:
                f = answer(judge.features(d.messages[seg_start:i], d.messages[i],
                                          d.messages[max(0, i - judge.history):i]), scorer, emb)
                X.append([f.get(k, 0.0) for k in FEATURES])
                y.append(i not in starts)
                if vectors:
                    V.append(emb.encode([d.messages[i].text])[0])
            if i in starts:
                seg_start = i
    X, y = np.array(X, dtype=np.float64), np.array(y, dtype=int)
    return (X, y, np.array(V, dtype=np.float64)) if vectors else (X, y)


def fit_logistic(X: np.ndarray, y: np.ndarray, names: list[str], C: float = 1.0) -> tuple[dict[str, float], float]:
    from sklearn.linear_model import LogisticRegression

    cols = [FEATURES.index(n) for n in names]
    Xs = X[:, cols]
    mu, sd = Xs.mean(axis=0), Xs.std(axis=0) + 1e-9
    clf = LogisticRegression(C=C, max_iter=2000).fit((Xs - mu) / sd, y)
    w = clf.coef_[0] / sd
    b = float(clf.intercept_[0] - np.sum(clf.coef_[0] * mu / sd))
    return {n: round(float(v), 4) for n, v in zip(names, w)}, round(b, 4)


def choose_knot(cfg, fit_on, val, emb, scorer, report) -> float:
    """lm_knot for lm_pmi_low: the all+lm logistic fitted on teacher-forced `fit_on` states with each knot;
    the best ROC AUC on teacher-forced `val` states wins (TIAGE only)."""
    from sklearn.metrics import roc_auc_score

    aucs = {}
    for knot in (0.5, 0.75, 1.0, 1.25, 1.5):
        lc = with_loom(cfg, lm_knot=knot).loom
        X, y = teacher_forced(fit_on, emb, lc, 2, scorer)
        Xv, yv = teacher_forced(val, emb, lc, 2, scorer)
        names = LM_FEATURE_SETS["all+lm"]
        w, b = fit_logistic(X, y, names)
        z = Xv[:, [FEATURES.index(n) for n in names]] @ np.array([w[n] for n in names]) + b
        aucs[knot] = round(float(roc_auc_score(yv, z)), 4)
    best = max(aucs, key=aucs.get)
    report["knot"] = {"auc_by_knot": {str(k): v for k, v in aucs.items()}, "chosen": best}
    print(f"lm_knot: validation AUC by knot {aucs}; chosen {best}", file=sys.stderr, flush=True)
    return best
