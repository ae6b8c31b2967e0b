"""What a memory system provides to `Memory`, as a component.

A component builds its structure from the stored messages of each conversation, through a generator step that
yields its model and embedding requests to the driver (so batching, resuming and every backend come free); it
names the config sections that decide what it writes (the memory refuses to continue with others), brings its
own tables as a store mixin (created and migrated with the store, merged across shards by its rules), reports
its stats and lists the retrieval modes that read what it built.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Callable

from ..requests import Step
from ..seams import MemoryView


class Component:
    name = ""
    tables: type | None = None  # store mixin with the system's SCHEMA, queries and merge rules
    settings_sections: tuple[str, ...] = ()  # config sections whose every key decides what a build writes
    # the value a build setting had before its key existed: a store built then is continued while it keeps it
    before_key_existed: dict[str, Any] = {}

    def __init__(self, memory: "MemoryView"):
        self.memory = memory

    @property
    def store(self):
        return self.memory.store

    @property
    def config(self):
        return self.memory.config

    def build_settings(self) -> dict[str, Any]:
        out = {}
        for section in self.settings_sections:
            for key, value in asdict(getattr(self.config, section)).items():
                out[f"{section}.{key}"] = value
        return json.loads(json.dumps(out))  # as stored: tuples become lists

    def generation_stages(self) -> tuple[str, ...]:
        """The stages of the model requests (label, JSON, text) this system's builds send, in the order a build
        first sends them: a server prepares their model instances at start (Backend.prepare)."""
        return ()

    def build_step(self, conversation_id: str, seal: bool, progress: Callable[[int], None] | None = None) -> Step:
        """Process every pending message of one conversation (resuming whatever an interruption left), calling
        `progress(1)` as each message of `pending` is taken in."""
        raise NotImplementedError
        yield

    def seal_step(self, conversation_id: str) -> Step:
        """Finish the conversation's open structure (end of a conversation)."""
        return None
        yield

    def pending(self, conversation_id: str) -> int:
        """Messages of the conversation this system has yet to take in: what its build step counts with `progress`
        (a build's progress bar and its "to file" line add them up over the systems)."""
        return len(self.store.pending_messages(conversation_id))

    def todo(self, conversation_id: str) -> int:
        """How much of the conversation is left to build (0: nothing; a resumed build has work)."""
        return len(self.store.pending_messages(conversation_id))

    def sync(self) -> None:
        """Bring derived indexes up to date with the store (after a build, before searching)."""

    def forget(self, conversation_id: str, message_ids: list[str]) -> dict[str, int]:
        """Delete everything the system derived from these messages of one conversation (still stored when this
        runs; the memory deletes them right after, in the same transaction), including the cached embeddings
        of derived texts (`store.forget_vectors`), and leave what remains to be rebuilt by the next build.
        Returns counts for the summary (e.g. {"boxes": 1, "events": 3}). A system with tables must say how:
        the default refuses, so that no system keeps derived copies of forgotten text by omission."""
        if self.tables is not None:
            raise NotImplementedError(f"the {self.name!r} memory system cannot forget messages yet")
        return {}

    def revise(self, conversation_id: str, message_ids: list[str]) -> dict[str, int]:
        """These messages of one conversation keep their place but get new text (Memory.update, which writes it
        right after, in the same transaction): delete what the system derived from their old text, as forget does,
        with the cached embeddings of derived texts, and leave it to the next build to derive again. Returns counts
        as forget does. The default refuses for a system with tables, as forget does."""
        if self.tables is not None:
            raise NotImplementedError(f"the {self.name!r} memory system cannot update messages yet")
        return {}

    def stats(self, conversation_id: str | None = None) -> dict[str, Any]:
        return {}

    def warnings(self, conversations: list[str]) -> list[str]:
        """Lines for the build summary: work that failed and is retried by the next build."""
        return []

    def failures(self, conversations: list[str]) -> tuple[int, int]:
        """(units that failed, units in all) over these conversations, for `[extract] max_failed_share`: a build
        where more than that share failed ends with an error."""
        return 0, 0

    def reset(self) -> None:
        """Forget what is kept in memory between calls: another writer changed the store since (Memory.writing)."""

    def close(self) -> None:
        pass
