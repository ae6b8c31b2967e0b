"""The records a build model writes, checked against their boxes (benchmarks/records_check.py composes it): what
code keeps, drops and corrects from a saved raw extraction output, how much of each kept event its cited line alone
holds, and the hand labels of who the kept events name (and, where labelled, which are pleasantries or repeats)."""
from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from pathlib import Path
from typing import Callable

from ..attribution import (checked_topic, display_name, extracted_events, model_topic, statements,
                           without_names)
from ..grounding import grounding
from ..loom import text_keywords
from ..prompts import extract_system
from ..records import Box
from ..store import built_systems, store_class
from ..systems import tables_for

CONVERSATIONS = ("conv-26", "conv-30", "conv-44")  # the LoCoMo dev sample of the hand checks (docs/experiments.md)


def box_key(box: Box) -> str:
    return f"{box.conversation_id}/{box.messages[0].message_id}"


def _boxes(folder: Path, conversation: str | None = None) -> list[Box]:
    db = folder / "memory.db"
    store = store_class(tables_for(built_systems(db)))(db)
    try:
        return [b for c in ([conversation] if conversation else store.conversations()) for b in store.boxes(c)]
    finally:
        store.close()


def sample_boxes(builds: Path, per_conversation: int, conversations=CONVERSATIONS) -> list[Box]:
    """Every n-th box of 3+ messages of each conversation's boxes-only build (`builds/CONV`), `per_conversation` of
    them (the 30 boxes of the first hand check)."""
    out = []
    for conv in conversations:
        if not (builds / conv / "memory.db").exists():
            raise SystemExit(f"{builds / conv}: no build; make it first (`membox eval locomo --boxes-only`)")
        boxes = [b for b in _boxes(builds / conv, conv) if len(b.messages) >= 3]
        if not boxes:
            raise SystemExit(f"{builds / conv}: no boxes; build them first (`membox eval locomo --boxes-only`)")
        step = max(1, len(boxes) // per_conversation)
        out += boxes[::step][:per_conversation]
    return out


def filed_boxes(folder: Path, messages: list, memory_factory) -> list[Box]:
    """The messages filed into boxes (no records) in `folder` once, by the judge of the Memory `memory_factory()`
    opens there (the demo's boxes as `make demo` files them)."""
    from ..loom import file_into_boxes

    if not (folder / "memory.db").exists():
        mem = memory_factory()
        mem.store.add_messages(messages)
        for conv in dict.fromkeys(m.conversation_id for m in messages):
            file_into_boxes(mem, conv)
        mem.close()
    return _boxes(folder)


def extract_raw(boxes: list[Box], cfg, backend, path: Path) -> None:
    """Each box's raw extraction output from `backend` appended to `path` as {"box", "s", "data" or "error"};
    boxes already there are skipped (resumable)."""
    from ..backends.base import JsonRequest
    from ..prompts import extract_prompt, extract_schema

    done = {json.loads(line)["box"] for line in path.open()} if path.exists() else set()
    with path.open("a") as fh:
        for box in (b for b in boxes if box_key(b) not in done):
            t0 = time.time()
            req = JsonRequest(extract_prompt(box.messages, box.session_date, cfg.extract),
                              extract_schema(cfg.extract, len(box.messages)), "extract", cfg.extract.max_tokens)
            res = backend.json([req])[0]
            rec = {"box": box_key(box), "s": round(time.time() - t0, 2)}
            rec.update({"error": str(res)} if isinstance(res, BaseException) else {"data": res.data})
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            print(f"{path.stem} {box_key(box)} {rec['s']} s", file=sys.stderr)


def records_table(rows: dict[str, dict]) -> list[str]:
    """records_row's rows (name -> row) as a Markdown table."""
    out = ["| model / boxes | boxes | events/box | words of the dialogue's | wrong person (hand) | pleasantries / "
           "repeats (hand) | name no participant | grounded in cited line | dropped (by code) | s/box |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        hand = f"{r['wrong_person']} ({100 * r['wrong_person_share']:.1f}%)" if r["hand_checked"] else "not checked"
        drops = ", ".join(f"{n} {k}" for k, n in sorted(r["dropped"].items())) or "none"
        none = f"{r['names_no_participant']} ({100 * r['names_no_participant'] / max(1, r['events']):.0f}%)"
        told = (f"{100 * r['chat_share']:.1f}% / {100 * r['repeated_share']:.1f}%"
                if r.get("chat_share") is not None else "not checked")
        out.append(f"| {name} | {r['boxes']} | {r['events_per_box']} | {r.get('record_share', '')} | {hand} | {told} "
                   f"| {none} | {100 * r['grounded_in_cited_line']:.0f}% | {drops} | {r['s_per_box']} |")
    return out


def participants(box: Box, boxes: list[Box]) -> list[str]:
    """The speakers of the box's conversation in the sample (each LoCoMo conversation has two)."""
    return list(dict.fromkeys(m.speaker for b in boxes if b.conversation_id == box.conversation_id
                              for m in b.messages))


def keep_flags(box: Box, cfg) -> list[list[bool]] | None:
    """Per line of the box, which sentences [extract] keep_model keeps (as Loom.worth_keeping); None without one."""
    if not cfg.extract.keep_model:
        return None
    from ..embed import make_embedder
    from ..worth import flat, line_sentences, load_keep_model

    model = load_keep_model(cfg.extract.keep_model, cfg.embedder.model)
    if cfg.embedder.model not in _EMBEDDERS:
        _EMBEDDERS[cfg.embedder.model] = make_embedder(cfg.embedder)
    split = [line_sentences(m.text) for m in box.messages]
    texts = list(flat(split))
    return model.kept_per_line(split, _EMBEDDERS[cfg.embedder.model].encode(texts) if texts else None)


_EMBEDDERS: dict = {}


def kept(box: Box, raw: dict, boxes: list[Box], cfg) -> tuple[str, list, dict]:
    """(topic, events, dropped) as the Loom stores them from the saved raw output (events written, or made from the
    lines by code where the output has none: [extract] events = "lines", the config's keep model applied)."""
    ec = dataclasses.replace(cfg.extract, events="written" if "events" in raw else "lines")
    instructions = extract_system(ec)
    flags = keep_flags(box, cfg) if ec.events == "lines" else None
    events, dropped = extracted_events(raw, box, box.messages, participants(box, boxes), instructions, ec, flags)
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
    words = [0, 0]  # the kept events' words, the boxes' messages' words
    chat = repeated = told = 0  # events labelled pleasantry / repeat (labels of the form {"wrong", "chat", ...})
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
        words[0] += sum(len(e.text.split()) for e in events)
        words[1] += sum(len(m.text.split()) for m in box.messages)
        people = [display_name(p) for p in participants(box, boxes)]
        no_one += sum(not any(p.lower() in e.text.lower() for p in people) for e in events)
        own += sum(in_own_line(e, box, participants(box, boxes)) >= cfg.extract.min_grounding for e in events)
        for reason, n in why.items():
            dropped[reason] = dropped.get(reason, 0) + n
        label = (labels or {}).get(key(box), [])
        label = label if isinstance(label, dict) else {"wrong": label}
        wrong += len(label.get("wrong", []))
        chat += len(label.get("chat", []))
        repeated += len(label.get("repeated", []))
        told += "chat" in label
    checked = labels is not None and all(key(b) in labels for b in chosen if key(b) in recs)
    told_all = checked and told == len([b for b in chosen if key(b) in recs and "data" in recs[key(b)]])
    return {"boxes": len(seconds), "failed": failed, "events": n_events,
            "events_per_box": round(n_events / max(1, len(seconds)), 2), "dropped": dropped,
            "record_share": round(words[0] / max(1, words[1]), 3),  # the records' words over the dialogue's
            # events that name neither participant (a thing's fact, or a line with no person in it)
            "names_no_participant": no_one,
            # kept events whose words their cited line alone holds to [extract] min_grounding
            "grounded_in_cited_line": round(own / max(1, n_events), 3),
            "hand_checked": checked, "wrong_person": wrong if checked else None,
            "wrong_person_share": round(wrong / max(1, n_events), 3) if checked else None,
            # events a person would not keep: greetings, thanks, agreement, reactions; events that say again what
            # an earlier event of the box said (hand labels; None where the boxes were not labelled for them)
            "chat_share": round(chat / max(1, n_events), 3) if told_all else None,
            "repeated_share": round(repeated / max(1, n_events), 3) if told_all else None,
            "s_per_box": round(sum(seconds) / max(1, len(seconds)), 1)}
