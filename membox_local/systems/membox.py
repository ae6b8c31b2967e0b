"""The box memory (Membox): the Topic Loom files messages into topic boxes and extracts each sealed box's record;
the Trace Weaver links the events of each extracted box into traces. Retrieval modes: compact, trace (whole
boxes, retrieval/compact.py) and box-hits, box-hits-trace (messages read inside their boxes, retrieval/boxhits.py).
"""
from __future__ import annotations

from typing import Callable, Collection

from ..index import VectorIndex
from ..judges import JUDGES
from ..loom import Loom
from ..profile import indexing
from ..records import Box
from ..requests import Step
from ..retrieval import quoting_texts
from ..retrieval.layout import box_index_text
from .base import Component
from .membox_tables import BoxTables


class BoxMemory(Component):
    name = "membox"
    tables = BoxTables
    settings_sections = ("loom", "extract", "weaver")
    # the defaults these settings had before their keys were added (stores built then did without them)
    before_key_existed = {
        "loom.judge": "embedding", "loom.window": 2, "loom.threshold": 0.3, "loom.prob_threshold": 0.5,
        "loom.min_box_messages": 2, "loom.max_box_messages": 24, "loom.cap_split": "at-cap",
        "loom.seal_on_session_change": True, "loom.weights": {}, "loom.bias": 0.0, "loom.lm_knot": 1.0,
        "loom.history": 30, "loom.content_vector": "", "loom.switch_ratio": 0.0,
        # the cross-encoder's file is read only with a `ce_continue` weight, which no store before it had
        "loom.ce_model": "content/ce-tiage-all-minilm-l6-v2.safetensors", "loom.ce_switch": 0.0,
        "extract.max_topic_chars": 80, "extract.max_keywords": 8, "extract.max_keyword_chars": 40,
        "extract.max_events": 6, "extract.max_event_chars": 160, "extract.min_grounding": 0.5,
        "extract.max_tokens": 400, "extract.speaker_grounding": False, "extract.keywords": "model",
        "extract.events": "written", "extract.keep_model": "",
        "weaver.enabled": True, "weaver.vote_threshold": 0.5, "weaver.max_candidates": 4, "weaver.max_tokens": 200,
        "weaver.shown_trace_events": 8, "weaver.link_voters_only": False, "weaver.link_event_chars": 0,
        "weaver.auto_link": 0.0,
    }

    def __init__(self, memory):
        super().__init__(memory)
        self.looms: dict[str, Loom] = {}
        self._synced: tuple = ()  # (the box index, the store's generation) when sync last found it up to date
        self.weaver = None
        self.after_extract = None  # the Trace Weaver's step, run on each box right after its extraction
        if self.config.weaver.enabled:
            from ..weaver import Weaver

            self.weaver = Weaver(self.store, self.config)
            self.after_extract = self.weaver.weave

    def generation_stages(self) -> tuple[str, ...]:
        judge = JUDGES.get(self.config.loom.judge)
        return ((("judge",) if judge is not None and judge.generates else ()) + ("extract",)
                + (("link", "trace-init") if self.weaver is not None else ()))

    def build_settings(self) -> dict:
        out = super().build_settings()
        out.pop("extract.max_failed_share", None)  # when a build counts as failed, not what it writes
        return out

    def reset(self) -> None:
        self.looms.clear()  # each Loom reads its open box and recent messages from the store again

    # ---- building -------------------------------------------------------------------------------
    def loom(self, conversation_id: str) -> Loom:
        if conversation_id not in self.looms:
            self.looms[conversation_id] = Loom(conversation_id, self.store, self.config,
                                               after_extract=self.after_extract)
        return self.looms[conversation_id]

    def build_step(self, conversation_id: str, seal: bool, progress: Callable[[int], None] | None = None) -> Step:
        loom = self.loom(conversation_id)
        yield from loom.finish_pending()
        if self.weaver is not None:
            yield from self.weaver.weave_pending(conversation_id)  # boxes whose weaving failed earlier
        for m in self.store.pending_messages(conversation_id):
            yield from loom.process(m)
            if progress:
                progress(1)
        if seal:
            yield from loom.seal_open()

    def seal_step(self, conversation_id: str) -> Step:
        """Extract and weave what is left to (boxes an update or a forget invalidated, failed ones), then seal and
        extract the open box."""
        loom = self.loom(conversation_id)
        yield from loom.finish_pending()
        if self.weaver is not None:
            yield from self.weaver.weave_pending(conversation_id)
        yield from loom.seal_open()

    def todo(self, conversation_id: str) -> int:
        """Pending messages, boxes to extract (sealed or failed), an open box to seal and boxes to weave."""
        s = self.store
        return len(s.pending_messages(conversation_id)) + len(s.boxes(conversation_id, status="sealed")) + \
            len(s.boxes(conversation_id, status="failed")) + (s.current_open_box(conversation_id) is not None) + \
            self.unwoven([conversation_id])

    # ---- the box index --------------------------------------------------------------------------
    def sync(self) -> VectorIndex:
        """Bring the box index up to date with the store: every extracted box, indexed once.

        Runs before every search, so it reads only box ids and loads just the boxes the index lacks, and nothing
        when the store's rows are unchanged since it last ran (Store.generation). The time it takes to index boxes
        counts as the build's `index` stage of their conversations (profile.py).
        """
        idx = self.memory.index("boxes")
        now = self.store.generation()
        if self._synced == (idx, now):  # nothing written since it was last brought up to date: no box to read
            return idx
        boxes = [self.store.box(i) for i in self.store.box_ids(status="extracted") if i not in idx]
        if boxes:
            convs = [b.conversation_id for b in boxes]
            with indexing(self.store, convs):
                vecs = self.memory.embedder.encode([box_index_text(b) for b in boxes])
                idx.add([b.id for b in boxes], convs, vecs)
                idx.save()
        self._synced = (idx, now)
        return idx

    def search(self, question: str, k: int, conversation_id: str | None,
               boxes: Collection[int] | None = None) -> list[tuple[Box, float]]:
        """The k extracted boxes nearest the question, of one conversation (None: any) and, given `boxes`, among
        those ids only."""
        idx = self.sync()
        qv = self.memory.embedder.encode([question])[0]
        return [(self.store.box(i), s) for i, s in idx.search(qv, k, conversation_id, boxes)]

    # ---- forgetting -----------------------------------------------------------------------------
    def forget(self, conversation_id: str, message_ids: list[str]) -> dict[str, int]:
        """Delete the boxes' records, events and traces derived from these messages (store.forget_boxes) and the
        cached embeddings of the texts that quoted them: each affected box's index text, its events and the
        chunks of its messages that held a forgotten one. The box index is rebuilt by Memory.forget."""
        return self._undo(conversation_id, message_ids, deleted=True)

    def revise(self, conversation_id: str, message_ids: list[str]) -> dict[str, int]:
        """As forget, for messages whose text changes (Memory.update): their boxes keep every message, lose their
        record, events and traces, and are extracted and woven again by the next build."""
        return self._undo(conversation_id, message_ids, deleted=False)

    def _undo(self, conversation_id: str, message_ids: list[str], deleted: bool) -> dict[str, int]:
        s = self.store
        whole = deleted and {m.message_id for m in s.messages(conversation_id)} <= set(message_ids)
        ids = [b.id for b in s.boxes(conversation_id)] if whole else s.boxes_holding(conversation_id, message_ids)
        texts: list[str] = []
        for bid in ids:
            box = s.box(bid)
            texts.append(box_index_text(box))
            texts += [e.text for e in box.events]
            texts += quoting_texts(box.messages, message_ids)
        counts = s.forget_boxes(ids, message_ids if deleted else [], cause="delete" if deleted else "update")
        if whole:
            with s.transaction():
                s.db.execute("DELETE FROM meta WHERE key=?", (f"weaver:{conversation_id}",))
        counts["cached_vectors"] = s.forget_vectors(texts)
        self.looms.pop(conversation_id, None)  # its open box and recent messages may hold the old texts
        return counts

    # ---- reporting ------------------------------------------------------------------------------
    def stats(self, conversation_id: str | None = None) -> dict:
        boxes = self.store.boxes(conversation_id)
        n_msgs = sum(len(b.messages) for b in boxes)
        status: dict[str, int] = {}
        for b in boxes:
            status[b.status] = status.get(b.status, 0) + 1
        events = self.store.events(conversation_id)
        weak = sum(e.grounding < self.config.extract.min_grounding for e in events)
        dropped: dict[str, int] = {}
        for b in boxes:
            for reason, n in b.dropped.items():
                dropped[reason] = dropped.get(reason, 0) + n
        return {
            "messages": n_msgs,
            "boxes": len(boxes),
            "messages_per_box": round(n_msgs / len(boxes), 2) if boxes else 0.0,
            "box_status": status,
            # boxes whose extraction failed (the model raised, timed out or wrote output that does not parse):
            # the reason is on the box (`membox show --failed`), the next build retries them
            "failed_boxes": status.get("failed", 0),
            "events": len(events),
            # events below min_grounding (words not in the box, or not in the lines of the person they name): in
            # memories built before events cited their lines (since then such an event is not kept), kept and shown
            # flagged, left out of traces
            "events_weakly_grounded": weak,
            "weakly_grounded_share": round(weak / len(events), 3) if events else 0.0,
            # what code dropped from the model's records, or corrected, by reason (attribution.py; Box.dropped)
            "events_dropped": dict(sorted(dropped.items())),
            "traces": len(self.store.traces(conversation_id)),
        }

    def unwoven(self, conversations: list[str]) -> int:
        return sum(len(self.store.unwoven_boxes(c)) for c in conversations) if self.weaver is not None else 0

    def failures(self, conversations: list[str]) -> tuple[int, int]:
        """(boxes whose extraction failed, boxes sealed) over these conversations; open boxes are not counted."""
        boxes = [b for c in conversations for b in self.store.boxes(c) if b.status != "open"]
        return sum(b.status == "failed" for b in boxes), len(boxes)

    def warnings(self, conversations: list[str]) -> list[str]:
        out = []
        failed = sum(len(self.store.boxes(c, status="failed")) for c in conversations)
        if failed:
            out.append(f"{failed} box(es) failed extraction (see `membox show {self.memory.path} --failed`); "
                       f"rerun the same build to retry them")
        unwoven = self.unwoven(conversations)
        if unwoven:
            out.append(f"{unwoven} box(es) not woven into traces (a weaving call failed; the box's error is in "
                       f"`membox show {self.memory.path}`); rerun the same build to retry them")
        return out


COMPONENT = BoxMemory
