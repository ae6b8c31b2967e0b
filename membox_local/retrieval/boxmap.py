"""box-hits' map of one conversation scope (BoxMap): its messages in time order, their vectors, the box each belongs
to, each message's window vector, each box's centroid, and (made when first used) token counts and the BM25 index;
made from the store (`box_map`), brought up to date after filing (`extended`), or read from a snapshot beside the
store (snapshot.py). The ranking that reads it is boxhits.py's."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..records import Box, Message
from .base import count_tokens
from .layout import CHUNK_WORDS, Layout, chunk_session_messages, chunk_text, plain
from .lexical import LexicalIndex
from ..seams import MemoryView

# how shown messages are labelled: "date" one date line per session only (the default: most evidence per
# token); "session" one date line per session, a topic line where each box starts; "box" one block per box
# under a line with its date and topic
HEADERS = ("date", "session", "box")


@dataclass
class BoxMap:
    """One conversation scope's messages (time order), their vectors and the box each belongs to."""

    messages: list[Message]
    vectors: np.ndarray
    box_of: np.ndarray  # message index -> box position in `boxes`
    boxes: list[Box]
    members: list[np.ndarray]  # box position -> its message indices, in time order
    position: dict[tuple[str, str], int]  # (conversation id, message id) -> box position
    windows: np.ndarray  # message index -> unit vector of the box-bounded chunk that holds it
    centroids: np.ndarray  # box position -> unit mean vector of its messages
    scope: str | None  # the conversation id, or None for every conversation
    tokens: np.ndarray | None = None  # message index -> its length in count_tokens units (made when first used)
    lexical: LexicalIndex | None = None  # BM25 over the messages as shown (made when first used; memory only)
    same_size: list[np.ndarray] | None = None  # the boxes grouped by size: each a (boxes, size) index matrix

    def by_size(self) -> list[np.ndarray]:
        """The boxes' members grouped by their size, one (boxes x size) matrix of message indices per size: what
        lets the priorities be computed for every box of a size at once."""
        if self.same_size is None:
            sizes = np.array([len(idx) for idx in self.members])
            self.same_size = [np.stack([self.members[b] for b in np.flatnonzero(sizes == n)])
                              for n in np.unique(sizes) if n > 0]
        return self.same_size

    def message_tokens(self) -> np.ndarray:
        if self.tokens is None:
            self.tokens = np.array([count_tokens(m.render()) for m in self.messages], dtype=float)
        return self.tokens

    def lexical_index(self) -> LexicalIndex:
        if self.lexical is None:
            self.lexical = LexicalIndex.build([m.render() for m in self.messages])
        return self.lexical

    def box(self, m: Message) -> int:
        return self.position[(m.conversation_id, m.message_id)]

    def layout(self, budget_tokens: int, headers: str = "date", render: Callable[[Message], str] = plain) -> Layout:
        """Shown messages in time order, labelled by `headers` (one of HEADERS), each shown by `render`."""
        if headers == "box":
            return Layout(budget_tokens, group=self.box, header=lambda m: self.boxes[self.box(m)].header(),
                          render=render)
        if headers == "session":
            return Layout(budget_tokens, subgroup=self.box, subheader=lambda m: topic_line(self.boxes[self.box(m)]),
                          render=render)
        if headers == "date":
            return Layout(budget_tokens, render=render)
        raise ValueError(f"box layout headers '{headers}': expected one of {', '.join(HEADERS)}")


def topic_line(box: Box) -> str:
    return f"(topic: {box.topic})" if box.topic else ""


def box_map(memory: "MemoryView", messages: list[Message], vectors: np.ndarray, conversation_id: str | None,
            mode: str, window_vectors: Callable[[list[Message], list[np.ndarray]], np.ndarray]) -> BoxMap:
    """The scope's boxes; `window_vectors(messages, members)` gives each message's window vector."""
    store = memory.store
    boxes = [b for b in store.boxes(conversation_id) if b.messages]
    if messages and not boxes:
        raise ValueError(f"retrieval mode '{mode}' needs messages filed into boxes, but conversation "
                         f"{conversation_id or '(all)'} in {store.path} has none; build the memory first "
                         f"(Memory.add, or `membox eval locomo --boxes-only` for boxes without records)")
    position = {(m.conversation_id, m.message_id): n for n, b in enumerate(boxes) for m in b.messages}
    for m in messages:
        if (m.conversation_id, m.message_id) not in position:  # pending, not filed yet: a box of its own
            position[(m.conversation_id, m.message_id)] = len(boxes)
            boxes.append(Box(-1, m.conversation_id, m.session, m.session_date, [m]))
    box_of = np.array([position[(m.conversation_id, m.message_id)] for m in messages], dtype=np.int64)
    # each box's message indices, in time order (a stable sort by box keeps the messages' order within one)
    members = np.split(np.argsort(box_of, kind="stable"), np.cumsum(np.bincount(box_of, minlength=len(boxes)))[:-1])
    windows = window_vectors(messages, members) if messages else vectors
    centroids = np.stack([vectors[idx].mean(axis=0) for idx in members]) if members else vectors[:0]
    return BoxMap(messages, vectors, box_of, boxes, members, position, windows=windows,
                  centroids=unit(centroids), scope=conversation_id)


def extended(memory: "MemoryView", bm: BoxMap, chunk_words: int = CHUNK_WORDS) -> BoxMap | None:
    """`bm` brought up to date with the store after messages were only added and filed: the boxes before the first
    one still open (or the first message not yet filed) cannot have changed and are kept with their messages,
    vectors, windows and BM25 terms; what follows is read again. The result holds what `box_map` would build now
    (the kept boxes' records as they were when read: box-hits shows none of them), with the kept BM25 index, which
    the caller extends with the messages past its size. None where the map is not one conversation's, or the store
    does not continue it (a message of it gone or changed): the caller builds it anew."""
    if bm.scope is None or not bm.messages:
        return None
    stable = next((n for n, b in enumerate(bm.boxes) if b.id < 0 or b.status == "open"), len(bm.boxes))
    cut = min((int(bm.members[b][0]) for b in range(stable, len(bm.boxes)) if len(bm.members[b])),
              default=len(bm.messages))
    if any(len(bm.members[b]) and bm.members[b][-1] >= cut for b in range(stable)):
        return None  # the kept boxes are not the map's first messages
    old, key = len(bm.messages), (lambda m: (m.conversation_id, m.message_id, m.text))
    store = memory.store
    tail = store.messages_from(bm.scope, bm.messages[cut].seq if cut < old else bm.messages[-1].seq + 1)
    if [key(m) for m in tail[:old - cut]] != [key(m) for m in bm.messages[cut:]]:
        return None
    messages = bm.messages[:cut] + tail
    boxes = bm.boxes[:stable] + [b for b in store.boxes_after(bm.scope, bm.boxes[stable - 1].id if stable else 0)
                                 if b.messages]
    position = {k: v for k, v in bm.position.items() if v < stable}
    position.update({(m.conversation_id, m.message_id): n for n, b in enumerate(boxes[stable:], stable)
                     for m in b.messages})
    for m in tail:
        if (m.conversation_id, m.message_id) not in position:  # pending, not filed yet: a box of its own
            position[(m.conversation_id, m.message_id)] = len(boxes)
            boxes.append(Box(-1, m.conversation_id, m.session, m.session_date, [m]))
    if len(position) != len(messages):
        return None  # a box of the tail holds a message the tail does not
    box_of = np.array([position[(m.conversation_id, m.message_id)] for m in messages], dtype=np.int64)
    members = np.split(np.argsort(box_of, kind="stable"), np.cumsum(np.bincount(box_of, minlength=len(boxes)))[:-1])
    if any(len(idx) and idx[0] < cut for idx in members[stable:]):
        return None  # a box of the tail holds one of the kept messages
    new = messages[old:]
    vectors = np.concatenate([bm.vectors[:old], memory.embedder.encode([chunk_text([m]) for m in new])]) \
        if new else bm.vectors[:old]
    windows = box_chunk_vectors(memory, messages[cut:], [idx - cut for idx in members[stable:]], chunk_words)
    centroids = unit(np.stack([vectors[idx].mean(axis=0) for idx in members[stable:]])) if len(boxes) > stable \
        else bm.centroids[:0]
    out = BoxMap(messages, vectors, box_of, boxes, members, position, windows=np.concatenate([bm.windows[:cut], windows]),
                 centroids=np.concatenate([bm.centroids[:stable], centroids]), scope=bm.scope)
    if bm.tokens is not None:
        out.tokens = np.concatenate([bm.tokens[:old], [count_tokens(m.render()) for m in new]])
    out.lexical = bm.lexical  # grown by the caller with the messages past its size (BoxHitsRetriever.refresh)
    return out


def box_chunk_vectors(memory: "MemoryView", messages: list[Message], members: list[np.ndarray],
                      chunk_words: int = CHUNK_WORDS) -> np.ndarray:
    """Message index -> embedding of its window: the ~chunk_words-word chunk of consecutive messages of its
    box that holds it (whole messages, rendered as chunk-rag renders its chunks)."""
    chunks: list[np.ndarray] = []
    for idx in members:
        start = 0
        for c in chunk_session_messages([messages[i] for i in idx], chunk_words):
            chunks.append(idx[start:start + len(c)])
            start += len(c)
    vecs = memory.embedder.encode([chunk_text([messages[i] for i in c]) for c in chunks])
    windows = np.zeros((len(messages), vecs.shape[1]), dtype=vecs.dtype)
    for c, v in zip(chunks, vecs):
        windows[c] = v
    return unit(windows)


def unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


