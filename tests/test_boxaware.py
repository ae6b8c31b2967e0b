"""Box-aware retrieval (box-hits, box-hits-trace) with the deterministic doubles."""
from __future__ import annotations

import numpy as np
import pytest

from membox_local.loom import file_into_boxes
from membox_local.retrieval.boxhits import HEADERS
from membox_local.records import Event, Message
from membox_local.retrieval import count_tokens, make_retriever

pytestmark = pytest.mark.numeric  # scores through BLAS: rerun on another kernel (make test-numeric)

# (session, date, topic, messages): each tuple is one box
BOXES = [
    ("1", "8 May 2023", "garden tomatoes", [
        ("Ann", "I planted cherry tomatoes in my garden this weekend"),
        ("Bob", "Nice, how many plants did you buy?"),
        ("Ann", "Six plants, the nursery had a sale"),
        ("Bob", "Six is plenty for a small plot"),
    ]),
    ("1", "8 May 2023", "car trouble", [
        ("Bob", "My car broke down on the highway yesterday"),
        ("Ann", "Oh no, did it need a tow truck?"),
        ("Bob", "Yes, a tow truck took it to the mechanic"),
    ]),
    ("2", "20 June 2023", "harvest", [
        ("Ann", "The cherry tomatoes are finally ripe in the garden"),
        ("Bob", "You should make a salad with them"),
    ]),
    ("2", "20 June 2023", "kitten", [
        ("Ann", "I adopted a grey kitten named Pixel"),
        ("Bob", "Pixel is a lovely name for a kitten"),
        ("Ann", "Pixel sleeps on the piano every evening"),
    ]),
]
CONV = "c1"


def _messages() -> list[Message]:
    out = []
    for session, date, _, turns in BOXES:
        n = sum(m.session == session for m in out)
        out += [Message(CONV, f"D{session}:{n + i + 1}", who, text, session, date) for i, (who, text) in enumerate(turns)]
    return out


def _file(memory, with_records: bool = True) -> list[int]:
    """The BOXES filed through the store as a build would leave them; returns the box ids."""
    store = memory.store
    store.add_messages(_messages())
    stored = {m.message_id: m for m in store.messages(CONV)}
    ids, pos = [], 0
    for session, date, topic, turns in BOXES:
        msgs = list(stored.values())[pos:pos + len(turns)]
        pos += len(turns)
        box_id = store.open_box(msgs[0])
        for m in msgs:
            store.file_message(m, box_id, "continue", None)
        store.set_box_status(box_id, "sealed")
        if with_records:
            store.save_extraction(box_id, topic, [topic], [Event(0, box_id, CONV, msgs[0].text, date)])
        ids.append(box_id)
    return ids


@pytest.fixture
def filed(memory):
    return _file(memory)


def _shown_lines(ctx) -> list[str]:
    return [line for line in ctx.text.split("\n") if line and not line.startswith(("[", "(topic: "))]


def test_budget_is_respected_and_counted_exactly(memory, filed):
    r = make_retriever("box-hits", memory)
    for budget in (30, 60, 120, 1000):
        ctx = r.retrieve("How many tomato plants did Ann buy?", CONV, 10**6, budget)
        assert ctx.tokens <= budget
        assert ctx.message_ids


def test_the_best_turn_is_always_shown_with_its_box_neighbours_first(memory, filed):
    r = make_retriever("box-hits", memory)
    ctx = r.retrieve("Where did the tow truck take the car?", CONV, 10**6, 40)
    assert "D1:7" in ctx.message_ids  # the hit
    # its nearest box neighbour comes before anything from another box
    assert "D1:6" in ctx.message_ids
    assert {"D1:5", "D1:6", "D1:7"} >= set(ctx.message_ids)


def test_context_never_crosses_a_box_boundary_for_neighbours(memory, filed):
    r = make_retriever("box-hits", memory)
    # D1:5 opens the car box; D1:4 (the garden box's last turn) is adjacent in time but another topic
    ctx = r.retrieve("My car broke down on the highway", CONV, 1, 10**6)
    assert set(ctx.message_ids) == {"D1:5", "D1:6", "D1:7"}  # k=1: the hit's box, whole


def test_windows_are_box_bounded_chunks_embedded_as_text(memory, filed):
    r = make_retriever("box-hits", memory)
    bm = r.box_map(CONV)
    for idx in bm.members:  # every test box is shorter than one chunk: one window per box, its whole text
        text = "\n".join(bm.messages[i].render() for i in idx)
        expected = memory.embedder.encode([text])[0]
        for i in idx:
            assert bm.windows[i] == pytest.approx(expected / np.linalg.norm(expected), abs=1e-6)
    firsts = [bm.windows[idx[0]] for idx in bm.members]
    assert all(not np.allclose(a, b) for n, a in enumerate(firsts) for b in firsts[n + 1:])


def test_time_order_and_box_headers(memory, filed):
    r = make_retriever("box-hits", memory)
    r.headers = "box"
    ctx = r.retrieve("cherry tomatoes garden", CONV, 10**6, 10**6)
    seqs = [int(mid.split(":")[1]) + 100 * int(mid[1]) for mid in ctx.message_ids]
    assert seqs == sorted(seqs)
    boxes = memory.store.boxes(CONV)
    blocks = ctx.text.split("\n\n")
    assert len(blocks) == len(ctx.box_ids) == 4
    for block, box_id in zip(blocks, ctx.box_ids):
        box = memory.store.box(box_id)
        assert block.split("\n")[0] == box.header()
        assert "| topic: " in box.header()
        assert block.split("\n")[1:] == [m.render() for m in box.messages]
    assert [b.id for b in boxes] == ctx.box_ids


@pytest.mark.parametrize("headers", HEADERS)
def test_every_header_layout_is_counted_exactly_and_labels_what_it_shows(memory, filed, headers):
    r = make_retriever("box-hits", memory)
    r.headers = headers
    by_id = {m.message_id: m for m in memory.store.messages(CONV)}
    box_of = {m.message_id: b for b in memory.store.boxes(CONV) for m in b.messages}
    for budget in (25, 60, 10**6):
        ctx = r.retrieve("cherry tomatoes garden kitten", CONV, 10**6, budget)
        assert ctx.tokens == count_tokens(ctx.text) <= budget
        assert _shown_lines(ctx) == [by_id[i].render() for i in ctx.message_ids]
        blocks = ctx.text.split("\n\n")
        dates = [b.split("\n")[0] for b in blocks]
        topics = [line for line in ctx.text.split("\n") if line.startswith("(topic: ")]
        shown_boxes = list(dict.fromkeys(box_of[i].id for i in ctx.message_ids))
        sessions = list(dict.fromkeys(by_id[i].session for i in ctx.message_ids))
        if headers == "box":
            assert dates == [memory.store.box(b).header() for b in shown_boxes] and not topics
        else:
            assert dates == [f"[{by_id[next(i for i in ctx.message_ids if by_id[i].session == s)].session_date}]"
                             for s in sessions]
            expected = [f"(topic: {memory.store.box(b).topic})" for b in shown_boxes] if headers == "session" else []
            assert topics == expected
            for block in blocks:  # a topic line comes right before the first shown message of its box
                lines = block.split("\n")[1:]
                for n, line in enumerate(lines):
                    if line.startswith("(topic: "):
                        assert not lines[n + 1].startswith("(topic: ")


def test_an_unknown_header_layout_fails_loudly(memory, filed):
    r = make_retriever("box-hits", memory)
    r.headers = "fancy"
    with pytest.raises(ValueError, match="headers 'fancy': expected one of date, session, box"):
        r.retrieve("kitten", CONV, 10, 100)


def test_message_ids_are_exactly_the_messages_shown(memory, filed):
    r = make_retriever("box-hits", memory)
    by_id = {m.message_id: m for m in memory.store.messages(CONV)}
    for budget in (20, 45, 90, 400):
        ctx = r.retrieve("What is the kitten called?", CONV, 10**6, budget)
        assert _shown_lines(ctx) == [by_id[i].render() for i in ctx.message_ids]
        assert ctx.tokens == count_tokens(ctx.text)


def test_trace_variant_adds_the_storyline_from_other_sessions(memory, filed):
    store = memory.store
    garden, _, harvest, _ = filed
    events = {b: store.events_of_box(b)[0].id for b in filed}
    store.create_trace(CONV, "Ann's tomatoes", [events[garden], events[harvest]])
    memory.config.retrieve.lexical_weight = 0.0  # cosine alone: BM25's stems find the harvest's "tomatoes" itself
    q = "How many tomato plants did Ann buy at the nursery sale?"
    plain = make_retriever("box-hits", memory).retrieve(q, CONV, 10**6, 80)
    traced = make_retriever("box-hits-trace", memory).retrieve(q, CONV, 10**6, 80)
    harvest_ids = {m.message_id for m in store.box(harvest).messages}
    assert not set(plain.message_ids) & harvest_ids
    assert set(traced.message_ids) & harvest_ids
    assert harvest in traced.box_ids and traced.tokens <= 80
    assert len(set(traced.message_ids)) == len(traced.message_ids)
    assert "D1:3" in traced.message_ids  # the hit itself stays


def test_trace_variant_without_traces_is_box_hits(memory, filed):
    q = "Pixel piano"
    a = make_retriever("box-hits", memory).retrieve(q, CONV, 10**6, 50)
    b = make_retriever("box-hits-trace", memory).retrieve(q, CONV, 10**6, 50)
    assert a.text == b.text and a.message_ids == b.message_ids


def test_unfiled_messages_and_missing_boxes(memory):
    memory.store.add_messages(_messages())
    with pytest.raises(ValueError, match="needs messages filed into boxes"):
        make_retriever("box-hits", memory).retrieve("kitten", CONV, 10, 100)


def test_file_into_boxes_uses_no_language_model_and_a_build_extracts_later(memory, fake_backend):
    memory.store.add_messages(_messages())
    assert file_into_boxes(memory, CONV) == len(_messages())
    boxes = memory.store.boxes(CONV)
    assert boxes and all(b.status == "sealed" and not b.topic for b in boxes)
    assert sum(len(b.messages) for b in boxes) == len(_messages())
    assert not fake_backend.calls
    ctx = make_retriever("box-hits", memory).retrieve("kitten Pixel", CONV, 10**6, 60)
    assert ctx.message_ids and ctx.text.startswith("[20 June 2023]")
    memory.add([], seal=True)  # a full build picks the sealed boxes up
    assert all(b.status == "extracted" for b in memory.store.boxes(CONV))
    assert make_retriever("box-hits", memory).needs == "boxes"


def test_length_cost_lowers_each_message_by_the_log_of_its_length(memory, filed):
    """`[retrieve] length_cost`: a message longer than length_free tokens loses cost x log(tokens / length_free) of
    its priority; relevance is untouched."""
    r = make_retriever("box-hits", memory)
    bm = r.box_map(CONV)
    qv = memory.embedder.encode(["cherry tomatoes in the garden"])[0]
    rel0, base = r.priorities(bm, qv)
    memory.config.retrieve.length_cost = 0.2
    assert np.allclose(r.priorities(bm, qv)[1], base)  # no message is longer than length_free (100): untouched
    memory.config.retrieve.length_free = 10
    rel1, costed = r.priorities(bm, qv)
    tokens = np.array([count_tokens(m.render()) for m in bm.messages], dtype=float)
    assert np.allclose(rel0, rel1)
    assert np.allclose(base - costed, 0.2 * np.log(np.maximum(1.0, tokens / 10)))
    assert (base - costed > 0).any() and (base - costed == 0).any()  # some messages are longer than 10 tokens, some not
    r.length_cost = 0.0  # a variant's own value wins over the config's
    assert np.allclose(r.priorities(bm, qv)[1], base)


def test_priorities_are_each_boxs_best_neighbour_less_decay_plus_the_box_cosine(memory, filed):
    """The priorities, computed for all boxes of a size at once, are the definition's, box by box."""
    r = make_retriever("box-hits", memory)
    bm = r.box_map(CONV)
    qv = memory.embedder.encode(["the kitten on the piano"])[0]
    rel, prio = r.priorities(bm, qv, "the kitten on the piano")
    for b, idx in enumerate(bm.members):
        for i in idx:
            best = max(rel[j] - r.decay * abs(list(idx).index(i) - list(idx).index(j)) for j in idx)
            assert prio[i] == pytest.approx(best + r.box_weight * float(bm.centroids[b] @ qv))


def test_a_memory_keeps_its_retriever_until_a_message_or_box_changes(memory, filed):
    """Memory.context reads the scope once: the retriever (its box map, BM25, windows) is kept while the store's
    messages and boxes are unchanged, and made anew after a write (Store.generation)."""
    memory.context("cherry tomatoes", CONV, mode="box-hits")
    kept = memory.retriever("box-hits")
    memory.context("a tow truck", CONV, mode="box-hits")  # a new question embedded and cached: not a change
    assert memory.retriever("box-hits") is kept
    memory.store.add_messages([Message(CONV, "D3:1", "Ann", "Pixel learned to open the fridge", "3", "1 July 2023")])
    assert "fridge" in memory.context("what did Pixel learn to open", CONV, mode="box-hits").text
    assert memory.retriever("box-hits") is kept  # brought up to date in place: messages were only added
    memory.forget(CONV, ["D3:1"])
    assert memory.retriever("box-hits") is not kept  # an erasure: made anew


def test_a_reader_memory_builds_anew_after_another_memory_erases(memory, filed):
    """The store's counts tell a second Memory of the folder (a server's reader) that the writer forgot or rewrote
    a message: its kept retriever is made anew, and the words are found no more."""
    from membox_local.memory import Memory
    from membox_local.testing import FakeEmbedder

    with Memory(memory.path, memory.config, embedder=FakeEmbedder()) as reader:
        assert "Pixel" in reader.context("the kitten named Pixel", CONV, mode="box-hits").text
        kept = reader.retriever("box-hits")
        memory.update(CONV, "D2:5", "The kitten naps on the sofa")
        assert reader.retriever("box-hits") is not kept
        kept = reader.retriever("box-hits")
        memory.forget(CONV, ["D2:3", "D2:4", "D2:5"])
        assert reader.retriever("box-hits") is not kept
        assert "Pixel" not in reader.context("the kitten named Pixel", CONV, mode="box-hits").text


def test_a_box_map_brought_up_to_date_is_the_one_built_anew(memory):
    """boxhits.extended: after more messages are stored, filed into boxes, sealed, or left pending, the kept map
    extended in place equals the map a new retriever builds, array by array, and so does the context."""
    msgs = _messages()
    store = memory.store
    store.add_messages(msgs[:5])
    stored = store.messages(CONV)
    first = store.open_box(stored[0])
    for m in stored[:4]:
        store.file_message(m, first, "continue", None)
    store.set_box_status(first, "sealed")
    second = store.open_box(stored[4])  # left open, with one message
    store.file_message(stored[4], second, "continue", None)
    r = make_retriever("box-hits", memory)
    bm = r.box_map(CONV)
    bm.message_tokens(), bm.lexical_index()
    store.add_messages(msgs[5:])  # the open box grows and is sealed, a box is filed, the last messages stay pending
    rest = store.messages(CONV)[5:]
    store.file_message(rest[0], second, "continue", None)
    store.file_message(rest[1], second, "continue", None)
    store.set_box_status(second, "sealed")
    third = store.open_box(rest[2])
    for m in rest[2:5]:
        store.file_message(m, third, "continue", None)
    assert r.refresh() and r.box_map(CONV) is not bm  # brought up to date in place: extended, then BM25 grown
    new, fresh = r.box_map(CONV), make_retriever("box-hits", memory).box_map(CONV)
    assert [m.message_id for m in new.messages] == [m.message_id for m in fresh.messages]
    assert [b.id for b in new.boxes] == [b.id for b in fresh.boxes] and new.box_of.tolist() == fresh.box_of.tolist()
    assert [x.tolist() for x in new.members] == [x.tolist() for x in fresh.members]
    for name in ("vectors", "windows", "centroids"):
        assert np.allclose(getattr(new, name), getattr(fresh, name)), name
    assert new.message_tokens().tolist() == fresh.message_tokens().tolist()
    q = "did Ann adopt a kitten named Pixel"
    assert np.allclose(new.lexical_index().scores(q), fresh.lexical_index().scores(q))
    assert r.retrieve(q, CONV, 5, 60).text == make_retriever("box-hits", memory).retrieve(q, CONV, 5, 60).text


@pytest.fixture
def second_stage(memory, filed, tmp_path, monkeypatch):
    """box-hits with the evidence cross-encoder's double as its second stage (testing.FakeContinuityScorer: the
    logit grows with the share of the line's words that the question holds)."""
    from membox_local import continuity
    from membox_local.testing import FakeContinuityScorer

    monkeypatch.setitem(continuity.MODELS, "scorer", FakeContinuityScorer)
    weights = tmp_path / "evidence-double.safetensors"
    weights.write_bytes(b"")
    memory.config.retrieve.evidence_model = str(weights)
    memory.config.retrieve.evidence_prior = 0.0  # the double's logit alone decides the order
    return memory


def test_second_stage_shows_the_lines_its_scorer_ranks_first(second_stage):
    ctx = make_retriever("box-hits", second_stage).retrieve("Pixel kitten piano evening", CONV, 10**6, 15)
    # the double's best line fits alone in 15 tokens with its date line; the next best would not
    assert ctx.message_ids == ["D2:5"] and ctx.tokens <= 15
    assert [m.message_id for m in ctx.shown] == ctx.message_ids


def test_second_stage_neighbours_and_candidates(second_stage):
    second_stage.config.retrieve.evidence_neighbours = 1
    ctx = make_retriever("box-hits", second_stage).retrieve("Pixel kitten piano evening", CONV, 10**6, 1000)
    assert set(ctx.ranked_ids[:2]) == {"D2:5", "D2:4"}  # the best line, then its nearest box neighbour
    second_stage.config.retrieve.evidence_candidates = 2
    ctx = make_retriever("box-hits", second_stage).retrieve("Pixel kitten piano evening", CONV, 10**6, 1000)
    assert len(ctx.message_ids) <= 2 * 3  # two candidates, each with at most its two neighbours


def test_a_continuity_file_is_refused_as_the_second_stage(memory, filed, tmp_path, monkeypatch):
    from membox_local import continuity
    from membox_local.config import ConfigError
    from membox_local.testing import FakeContinuityScorer

    monkeypatch.setitem(continuity.MODELS, "scorer", FakeContinuityScorer)
    weights = tmp_path / "ce-tiage.safetensors"
    weights.write_bytes(b"")
    memory.config.retrieve.evidence_model = str(weights)
    with pytest.raises(ConfigError, match="evidence_model.*continuity cross-encoder"):
        make_retriever("box-hits", memory).retrieve("Pixel?", CONV, 10, 100)


def test_a_large_scopes_box_map_is_kept_beside_the_store_and_read_by_the_next_memory(memory, filed, monkeypatch):
    """retrieval/snapshot.py (its size floor lowered for the doubles): after a question, the scope's map is written
    beside the store; a new Memory of the folder reads it instead of the scope (no window is embedded again), adds what
    was filed since as any later filing is, and answers as a map made anew does; a damaged file is made again."""
    from membox_local.memory import Memory
    from membox_local.retrieval import boxhits, snapshot
    from membox_local.testing import FakeEmbedder

    monkeypatch.setattr(snapshot, "MIN_MESSAGES", 4)
    q = "did Ann adopt a kitten named Pixel"
    before = memory.context(q, CONV, mode="box-hits").text
    (written,) = memory.path.glob("*.snapshot.npz")
    assert written.stat().st_mode & 0o777 == 0o600  # the messages' terms: owner-only, as the store
    with monkeypatch.context() as patched, Memory(memory.path, memory.config, embedder=FakeEmbedder()) as reader:
        patched.setattr(boxhits, "box_map", lambda *a, **k: pytest.fail("the scope was read again"))
        assert reader.context(q, CONV, mode="box-hits").text == before
    memory.store.add_messages([Message(CONV, "D3:1", "Ann", "Pixel learned to open the fridge", "3", "1 July 2023")])
    q2 = "what did Pixel learn to open"
    with Memory(memory.path, memory.config, embedder=FakeEmbedder()) as reader:
        got = reader.context(q2, CONV, mode="box-hits").text
    written.rename(written.with_suffix(".aside"))
    with Memory(memory.path, memory.config, embedder=FakeEmbedder()) as anew:  # made from the store alone
        assert "fridge" in got and got == anew.context(q2, CONV, mode="box-hits").text
        now = anew.context(q, CONV, mode="box-hits").text
    written.write_bytes(written.with_suffix(".aside").read_bytes()[:200])  # a crash or a full disk left it damaged
    with Memory(memory.path, memory.config, embedder=FakeEmbedder()) as reader:
        assert reader.context(q, CONV, mode="box-hits").text == now


def test_forgetting_deletes_the_snapshots_and_a_stale_one_is_never_read(memory, filed, monkeypatch):
    """The snapshot holds the messages' BM25 terms: Memory.forget deletes it with the vector indexes; one written
    before an erasure that another process made (its erasure count older than the store's) is deleted unread."""
    from membox_local.memory import Memory
    from membox_local.retrieval import snapshot
    from membox_local.testing import FakeEmbedder

    monkeypatch.setattr(snapshot, "MIN_MESSAGES", 4)
    memory.context("the kitten named Pixel", CONV, mode="box-hits")
    assert list(memory.path.glob("*.snapshot.npz"))
    memory.forget(CONV, ["D2:3"])
    assert not list(memory.path.glob("*.snapshot.npz"))
    memory.context("the kitten named Pixel", CONV, mode="box-hits")
    (path,) = memory.path.glob("*.snapshot.npz")
    kept = path.read_bytes()
    memory.forget(CONV, ["D2:4"])
    path.write_bytes(kept)  # as if written by a process that had not seen the erasure
    with Memory(memory.path, memory.config, embedder=FakeEmbedder()) as reader:
        assert snapshot.load(reader, "box-hits", CONV) is None and not path.exists()


def test_a_snapshot_is_written_again_once_the_scope_grew_by_a_quarter(memory, filed, monkeypatch):
    """A Memory that read a snapshot and brought it up to date writes it again after its question when the scope
    holds 25% more messages than the file (not at every new message)."""
    import json

    from membox_local.memory import Memory
    from membox_local.retrieval import snapshot
    from membox_local.testing import FakeEmbedder

    monkeypatch.setattr(snapshot, "MIN_MESSAGES", 4)
    memory.context("the kitten named Pixel", CONV, mode="box-hits")
    (path,) = memory.path.glob("*.snapshot.npz")
    held = lambda: json.loads(str(np.load(path)["meta"]))["messages"]  # noqa: E731
    first = held()
    assert first + 2 < 1.25 * first <= first + 4  # (the doubles' scope: 12 messages)
    for n, expected in ((0, first), (1, first + 4)):
        more = [Message(CONV, f"D9:{n}{i}", "Ann", f"Pixel found toy number {n}{i}", "9", "2 July 2023") for i in range(2)]
        memory.store.add_messages(more)
        with Memory(memory.path, memory.config, embedder=FakeEmbedder()) as reader:
            reader.context("what did Pixel find", CONV, mode="box-hits")
        assert held() == expected
