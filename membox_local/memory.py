"""`Memory`: the Python API. A folder holds the SQLite store and the derived vector indexes.

    mem = Memory("my-memory", config="cpu")
    mem.add(messages)            # file messages into topic boxes (resumable, idempotent)
    mem.seal()                   # seal and extract open boxes (end of a conversation)
    mem.search("question", k=5)  # [(Box, score)]
    mem.answer("question")       # Answer(text, context)

and the verbs known from mem0: get, get_all, update, delete, delete_all, history, reset. A conversation is the
unit of isolation: a read that names one (conversation_id) sees nothing of the others; one that names several
(conversation_ids) sees those; one that names none sees every conversation (a memory of one: that one).
"""
from __future__ import annotations

import functools
import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .backends.base import Backend, TextRequest
from .backends.router import StageRouter
from .config import Config, ConfigError, config_from_dict, load_config
from .embed import CachedEmbedder, Embedder, make_embedder
from .execution.driver import Driver
from .execution.progress import Describe, DescribingDriver
from .index import VectorIndex
from .ingest import InputError, as_messages, check_metadata
from .private import private_dir
from .prompts import answer_prompt
from .records import Box, Change, Message
from .retrieval import RETRIEVERS, Context, make_retriever, quoting_texts
from .store import NotFound, StoreError, WriteLock, built_systems, store_class
from .systems import SYSTEMS, component_class, tables_for
from .systems.base import Component


@dataclass
class Answer:
    text: str
    context: Context
    question: str


def check_question(question: object, where: str) -> None:
    """A question is a non-empty string that can be written as UTF-8 (no lone surrogate): else an InputError."""
    if not isinstance(question, str):
        raise InputError(f"{where}: the question must be a string, got {type(question).__name__}")
    if not question.strip():
        raise InputError(f"{where}: the question is empty")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{where}: the question is not valid Unicode (a lone surrogate at character "
                         f"{exc.start})") from None


def preflight_models(config: Config, llm: bool = True, embedder: bool = True) -> None:
    """The config's model checks, without loading a model (see Memory.check_models): [llm] through its backend's
    preflight (llama.cpp: the GGUF file is found and is one; openai: the server answers), and a
    sentence-transformers [embedder] is found. `membox build` runs them before it creates the memory folder."""
    if llm:
        from .backends import preflight

        preflight(config.llm)
        for llm in {id(x): x for x in config.stage_llms().values()}.values():  # a stage's own model ([eventweave] llm)
            preflight(llm)
    if embedder and config.embedder.backend == "sentence-transformers":
        from .weights import resolve_model

        resolve_model(config.embedder.model)


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


def _ids(values: object, what: str, where: str) -> list[str]:
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


def _writes(what: str):
    """A method that writes the store runs holding the folder's write lock (`Memory.writing`)."""
    def wrap(method):
        @functools.wraps(method)
        def locked(self, *args, **kw):
            with self.writing(what):
                return method(self, *args, **kw)
        return locked
    return wrap


class Memory:
    """A memory folder: the shared store plus the memory systems (components) the config names."""

    def __init__(self, path: str | Path, config: Config | str | Path | None = None,
                 backend: Backend | Callable[[], Backend] | None = None, embedder: Embedder | None = None,
                 answer_backend: Backend | Callable[[], Backend] | None = None):
        """`config`: a Config, a config name or a .toml path; None: the config the folder was built with (its
        snapshot, stored by the first build), or the default, cpu, for a new folder (`memory_config`)."""
        self.path = Path(path)
        self._write_lock: WriteLock | None = None  # held while a write runs (writing), or till close (hold_write_lock)
        self._writer_token: str | None = None  # the lock's token when this Memory last took it
        self._models_checked = False
        private_dir(self.path)  # owner-only, 0700 (private.py); a folder an older version made 0755 is tightened
        self.config = memory_config(self.path, config)
        built = built_systems(self.path / "memory.db")
        self.store = store_class(tables_for(self.config.memory.systems))(self.path / "memory.db")
        if any(name not in built for name in self.config.memory.systems):
            self.store.set_meta("systems", json.dumps(built + [n for n in self.config.memory.systems if n not in built]))
        self._check_embedder_setting()
        self._embedder = embedder
        self._backend = backend
        self._answer_backend = answer_backend
        self._made: dict[str, Backend] = {}  # the models this Memory loaded itself, by settings (llm_key): shared
        self._indexes: dict[str, VectorIndex] = {}
        self.components: list[Component] = [component_class(n)(self) for n in self.config.memory.systems]

    def system(self, name: str) -> Component:
        """The component of the named memory system (`[memory] systems`)."""
        for c in self.components:
            if c.name == name:
                return c
        raise ValueError(f"{self.path}: the config {self.config.name!r} builds no {name!r} memory "
                         f"(its [memory] systems: {', '.join(self.config.memory.systems)})")

    # ---- lazily loaded models -------------------------------------------------------------------
    @property
    def embedder(self) -> CachedEmbedder:
        if not isinstance(self._embedder, CachedEmbedder):
            inner = self._embedder or make_embedder(self.config.embedder)
            self._embedder = CachedEmbedder(inner, self.store)
        return self._embedder

    @property
    def backend(self) -> Backend:
        """The build's backend: [llm]'s model, behind a StageRouter when a memory system names its own model for
        its stages (`Config.stage_llms`); a backend passed in answers every stage."""
        if self._backend is None:
            from .backends.router import build_backend

            self._backend = build_backend(self.config, made=self._made)
        elif not isinstance(self._backend, Backend):
            self._backend = self._backend()
        return self._backend

    @property
    def answer_backend(self) -> Backend:
        """The answering model ([answer.llm] over [llm]); a model the build loaded already (the build's, or a
        stage's) is shared, not loaded twice."""
        if self._answer_backend is None:
            llm = self.config.answer_llm()
            if llm == self.config.llm and not self._made:
                return self.backend
            from .backends import make_backend
            from .backends.router import llm_key

            if not self._made:  # the build model, when this Memory makes it, is one of those made
                self.backend
            key = llm_key(llm)
            if key not in self._made:
                self._made[key] = make_backend(llm)
            self._answer_backend = self._made[key]
        elif not isinstance(self._answer_backend, Backend):
            self._answer_backend = self._answer_backend()
        return self._answer_backend

    def driver(self, describe: Describe | None = None) -> Driver:
        """A driver for this memory's steps; `describe(text)` is told what each model call is about."""
        return DescribingDriver(self.store, self.embedder, lambda: self.backend, describe=describe)

    def _check_embedder_setting(self) -> None:
        name = self.config.embedder.model
        stored = self.store.get_meta("embedder")
        if stored is None:
            self.store.set_meta("embedder", name)
        elif stored != name:
            raise StoreError(
                f"{self.path} was built with embedder '{stored}', but the config asks for '{name}'; "
                f"use the same embedder or a new memory folder"
            )

    def build_settings(self) -> dict:
        """The settings that decide what a build writes (the model, and each system's sections); execution
        settings such as threads, batch sizes or retrieval are free to change between runs."""
        c = self.config
        out = {"llm.backend": c.llm.backend, "llm.model": c.llm.model, "llm.temperature": c.llm.temperature}
        for comp in self.components:
            out.update(comp.build_settings())
        return out

    def check_build_settings(self) -> None:
        """A memory is filed with one set of build settings: continuing it with others (another judge,
        other weights, another model) would mix two segmentations in one store, silently. Refused. The first build
        records the settings and the whole config (`record_config`: what `Memory(path)` opens it with later)."""
        before = self.check_fits()
        now = self.build_settings()
        if before is None or set(now) - set(before):  # new, or keys it was built without (a system added to it, a
            self.store.set_meta("build_settings", json.dumps(now, sort_keys=True))  # key added since): recorded
            self.record_config()
        elif self.store.get_meta(CONFIG_KEY) is None:  # a memory built before configs were stored
            self.record_config()

    def check_fits(self) -> dict | None:
        """Refuse (StoreError, one line) a config whose build settings differ from those the memory was built
        with; writes nothing (a reader may call it). Returns the recorded settings (None: nothing built yet)."""
        stored = self.store.get_meta("build_settings")
        if stored is None:
            return None
        before = json.loads(stored)
        diff = self.settings_differences(before)
        if diff:
            raise StoreError(f"{self.path} was built with other settings ({diff}); {self._built_with()}, or build "
                             f"into a new memory folder")
        return before

    def _built_with(self) -> str:
        """How to name the config the memory was built with, for an error line."""
        snapshot = self.store.get_meta(CONFIG_KEY)
        if snapshot is None:
            return "continue it with the config it was built with"
        name = json.loads(snapshot).get("name", "?")
        return f"use the config it was built with ({name!r}, stored in the folder: give no --config, or config=None)"

    def record_config(self) -> None:
        """Store the config as the memory's own (meta `config`: its name, source file and every key, as JSON), so
        that it can be opened, asked and served without naming a config (`stored_config`)."""
        self.store.set_meta(CONFIG_KEY, json.dumps(self.config.to_dict(), sort_keys=True))

    def settings_differences(self, before: dict) -> str:
        """How build settings recorded earlier (`before`: a store's, an export's) differ from this config's, as
        "key: old then, new now; ..." ("" when they fit). A setting added after they were recorded counts as
        unchanged while it keeps the value it had before its key existed."""
        now = self.build_settings()
        before = dict(before)
        for comp in self.components:
            before.update({k: v for k, v in comp.before_key_existed.items() if k in now and k not in before})
        diff = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        shown = "; ".join(f"{k}: {before.get(k)!r} then, {now.get(k)!r} now" for k in diff[:6])
        return shown + (" ..." if len(diff) > 6 else "")

    def check_models(self) -> None:
        """Find model problems before anything is filed: a model that is missing (a name not in the manifest, a
        path that does not exist, a package not installed), a file that is not a model, a server that does not
        answer. Raises one clear error (ModelNotFound, BackendError, ConfigError) instead of failing halfway
        through a build. Checks the config's [llm] when this Memory makes its backend itself (a backend passed
        in is the caller's, already made), and the config's sentence-transformers embedder when none was
        passed."""
        if not self._models_checked:
            preflight_models(self.config, llm=self._backend is None, embedder=self._embedder is None)
            self._models_checked = True

    def to_file(self, conversations: Iterable[str] | None = None) -> dict[str, int]:
        """Per memory system, the messages of these conversations (default: all) it has yet to take in: what a
        build's progress callback counts (Component.pending)."""
        convs = list(self.store.conversations() if conversations is None else conversations)
        return {comp.name: sum(comp.pending(c) for c in convs) for comp in self.components}

    def has_work(self, conversations: Iterable[str] | None = None) -> bool:
        """Whether a build has anything to do in these conversations (default: all): messages to file, boxes to
        seal, extract or weave."""
        convs = self.store.conversations() if conversations is None else conversations
        return any(comp.todo(c) for c in convs for comp in self.components)

    # ---- the write lock -------------------------------------------------------------------------
    @contextmanager
    def writing(self, what: str):
        """Hold the folder's write lock (store.WriteLock) while a write operation runs: a second writer, in this
        process or another, is refused at once (StoreBusy, one line naming this one); readers never take it.
        Re-entrant: an operation inside another, or after hold_write_lock, keeps the lock it finds."""
        if self._write_lock is not None:
            yield
            return
        lock = self._take_write_lock(what)
        try:
            yield
        finally:
            self._write_lock = None
            lock.release()

    def hold_write_lock(self, what: str) -> WriteLock:
        """Take the write lock and keep it until close() (the LoCoMo evaluation holds it over its builds)."""
        return self._write_lock if self._write_lock is not None else self._take_write_lock(what)

    def _take_write_lock(self, what: str) -> WriteLock:
        lock = WriteLock(self.path, what).acquire()
        if self._writer_token is not None and lock.previous != self._writer_token:
            # another writer held the lock since this Memory last did: what the components keep between calls
            # (the Loom's open box) may be stale, and is read again from the store
            for comp in self.components:
                comp.reset()
        self._writer_token, self._write_lock = lock.token, lock
        return lock

    # ---- writing --------------------------------------------------------------------------------
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

    @_writes("Memory.add")
    def _add(self, msgs: list[Message], seal: bool, progress: Callable[[int], None] | None,
             describe: Describe | None = None) -> int:
        if msgs or self.has_work():
            self.check_models()  # a missing or broken model is reported before the first message is filed
        self.check_build_settings()  # other build settings are refused before a message is written
        added = self.store.add_messages(msgs)
        self._file(list(dict.fromkeys([m.conversation_id for m in msgs])) or self.store.conversations(), seal,
                   progress, describe)
        return added

    @_writes("Memory.file_pending")
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

    @_writes("Memory.seal")
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

    # ---- forgetting and changing ------------------------------------------------------------------
    @_writes("Memory.forget")
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
        return self._forget({conversation_id: None if message_ids is None else _ids(message_ids, "message ids",
                                                                                    "forget")})

    def delete(self, conversation_id: str, message_ids: Iterable[str]) -> dict[str, int]:
        """Erase these messages of one conversation and all derived from them: Memory.forget (its counts)."""
        return self.forget(conversation_id, _ids(message_ids, "message ids", "delete"))

    @_writes("Memory.delete_all")
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

    @_writes("Memory.reset")
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
            plan.append((conv, rows, self._known_ids(conv, rows, ids, "forgotten")))
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

    @_writes("Memory.update")
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
        [message_id] = self._known_ids(conversation_id, rows, [message_id], "updated")
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

    def _known_ids(self, conversation_id: str, rows: list[Message], ids: list[str] | None, verb: str) -> list[str]:
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
        """Delete the vector indexes beside the store: they are derived, and rebuilt from it when missing."""
        self._indexes.clear()
        # the indexes, their id maps, and what an index save killed midway left (it may hold forgotten vectors)
        for pattern in ("*.hnsw", "*.ids.json", "*.tmp"):
            for p in self.path.glob(pattern):
                p.unlink(missing_ok=True)

    # ---- reading --------------------------------------------------------------------------------
    def boxes(self, conversation_id: str | None = None) -> list[Box]:
        """The box memory's boxes, with their messages and events."""
        self.system("membox")
        return self.store.boxes(conversation_id)

    def get(self, id: int | tuple[str, str]) -> Box | Message:
        """One record by its id: a box id (int) gives the Box, with its messages and events; a (conversation_id,
        message_id) pair gives the Message, with its tags. NotFound (a KeyError) names an id this memory lacks."""
        if isinstance(id, int) and not isinstance(id, bool):
            self.system("membox")
            return self.store.box(id)
        return self.store.message(*self._message_key(id, "get"))

    def history(self, id: int | tuple[str, str]) -> list[Change]:
        """Every change to a box (its id) or a message ((conversation_id, message_id)), oldest first, with its UTC
        time: a message's add, update, delete; a box's add, seal, extract, re-extract, extract-failed, invalidate,
        weave, delete (records.Change). A deleted record keeps its history (ids and events, never its text). A store
        migrated from schema 1 starts its records' history then. NotFound when the id has no history and names no
        record."""
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

    KINDS = ("boxes", "messages")

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
        return None if conversation_ids is None else _ids(conversation_ids, "conversation ids", where)

    def index(self, name: str) -> VectorIndex:
        """A vector index kept beside the store (`<name>.hnsw`), derived from it and rebuilt when deleted."""
        if name not in self._indexes:
            self._indexes[name] = VectorIndex(self.path / f"{name}.hnsw", self.embedder.dim)
        return self._indexes[name]

    def _default_conversation(self, conversation_id: str | None, where: str = "search") -> str | None:
        """The conversation a read sees: the one named, else the memory's only one. Conversations are the
        isolation unit, so a read of a memory holding several must say which (or, for search, which several)."""
        if conversation_id is not None:
            return conversation_id
        convs = self.store.conversations()
        if len(convs) > 1:
            shown = ", ".join(convs[:5]) + (", ..." if len(convs) > 5 else "")
            raise InputError(f"{where}: this memory holds {len(convs)} conversations ({shown}); name one with "
                             f"conversation_id (--conversation), or several with conversation_ids (search)")
        return convs[0] if convs else None

    def search(self, question: str, k: int | None = None, conversation_id: str | None = None, *,
               conversation_ids: Iterable[str] | None = None, user_id: str | None = None, agent_id: str | None = None,
               filters: Mapping[str, Any] | None = None) -> list[tuple[Box, float]]:
        """The k extracted boxes nearest the question (default [retrieve] k), as (Box, cosine), best first.

        Within one conversation (`conversation_id`: nothing of another one is seen) or several
        (`conversation_ids`); naming none is allowed only when the memory holds one conversation. With `user_id`, `agent_id` or `filters` (metadata key -> value, equal as
        JSON), among the boxes holding a message that matches them all (as Memory.get_all)."""
        check_question(question, "search")
        k = k or self.config.retrieve.k
        if conversation_ids is None and user_id is None and agent_id is None and filters is None:
            return self.system("membox").search(question, k, self._default_conversation(conversation_id))
        convs = self._scope("search", conversation_id, conversation_ids)
        return self.system("membox").search(question, k, None,
                                            boxes=self._matching_boxes(convs, user_id, agent_id, filters))

    def modes(self) -> list[str]:
        """Retrieval modes this memory can serve: the message-only ones and those of its systems."""
        claimed = {m for info in SYSTEMS.values() for m in info.modes}
        own = {m for n in self.config.memory.systems for m in SYSTEMS[n].modes}
        return sorted(m for m in RETRIEVERS if m not in claimed or m in own)

    def context(self, question: str, conversation_id: str | None = None, mode: str | None = None,
                k: int | None = None, budget_tokens: int | None = None) -> Context:
        check_question(question, "retrieve")
        rc = self.config.retrieve
        mode = mode or rc.mode
        if mode in RETRIEVERS and mode not in self.modes():
            raise ValueError(f"retrieval mode '{mode}' reads a memory system this config does not build; "
                             f"choose one of {self.modes()}")
        for name, value in (("k", k), ("budget_tokens", budget_tokens)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise InputError(f"{name} must be a whole number of at least 1 (got {value!r})")
        retriever = make_retriever(mode, self)
        return retriever.retrieve(question, self._default_conversation(conversation_id, "retrieve"),
                                  rc.k if k is None else k, rc.budget_tokens if budget_tokens is None else budget_tokens)

    def answer(self, question: str, conversation_id: str | None = None, **kw) -> Answer:
        return self.answer_from(question, self.context(question, conversation_id, **kw), conversation_id)

    def answer_from(self, question: str, ctx: Context, conversation_id: str | None = None,
                    backend: Backend | None = None) -> Answer:
        """Answer from a context already retrieved (evaluations reuse one retriever across questions, and may
        pass another answering backend)."""
        res = (backend or self.answer_backend).text([TextRequest(answer_prompt(ctx.text, question), "answer",
                                                                 self.config.answer.max_tokens)])[0]
        if isinstance(res, BaseException):
            raise res
        self.store.record_usage(conversation_id or "", "answer", res.usage.prompt_tokens,
                                res.usage.completion_tokens)
        return Answer(res.text.strip(), ctx, question)

    # ---- reporting ------------------------------------------------------------------------------
    def stats(self, conversation_id: str | None = None) -> dict:
        out = {"conversations": len(self.store.conversations()) if conversation_id is None else 1}
        for comp in self.components:
            out.update(comp.stats(conversation_id))
        out["llm_usage"] = self.store.usage_by_stage(conversation_id)
        # build seconds and calls by stage, summed over every build of it (profile.py: what each stage measures)
        out["build_time"] = {s: {"wall_s": round(t["wall_s"], 3), "calls": t["calls"]}
                             for s, t in self.store.build_time_by_stage(conversation_id).items()}
        return out

    def close(self) -> None:
        for idx in self._indexes.values():
            idx.save()
        for comp in self.components:
            comp.close()
        # each model once: those passed in (or made by a callable passed in), and those this Memory made (a router
        # it made is closed through its parts, which are among them)
        ours = {id(b) for b in self._made.values()}
        router_ours = isinstance(self._backend, StageRouter) and id(self._backend.default) in ours
        closing = [] if router_ours else [self._backend]
        for b in {id(b): b for b in [*closing, self._answer_backend, *self._made.values()]
                  if isinstance(b, Backend)}.values():
            b.close()
        self.store.close()
        if self._write_lock is not None:
            self._write_lock.release()
            self._write_lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _quoted(rows: list[Message], ids: list[str]) -> list[str]:
    """The texts the retrieval modes embed (and the store caches) that hold one of these messages: each message
    alone and every chunk of `rows` holding it (retrieval.quoting_texts)."""
    gone = set(ids)
    return [m.text for m in rows if m.message_id in gone] + quoting_texts(rows, gone)


def dump_json(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


CONFIG_KEY = "config"  # the meta key of the config a memory was built with (Memory.record_config)


def stored_config(path: str | Path) -> Config | None:
    """The config a memory folder was built with (the snapshot its first build stored); None for a folder without
    a memory or without a snapshot (built by an older version). A snapshot this version cannot load is a
    ConfigError naming the folder."""
    if not (Path(path) / "memory.db").exists():
        return None
    store = open_store(path)
    try:
        snapshot = store.get_meta(CONFIG_KEY)
    finally:
        store.close()
    if snapshot is None:
        return None
    try:
        return config_from_dict(json.loads(snapshot), where=f"{path}: the config stored at its first build")
    except ConfigError as exc:
        raise ConfigError(f"{exc}; pass --config with the config it was built with") from None


def memory_config(path: str | Path, config: Config | str | Path | None = None) -> Config:
    """The config to open a memory folder with: `config` (a Config, a name or a .toml path) when given, else the one
    the folder was built with (stored_config), else the default, cpu."""
    if config is None:
        return stored_config(path) or load_config("cpu")
    return config if isinstance(config, Config) else load_config(config)


def open_store(path: str | Path):
    """A memory folder's store with the tables of every system built in it, for reading without a config."""
    db = Path(path) / "memory.db"
    return store_class(tables_for(built_systems(db)))(db)
