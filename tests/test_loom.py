"""Topic Loom logic through the deterministic doubles."""
from __future__ import annotations

import pytest

from membox_local.config import load_config
from membox_local.loom import grounding, split_point, text_keywords
from membox_local.memory import Memory
from membox_local.records import Message

from membox_local.testing import FakeBackend, FakeEmbedder

pytestmark = pytest.mark.numeric  # scores through BLAS: rerun on another kernel (make test-numeric)


def msgs(conv, rows, session="1", date="1 May 2024", start=0):
    return [Message(conv, f"m{start + i}", sp, t, session, date) for i, (sp, t) in enumerate(rows)]


GARDEN = [("A", "I planted tomatoes in the garden today"), ("B", "Nice, which tomatoes did you plant?"),
          ("A", "Cherry tomatoes, the garden gets lots of sun"), ("B", "Tomatoes love sun in a garden")]
CARS = [("A", "My car broke down on the highway"), ("B", "Oh no, did the car need a tow truck?"),
        ("A", "Yes, the tow truck took the car to a mechanic")]


def test_topic_shift_opens_a_new_box(memory):
    memory.add(msgs("c", GARDEN + CARS), seal=True)
    boxes = memory.boxes("c")
    assert [len(b.messages) for b in boxes] == [4, 3]
    assert all(b.status == "extracted" for b in boxes)
    assert "tomatoes" in boxes[0].keywords and "highway" in boxes[1].keywords


def test_minimal_context_rule_keeps_one_reply_unjudged(memory):
    # the reply right after a shift shares no words with the new box, yet stays in it
    rows = GARDEN + [("A", "My car broke down on the highway"), ("B", "Sorry to hear that!"),
                     ("A", "The mechanic says the car needs new brakes")]
    memory.add(msgs("c", rows), seal=True)
    boxes = memory.boxes("c")
    assert [m.text for m in boxes[1].messages][:2] == ["My car broke down on the highway", "Sorry to hear that!"]
    decisions = [r["decision"] for r in memory.store.message_rows("c")]
    assert decisions[4:6] == ["no", "min-context"]


def test_session_change_always_seals(memory):
    memory.add(msgs("c", GARDEN[:2]) + msgs("c", GARDEN[2:], session="2", date="9 May 2024", start=2), seal=True)
    boxes = memory.boxes("c")
    assert [b.session for b in boxes] == ["1", "2"]
    assert boxes[1].session_date == "9 May 2024"
    assert memory.store.message_rows("c")[2]["decision"] == "session"


def test_max_box_size_seals(memory):
    memory.config.loom.max_box_messages = 3
    memory.add(msgs("c", GARDEN * 2), seal=True)
    assert all(len(b.messages) <= 3 for b in memory.boxes("c"))


def test_split_point_is_the_lowest_score_after_the_minimal_context():
    lc = load_config("cpu").loom
    lc.min_box_messages, lc.cap_split = 2, "weakest"
    assert split_point(lc, [None, None, 0.9, 0.2, 0.5, 0.2]) == 5  # a tie: the later one
    assert split_point(lc, [None, 0.01, 0.9, 0.7]) == 3  # index 1 is inside the minimal context
    assert split_point(lc, [None, None, None]) is None  # nothing scored: the box seals as it is
    lc.cap_split = "at-cap"
    assert split_point(lc, [None, None, 0.9, 0.2]) is None


def test_weakest_cap_split_refuses_a_call_without_the_boxs_scores():
    from membox_local.loom import decide

    lc = load_config("cpu").loom
    lc.max_box_messages, lc.cap_split = 3, "weakest"
    box = msgs("c", GARDEN[:3])
    step = decide(lc, None, box, msgs("c", CARS[:1], start=3)[0], scores=[None, None])
    with pytest.raises(ValueError, match="needs the open box's 3 scores, got 2"):
        next(step)


def _partition(memory, conv):
    return [[m.message_id for m in b.messages] for b in memory.boxes(conv)]


def test_weakest_cap_split_recuts_a_full_box_where_the_judge_was_least_sure(tmp_path, cfg):
    cfg.loom.threshold = -1.0  # the judge never opens a box: only the cap does
    cfg.loom.max_box_messages = 6
    at_cap = Memory(tmp_path / "a", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    at_cap.add(msgs("d", GARDEN + CARS), seal=True)
    assert [len(b.messages) for b in at_cap.boxes("d")] == [6, 1]  # at-cap: the box seals where it is full
    at_cap.close()

    cfg.loom.cap_split = "weakest"
    memory = Memory(tmp_path / "w", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    memory.add(msgs("d", GARDEN + CARS), seal=True)
    boxes = memory.boxes("d")
    assert [len(b.messages) for b in boxes] == [4, 3]  # cut at the garden -> car shift, the lowest score
    assert all(b.status == "extracted" for b in boxes)
    assert "highway" not in " ".join(boxes[0].keywords) and "tomatoes" in boxes[0].keywords
    rows = memory.store.message_rows("d")
    assert [r["decision"] for r in rows][4:] == ["split", "yes", "max-size-split"]
    assert [c.event for c in memory.history(boxes[0].id)][:3] == ["add", "seal", "split"]
    memory.close()


def test_weakest_cap_split_agrees_with_the_segmentation_evaluator_and_survives_a_restart(tmp_path, cfg):
    from membox_local.evaluation.segmentation import run_segmenter

    cfg.loom.max_box_messages, cfg.loom.cap_split, cfg.loom.threshold = 5, "weakest", -1.0
    rows = msgs("c", GARDEN + CARS + GARDEN + CARS, session="1")
    decisions, _ = run_segmenter(cfg, {"c": rows}, embedder=FakeEmbedder())
    starts = [i for i, d in enumerate(decisions["c"]) if not d.continues]
    expected = [[m.message_id for m in rows[a:b]] for a, b in zip(starts, starts[1:] + [len(rows)])]
    assert any(d.label == "split" for d in decisions["c"]) and all(len(b) <= 5 for b in expected)

    one = Memory(tmp_path / "one", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    one.add(rows, seal=True)
    assert _partition(one, "c") == expected
    two = Memory(tmp_path / "two", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    two.add(rows[:7])
    two.close()  # the open box's scores are read back from the store by the next Loom
    two = Memory(tmp_path / "two", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    two.add(rows[7:], seal=True)
    assert _partition(two, "c") == expected
    one.close()
    two.close()


def test_no_look_ahead_decisions_do_not_change_with_later_messages(tmp_path, cfg):
    a = Memory(tmp_path / "a", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    b = Memory(tmp_path / "b", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    a.add(msgs("c", GARDEN + CARS[:1]))
    b.add(msgs("c", GARDEN + CARS))
    da = [r["decision"] for r in a.store.message_rows("c")]
    db = [r["decision"] for r in b.store.message_rows("c")]
    assert db[: len(da)] == da


def test_events_are_grounded_and_dated(memory):
    rows = [("A", "I signed up for the city marathon"), ("B", "Wow, when is the city marathon?")]
    memory.add(msgs("c", rows), seal=True)
    box = memory.boxes("c")[0]
    assert [e.text for e in box.events] == ["A signed up for the city marathon"]  # "I" is the cited line's speaker
    assert box.events[0].sources == [box.messages[0].message_id]
    assert box.events[0].date == "1 May 2024" and box.events[0].grounding == 1.0
    assert grounding("Maya adopted a purple dragon", "A: I signed up for the city marathon") == 0.0


def test_text_keywords_pick_names_and_repeated_words_without_fillers():
    rows = [("Gina", "Hey Jon! I found a studio in Paris with Marley flooring."),
            ("Jon", "Wow, Marley flooring is great. I'm so happy the studio has natural light!"),
            ("Gina", "Thanks! The studio opens in Paris next month, I'm starting classes.")]
    kws = text_keywords(msgs("c", rows), 4, 40)
    assert kws[:2] == ["Marley", "Paris"]  # capitalised inside a sentence, used twice each (longer first)
    assert kws[2] == "studio" and len(kws) == 4  # then the box's most used content word
    everything = text_keywords(msgs("c", rows), 50, 40)
    for never in ("Jon", "Gina", "I'm", "great", "happy", "thanks", "the"):  # speakers, contractions, fillers
        assert never not in everything and never.lower() not in everything
    assert all(len(k) <= 6 for k in text_keywords(msgs("c", rows), 50, 6))
    assert text_keywords(msgs("c", [("A", "Hi!"), ("B", "Hey, good to see you.")]), 8, 40) == []


def test_text_keywords_leave_the_keywords_out_of_the_extraction_call(memory, fake_backend):
    memory.config.extract.keywords = "text"
    seen, inner = [], fake_backend.json_batch
    fake_backend.json_batch = lambda reqs: seen.extend(reqs) or inner(reqs)
    rows = [("A", "I signed up for the Berlin marathon"), ("B", "The Berlin marathon is hard, good luck")]
    memory.add(msgs("c", rows), seal=True)
    box = memory.boxes("c")[0]
    assert box.keywords[0] == "Berlin" and "marathon" in box.keywords
    assert [e.text for e in box.events] == ["A signed up for the Berlin marathon"]
    (req,) = [r for r in seen if r.stage == "extract"]
    assert "keywords" not in req.schema["properties"] and "keywords" not in req.prompt.system


def test_failed_extraction_is_recorded_then_retried(memory, fake_backend):
    fake_backend.fail_extract = 1
    memory.add(msgs("c", GARDEN + CARS), seal=True)
    boxes = memory.boxes("c")
    assert boxes[0].status == "failed" and "extraction failed" in boxes[0].error
    assert boxes[0].topic == "" and boxes[1].status == "extracted"
    memory.add([])  # a rerun retries what failed
    assert all(b.status == "extracted" for b in memory.boxes("c"))


def test_llm_judge_uses_label_calls(tmp_path, cfg):
    cfg.loom.judge = "llm"
    backend = FakeBackend()
    mem = Memory(tmp_path / "m", cfg, backend=backend, embedder=FakeEmbedder())
    mem.add(msgs("c", GARDEN + CARS), seal=True)
    assert [len(b.messages) for b in mem.boxes("c")] == [4, 3]
    stages = mem.store.usage_by_stage("c")
    assert stages["judge"]["calls"] == 4  # messages 2, 3, 4 and 6; 0 opens, 1 and 5 are min-context
    assert stages["extract"]["calls"] == 2


def test_unknown_judge_is_a_clear_error(tmp_path, cfg):
    cfg.loom.judge = "psychic"
    mem = Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
    with pytest.raises(ValueError, match="unknown continuity judge 'psychic'"):
        mem.add(msgs("c", GARDEN))


def test_judges_that_want_history_see_the_conversation_before_the_message_even_after_a_reopen(tmp_path, cfg):
    from membox_local.judges import EmbeddingJudge
    from membox_local.loom import Loom

    seen = []

    class Recorder(EmbeddingJudge):
        history = 3

        def decide(self, recent, new, earlier=()):
            seen.append((new.message_id, [m.message_id for m in earlier]))
            return (yield from super().decide(recent, new, earlier))

    def opened():
        mem = Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder())
        boxes = mem.system("membox")
        boxes.looms["c"] = Loom("c", mem.store, mem.config, judge=Recorder(cfg.loom), after_extract=boxes.after_extract)
        return mem

    rows = msgs("c", GARDEN + CARS)
    mem = opened()
    mem.add(rows[:5])
    mem.close()
    mem = opened()  # a new process: the Loom reads the filed messages back from the store
    mem.add(rows[5:], seal=True)
    mem.close()
    judged = dict(seen)
    assert judged["m3"] == ["m0", "m1", "m2"] and judged["m6"] == ["m3", "m4", "m5"]


def test_a_keep_model_leaves_sentences_that_tell_little_out_of_the_records(memory, tmp_path):
    """[extract] events = "lines" with a keep model (worth.py): the Loom scores each line's sentences from their
    vectors (an EmbedRequest through the driver) and counts; here a model of the counts alone keeps sentences of
    three content words or more."""
    import json

    from membox_local.worth import FEATURES

    weights = [0.0] * FakeEmbedder.dim + [0.0] * len(FEATURES)
    weights[FakeEmbedder.dim + FEATURES.index("log_content_words")] = 10.0
    path = tmp_path / "keep.json"
    path.write_text(json.dumps({"embedder": memory.config.embedder.model, "weights": weights, "bias": -10 * 1.2,
                                "threshold": 0.5}))  # (the config's embedder is what a keep model is checked against)
    memory.config.extract.events, memory.config.extract.keep_model = "lines", str(path)
    rows = [("A", "Thanks! I signed up for the Berlin city marathon."), ("B", "Wow. Good luck!")]
    memory.add(msgs("c", rows), seal=True)
    box = memory.boxes("c")[0]
    assert [e.text for e in box.events] == ["A signed up for the Berlin city marathon"]
    assert box.dropped.get("not worth keeping") == 3


def test_a_keep_model_fitted_for_another_embedder_is_refused(tmp_path):
    import json

    from membox_local.config import ConfigError
    from membox_local.worth import load_keep_model

    path = tmp_path / "keep.json"
    path.write_text(json.dumps({"embedder": "all-minilm-l6-v2", "weights": [0.0] * 387, "bias": 0, "threshold": 0.5}))
    with pytest.raises(ConfigError, match="fitted for the embedder 'all-minilm-l6-v2'"):
        load_keep_model(str(path), "fake-bow")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a keep model file"):
        load_keep_model(str(tmp_path / "bad.json"), "fake-bow")
