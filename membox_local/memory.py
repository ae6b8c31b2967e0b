"""`Memory`: the Python API. A folder holds the SQLite store and the derived vector indexes.

    mem = Memory("my-memory", config="cpu")
    mem.add(messages)            # file messages into topic boxes (resumable, idempotent)
    mem.seal()                   # seal and extract open boxes (end of a conversation)
    mem.search("question", k=5)  # [(Box, score)]
    mem.answer("question")       # Answer(text, context)
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

from .backends.base import Backend, TextRequest
from .config import Config, load_config
from .driver import Driver
from .embed import CachedEmbedder, Embedder, make_embedder
from .index import VectorIndex
from .loom import Loom
from .prompts import answer_prompt
from .records import Box, Message
from .retrieve import Context, box_index_text, make_retriever
from .store import Store, StoreError


@dataclass
class Answer:
    text: str
    context: Context
    question: str


class Memory:
    def __init__(self, path: str | Path, config: Config | str | Path = "cpu",
                 backend: Backend | Callable[[], Backend] | None = None, embedder: Embedder | None = None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config = config if isinstance(config, Config) else load_config(config)
        self.store = Store(self.path / "memory.db")
        self._check_embedder_setting()
        self._embedder = embedder
        self._backend = backend
        self._indexes: dict[str, VectorIndex] = {}
        self._looms: dict[str, Loom] = {}
        self.after_extract = None  # set by the Trace Weaver when enabled
        self.weaver = None
        if self.config.weaver.enabled:
            from .weaver import Weaver

            self.weaver = Weaver(self.store, self.config)
            self.after_extract = self.weaver.weave  # each box is woven once, right after its extraction

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
        """The settings that decide what a build writes (boxes, records, traces); execution settings such as
        threads, batch sizes or retrieval are free to change between runs."""
        c = self.config
        out = {"llm.backend": c.llm.backend, "llm.model": c.llm.model, "llm.temperature": c.llm.temperature}
        for section in ("loom", "extract", "weaver"):
            for key, value in asdict(getattr(c, section)).items():
                out[f"{section}.{key}"] = value
        return json.loads(json.dumps(out))  # as stored: tuples become lists

    def check_build_settings(self) -> None:
        """A memory is filed with one set of build settings: continuing it with others (another judge,
        other weights, another model) would mix two segmentations in one store, silently. Refused."""
        now = self.build_settings()
        stored = self.store.get_meta("build_settings")
        if stored is None:
            self.store.set_meta("build_settings", json.dumps(now, sort_keys=True))
            return
        before = json.loads(stored)
        # a setting added after the store was built counts as unchanged while it keeps its default
        defaults = _setting_defaults()
        before.update({k: defaults[k] for k in now if k not in before and k in defaults})
        diff = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        if diff:
            shown = "; ".join(f"{k}: {before.get(k)!r} then, {now.get(k)!r} now" for k in diff[:6])
            raise StoreError(f"{self.path} was built with other settings ({shown}{' ...' if len(diff) > 6 else ''}); "
                             f"continue it with the settings it was built with, or build into a new memory folder")

    # ---- writing --------------------------------------------------------------------------------
    def loom(self, conversation_id: str) -> Loom:
        if conversation_id not in self._looms:
            self._looms[conversation_id] = Loom(conversation_id, self.store, self.config,
                                                after_extract=self.after_extract)
        return self._looms[conversation_id]

    def conversation_step(self, conversation_id: str, seal: bool, progress: Callable[[int], None] | None = None):
        """The generator step that processes every pending message of one conversation."""
        self.check_build_settings()
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
            driver.drive(self.loom(conv).seal_open(), conv)

    # ---- reading --------------------------------------------------------------------------------
    def boxes(self, conversation_id: str | None = None) -> list[Box]:
        return self.store.boxes(conversation_id)

    def index(self, name: str) -> VectorIndex:
        if name not in self._indexes:
            self._indexes[name] = VectorIndex(self.path / f"{name}.hnsw", self.embedder.dim)
        return self._indexes[name]

    def sync_box_index(self) -> VectorIndex:
        """Bring the box index up to date with the store: every extracted box, indexed once.

        Runs before every search, so it reads only box ids and loads just the boxes the index lacks.
        """
        idx = self.index("boxes")
        boxes = [self.store.box(i) for i in self.store.box_ids(status="extracted") if i not in idx]
        if boxes:
            vecs = self.embedder.encode([box_index_text(b) for b in boxes])
            idx.add([b.id for b in boxes], [b.conversation_id for b in boxes], vecs)
            idx.save()
        return idx

    def _default_conversation(self, conversation_id: str | None) -> str | None:
        if conversation_id is not None:
            return conversation_id
        convs = self.store.conversations()
        return convs[0] if len(convs) == 1 else None

    def search(self, question: str, k: int | None = None, conversation_id: str | None = None) -> list[tuple[Box, float]]:
        if not question.strip():
            raise ValueError("search: the question is empty")
        k = k or self.config.retrieve.k
        idx = self.sync_box_index()
        qv = self.embedder.encode([question])[0]
        hits = idx.search(qv, k, self._default_conversation(conversation_id))
        return [(self.store.box(i), s) for i, s in hits]

    def context(self, question: str, conversation_id: str | None = None, mode: str | None = None,
                k: int | None = None, budget_tokens: int | None = None) -> Context:
        rc = self.config.retrieve
        retriever = make_retriever(mode or rc.mode, self)
        return retriever.retrieve(question, self._default_conversation(conversation_id), k or rc.k,
                                  budget_tokens or rc.budget_tokens)

    def answer(self, question: str, conversation_id: str | None = None, **kw) -> Answer:
        return self.answer_from(question, self.context(question, conversation_id, **kw), conversation_id)

    def answer_from(self, question: str, ctx: Context, conversation_id: str | None = None) -> Answer:
        """Answer from a context already retrieved (evaluations reuse one retriever across questions)."""
        res = self.backend.text([TextRequest(answer_prompt(ctx.text, question), "answer",
                                             self.config.answer.max_tokens)])[0]
        if isinstance(res, BaseException):
            raise res
        self.store.record_usage(conversation_id or "", "answer", res.usage.prompt_tokens,
                                res.usage.completion_tokens)
        return Answer(res.text.strip(), ctx, question)

    # ---- reporting ------------------------------------------------------------------------------
    def stats(self, conversation_id: str | None = None) -> dict:
        boxes = self.store.boxes(conversation_id)
        n_msgs = sum(len(b.messages) for b in boxes)
        status: dict[str, int] = {}
        for b in boxes:
            status[b.status] = status.get(b.status, 0) + 1
        return {
            "conversations": len(self.store.conversations()) if conversation_id is None else 1,
            "messages": n_msgs,
            "boxes": len(boxes),
            "messages_per_box": round(n_msgs / len(boxes), 2) if boxes else 0.0,
            "box_status": status,
            "events": len(self.store.events(conversation_id)),
            "traces": len(self.store.traces(conversation_id)),
            "llm_usage": self.store.usage_by_stage(conversation_id),
        }

    def close(self) -> None:
        for idx in self._indexes.values():
            idx.save()
        if isinstance(self._backend, Backend):
            self._backend.close()
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def dump_json(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


def _setting_defaults() -> dict:
    """Default value of every build setting (dataclass defaults), as `build_settings` stores them."""
    from .config import ExtractConfig, LoomConfig, WeaverConfig

    out = {}
    for section, cls in (("loom", LoomConfig), ("extract", ExtractConfig), ("weaver", WeaverConfig)):
        for key, value in asdict(cls()).items():
            out[f"{section}.{key}"] = value
    return json.loads(json.dumps(out))
