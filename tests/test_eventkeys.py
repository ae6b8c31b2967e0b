"""The records' events in box-hits (retrieval/eventkeys.py): as keys pointing at the lines they cite, and shown
under those lines; with the deterministic doubles (bag-of-words embedder)."""
from __future__ import annotations

import pytest

from membox_local.records import Event, Message
from membox_local.retrieval import count_tokens, make_retriever
from membox_local.retrieval.eventkeys import SAID_PREFIX

pytestmark = pytest.mark.numeric  # scores through BLAS: rerun on another kernel (make test-numeric)

CONV = "c1"
TURNS = [  # one session, two boxes
    ("Ann", "Guess what, I finally did it last week!"),
    ("Bob", "Did what?"),
    ("Ann", "Signed up for the pottery class downtown."),
    ("Bob", "My bike has a flat tyre again."),
    ("Ann", "Take it to the shop on Elm street."),
    ("Bob", "Good idea, they fixed my brakes before."),
]


def _file(memory, sources=True) -> None:
    store = memory.store
    store.add_messages([Message(CONV, f"D1:{i + 1}", who, text, "1", "8 May 2023")
                        for i, (who, text) in enumerate(TURNS)])
    msgs = store.messages(CONV)
    for part, events in ((msgs[:3], [("Ann enrolled in a ceramics course in early May 2023", ["D1:1", "D1:3"])]),
                         (msgs[3:], [("Bob's bicycle tyre is flat", ["D1:4"])])):
        box_id = store.open_box(part[0])
        for m in part:
            store.file_message(m, box_id, "continue", None)
        store.set_box_status(box_id, "sealed")
        store.save_extraction(box_id, "topic", ["topic"],
                              [Event(0, box_id, CONV, text, "8 May 2023", sources=cited if sources else None)
                               for text, cited in events])


def test_an_event_is_a_key_to_the_lines_it_cites(memory):
    _file(memory)
    question = "Which ceramics course did she enroll in?"  # the event's words, not the lines'
    plain, keyed = make_retriever("box-hits", memory), make_retriever("box-hits-events", memory)
    keyed.event_weight = 1.0  # the larger of a line's own cosine and its best event's
    bm = keyed.box_map(CONV)
    qv = memory.embedder.encode([question])[0]
    before, after = plain.relevance(bm, qv, question), keyed.relevance(bm, qv, question)
    cited = [i for i, m in enumerate(bm.messages) if m.message_id in ("D1:1", "D1:3")]
    assert all(after[i] > before[i] + 0.3 for i in cited)  # the event's cosine is their key now
    assert all(after[i] == before[i] for i in range(len(bm.messages)) if i not in cited)
    keyed.event_weight = 0.0
    assert (keyed.relevance(bm, qv, question) == before).all()  # weight 0 is box-hits
    keyed.event_weight = 1.0
    ctx = keyed.retrieve(question, CONV, 1, 10**6)
    assert set(ctx.message_ids) == {"D1:1", "D1:2", "D1:3"}  # the cited lines' box
    said = make_retriever("box-hits-said", memory).retrieve(question, CONV, 1, 10**6)
    assert said.message_ids == plain.retrieve(question, CONV, 1, 10**6).message_ids  # shown, not ranked


def test_events_are_shown_under_each_line_they_cite_and_counted_in_the_budget(memory):
    _file(memory)
    r = make_retriever("box-hits-said", memory)
    ctx = r.retrieve("Where should Bob take his bike?", CONV, 10, 10**6)
    lines = ctx.text.split("\n")
    for cited in ("Ann: Guess what", "Ann: Signed up"):
        at = next(i for i, line in enumerate(lines) if line.startswith(cited))
        assert lines[at + 1] == SAID_PREFIX + "Ann enrolled in a ceramics course in early May 2023"
    at = next(i for i, line in enumerate(lines) if line.startswith("Bob: My bike"))
    assert lines[at + 1] == SAID_PREFIX + "Bob's bicycle tyre is flat"
    assert sum(line.startswith(SAID_PREFIX) for line in lines) == 3  # the uncited lines carry nothing
    for budget in (20, 40, 80):
        small = r.retrieve("Where should Bob take his bike?", CONV, 10, budget)
        assert small.tokens <= budget and count_tokens(small.text) == small.tokens


def test_events_without_sources_point_nowhere(memory):
    _file(memory, sources=False)  # a memory built before events kept their sources
    question = "Which ceramics course did Ann enroll in?"
    plain = make_retriever("box-hits", memory).retrieve(question, CONV, 1, 10**6)
    assert make_retriever("box-hits-events", memory).retrieve(question, CONV, 1, 10**6).text == plain.text
    assert SAID_PREFIX not in make_retriever("box-hits-said", memory).retrieve(question, CONV, 1, 10**6).text


