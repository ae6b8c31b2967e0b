"""Readable printouts of a memory's traces (`membox show STORE --traces`)."""
from __future__ import annotations

import sys
from typing import TextIO

from .terminal import visible_lines
from .store import Store


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
