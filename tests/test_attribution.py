"""What code decides about the model's events (attribution.py): source, person, time, kept or dropped."""
from __future__ import annotations

import pytest

from membox_local.attribution import (attribute, checked_topic, display_name, fix_subject, is_question,
                                      resolve_person, with_times)
from membox_local.prompts import EXTRACT_SYSTEM
from membox_local.records import Box, Message

DATE = "1:56 pm on 8 May, 2023"
LINES = [("Maya", "How is the new job at the bakery going?"),
         ("Tom", "Great! Rosa started me on the early shift, so I'm there at 5 am making sourdough."),
         ("Maya", "Wow. I ran 10 km yesterday, my longest run this year."),
         ("Tom", "Rosa is teaching me how to shape baguettes. Can you taste one next time?")]
PEOPLE = ["Maya", "Tom"]


def box(rows=LINES, date=DATE) -> Box:
    b = Box(7, "c", "1", date)
    b.messages = [Message("c", f"D1:{i + 1}", sp, t, "1", date, seq=i) for i, (sp, t) in enumerate(rows)]
    return b


def run(items, b=None):
    b = b or box()
    return attribute(items, b, b.messages, PEOPLE, EXTRACT_SYSTEM, 0.5)


@pytest.mark.parametrize("said, speaker, other, expected", [
    ("I'm there at 5 am making sourdough", "Tom", "Maya", "Tom is there at 5 am making sourdough"),
    ("Rosa is teaching me to shape baguettes", "Tom", "Maya", "Rosa is teaching Tom to shape baguettes"),
    ("I go running every day", "Maya", "Tom", "Maya goes running every day"),
    ("I watch movies with my sister", "Maya", "Tom", "Maya watches movies with Maya's sister"),
    ("I'll visit you next week", "Tom", "Maya", "Tom will visit Maya next week"),
    ("you're running a marathon", "Tom", "Maya", "Maya is running a marathon"),
    ("I've been to the US twice", "Tom", "Maya", "Tom has been to the US twice"),  # "US" is not "us"
    ("I was glad I could share my story", "Tom", "Maya", "Tom was glad Tom could share Tom's story"),
    ("We went camping with our kids", "Tom", "Maya", "Tom and others went camping with Tom's kids"),
    ("I asked you for a recipe", "user", "assistant", "The user asked the assistant for a recipe"),
    ("You should try it", "Tom", None, "You should try it"),  # no single other participant: left as said
    # contractions written out first: "'d" as "had" before a past participle, "would" otherwise
    ("I'd never been to Lisbon", "Tom", "Maya", "Tom had never been to Lisbon"),
    ("I'd love to join you", "Tom", "Maya", "Tom would love to join Maya"),
    ("I’d planned it for weeks", "Tom", "Maya", "Tom had planned it for weeks"),
    ("we're moving in June", "Tom", "Maya", "Tom and others are moving in June"),
    ("I think you'd need new shoes", "Tom", "Maya", "Tom thinks Maya would need new shoes"),
])
def test_first_and_second_person_are_the_cited_speaker_and_the_other(said, speaker, other, expected):
    assert resolve_person(said, speaker, other) == expected


def test_roles_are_named_as_roles():
    assert display_name("user") == "the user" and display_name("Tom") == "Tom"


def test_a_name_the_cited_line_does_not_support_gives_way_to_its_speaker():
    line = box().messages[3]  # Tom: "Rosa is teaching me ... Can you taste one next time?"
    # Maya is addressed ("you") in the line: a claim about her may stand ...
    assert fix_subject("Maya will taste one next time", line, PEOPLE, "Maya") == (
        "Maya will taste one next time", False)
    # ... but not one that has her act on herself
    assert fix_subject("Maya asks Maya to taste one", line, PEOPLE, "Maya") == ("Tom asks Maya to taste one", True)
    own = box().messages[1]  # Tom's line names Rosa, not Maya, and does not address her
    assert fix_subject("Maya is there at 5 am", own, PEOPLE, "Maya") == ("Tom is there at 5 am", True)
    assert fix_subject("started on the early shift", own, PEOPLE, "Maya") == ("Tom started on the early shift", False)


def test_relative_times_of_the_cited_line_carry_their_dates():
    line = box().messages[2]
    assert with_times("Maya ran 10 km yesterday", line) == "Maya ran 10 km yesterday (7 May 2023)"
    assert with_times("Maya ran 10 km", line) == "Maya ran 10 km"  # two times in the line: which one is not known
    one = Message("c", "x", "Tom", "I ran 10 km yesterday", "1", DATE)
    assert with_times("Tom ran 10 km", one) == "Tom ran 10 km (yesterday: 7 May 2023)"
    undated = Message("c", "x", "Tom", "I ran yesterday", "1", "")
    assert with_times("Tom ran yesterday", undated) == "Tom ran yesterday"


def test_questions_are_not_events():
    assert is_question("How is the new job going?", PEOPLE)
    assert is_question("Tom how many days a week does the plan want you to run", PEOPLE)
    assert not is_question("Tom is going to Paris", PEOPLE) and not is_question("When Tom was ten he ran", PEOPLE)


def test_each_kept_event_cites_its_message_and_names_its_speaker():
    events, dropped = run([{"line": 2, "event": "I'm there at 5 am making sourdough"},
                           {"line": 3, "event": "I ran 10 km yesterday"},
                           {"line": 4, "event": "Rosa is teaching me how to shape baguettes"}])
    # each in its line's own words (the sentences the model's words draw on), persons and times resolved by code
    assert [e.text for e in events] == [
        "Rosa started Tom on the early shift, so Tom is there at 5 am making sourdough",
        "Maya ran 10 km yesterday (7 May 2023), Maya's longest run this year (2023)",
        "Rosa is teaching Tom how to shape baguettes"]  # the line's question ("Can you taste one?") left out
    assert [e.sources for e in events] == [["D1:2"], ["D1:3"], ["D1:4"]]
    assert dropped == {} and all(e.grounding >= 0.5 and e.date == DATE for e in events)


def test_what_is_empty_asked_echoed_unsupported_or_repeated_is_dropped_and_counted():
    events, dropped = run([
        {"line": 2, "event": "Tom"},                                        # only a name
        {"line": 1, "event": "How is the new job at the bakery going?"},    # a question
        {"line": 2, "event": "things that happened, are true now, or are planned"},  # the instructions
        {"line": 3, "event": "Maya adopted a purple dragon"},               # not in her line
        {"line": 3, "event": "I ran 10 km yesterday"},
        {"line": 3, "event": "I ran 10 km yesterday"},                      # the same again
        {"line": 9, "event": "I ran"},                                      # no such line
        # Tom answers Maya's question: words of the line before, in the model's sentence, whose person is Tom's
        {"line": 2, "event": "Maya's new job at the bakery is going great"},
    ])
    assert [e.text for e in events] == [
        "Maya ran 10 km yesterday (7 May 2023), Maya's longest run this year (2023)",
        "Tom's new job at the bakery is going great"]
    assert dropped == {"empty": 1, "question": 1, "prompt text": 1, "unsupported": 1, "repeated": 1, "no line": 1,
                       "subject corrected": 1}


def test_an_event_saying_nothing_an_earlier_one_did_not_is_a_repeat():
    """Said once: an event whose words (names aside) an earlier event of the box holds is dropped as repeated."""
    events, dropped = run([{"line": 3, "event": "I ran 10 km yesterday, my longest run this year"},
                           {"line": 3, "event": "Maya ran 10 km"},
                           {"line": 4, "event": "Rosa is teaching me how to shape baguettes"}])
    assert len(events) == 2 and dropped == {"repeated": 1}


def test_a_narrated_or_copied_line_keeps_the_speaker_from_the_data():
    events, _ = run([{"line": 4, "event": "Tom: Rosa is teaching me how to shape baguettes"},
                     {"line": 3, "event": "Tom says, 'I ran 10 km yesterday'"},  # Maya's line, narrated as Tom's
                     {"line": 2, "event": "Tom asked Tom to start the early shift at 5 am"}])
    assert [e.text for e in events] == [
        "Rosa is teaching Tom how to shape baguettes",
        "Maya ran 10 km yesterday (7 May 2023), Maya's longest run this year (2023)",
        "Rosa started Tom on the early shift, so Tom is there at 5 am making sourdough"]


def test_a_topic_of_the_instructions_or_of_things_the_box_never_says_gives_way_to_keywords():
    b = box()
    kws = ["bakery", "sourdough", "baguettes"]
    assert checked_topic("Tom's bakery job", b, kws, EXTRACT_SYSTEM) == ("Tom's bakery job", "")
    assert checked_topic("Maya's bakery job", b, kws, EXTRACT_SYSTEM, PEOPLE) == ("bakery job", "")  # what, not who
    assert checked_topic("Tom and Maya", b, kws, EXTRACT_SYSTEM, PEOPLE) == ("bakery, sourdough, baguettes",
                                                                            "topic prompt text")
    assert checked_topic("name in two to five words what the lines talk about", b, kws, EXTRACT_SYSTEM) == (
        "bakery, sourdough, baguettes", "topic prompt text")
    assert checked_topic("Lisbon, Spain", b, kws, EXTRACT_SYSTEM) == ("bakery, sourdough, baguettes",
                                                                       "topic not in box")


def test_a_topic_in_title_case_or_in_another_form_of_the_boxs_words_is_kept():
    """Topics fell back to keywords for their form, not their content: "Shaping Baguettes" (title case, "shaping"
    where the box says "shape"), "Making sourdough" (the stem of "making" is not its first four letters)."""
    b, kws = box(), ["bakery", "sourdough", "baguettes"]
    for topic in ("Shaping Baguettes", "Making sourdough", "Early Shift At The Bakery", "Running"):
        assert checked_topic(topic, b, kws, EXTRACT_SYSTEM) == (topic, "")
    for topic in ("Trip To Paris", "Bakery trip to Paris"):  # what the box never says, in either case
        assert checked_topic(topic, b, kws, EXTRACT_SYSTEM)[1] == "topic not in box"


def test_a_clause_without_its_subject_gets_the_speaker():
    from membox_local.attribution import with_subject
    assert with_subject("Lost my job as a banker", "Jon") == "Jon lost my job as a banker"
    assert with_subject("Been running longer", "Mel") == "Mel has been running longer"
    assert with_subject("Can't wait to see it", "Ana") == "Ana can't wait to see it"
    assert with_subject("Paris is lovely in June", "Jon") == "Paris is lovely in June"


def test_a_string_cut_by_the_schema_or_left_with_json_is_cut_back_to_whole_words():
    from membox_local.attribution import cut_whole
    assert cut_whole("I made a bowl. It was a great experience and I lov", 50) == "I made a bowl."
    assert cut_whole("I made a bowl in pottery class yesterday and I lov", 50) == "I made a bowl in pottery class yesterday and I"
    assert cut_whole("I made a bowl}, {", 0) == "I made a bowl"
    assert cut_whole("I made a bowl [shares a photo: a bowl", 0) == "I made a bowl"


def test_an_event_cited_at_the_reply_to_the_line_that_says_it_is_moved_to_that_line():
    # Maya's event cited at Tom's next line (line 4 says nothing of her run): its source is line 3, its person Maya
    events, dropped = run([{"line": 4, "event": "I ran 10 km yesterday, my longest run this year"}])
    assert [e.sources for e in events] == [["D1:3"]] and events[0].text.startswith("Maya ran 10 km")
    assert dropped == {"line corrected": 1}


def test_a_claim_about_both_people_needs_a_line_about_both():
    events, dropped = run([{"line": 2, "event": "Tom and Maya work at the bakery at 5 am making sourdough bread"}])
    assert events == [] and dropped == {"joint claim": 1}


def test_keywords_and_topics_the_box_does_not_hold_are_not_kept():
    from membox_local.attribution import checked_keywords
    b = box()
    assert checked_keywords(["sourdough", "conversation date", "2. Tom: Great!", "baguettes"], b) == [
        "sourdough", "baguettes"]
    assert checked_topic("conversation", b, ["bakery"], EXTRACT_SYSTEM) == ("bakery", "topic not in box")
    long = ["a" * 30, "b" * 30, "c" * 30]
    assert checked_topic("Lisbon", b, long, EXTRACT_SYSTEM, max_chars=80)[0] == ", ".join(long[:2])  # fits 80


def test_under_events_lines_each_line_that_tells_something_is_an_event_in_its_own_words():
    """[extract] events = "lines": every line of the box goes through the same code as a written event: its
    statements kept, persons and dates resolved; a question line or one that tells nothing is no event."""
    from membox_local.attribution import NOT_EVENTS, model_items

    b = box()
    events, dropped = run(model_items({"topic": "bakery"}, b.messages, "lines", 160), b)
    assert [e.sources for e in events] == [["D1:2"], ["D1:3"], ["D1:4"]]
    assert events[0].text.startswith("Rosa started Tom on the early shift")
    assert "Maya ran 10 km yesterday (7 May 2023)" in events[1].text, events[1].text
    assert events[2].text == "Rosa is teaching Tom how to shape baguettes"  # the question after it left out
    assert set(dropped) <= set(NOT_EVENTS)
    cut = model_items({}, b.messages, "lines", 30)
    assert all(len(i["event"]) <= 30 for i in cut)  # cut as the schema cuts a written event
    # a line longer than an event: pieces of whole sentences, at most three
    from membox_local.attribution import line_pieces
    assert line_pieces("I ran. I swam far. I slept.", 12) == ["I ran.", "I swam far.", "I slept."]
    assert line_pieces("I ran. I swam far. I slept.", 20) == ["I ran. I swam far.", "I slept."]
    assert len(line_pieces("One. Two. Three. Four.", 5)) == 3
    # the model's written events pass through unchanged
    assert model_items({"events": [{"line": 2, "event": "x"}]}, b.messages) == [{"line": 2, "event": "x"}]
    # a line's own "your" is the other person's, never "corrected" to the speaker as a model's subject would be
    b = box([("Maya", "I found the recipe."), ("Tom", "Thanks! Your help means a lot. I'll do my best to make you proud!")])
    events, _ = run(model_items({}, b.messages, "lines", 160), b)
    assert [e.text for e in events][-1] == "Tom will do Tom's best to make Maya proud!"


def test_under_events_lines_the_model_is_asked_for_the_topic_only():
    from membox_local.config import ExtractConfig
    from membox_local.prompts import extract_prompt, extract_schema

    cfg = ExtractConfig(events="lines", keywords="text")
    assert set(extract_schema(cfg, 5)["properties"]) == {"topic"}
    system = extract_prompt(box().messages, DATE, cfg).system
    assert '"topic"' in system and '"events"' not in system and '"keywords"' not in system
    written = extract_prompt(box().messages, DATE).system
    assert '"events"' in written and '"keywords"' in written


def test_the_records_check_keeps_what_the_loom_keeps_and_counts_each_models_row():
    """membox_local/evaluation/records.py (benchmarks/records_check.py): a saved raw output kept as the Loom keeps
    it (a written event of the box's own line; a topic alone makes the events from the lines), and a model's row:
    a failed box counted, the hand labels' wrong-person share, no share where a box was not labelled."""
    from membox_local.config import load_config
    from membox_local.evaluation.records import kept, records_row

    cfg, b = load_config("cpu-ce", {"extract.keep_model": ""}), box()  # the keep model: its own tests
    written = {"topic": "bakery job", "events": [{"line": 2, "event": "I'm there at 5 am making sourdough"}]}
    topic, events, _ = kept(b, written, [b], cfg)
    assert topic and [e.sources for e in events] == [["D1:2"]] and "Tom is there at 5 am" in events[0].text
    _, from_lines, _ = kept(b, {"topic": "bakery job"}, [b], cfg)
    assert len(from_lines) > 1 and all(e.sources[0] in {m.message_id for m in b.messages} for e in from_lines)
    other = Box(8, "c", "1", DATE, b.messages[:1])
    recs = {"c/D1:1": {"s": 2.0, "data": written}}  # the two boxes share their first message: one key
    row = records_row([b], [b], recs, {"c/D1:1": [1]}, cfg, key=lambda x: f"c/{x.messages[0].message_id}")
    assert (row["boxes"], row["events"], row["wrong_person"], row["wrong_person_share"]) == (1, 1, 1, 1.0)
    assert row["chat_share"] is None and 0 < row["record_share"] < 1
    told = records_row([b], [b], recs, {"c/D1:1": {"wrong": [], "chat": [1], "repeated": []}}, cfg,
                       key=lambda x: f"c/{x.messages[0].message_id}")
    assert (told["wrong_person"], told["chat_share"], told["repeated_share"]) == (0, 1.0, 0.0)
    failed = records_row([b, other], [b, other], {"c/D1:1": {"s": 1.0, "error": "timeout"}}, None, cfg,
                         key=lambda x: f"c/{x.messages[0].message_id}:{x.id}")
    assert failed["boxes"] == 0 and failed["hand_checked"] is False and failed["wrong_person_share"] is None


def test_sentences_not_worth_keeping_make_no_event_and_are_counted():
    """[extract] keep_model: a line's sentences marked not worth keeping are left out of its events; a line left
    with none makes no event; extracted_events counts the sentences left out."""
    from membox_local.attribution import extracted_events
    from membox_local.config import ExtractConfig

    b = box([("Maya", "Thanks! I ran 10 km yesterday."), ("Tom", "Wow. Congrats, Maya!"),
             ("Maya", "Rosa is teaching me to bake.")])
    kept = [[False, True], [False, False], [True]]
    events, dropped = extracted_events({}, b, b.messages, PEOPLE, EXTRACT_SYSTEM,
                                       ExtractConfig(events="lines"), kept)
    assert [e.sources for e in events] == [["D1:1"], ["D1:3"]]
    assert "Thanks" not in events[0].text and "10 km" in events[0].text
    assert dropped == {"not worth keeping": 3}
    every, before = extracted_events({}, b, b.messages, PEOPLE, EXTRACT_SYSTEM, ExtractConfig(events="lines"))
    assert len(every) >= 2 and "not worth keeping" not in before


@pytest.mark.integration
def test_the_shipped_keep_model_keeps_what_happened_and_drops_thanks():
    """cpu-ce's keep model (membox fit keeping) on MiniLM's vectors: statements of what someone did or plans stay,
    thanks, reactions and agreement go."""
    from membox_local.config import load_config
    from membox_local.embed import SentenceTransformerEmbedder
    from membox_local.worth import load_keep_model

    cfg = load_config("cpu-ce")
    model = load_keep_model(cfg.extract.keep_model, cfg.embedder.model)
    said = ["I adopted a puppy named Pepper last week.", "My sister is moving to Denver in June for a nursing job."]
    chat = ["Thanks!", "Wow, that's awesome!", "Totally agree with you.", "Good luck with that!"]
    kept = model.kept(said + chat, SentenceTransformerEmbedder(cfg.embedder).encode(said + chat))
    assert kept == [True] * len(said) + [False] * len(chat)


def test_the_keep_fit_measures_the_records_as_the_loom_makes_them():
    """fit/keeping.records: at a threshold, the events made from the lines with the sentences scored at or above it;
    their words, the evidence lines an event cites, and the single-line answers whose words the events still hold."""
    import numpy as np

    from membox_local.config import ExtractConfig
    from membox_local.fit.keeping import records
    from membox_local.worth import line_sentences

    b = box([("Maya", "Thanks! I ran 10 km yesterday."), ("Tom", "Wow. Congrats, Maya!"),
             ("Maya", "Rosa is teaching me to bake sourdough.")])
    sentences = [(b.id, i, x, 0) for i, m in enumerate(b.messages) for x in line_sentences(m.text)]
    rows = {"boxes": [b], "speakers": PEOPLE, "sentences": sentences, "evidence": {"D1:1", "D1:3"},
            "answers": [("D1:3", {"sourdough"}), ("D1:1", {"10", "km"})]}
    scores = np.array([0.0, 0.9, 0.0, 0.0, 0.0])  # only "I ran 10 km yesterday." is worth keeping
    ec = ExtractConfig(events="lines")
    every, kept = records(rows, scores, 0.0, ec), records(rows, scores, 0.5, ec)
    assert (every["represented"], every["answers_kept"]) == (2, 2)
    assert (kept["represented"], kept["answers_kept"]) == (1, 1) and 0 < kept["record_words"] < every["record_words"]
