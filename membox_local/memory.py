"""`Memory`: the Python API. A folder holds the SQLite store and the derived vector indexes.

    mem = Memory("my-memory", config="cpu")
    mem.add(messages)            # file messages into topic boxes (resumable, idempotent)
    mem.seal()                   # seal and extract open boxes (end of a conversation)
    mem.search("question", k=5)  # [(Box, score)]
    mem.answer("question")       # Answer(text, context)
"""
from __future__ import annotations

import functools
import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .backends.base import Backend, TextRequest
from .config import Config, load_config
from .embed import CachedEmbedder, Embedder, make_embedder
from .execution.driver import Driver
from .index import VectorIndex
from .ingest import InputError, as_messages
from .private import private_dir
from .prompts import answer_prompt
from .records import Box, Message
from .retrieval import RETRIEVERS, Context, make_retriever, quoting_texts
from .store import StoreError, WriteLock, built_systems, store_class
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
    if embedder and config.embedder.backend == "sentence-transformers":
        from .weights import resolve_model

        resolve_model(config.embedder.model)


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

    def __init__(self, path: str | Path, config: Config | str | Path = "cpu",
                 backend: Backend | Callable[[], Backend] | None = None, embedder: Embedder | None = None,
                 answer_backend: Backend | Callable[[], Backend] | None = None):
        self.path = Path(path)
        self._write_lock: WriteLock | None = None  # held while a write runs (writing), or till close (hold_write_lock)
        self._writer_token: str | None = None  # the lock's token when this Memory last took it
        self._models_checked = False
        private_dir(self.path)  # owner-only, 0700 (private.py); a folder an older version made 0755 is tightened
        self.config = config if isinstance(config, Config) else load_config(config)
        built = built_systems(self.path / "memory.db")
        self.store = store_class(tables_for(self.config.memory.systems))(self.path / "memory.db")
        if any(name not in built for name in self.config.memory.systems):
            self.store.set_meta("systems", json.dumps(built + [n for n in self.config.memory.systems if n not in built]))
        self._check_embedder_setting()
        self._embedder = embedder
        self._backend = backend
        self._answer_backend = answer_backend
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
        if self._backend is None:
            from .backends import make_backend

            self._backend = make_backend(self.config.llm)
        elif not isinstance(self._backend, Backend):
            self._backend = self._backend()
        return self._backend

    @property
    def answer_backend(self) -> Backend:
        """The answering model ([answer.llm] over [llm]); the build backend when they are the same."""
        if self._answer_backend is None:
            llm = self.config.answer_llm()
            if llm == self.config.llm:
                return self.backend
            from .backends import make_backend

            self._answer_backend = make_backend(llm)
        elif not isinstance(self._answer_backend, Backend):
            self._answer_backend = self._answer_backend()
        return self._answer_backend

    def driver(self) -> Driver:
        return Driver(self.store, self.embedder, lambda: self.backend)

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
        other weights, another model) would mix two segmentations in one store, silently. Refused."""
        now = self.build_settings()
        stored = self.store.get_meta("build_settings")
        if stored is None:
            self.store.set_meta("build_settings", json.dumps(now, sort_keys=True))
            return
        before = json.loads(stored)
        # a setting added after the store was built counts as unchanged while it keeps its value from before
        for comp in self.components:
            before.update({k: v for k, v in comp.before_key_existed.items() if k in now and k not in before})
        diff = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        if diff:
            shown = "; ".join(f"{k}: {before.get(k)!r} then, {now.get(k)!r} now" for k in diff[:6])
            raise StoreError(f"{self.path} was built with other settings ({shown}{' ...' if len(diff) > 6 else ''}); "
                             f"continue it with the settings it was built with, or build into a new memory folder")

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
        """The generator step that processes every pending message of one conversation, system by system
        (the progress callback counts the first system's messages)."""
        self.check_build_settings()
        for n, comp in enumerate(self.components):
            yield from comp.build_step(conversation_id, seal, progress if n == 0 else None)

    def add(self, messages: Iterable[Message | dict], seal: bool = False,
            progress: Callable[[int], None] | None = None) -> int:
        """Store messages (skipping ones already stored) and file every pending message into boxes.

        Returns how many messages were new. Messages are written before they are processed, so an
        interrupted call is resumed by calling `add` again (with the same or no messages).
        """
        # every message is checked (InputError) before anything is written, the write lock's file included
        return self._add(as_messages(messages), seal, progress)

    @_writes("Memory.add")
    def _add(self, msgs: list[Message], seal: bool, progress: Callable[[int], None] | None) -> int:
        if msgs or self.has_work():
            self.check_models()  # a missing or broken model is reported before the first message is filed
        self.check_build_settings()  # other build settings are refused before a message is written
        added = self.store.add_messages(msgs)
        convs = list(dict.fromkeys([m.conversation_id for m in msgs])) or self.store.conversations()
        driver = self.driver()
        for conv in convs:
            driver.drive(self.conversation_step(conv, seal, progress), conv)
        return added

    @_writes("Memory.seal")
    def seal(self, conversation_id: str | None = None) -> None:
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

    # ---- forgetting -----------------------------------------------------------------------------
    @_writes("Memory.forget")
    def forget(self, conversation_id: str, message_ids: Iterable[str] | None = None) -> dict[str, int]:
        """Erase messages of one conversation (every one of them when `message_ids` is None) and all that was
        derived from them, so that their text is in no file of the folder any more.

        In one transaction: each system deletes what it derived (Component.forget: the box memory's events,
        traces, records, emptied boxes; a box that keeps other messages is extracted again by the next build)
        and the cached embeddings of derived texts; then the messages and their own cached embeddings (and the
        chunks of them the retrieval modes embed) go. Then the database is scrubbed (deleted cells zeroed,
        VACUUM, the write-ahead log truncated) and the vector indexes beside it are deleted: rebuilt now when an
        embedder is at hand, else by the next search. Returns counts: messages, each system's (boxes, events,
        traces, boxes_to_extract, boxes_to_weave), cached_vectors, and scrubbed (0 when another process held the
        store open and kept the log from being truncated). Questions asked earlier stay in the embedding cache
        under their hash (their text is not stored)."""
        if (self.path / "shards.json").exists():
            raise StoreError(f"{self.path} is sharded (built with --engine ray): its shards keep their own copies of "
                             f"the messages, and the next build merges them back; forgetting in a sharded memory "
                             f"is not supported")
        rows = self.store.messages(conversation_id)
        if not rows:
            known = self.store.conversations()
            held = f"its conversations: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}" if known \
                else "it holds none"
            raise StoreError(f"{self.path}: no conversation {conversation_id!r} in this memory ({held})")
        ids = [m.message_id for m in rows] if message_ids is None else list(dict.fromkeys(message_ids))
        if not ids:
            raise StoreError("forget: no message ids given")
        stored = {m.message_id for m in rows}
        unknown = [i for i in ids if i not in stored]
        if unknown:
            more = " ..." if len(unknown) > 10 else ""
            raise StoreError(f"{self.path}: conversation {conversation_id!r} has no message "
                             f"{', '.join(map(repr, unknown[:10]))}{more}; nothing forgotten")
        gone = set(ids)
        texts = [m.text for m in rows if m.message_id in gone] + quoting_texts(rows, gone)
        counts = {"messages": 0}
        with self.store.transaction():
            for comp in self.components:
                for key, n in comp.forget(conversation_id, ids).items():
                    counts[key] = counts.get(key, 0) + n
            counts["messages"] = self.store.delete_messages(conversation_id, ids)
            counts["cached_vectors"] = counts.get("cached_vectors", 0) + self.store.forget_vectors(texts)
        counts["scrubbed"] = int(self.store.scrub())
        self._drop_indexes()
        if self._embedder is not None:  # rebuilt now only when that loads no model
            self.sync()
        return counts

    def _drop_indexes(self) -> None:
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

    def index(self, name: str) -> VectorIndex:
        """A vector index kept beside the store (`<name>.hnsw`), derived from it and rebuilt when deleted."""
        if name not in self._indexes:
            self._indexes[name] = VectorIndex(self.path / f"{name}.hnsw", self.embedder.dim)
        return self._indexes[name]

    def _default_conversation(self, conversation_id: str | None) -> str | None:
        if conversation_id is not None:
            return conversation_id
        convs = self.store.conversations()
        return convs[0] if len(convs) == 1 else None

    def search(self, question: str, k: int | None = None, conversation_id: str | None = None) -> list[tuple[Box, float]]:
        check_question(question, "search")
        return self.system("membox").search(question, k or self.config.retrieve.k,
                                            self._default_conversation(conversation_id))

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
        retriever = make_retriever(mode, self)
        return retriever.retrieve(question, self._default_conversation(conversation_id), k or rc.k,
                                  budget_tokens or rc.budget_tokens)

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
        return out

    def close(self) -> None:
        for idx in self._indexes.values():
            idx.save()
        for comp in self.components:
            comp.close()
        if isinstance(self._answer_backend, Backend) and self._answer_backend is not self._backend:
            self._answer_backend.close()
        if isinstance(self._backend, Backend):
            self._backend.close()
        self.store.close()
        if self._write_lock is not None:
            self._write_lock.release()
            self._write_lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def dump_json(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


def open_store(path: str | Path):
    """A memory folder's store with the tables of every system built in it, for reading without a config."""
    db = Path(path) / "memory.db"
    return store_class(tables_for(built_systems(db)))(db)
