"""`membox serve DIR`: the Memory verbs over HTTP (FastAPI, OpenAPI docs at /docs), messages filed in the background.

    membox serve stores/alice [--host 127.0.0.1] [--port 8765] [--config cpu-ce]

POST /memories answers 202 once its messages are committed to SQLite; one background thread, the filer, files them
into boxes conversation by conversation, oldest first and in arrival order, with Memory.add's own pipeline
(Memory.file_pending). The stored messages are the queue (a message not filed yet is pending), so a server started
on a folder files what the previous one left: a restart resumes. GET /status shows the progress.

One process, three SQLite connections, one writer:
- the writer Memory holds the folder's write lock (store.WriteLock) as long as the server runs: another process that
  tries to write (`membox build`, `membox forget`) is refused, readers (`membox ask`, `membox view`) work on. Inside
  the server the filer and the write verbs (update, delete, reset) take turns on it (`Service.writing`): a verb waits
  up to WRITE_WAIT_S for the conversation being filed, then answers 409;
- the intake store writes received messages on a connection of its own, so a POST never waits for a model;
- the reader Memory serves searches, gets and answers with models of its own and never takes the write lock; its
  model calls run one at a time (a llama.cpp instance serves one call at a time).

Security: bound to a loopback address by default, where a request must name the machine in its Host header (a web
page cannot reach the server through DNS rebinding); binding to any other address needs an API key in
MEMBOX_API_KEY, then checked in constant time on every request (`Authorization: Bearer KEY` or `X-API-Key: KEY`).
Bodies are bounded (MAX_BODY_BYTES; api_models.py bounds every field).

The module imports neither FastAPI nor pydantic until an app is made: the `membox` command loads it for its parser.
"""
# no `from __future__ import annotations`: FastAPI reads the route functions' annotations, which name classes
# imported inside create_app
import dataclasses
import json
import logging
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .backends.base import BackendError
from .cli import CONFIG_HELP, one_line
from .execution.progress import Bar
from .config import ConfigError
from .ingest import InputError, as_messages
from .memory import Memory, memory_config, open_store
from .store import NotFound, StoreBusy, StoreError
from .trust import hide_paths
from .weights import ModelNotFound
from .argtypes import PORT
from .server_guard import (API_KEY_ENV, DEFAULT_HOST, MAX_BODY_BYTES, Guard, api_key_from_env,  # noqa: F401
                           check_bind, is_loopback, key_matches, public_status, send_error)

log = logging.getLogger("membox.serve")

DEFAULT_PORT = 8765
WRITE_WAIT_S = 10.0  # how long a write verb waits for the filer to finish the conversation it files (then 409)
RETRY_S = 30.0  # after a filing error (a model that failed, say), the filer tries again this much later
POLL_S = 30.0  # the filer looks for work at least this often (a POST wakes it at once)
BUSY_TIMEOUT_MS = 120_000  # how long a connection waits for another's write (a scrub's VACUUM of a large memory)
SEAL_KEY = "serve.seal"  # meta key: conversations whose open box is to be sealed once filed (survives a restart)

# exceptions of the memory -> HTTP status (the most specific class wins); the body is {"error": one line}
STATUS_OF: dict[type[BaseException], int] = {
    NotFound: 404, StoreBusy: 409, StoreError: 409, InputError: 422, ConfigError: 422, ModelNotFound: 503,
    BackendError: 503,
}


def as_json(record: Any) -> Any:
    """A record (Box, Message, Change, or a list of them) as plain JSON data."""
    if isinstance(record, list):
        return [as_json(r) for r in record]
    return dataclasses.asdict(record)


# ---- the served memory -----------------------------------------------------------------------------------------------
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
            if "membox" not in writer.config.memory.systems:  # search, get and the filing progress are its
                raise ConfigError(f"{writer.path}: a server serves the box memory; the config {writer.config.name!r} "
                                  f"builds {writer.config.memory.systems} (add 'membox' to [memory] systems)")
            writer.hold_write_lock("membox serve")
            writer.check_build_settings()
            writer.check_models()
            self.reader = reader or Memory(writer.path, writer.config)
            self.intake = open_store(writer.path)
            for store in (self.intake, self.reader.store):  # their writes (messages received, the embedding cache)
                store.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")  # wait out the writer's VACUUM
        except BaseException:
            self._close_memories()
            raise
        self.write_wait_s, self.retry_s, self.poll_s = write_wait_s, retry_s, poll_s
        self._turn = threading.Lock()  # the writer's turn: one filing slice or one write verb at a time
        self._reading = threading.Lock()  # the reader's models and vector indexes: one search or answer at a time
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
        new = self.intake.add_messages(msgs)  # committed before the 202
        self.received += new
        convs = list(dict.fromkeys(m.conversation_id for m in msgs))
        if seal:
            self._set_seal_requests(add=convs)
        self._wake.set()
        return {"received": len(msgs), "new": new, "conversations": convs, "pending": self._counts()[1]}

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
        while not self._stop.is_set():
            self._wake.clear()
            todo = self._todo()
            failed = False
            for conversation_id, seal in todo:
                if self._stop.is_set():
                    return
                failed |= not self._file(conversation_id, seal)
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
            "since_start": {"received": self.received, "filed": self.filed,
                            "seconds": round(time.time() - self.started_at, 1)},
        }

    # ---- reading (the reader Memory; no write lock) ---------------------------------------------------------------
    def search(self, query: str, conversation_id: str | None = None, k: int | None = None, **filters) -> list[dict]:
        with self._reading:
            hits = self.reader.search(query, k, conversation_id, **filters)
        return [{"score": round(score, 4), "box": as_json(box)} for box, score in hits]

    def answer(self, question: str, conversation_id: str | None = None, mode: str | None = None, **options) -> dict:
        if mode is not None and mode not in self.reader.modes():
            raise InputError(f"answer: no retrieval mode {mode!r} here; this memory serves "
                             f"{', '.join(self.reader.modes())}")
        with self._reading:
            ans = self.reader.answer(question, conversation_id, mode=mode, **options)
        ctx = ans.context
        # parts: what a total was added up from (tally.py); unmentioned: what the question names that no excerpt
        # mentions, when `[answer] check_terms` answered "not mentioned" (grounding.py)
        return {"question": question, "answer": ans.text, "boxes": ctx.box_ids, "messages": ctx.message_ids,
                "context_tokens": ctx.tokens, "parts": [{"what": w, "amount": a} for w, a in ans.parts],
                "unmentioned": list(ans.unmentioned)}

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
        with self._reading:
            self.reader.drop_indexes()
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


# ---- the REST app ------------------------------------------------------------------------------------------------
def create_app(memory: Memory, reader: Memory | None = None, *, api_key: str | None = None, local: bool = True,
               **service_options):
    """The REST app over a memory folder: `memory` writes it (the write lock is taken now, the filer starts with the
    app), `reader` (default: a Memory of the same folder and config) serves reads. `api_key` is required of every
    request when given; `local`: the server is bound to a loopback address (Host checked). Service options:
    write_wait_s, retry_s, poll_s. The Service is `app.state.service`."""
    from contextlib import asynccontextmanager

    service = Service(memory, reader, **service_options)

    @asynccontextmanager
    async def lifespan(app):
        service.start()
        try:
            yield
        finally:
            service.close()

    # fastapi-offline: FastAPI whose /docs and /redoc pages load Swagger UI and ReDoc from files it ships (served
    # under /static-offline-docs), not from a CDN: the docs work offline and the browser fetches nothing elsewhere
    from fastapi_offline import FastAPIOffline

    app = FastAPIOffline(title="membox", version="1", lifespan=lifespan,
                         description="Long-term conversational memory in topic boxes (membox_local), on local models.")
    app.state.service = service
    add_error_handlers(app)
    add_memory_routes(app, service)
    add_conversation_routes(app, service)
    app.add_middleware(Guard, api_key=api_key, local=local)
    return app


def add_error_handlers(app) -> None:
    """Every error answered as one JSON line {"error": ...} with the status STATUS_OF gives its class; no path of
    this machine in it (trust.hide_paths: the served folder by its name, any other path cut to its last name)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    service = getattr(app.state, "service", None)
    folder = [service.writer.path] if service is not None else []

    def error(status: int, line: str) -> JSONResponse:
        return JSONResponse({"error": one_line(hide_paths(line, *folder))}, status_code=status)

    for exc_class, status in STATUS_OF.items():
        app.add_exception_handler(exc_class, lambda request, exc, status=status: error(status, str(exc)))
    app.add_exception_handler(RequestValidationError, lambda request, exc: error(422, validation_line(exc.errors())))
    app.add_exception_handler(HTTPException, lambda request, exc: error(exc.status_code, str(exc.detail)))
    app.add_exception_handler(Exception, lambda request, exc: error(500, f"internal error: {type(exc).__name__}: "
                                                                          f"{exc}"))


def add_memory_routes(app, service: "Service") -> None:
    """/health, /status, /memories (add, search, one box), /history, /reset and /answer."""
    from fastapi import Path as P, Query

    from . import api_models as m

    cid = P(min_length=1, max_length=m.MAX_ID_CHARS, description="conversation id")
    mid = P(min_length=1, max_length=m.MAX_ID_CHARS, description="message id")

    @app.get("/health", summary="the server answers")
    def health() -> dict:
        return {"status": "ok"}

    @app.get("/status", summary="the build's progress: messages received, filed, pending; boxes to extract; errors")
    def status() -> dict:
        return public_status(service.status(), service.writer.path)  # its last error names no path

    @app.post("/memories", status_code=202, summary="store messages now, file them in the background")
    def add(body: m.AddBody) -> dict:
        req = body.request()
        return service.receive([msg.record() for msg in req.messages], req.seal, conversation_id=req.conversation_id,
                               user_id=req.user_id, agent_id=req.agent_id, metadata=req.metadata)

    @app.get("/memories/search", summary="the boxes nearest a query, best first")
    def search(q: str = Query(min_length=1, max_length=m.MAX_QUERY_CHARS),
               conversation_id: str | None = Query(None, min_length=1, max_length=m.MAX_ID_CHARS),
               k: int | None = Query(None, ge=1, le=m.MAX_K),
               user_id: str | None = Query(None, min_length=1, max_length=m.MAX_ID_CHARS),
               agent_id: str | None = Query(None, min_length=1, max_length=m.MAX_ID_CHARS)) -> dict:
        return {"results": service.search(q, conversation_id, k, user_id=user_id, agent_id=agent_id)}

    @app.get("/memories/{box_id}", summary="one box: its messages, topic, keywords, events")
    def get_box(box_id: int = P(ge=1, le=2**62)) -> dict:
        return service.get(box_id)

    @app.get("/history/boxes/{box_id}", summary="a box's changes, oldest first")
    def box_history(box_id: int = P(ge=1, le=2**62)) -> dict:
        return service.history(box_id)

    @app.get("/history/conversations/{conversation_id}/messages/{message_id}",
             summary="a message's changes (add, update, delete), oldest first; never its text")
    def message_history(conversation_id: str = cid, message_id: str = mid) -> dict:
        return service.history((conversation_id, message_id))

    @app.post("/reset", summary="erase every conversation (send {\"confirm\": true})")
    def reset(body: m.ResetIn) -> dict:
        if not body.confirm:
            raise InputError('reset erases every conversation of this memory; send {"confirm": true} to do it')
        return service.reset()

    @app.post("/answer", summary="answer a question from the memory")
    def answer(body: m.AnswerIn) -> dict:
        return service.answer(body.question, body.conversation_id, mode=body.mode, k=body.k,
                              budget_tokens=body.budget_tokens, today=body.today or "")


def add_conversation_routes(app, service: "Service") -> None:
    """/conversations/...: a conversation's pages, one message (read, replace, erase), the whole conversation
    erased."""
    from fastapi import Path as P, Query

    from . import api_models as m

    cid = P(min_length=1, max_length=m.MAX_ID_CHARS, description="conversation id")
    mid = P(min_length=1, max_length=m.MAX_ID_CHARS, description="message id")

    @app.get("/conversations/{conversation_id}/memories", summary="a page of a conversation's boxes or messages")
    def get_all(conversation_id: str = cid, kind: m.Kind = "boxes", offset: int = Query(0, ge=0, le=2**62),
                limit: int = Query(100, ge=1, le=m.MAX_PAGE)) -> dict:
        return service.get_all(conversation_id, kind, offset, limit)

    @app.get("/conversations/{conversation_id}/messages/{message_id}", summary="one message, with its tags")
    def get_message(conversation_id: str = cid, message_id: str = mid) -> dict:
        return service.get((conversation_id, message_id))

    @app.put("/conversations/{conversation_id}/messages/{message_id}",
             summary="replace a message's text (its box is extracted again; the old text is scrubbed from disk)")
    def update(body: m.TextIn, conversation_id: str = cid, message_id: str = mid) -> dict:
        return service.update(conversation_id, message_id, body.text)

    @app.delete("/conversations/{conversation_id}/messages/{message_id}",
                summary="erase a message and all derived from it")
    def delete(conversation_id: str = cid, message_id: str = mid) -> dict:
        return service.delete(conversation_id, [message_id])

    @app.delete("/conversations/{conversation_id}", summary="erase a conversation and all derived from it")
    def delete_all(conversation_id: str = cid) -> dict:
        return service.delete_all(conversation_id)


def validation_line(errors: list[dict]) -> str:
    """pydantic's errors as one line: "messages.0.text: String should have at most 10000 characters"."""
    from .api_models import UNION_TAGS

    shown = []
    for e in errors[:3]:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body" and x not in UNION_TAGS)
        shown.append(f"{where or 'body'}: {e.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(shown) + more


# ---- running ---------------------------------------------------------------------------------------------------------
def listen(host: str, port: int) -> socket.socket:
    """A listening socket, bound before anything is opened: a port in use is one line (InputError)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    return sock


def run_app(app, sock: socket.socket, **options) -> None:
    """Serve an ASGI app with uvicorn on a bound socket until interrupted (Ctrl-C: the filer's slice ends first)."""
    import uvicorn

    uvicorn.Server(uvicorn.Config(app, log_level="info", **options)).run(sockets=[sock])


def open_service(store: str | Path, config: str | None = None, **options) -> Service:
    """The Service of a memory folder (created if missing) for the config named (None: the one it was built with,
    memory.memory_config)."""
    cfg = memory_config(store, config)
    return Service(Memory(store, cfg), Memory(store, cfg), **options)


def log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")


def cmd_serve(args) -> int:
    key = api_key_from_env()
    check_bind(args.host, key)
    sock = listen(args.host, args.port)
    log_to_stderr()
    cfg = memory_config(args.store, args.config)
    app = create_app(Memory(args.store, cfg), Memory(args.store, cfg), api_key=key, local=is_loopback(args.host))
    print(f"membox: serving {args.store} (config {cfg.name}) on http://{args.host}:{args.port} "
          f"(API docs at /docs){'; API key required' if key else ''}", file=sys.stderr)
    run_app(app, sock)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve a memory over HTTP (REST, docs at /docs); messages are filed "
                                            "in the background")
    p.add_argument("store", help="memory folder (created if missing)")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind (default {DEFAULT_HOST}: this machine only; any other needs {API_KEY_ENV})")
    p.add_argument("--port", type=PORT, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    p.add_argument("--config", help=CONFIG_HELP)
    p.set_defaults(func=cmd_serve)
