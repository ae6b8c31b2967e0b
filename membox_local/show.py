"""Readable printouts of a memory (`membox show STORE`): its boxes with their records, each event with the
messages it was read from and each box with what the code dropped from its record; its traces (`--traces`)."""
from __future__ import annotations

import sys
from typing import Iterator, Mapping, TextIO

from .records import Box, Event
from .terminal import visible, visible_lines
from .store import Store

# below this grounding an event is flagged as weakly grounded (view.py flags it the same way)
WEAK_GROUNDING = 0.5
MAX_SOURCES_SHOWN = 6  # an event citing more messages shows these and "+N"
# said once (per conversation named) when events were extracted before events kept their sources
NO_SOURCES = ("the events of {where} were extracted before events kept the messages they were read from; build "
              "the memory again from its data into a new folder (membox build DATA --store NEW_DIR) to give them "
              "their sources")


def sources_text(sources: list[str] | None) -> str:
    """An event's sources, compact ("[D1:3, D1:4]"); "" for an event that kept none (None: extracted before
    events kept their sources), "[no source]" for one that cites no message."""
    if sources is None:
        return ""
    if not sources:
        return "[no source]"
    shown = ", ".join(visible(s) for s in sources[:MAX_SOURCES_SHOWN])
    more = f", +{len(sources) - MAX_SOURCES_SHOWN}" if len(sources) > MAX_SOURCES_SHOWN else ""
    return f"[{shown}{more}]"


def dropped_text(dropped: Mapping[str, int]) -> str:
    """What the code dropped or corrected in a box's record (Box.dropped), one line: "dropped: 1 question,
    2 unsupported, the topic (placeholder); corrected: 1 subject"; "" when nothing was."""
    gone, fixed = [], []
    for reason, n in dropped.items():
        if not n:
            continue
        if reason.endswith(" corrected"):
            fixed.append(f"{n} {visible(reason[:-len(' corrected')])}")
        elif reason.startswith("topic "):  # the topic dropped, for this reason
            gone.append(f"the topic ({visible(reason[len('topic '):])})")
        else:
            gone.append(f"{n} {visible(reason)}")
    return "; ".join(([f"dropped: {', '.join(gone)}"] if gone else []) +
                     ([f"corrected: {', '.join(fixed)}"] if fixed else []))


def without_sources(events: list[Event]) -> bool:
    """Whether some of these events were extracted before events kept their sources."""
    return any(e.sources is None for e in events)


def box_lines(box: Box, messages: bool = False) -> Iterator[str]:
    """One box: its head line, topic, keywords, note, what was dropped, events (with their sources) and error;
    with `messages`, its messages."""
    first = box.messages[0].message_id if box.messages else "-"
    last = box.messages[-1].message_id if box.messages else "-"
    yield (f"box {box.id} [{visible(box.conversation_id)} {visible(first)}..{visible(last)}, "
           f"{len(box.messages)} msgs, {visible(box.session_date or 'session ' + box.session)}] {box.status}")
    if box.topic:
        yield f"  topic: {visible(box.topic)}"
    if box.keywords:
        yield f"  keywords: {', '.join(visible(k) for k in box.keywords)}"
    if box.note:
        yield f"  note: {visible(box.note)}"
    if dropped_text(box.dropped):
        yield f"  {dropped_text(box.dropped)}"
    for e in box.events:
        mark = "" if e.grounding >= WEAK_GROUNDING else f"  (weakly grounded: {e.grounding:.2f})"
        cited = sources_text(e.sources)
        yield f"  - {visible(e.text)}{'  ' + cited if cited else ''}{mark}"
    if box.error:
        yield f"  error: {visible(box.error)}"
    if messages:
        for m in box.messages:
            yield f"    {visible(m.render())}"


def format_boxes(store: Store, conversation_id: str | None = None, failed: bool = False,
                 messages: bool = False) -> Iterator[str]:
    """Every box (of one conversation, or all), or with `failed` only those whose extraction or weaving failed;
    then, once, which conversations have events extracted before events kept their sources."""
    unsourced: list[str] = []  # conversations with such events, in order
    for box in store.boxes(conversation_id):
        if failed and box.status != "failed" and not box.error:
            continue
        if without_sources(box.events) and box.conversation_id not in unsourced:
            unsourced.append(box.conversation_id)
        yield from box_lines(box, messages)
    if unsourced:
        names = ", ".join(visible(c) for c in unsourced[:5]) + (", ..." if len(unsourced) > 5 else "")
        yield "note: " + NO_SOURCES.format(where=f"conversation{'s' if len(unsourced) > 1 else ''} {names}")


def print_boxes(store: Store, conversation_id: str | None = None, failed: bool = False, messages: bool = False,
                file: TextIO | None = None) -> None:
    for line in format_boxes(store, conversation_id, failed, messages):
        print(line, file=file or sys.stdout)


def format_traces(store: Store, conversation_id: str | None = None) -> str:
    """Every trace with its summary, then its events in time order with date and box id."""
    traces = store.traces_with_events(conversation_id)
    if not traces:
        where = f" for conversation {conversation_id}" if conversation_id else ""
        return f"no traces{where} (traces are woven when boxes are extracted with [weaver] enabled = true)"
    out = []
    for trace, events in traces:
        boxes = len({e.box_id for e in events})
        dates = list(dict.fromkeys(e.date for e in events if e.date))
        span = f", {dates[0]} .. {dates[-1]}" if len(dates) > 1 else (f", {dates[0]}" if dates else "")
        n = f"{len(events)} event" + ("s" if len(events) != 1 else "")
        out.append(f"trace {trace.id} [{trace.conversation_id}, {n} in {boxes} box(es){span}]")
        out.append(f"  {trace.summary}")
        for e in events:
            out.append(f"  - {e.date or 'no date'} (box {e.box_id}): {e.text}")
    return "\n".join(out)


def print_traces(store: Store, conversation_id: str | None = None, file: TextIO | None = None) -> None:
    print(visible_lines(format_traces(store, conversation_id)), file=file or sys.stdout)
