"""`membox mcp DIR [--transport stdio|http]`: a memory as MCP tools, for agents (the official `mcp` SDK).

    membox mcp stores/alice                                  # stdio: an MCP client launches it
    membox mcp stores/alice --transport http --port 8766     # streamable HTTP at http://127.0.0.1:8766/mcp

Tools: add_memory (messages stored at once, filed in the background as `membox serve` files them), search_memory,
answer, get_memories, delete_memory, memory_status. Each calls the Service of server.py (the same filer, locks
and security: HTTP on a loopback address by default, MEMBOX_API_KEY required elsewhere); every input is bounded
(api_models.py); a refusal is a tool error of one line.

The SDK is imported only when a server is made: the `membox` command loads this module for its parser.
"""
# no `from __future__ import annotations`: the SDK reads the tool functions' annotations, which name classes
# imported inside create_mcp
import sys
from contextlib import asynccontextmanager
from typing import Annotated, Any, Callable

from .backends.base import BackendError
from .cli import CONFIG_HELP, one_line
from .config import ConfigError
from .ingest import InputError
from .server import (DEFAULT_HOST, Guard, Service, api_key_from_env, check_bind, is_loopback, listen, log_to_stderr,
                     open_service, public_status, run_app)
from .store import StoreError
from .trust import hide_paths
from .weights import ModelNotFound
from .argtypes import PORT

DEFAULT_MCP_PORT = 8766  # beside `membox serve`'s 8765
MCP_PATH = "/mcp"
INSTRUCTIONS = (
    "Long-term memory of conversations, filed into topic boxes. add_memory stores messages (each with a stable "
    "conversation_id and message_id) and files them in the background: memory_status shows when they are filed. "
    "search_memory and answer read one conversation (name it when the memory holds several). Seal a conversation "
    "(add_memory with seal=true) at its end so that its last box becomes searchable.")
REFUSALS = (InputError, StoreError, ConfigError, ModelNotFound, BackendError)  # a tool error of one line


async def streamed(start: Callable[[], Any], step: Callable[[Any], tuple[str, dict]], ctx) -> dict[str, Any]:
    """An answer from Service.answer_stream's events (`start()` retrieves and gives them, `step(events)` the next),
    each read on a worker thread (they wait on the answering thread); the answer so far goes out as the message of
    a progress notification after each piece (sent only to a call that asked for progress)."""
    import anyio

    events = await anyio.to_thread.run_sync(start)
    written, n = "", 0
    while True:
        kind, data = await anyio.to_thread.run_sync(step, events)
        if kind == "answer":
            return data
        written, n = written + data["text"], n + 1
        if ctx is not None:
            await ctx.report_progress(n, None, written)


def create_mcp(service: Service):
    """An MCPServer whose tools call `service`; the first session starts its filer."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
    from pydantic import Field

    from . import api_models as m

    @asynccontextmanager
    async def lifespan(server):
        service.start()  # after the stdio transport has taken stdout: nothing the models print reaches the wire
        yield {}

    # WARNING: the SDK configures logging only where nothing did before (`membox mcp` logs at INFO, log_to_stderr)
    mcp = MCPServer("membox", instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING")
    reads = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    def call(fn: Callable[..., Any], *args, **kw) -> Any:
        try:
            return fn(*args, **kw)
        except REFUSALS as exc:  # one line, no path of this machine (the memory folder said by its name)
            raise ToolError(one_line(hide_paths(str(exc), service.writer.path))) from None

    @mcp.tool(structured_output=True, annotations=ToolAnnotations(idempotentHint=True, openWorldHint=False))
    def add_memory(messages: m.Messages, seal: bool = False, conversation_id: m.Id | None = None) -> dict[str, Any]:
        """Store messages (each {conversation_id, message_id, speaker, text, session?, session_date?, user_id?,
        agent_id?, metadata?}, or in the chat shape {role, content, name?, timestamp?} with conversation_id given
        here; a message stored already is skipped) and file them into topic boxes in the background. seal=true
        seals each conversation's open box once filed (the end of the conversation)."""
        return call(service.receive, [msg.record() for msg in messages], seal, conversation_id=conversation_id)

    @mcp.tool(structured_output=True, annotations=reads)
    def search_memory(query: m.Query, conversation_id: m.Id | None = None, k: m.K = 5) -> dict[str, Any]:
        """The k topic boxes nearest the query (messages, topic, keywords, events), best first. Each event's
        `sources`: the ids of the messages it was read from (null: extracted before events kept them); each box's
        `dropped`: what was dropped or corrected in its record, reason -> count."""
        return {"results": call(service.search, query, conversation_id, k)}

    @mcp.tool(structured_output=True, annotations=reads)
    async def answer(question: m.Query, conversation_id: m.Id | None = None, today: m.Today | None = None,
                     ctx: Context = None) -> dict[str, Any]:
        """Answer a question from the memory of a conversation, with the boxes shown and the `sources`: the lines the
        answer was read from (message id, speaker, date; chosen by code from the answer's words). `today`:
        when the question is asked (e.g. 2024-06-20): the answer then knows how long ago each memory was. A call
        that asks for progress (a progressToken) gets the answer so far in each progress notification's message
        while the model writes it."""
        return await streamed(lambda: call(service.answer_stream, question, conversation_id, today=today or ""),
                              lambda events: call(next, events), ctx)

    @mcp.tool(structured_output=True, annotations=reads)
    def get_memories(conversation_id: m.Id, kind: m.Kind = "boxes",
                     offset: Annotated[int, Field(ge=0, le=2**62)] = 0,
                     limit: Annotated[int, Field(ge=1, le=m.MAX_PAGE)] = 20) -> dict[str, Any]:
        """A page of a conversation's boxes (topic, keywords, events with their `sources`, the message ids each was
        read from, `dropped`, messages) or of its messages."""
        return call(service.get_all, conversation_id, kind, offset, limit)

    @mcp.tool(structured_output=True, annotations=ToolAnnotations(destructiveHint=True, openWorldHint=False))
    def delete_memory(conversation_id: m.Id,
                      message_ids: Annotated[list[m.Id], Field(min_length=1, max_length=m.MAX_MESSAGES)] | None
                      = None) -> dict[str, Any]:
        """Erase messages of a conversation (message_ids), or the whole conversation (none given), with all that
        was derived from them; their text is scrubbed from disk."""
        if message_ids is None:
            return call(service.delete_all, conversation_id)
        return call(service.delete, conversation_id, message_ids)

    @mcp.tool(structured_output=True, annotations=reads)
    def memory_status() -> dict[str, Any]:
        """Filing progress: messages received, filed and pending, boxes waiting for extraction, the last error."""
        return public_status(service.status(), service.writer.path)  # its last error names no path

    return mcp


def cmd_mcp(args) -> int:
    key = api_key_from_env()
    if args.transport == "http":
        check_bind(args.host, key)
        sock = listen(args.host, args.port)
    log_to_stderr()  # stderr only: on stdio, stdout is the protocol's
    service = open_service(args.store, args.config)
    mcp = create_mcp(service)
    try:
        if args.transport == "stdio":
            mcp.run("stdio")
        else:
            service.start()  # at once: what a previous run left pending is filed before a client connects
            app = mcp.streamable_http_app(streamable_http_path=MCP_PATH, host=args.host)
            print(f"membox: MCP over streamable HTTP at http://{args.host}:{args.port}{MCP_PATH}"
                  f"{'; API key required' if key else ''}", file=sys.stderr)
            run_app(Guard(app, key, is_loopback(args.host)), sock)
    finally:
        service.close()
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("mcp", help="serve a memory as MCP tools (stdio for a client that launches it, or "
                                          "streamable HTTP)")
    p.add_argument("store", help="memory folder (created if missing)")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (default): for a client that launches the server; http: streamable HTTP at /mcp")
    p.add_argument("--host", default=DEFAULT_HOST, help="http: address to bind (any but this machine's needs "
                                                        "MEMBOX_API_KEY)")
    p.add_argument("--port", type=PORT, default=DEFAULT_MCP_PORT, help="http: port")
    p.add_argument("--config", help=CONFIG_HELP)
    p.set_defaults(func=cmd_mcp)
