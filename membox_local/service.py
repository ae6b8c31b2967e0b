"""The memory a server serves (`membox serve`, `membox mcp`): messages received and filed in the background, reads
on the reader's own threads, writes in turn with the filer.

POST /memories (add_memory) answers once its messages are committed to SQLite; one background thread, the filer,
files them into boxes conversation by conversation, oldest first and in arrival order, with Memory.add's own
pipeline (Memory.file_pending). The stored messages are the queue (a message not filed yet is pending), so a server
started on a folder files what the previous one left: a restart resumes.

Three Memories' stores (each thread on a connection of its own: store.Store), one writer:
- the writer Memory holds the folder's write lock (store.WriteLock) as long as the server runs: another process that
  tries to write (`membox build`, `membox forget`) is refused, readers (`membox ask`, `membox view`) work on. Inside
  the server the filer and the write verbs (update, delete, reset) take turns on it (`Service.writing`): a verb waits
  up to WRITE_WAIT_S for the conversation being filed, then answers 409;
- the intake store writes received messages on a thread of its own, so a POST never waits for a model; a write
  waits out another's (store_connections.BUSY_TIMEOUT_S), it does not fail;
- the reader Memory serves searches, gets and answers with models of its own and never takes the write lock; it
  reads committed data while the filer writes. Its models run on threads of their own: searches (and an answer's
  retrieval) on one, a short wait; answers on another (a llama.cpp instance serves one call at a time), which no
  search waits for. GET /status says how many requests are queued for each.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import queue
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Iterator

from .cli import one_line
from .config import ConfigError
from .execution.progress import Bar
from .ingest import InputError, as_messages
from .memory import Memory, open_store
from .memory_reading import check_today, source_list
from .native import give_back_freed_heap
from .store import NotFound, StoreBusy

log = logging.getLogger("membox.serve")

WRITE_WAIT_S = 10.0  # how long a write verb waits for the filer to finish the conversation it files (then 409)
RETRY_S = 30.0  # after a filing error (a model that failed, say), the filer tries again this much later
POLL_S = 30.0  # the filer looks for work at least this often (a POST wakes it at once)
SEAL_KEY = "serve.seal"  # meta key: conversations whose open box is to be sealed once filed (survives a restart)


def as_json(record: Any) -> Any:
    """A record (Box, Message, Change, or a list of them) as plain JSON data: every field, so a box carries
    `dropped` and each of its events `sources` (records.py)."""
    if isinstance(record, list):
        return [as_json(r) for r in record]
    return dataclasses.asdict(record)


# ---- the served memory -----------------------------------------------------------------------------------------------
def require_box_memory(config, path) -> None:
    """A server serves the box memory (search, get and the filing progress are its): a config without it is refused,
    before anything is written to the folder."""
    if "membox" not in config.memory.systems:
        raise ConfigError(f"{path}: a server serves the box memory; the config {config.name!r} builds "
                          f"{config.memory.systems} (add 'membox' to [memory] systems)")


class Service:
    """A memory being served: the writer Memory (the folder's write lock held until close), the reader Memory, the
    intake store, and the filer thread. It owns both Memories and closes them. The REST app (create_app) and the MCP
    server (mcp_server.py) call its verbs; each verb is Memory's, with records as JSON data.

    Opening refuses, with one line, a folder another process writes (StoreBusy), a memory built with other build
    settings, and a missing model (Memory.check_models)."""

    def __init__(self, writer: Memory, reader: Memory | None = None, *, write_wait_s: float = WRITE_WAIT_S,
                 retry_s: float = RETRY_S, poll_s: float = POLL_S):
        self.writer, self.reader = writer, reader
        try:
            require_box_memory(writer.config, writer.path)
            writer.hold_write_lock("membox serve")
            writer.check_build_settings()
            writer.check_models()
            self.reader = reader or Memory(writer.path, writer.config)
            # each thread of the server reads and writes on a connection of its own (store.Store), and a write waits
            # out another's (store_connections.BUSY_TIMEOUT_S, longer than the writer's VACUUM)
            self.intake = open_store(writer.path)
        except BaseException:
            self._close_memories()
            raise
        self.write_wait_s, self.retry_s, self.poll_s = write_wait_s, retry_s, poll_s
        self._turn = threading.Lock()  # the writer's turn: one filing slice or one write verb at a time
        # three threads of their own, each request's work handed to one and waited for: "search" (the reader's
        # embedder and vector indexes: searches, an answer's retrieval; a short wait), "answer" (the answering model;
        # a llama.cpp instance serves one call at a time), so no search waits for an answer, and "intake" (received
        # messages stored: one SQLite connection and its pages; adds take turns on the write lock anyway). The native
        # state models and connections keep per calling thread (torch's and llama.cpp's pools, allocator caches,
        # page caches) then exists once each, not once per HTTP worker thread
        self._workers = {kind: ThreadPoolExecutor(1, thread_name_prefix=f"membox-{kind}")
                         for kind in ("intake", "search", "answer")}
        self.waiting = {kind: 0 for kind in self._workers}  # requests queued for each now, not started (GET /status)
        self._waiting_lock = threading.Lock()
        self._seal_lock = threading.Lock()  # read-modify-write of the seal requests (SEAL_KEY)
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.started_at = time.time()
        self.received = self.filed = 0  # since start: messages newly stored, messages filed
        # the slice in progress: conversation, done and total (steps: a message once per memory system), since
        self.filing: dict[str, Any] | None = None
        self._stalled: dict[str, int] = {}  # conversation -> messages a slice that raised nothing left pending
        self.last_error: dict[str, Any] | None = None

    # ---- life -------------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the filer (again: nothing); it files at once whatever is pending (a restart resumes)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="membox-filer", daemon=True)
            self._thread.start()
            # the first search does not wait for the embedder to load (the model itself: nothing written to the
            # cache), nor the first answer for its model: loaded, its buffers allocated (Backend.prepare) and the
            # embedder's weights read (Embedder.make_resident) before any question, so the server's resident memory
            # after start-up grows only with the data it holds
            self._workers["search"].submit(self._warm, "the reader's embedder", self._warm_reader)
            self._workers["answer"].submit(self._warm, "the reader's answering model",
                                           lambda: self.reader.answer_backend.prepare(["answer"]))

    def _warm_reader(self) -> None:
        self.reader.embedder.inner.encode(["warm up"])
        self.reader.embedder.inner.make_resident()

    @staticmethod
    def _warm(what: str, load) -> None:
        """Load a model ahead of its first use; a failure is logged here and reported by that use."""
        try:
            load()
        except Exception as exc:  # noqa: BLE001 - the first call that needs it reports it
            log.warning("%s did not load: %s", what, one_line(str(exc)))

    def close(self, wait_s: float = 30.0) -> None:
        """Stop the filer after the slice it is filing, then close the memories (releasing the write lock). A slice
        that runs longer than `wait_s` is left to die with the process: what it had not filed is filed next start."""
        if self._closed:
            return
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(wait_s)
            if self._thread.is_alive():
                log.warning("the filer is still filing %s; what it has not filed is filed on the next start",
                            (self.filing or {}).get("conversation"))
                return
        self._closed = True
        for worker in self._workers.values():
            worker.shutdown(wait=True)
        self.intake.close()
        self._close_memories()

    def _close_memories(self) -> None:
        for mem in (self.reader, self.writer):
            if mem is not None:
                mem.close()

    # ---- receiving --------------------------------------------------------------------------------------------------
    def receive(self, messages: list[dict], seal: bool = False, *, conversation_id: str | None = None,
                user_id: str | None = None, agent_id: str | None = None, metadata: dict | None = None) -> dict:
        """Store messages (checked in full first, as Memory.add checks them, and idempotent as it is: a message
        stored already is skipped, or refused when its content differs) and wake the filer; returns before filing.
        With `seal`, each of their conversations' open box is sealed once its messages are filed.
        `conversation_id`: the conversation of messages that name none (the chat shape, role and content)."""
        msgs = as_messages(messages, "add", conversation_id, user_id, agent_id, metadata)
        if not msgs:
            raise InputError("add: no messages given")
        return self._on("intake", self._store_received, msgs, seal)

    def _store_received(self, msgs: list, seal: bool) -> dict:
        """On the intake thread: the messages committed (before the 202), the seal asked for, the filer woken."""
        new = self.intake.add_messages(msgs)
        self.received += new
        convs = list(dict.fromkeys(m.conversation_id for m in msgs))
        if seal:
            self._set_seal_requests(add=convs)
        self._wake.set()
        # already_stored: messages of this request stored before (a retry of the same ids stores nothing twice)
        return {"received": len(msgs), "new": new, "already_stored": len(msgs) - new, "conversations": convs,
                "pending": self._counts()[1]}

    def _seal_requests(self) -> list[str]:
        return json.loads(self.intake.get_meta(SEAL_KEY) or "[]")

    def _set_seal_requests(self, add: list[str] = (), done: str | None = None) -> None:
        """Add conversations to the seal requests, or drop one whose slice sealed it (unless it received messages
        meanwhile: they are filed, and it is sealed, next)."""
        with self._seal_lock:
            now = self._seal_requests()
            if done is not None and self._pending_in(done) == 0:
                now = [c for c in now if c != done]
            now += [c for c in add if c not in now]
            self.intake.set_meta(SEAL_KEY, json.dumps(now))

    def _pending_in(self, conversation_id: str) -> int:
        stored, filed = self.intake.filing_counts().get(conversation_id, (0, 0))
        return stored - filed

    def _filed_in(self, conversation_id: str) -> int:
        return self.intake.filing_counts().get(conversation_id, (0, 0))[1]

    # ---- the filer --------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        # the build's model with an instance for each stage its systems generate in (Memory.prepare_build), on this
        # thread before it files anything: the first sealed box does not allocate them mid-run
        self._warm("the build's model", self.writer.prepare_build)
        # the build's embedder and the judge's cross-encoder (where it has one) loaded and their weights read in
        # (Memory.make_resident): no page of them becomes resident mid-run as new words come
        self._warm("the build's embedder and judge", self.writer.make_resident)
        while not self._stop.is_set():
            self._wake.clear()
            todo = self._todo()
            failed = False
            for conversation_id, seal in todo:
                if self._stop.is_set():
                    return
                failed |= not self._file(conversation_id, seal)
                give_back_freed_heap()
            if failed:
                self._stop.wait(self.retry_s)
            elif not todo:
                self._wake.wait(self.poll_s)

    def _todo(self) -> list[tuple[str, bool]]:
        """(conversation, seal it) for each conversation with work: messages not filed (oldest first), a seal
        requested, a box an update or a delete left to extract again."""
        counts = self.intake.filing_counts()
        seals = self._seal_requests()
        resealed = {self.intake.box(i).conversation_id for i in self.intake.box_ids(status="sealed")}
        convs = [c for c, (stored, filed) in counts.items()
                 if (stored > filed and self._stalled.get(c) != stored - filed) or c in resealed]
        return [(c, c in seals) for c in dict.fromkeys(convs + seals)]

    def _file(self, conversation_id: str, seal: bool) -> bool:
        """One slice: file a conversation's pending messages (and seal it when asked); False when it failed, the
        error kept for GET /status."""
        total = self._pending_in(conversation_id)
        with self._turn:
            filed_before = self._filed_in(conversation_id)
            steps = sum(self.writer.to_file([conversation_id]).values())  # once per memory system
            self.filing = {"conversation": conversation_id, "done": 0, "total": steps, "since": time.time()}
            log.info("filing %d message(s) of conversation %s%s", total, conversation_id,
                     ", then sealing its open box" if seal else "")
            try:
                with _progress_bar(steps, conversation_id) as bar:
                    self.writer.file_pending(conversation_id, seal, progress=lambda n: self._step(n, bar),
                                             describe=bar.describe)
            except Exception as exc:  # noqa: BLE001 - any failure is reported in /status and retried
                line = f"{type(exc).__name__}: {one_line(str(exc))}"
                self.last_error = {"conversation": conversation_id, "error": line, "at": time.time()}
                log.error("filing conversation %s failed: %s (retried in %.0f s)", conversation_id, line,
                          self.retry_s)
                return False
            finally:
                done, self.filing = self.filing, None
                filed = self._filed_in(conversation_id) - filed_before  # messages (the steps count each system)
                self.filed += filed
        if seal:
            self._set_seal_requests(done=conversation_id)
        left = self._pending_in(conversation_id)
        if total and not done["done"]:  # nothing filed, nothing raised: not retried until the conversation changes
            self._stalled[conversation_id] = left
            self.last_error = {"conversation": conversation_id, "at": time.time(),
                               "error": f"{left} message(s) stayed pending after a slice that raised nothing"}
            log.error("filing conversation %s: %s", conversation_id, self.last_error["error"])
        log.info("filed %d message(s) of conversation %s in %.1f s; %d pending in all", filed,
                 conversation_id, time.time() - done["since"], self._counts()[1])
        return True

    def _step(self, n: int, bar) -> None:
        self.filing["done"] += n
        bar.update(n)

    # ---- status -----------------------------------------------------------------------------------------------------
    def _counts(self) -> tuple[int, int]:
        """(messages stored, messages not filed yet), over every conversation."""
        counts = self.intake.filing_counts().values()
        stored = sum(s for s, _ in counts)
        return stored, stored - sum(f for _, f in counts)

    def status(self) -> dict:
        """The build's progress: messages received (stored) and filed, boxes waiting for their extraction, what the
        filer does now, the last error."""
        counts = self.intake.filing_counts()
        stored, pending = self._counts()
        filing = self.filing  # the filer replaces it; read once
        return {
            "messages_received": stored, "messages_filed": stored - pending, "messages_pending": pending,
            "conversations": len(counts),
            "conversations_pending": [c for c, (s, f) in counts.items() if s > f][:20],
            "boxes_pending_extraction": len(self.intake.box_ids(status="sealed")),
            "boxes_failed": len(self.intake.box_ids(status="failed")),  # retried when their conversation is filed
            "seal_requested": self._seal_requests()[:20],
            "filing": dict(filing) if filing else None,
            "filer_alive": self._thread is not None and self._thread.is_alive(),
            "last_error": self.last_error,
            # requests queued now, not started: to store received messages, to search, for the answering model
            "waiting": dict(self.waiting),
            # what the reader's and the writer's vector indexes hold in memory (they grow with the data, nothing else)
            "indexes_mb": round((self.reader.held_bytes() + self.writer.held_bytes()) / 2**20, 1),
            "since_start": {"received": self.received, "filed": self.filed,
                            "seconds": round(time.time() - self.started_at, 1)},
        }

    # ---- reading (the reader Memory; no write lock) ---------------------------------------------------------------
    def _on(self, kind: str, fn, *args, **kw):
        """Run `fn` on the `kind` thread ("intake", "search" or "answer") and wait for its result (or its error)."""
        return self._submit(kind, fn, *args, **kw).result()

    def _submit(self, kind: str, fn, *args, **kw) -> Future:
        """Queue `fn` on the `kind` thread; its future."""
        def job():
            with self._waiting_lock:
                self.waiting[kind] -= 1
            try:
                return fn(*args, **kw)
            finally:  # what the call freed goes back to the system, not kept in this thread's heap (native.py)
                give_back_freed_heap()

        with self._waiting_lock:
            self.waiting[kind] += 1
        try:
            future = self._workers[kind].submit(job)
        except RuntimeError:  # shut down: the server is stopping
            with self._waiting_lock:
                self.waiting[kind] -= 1
            raise StoreBusy("the server is stopping; nothing was done") from None
        return future

    def search(self, query: str, conversation_id: str | None = None, k: int | None = None, **filters) -> list[dict]:
        hits = self._on("search", self.reader.search, query, k, conversation_id, **filters)
        return [{"score": round(score, 4), "box": as_json(box)} for box, score in hits]

    def answer(self, question: str, conversation_id: str | None = None, mode: str | None = None,
               today: str = "", **options) -> dict:
        """Retrieve on the search thread, then answer on the answering model's thread (which no search waits for)."""
        ctx = self._retrieved(question, conversation_id, mode, today, options)
        ans = self._on("answer", self.reader.answer_from, self.reader.asked(question, today), ctx, conversation_id,
                       today=today)
        return self._answered(question, ans)

    def answer_stream(self, question: str, conversation_id: str | None = None, mode: str | None = None,
                      today: str = "", **options) -> Iterator[tuple[str, dict]]:
        """As `answer`, the answer's text handed over as the model writes it: the question checked and its context
        retrieved now (an error is raised here, before anything is sent), then an iterator of ("text", {"text":
        piece}) events while the answering thread generates, and last ("answer", what `answer` returns). The pieces
        join to the answer's text; an answer decided without the model's text ("not mentioned", a total) comes as
        its last event only. An error of the model is raised by the iterator. The answering thread runs the call to
        its end even when the client leaves (llama.cpp cannot be interrupted between our calls)."""
        ctx = self._retrieved(question, conversation_id, mode, today, options)
        pieces: queue.Queue = queue.Queue()
        future = self._submit("answer", self.reader.answer_from, self.reader.asked(question, today), ctx,
                              conversation_id, today=today, on_text=pieces.put)
        future.add_done_callback(lambda _: pieces.put(None))  # after every piece: they are put while it runs

        def events() -> Iterator[tuple[str, dict]]:
            while (piece := pieces.get()) is not None:
                yield "text", {"text": piece}
            yield "answer", self._answered(question, future.result())

        return events()

    def _retrieved(self, question: str, conversation_id: str | None, mode: str | None, today: str,
                   options: dict) -> Any:
        """The question's context, retrieved on the search thread, after the checks an answer needs."""
        if mode is not None and mode not in self.reader.modes():
            raise InputError(f"answer: no retrieval mode {mode!r} here; this memory serves "
                             f"{', '.join(self.reader.modes())}")
        check_today(today)
        self._filed_yet(conversation_id)
        return self._on("search", self.reader.context, question, conversation_id, mode=mode, **options)

    @staticmethod
    def _answered(question: str, ans) -> dict:
        ctx = ans.context
        # parts: what a total was added up from (tally.py); unmentioned: what the question names that no excerpt
        # mentions, when `[answer] check_terms` answered "not mentioned" (grounding.py)
        return {"question": question, "answer": ans.text, "boxes": ctx.box_ids, "messages": ctx.message_ids,
                "context_tokens": ctx.tokens, "parts": [{"what": w, "amount": a} for w, a in ans.parts],
                "unmentioned": list(ans.unmentioned), "sources": source_list(ans)}

    def _filed_yet(self, conversation_id: str | None) -> None:
        """A conversation whose messages are stored but none filed yet has nothing to answer from (box-hits refuses
        it): StoreBusy (409), saying so, rather than an error of the retrieval mode."""
        if conversation_id is None:
            return
        stored, filed = self.intake.filing_counts().get(conversation_id, (0, 0))
        if stored and not filed:
            raise StoreBusy(f"conversation {conversation_id!r}: none of its {stored} message(s) is filed yet (they "
                            f"are filed in arrival order: GET /status); ask again once they are")

    def get(self, id: int | tuple[str, str]) -> dict:
        return as_json(self.reader.get(id))

    def get_all(self, conversation_id: str, kind: str = "boxes", offset: int = 0, limit: int = 100) -> dict:
        self._known(conversation_id)
        items = self.reader.get_all(conversation_id, kind, offset, limit)
        return {"conversation_id": conversation_id, "kind": kind, "offset": offset, "limit": limit,
                "items": as_json(items)}

    def history(self, id: int | tuple[str, str]) -> dict:
        return {"changes": as_json(self.reader.history(id))}

    def _known(self, conversation_id: str) -> None:
        if conversation_id not in self.reader.store.filing_counts():
            raise NotFound(f"{self.writer.path}: no conversation {conversation_id!r} in this memory")

    # ---- writing (the writer Memory, in turn with the filer) --------------------------------------------------------
    @contextmanager
    def writing(self, what: str) -> Iterator[Memory]:
        """The writer, for one write verb: waits up to write_wait_s for the filer's slice, else StoreBusy (409).
        After a verb that changed the memory, the reader's vector indexes are dropped (its next search rebuilds
        them from the store) and the filer is woken: a box the verb left to extract again is extracted."""
        if not self._turn.acquire(timeout=self.write_wait_s):
            filing = self.filing
            doing = (f"filing conversation {filing['conversation']!r} ({filing['done']} of {filing['total']} "
                     f"done)") if filing else "writing"
            raise StoreBusy(f"{self.writer.path} is busy {doing}; {what} was not done, try again later (GET /status "
                            f"shows the progress)")
        try:
            yield self.writer
        finally:
            self._turn.release()
        self._on("search", self.reader.drop_indexes)
        self._wake.set()

    def update(self, conversation_id: str, message_id: str, text: str) -> dict:
        with self.writing("update") as mem:
            return mem.update(conversation_id, message_id, text)

    def delete(self, conversation_id: str, message_ids: list[str]) -> dict:
        with self.writing("delete") as mem:
            return mem.delete(conversation_id, message_ids)

    def delete_all(self, conversation_id: str) -> dict:
        with self.writing("delete_all") as mem:
            return mem.delete_all(conversation_id)

    def reset(self) -> dict:
        with self.writing("reset") as mem:
            return mem.reset()


def _progress_bar(total: int, conversation_id: str) -> Bar:
    """A bar (messages per second, ETA, what the model is doing) when stderr is a terminal; the log lines say the
    rest."""
    return Bar(total, f"filing {conversation_id}", unit="msg", quiet=not sys.stderr.isatty(), leave=False)
