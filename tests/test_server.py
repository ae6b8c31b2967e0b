"""`membox serve` and `membox mcp` end to end: real HTTP to a uvicorn server in a thread of this process, with the
deterministic doubles injected (create_app, Service), and a real MCP client session of the SDK over streamable
HTTP; over stdio with the real CPU stack (integration)."""
from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

import anyio
import httpx2 as httpx
import uvicorn

from membox_local.cli import main
from membox_local.ingest import InputError
from membox_local.memory import Memory
from membox_local.server import (API_KEY_ENV, MAX_BODY_BYTES, Guard, Service, check_bind, create_app,
                                 is_loopback, key_matches, listen)
from membox_local.store import StoreBusy
from membox_local.testing import FakeBackend, FakeEmbedder

from conftest import DEMO, REPO

CONV = "maya-tom"
QUESTION = "Which race did Maya sign up for?"
KEY = "k3y-" + "x" * 28
DEMO_MESSAGES = [json.loads(line) for line in DEMO.read_text().splitlines() if line.strip()]


class DownEmbedder(FakeEmbedder):
    """An embedder that fails: nothing can be filed (a model that broke)."""

    def encode(self, texts):
        raise RuntimeError("the embedder is down")


class GatedEmbedder(FakeEmbedder):
    """Embeds once `gate` is set: filing waits meanwhile (a slow model)."""

    def __init__(self):
        super().__init__()
        self.gate, self.waiting = threading.Event(), threading.Event()

    def encode(self, texts):
        self.waiting.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return super().encode(texts)


def doubles(path, cfg, embedder=None) -> tuple[Memory, Memory]:
    """A writer and a reader Memory of one folder, on the doubles (each its own: they run in different threads)."""
    return (Memory(path, cfg, backend=FakeBackend(), embedder=embedder or FakeEmbedder()),
            Memory(path, cfg, backend=FakeBackend(), embedder=FakeEmbedder()))


@contextmanager
def serving(app):
    """Serve an ASGI app on a free loopback port in a thread; yields its base URL, and shuts it down (the app's
    lifespan ends: the Service closes)."""
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert thread.is_alive() and time.time() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive()


@contextmanager
def rest(path, cfg, embedder=None, **options):
    app = create_app(*doubles(path, cfg, embedder), poll_s=0.5, **options)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def settled(status: dict) -> bool:
    return (status["messages_pending"] == 0 and not status["seal_requested"] and status["filing"] is None
            and status["boxes_pending_extraction"] == 0)


def wait_until(read_status, done=settled, timeout: float = 60) -> dict:
    deadline = time.time() + timeout
    while True:
        status = read_status()
        if done(status):
            return status
        assert time.time() < deadline, f"not done in {timeout} s: {status}"
        time.sleep(0.05)


def error_line(response) -> str:
    body = response.json()
    assert list(body) == ["error"] and "\n" not in body["error"], body
    return body["error"]


# ---- REST ------------------------------------------------------------------------------------------------------------
def test_post_search_answer_get_update_delete(tmp_path, cfg):
    with rest(tmp_path / "mem", cfg) as api:
        assert api.get("/health").json() == {"status": "ok"}
        r = api.post("/memories", json=DEMO_MESSAGES[:20])  # a bare list
        assert r.status_code == 202 and r.json()["new"] == 20 and r.json()["conversations"] == [CONV]
        r = api.post("/memories", json={"messages": DEMO_MESSAGES, "seal": True})  # the first 20 are skipped
        assert r.status_code == 202 and r.json()["new"] == len(DEMO_MESSAGES) - 20
        status = wait_until(lambda: api.get("/status").json())
        assert status["messages_received"] == status["messages_filed"] == len(DEMO_MESSAGES)
        assert status["last_error"] is None and status["since_start"]["filed"] == len(DEMO_MESSAGES)

        boxes = api.get(f"/conversations/{CONV}/memories", params={"limit": 500}).json()["items"]
        assert [m["message_id"] for b in boxes for m in b["messages"]] == [m["message_id"] for m in DEMO_MESSAGES]
        assert all(b["status"] == "extracted" for b in boxes)  # sealed on request: the last box too
        page = api.get(f"/conversations/{CONV}/memories", params={"kind": "messages", "offset": 2, "limit": 3})
        assert [m["message_id"] for m in page.json()["items"]] == [m["message_id"] for m in DEMO_MESSAGES[2:5]]

        hits = api.get("/memories/search", params={"q": QUESTION, "conversation_id": CONV, "k": 3}).json()["results"]
        assert 1 <= len(hits) <= 3 and hits[0]["score"] >= hits[-1]["score"]
        assert any("half marathon" in m["text"] for m in hits[0]["box"]["messages"])
        box = api.get(f"/memories/{hits[0]['box']['id']}").json()
        assert box["id"] == hits[0]["box"]["id"] and box["topic"] and box["messages"]
        ans = api.post("/answer", json={"question": QUESTION, "conversation_id": CONV}).json()
        assert ans["answer"] and ans["boxes"] and ans["context_tokens"] > 0
        assert ans["parts"] == [] and ans["unmentioned"] == []  # no total asked for; the guard is off
        dated = api.post("/answer", json={"question": QUESTION, "conversation_id": CONV, "today": "2030-01-01"})
        assert dated.status_code == 200 and dated.json()["answer"]
        r = api.post("/answer", json={"question": QUESTION, "conversation_id": CONV, "today": "someday"})
        assert r.status_code == 422 and error_line(r).startswith("today: not a date: 'someday'")

        first = DEMO_MESSAGES[0]["message_id"]
        r = api.put(f"/conversations/{CONV}/messages/{first}", json={"text": "I signed up for the Porto 10k."})
        assert r.status_code == 200 and r.json()["messages"] == 1
        assert api.get(f"/conversations/{CONV}/messages/{first}").json()["text"] == "I signed up for the Porto 10k."
        status = wait_until(lambda: api.get("/status").json())  # the filer extracts the updated box again
        assert status["boxes_failed"] == 0
        hits = api.get("/memories/search", params={"q": "Porto 10k", "conversation_id": CONV, "k": 1}).json()
        assert any("Porto 10k" in m["text"] for m in hits["results"][0]["box"]["messages"])
        events = [c["event"] for c in api.get(f"/history/conversations/{CONV}/messages/{first}").json()["changes"]]
        assert events == ["add", "update"]
        assert "extract" in [c["event"] for c in api.get(f"/history/boxes/{box['id']}").json()["changes"]]

        assert api.delete(f"/conversations/{CONV}/messages/{first}").json()["messages"] == 1
        assert api.get(f"/conversations/{CONV}/messages/{first}").status_code == 404
        r = api.delete(f"/conversations/{CONV}")
        assert r.status_code == 200 and r.json()["messages"] == len(DEMO_MESSAGES) - 1 and r.json()["scrubbed"] == 1
        assert api.get("/memories/search", params={"q": QUESTION, "conversation_id": CONV}).json()["results"] == []
        assert api.get(f"/conversations/{CONV}/memories").status_code == 404
        assert api.get(f"/memories/{box['id']}").status_code == 404
        assert wait_until(lambda: api.get("/status").json())["messages_received"] == 0


def test_bad_input_is_one_line_and_the_right_status(tmp_path, cfg):
    one = {"conversation_id": "c", "message_id": "m1", "speaker": "Ann", "text": "hello there"}
    with rest(tmp_path / "mem", cfg) as api:
        cases = [  # (method, path, json, status, what the line says)
            ("post", "/memories", [], 422, "at least 1 item"),
            ("post", "/memories", [{**one, "text": "x" * 10_001}], 422, "messages.0.text: String should have at most"),
            ("post", "/memories", [{**one, "mood": "glad"}], 422, "messages.0.mood: Extra inputs are not permitted"),
            ("post", "/memories", [{**one, "text": "   "}], 422, "field 'text' is missing or empty"),
            ("post", "/memories", [one] * 1001, 422, "at most 1000 items"),
            ("post", "/memories", [{**one, "metadata": {"blob": "x" * 5000}}], 422, "more than the 4096 allowed"),
            ("post", "/memories", {"messages": [one], "seal": "maybe"}, 422, "seal: Input should be a valid boolean"),
            ("post", "/answer", {"question": ""}, 422, "question: String should have at least 1 character"),
            ("post", "/answer", {"question": "why?", "mode": "psychic"}, 422, "no retrieval mode 'psychic'"),
            ("post", "/reset", {}, 422, 'send {"confirm": true}'),
            ("get", "/memories/search?q=", None, 422, "query.q: String should have at least 1 character"),
            ("get", "/conversations/c/memories?limit=501", None, 422, "query.limit: Input should be less than"),
            ("get", "/conversations/c/memories?kind=events", None, 422, "query.kind: Input should be 'boxes' or"),
            ("get", "/memories/424242", None, 404, "no box 424242"),
            ("get", "/nowhere", None, 404, "Not Found"),
        ]
        for method, path, body, status, says in cases:
            r = api.request(method.upper(), path, json=body)
            assert r.status_code == status and says in error_line(r), (path, body, r.status_code, r.text[:300])
        assert api.post("/memories", json=[one]).status_code == 202
        r = api.post("/memories", json=[{**one, "text": "other words"}])  # message ids must be stable
        assert r.status_code == 409 and "already stored with other content (text)" in error_line(r)
        wait_until(lambda: api.get("/status").json(), lambda s: s["messages_pending"] == 0)
        for path in ("/conversations/c/messages/m9", "/history/conversations/c/messages/m9",
                     "/conversations/d/memories"):
            assert api.get(path).status_code == 404 and error_line(api.get(path))
        assert api.delete("/conversations/c/messages/m9").status_code == 404
        assert api.delete("/conversations/d").status_code == 404
        assert api.put("/conversations/c/messages/m9", json={"text": "x"}).status_code == 404
        assert api.post("/reset", json={"confirm": True}).json()["messages"] == 1
        assert api.get("/status").json()["messages_received"] == 0


def test_error_bodies_name_no_path_of_this_machine(tmp_path, cfg):
    """An unknown id is refused naming the memory folder by its name, never by its path (docs/reliability.md)."""
    with rest(tmp_path / "mem", cfg) as api:
        assert api.post("/memories", json=DEMO_MESSAGES[:4]).status_code == 202
        wait_until(lambda: api.get("/status").json(), lambda s: s["messages_pending"] == 0)
        for method, path in (("GET", "/memories/424242"), ("GET", f"/conversations/{CONV}/messages/m9"),
                             ("GET", "/conversations/nobody/memories"), ("DELETE", "/conversations/nobody"),
                             ("PUT", f"/conversations/{CONV}/messages/m9")):
            r = api.request(method, path, json={"text": "x"} if method == "PUT" else None)
            line = error_line(r)
            assert r.status_code == 404 and str(tmp_path) not in line and "/tmp" not in line, (path, line)
        assert error_line(api.get("/memories/424242")) == "mem: no box 424242"


def test_the_status_names_no_path_of_this_machine(tmp_path, cfg):
    """A filing error's line, shown by GET /status, with the path in it cut to its last name."""
    class Broken(FakeEmbedder):
        def encode(self, texts):
            raise RuntimeError(f"cannot read {tmp_path}/models/minilm/model.safetensors")

    with rest(tmp_path / "mem", cfg, embedder=Broken(), retry_s=60) as api:
        assert api.post("/memories", json=DEMO_MESSAGES).status_code == 202
        status = wait_until(lambda: api.get("/status").json(), lambda s: s["last_error"] is not None)
        assert status["last_error"]["error"] == "RuntimeError: cannot read .../model.safetensors"


def test_a_write_waits_for_the_filer_then_is_refused_while_readers_go_on(tmp_path, cfg):
    slow = GatedEmbedder()
    with rest(tmp_path / "mem", cfg, embedder=slow, write_wait_s=0.3) as api:
        assert api.post("/memories", json=DEMO_MESSAGES[:6]).status_code == 202
        assert slow.waiting.wait(30)  # the filer holds the writer, waiting for its model
        r = api.delete(f"/conversations/{CONV}")
        assert r.status_code == 409 and f"busy filing conversation '{CONV}'" in error_line(r)
        status = api.get("/status").json()  # readers never wait for the writer
        assert status["filing"]["conversation"] == CONV and status["messages_pending"] > 0
        assert api.get("/memories/search", params={"q": QUESTION, "conversation_id": CONV}).status_code == 200
        assert api.post("/memories", json=DEMO_MESSAGES[6:8]).json()["new"] == 2  # received while filing
        slow.gate.set()
        wait_until(lambda: api.get("/status").json(), lambda s: s["messages_pending"] == 0 and s["filing"] is None)
        assert api.delete(f"/conversations/{CONV}").json()["messages"] == 8


def test_chat_shaped_messages_are_filed_with_stable_derived_ids(tmp_path, cfg):
    chat = [{"role": "user", "name": "Maya", "content": "I signed up for the Lisbon half marathon in October.",
             "timestamp": "2024-03-04T10:00:00Z"},
            {"role": "assistant", "content": "Great! How is your knee doing?", "timestamp": 1709546460}]
    with rest(tmp_path / "mem", cfg) as api:
        r = api.post("/memories", json={"messages": chat, "conversation_id": "maya-chat", "user_id": "maya"})
        assert r.status_code == 202 and r.json()["new"] == 2 and r.json()["conversations"] == ["maya-chat"]
        again = api.post("/memories", json={"messages": chat, "conversation_id": "maya-chat", "user_id": "maya"})
        assert again.status_code == 202 and again.json()["new"] == 0  # derived ids are stable: a no-op
        other = api.post("/memories", json={"messages": chat, "conversation_id": "maya-chat"})  # untagged now
        assert other.status_code == 409, other.text
        assert "is already stored with other" in error_line(other)
        wait_until(lambda: api.get("/status").json())
        msgs = api.get("/conversations/maya-chat/memories", params={"kind": "messages"}).json()["items"]
        assert [(m["speaker"], m["session"], m["user_id"]) for m in msgs] == [
            ("Maya", "2024-03-04", "maya"), ("assistant", "2024-03-04", "maya")]
        # both shapes in one request; a chat message without a conversation is one line
        mixed = api.post("/memories", json=[{**DEMO_MESSAGES[0]}, {**chat[0], "conversation_id": "other"}])
        assert mixed.status_code == 202 and mixed.json()["new"] == 2
        r = api.post("/memories", json=[chat[0]])
        assert r.status_code == 422 and "conversation" in error_line(r)
        r = api.post("/memories", json={"messages": [{**chat[0], "speaker": "Maya"}], "conversation_id": "c"})
        assert r.status_code == 422 and "speaker: Extra inputs are not permitted" in error_line(r)
        # the project's shape forgives as the chat shape does: the request's conversation, an id derived
        plain = [{"speaker": "Maya", "text": "My knee is fine now.", "session_date": "5 March 2024"}]
        for _ in range(2):
            r = api.post("/memories", json={"messages": plain, "conversation_id": "maya-plain"})
            assert r.status_code == 202, r.text
        assert r.json()["new"] == 0  # the derived id is stable: posting it again adds nothing
        r = api.post("/memories", json=plain)
        assert r.status_code == 422 and "conversation_id" in error_line(r)


def test_the_docs_page_loads_nothing_from_elsewhere(tmp_path, cfg):
    import re

    with rest(tmp_path / "mem", cfg) as api:
        for page in ("/docs", "/redoc"):
            html = api.get(page).text
            urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html) + re.findall(r"""url: *["']([^"']+)["']""",
                                                                                    html)
            assert urls and all(u.startswith("/") for u in urls), (page, urls)  # served here: no CDN
            for u in urls:
                assert api.get(u).status_code == 200, u
        assert "paths" in api.get("/openapi.json").json()


def test_a_restart_files_what_the_last_server_left(tmp_path, cfg):
    folder = tmp_path / "mem"
    with rest(folder, cfg, embedder=DownEmbedder(), retry_s=60) as api:
        assert api.post("/memories", json={"messages": DEMO_MESSAGES, "seal": True}).status_code == 202
        status = wait_until(lambda: api.get("/status").json(), lambda s: s["last_error"] is not None)
        assert "RuntimeError: the embedder is down" in status["last_error"]["error"]
        assert status["messages_pending"] > 30 and status["seal_requested"] == [CONV]  # the first few need no vector
    with rest(folder, cfg) as api:  # the same folder, nothing posted: the pending messages are filed, then sealed
        status = wait_until(lambda: api.get("/status").json())
        assert status["messages_filed"] == len(DEMO_MESSAGES) and status["since_start"]["received"] == 0
        boxes = api.get(f"/conversations/{CONV}/memories", params={"limit": 500}).json()["items"]
        assert boxes and all(b["status"] == "extracted" for b in boxes)


def test_one_server_per_folder_and_other_writers_are_refused(tmp_path, cfg):
    folder = tmp_path / "mem"
    with rest(folder, cfg):
        with pytest.raises(StoreBusy, match="membox serve"):
            Service(*doubles(folder, cfg))
        writer = Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder())
        with pytest.raises(StoreBusy):
            writer.add(DEMO_MESSAGES[:2])
        assert writer.search(QUESTION, conversation_id=CONV) == []  # reading is never refused
        writer.close()
    Service(*doubles(folder, cfg)).close()  # the lock went with the server


def test_a_slice_that_files_nothing_is_not_retried_until_the_conversation_changes(tmp_path, cfg):
    service = Service(*doubles(tmp_path / "mem", cfg), poll_s=0.05)
    calls = []
    service.writer.file_pending = lambda conversation_id, seal, **hooks: calls.append(conversation_id)
    try:
        service.receive(DEMO_MESSAGES[:3])
        service.start()
        status = wait_until(service.status, lambda s: s["last_error"] is not None)
        assert "3 message(s) stayed pending after a slice that raised nothing" in status["last_error"]["error"]
        time.sleep(0.5)
        assert calls == [CONV]  # no busy loop
        service.receive(DEMO_MESSAGES[3:4])
        wait_until(lambda: len(calls), lambda n: n == 2)
    finally:
        service.close()


# ---- security -----------------------------------------------------------------------------------------------------
def test_binding_beyond_this_machine_needs_an_api_key():
    for host in ("127.0.0.1", "127.3.4.5", "localhost", "::1", "[::1]"):
        assert is_loopback(host)
        check_bind(host, None)
    for host in ("0.0.0.0", "192.168.1.5", "::", "example.org"):
        assert not is_loopback(host)
        with pytest.raises(InputError, match=f"set {API_KEY_ENV} to a secret of at least 16 characters"):
            check_bind(host, None)
        check_bind(host, KEY)
    with pytest.raises(InputError, match="is 5 characters long"):
        check_bind("0.0.0.0", "short")
    assert key_matches(KEY, KEY) and not key_matches(KEY[:-1], KEY) and not key_matches(None, KEY)
    assert not key_matches(KEY + "x", KEY) and not key_matches("", KEY)


def test_the_command_refuses_to_start_without_a_key(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    for argv in (["serve", str(tmp_path / "mem"), "--host", "0.0.0.0"],
                 ["mcp", str(tmp_path / "mem"), "--transport", "http", "--host", "0.0.0.0"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: binding to 0.0.0.0 would serve") and err.count("\n") == 1
    assert not (tmp_path / "mem").exists()  # refused before anything was opened


def test_every_request_needs_the_key_when_one_is_set(tmp_path, cfg):
    with rest(tmp_path / "mem", cfg, api_key=KEY, local=False) as api:
        for headers in ({}, {"Authorization": "Bearer wrong-key-of-some-length"}, {"X-API-Key": KEY[:-1]},
                        {"Authorization": KEY}):
            r = api.get("/health", headers=headers)
            assert r.status_code == 401 and "missing or wrong API key" in error_line(r)
            assert r.headers["www-authenticate"] == "Bearer"
        assert api.post("/memories", json=DEMO_MESSAGES[:2]).status_code == 401
        assert api.get("/health", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert api.get("/docs", headers={"X-API-Key": KEY}).status_code == 200
        r = api.post("/memories", json=DEMO_MESSAGES[:2], headers={"X-API-Key": KEY})
        assert r.status_code == 202 and r.json()["new"] == 2


async def body_length(scope, receive, send):
    """An ASGI app that reads the whole body and answers its length."""
    n, more = 0, True
    while more:
        message = await receive()
        n, more = n + len(message.get("body", b"")), message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(n).encode()})


def test_bodies_are_bounded():
    assert MAX_BODY_BYTES == 16 * 1024 * 1024
    with serving(Guard(body_length, max_body=100)) as url, httpx.Client(base_url=url) as client:
        assert client.post("/", content=b"x" * 100).text == "100"
        r = client.post("/", content=b"x" * 101)  # refused from its Content-Length, unread
        assert r.status_code == 413 and "larger than 100 bytes" in error_line(r)
        r = client.post("/", content=iter([b"x" * 60, b"x" * 60]))  # chunked: refused once past the bound
        assert r.status_code == 413 and "larger than 100 bytes" in error_line(r)


def test_on_loopback_a_request_must_name_this_machine(tmp_path, cfg):
    with rest(tmp_path / "mem", cfg) as api:
        r = api.get("/health", headers={"Host": "attacker.example:8765"})  # DNS rebinding
        assert r.status_code == 421 and "this machine only" in error_line(r)
        assert api.get("/health", headers={"Host": "localhost:8765"}).status_code == 200


# ---- MCP ---------------------------------------------------------------------------------------------------------
def call(client, tool: str, **arguments):
    """A tool's result: its structured content, or (error) its text."""
    async def go():
        result = await client.call_tool(tool, arguments)
        return (result.content[0].text, True) if result.is_error else (result.structured_content, False)
    return go()


def test_mcp_tools_over_streamable_http(tmp_path, cfg):
    from mcp import Client

    from membox_local.mcp_server import MCP_PATH, create_mcp

    service = Service(*doubles(tmp_path / "mem", cfg), poll_s=0.5)
    app = Guard(create_mcp(service).streamable_http_app(streamable_http_path=MCP_PATH, host="127.0.0.1"))

    async def session(url: str):
        async with Client(url + MCP_PATH) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"add_memory", "search_memory", "answer", "get_memories", "delete_memory",
                                  "memory_status"}
            schema = tools["add_memory"].input_schema
            assert schema["properties"]["messages"]["maxItems"] == 1000
            got, error = await call(client, "add_memory", messages=DEMO_MESSAGES, seal=True)
            assert not error and got["new"] == len(DEMO_MESSAGES)
            deadline = time.time() + 60
            while not settled((await call(client, "memory_status"))[0]):
                assert time.time() < deadline
                await anyio.sleep(0.05)
            got, error = await call(client, "search_memory", query=QUESTION, conversation_id=CONV, k=2)
            assert not error and len(got["results"]) == 2
            assert any("half marathon" in m["text"] for m in got["results"][0]["box"]["messages"])
            got, error = await call(client, "answer", question=QUESTION)
            assert not error and got["answer"] and got["boxes"]
            seen = []  # a call that asks for progress gets the answer so far as the model writes it

            async def progress(n, total, message):
                seen.append((n, message))

            res = await client.call_tool("answer", {"question": QUESTION}, progress_callback=progress)
            assert not res.is_error and len(seen) > 1 and [n for n, _ in seen] == list(range(1, len(seen) + 1))
            assert all(b.startswith(a) for (_, a), (_, b) in zip(seen, seen[1:]))  # each says more of the same
            assert " ".join(seen[-1][1].split()) == " ".join(res.structured_content["answer"].split())
            got, error = await call(client, "answer", question=QUESTION, today="2030-01-01")
            assert not error and got["answer"]
            text, error = await call(client, "answer", question=QUESTION, today="someday")
            assert error and "today: not a date: 'someday'" in text
            got, error = await call(client, "get_memories", conversation_id=CONV, kind="messages", limit=3)
            assert not error and [m["message_id"] for m in got["items"]] == [m["message_id"] for m in DEMO_MESSAGES[:3]]
            text, error = await call(client, "get_memories", conversation_id="nobody")
            assert error and "no conversation 'nobody'" in text and str(tmp_path) not in text  # the folder's name
            text, error = await call(client, "search_memory", query="x" * 2001)
            assert error and "at most 2000 characters" in text
            first = DEMO_MESSAGES[0]["message_id"]
            got, error = await call(client, "delete_memory", conversation_id=CONV, message_ids=[first])
            assert not error and got["messages"] == 1
            got, error = await call(client, "delete_memory", conversation_id=CONV)
            assert not error and got["messages"] == len(DEMO_MESSAGES) - 1
            got, error = await call(client, "search_memory", query=QUESTION, conversation_id=CONV)
            assert not error and got["results"] == []

    try:
        with serving(app) as url:
            anyio.run(session, url)
    finally:
        service.close()


def test_records_carry_their_sources_and_what_was_dropped(tmp_path, cfg):
    """Every event a payload holds carries `sources` (the ids of the messages it was read from; null: extracted
    before events kept them), every box `dropped` (what the code dropped or corrected in its record): REST, MCP."""
    from mcp import Client

    from membox_local.ingest import load_jsonl
    from membox_local.mcp_server import MCP_PATH, create_mcp
    from membox_local.records import Event

    cfg.weaver.enabled = False  # no traces: the records are written again below
    with Memory(tmp_path / "mem", cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        mem.add(load_jsonl(DEMO), seal=True)
        first, second = mem.boxes(CONV)[:2]
        cited = [m.message_id for m in first.messages[:2]]
        mem.store.save_extraction(first.id, first.topic, first.keywords,
                                  [Event(0, first.id, CONV, "Maya signed up", "", 1.0, cited)],
                                  dropped={"question": 1, "subject corrected": 1})
        mem.store.save_extraction(second.id, second.topic, second.keywords,
                                  [Event(0, second.id, CONV, "an older event", "", 1.0)])  # no sources kept

    def check(boxes: list[dict]) -> None:
        got = {b["id"]: b for b in boxes}
        assert got[first.id]["dropped"] == {"question": 1, "subject corrected": 1}
        assert [e["sources"] for e in got[first.id]["events"]] == [cited]
        assert got[second.id]["dropped"] == {} and [e["sources"] for e in got[second.id]["events"]] == [None]

    with rest(tmp_path / "mem", cfg) as api:
        check([api.get(f"/memories/{first.id}").json(), api.get(f"/memories/{second.id}").json()])
        check(api.get(f"/conversations/{CONV}/memories", params={"limit": 500}).json()["items"])
        hits = api.get("/memories/search", params={"q": QUESTION, "conversation_id": CONV, "k": 5}).json()
        assert all("dropped" in h["box"] and all("sources" in e for e in h["box"]["events"])
                   for h in hits["results"])

    service = Service(*doubles(tmp_path / "mem", cfg), poll_s=0.5)
    app = Guard(create_mcp(service).streamable_http_app(streamable_http_path=MCP_PATH, host="127.0.0.1"))

    async def session(url: str):
        async with Client(url + MCP_PATH) as client:
            got, error = await call(client, "get_memories", conversation_id=CONV, limit=500)
            assert not error
            check(got["items"])
            got, error = await call(client, "search_memory", query=QUESTION, conversation_id=CONV, k=5)
            assert not error and all("dropped" in h["box"] and all("sources" in e for e in h["box"]["events"])
                                     for h in got["results"])

    try:
        with serving(app) as url:
            anyio.run(session, url)
    finally:
        service.close()


@pytest.mark.integration
def test_mcp_over_stdio_on_the_real_cpu_stack(tmp_path):
    """`membox mcp DIR --config cpu-fast` launched by the SDK's stdio client: SmolLM2 on llama.cpp + MiniLM."""
    pytest.importorskip("llama_cpp")
    from mcp import Client, StdioServerParameters

    messages = [m for m in DEMO_MESSAGES if m["session"] == "1"][:8]
    server = StdioServerParameters(command=sys.executable, cwd=str(REPO), args=[
        "-m", "membox_local.cli", "mcp", str(tmp_path / "mem"), "--config", "cpu-fast"])

    async def session():
        async with Client(server, read_timeout_seconds=600) as client:
            got, error = await call(client, "add_memory", messages=messages, seal=True)
            assert not error and got["new"] == len(messages)
            deadline = time.time() + 600
            while not settled(status := (await call(client, "memory_status"))[0]):
                assert time.time() < deadline and status["last_error"] is None, status
                await anyio.sleep(0.5)
            got, error = await call(client, "search_memory", query=QUESTION, k=2)
            assert not error and got["results"]
            got, error = await call(client, "answer", question=QUESTION)
            assert not error and isinstance(got["answer"], str) and got["boxes"]

    anyio.run(session)


def test_a_config_without_the_box_memory_is_refused_before_the_folder_is_written(tmp_path):
    """`membox serve` serves the box memory: a config that builds only the event graph is refused in one line, and
    the folder is left without build settings (a later build with another config is not refused)."""
    import dataclasses

    from membox_local.config import ConfigError, load_config
    from membox_local.server import open_service
    from membox_local.store import built_systems

    cfg = load_config("cpu-ce")
    graph_only = dataclasses.replace(cfg, memory=dataclasses.replace(cfg.memory, systems=["eventweave"]))
    with pytest.raises(ConfigError, match="a server serves the box memory"):
        open_service(tmp_path / "mem", graph_only)
    assert not (tmp_path / "mem" / "memory.db").exists() or built_systems(tmp_path / "mem" / "memory.db") == []
