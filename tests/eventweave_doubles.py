"""EventWeave's test doubles, shared by tests/test_eventweave.py (building the graph) and
tests/test_eventweave_use.py (reading, changing and showing it): a scripted conversation of three sessions, the
FakeBackend's responder that extracts its scripted events, the config that builds both systems, and the Memory of
both over the doubles (tests/conftest.py's `ew` fixture)."""
from __future__ import annotations

import copy

from membox_local.memory import Memory
from membox_local.records import Message
from membox_local.testing import FakeBackend, FakeEmbedder

CONV = "ab"
S1, S2, S3 = "1:00 pm on 8 May, 2023", "10:00 am on 9 May, 2023", "6:00 pm on 20 May, 2023"
# (session, date, speaker, text, events the scripted extraction finds in it as the new turn)
SCRIPT = [
    ("1", S1, "Ana", "I adopted a grey cat named Pepper yesterday.",
     [("Ana adopted a grey cat named Pepper", "yesterday")]),
    ("1", S1, "Ben", "Nice! What does she eat?", []),
    ("1", S1, "Ana", "Pepper eats tuna and sleeps all day.", [("Pepper the cat eats tuna every day", "")]),
    ("1", S1, "Ben", "I am training for the Lisbon marathon next month.",
     [("Ben trains for the Lisbon marathon", "next month")]),
    ("2", S2, "Ana", "Sadly Pepper went missing the day before yesterday.",
     [("Ana's grey cat Pepper went missing", "the day before yesterday")]),
    ("2", S2, "Ben", "Oh no, I hope she comes back.", []),
    ("2", S2, "Ana", "Pepper, the grey cat I adopted, came back home today, hungry for tuna!",
     [("Ana adopted a grey cat named Pepper returned home", "today")]),
    ("3", S3, "Ben", "I ran the Lisbon marathon last Sunday in four hours.",
     [("Ben ran the Lisbon marathon in four hours", "last Sunday")]),
    ("3", S3, "Ana", "Congratulations, that is fast!", []),
]


def script_messages(conv: str = CONV) -> list[Message]:
    return [Message(conv, f"m{i}", sp, text, s, d) for i, (s, d, sp, text, _) in enumerate(SCRIPT)]


def new_turn(user: str) -> str:
    lines = user.splitlines()
    return lines[lines.index("New turn:") + 1].partition(": ")[2]


class Script:
    """The FakeBackend's responder for ew-extract: the scripted events of the new turn (other stages: the double's
    own rules). `fail`: texts whose extraction answers with output the schema refuses (once each)."""

    def __init__(self, fail: tuple[str, ...] = ()):
        self.events = {text: evs for *_, text, evs in SCRIPT}
        self.fail = set(fail)
        self.prompts: list[str] = []

    def __call__(self, r):
        if r.stage != "ew-extract":
            return None
        self.prompts.append(r.prompt.user)
        text = new_turn(r.prompt.user)
        if text in self.fail:
            self.fail.discard(text)
            return {"events": "not a list"}
        return {"events": [{"text": t, "when": w} for t, w in self.events.get(text, [])]}


def ew_config(cfg, systems=("membox", "eventweave"), **eventweave):
    c = copy.deepcopy(cfg)
    c.memory.systems = list(systems)
    c.retrieve.mode = "event-graph"
    # the FakeEmbedder's bag-of-words cosines: events sharing most words cluster, the pairs' contexts link
    c.eventweave.reasoning_threshold = 0.45
    for key, value in eventweave.items():
        setattr(c.eventweave, key, value)
    return c


def scripted_backend(script: Script | None = None) -> FakeBackend:
    b = FakeBackend()
    b.responder = script or Script()
    return b


def ew_memory(path, cfg) -> Memory:
    """A Memory of both systems over the doubles (the `ew` fixture of tests/conftest.py)."""
    return Memory(path, ew_config(cfg), backend=scripted_backend(), embedder=FakeEmbedder())


def canonical(store, conv: str = CONV) -> dict:
    """The graph with nodes named by their events' texts: equal for equal graphs, whatever the ids."""
    events = store.ew_events(conv, woven=True)
    key = {}
    for e in events:
        key.setdefault(e.node_id, []).append(e.text)
    name = {n: tuple(v) for n, v in key.items()}
    return {
        "events": [(e.text, e.when, e.date, e.first_day, e.last_day, tuple(e.sources)) for e in events],
        "nodes": sorted(name.values()),
        "edges": sorted((r["kind"], name[r["src"]], name[r["dst"]], round(r["weight"], 5))
                        for r in store.ew_edges(conv)),
        "updates": sorted((name[r["node_id"]], r["session"], round(r["cosine"], 5)) for r in store.ew_updates(conv)),
        "summaries": sorted((r["session"], r["status"], r["text"]) for r in store.ew_summaries(conv)),
    }


def stage_calls(backend: FakeBackend, stage: str) -> int:
    return sum(s == stage for s, _ in backend.calls)
