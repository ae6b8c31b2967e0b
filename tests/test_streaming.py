"""The answer as the model writes it (issue 51): TextRequest.on_text in every backend (llama.cpp and OpenAI-compatible
servers stream, the others hand over the whole text at the end), Memory.answer_from's pieces that join to the answer,
`membox ask` printing them on a terminal (a pipe, --json and --quiet as before), and POST /answer with "stream"."""
from __future__ import annotations

import io
import json
import os
import sys

import pytest

from membox_local import backends
from membox_local.backends.base import TextRequest, TextResult
from membox_local.backends.router import StageRouter
from membox_local.cli import main
from membox_local.config import load_config
from membox_local.memory import Memory
from membox_local.memory_reading import Stripped
from membox_local.testing import FakeBackend, FakeEmbedder

from backend_doubles import FakeOpenAIServer, smollm_cfg, text_req
from conftest import DEMO
from test_cli import FAST, config, doubles

FIXTURES = (doubles,)  # every model of the command line a double (test_cli's fixture, asked for by `built`)

QUESTION = "Which race did Maya sign up for?"


def test_stripped_hands_on_the_stripped_text_piece_by_piece():
    got = []
    strip = Stripped(got.append)
    for piece in [" ", "\n ", "Milo", " is", " ", "orange", " \n", "\n"]:
        strip(piece)
    assert got == ["Milo", " is", " orange"] and "".join(got) == " \n Milo is orange \n\n".strip()


# ---- backends ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("streams", [True, False], ids=["streams", "cannot-stream"])
def test_every_backend_hands_over_the_text_once_whole_or_in_pieces(streams):
    """A backend that streams calls on_text as it goes; one that cannot (vLLM, transformers: FakeBackend.streams
    False) gets it called once with the whole text by Backend.text. Through a StageRouter too, never twice."""
    fake = FakeBackend()
    fake.streams = streams
    for backend in (fake, StageRouter(FakeBackend(), {"answer": fake})):
        got = []
        req = text_req()
        [plain] = backend.text([req])
        [res] = backend.text([TextRequest(req.prompt, req.stage, req.max_tokens, on_text=got.append)])
        assert res == plain and "".join(got).strip() == res.text
        assert len(got) > 2 if streams else got == [res.text]


def test_openai_streams_with_the_servers_usage_or_counts_it():
    from membox_local.backends.openai import OpenAIBackend

    server = FakeOpenAIServer()
    try:
        b = OpenAIBackend(smollm_cfg(backend="openai", model="fake", base_url=server.url))
        [plain] = b.text([text_req()])
        assert "stream" not in server.requests[-1]
        got = []
        [res] = b.text([TextRequest(text_req().prompt, "answer", 16, on_text=got.append)])
        body = server.requests[-1]
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert got == ["a", " short", " fake", " answer"] and res == plain  # the same text and usage
        server.stream_usage = False  # a server that ignores stream_options: the usage is counted here, not lost
        [res] = b.text([TextRequest(text_req().prompt, "answer", 16, on_text=got.append)])
        assert res.text == plain.text and res.usage.stage == "answer" and res.usage.cached_tokens is None
        assert res.usage.completion_tokens == b.count_tokens("a short fake answer") and res.usage.prompt_tokens > 0
        b.close()
    finally:
        server.close()


def test_llamacpp_streams_the_text_and_usage_it_writes_without_stream(llamacpp_backend):
    b = llamacpp_backend
    for req in (text_req(), TextRequest(text_req("Reply with an emoji and a French word with accents.").prompt,
                                        "answer", 24)):
        b.text([req])  # the same KV cache before each of the two calls compared
        [plain] = b.text([req])
        got = []
        [res] = b.text([TextRequest(req.prompt, req.stage, req.max_tokens, on_text=got.append)])
        assert res == plain and "".join(got).strip() == res.text and got


# ---- Memory.answer_from -----------------------------------------------------------------------------------------
def _memory(tmp_path, answer, **overrides):
    cfg = load_config("cpu", {"loom.judge": "embedding", "weaver.enabled": False, **overrides})
    mem = Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder(), answer_backend=answer)
    mem.add([json.loads(line) for line in DEMO.read_text().splitlines() if line.strip()], seal=True)
    return mem


def _usage(mem) -> list[tuple]:
    return mem.store.db.execute("SELECT stage, prompt_tokens, completion_tokens, cached_tokens FROM llm_usage "
                                "WHERE stage = 'answer' ORDER BY rowid").fetchall()


def test_the_pieces_join_to_the_answer_and_the_usage_is_the_same(tmp_path):
    with _memory(tmp_path, FakeBackend()) as mem:
        ctx = mem.context(QUESTION)
        plain = mem.answer_from(QUESTION, ctx)
        got = []
        streamed = mem.answer_from(QUESTION, ctx, on_text=got.append)
        assert streamed.text == plain.text == "".join(got) and len(got) > 1
        first, second = _usage(mem)
        assert first == second


def test_an_answer_decided_without_the_models_text_is_not_streamed(tmp_path):
    """check_terms answers "not mentioned" without the model; a total is added up from a listed JSON: on_text gets
    nothing (the caller prints the answer whole)."""
    def lister(request):
        return {"unit": "km", "items": [{"what": "half marathon", "amount": 21}, {"what": "10k", "amount": 10}]}

    answer = FakeBackend()
    answer.responder = lister
    with _memory(tmp_path, answer, **{"answer.check_terms": True}) as mem:
        got = []
        ans = mem.answer("Did Maya ever run in Reykjavik?", on_text=got.append)
        assert ans.unmentioned and got == []
        ans = mem.answer("How many kilometres did Maya run in total?", on_text=got.append)
        assert ans.parts and "31" in ans.text and got == []


# ---- membox ask --------------------------------------------------------------------------------------------------
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class EscapingBackend(FakeBackend):
    """Answers in pieces that hold control characters, as a model's output may."""

    def text_batch(self, requests):
        out = []
        for r in requests:
            pieces = [" ", "Mi", "lo\x1b]0;x\x07", " is\norange", "\n"]
            for p in pieces:
                if r.on_text is not None:
                    r.on_text(p)
            out.append(TextResult("".join(pieces).strip(), self._usage(r, "Milo")))
        return out


@pytest.fixture
def built(tmp_path, request):
    request.getfixturevalue("doubles")
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(config(tmp_path, FAST)), "--quiet"]) == 0
    return store


def test_ask_streams_to_a_terminal_and_prints_whole_to_a_pipe(built, capsys, monkeypatch):
    pieces = []
    real = Memory.answer_from

    def spy(self, *a, on_text=None, **kw):
        return real(self, *a, on_text=(lambda p: (pieces.append(p), on_text(p))) if on_text else None, **kw)

    monkeypatch.setattr(Memory, "answer_from", spy)
    printed = {}
    for extra in ([], ["--json"], ["--quiet"]):
        assert main(["ask", str(built), QUESTION, *extra]) == 0
        printed[tuple(extra)] = capsys.readouterr().out
    assert pieces == []  # a pipe: the answer whole, at the end, as before
    term = Terminal()
    monkeypatch.setattr(sys, "stdout", term)
    assert main(["ask", str(built), QUESTION]) == 0
    assert len(pieces) > 1 and term.getvalue() == printed[()]  # printed piece by piece, the same text in the end
    for extra in (["--json"], ["--quiet"]):  # whole, at the end, as to a pipe
        pieces.clear()
        term.seek(0)
        term.truncate()
        assert main(["ask", str(built), QUESTION, *extra]) == 0
        assert pieces == [] and term.getvalue() == printed[tuple(extra)]


def test_the_waiting_line_is_cleared_before_the_first_piece_on_one_pseudo_terminal(built, monkeypatch):
    """stdout and stderr on one real pseudo-terminal: the waiting line is drawn, cleared, then the answer comes
    piece by piece; every piece through the terminal guard (no control character of the model's output)."""
    import pty

    monkeypatch.setattr(backends, "make_backend", lambda llm: EscapingBackend())
    master, slave = pty.openpty()
    out, err = open(slave, "w", closefd=False), open(os.dup(slave), "w")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    try:
        assert main(["ask", str(built), QUESTION]) == 0
        out.flush()
        err.flush()
        seen = b""
        os.set_blocking(master, False)
        while True:
            try:
                chunk = os.read(master, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        out.close()
        err.close()
        os.close(slave)
        os.close(master)
    text = seen.decode()
    reading = text.index(" tokens with ")
    cleared = text.rindex("\r\x1b[K", 0, text.index("Q: "))
    assert reading < cleared < text.index("A: Milo\\x1b]0;x\\x07 is\\x0aorange")
    assert "\x1b]0" not in text and "\x07" not in text
    assert text.count("\r\x1b[K") == text[:cleared].count("\r\x1b[K") + 1  # nothing cleared after the answer began


# ---- REST ----------------------------------------------------------------------------------------------------------
def events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_rest_answer_streams_server_sent_events(tmp_path, cfg):
    pytest.importorskip("fastapi")
    from test_server import CONV, DEMO_MESSAGES, rest, settled, wait_until

    with rest(tmp_path / "mem", cfg) as api:
        api.post("/memories", json={"messages": DEMO_MESSAGES, "seal": True})
        wait_until(lambda: api.get("/status").json(), settled)
        whole = api.post("/answer", json={"question": QUESTION, "conversation_id": CONV}).json()
        r = api.post("/answer", json={"question": QUESTION, "conversation_id": CONV, "stream": True})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        got = events(r.text)
        assert [name for name, _ in got[:-1]] == ["text"] * (len(got) - 1) and len(got) > 2
        assert got[-1] == ("answer", whole) and "".join(d["text"] for _, d in got[:-1]) == whole["answer"]
        bad = api.post("/answer", json={"question": QUESTION, "conversation_id": CONV, "today": "someday",
                                        "stream": True})
        assert bad.status_code == 422 and "today: not a date" in bad.json()["error"]  # checked before the stream
