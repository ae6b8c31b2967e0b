"""How retrieved memory is laid out as context, shared by every retrieval mode.

Messages are shown in time order under one header line per group (by default one date line per session), and
`Layout` keeps the exact token count of that rendering while messages are added, so budgets are checked
without re-rendering (count_tokens never spans a line). Chunks are runs of consecutive messages of one session
(chunk-rag's units, box-hits' windows); boxes render under their date and topic.
"""
from __future__ import annotations

from typing import Callable, Hashable, Sequence

from ..records import Box, Message
from .base import Context, count_tokens

CHUNK_WORDS = 60  # words in a chunk of consecutive messages (chunk-rag's units, box-hits' windows)


def plain(m: Message) -> str:
    """A message as shown: its speaker and text."""
    return m.render()


def dated(m: Message) -> str:
    """A message as shown, with relative time ("yesterday", "last week") resolved against its session date."""
    from ..dates import resolve_relative

    return f"{m.speaker}: {resolve_relative(' '.join(m.text.split()), m.session_date)}"


def shown_render(config) -> Callable[[Message], str]:
    """How a memory's config shows messages (`[retrieve] resolve_dates`)."""
    return dated if config.retrieve.resolve_dates else plain


def session_header(m: Message) -> str:
    return f"[{m.session_date or 'session ' + m.session}]"


def _time_order(m: Message) -> tuple[str, int]:
    return m.conversation_id, m.seq


def session_key(m: Message) -> Hashable:
    return m.conversation_id, m.session


def render_messages(messages: Sequence[Message], group: Callable[[Message], Hashable] = session_key,
                    header: Callable[[Message], str] = session_header,
                    subgroup: Callable[[Message], Hashable] | None = None,
                    subheader: Callable[[Message], str] | None = None,
                    render: Callable[[Message], str] = plain) -> str:
    """Messages in time order, one header line per group (by default one date line per session, all of a
    session's shown messages under it) and, with `subgroup`, a line from `subheader` (when not empty) where
    a subgroup starts inside its group. Groups and subgroups must be runs of consecutive messages (sessions,
    boxes)."""
    by_group: dict[Hashable, list[Message]] = {}
    for m in sorted(messages, key=_time_order):
        by_group.setdefault(group(m), []).append(m)
    blocks = []
    for ms in by_group.values():
        lines, current = [header(ms[0])], object()
        for m in ms:
            if subgroup is not None and subgroup(m) != current:
                current = subgroup(m)
                if line := subheader(m):
                    lines.append(line)
            lines.append(render(m))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


class Layout:
    """Messages chosen so far and the exact token count of `render_messages` over them (same group, header,
    subgroup, subheader and render functions: by default sessions under their date line, messages as they are)."""

    def __init__(self, budget_tokens: int, group: Callable[[Message], Hashable] = session_key,
                 header: Callable[[Message], str] = session_header,
                 subgroup: Callable[[Message], Hashable] | None = None,
                 subheader: Callable[[Message], str] | None = None,
                 render: Callable[[Message], str] = plain):
        if (subgroup is None) != (subheader is None):
            raise ValueError("Layout: pass subgroup and subheader together")
        self.budget = budget_tokens
        self.group, self.header = group, header
        self.subgroup, self.subheader = subgroup, subheader
        self.render = render
        self.messages: list[Message] = []
        self.groups: set[Hashable] = set()
        self.subgroups: set[Hashable] = set()
        self.tokens = 0
        self._line_tokens: dict[Message, int] = {}  # a message's rendered tokens (a mode may price it many times)

    def line_tokens(self, m: Message) -> int:
        if m not in self._line_tokens:
            self._line_tokens[m] = count_tokens(self.render(m))
        return self._line_tokens[m]

    def cost(self, msgs: Sequence[Message]) -> int:
        new_groups = {self.group(m): m for m in msgs if self.group(m) not in self.groups}
        cost = sum(self.line_tokens(m) for m in msgs) + \
            sum(count_tokens(self.header(m)) for m in new_groups.values())
        if self.subgroup is not None:
            new_subs = {self.subgroup(m): m for m in msgs if self.subgroup(m) not in self.subgroups}
            cost += sum(count_tokens(self.subheader(m)) for m in new_subs.values())
        return cost

    def try_add(self, msgs: Sequence[Message]) -> bool:
        """Add the messages if they all fit the budget; returns whether they were added."""
        cost = self.cost(msgs)
        if self.tokens + cost > self.budget:
            return False
        self.messages += msgs
        self.groups |= {self.group(m) for m in msgs}
        if self.subgroup is not None:
            self.subgroups |= {self.subgroup(m) for m in msgs}
        self.tokens += cost
        return True

    def add_prefix(self, msgs: Sequence[Message]) -> None:
        """Add as many of the messages, in order, as fit (for a first unit larger than the budget)."""
        for m in msgs:
            if not self.try_add([m]):
                break

    def context(self) -> Context:
        ordered = sorted(self.messages, key=_time_order)
        return Context(render_messages(ordered, self.group, self.header, self.subgroup, self.subheader, self.render),
                       message_ids=[m.message_id for m in ordered],
                       ranked_ids=[m.message_id for m in self.messages], shown=ordered)


def chunk_session_messages(messages: Sequence[Message], chunk_words: int) -> list[list[Message]]:
    """Consecutive messages of one session, about `chunk_words` words each; 0 puts each message alone."""
    chunks: list[list[Message]] = []
    words = 0
    for m in messages:
        n = len(m.text.split())
        cur = chunks[-1] if chunks else None
        if cur is None or cur[-1].session != m.session or chunk_words <= 0 or words + n > chunk_words:
            chunks.append([m])
            words = n
        else:
            cur.append(m)
            words += n
    return chunks


def chunk_text(messages: Sequence[Message]) -> str:
    """The text a chunk of messages is embedded as (chunk-rag's units, box-hits' windows)."""
    return "\n".join(m.render() for m in messages)


def box_index_text(box: Box) -> str:
    head = " ".join(x for x in (box.topic, ", ".join(box.keywords)) if x)
    return f"{head}\n{box.text()}" if head else box.text()


def render_box(box: Box, messages=None) -> str:
    msgs = box.messages if messages is None else messages
    return box.header() + "\n" + "\n".join(m.render() for m in msgs)
