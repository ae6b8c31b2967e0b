"""`membox serve DIR`: the Memory verbs over HTTP (FastAPI, OpenAPI docs at /docs), messages filed in the background.

    membox serve stores/alice [--host 127.0.0.1] [--port 8765] [--config cpu-ce]

POST /memories answers 202 once its messages are committed to SQLite; they are filed in the background, and reads
never wait for filing or for an answer (service.py: the served memory, its filer and its reader's threads). GET
/status shows the progress and what is queued.

Security: bound to a loopback address by default, where a request must name the machine in its Host header (a web
page cannot reach the server through DNS rebinding); binding to any other address needs an API key in
MEMBOX_API_KEY, then checked in constant time on every request (`Authorization: Bearer KEY` or `X-API-Key: KEY`).
Bodies are bounded (MAX_BODY_BYTES; api_models.py bounds every field).

The module imports neither FastAPI nor pydantic until an app is made: the `membox` command loads it for its parser.
"""
# no `from __future__ import annotations`: FastAPI reads the route functions' annotations, which name classes
# imported inside create_app
import logging
import socket
import sys
from pathlib import Path

from .backends.base import BackendError
from .cli import CONFIG_HELP, one_line
from .config import ConfigError
from .ingest import InputError
from .memory import Memory, memory_config, open_memory
from .service import Service, require_box_memory
from .store import NotFound, StoreBusy, StoreError
from .trust import hide_paths
from .weights import ModelNotFound
from .argtypes import PORT
from .server_guard import (API_KEY_ENV, DEFAULT_HOST, MAX_BODY_BYTES, Guard, api_key_from_env,  # noqa: F401
                           check_bind, is_loopback, key_matches, public_status, send_error)

log = logging.getLogger("membox.serve")

DEFAULT_PORT = 8765

# exceptions of the memory -> HTTP status (the most specific class wins); the body is {"error": one line}
STATUS_OF: dict[type[BaseException], int] = {
    NotFound: 404, StoreBusy: 409, StoreError: 409, InputError: 422, ConfigError: 422, ModelNotFound: 503,
    BackendError: 503,
}


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

    @app.post("/answer", summary="answer a question from the memory (\"stream\": true: as Server-Sent Events)")
    def answer(body: m.AnswerIn) -> dict:  # with stream, a StreamingResponse (FastAPI sends a Response as it is)
        args = (body.question, body.conversation_id)
        options = dict(mode=body.mode, k=body.k, budget_tokens=body.budget_tokens, today=body.today or "")
        if not body.stream:
            return service.answer(*args, **options)
        from fastapi.responses import StreamingResponse

        # checks and retrieval happen here: their errors are answered with their status, as without stream
        events = service.answer_stream(*args, **options)
        return StreamingResponse(server_sent(events, service.writer.path), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})


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


def server_sent(events, folder: Path):
    """(name, data) events as Server-Sent Events, each data one JSON line; an error raised while they flow (the
    model failed) is the last event, `error`, its line as the error handlers write it (no path of this machine)."""
    import json

    def one(name: str, data: dict) -> str:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n"

    try:
        for name, data in events:
            yield one(name, data)
    except Exception as exc:  # noqa: BLE001 - the status line is sent already: the error is an event
        yield one("error", {"error": one_line(hide_paths(str(exc), folder))})


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
    return Service(*_opened(store, config), **options)


def _opened(store: str | Path, config: str | None) -> tuple[Memory, Memory]:
    """The writer and the reader Memory of a served folder (open_memory's order), after the config is known to
    build the box memory (nothing is written to the folder otherwise)."""
    cfg = memory_config(store, config)
    require_box_memory(cfg, store)
    writer = open_memory(store, cfg, writer="membox serve", models=True)
    try:
        return writer, open_memory(writer.path, writer.config)
    except BaseException:
        writer.close()
        raise


def log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")


def cmd_serve(args) -> int:
    key = api_key_from_env()
    check_bind(args.host, key)
    sock = listen(args.host, args.port)
    log_to_stderr()
    writer, reader = _opened(args.store, args.config)
    app = create_app(writer, reader, api_key=key, local=is_loopback(args.host))
    print(f"membox: serving {args.store} (config {writer.config.name}) on http://{args.host}:{args.port} "
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
