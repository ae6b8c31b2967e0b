"""Erasure and change: `forget` (and mem0's delete, delete_all, reset) removes messages and all derived from them so
that their text is in no file of the folder; `update` gives a message new text. Each write holds the folder's
write lock (`writes`)."""
from __future__ import annotations

from typing import Iterable

from .ingest import InputError
from .records import Message
from .retrieval import quoting_texts
from .store import NotFound, StoreError
from .memory_filing import writes

def check_text(text: object, where: str) -> str:
    """A message's new text (Memory.update): a non-empty string that can be written as UTF-8; else an InputError."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{where}: the text must be a non-empty string, got {text!r:.80}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{where}: the text is not valid Unicode (a lone surrogate at character {exc.start})") \
            from None
    return text


def id_list(values: object, what: str, where: str) -> list[str]:
    """A list of ids (`what`: "message ids", "conversation ids"), repeats dropped: an InputError when it is not a
    list of non-empty strings (a string is not taken for the list of its characters), a StoreError when empty."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InputError(f"{where}: {what} must be a list of strings, got {values!r:.80}")
    out = list(dict.fromkeys(values))
    if not all(isinstance(v, str) and v for v in out):
        raise InputError(f"{where}: {what} must be non-empty strings, got {out!r:.80}")
    if not out:
        raise StoreError(f"{where}: no {what} given")
    return out


def _add_counts(total: dict[str, int], part: dict[str, int]) -> dict[str, int]:
    for key, n in part.items():
        total[key] = total.get(key, 0) + n
    return total


def _quoted(rows: list[Message], ids: list[str]) -> list[str]:
    """The texts the retrieval modes embed (and the store caches) that hold one of these messages: each message
    alone and every chunk of `rows` holding it (retrieval.quoting_texts)."""
    gone = set(ids)
    return [m.text for m in rows if m.message_id in gone] + quoting_texts(rows, gone)


class Erasure:
    """A part of `Memory` (memory.py: the class is made of these parts); it uses the attributes and models
    Memory.__init__ sets (store, config, components, the write lock)."""

    @writes("Memory.forget")
    def forget(self, conversation_id: str, message_ids: Iterable[str] | None = None) -> dict[str, int]:
        """Erase messages of one conversation (every one of them when `message_ids` is None) and all that was
        derived from them, so that their text is in no file of the folder any more.

        In one transaction: each system deletes what it derived (Component.forget: the box memory's events,
        traces, records, emptied boxes; a box that keeps other messages is extracted again by the next build)
        and the cached embeddings of derived texts; then the messages and their own cached embeddings (and the
        chunks of them the retrieval modes embed) go, each deletion recorded in the history (ids only). Then the
        database is scrubbed (deleted cells zeroed, VACUUM, the write-ahead log truncated) and the vector indexes
        beside it are deleted: rebuilt now when an embedder is at hand, else by the next search. Returns counts:
        messages, each system's (boxes, events, traces, boxes_to_extract, boxes_to_weave), cached_vectors, and
        scrubbed (0 when another process held the store open and kept the log from being truncated). Questions
        asked earlier stay in the embedding cache under their hash (their text is not stored)."""
        return self._forget({conversation_id: None if message_ids is None else id_list(message_ids, "message ids",
                                                                                    "forget")})

    def delete(self, conversation_id: str, message_ids: Iterable[str]) -> dict[str, int]:
        """Erase these messages of one conversation and all derived from them: Memory.forget (its counts)."""
        return self.forget(conversation_id, id_list(message_ids, "message ids", "delete"))

    @writes("Memory.delete_all")
    def delete_all(self, conversation_id: str | None = None, *, user_id: str | None = None,
                   agent_id: str | None = None) -> dict[str, int]:
        """Erase a whole conversation, or every message of one user or one agent (in every conversation), with
        all derived from them: Memory.forget's erasure, in one transaction and one scrub. Give exactly one."""
        given = {k: v for k, v in (("conversation_id", conversation_id), ("user_id", user_id),
                                   ("agent_id", agent_id)) if v is not None}
        if len(given) != 1:
            raise InputError(f"delete_all: give exactly one of conversation_id, user_id, agent_id (got "
                             f"{', '.join(given) or 'none'})")
        if conversation_id is not None:
            return self._forget({conversation_id: None})
        targets: dict[str, list[str]] = {}
        for m in self.store.find_messages(None, user_id, agent_id):
            targets.setdefault(m.conversation_id, []).append(m.message_id)
        if not targets:
            (key, value), = given.items()
            raise NotFound(f"{self.path}: no message with {key} {value!r} in this memory; nothing deleted")
        return self._forget(targets)

    @writes("Memory.reset")
    def reset(self) -> dict[str, int]:
        """Empty the memory: every conversation forgotten as Memory.forget does, then what no conversation owns
        (the history, usage, the embedding cache, the build settings; Store.clear) deleted, in one transaction,
        and the files scrubbed. The folder keeps its schema, systems and embedder; it can be built again, with
        other build settings too. Returns forget's counts, summed."""
        return self._forget({c: None for c in self.store.conversations()}, clear=True)

    def _forget(self, targets: dict[str, list[str] | None], clear: bool = False) -> dict[str, int]:
        """Erase messages of each conversation (None: all of its messages), every id checked before anything is
        deleted; with `clear`, Store.clear too; one transaction, then one scrub (Memory.forget)."""
        self._refuse_sharded("forgetting")
        plan = []
        for conv, ids in targets.items():
            rows = self._stored_messages(conv)
            plan.append((conv, rows, self._knownid_list(conv, rows, ids, "forgotten")))
        counts = {"messages": 0}
        with self.store.transaction():
            for conv, rows, ids in plan:
                _add_counts(counts, self._erase(conv, rows, ids))
            if clear:
                self.store.clear()
        return self._after_erasure(counts)

    def _erase(self, conversation_id: str, rows: list[Message], ids: list[str]) -> dict[str, int]:
        """Inside _forget's transaction: each system's derived records, the messages, their cached vectors."""
        counts: dict[str, int] = {}
        for comp in self.components:
            _add_counts(counts, comp.forget(conversation_id, ids))
        counts["messages"] = self.store.delete_messages(conversation_id, ids)
        counts["cached_vectors"] = counts.get("cached_vectors", 0) + self.store.forget_vectors(_quoted(rows, ids))
        return counts

    @writes("Memory.update")
    def update(self, conversation_id: str, message_id: str, text: str) -> dict[str, int]:
        """Replace a stored message's text. What was derived from the old text goes as forget would take it (the
        box holding the message loses its record, events and traces and is extracted and woven again by the next
        `add` or `seal`; the cached vectors of the old text and of every text quoting it are dropped; the vector
        indexes are rebuilt), the change is recorded in the history (without either text), and the files are
        scrubbed so that the old text is in none of them. Returns forget's counts (messages: 1, or 0 when the
        text is the same, which changes nothing). The message keeps its id, place, box and tags; adding it again
        with its old text is refused afterwards (message ids must be stable)."""
        check_text(text, "update")
        self._refuse_sharded("updating")
        rows = self._stored_messages(conversation_id)
        [message_id] = self._knownid_list(conversation_id, rows, [message_id], "updated")
        old = next(m for m in rows if m.message_id == message_id)
        if old.text == text:
            return {"messages": 0}
        counts: dict[str, int] = {}
        with self.store.transaction():
            for comp in self.components:
                _add_counts(counts, comp.revise(conversation_id, [message_id]))
            counts["cached_vectors"] = counts.get("cached_vectors", 0) + \
                self.store.forget_vectors(_quoted(rows, [message_id]))
            self.store.set_message_text(conversation_id, message_id, text)
            counts["messages"] = 1
        return self._after_erasure(counts)

    def _refuse_sharded(self, doing: str) -> None:
        if (self.path / "shards.json").exists():
            raise StoreError(f"{self.path} is sharded (built with --engine ray): its shards keep their own copies of "
                             f"the messages, and the next build merges them back; {doing} in a sharded memory "
                             f"is not supported")

    def _stored_messages(self, conversation_id: str) -> list[Message]:
        """The conversation's messages; a conversation this memory does not hold is a NotFound naming it."""
        rows = self.store.messages(conversation_id)
        if not rows:
            known = self.store.conversations()
            held = f"its conversations: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}" if known \
                else "it holds none"
            raise NotFound(f"{self.path}: no conversation {conversation_id!r} in this memory ({held})")
        return rows

    def _knownid_list(self, conversation_id: str, rows: list[Message], ids: list[str] | None, verb: str) -> list[str]:
        """`ids` (None: every message of `rows`), each one a stored message of the conversation, else NotFound
        ("...; nothing <verb>")."""
        if ids is None:
            return [m.message_id for m in rows]
        stored = {m.message_id for m in rows}
        unknown = [i for i in ids if i not in stored]
        if unknown:
            more = " ..." if len(unknown) > 10 else ""
            raise NotFound(f"{self.path}: conversation {conversation_id!r} has no message "
                           f"{', '.join(map(repr, unknown[:10]))}{more}; nothing {verb}")
        return ids

    def _after_erasure(self, counts: dict[str, int]) -> dict[str, int]:
        """After a transaction that deleted or replaced text: scrub the files, drop the vector indexes (rebuilt
        now when that loads no model, else by the next search)."""
        counts["scrubbed"] = int(self.store.scrub())
        self.drop_indexes()
        if self._embedder is not None:
            self.sync()
        return counts

    def drop_indexes(self) -> None:
        """Delete the vector indexes beside the store: they are derived, and rebuilt from it when missing; and the
        retrievers this Memory keeps (their box maps hold the texts), made anew by the next question."""
        self._indexes.clear()
        self._retrievers.clear()
        # the indexes, their id maps, box-hits' snapshots (retrieval/snapshot.py: the messages' BM25 terms), and what
        # a save killed midway left (it may hold forgotten vectors or terms)
        for pattern in ("*.hnsw", "*.ids.json", "*.snapshot.npz", "*.tmp"):
            for p in self.path.glob(pattern):
                p.unlink(missing_ok=True)
