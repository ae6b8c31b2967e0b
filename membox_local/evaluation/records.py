"""The records a build model writes, checked against their boxes (benchmarks/records_check.py composes it): what
code keeps, drops and corrects from a saved raw extraction output, how much of each kept event its cited line alone
holds, and the hand labels of who the kept events name."""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

from ..attribution import (checked_topic, display_name, extracted_events, model_topic, statements,
                           without_names)
from ..grounding import grounding
from ..loom import text_keywords
from ..prompts import extract_system
from ..records import Box


def participants(box: Box, boxes: list[Box]) -> list[str]:
    """The speakers of the box's conversation in the sample (each LoCoMo conversation has two)."""
    return list(dict.fromkeys(m.speaker for b in boxes if b.conversation_id == box.conversation_id
                              for m in b.messages))


def kept(box: Box, raw: dict, boxes: list[Box], cfg) -> tuple[str, list, dict]:
    """(topic, events, dropped) as the Loom stores them from the saved raw output (events written, or made from the
    lines by code where the output has none: [extract] events = "lines")."""
    ec = dataclasses.replace(cfg.extract, events="written" if "events" in raw else "lines")
    instructions = extract_system(ec)
    events, dropped = extracted_events(raw, box, box.messages, participants(box, boxes), instructions, ec)
    kws = text_keywords(box.messages, cfg.extract.max_keywords, cfg.extract.max_keyword_chars)
    topic, why = checked_topic(model_topic(raw, ec.events), box, kws, instructions, participants(box, boxes))
    return topic, events, dict(dropped, **({why: 1} if why else {}))


def in_own_line(event, box: Box, people: list[str]) -> float:
    """The kept event's grounding in its cited line alone (its statements), names, resolved dates and "and others"
    (what the code added) left out."""
    line = next(m for m in box.messages if m.message_id == event.sources[0])
    words = re.sub(r"\([^)]*\)", " ", event.text).replace(" and others", " ")
    return grounding(without_names(words, people), statements(line.text))


def records_row(chosen: list[Box], boxes: list[Box], recs: dict[str, dict], labels: dict | None, cfg,
                key: Callable[[Box], str]) -> dict:
    """One model's row over the `chosen` boxes: its saved raw outputs (`recs`: box key -> {"s", "data" or "error"})
    kept as the Loom keeps them; `labels`: box key -> numbers of kept events that name the wrong person (hand check;
    None: not checked)."""
    n_events, dropped, wrong, seconds, failed, no_one, own = 0, {}, 0, [], 0, 0, 0
    for box in chosen:
        rec = recs.get(key(box))
        if rec is None:
            continue
        seconds.append(rec["s"])
        if "data" not in rec:
            failed += 1
            continue
        _, events, why = kept(box, rec["data"], boxes, cfg)
        n_events += len(events)
        people = [display_name(p) for p in participants(box, boxes)]
        no_one += sum(not any(p.lower() in e.text.lower() for p in people) for e in events)
        own += sum(in_own_line(e, box, participants(box, boxes)) >= cfg.extract.min_grounding for e in events)
        for reason, n in why.items():
            dropped[reason] = dropped.get(reason, 0) + n
        wrong += len((labels or {}).get(key(box), []))
    checked = labels is not None and all(key(b) in labels for b in chosen if key(b) in recs)
    return {"boxes": len(seconds), "failed": failed, "events": n_events,
            "events_per_box": round(n_events / max(1, len(seconds)), 2), "dropped": dropped,
            # events that name neither participant (a thing's fact, or a line with no person in it)
            "names_no_participant": no_one,
            # kept events whose words their cited line alone holds to [extract] min_grounding
            "grounded_in_cited_line": round(own / max(1, n_events), 3),
            "hand_checked": checked, "wrong_person": wrong if checked else None,
            "wrong_person_share": round(wrong / max(1, n_events), 3) if checked else None,
            "s_per_box": round(sum(seconds) / max(1, len(seconds)), 1)}
