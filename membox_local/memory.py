"""`Memory`: the Python API. A folder holds the SQLite store and the derived vector indexes.

    mem = Memory("my-memory")   # or config="cpu-ce" (the default), a config name or a .toml path
    mem.add(messages)            # file messages into topic boxes (resumable, idempotent)
    mem.seal()                   # seal and extract open boxes (end of a conversation)
    mem.search("question", k=5)  # [(Box, score)]
    mem.answer("question")       # Answer(text, context)

and the verbs known from mem0: get, get_all, update, delete, delete_all, history, reset. A conversation is the
unit of isolation: a read that names one (conversation_id) sees nothing of the others; one that names several
(conversation_ids) sees those; one that names none sees every conversation (a memory of one: that one).
"""
from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

from .backends.base import Backend
from .backends.router import StageRouter
from .config import Config
from .embed import CachedEmbedder, Embedder, make_embedder
from .execution.driver import Driver
from .execution.progress import Describe, DescribingDriver
from .index import VectorIndex
from .private import private_dir
from .store import WriteLock, built_systems, store_class
from .systems import component_class, tables_for
from .systems.base import Component
from .memory_erasure import Erasure, check_text  # noqa: F401  (check_text: part of this module's API)
from .memory_filing import Filing, writes  # noqa: F401
from .memory_reading import Answer, Reading, check_question  # noqa: F401  (Answer: membox_local.Answer)
from .memory_settings import (CONFIG_KEY, BuildSettings, dump_json, memory_config, open_store,  # noqa: F401
                              stored_config)
from .memory_verbs import Verbs


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


def open_memory(path: str | Path, config: Config | str | Path | None = None, *, writer: str | None = None,
                models: bool = False, backend: Backend | Callable[[], Backend] | None = None,
                embedder: Embedder | None = None) -> "Memory":
    """The one path from a folder to an open memory, in this order:
    1. the config: the user's (`config`: a Config, a name or a .toml path), else the folder's own through the trust
       check, else DEFAULT_CONFIG (memory_config);
    2. the models it names found, without loading them (preflight_models), when `models`: before anything is opened;
    3. the store and the components of the config's memory systems (Memory);
    4. the build settings: a writer (`writer`: what it is, named to a second writer the lock refuses) takes the
       folder's write lock until close and records the settings or refuses others (check_build_settings); a reader
       given a config of the user's is refused when it does not fit what was built (check_fits).
    What fails is one line (ConfigError, ModelNotFound, BackendError, StoreBusy, StoreError), and closes what it
    opened. `membox serve`, `membox mcp`, `membox build` (the local engine) and the reading commands (ask, ...) open
    their memories here; import (into an empty folder), the demo and the evaluations make a Memory directly."""
    cfg = memory_config(path, config)
    if models:
        preflight_models(cfg, llm=backend is None, embedder=embedder is None)
    mem = Memory(path, cfg, backend=backend, embedder=embedder)
    mem._models_checked = models
    try:
        if writer is not None:
            mem.hold_write_lock(writer)
            mem.check_build_settings()
        elif config is not None:
            mem.check_fits()
    except BaseException:
        mem.close()
        raise
    return mem


class Memory(BuildSettings, Filing, Erasure, Verbs, Reading):
    """A memory folder: the shared store plus the memory systems (components) the config names; opened in one
    order by `open_memory`. The state, and who owns it:
    - this class: `path`, `config`, `store` (SQLite, the one source of truth), `components` (each system's own
      state: the Loom's open box, read again from the store after another writer), the models (`_embedder`,
      `_backend`, `_answer_backend`, `_made`: loaded on first use, closed by close), the write lock
      (`_write_lock`, `_writer_token`), the vector indexes (`_indexes`: opened by Reading.index, saved by close) and
      the retrievers (`_retrievers`: kept by Reading.retriever while the store's rows are unchanged);
    - its parts, one module each, hold no state of their own and work on the above: BuildSettings
      (memory_settings.py: the build settings and config stored in the store's meta), Filing (memory_filing.py:
      add, seal), Erasure (memory_erasure.py: forget, update, delete, reset), Verbs (memory_verbs.py: get,
      get_all, history) and Reading (memory_reading.py: search, context, answer)."""

    def __init__(self, path: str | Path, config: Config | str | Path | None = None,
                 backend: Backend | Callable[[], Backend] | None = None, embedder: Embedder | None = None,
                 answer_backend: Backend | Callable[[], Backend] | None = None):
        """`config`: a Config, a config name or a .toml path; None: the config the folder was built with (its
        snapshot, stored by the first build), or DEFAULT_CONFIG (cpu-ce) for a new folder (`memory_config`)."""
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
        self._retrievers: dict[str, tuple] = {}  # mode -> (store generation, retriever): Reading.retriever
        self._retrievers_lock = threading.Lock()
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

    def prepare_build(self) -> None:
        """Load the build's model and allocate what its first generation in each stage the systems use would
        (Backend.prepare): `membox serve` and `membox mcp` do it at start."""
        stages = dict.fromkeys(s for comp in self.components for s in comp.generation_stages())
        if stages:
            self.backend.prepare(list(stages))

    def make_resident(self) -> None:
        """Read the weights of the embedder and of the cross-encoders (the Loom judge's, the second stage's)
        once, so that their mapped files' pages are resident from now on, not as new words come (`membox serve` and
        `membox mcp` at start: Embedder.make_resident)."""
        self.embedder.inner.make_resident()
        if "membox" in self.config.memory.systems:
            from .judges import make_judge

            # the judge each conversation's Loom makes; its cross-encoder is loaded once per process (continuity.py)
            ce = getattr(make_judge(self.config.loom), "ce", None)
            if ce is not None:
                ce.make_resident()
        evidence = self.evidence_scorer()  # box-hits' second stage, where the config has one
        if evidence is not None:
            evidence.make_resident()

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

            key = llm_key(llm)  # shared with the build's models both ways (build_backend reads `_made`); a reader
            # that only answers no longer loads the build model too (0.5B: ~1 s and ~0.5 GB of a cold `membox ask`)
            if key not in self._made:
                self._made[key] = make_backend(llm)
            self._answer_backend = self._made[key]
        elif not isinstance(self._answer_backend, Backend):
            self._answer_backend = self._answer_backend()
        return self._answer_backend

    def driver(self, describe: Describe | None = None) -> Driver:
        """A driver for this memory's steps; `describe(text)` is told what each model call is about."""
        return DescribingDriver(self.store, self.embedder, lambda: self.backend, describe=describe)


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


    KINDS = ("boxes", "messages")


    def stats(self, conversation_id: str | None = None) -> dict:
        out = {"conversations": len(self.store.conversations()) if conversation_id is None else 1}
        for comp in self.components:
            out.update(comp.stats(conversation_id))
        out["llm_usage"] = self.store.usage_by_stage(conversation_id)
        # build seconds and calls by stage, summed over every build of it (profile.py: what each stage measures)
        out["build_time"] = {s: {"wall_s": round(t["wall_s"], 3), "calls": t["calls"]}
                             for s, t in self.store.build_time_by_stage(conversation_id).items()}
        return out

    def close(self, models: bool = True) -> None:
        """Save the indexes, close the store and release the write lock; with `models`, also close the models.
        `models=False`: a caller sharing its models across memories (an evaluation opening one history after
        another) keeps them loaded and closes them itself."""
        for idx in self._indexes.values():
            idx.save()
        for comp in self.components:
            comp.close()
        # each model once: those passed in (or made by a callable passed in), and those this Memory made (a router
        # it made is closed through its parts, which are among them)
        if models:
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
