"""The continuity cross-encoder (membox_local/continuity.py) as the hybrid judge's `ce_continue` feature, its fit
(`membox fit crossencoder`, `membox fit content --ce`) and the cheaper link verification's keys; through the
doubles, plus integration tests that load the committed weights and train on a tiny slice with the real MiniLM."""
from __future__ import annotations

import copy
import json

import pytest

from membox_local import continuity
from membox_local.config import ConfigError, load_config
from membox_local.fit import cache
from membox_local.fit.cache import answer
from membox_local.judges import make_judge
from membox_local.records import Message
from membox_local.testing import FakeBackend, FakeContinuityScorer, FakeEmbedder

COMMITTED = continuity.CONFIG_DIR / "content" / "ce-tiage-all-minilm-l6-v2.safetensors"


def msg(i: int, text: str, speaker: str = "A", session: str = "1") -> Message:
    return Message("c", str(i), speaker, text, session, "", i)


GARDEN = [msg(0, "I planted tomatoes in the garden"), msg(1, "Tomatoes need sunshine and watering", "B"),
          msg(2, "My garden soil is full of compost")]
CONTINUES = msg(3, "Compost makes the tomatoes grow in the garden soil", "B")
SWITCHES = msg(3, "Did you watch the football final last night?", "B")


@pytest.fixture
def fake_ce(monkeypatch):
    monkeypatch.setitem(continuity.MODELS, "scorer", FakeContinuityScorer)
    monkeypatch.setattr(continuity, "_LOADED", {})


def ce_loom(**kw):
    lc = copy.deepcopy(load_config("cpu").loom)
    lc.weights, lc.bias, lc.switch_ratio = {"ce_continue": 1.0}, 0.0, 0.0
    for k, v in kw.items():
        setattr(lc, k, v)
    return lc


def test_pair_text_keeps_the_context_end_and_the_new_line_start():
    long = msg(0, " ".join(f"w{i}" for i in range(200)))
    ctx, new = continuity.pair_text([GARDEN[0], long], long)
    assert ctx.startswith(GARDEN[0].text) and ctx.endswith("w199")
    assert len(ctx.split(" [SEP] ")[1].split()) == continuity.CONTEXT_WORDS
    assert new.split()[0] == "w0" and len(new.split()) == continuity.NEW_WORDS


def test_hybrid_with_the_cross_encoder_makes_no_llm_call(fake_ce):
    judge = make_judge(ce_loom())
    assert not judge.uses_llm and judge.history == 0
    backend = FakeBackend()  # any model request would land here
    keep = answer(judge.decide(GARDEN, CONTINUES), backend, FakeEmbedder())
    new = answer(judge.decide(GARDEN, SWITCHES), backend, FakeEmbedder())
    assert keep.continues and not new.continues and keep.score > new.score
    assert backend.calls == []
    # the feature reads the box's last `window` lines only, as the training pairs did
    feats = answer(judge.features(GARDEN, CONTINUES), backend, FakeEmbedder())
    assert feats["ce_continue"] == judge.ce.score([continuity.pair_text(GARDEN[-2:], CONTINUES)])[0]


def test_the_cross_encoder_switch_rule_reads_the_logit_against_the_conversations_median(fake_ce):
    earlier = GARDEN + [msg(3, "The garden tomatoes need compost", "B"), msg(4, "Compost and soil for the garden")]
    judge = make_judge(ce_loom(weights={"ce_continue": 0.0}, bias=10.0, ce_switch=2.0))
    assert judge.history == judge.cfg.history + judge.cfg.window and not judge.uses_llm
    box = earlier[-2:]
    keep = answer(judge.decide(box, msg(5, "Tomatoes love garden compost"), earlier), None, FakeEmbedder())
    switch = answer(judge.decide(box, msg(5, "Did you watch the football final?"), earlier), None, FakeEmbedder())
    assert keep.continues and (switch.continues, switch.label) == (False, "switch")
    feats = answer(judge.features(box, msg(5, "Did you watch the football final?"), earlier), None, FakeEmbedder())
    assert feats["ce_conv"] < -2.0 and feats["ce_conv_low"] == feats["ce_conv"]
    # neutral until the conversation has a level
    feats = answer(judge.features(GARDEN[:2], msg(2, "Did you watch the football final?"), GARDEN[:2]), None,
                   FakeEmbedder())
    assert feats["ce_conv"] == 0.0


def test_the_scorer_is_loaded_once_per_process(fake_ce):
    assert make_judge(ce_loom()).ce is make_judge(ce_loom()).ce


def test_a_cross_encoder_weight_without_its_file_is_one_config_error(fake_ce, tmp_path):
    with pytest.raises(ConfigError, match="ce_model"):
        make_judge(ce_loom(ce_model=str(tmp_path / "missing.safetensors")))
    with pytest.raises(ConfigError, match="ce_model"):
        make_judge(ce_loom(ce_model=""))
    bogus = tmp_path / "bogus.safetensors"
    bogus.write_bytes(b"not a weights file")
    with pytest.raises(ConfigError, match="not a cross-encoder weights file"):
        load_config("cpu", {"loom.weights": {"ce_continue": 1.0}, "loom.ce_model": str(bogus)})


def test_cpu_ce_config_asks_no_llm_call(fake_ce):
    cfg = load_config("cpu-ce")
    judge = make_judge(cfg.loom)
    assert "ce_continue" in cfg.loom.weights and cfg.loom.switch_ratio == 0.0 and not judge.uses_llm


def test_training_pairs_label_shifts_and_add_joins():
    from membox_local.evaluation.segmentation import Dialogue
    from membox_local.fit.crossencoder import JOIN_OFFSETS, training_pairs

    dials = [Dialogue(f"d{k}", [msg(i, f"line {k} {i}") for i in range(6)], [3]) for k in range(9)]
    pairs = training_pairs(dials)
    inside = [p for p in pairs[:4]]  # dialogue 0: turns 2..5
    assert [y for _, y in inside] == [1, 0, 1, 1]
    assert inside[1][0] == ("line 0 1 [SEP] line 0 2", "line 0 3")
    joins = pairs[9 * 4:]
    assert len(joins) == sum(9 - off for off in JOIN_OFFSETS) and all(y == 0 for _, y in joins)
    assert joins[0][0] == ("line 0 4 [SEP] line 0 5", "line 1 0")
    assert len(training_pairs(dials, joins=False)) == 9 * 4


def test_longmemeval_sessions_are_distinct_dialogues_without_shifts(tmp_path):
    """`fit crossencoder --longmemeval`: each distinct session once (a session two histories share is one
    dialogue), drawn by a seeded shuffle, no annotated shift inside: its turns continue, joins are the switches."""
    from membox_local.fit.crossencoder import training_pairs
    from membox_local.fit.data import longmemeval_sessions
    from tests.test_longmemeval import session

    def rec(qid, sids, sessions):
        return {"question_id": qid, "question_type": "single-session-user", "question": "?", "answer": "a",
                "question_date": "2023/06/01 (Thu) 10:00", "haystack_session_ids": sids,
                "haystack_dates": ["2023/05/10 (Wed) 09:30"] * len(sids), "haystack_sessions": sessions,
                "answer_session_ids": []}

    shared = session("I need a train to Leeds.", "Which day?", "Friday morning.", "The 9:10 leaves from platform 2.")
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([
        rec("q1", ["s-shared", "s-a"], [shared, session("Recommend a pasta recipe.", "Try carbonara.", "Thanks!")]),
        rec("q2", ["s-b", "s-shared"], [session("My dog is a beagle.", "Beagles love walks."), shared])]))
    dials = longmemeval_sessions(path, 10)
    assert sorted(d.id for d in dials) == ["s-a", "s-b", "s-shared"]
    assert all(d.boundaries == [] for d in dials)
    assert [m.text for m in next(d for d in dials if d.id == "s-shared").messages] == [t["content"] for t in shared]
    assert [d.id for d in longmemeval_sessions(path, 10)] == [d.id for d in dials]  # the draw is seeded
    assert len(longmemeval_sessions(path, 2)) == 2
    pairs = training_pairs(dials)
    inside = sum(len(d.messages) - 2 for d in dials)
    assert [y for _, y in pairs[:inside]] == [1] * inside and [y for _, y in pairs[inside:]] == [0] * 2


def test_fit_content_ce_stacks_the_cross_encoder_out_of_fold(tmp_path, monkeypatch, capsys, fake_ce):
    """`membox fit content --ce` on the tiny data of tests/test_fit.py: needs both cross-encoders (loud when one is
    missing), checks the content vector against the committed one, and chooses a judge with a ce_continue weight
    and no switch rule."""
    from membox_local.cli import main
    from membox_local.fit import content
    from tests.test_fit import write_data

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(cache.MODELS, "embedder", lambda cfg: FakeEmbedder())
    monkeypatch.setitem(cache.MODELS, "backend", lambda cfg: FakeBackend())
    write_data(tmp_path / "data")
    folder = tmp_path / "configs" / "content"
    monkeypatch.setattr(content, "CONTENT_DIR", folder)
    args = ["fit", "content", "--data-dir", "data", "--cache-dir", "cache", "--lm-fold", "4",
            "--compare", "cpu-minilm"]
    assert main(args + ["--write"]) == 0  # the content vector that --ce checks against
    assert main(args + ["--ce"]) == 2 and "membox fit crossencoder --write" in capsys.readouterr().err
    folder.joinpath("ce-tiage-all-minilm-l6-v2.safetensors").write_bytes(b"final")  # the double reads no bytes
    (tmp_path / "runs/segmentation/ce-tiage-all-minilm-l6-v2-skip4.safetensors").write_bytes(b"held out")
    capsys.readouterr()
    assert main(args + ["--ce"]) == 0
    report = json.loads((tmp_path / "runs/segmentation/content-ce.json").read_text())
    loom = report["chosen"]["loom"]
    assert loom["switch_ratio"] == 0.0 and "ce_continue" in loom["weights"] and "lm_pmi_conv" not in loom["weights"]
    assert 'ce_model = "content/ce-tiage-all-minilm-l6-v2.safetensors"' in capsys.readouterr().out


# ---- the cheaper link verification --------------------------------------------------------------
def test_link_calls_show_only_voters_cut_and_bounded(tmp_path):
    from tests.test_weaver import Bench

    cfg = load_config("cpu")
    cfg.weaver.vote_threshold = 0.15
    bench = Bench(tmp_path, cfg)
    try:
        bench.weave(bench.box("1", ["Ann planted tomatoes in her garden", "Ann bought a red bicycle"]))
        bench.weave(bench.box("2", ["Ann watered the tomatoes in her garden", "Ann repaired the bicycle brakes"]))
        full = bench.prompts("link")
        cfg.weaver.link_voters_only, cfg.weaver.link_event_chars, cfg.weaver.shown_trace_events = True, 24, 1
        bench.weave(bench.box("3", ["Ann harvested tomatoes from the garden today", "Ben went to the cinema"]))
        cheap = bench.prompts("link")[len(full):]
    finally:
        bench.store.close()
    assert cheap, "the tomato event votes for its trace"
    for p in cheap:
        text = str(p)
        assert "cinema" not in text  # not a voter of the tomato trace
        assert "Ann harvested tomatoes from…" in text or "Ann harvested tomatoes…" in text
        assert text.count("\n- ") <= 1  # one trace event shown


# ---- the real model ----------------------------------------------------------------------------
@pytest.mark.integration
def test_committed_cross_encoder_ranks_a_continuation_above_a_switch():
    continuity._LOADED.clear()
    scorer = continuity.continuity_scorer(str(COMMITTED))
    assert scorer.meta["base"] == "all-minilm-l6-v2" and "TIAGE train" in scorer.meta["fitted_on"]
    assert COMMITTED.stat().st_size < 3_000_000
    ctx = GARDEN[-2:]
    keep, switch = scorer.score([continuity.pair_text(ctx, CONTINUES), continuity.pair_text(ctx, SWITCHES)])
    assert keep > switch
    again = scorer.score([continuity.pair_text(ctx, SWITCHES)])[0]
    assert again == switch  # cached


@pytest.mark.integration
def test_fit_crossencoder_trains_on_a_tiny_slice(tmp_path, monkeypatch, capsys):
    from membox_local.cli import main
    from tests.test_fit import write_data

    monkeypatch.chdir(tmp_path)
    write_data(tmp_path / "data")
    assert main(["fit", "crossencoder", "--data-dir", "data", "--train-limit", "3", "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    info = json.loads(out[out.index("{"):])
    path = tmp_path / "runs/segmentation/ce-tiage-all-minilm-l6-v2.safetensors"
    assert info["train_pairs"] > 0 and info["train_seconds"] > 0 and 0 <= info["tiage_dev_pair_auc"] <= 1
    assert path.stat().st_size < 3_000_000
    continuity._LOADED.clear()
    scorer = continuity.continuity_scorer(str(path))
    assert scorer.meta["epochs"] == 1 and len(scorer.score([("a b", "c d")])) == 1


@pytest.mark.integration
def test_a_new_line_longer_than_the_pair_is_scored():
    """A LongMemEval assistant turn: 64 words of URLs run past the pair's 128 word pieces on their own (the
    tokenizer refused such a pair: "Sequence to truncate too short to respect the provided max_length")."""
    continuity._LOADED.clear()
    scorer = continuity.continuity_scorer(str(COMMITTED))
    long_line = " ".join(f"https://example.com/{i}/a_b-c?d={i * 7919}&e=f" for i in range(64))
    (score,) = scorer.score([("I like tea. [SEP] Me too.", long_line)])
    assert score == score and abs(score) < 1e6  # a finite number



@pytest.mark.integration
def test_the_evidence_reading_scores_a_question_longer_than_the_pair():
    """An agent may pass a paragraph as its question: the evidence reading cuts the question, not the line, and
    scores it (a 300-word question failed the second stage with the same tokenizer error)."""
    from membox_local.config import CONFIG_DIR

    model = continuity.PairModel.load(CONFIG_DIR / "content" / "evidence-locomo-all-minilm-l6-v2.safetensors")
    question = "What did Caroline say about the support group she went to last week? " * 25
    logits = model.logits([(question, "Caroline: I went to a support group yesterday."), (question, "ok")]).tolist()
    assert all(abs(v) < 1e6 for v in logits) and logits[0] > logits[1]


@pytest.mark.integration
def test_cpu_ce_cuts_full_boxes_at_their_weakest_point_with_the_real_models(tmp_path):
    """configs/cpu-ce.toml's judge (MiniLM and the committed cross-encoder, no LLM) with a cap small enough to fill
    boxes on the demo conversation: the Loom's boxes-only filing and the segmentation evaluator cut the same boxes
    with the same labels, each within the cap, some of them by a split (which message: tests/test_loom.py)."""
    from conftest import DEMO
    from membox_local.evaluation.segmentation import run_segmenter
    from membox_local.ingest import load_jsonl
    from membox_local.loom import file_into_boxes
    from membox_local.memory import Memory

    cfg = load_config("cpu-ce", {"loom.max_box_messages": 4})
    assert cfg.loom.cap_split == "weakest"
    msgs = load_jsonl(DEMO)
    conv = msgs[0].conversation_id
    mine = [m for m in msgs if m.conversation_id == conv]
    decisions, facts = run_segmenter(cfg, {conv: mine})
    assert not facts["llm_usage"]  # no LLM request
    dec = decisions[conv]
    starts = [i for i, d in enumerate(dec) if not d.continues]
    spans = list(zip(starts, starts[1:] + [len(mine)]))
    assert all(b - a <= 4 for a, b in spans)
    assert any(d.label == "split" for d in dec) and any(d.label == "max-size-split" for d in dec)
    with Memory(tmp_path / "m", cfg) as mem:
        mem.store.add_messages(mine)
        file_into_boxes(mem, conv)
        boxes = [[m.message_id for m in b.messages] for b in mem.store.boxes(conv)]
        labels = [r["decision"] for r in mem.store.message_rows(conv)]
    assert boxes == [[m.message_id for m in mine[a:b]] for a, b in spans]
    assert labels == [d.label for d in dec]


@pytest.mark.integration
def test_the_scorer_keeps_a_bounded_number_of_pairs_unless_a_fit_asks_for_more(monkeypatch):
    """A server files without end: the scorer keeps CACHE pairs (least recently used dropped); a fit keeps all."""
    monkeypatch.setattr(continuity.ContinuityScorer, "CACHE", 4)
    scorer = continuity.ContinuityScorer(COMMITTED)
    pairs = [(f"line {i} about tea", f"reply {i}") for i in range(10)]
    first = scorer.score(pairs[:6])
    assert len(scorer.known()) == 4 and set(scorer.known()) == set(pairs[2:6])
    assert scorer.score(pairs[:1]) == pytest.approx(first[:1], abs=1e-4)  # dropped, scored again
    scorer.keep(10)
    scorer.score(pairs)
    assert len(scorer.known()) == 10
