"""The fits' score cache and batch order (membox_local/fit/cache.py), and the content fit's model
(membox_local/fit/content.py), through the fakes."""
from __future__ import annotations

from membox_local.config import load_config
from membox_local.fit.cache import ScoreCache, judge_order, precompute_scores, score_order, step_requests
from membox_local.judges import likelihood_features
from membox_local.records import Message
from membox_local.testing import FakeBackend

LINES = ["I planted tomatoes today", "Which ones?", "Cherry tomatoes", "They love sun", "My car broke down",
         "Did it need a tow?", "Yes, a tow truck came"]


def messages(lines=LINES) -> list[Message]:
    return [Message("c", str(i), "AB"[i % 2], t, session="s1") for i, t in enumerate(lines)]


def full(req) -> str:
    return req.context + req.continuation


def test_score_order_asks_the_judges_requests_each_prefix_right_before_the_request_it_starts():
    msgs, window = messages(), 2
    per = judge_order(msgs, window)
    assert per == [step_requests(likelihood_features(msgs[i - window:i], msgs[i], window))
                   for i in range(window, len(msgs))]
    order = score_order(msgs, window)
    assert sorted(map(repr, order)) == sorted(repr(r) for reqs in per for r in reqs)
    # message i's request after its window follows the bare-header request of message i - window, which it extends
    for i in range(2 * window, len(msgs)):
        after_window = per[i - window][0]
        k = order.index(after_window)
        assert order[k - 1] == per[i - 2 * window][1] and full(after_window).startswith(full(order[k - 1]))
    assert score_order(msgs[:3], window) == per[0] == judge_order(msgs[:3], window)[0]  # one judged message
    assert score_order(msgs[:2], window) == []


def test_score_cache_keeps_no_text_and_answers_a_rerun_without_the_model(tmp_path, capsys):
    cfg, fake, path = load_config("cpu"), FakeBackend(), tmp_path / "scores.tsv"
    msgs = messages()
    precompute_scores([msgs], ScoreCache(cfg, path, backend=fake), 2, "test")
    asked = [r for reqs in judge_order(msgs, 2) for r in reqs]
    assert len(fake.calls) == len({repr(r) for r in asked})  # each distinct request scored once
    text = path.read_text()
    assert not any(line in text for line in LINES) and "tomatoes" not in text
    again = ScoreCache(cfg, path, backend=None)  # no model: a miss would try to load the config's LLM
    assert all(r in again for r in asked)
    assert [x.logprob for x in again.score(asked)] == [x.logprob for x in fake.score(asked)]
    # a row cut short by a killed run is reported and scored again, not silently mistaken for a score
    rows = text.splitlines()
    path.write_text("\n".join(rows[:-1] + [rows[-1].rsplit("\t", 1)[0]]) + "\n")
    cut = ScoreCache(cfg, path, backend=fake)
    assert "malformed row" in capsys.readouterr().err and len(cut.table) == len(again.table) - 1


def test_the_content_fit_gives_constant_embedding_dimensions_no_weight_and_keeps_the_logit():
    """`membox fit content`: the fitted model in the features' own units reproduces the standardised
    model's logit, and a dimension that never varies (MiniLM has a few) gets weight 0, not 1e9."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from membox_local.config import FEATURES
    from membox_local.fit.content import CUES, content_logit, fit_content

    rng = np.random.default_rng(0)
    n = 400
    X = np.zeros((n, len(FEATURES)))
    X[:, [FEATURES.index(f) for f in CUES]] = rng.normal(size=(n, len(CUES)))
    V = rng.normal(size=(n, 6))
    V[:, 2] = 0.25  # constant
    y = (X[:, FEATURES.index("cos_last")] + V[:, 0] + rng.normal(scale=0.5, size=n) > 0).astype(int)
    ws, wn, b = fit_content(X, y, V, C=1.0)
    assert wn[2] == 0 and np.all(np.isfinite(wn)) and wn[0] > 0 and ws[CUES.index("cos_last")] > 0
    A = np.hstack([X[:, [FEATURES.index(f) for f in CUES]], np.delete(V, 2, axis=1)])
    mu, sd = A.mean(axis=0), A.std(axis=0)
    ref = LogisticRegression(C=1.0, max_iter=5000).fit((A - mu) / sd, y).decision_function((A - mu) / sd)
    assert np.allclose(content_logit((ws, wn, b), X, V), ref, atol=1e-6)
