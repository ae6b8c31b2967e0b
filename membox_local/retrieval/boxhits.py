"""Box-aware retrieval: rank single turns, read them inside their boxes.

Whole boxes are the right unit to read but not to rank: ranked as units they find less evidence per token
than single turns (BENCHMARKS.md, "Box-aware retrieval"). These modes rank messages and use the boxes only
to decide what is shown around a hit:

- `box-hits`: a message's relevance is the mean of its own cosine to the question and the cosine of its
  window: the chunk of consecutive messages of its own box, about `CHUNK_WORDS` words (chunk-rag's size),
  that holds it, embedded as one text (a box's messages are cut into such chunks; no chunk crosses a topic
  boundary). Its priority is the best, over the messages of its own box, of that relevance less `DECAY`
  per turn of distance, plus `BOX_WEIGHT` x the cosine of the box (the mean vector of its messages).
  With `[retrieve] length_cost` a message longer than `length_free` tokens also loses that much priority per
  log-unit of its length beyond it (more evidence per token where turns differ tenfold in length, as a user's
  and an assistant's do; 4 of LoCoMo's 3,435 dev turns are longer, by at most 19 tokens).
  With `[retrieve] lexical_weight` a message's relevance also gains that weight x its BM25 score for the question
  (lexical.py: words, stop words dropped, stemmed; divided by the best message's score, so 1 for the best lexical
  match): the names and rare words MiniLM's cosine misses. The index is built in memory from the scope's stored
  messages with the rest of the BoxMap (boxmap.py); a scope of 5,000 messages or more is also kept beside the store
  and erased with its messages (snapshot.py).
  Messages are added best first while they fit the budget, so a strong hit brings its box neighbours,
  nearest first, before weaker hits elsewhere, and context never crosses a topic boundary. Shown in time
  order under one date line per session (`HEADERS`: other layouts label each box). k: the top-k messages
  seed the context; the messages of their boxes are the candidates.
- `box-hits-trace`: the same, with up to `TRACE_SHARE` of the budget kept for the storyline: boxes in
  other sessions that share a Trace Weaver trace with the boxes of the `TRACE_SEEDS` best hits; their
  messages are ranked the same way and shown in the same layout.

Messages not yet filed into a box (a live memory's pending messages) are each their own one-message box.
The modes need only the Loom's boxes, not their records: `loom.file_into_boxes` files a conversation with
the Loom's continuity rule and no extraction, which `membox eval locomo --boxes-only` uses.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..records import Message
from . import snapshot
from .base import Context, Retriever, register
from .baselines import TurnRagRetriever
from .boxmap import HEADERS, BoxMap, box_chunk_vectors, box_map, extended, topic_line, unit  # noqa: F401
from .layout import CHUNK_WORDS, Layout, shown_render
from .lexical import LexicalIndex
from ..seams import MemoryView

DECAY = 0.1  # priority lost per turn of distance from a hit in the same box
BOX_WEIGHT = 0.3  # weight of the whole box's cosine in each of its messages' priority
TRACE_SHARE = 0.25  # box-hits-trace: at most this share of the budget for other sessions of the storyline
TRACE_SEEDS = 3  # box-hits-trace: the boxes of this many best hits start the storyline
SNAPSHOT_GROWTH = 1.25  # a scope's map is written again (retrieval/snapshot.py) once it holds 25% more messages


def length_penalty(tokens: np.ndarray, cost: float, free: int) -> np.ndarray:
    """`[retrieve] length_cost`: cost x log(tokens / free) for messages longer than `free` tokens, else 0."""
    return cost * np.log(np.maximum(1.0, np.asarray(tokens, dtype=float) / free))


@register
class BoxHitsRetriever(Retriever):
    name = "box-hits"
    needs = "boxes"
    decay = DECAY
    box_weight = BOX_WEIGHT
    headers = "date"
    chunk_words = CHUNK_WORDS
    length_cost: float | None = None  # None: the config's `[retrieve] length_cost` (a variant may fix its own)
    lexical_weight: float | None = None  # None: the config's `[retrieve] lexical_weight`
    dense_weight = 1.0  # weight of the cosines in a message's relevance (0: BM25 alone, an ablation)

    def __init__(self, memory: "MemoryView"):
        super().__init__(memory)
        self.turns = TurnRagRetriever(memory)  # message vectors, embedded once per memory folder
        self._maps: dict[str | None, BoxMap] = {}
        self._unsaved: dict[str | None, int] = {}  # scope -> the erasures count its map was read at (snapshot.py)
        self._saved: dict[str | None, int] = {}  # scope -> messages in the snapshot written or read

    def box_map(self, conversation_id: str | None) -> BoxMap:
        if conversation_id not in self._maps:
            kept = type(self) is BoxHitsRetriever  # a variant's caches are not in a snapshot
            erased = self.memory.store.generation()[1]  # read first: an erasure while the map is made is seen
            loaded = snapshot.load(self.memory, self.name, conversation_id) if kept else None
            if loaded is not None:
                bm, self._saved[conversation_id] = loaded  # written again once it holds 25% more than the file
            else:
                chunks, vecs = self.turns.units(conversation_id)
                bm = box_map(self.memory, [c[0] for c in chunks], vecs, conversation_id, self.name, self.window_vectors)
            if kept and self._to_save(conversation_id, bm):
                self._unsaved[conversation_id] = erased  # written after the question that made it (retrieve)
            self._maps[conversation_id] = bm
        return self._maps[conversation_id]

    def _to_save(self, scope: str | None, bm: BoxMap) -> bool:
        """Whether the scope's map is large enough, and has grown enough since its last snapshot, to be written."""
        return len(bm.messages) >= max(snapshot.MIN_MESSAGES, SNAPSHOT_GROWTH * self._saved.get(scope, 0))

    def refresh(self) -> bool:
        """After messages were only added and filed (Store.generation: no erasure since), bring each kept box map up
        to date in place (`extended`): what was read and indexed before stays. False where that cannot be done (a
        variant with caches of its own, a map of several conversations, a change that is not an addition); the
        caller then makes a new retriever."""
        if type(self) is not BoxHitsRetriever:
            return False
        maps = {scope: extended(self.memory, bm, self.chunk_words) for scope, bm in self._maps.items()}
        if any(bm is None for bm in maps.values()):
            return False
        erased = self.memory.store.generation()[1]
        for scope, bm in maps.items():  # the kept BM25 indexes grow only once every map is made (none can fail now)
            if bm.lexical is not None:
                bm.lexical.extend([m.render() for m in bm.messages[bm.lexical.size:]])
            if self._to_save(scope, bm):
                self._unsaved[scope] = erased
        self._maps = maps
        self.turns = TurnRagRetriever(self.memory)  # what it read is in the maps now
        return True

    def window_vectors(self, messages: list[Message], members: list[np.ndarray]) -> np.ndarray:
        """Message index -> unit vector of its window (see the module docstring)."""
        return box_chunk_vectors(self.memory, messages, members, self.chunk_words)

    def relevance(self, bm: BoxMap, qv: np.ndarray, question: str = "") -> np.ndarray:
        """Every message's relevance: the mean of its own and its window's cosine to the question vector `qv`,
        plus `lexical_weight` x its normalised BM25 score for `question` (none without a question)."""
        rel = self.dense_weight * self.dense(bm, qv)
        w = self.memory.config.retrieve.lexical_weight if self.lexical_weight is None else self.lexical_weight
        return rel + w * self.lexical(bm).normalised(question) if w and question.strip() else rel

    def dense(self, bm: BoxMap, qv: np.ndarray) -> np.ndarray:
        """Every message's dense relevance: the mean of its own and its window's cosine to `qv`."""
        return 0.5 * (bm.vectors @ qv + bm.windows @ qv)

    def lexical(self, bm: BoxMap) -> LexicalIndex:
        """The BM25 index the relevance reads (the scope's messages)."""
        return bm.lexical_index()

    def priorities(self, bm: BoxMap, qv: np.ndarray, question: str = "") -> tuple[np.ndarray, np.ndarray]:
        """(relevance, priority) of every message (see the module docstring)."""
        rel = self.relevance(bm, qv, question)
        prio = np.empty_like(rel)
        for idx in bm.by_size():  # every box of one size at once: (boxes, size) -> its best neighbour's, less decay
            pos = np.arange(idx.shape[1])
            prio[idx] = (rel[idx][:, None, :] - self.decay * np.abs(pos[:, None] - pos[None, :])[None]).max(axis=2)
        prio += self.box_weight * (bm.centroids @ qv)[bm.box_of]
        rc = self.memory.config.retrieve
        cost = rc.length_cost if self.length_cost is None else self.length_cost
        return rel, (prio - length_penalty(bm.message_tokens(), cost, rc.length_free)) if cost else prio

    def retrieve(self, question, conversation_id, k, budget_tokens):
        if not question.strip():
            raise ValueError("retrieve: the question is empty")
        bm = self.box_map(conversation_id)
        if not bm.messages:
            return Context("")
        sims, prio = self.priorities(bm, self.memory.embedder.encode([question])[0], question)
        layout = bm.layout(budget_tokens, self.headers, self.render(bm))
        scorer = self.memory.evidence_scorer()
        if scorer is not None:
            self.fill_by_evidence(layout, bm, self.second_stage(scorer, bm, question, sims, prio))
        else:
            hits = np.argsort(-sims, kind="stable")[:k]
            candidates = np.unique(np.concatenate([bm.members[b] for b in bm.box_of[hits]]))
            order = candidates[np.lexsort((-sims[candidates], -prio[candidates]))]  # a hit before equal neighbours
            self.fill(layout, bm, order, sims, prio, hits)
        ctx = layout.context()
        shown = dict.fromkeys(bm.box(m) for m in sorted(layout.messages, key=lambda m: (m.conversation_id, m.seq)))
        ctx.box_ids = [bm.boxes[b].id for b in shown if bm.boxes[b].id >= 0]
        ctx.scores = {bm.boxes[b].id: float(sims[bm.members[b]].max()) for b in shown if bm.boxes[b].id >= 0}
        if conversation_id in self._unsaved:  # a large scope's map made or grown: kept beside the store
            if snapshot.save(self.memory, bm, self.name, self._unsaved.pop(conversation_id)):
                self._saved[conversation_id] = len(bm.messages)
        return ctx

    def second_stage(self, scorer, bm: BoxMap, question: str, sims: np.ndarray, prio: np.ndarray) -> np.ndarray:
        """The first stage's best `[retrieve] evidence_candidates` messages (k is not read), best first by the
        evidence cross-encoder's logit for (question, line) + `evidence_prior` x their first-stage priority."""
        rc = self.memory.config.retrieve
        first = np.lexsort((-sims, -prio))[:rc.evidence_candidates]
        logits = np.asarray(scorer.score([(question, bm.messages[i].render()) for i in first]), dtype=float)
        return first[np.argsort(-(logits + rc.evidence_prior * prio[first]), kind="stable")]

    def fill_by_evidence(self, layout: Layout, bm: BoxMap, order: np.ndarray) -> None:
        """Each chosen message while it fits, then its box neighbours (`[retrieve] evidence_neighbours` on either
        side, nearest first) while they fit."""
        reach = self.memory.config.retrieve.evidence_neighbours
        shown = set(layout.messages)
        for i in order:
            members = bm.members[bm.box_of[i]]
            at = int(np.searchsorted(members, i))
            near = sorted(range(max(0, at - reach), min(len(members), at + reach + 1)), key=lambda j: abs(j - at))
            for j in near:
                m = bm.messages[members[j]]
                if m not in shown and layout.try_add([m]):
                    shown.add(m)

    def render(self, bm: BoxMap) -> Callable[[Message], str]:
        """How a shown message is written (the config's: dates resolved or not)."""
        return shown_render(self.memory.config)

    def fill(self, layout: Layout, bm: BoxMap, order: np.ndarray, sims: np.ndarray, prio: np.ndarray,
             hits: np.ndarray) -> None:
        """Add candidates best first, each while it fits (a long message may be passed over for shorter ones)."""
        shown = set(layout.messages)
        for i in order:
            m = bm.messages[i]
            if m not in shown and layout.try_add([m]):
                shown.add(m)


@register
class BoxHitsTraceRetriever(BoxHitsRetriever):
    """box-hits, keeping up to TRACE_SHARE of the budget for the storyline in other sessions."""

    name = "box-hits-trace"
    needs = "records"  # the Trace Weaver's traces
    share = TRACE_SHARE
    seeds = TRACE_SEEDS

    def __init__(self, memory):
        super().__init__(memory)
        self._linked: dict[str | None, dict[int, set[int]]] = {}

    def linked_boxes(self, conversation_id: str | None) -> dict[int, set[int]]:
        """Box id -> ids of the boxes sharing a trace with it (from the Trace Weaver's traces)."""
        if conversation_id not in self._linked:
            linked: dict[int, set[int]] = {}
            for _, events in self.memory.store.traces_with_events(conversation_id):
                ids = {e.box_id for e in events}
                for b in ids:
                    linked.setdefault(b, set()).update(ids - {b})
            self._linked[conversation_id] = linked
        return self._linked[conversation_id]

    def storyline(self, bm: BoxMap, hits: np.ndarray) -> list[int]:
        """Box positions in other sessions linked by a trace to the boxes of the best hits."""
        seeds = list(dict.fromkeys(int(b) for b in bm.box_of[hits]))[:self.seeds]
        linked = self.linked_boxes(bm.scope)
        by_id = {b.id: n for n, b in enumerate(bm.boxes) if b.id >= 0}
        session = lambda n: (bm.boxes[n].conversation_id, bm.boxes[n].session)  # noqa: E731
        return sorted({by_id[x] for b in seeds for x in linked.get(bm.boxes[b].id, ())
                       if x in by_id and session(by_id[x]) != session(b)})

    def fill(self, layout, bm, order, sims, prio, hits):
        story = self.storyline(bm, hits)
        if not story:
            return super().fill(layout, bm, order, sims, prio, hits)
        full = layout.budget
        layout.budget = full - int(self.share * full)
        super().fill(layout, bm, order, sims, prio, hits)  # the hits' own boxes first
        layout.budget = full
        extra = np.concatenate([bm.members[b] for b in story])
        super().fill(layout, bm, extra[np.lexsort((-sims[extra], -prio[extra]))], sims, prio, hits)
        super().fill(layout, bm, order, sims, prio, hits)  # what the storyline left unused
