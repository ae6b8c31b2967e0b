"""Model problems are found before anything is filed, and model failures are never silent.

Before the first message is filed (`membox build`, Memory.add / seal when there is work), the config's models are
checked without loading them (Backend.preflight): a model that is missing, a file that is not a GGUF model, an
OpenAI-compatible server that does not answer are one error line, and nothing is written. During a build, a model
that raises, times out or writes output that does not parse leaves the box 'failed' with the reason: counted
(`failed_boxes`), listed (`membox show --failed`), retried by the next build, and `membox build` exits 1 when more
than `[extract] max_failed_share` of its boxes failed.
"""
from __future__ import annotations

import http.server
import json
import re
import socket
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from membox_local import cli
from membox_local.backends.base import BackendError, JsonRequest, Prompt, StructuredOutputError
from membox_local.config import LLMConfig, load_config
from membox_local.ingest import load_jsonl
from membox_local.memory import Memory, open_store
from membox_local.testing import FakeBackend, FakeEmbedder
from membox_local.weights import ModelNotFound, ModelSpec

from conftest import DEMO

BASE_TOML = """extends = "cpu"
[loom]
judge = "embedding"
threshold = 0.15
[answer]
llm = {}
"""


class FailingBackend(FakeBackend):
    """The doubles' model, whose extractions fail in one way: `raises` (the call raises BackendError),
    `unparsable` (output that does not parse: StructuredOutputError), `timeout` (the call times out)."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how

    def json_batch(self, requests):
        if requests[0].stage == "extract":
            self.calls += [(r.stage, r.prompt.user) for r in requests]
            if self.how == "raises":
                raise BackendError("extract: the server refused the request (HTTP 500): engine crashed")
            if self.how == "timeout":
                raise TimeoutError("no answer in 60 s")
            return [StructuredOutputError("extract: output did not match the schema: not JSON (Expecting value)",
                                          "Sure! Here", None) for _ in requests]
        return super().json_batch(requests)


def openai_timing_out():
    """The OpenAI backend over a client whose every call times out (as openai raises it), retried then failed."""
    import openai

    from membox_local.backends.openai import OpenAIBackend

    class Client:
        class chat:
            class completions:
                @staticmethod
                def create(**body):
                    # openai >= 3.60 reads the request's headers when the error is made (and its HTTP library
                    # moved from httpx to httpx2): a stand-in request with no headers fits every version
                    raise openai.APITimeoutError(request=SimpleNamespace(headers={}))

    b = OpenAIBackend(LLMConfig(backend="openai", model="m"), client=Client())
    b.retries, b.sleep = 1, lambda s: None
    return b


REASONS = {"raises": "engine crashed", "unparsable": "did not match the schema", "timeout": "timed out",
           "openai-timeout": "APITimeoutError"}


@pytest.mark.parametrize("how", list(REASONS))
def test_a_failing_model_leaves_each_box_failed_with_the_reason(tmp_path, cfg, capsys, how):
    backend = openai_timing_out() if how == "openai-timeout" else FailingBackend(how)
    folder = tmp_path / "mem"
    with Memory(folder, cfg, backend=backend, embedder=FakeEmbedder()) as mem:
        mem.add(load_jsonl(DEMO), seal=True)  # the build goes on: every message is filed
        assert not mem.store.pending_messages("maya-tom")
        boxes = mem.boxes()
        assert len(boxes) > 1 and {b.status for b in boxes} == {"failed"}
        for b in boxes:
            assert b.error.startswith("extraction failed: ") and REASONS[how] in b.error, b.error
        assert mem.stats()["failed_boxes"] == len(boxes)
    assert cli.main(["show", str(folder), "--failed"]) == 0
    out = capsys.readouterr().out
    assert out.count("] failed") == len(boxes) and out.count("  error: extraction failed: ") == len(boxes)

    with Memory(folder, cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:  # the next build retries
        mem.add([])
        assert {b.status for b in mem.boxes()} == {"extracted"} and mem.stats()["failed_boxes"] == 0
    assert cli.main(["show", str(folder), "--failed"]) == 0
    assert capsys.readouterr().out == ""


def test_a_weaving_failure_is_recorded_and_listed(tmp_path, cfg, capsys):
    class WeaveFails(FakeBackend):
        def json_batch(self, requests):
            if requests[0].stage in ("link", "trace-init"):
                raise BackendError(f"{requests[0].stage}: the server kept failing after 5 attempts")
            return super().json_batch(requests)

    def two_events(r):  # each box's first two lines as its events (cited), so that weaving asks the model
        lines = [l.split(": ", 1)[1][:150] for l in r.prompt.user.splitlines() if re.match(r"^\d+\. [A-Z][\w ]*: ", l)]
        events = [{"line": n, "event": text} for n, text in enumerate(lines[:2], 1)]
        return {"topic": "t", "keywords": ["k"], "events": events} if r.stage == "extract" else None

    backend = WeaveFails()
    backend.responder = two_events
    folder = tmp_path / "mem"
    with Memory(folder, cfg, backend=backend, embedder=FakeEmbedder()) as mem:
        mem.add(load_jsonl(DEMO), seal=True)
        unwoven = [b for b in mem.boxes() if b.error]
        assert unwoven and all(b.status == "extracted" and "weaving failed" in b.error for b in unwoven)
    assert cli.main(["show", str(folder), "--failed"]) == 0
    assert capsys.readouterr().out.count("  error: weaving failed: ") == len(unwoven)


def test_a_judge_failure_stops_the_build_with_the_error(tmp_path, cfg):
    class LabelsFail(FakeBackend):
        def label_batch(self, requests):
            raise TimeoutError("no answer in 60 s")

    cfg.loom.judge = "llm"
    with Memory(tmp_path / "m", cfg, backend=LabelsFail(), embedder=FakeEmbedder()) as mem:
        with pytest.raises(BackendError, match="timed out"):  # a decision cannot be skipped
            mem.add(load_jsonl(DEMO))
        assert len(mem.store.pending_messages("maya-tom")) > 30  # the rest stays pending, for the next build


# ---- `membox build`: the failed share, the exit code ----------------------------------------------------------
@pytest.fixture
def doubles(monkeypatch):
    """`membox build` on the doubles: the config's backend is `doubles["backend"]`, no model is checked."""
    import membox_local.backends as backends
    import membox_local.memory as memory

    made = {"backend": FakeBackend()}
    monkeypatch.setattr(backends, "make_backend", lambda llm: made["backend"])
    monkeypatch.setattr(memory, "make_embedder", lambda cfg: FakeEmbedder())
    monkeypatch.setattr(memory, "preflight_models", lambda cfg, **kw: None)
    return made


def build(tmp_path: Path, toml: str, folder: Path) -> int:
    config = tmp_path / "c.toml"
    config.write_text(toml)
    return cli.main(["build", str(DEMO), "--store", str(folder), "--config", str(config), "--json"])


def test_build_exits_1_when_more_boxes_failed_than_max_failed_share(tmp_path, capsys, doubles):
    assert load_config("cpu").extract.max_failed_share == 0.2  # the shipped default
    folder = tmp_path / "mem"
    failing = FakeBackend()
    failing.fail_extract = 5  # five extractions write output that does not parse
    doubles["backend"] = failing
    assert build(tmp_path, BASE_TOML, folder) == 1
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    boxes = stats["boxes"]
    assert stats["failed_boxes"] == 5 and 5 / boxes > 0.2
    err = captured.err.splitlines()
    assert [l for l in err if l.startswith("error:")] == [
        f"error: 5 of {boxes} boxes failed ({5 / boxes:.0%}, more than [extract] max_failed_share = 0.2); the "
        f"reasons: `membox show {folder} --failed`; rerun the same build to retry them"]
    assert any(l.startswith("warning: 5 box(es) failed extraction") for l in err)

    doubles["backend"] = FakeBackend()  # the rerun retries them
    assert build(tmp_path, BASE_TOML, folder) == 0
    assert json.loads(capsys.readouterr().out)["failed_boxes"] == 0

    failing.fail_extract = 5  # a share the config allows
    doubles["backend"] = failing
    assert build(tmp_path, BASE_TOML + "[extract]\nmax_failed_share = 0.5\n", tmp_path / "lenient") == 0
    assert json.loads(capsys.readouterr().out)["failed_boxes"] == 5


# ---- found before anything is filed ---------------------------------------------------------------------------
def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    return lines[0]


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def not_a_model(tmp_path: Path) -> Path:
    path = tmp_path / "notes.gguf"
    path.write_text("these are my notes, renamed .gguf\n")
    return path


@pytest.mark.parametrize("case", ["missing-name", "missing-path", "package-not-installed", "not-gguf", "folder",
                                  "server-down"])
def test_a_model_problem_is_one_line_before_anything_is_filed(tmp_path, capsys, monkeypatch, case):
    llm = {"missing-name": 'model = "no-such-model"',
           "missing-path": f'model = "{tmp_path / "nowhere" / "model.gguf"}"',
           "package-not-installed": 'model = "ghost"',
           "not-gguf": f'model = "{not_a_model(tmp_path)}"',
           "folder": f'model = "{tmp_path}"',
           "server-down": (f'backend = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:{closed_port()}/v1"\n'
                           f'timeout_s = 3.0')}[case]
    if case == "package-not-installed":
        import membox_local.weights as weights

        ghost = ModelSpec(name="ghost", kind="package-file", packages=["membox-ghost-model"], files=["m.gguf"],
                          install="pip install membox-ghost-model")
        monkeypatch.setattr(weights, "load_manifest", lambda *a: {"ghost": ghost})
    expected = {"missing-name": "model 'no-such-model' is neither an existing path nor a name in",
                "missing-path": "is neither an existing path nor a name in",
                "package-not-installed": "package 'membox-ghost-model' is not installed; run: pip install",
                "not-gguf": "is not a GGUF model file (it starts with b'thes'",
                "folder": "is a folder, not a GGUF file",
                "server-down": f"[llm] base_url http://127.0.0.1:"}[case]
    folder = tmp_path / "mem"
    rc = build(tmp_path, BASE_TOML + "[llm]\n" + llm + "\n", folder)
    line = one_error_line(capsys)
    assert rc == 2 and expected in line, line
    if case == "server-down":
        assert "no OpenAI-compatible server answers there" in line
    assert not folder.exists()  # nothing written, not even the folder

    # the Python API: the same error from Memory.add, before the first message row is written
    cfg = load_config(tmp_path / "c.toml")
    with Memory(folder, cfg, embedder=FakeEmbedder()) as mem:
        with pytest.raises((ModelNotFound, BackendError)) as exc:
            mem.add(load_jsonl(DEMO))
        assert expected in str(exc.value)
        assert mem.store.message_rows() == []
    assert open_store(folder).message_rows() == []


def test_a_server_that_answers_passes_the_check(tmp_path):
    from membox_local.backends import preflight

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "created": 0,
                                                           "owned_by": "me"}]}).encode()
            self.send_response(200 if self.path.endswith("/models") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        preflight(LLMConfig(backend="openai", model="m", base_url=f"http://127.0.0.1:{server.server_port}/v1"))
    finally:
        server.shutdown()
        server.server_close()


def test_a_gguf_file_passes_the_file_check_and_a_backend_passed_in_is_not_checked(tmp_path):
    from membox_local.backends.llamacpp import check_gguf

    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 28)
    check_gguf(gguf)
    cfg = load_config("cpu", {"llm.model": str(not_a_model(tmp_path)), "loom.judge": "embedding"})
    with Memory(tmp_path / "m", cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        assert mem.add(load_jsonl(DEMO)[:4]) == 4  # the caller's backend: its model is the caller's


def test_llamacpp_reports_a_failed_generation_as_that_request_failing():
    pytest.importorskip("llama_cpp")
    from membox_local.backends.llamacpp import LlamaCppAdapter, LlamaCppBackend

    b = LlamaCppBackend.__new__(LlamaCppBackend)  # no model: the call itself fails, as a too long prompt does
    b.cfg = LLMConfig()
    b.adapter = LlamaCppAdapter(b.cfg)

    def too_long(*a, **kw):
        raise ValueError("Requested tokens (5000) exceed context window of 4096")

    b._json_complete = too_long
    schema = {"type": "object", "properties": {"topic": {"type": "string", "maxLength": 8}}, "required": ["topic"]}
    res = b.json_batch([JsonRequest(Prompt("s", "u"), schema, "extract")])
    assert isinstance(res[0], BackendError) and "exceed context window" in str(res[0])
