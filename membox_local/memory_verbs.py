"""Reading by id and by tag, as mem0's verbs: `get`, `get_all`, `history`, with the user/agent/metadata scope every
read applies."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from .ingest import InputError, check_metadata
from .records import Box, Change, Message
from .memory_erasure import id_list

class Verbs:
    """A part of `Memory` (memory.py: the class is made of these parts); it uses the attributes and models
    Memory.__init__ sets (store, config, components, the write lock)."""

    def get(self, id: int | tuple[str, str]) -> Box | Message:
        """One record by its id: a box id (int) gives the Box, with its messages and events; a (conversation_id,
        message_id) pair gives the Message, with its tags. NotFound (a KeyError) names an id this memory lacks."""
        if isinstance(id, int) and not isinstance(id, bool):
            self.system("membox")
            return self.store.box(id)
        return self.store.message(*self._message_key(id, "get"))

    def history(self, id: int | tuple[str, str]) -> list[Change]:
        """Every change to a box (its id) or a message ((conversation_id, message_id)), oldest first, with its UTC
        time: a message's add, update, delete; a box's add, seal, split (its last messages refiled into a new box:
        loom.cap_split), extract, re-extract, extract-failed, invalidate, weave, delete (records.Change). A deleted
        record keeps its history (ids and events, never its text). A store migrated from schema 1 starts its
        records' history then. NotFound when the id has no history and names no record."""
        if isinstance(id, int) and not isinstance(id, bool):
            changes = self.store.history(box_id=id)
            if not changes:
                self.get(id)  # NotFound for an unknown box
            return changes
        conversation_id, message_id = self._message_key(id, "history")
        changes = self.store.history(conversation_id, message_id)
        if not changes:
            self.store.message(conversation_id, message_id)
        return changes

    @staticmethod
    def _message_key(id: object, where: str) -> tuple[str, str]:
        if isinstance(id, tuple) and len(id) == 2 and all(isinstance(x, str) for x in id):
            return id
        raise InputError(f"{where}: an id is a box id (int) or a (conversation_id, message_id) pair of strings, "
                         f"got {id!r:.80}")

    def get_all(self, conversation_id: str | None = None, kind: str = "boxes", offset: int = 0, limit: int = 100, *,
                conversation_ids: Iterable[str] | None = None, user_id: str | None = None,
                agent_id: str | None = None, filters: Mapping[str, Any] | None = None) -> list[Box] | list[Message]:
        """A page (`offset`, `limit`) of the boxes (by id) or the messages (in conversation order) of one
        conversation, several (`conversation_ids`) or, naming none, every one. `user_id`, `agent_id` and `filters`
        (metadata key -> value, equal as JSON: 1 is not 1.0 nor true) keep the messages that match all of them, and
        the boxes holding one of those."""
        if kind not in self.KINDS:
            raise InputError(f"get_all: kind must be one of {', '.join(self.KINDS)}, got {kind!r:.80}")
        for name, value, least in (("offset", offset, 0), ("limit", limit, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise InputError(f"get_all: {name} must be an integer of at least {least}, got {value!r:.80}")
        convs = self._scope("get_all", conversation_id, conversation_ids)
        if kind == "messages":
            return self._matching_messages(convs, user_id, agent_id, filters)[offset:offset + limit]
        page = self._matching_boxes(convs, user_id, agent_id, filters)[offset:offset + limit]
        return [self.store.box(i) for i in page]

    def _matching_messages(self, convs: list[str] | None, user_id: str | None, agent_id: str | None,
                           filters: Mapping[str, Any] | None) -> list[Message]:
        if filters is not None:
            filters = check_metadata(filters, "filters")
        return self.store.find_messages(convs, user_id, agent_id, filters)

    def _matching_boxes(self, convs: list[str] | None, user_id: str | None, agent_id: str | None,
                        filters: Mapping[str, Any] | None) -> list[int]:
        """Ids of the boxes of these conversations (None: all) holding a message that matches the filters, in
        ascending order."""
        self.system("membox")
        by_conv: dict[str, list[str]] = {}
        for m in self._matching_messages(convs, user_id, agent_id, filters):
            by_conv.setdefault(m.conversation_id, []).append(m.message_id)
        return sorted({b for conv, ids in by_conv.items() for b in self.store.boxes_holding(conv, ids)})

    def _scope(self, where: str, conversation_id: str | None,
               conversation_ids: Iterable[str] | None) -> list[str] | None:
        """The conversations a read may see: the one named, the several named, or (None) every one."""
        if conversation_id is not None and conversation_ids is not None:
            raise InputError(f"{where}: give conversation_id or conversation_ids, not both")
        if conversation_id is not None:
            return [conversation_id]
        return None if conversation_ids is None else id_list(conversation_ids, "conversation ids", where)
