"""Who may reach a served memory (`membox serve`, `membox mcp --transport http`): the bind check, the API key
compared in constant time, the Host header on a loopback bind (no DNS rebinding) and bounded bodies, as ASGI
middleware (`Guard`) in front of every app served here. Imports no web framework."""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os

from .cli import one_line
from .ingest import InputError
from .trust import hide_paths

DEFAULT_HOST = "127.0.0.1"
API_KEY_ENV = "MEMBOX_API_KEY"
MIN_KEY_CHARS = 16  # a shorter API key is refused: it would be guessable
MAX_BODY_BYTES = 16 * 1024 * 1024  # a request body is read no further (413)
LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether an address (or name) is this machine only: localhost, 127.0.0.0/8, ::1."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def api_key_from_env() -> str | None:
    return os.environ.get(API_KEY_ENV) or None


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to serve a memory beyond this machine without an API key, or with a short one (InputError, one
    line)."""
    if api_key is not None and len(api_key) < MIN_KEY_CHARS:
        raise InputError(f"{API_KEY_ENV} is {len(api_key)} characters long; use a secret of at least "
                         f"{MIN_KEY_CHARS} (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    if not is_loopback(host) and api_key is None:
        raise InputError(f"binding to {host} would serve this memory beyond this machine: set {API_KEY_ENV} to a "
                         f"secret of at least {MIN_KEY_CHARS} characters (clients send it as `Authorization: "
                         f"Bearer KEY` or `X-API-Key: KEY`), or bind to {DEFAULT_HOST}")


def key_matches(given: str | None, api_key: str) -> bool:
    """Constant-time comparison (of digests, so that not even the key's length shows in the time taken)."""
    if given is None:
        return False
    digest = lambda s: hashlib.sha256(s.encode("utf-8", "surrogateescape")).digest()  # noqa: E731
    return hmac.compare_digest(digest(given), digest(api_key))


def presented_key(headers: dict[str, str]) -> str | None:
    """The key a request presents: `Authorization: Bearer KEY`, else `X-API-Key: KEY`."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("x-api-key")


def host_name(host_header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8765" -> "::1")."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0]
    return host_header.rpartition(":")[0] if host_header.count(":") == 1 else host_header


class _TooLarge(Exception):
    pass


class Guard:
    """ASGI middleware in front of every app served here (REST and MCP over HTTP), for each HTTP request: on a
    loopback bind (`local`) the Host header must name this machine (no DNS rebinding); with an API key, the request
    must present it (401); a body is read up to `max_body` bytes (413). WebSockets are refused (none is served)."""

    def __init__(self, app, api_key: str | None = None, local: bool = True, max_body: int = MAX_BODY_BYTES):
        self.app, self.api_key, self.local, self.max_body = app, api_key, local, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        if scope["type"] != "http":
            return await self.app(scope, receive, send)  # lifespan
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self.refusal(headers)
        if refusal is not None:
            return await send_error(send, *refusal)
        started = False

        async def counted_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, self._bounded(receive), counted_send)
        except _TooLarge:
            if not started:
                await send_error(send, 413, f"the request body is larger than {self.max_body} bytes; send less "
                                            f"per request")

    def refusal(self, headers: dict[str, str]) -> tuple[int, str, dict[str, str]] | None:
        if self.local and not is_loopback(host_name(headers.get("host", ""))):
            return 421, "this server answers requests to this machine only (Host: 127.0.0.1 or localhost)", {}
        if self.api_key is not None and not key_matches(presented_key(headers), self.api_key):
            return 401, (f"missing or wrong API key: send `Authorization: Bearer KEY` or `X-API-Key: KEY` "
                         f"({API_KEY_ENV})"), {"www-authenticate": "Bearer"}
        if int(headers.get("content-length") or 0) > self.max_body:
            return 413, f"the request body is larger than {self.max_body} bytes; send less per request", {}
        return None

    def _bounded(self, receive):
        seen = 0

        async def bounded():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                raise _TooLarge()
            return message
        return bounded


def public_status(status: dict, folder) -> dict:
    """A served memory's status (Service.status) as a client reads it (GET /status, memory_status): its last error's
    line with no path of this machine (hide_paths; the memory folder by its name)."""
    error = status.get("last_error")
    if not error or not isinstance(error.get("error"), str):
        return status
    return {**status, "last_error": {**error, "error": hide_paths(error["error"], folder)}}


async def send_error(send, status: int, line: str, headers: dict[str, str] | None = None) -> None:
    """A JSON error response, {"error": one line with no path of this machine}, from plain ASGI."""
    body = json.dumps({"error": one_line(hide_paths(line))}).encode("utf-8")
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    head += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
