"""Filing messages: `add` stores them and files each pending one into boxes, system by system; `file_pending`, `seal`
and `sync` are its parts for callers that store first and file later."""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Mapping

from .execution.progress import Describe
from .ingest import as_messages
from .records import Message

def writes(what: str):
    """A method that writes the store runs holding the folder's write lock (`Memory.writing`)."""
    def wrap(method):
        @functools.wraps(method)
        def locked(self, *args, **kw):
            with self.writing(what):
                return method(self, *args, **kw)
        return locked
    return wrap


class Filing:
    """A part of `Memory` (memory.py: the class is made of these parts); it uses the attributes and models
    Memory.__init__ sets (store, config, components, the write lock)."""

    def conversation_step(self, conversation_id: str, seal: bool, progress: Callable[[int], None] | None = None):
        """The generator step that processes every pending message of one conversation, system by system;
        `progress(1)` as each system takes in a message (their sum: `to_file`)."""
        self.check_build_settings()
        for comp in self.components:
            yield from comp.build_step(conversation_id, seal, progress)

    def add(self, messages: Iterable[Message | dict], seal: bool = False,
            progress: Callable[[int], None] | None = None, *, conversation_id: str | None = None,
            user_id: str | None = None, agent_id: str | None = None, metadata: Mapping[str, Any] | None = None,
            describe: Describe | None = None) -> int:
        """Store messages (skipping ones already stored) and file every pending message into boxes.

        Returns how many messages were new. Idempotent by (conversation id, message id): a message stored already
        is skipped, or refused when its speaker, text or tags differ. Messages are written before they are
        processed, so an interrupted call is resumed by calling `add` again (with the same or no messages).

        Messages are Message objects or dicts with the JSONL fields (ingest.py), each with optional `user_id`,
        `agent_id` and `metadata` (a JSON object of at most 4 KB). The keyword arguments apply to the whole call:
        `conversation_id` for dicts that name none (a message of another conversation is refused), `user_id` and
        `agent_id` for messages that carry none, `metadata` under each message's own (its keys win). Dicts may also
        come in the OpenAI / mem0 chat shape, {"role", "content", "name", "timestamp"} (ingest.from_chat_shape).

        `progress(1)` is called as each memory system takes in a message (their total: `to_file`), `describe(text)`
        before each model call with what it is about ("extracting box 12"): the hooks of a progress bar
        (execution/progress.py).
        """
        # every message is checked (InputError) before anything is written, the write lock's file included
        return self._add(as_messages(messages, "add", conversation_id, user_id, agent_id, metadata), seal, progress,
                         describe)

    @writes("Memory.add")
    def _add(self, msgs: list[Message], seal: bool, progress: Callable[[int], None] | None,
             describe: Describe | None = None) -> int:
        if msgs or self.has_work():
            self.check_models()  # a missing or broken model is reported before the first message is filed
        self.check_build_settings()  # other build settings are refused before a message is written
        added = self.store.add_messages(msgs)
        self._file(list(dict.fromkeys([m.conversation_id for m in msgs])) or self.store.conversations(), seal,
                   progress, describe)
        return added

    @writes("Memory.file_pending")
    def file_pending(self, conversation_id: str | None = None, seal: bool = False,
                     progress: Callable[[int], None] | None = None, describe: Describe | None = None) -> None:
        """Memory.add's second half alone: file the stored messages no box holds yet, in order, of one conversation
        (None: every one), then with `seal` seal its open box. For messages stored earlier and not filed: an
        interrupted add, or messages a server stored on receipt to file them in the background (server.py)."""
        convs = [conversation_id] if conversation_id is not None else self.store.conversations()
        if self.has_work(convs):
            self.check_models()
        self.check_build_settings()
        self._file(convs, seal, progress, describe)

    def _file(self, conversations: list[str], seal: bool, progress: Callable[[int], None] | None,
              describe: Describe | None = None) -> None:
        driver = self.driver(describe)
        for conv in conversations:
            driver.drive(self.conversation_step(conv, seal, progress), conv)

    @writes("Memory.seal")
    def seal(self, conversation_id: str | None = None) -> None:
        """Seal and extract each conversation's open box (end of a conversation), after extracting and weaving
        the boxes left to (those an update or a forget invalidated, those whose extraction failed)."""
        self.check_build_settings()
        convs = [conversation_id] if conversation_id else self.store.conversations()
        if self.has_work(convs):
            self.check_models()
        driver = self.driver()
        for conv in convs:
            for comp in self.components:
                driver.drive(comp.seal_step(conv), conv)

    def sync(self) -> None:
        """Bring every system's derived indexes up to date with the store."""
        for comp in self.components:
            comp.sync()
