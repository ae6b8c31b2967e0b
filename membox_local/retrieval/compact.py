"""The paper's modes over whole boxes.

`compact` ranks whole boxes by the cosine between the question and the box (topic, keywords and text) and
shows the best ones, in time order, each under its date and topic. `trace` shows the same boxes, each followed
by a few dated events from the Trace Weaver's traces through it (other sessions of the same storyline).
"""
from __future__ import annotations

from ..records import Box, Event
from .base import Context, Retriever, count_tokens, register
from .layout import render_box


@register
class CompactRetriever(Retriever):
    name = "compact"

    def retrieve(self, question, conversation_id, k, budget_tokens):
        hits = self.memory.search(question, k=k, conversation_id=conversation_id)
        self.prepare(question, hits)
        chosen, used = [], 0
        for box, score in hits:
            block = render_box(box)
            cost = count_tokens(block)
            if used + cost > budget_tokens:
                if chosen:
                    continue  # a smaller box further down may still fit
                block = _truncate(block, budget_tokens)
                cost = count_tokens(block)
            extra, event_ids = self.expand(box, budget_tokens - used - cost)
            chosen.append((box, score, block, extra, event_ids))
            used += cost + count_tokens(extra)
        chosen.sort(key=lambda x: (x[0].messages[0].seq if x[0].messages else 0, x[0].id))
        ctx = Context("\n\n".join(b + extra for _, _, b, extra, _ in chosen))
        for box, score, block, _, event_ids in chosen:
            ctx.box_ids.append(box.id)
            ctx.scores[box.id] = score
            shown = block.count("\n")  # header line + one line per shown message
            ctx.message_ids += [m.message_id for m in box.messages[:shown]]
            ctx.shown += box.messages[:shown]
            ctx.event_ids += event_ids
        return ctx

    def prepare(self, question: str, hits: list[tuple[Box, float]]) -> None:
        """Called once per question before layout (modes that add to boxes load what they need here)."""

    def expand(self, box: Box, budget_tokens: int) -> tuple[str, list[int]]:
        """Text shown right after a chosen box, starting with a newline, and the event ids it shows;
        its tokens count toward the budget. Compact mode adds nothing."""
        return "", []


@register
class TraceRetriever(CompactRetriever):
    """Compact boxes, each followed by up to `retrieve.event_k` events (0: all) from the traces its events
    belong to, ranked by cosine to the question, from boxes not among the hits, each event shown once."""

    name = "trace"
    heading = "Same storyline, other times:"

    def prepare(self, question, hits):
        store = self.memory.store
        self.excluded = {box.id for box, _ in hits}
        self.shown: set[int] = set()
        self.traces_of: dict[int, list[int]] = {}
        self.members: dict[int, list[Event]] = {}
        for conv in dict.fromkeys(box.conversation_id for box, _ in hits):
            for trace, events in store.traces_with_events(conv):
                self.members[trace.id] = events
                for e in events:
                    self.traces_of.setdefault(e.id, []).append(trace.id)
        hit_traces = {t for box, _ in hits for e in box.events for t in self.traces_of.get(e.id, [])}
        pool = list({e.id: e for t in hit_traces for e in self.members[t] if e.box_id not in self.excluded}.values())
        vecs = self.memory.embedder.encode([question] + [e.text for e in pool])
        self.score = {e.id: float(vecs[0] @ v) for e, v in zip(pool, vecs[1:])}

    def expand(self, box, budget_tokens):
        n = self.memory.config.retrieve.event_k
        related = {e.id: e for src in box.events for t in self.traces_of.get(src.id, [])
                   for e in self.members[t] if e.id in self.score and e.id not in self.shown}
        ranked = sorted(related.values(), key=lambda e: -self.score[e.id])[:n if n > 0 else None]
        picked, used = [], count_tokens(self.heading)
        for e in ranked:
            line = f"- [{e.date}] {e.text}" if e.date else f"- {e.text}"
            if used + count_tokens(line) > budget_tokens:
                continue
            picked.append((e, line))
            used += count_tokens(line)
        if not picked:
            return "", []
        picked.sort(key=lambda x: (x[0].box_id, x[0].id))
        self.shown.update(e.id for e, _ in picked)
        return "\n" + "\n".join([self.heading] + [line for _, line in picked]), [e.id for e, _ in picked]


def _truncate(text: str, budget: int) -> str:
    lines, out, used = text.split("\n"), [], 0
    for line in lines:
        cost = count_tokens(line)
        if used + cost > budget:
            break
        out.append(line)
        used += cost
    return "\n".join(out)
