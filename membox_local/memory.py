"""`Memory`: the Python API. A folder holds the SQLite store and the derived vector indexes.

    mem = Memory("my-memory", config="cpu")
    mem.add(messages)            # file messages into topic boxes (resumable, idempotent)
    mem.seal()                   # seal and extract open boxes (end of a conversation)
    mem.search("question", k=5)  # [(Box, score)]
    mem.answer("question")       # Answer(text, context)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .backends.base import Backend, TextRequest
from .config import Config, load_config
from .embed import CachedEmbedder, Embedder, make_embedder
from .execution.driver import Driver
from .index import VectorIndex
from .prompts import answer_prompt
from .records import Box, Message
from .retrieval import RETRIEVERS, Context, make_retriever
from .store import StoreError, built_systems, store_class
from .systems import SYSTEMS, component_class, tables_for
from .systems.base import Component


@dataclass
class Answer:
    text: str
    context: Context
    question: str


class Memory:
    """A memory folder: the shared store plus the memory systems (components) the config names."""

    def __init__(self, path: str | Path, config: Config | str | Path = "cpu",
                 backend: Backend | Callable[[], Backend] | None = None, embedder: Embedder | None = None,
                 answer_backend: Backend | Callable[[], Backend] | None = None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
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
        msgs = [m if isinstance(m, Message) else Message(**m) for m in messages]
        added = self.store.add_messages(msgs)
        convs = list(dict.fromkeys([m.conversation_id for m in msgs])) or self.store.conversations()
        driver = self.driver()
        for conv in convs:
            driver.drive(self.conversation_step(conv, seal, progress), conv)
        return added

    def seal(self, conversation_id: str | None = None) -> None:
        self.check_build_settings()
        driver = self.driver()
        for conv in [conversation_id] if conversation_id else self.store.conversations():
            for comp in self.components:
                driver.drive(comp.seal_step(conv), conv)

    def sync(self) -> None:
        """Bring every system's derived indexes up to date with the store."""
        for comp in self.components:
            comp.sync()

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
        if not question.strip():
            raise ValueError("search: the question is empty")
        return self.system("membox").search(question, k or self.config.retrieve.k,
                                            self._default_conversation(conversation_id))

    def modes(self) -> list[str]:
        """Retrieval modes this memory can serve: the message-only ones and those of its systems."""
        claimed = {m for info in SYSTEMS.values() for m in info.modes}
        own = {m for n in self.config.memory.systems for m in SYSTEMS[n].modes}
        return sorted(m for m in RETRIEVERS if m not in claimed or m in own)

    def context(self, question: str, conversation_id: str | None = None, mode: str | None = None,
                k: int | None = None, budget_tokens: int | None = None) -> Context:
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
