"""Topic-segmentation evaluation: metrics, the online evaluator and every continuity judge, through the fakes."""
from __future__ import annotations

import json
import random

import pytest

from membox_local.backends.base import LabelResult, Usage
from membox_local.cli import main
from membox_local.config import load_config
from membox_local.evaluation.segmentation import (boundary_f1, boundary_string, evaluate, load_dialogues, pk, score,
                                                  window_size, windowdiff)
from membox_local.ingest import InputError
from membox_local.judges import (CONV_FEATURES, FEATURES, JUDGES, LM_FEATURES, conversation_features,
                                 likelihood_features, make_judge)
from membox_local.records import Message

from membox_local.testing import FakeBackend, FakeEmbedder

pytestmark = pytest.mark.numeric  # scores through BLAS: rerun on another kernel (make test-numeric)

GARDEN = ["I planted tomatoes in the garden today", "Nice, which tomatoes did you plant?",
          "Cherry tomatoes, the garden gets lots of sun", "Tomatoes love sun in a garden"]
CARS = ["My car broke down on the highway", "Oh no, did the car need a tow truck?",
        "Yes, the tow truck took the car to a mechanic"]


# ---- metrics ----------------------------------------------------------------------------------------
def test_boundary_string_marks_the_last_turn_of_each_segment():
    assert boundary_string([2, 4], 6) == "010100"
    assert boundary_string([], 3) == "000"


def test_window_size_is_half_the_mean_segment_length_at_least_two():
    assert window_size("0000000000") == 5  # 10 turns, 1 segment
    assert window_size("0100000000") == 2  # 10 / 2 / 2 = 2.5 -> 2 (round half to even, as nltk)
    assert window_size("0101") == 2  # 4 / 3 / 2 -> 1 -> at least 2


def test_metrics_hand_computed():
    ref, hyp = "00100", "01000"  # reference boundary one turn later than predicted
    # k=2 windows: ref same-segment? F T T F ; hyp F T T F shifted -> T T F F: disagree at 0 and 2
    assert pk(ref, hyp, 2) == pytest.approx(2 / 4)
    assert windowdiff(ref, hyp, 2) == pytest.approx(2 / 4)
    assert boundary_f1(ref, hyp) == 0.0
    assert (pk(ref, ref, 2), windowdiff(ref, ref, 2), boundary_f1(ref, ref)) == (0.0, 0.0, 1.0)
    # one right, one spurious: precision 1/2, recall 1 -> F1 2/3; WD counts the window holding two vs one
    assert boundary_f1("0100", "0110") == pytest.approx(2 / 3)
    assert windowdiff("010000", "011000", 2) == pytest.approx(2 / 5)
    assert boundary_f1("000", "000") == 0.0  # sklearn's zero_division convention
    s = score([3], [2], 5)
    assert s == {"pk": 0.5, "wd": 0.5, "f1": 0.0, "k": 2}
    with pytest.raises(ValueError, match="differ in length"):
        pk("010", "01", 2)


def test_metrics_agree_with_nltk():
    seg = pytest.importorskip("nltk.metrics.segmentation")
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(3, 40)
        ref = "".join(rng.choice("0001") for _ in range(n - 1)) + "0"
        hyp = "".join(rng.choice("001") for _ in range(n - 1)) + "0"
        k = min(window_size(ref), n)
        assert pk(ref, hyp, k) == pytest.approx(seg.pk(ref, hyp, k))
        assert windowdiff(ref, hyp, k) == pytest.approx(seg.windowdiff(ref, hyp, k))


# ---- data and the evaluator ---------------------------------------------------------------------------
def write_dataset(path, speakers=True):
    dialogues = [
        {"id": "d1", "turns": [{"speaker": ("AB"[i % 2] if speakers else None), "text": t}
                               for i, t in enumerate(GARDEN + CARS)], "boundaries": [4]},
        {"id": "d2", "turns": [{"speaker": None, "text": t} for t in CARS + GARDEN], "boundaries": [3]},
    ]
    path.write_text(json.dumps(dialogues))
    return path


@pytest.fixture
def seg_cfg():
    c = load_config("cpu", {"loom.judge": "embedding"})
    c.loom.threshold = 0.15
    return c


def test_load_dialogues_fills_missing_speakers_and_validates(tmp_path):
    ds = load_dialogues(write_dataset(tmp_path / "d.json", speakers=False))
    assert [m.speaker for m in ds[1].messages[:3]] == ["A", "B", "A"]
    assert {m.session for d in ds for m in d.messages} == {"1"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "x", "turns": [{"text": "a"}, {"text": "b"}], "boundaries": [0]}]))
    with pytest.raises(InputError, match=r"dialogue 0 \(x\): boundaries must be"):
        load_dialogues(bad)


def test_evaluator_scores_online_decisions(tmp_path, seg_cfg):
    ds = load_dialogues(write_dataset(tmp_path / "d.json"))
    ticks = []
    rows, summary = evaluate(seg_cfg, ds, embedder=FakeEmbedder(), progress=ticks.append)
    assert [r["hyp"] for r in rows] == [[4], [3]] and sum(ticks) == 14  # one progress tick per turn
    assert summary["pk"] == summary["wd"] == 0.0 and summary["f1"] == 1.0
    assert rows[0]["labels"][:2] == ["first", "min-context"]  # the Loom's own rule, min-context included
    assert rows[0]["labels"][5] == "min-context" and summary["messages"] == 14
    seg_cfg.loom.min_box_messages = 1
    rows1, _ = evaluate(seg_cfg, ds, embedder=FakeEmbedder())
    assert rows1[0]["labels"][1] in ("yes", "no")  # judged once the rule is off


def test_box_sizes_count_messages_per_opened_box():
    from membox_local.evaluation.segmentation import box_sizes
    from membox_local.judges import Decision

    opened, kept = Decision(False, "first"), Decision(True, "yes")
    assert box_sizes({"c": [opened, kept, kept, opened, kept]}) == {"c": 2.5}


def test_evaluator_has_no_look_ahead(tmp_path, seg_cfg):
    ds = load_dialogues(write_dataset(tmp_path / "d.json"))
    full, _ = evaluate(seg_cfg, ds[:1], embedder=FakeEmbedder())
    ds[0].messages = ds[0].messages[:5]
    ds[0].boundaries = [4]
    prefix, _ = evaluate(seg_cfg, ds[:1], embedder=FakeEmbedder())
    assert full[0]["labels"][:5] == prefix[0]["labels"]


def test_cli_writes_jsonl_summary_and_markdown(tmp_path, monkeypatch):
    import membox_local.embed as embed

    monkeypatch.setattr(embed, "make_embedder", lambda cfg: FakeEmbedder())
    data = write_dataset(tmp_path / "d.json")
    out = tmp_path / "out"
    rc = main(["eval", "segmentation", "--data", str(data), "--judge", "embedding", "--out", str(out),
               "--set", "loom.threshold=0.15", "--set", "loom.min_box_messages=1", "--limit", "1"])
    assert rc == 0
    rows = [json.loads(l) for l in (out / "dialogues.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(rows) == 1 and {"pk", "wd", "f1", "k", "hyp", "ref"} <= set(rows[0])
    assert summary["loom"]["min_box_messages"] == 1 and summary["dialogues"] == 1
    assert "| Pk | WD | F1 |" in (out / "summary.md").read_text()


def test_cli_names_the_judges_when_one_is_unknown(tmp_path, capsys):
    data = write_dataset(tmp_path / "d.json")
    assert main(["eval", "segmentation", "--data", str(data), "--judge", "psychic", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown continuity judge 'psychic'" in err and "llm-logprob" in err and "Traceback" not in err
    assert not (tmp_path / "summary.json").exists()


# ---- judges ---------------------------------------------------------------------------------------------
def drive(judge, recent, new, backend=None, embedder=None, earlier=()):
    """Run one judge step, answering its requests with the fakes; returns (decision, requests)."""
    from membox_local.requests import EmbedRequest

    embedder, backend = embedder or FakeEmbedder(), backend or FakeBackend()
    step, seen, value = judge.decide(recent, new, earlier), [], None
    while True:
        try:
            req = step.send(value)
        except StopIteration as stop:
            return stop.value, seen
        seen.append(req)
        value = embedder.encode(req.texts) if isinstance(req, EmbedRequest) else backend.run([req])[0]


def conv(texts):
    return [Message("c", str(i), "AB"[i % 2], t) for i, t in enumerate(texts)]


def judge_for(name, **loom):
    """configs/cpu.toml's [loom] with `name` as the judge and `loom` set; the hard-switch rule off unless set."""
    loom = {"switch_ratio": 0.0, **loom}
    cfg = load_config("cpu", {"loom.judge": name, **{f"loom.{k}": v for k, v in loom.items()}})
    return make_judge(cfg.loom)


def answer_pmi(context, m, backend):
    """The judge's own likelihood features of `m` after `context`, answered by `backend`: its lm_pmi."""
    step = likelihood_features(context, m, 2)
    req = next(step)
    try:
        while True:
            req = step.send(backend.score([req])[0])
    except StopIteration as stop:
        return stop.value["lm_pmi"]


def test_all_judges_are_registered():
    assert set(JUDGES) == {"embedding", "hybrid", "llm", "llm-logprob", "authors"}


@pytest.mark.parametrize("name,loom", [
    ("embedding", {"threshold": 0.15}),
    ("hybrid", {"weights": {"cos_window": 8.0, "rel_last": 1.0}, "bias": -1.0}),
    ("hybrid", {"weights": {"lm_pmi": 2.0}, "bias": -1.5}),
    ("llm", {}),
    ("llm-logprob", {"prob_threshold": 0.5}),
    ("authors", {}),
], ids=["embedding", "hybrid", "hybrid-lm", "llm", "llm-logprob", "authors"])
def test_each_judge_separates_continuation_from_shift(name, loom):
    judge = judge_for(name, **loom)
    box = conv(GARDEN[:3])
    # a third speaker: the fake backend counts the speaker's name as a shared word
    same, _ = drive(judge, box, Message("c", "3", "Cy", GARDEN[3]))
    shift, reqs = drive(judge, box, Message("c", "3", "Cy", CARS[0]))
    assert same.continues and not shift.continues
    if name in ("llm", "llm-logprob", "authors"):
        assert judge.uses_llm and all(r.stage == "judge" for r in reqs)
        assert reqs[0].logprobs == (name == "llm-logprob")
    if name in ("embedding", "hybrid", "llm-logprob"):
        assert 0 <= shift.score < same.score


def test_authors_judge_sees_only_the_two_previous_messages():
    _, reqs = drive(judge_for("authors"), conv(GARDEN + CARS[:2]), Message("c", "9", "A", CARS[2]))
    user = reqs[0].prompt.user
    assert CARS[0] in user and CARS[1] in user and GARDEN[3] not in user


def test_hybrid_features_and_weight_errors():
    judge = judge_for("hybrid", weights={"cos_last": 1.0})
    step = judge.features(conv(GARDEN[:3]), Message("c", "3", "B", GARDEN[3]))
    req = next(step)
    with pytest.raises(StopIteration) as stop:
        step.send(FakeEmbedder().encode(req.texts))
    feats = stop.value.value
    assert set(feats) == set(FEATURES) - set(LM_FEATURES) - set(CONV_FEATURES) - {"content", "ce_continue"} and feats["speaker_change"] == 1.0 and feats["last_question"] == 0.0
    assert feats["rel_last"] == pytest.approx(feats["cos_last"] - feats["cohesion"])
    with pytest.raises(ValueError, match="unknown hybrid feature"):
        judge_for("hybrid", weights={"vibes": 1.0})
    with pytest.raises(ValueError, match="needs \\[loom\\] weights"):
        judge_for("hybrid", weights={})


def test_hybrid_likelihood_features_score_the_new_line_after_the_box_and_alone():
    from membox_local.backends.base import ScoreRequest
    from membox_local.prompts import DIALOGUE_HEADER

    judge = judge_for("hybrid", weights={"cos_window": 1.0, "lm_pmi": 1.0})
    assert judge.uses_llm and not judge_for("hybrid", weights={"cos_window": 1.0, "lm_pmi": 0.0}).uses_llm
    box, new = conv(GARDEN[:3]), Message("c", "3", "Cy", GARDEN[3])
    decision, reqs = drive(judge, box, new)
    after_box, alone = reqs[1:]
    line = f"Cy: {GARDEN[3]}\n"
    assert after_box == ScoreRequest(f"{DIALOGUE_HEADER}B: {GARDEN[1]}\nA: {GARDEN[2]}\n", line, "judge")
    assert alone == ScoreRequest(DIALOGUE_HEADER, line, "judge")
    # the fake backend: 1 nat per word the context has, 4 per other word; 7 words, 4 of them in the box's lines
    step = judge.features(box, new)
    next(step)
    next_req = step.send(FakeEmbedder().encode([m.text for m in box + [new]]))
    lp = FakeBackend().score([next_req, alone])
    step.send(lp[0])
    with pytest.raises(StopIteration) as stop:
        step.send(lp[1])
    feats = stop.value.value
    assert feats["lm_pmi"] == pytest.approx((-16 + 25) / 7) and feats["lm_cond"] == pytest.approx(-16 / 7)
    assert feats["lm_pmi_low"] == 1.0  # min(lm_pmi, lm_knot = 1.0)


def test_conversation_features_compare_with_the_conversations_own_level():
    qs = conv(["Which train?", "The 9:15.", "How long is it?", "Two hours."])  # half of them questions
    new, last = Message("c", "4", "A", "Do you need a taxi too?"), qs[-1]
    f = conversation_features(qs, new, last)
    assert f["new_question_conv"] == pytest.approx(0.5) and f["last_question_conv"] == pytest.approx(-0.5)
    import math
    assert f["len_new_conv"] == pytest.approx(math.log1p(6) - math.log1p(2))  # 6 words; median of 2, 2, 4, 2
    # fewer than three earlier messages: the prior question rate, lengths against the new message itself
    f = conversation_features(qs[:2], new, last)
    assert f["new_question_conv"] == pytest.approx(1 - 0.35) and f["len_new_conv"] == 0.0


def test_hybrid_conversation_pmi_is_against_the_earlier_messages_median_and_reuses_their_scores():
    from membox_local.backends.base import ScoreRequest

    judge = judge_for("hybrid", weights={"lm_pmi_conv": 1.0}, history=4)
    assert judge.uses_llm and judge.history == 4 + 2  # each earlier message's PMI needs its two predecessors
    assert judge_for("hybrid", weights={"lm_pmi": 1.0}).history == 0
    assert judge_for("hybrid", weights={"new_question_conv": 1.0}, history=4).history == 4  # no PMIs to score
    texts = GARDEN + CARS
    msgs = conv(texts)
    backend = FakeBackend()
    decision, reqs = drive(judge, msgs[4:6], msgs[6], backend=backend, earlier=msgs[:6])
    scores = [r for r in reqs if isinstance(r, ScoreRequest)]
    # the new line (after the box and alone), then messages 2..5, each after its two predecessors and alone
    assert len(scores) == 2 + 2 * 4
    pmis = [answer_pmi(msgs[j - 2:j], msgs[j], backend) for j in range(2, 7)]
    import numpy as np
    expected = pmis[-1] - float(np.median(pmis[:-1]))
    feats = judge.probability({"lm_pmi_conv": expected})
    assert decision.score == pytest.approx(feats)
    # the next message: its earlier messages' PMIs are remembered, only its own two scores are requested
    _, reqs = drive(judge, msgs[4:7], Message("c", "7", "B", "The mechanic fixed the car"), backend=backend,
                    earlier=msgs[:7])
    assert sum(isinstance(r, ScoreRequest) for r in reqs) == 2
    with pytest.raises(ValueError, match="at least 3 earlier messages"):
        judge_for("hybrid", weights={"len_new_conv": 1.0}, history=2)


def test_hybrid_pmi_ratio_is_against_the_conversations_median_pmi_with_a_floor():
    import math

    import numpy as np

    from membox_local.backends.base import ScoreResult, Usage
    from membox_local.judges import PMI_FLOOR
    from membox_local.prompts import DIALOGUE_HEADER

    judge = judge_for("hybrid", weights={"lm_pmi_ratio": 1.0}, bias=-0.4, history=4)
    assert judge.uses_llm and judge.uses_conversation and judge.history == 4 + 2
    sigmoid = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    msgs = conv(GARDEN + CARS)
    backend = FakeBackend()
    decision, _ = drive(judge, msgs[4:6], msgs[6], backend=backend, earlier=msgs[:6])
    pmis = [answer_pmi(msgs[j - 2:j], msgs[j], backend) for j in range(2, 7)]
    level = float(np.median(pmis[:-1]))
    assert level > PMI_FLOOR and decision.score == pytest.approx(sigmoid(-0.4 + pmis[-1] / level))
    # fewer than three earlier PMIs: neutral (1.0), the judge continues
    decision, _ = drive(judge, msgs[:2], msgs[2], backend=backend, earlier=msgs[:2])
    assert decision.score == pytest.approx(sigmoid(-0.4 + 1.0)) and decision.continues

    class Flat(FakeBackend):  # every line 0.1 nat per token likelier after its context: below the floor
        def score_batch(self, requests):
            return [ScoreResult(-(1.1 if r.context == DIALOGUE_HEADER else 1.0) * 5, 5, Usage(r.stage, 0, 0))
                    for r in requests]

    judge = judge_for("hybrid", weights={"lm_pmi_ratio": 1.0}, bias=-0.4, history=4)
    decision, _ = drive(judge, msgs[4:6], msgs[6], backend=Flat(), earlier=msgs[:6])
    assert decision.score == pytest.approx(sigmoid(-0.4 + 0.1 / PMI_FLOOR)) and not decision.continues


def test_the_switch_config_is_a_ratio_threshold():
    cfg = load_config("cpu-switch")
    judge = make_judge(cfg.loom)
    assert cfg.loom.judge == "hybrid" and judge.weights == {"lm_pmi_ratio": 1.0} and judge.uses_llm
    assert 0 < -cfg.loom.bias < 1  # opens a box below that fraction of the conversation's median PMI


def write_vector(path, vec):
    """A content vector file without an 'embedder' field: not checked against the config's embedder."""
    path.write_text(json.dumps({"vector": [float(x) for x in vec]}))
    return str(path)


def test_hybrid_content_feature_is_the_fitted_vector_against_the_new_message(tmp_path):
    import numpy as np

    new = Message("c", "3", "B", "Do you like cars?")
    vec = FakeEmbedder().encode([CARS[0]])[0]  # "what a topic-opening line looks like": the car words
    judge = judge_for("hybrid", weights={"content": -4.0}, bias=1.0,
                      content_vector=write_vector(tmp_path / "v.json", vec))
    assert not judge.uses_llm
    step = judge.features(conv(GARDEN[:3]), new)
    req = next(step)
    vecs = FakeEmbedder().encode(req.texts)
    with pytest.raises(StopIteration) as stop:
        step.send(vecs)
    assert stop.value.value["content"] == pytest.approx(float(np.dot(vec, vecs[-1])))
    # a car line scores high on the vector and opens a box; a garden line does not
    assert not drive(judge, conv(GARDEN[:3]), Message("c", "3", "B", CARS[0]))[0].continues
    assert drive(judge, conv(GARDEN[:3]), Message("c", "3", "B", GARDEN[3]))[0].continues


def test_hybrid_content_vector_errors_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="needs \\[loom\\] content_vector"):
        judge_for("hybrid", weights={"content": 1.0}, content_vector="")
    with pytest.raises(ValueError, match="not found"):
        judge_for("hybrid", weights={"content": 1.0}, content_vector=str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text('{"weights": [1, 2]}')
    with pytest.raises(ValueError, match="needs a JSON object with a list 'vector'"):
        judge_for("hybrid", weights={"content": 1.0}, content_vector=str(tmp_path / "bad.json"))
    judge = judge_for("hybrid", weights={"content": 1.0}, content_vector=write_vector(tmp_path / "v.json", [1.0] * 10))
    with pytest.raises(ValueError, match="has 10 dimensions, the embedder gives 384"):
        drive(judge, conv(GARDEN[:3]), Message("c", "3", "B", GARDEN[3]))
    # a vector fitted for one embedder is refused beside another, when the config is loaded
    from membox_local.config import ConfigError
    with pytest.raises(ConfigError, match="fitted for the embedder 'all-minilm-l6-v2', the config uses 'other-model'"):
        load_config("cpu", {"embedder.model": "other-model"})
    assert load_config("cpu", {"embedder.model": "other-model", "loom.weights": {"cos_last": 1.0}})
    # a zero weight leaves the vector unread
    assert judge_for("hybrid", weights={"cos_last": 1.0, "content": 0.0}, content_vector="").content is None


def test_hybrid_switch_rule_opens_a_box_below_the_pmi_ratio_whatever_the_logistic_says():
    from membox_local.backends.base import ScoreResult, Usage
    from membox_local.prompts import DIALOGUE_HEADER

    class Flat(FakeBackend):  # every line 0.1 nat per token likelier after its context: ratio 0.1 / PMI_FLOOR
        def score_batch(self, requests):
            return [ScoreResult(-(1.1 if r.context == DIALOGUE_HEADER else 1.0) * 5, 5, Usage(r.stage, 0, 0))
                    for r in requests]

    msgs = conv(GARDEN + CARS)
    sure = {"weights": {"cos_last": 1.0}, "bias": 10.0, "history": 4}  # the logistic always continues
    judge = judge_for("hybrid", switch_ratio=0.4, **sure)
    assert judge.uses_llm and judge.uses_conversation and judge.history == 4 + 2
    decision, _ = drive(judge, msgs[4:6], msgs[6], backend=Flat(), earlier=msgs[:6])
    assert not decision.continues and decision.label == "switch" and decision.score > 0.99
    assert drive(judge_for("hybrid", switch_ratio=0.3, **sure), msgs[4:6], msgs[6], backend=Flat(),
                 earlier=msgs[:6])[0].continues  # 0.1 / 0.3 = 0.33 is not below 0.3
    off = judge_for("hybrid", **sure)
    assert not off.uses_llm and drive(off, msgs[4:6], msgs[6], earlier=msgs[:6])[0].continues


def test_the_cpu_default_judge_reads_content_with_its_embedder_and_switches_on_the_ratio():
    cfg = load_config("cpu")
    judge = make_judge(cfg.loom)
    assert cfg.loom.judge == "hybrid" and judge.weights["content"] and judge.uses_llm
    assert 0 < cfg.loom.switch_ratio < 1
    import numpy as np
    assert np.linalg.norm(judge.content) == pytest.approx(1.0, abs=1e-3)
    from membox_local.config import CONFIG_DIR
    meta = json.loads((CONFIG_DIR / cfg.loom.content_vector).read_text())
    assert meta["embedder"] == cfg.embedder.model and meta["dim"] == len(judge.content) == 384
    # fitted by `membox fit content --write` (the committed vector: by its predecessor script)
    assert meta["command"].startswith("membox fit content") or "segmentation_content.py" in meta["command"]


def test_hybrid_conversation_pmi_skips_messages_after_a_session_change():
    from membox_local.backends.base import ScoreRequest

    judge = judge_for("hybrid", weights={"lm_pmi_conv": 1.0}, history=10)
    msgs = [Message("c", str(i), "AB"[i % 2], t, "1" if i < 4 else "2") for i, t in enumerate(GARDEN + CARS)]
    _, reqs = drive(judge, msgs[4:6], msgs[6], earlier=msgs[:6])
    # messages 2 and 3 (session 1) have their own predecessors; 4 and 5 follow a session change
    assert sum(isinstance(r, ScoreRequest) for r in reqs) == 2 + 2 * 2


def test_hybrid_with_likelihood_weights_needs_a_backend_that_scores():
    from membox_local.backends.base import BackendError

    class NoScores(FakeBackend):
        name = "noscores"

        def score_batch(self, requests):
            return super(FakeBackend, self).score_batch(requests)  # the base class: refuses

    with pytest.raises(BackendError, match="cannot score text"):
        drive(judge_for("hybrid", weights={"lm_pmi": 1.0}), conv(GARDEN[:2]), Message("c", "2", "A", GARDEN[2]),
              backend=NoScores())


def test_logprob_judge_refuses_a_backend_without_probabilities():
    from membox_local.backends.base import BackendError

    class NoProbs(FakeBackend):
        def label_batch(self, requests):
            return [LabelResult("yes", Usage(r.stage, 1, 1), None) for r in requests]

    with pytest.raises(BackendError, match="needs label probabilities"):
        drive(judge_for("llm-logprob"), conv(GARDEN[:2]), Message("c", "2", "A", GARDEN[2]), backend=NoProbs())
