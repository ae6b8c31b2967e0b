"""The fits' data: TIAGE and DialSeg711 dialogues, LoCoMo conversations, and TIAGE dialogues played together."""
from __future__ import annotations

import os
from pathlib import Path

from ..evaluation.segmentation import Dialogue, load_dialogues
from ..ingest import InputError
from ..records import Message

DEFAULT_DATA_DIR = "../shared/data"


def default_data_dir() -> str:
    return os.environ.get("MEMBOX_DATA", DEFAULT_DATA_DIR)


def data_dir(path: str | Path) -> Path:
    """The data folder (segmentation/*.json and locomo-dev.json), refused at once when it is not there."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: no such data folder (--data-dir, or set MEMBOX_DATA)")
    return path


def dialogues(data: Path, name: str, limit: int | None = None) -> list[Dialogue]:
    """`data`/segmentation/`name`.json, its first `limit` dialogues (all with none or 0)."""
    return load_dialogues(data / "segmentation" / f"{name}.json", limit)


def locomo_conversations(data: Path) -> dict[str, list[Message]]:
    """The LoCoMo dev conversations' messages, by conversation, in order."""
    from ..ingest import load_locomo

    out: dict[str, list[Message]] = {}
    for m in load_locomo(data / "locomo-dev.json"):
        out.setdefault(m.conversation_id, []).append(m)
    return out


def joined(dialogues, k: int):
    """Consecutive groups of `k` dialogues played as one (DialSeg711's own construction, here from TIAGE): a
    join is a boundary, next to each dialogue's annotated shifts. Speakers are kept as they were; a last group
    of fewer than `k` dialogues is left out."""
    out = []
    for g in range(0, len(dialogues) - k + 1, k):
        group = dialogues[g:g + k]
        did = "+".join(d.id for d in group)
        msgs, bounds = [], []
        for d in group:
            if msgs:
                bounds.append(len(msgs))
            bounds += [len(msgs) + b for b in d.boundaries]
            msgs += [Message(did, str(len(msgs) + i), m.speaker, m.text, "1", "", len(msgs) + i)
                     for i, m in enumerate(d.messages)]
        out.append(Dialogue(did, msgs, bounds))
    return out


def joins_only(dialogues, k: int = 2):
    """TIAGE dialogues played `k` at a time (as `joined`), with only the joins as boundaries."""
    import numpy as np

    lengths = {d.id: len(d.messages) for d in dialogues}
    return [Dialogue(d.id, d.messages, [int(n) for n in np.cumsum([lengths[i] for i in d.id.split("+")])[:-1]])
            for d in joined(dialogues, k)]


def sessions_of(conversations: dict[str, list]) -> list[list]:
    """Each conversation's messages split by session, in order: a session change seals the box, so the judge's
    context never crosses one (the unit that precompute_scores scores)."""
    return [[m for m in v if m.session == s] for v in conversations.values()
            for s in dict.fromkeys(m.session for m in v)]


def longmemeval_sessions(path: str | Path, count: int, seed: int = 0) -> list[Dialogue]:
    """`count` distinct sessions of a LongMemEval file's histories (a session that several histories share counted
    once), drawn by a seeded shuffle, each a dialogue without annotated shifts: user-and-assistant material for the
    cross-encoder (a turn continues its session; one session's end against another's first turn is a switch)."""
    import random

    from ..evaluation.longmemeval import read_file, to_question

    sessions: dict[str, list[Message]] = {}
    for rec in read_file(path):
        mine: dict[str, list[Message]] = {}
        for m in to_question(rec).messages:  # a session repeated inside a history is keyed "<id>#2"
            mine.setdefault(m.session, []).append(m)
        for key, msgs in mine.items():
            sessions.setdefault(key.split("#")[0], msgs)
    keys = sorted(sessions)
    random.Random(seed).shuffle(keys)
    return [Dialogue(k, sessions[k], []) for k in keys[:count]]
