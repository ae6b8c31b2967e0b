"""No network by default (issue 24): the default path (build, search, answer, stats; `membox build | show | ask |
demo`) runs with every socket connection refused, and the OpenAI backend refuses a plain http:// server on
another machine unless the config allows it."""
from __future__ import annotations

import json
import socket

import pytest

from membox_local.config import ConfigError, load_config
from membox_local.ingest import load_jsonl
from membox_local.memory import Memory

from conftest import DEMO
from membox_local.testing import FakeBackend, FakeEmbedder


class NetworkUsed(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    """Every connection (TCP, UDP, Unix) and every name lookup fails, loudly."""
    def refuse(*args, **kw):
        raise NetworkUsed(f"network use: {args[1:] or args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket.socket, "sendto", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_the_blocker_blocks(no_network):
    import urllib.request

    with pytest.raises(Exception) as exc:
        urllib.request.urlopen("http://example.com", timeout=1)
    assert "network use" in str(exc.value)


def test_the_python_api_needs_no_network(tmp_path, cfg, no_network):
    with Memory(tmp_path / "mem", cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        assert mem.add(load_jsonl(DEMO), seal=True) > 0
        mem.sync()
        assert mem.search("Which race did Maya sign up for?")
        ans = mem.answer("Which race did Maya sign up for?")
        assert ans.text and ans.context.box_ids
        for mode in mem.modes():
            mem.context("What is the name of Tom's cat?", mode=mode)
        stats = mem.stats()
        assert stats["conversations"] == 1 and stats["llm_usage"]


def test_the_command_line_needs_no_network(tmp_path, monkeypatch, capsys, no_network):
    """The shipped default config (cpu), the models replaced by the doubles: build, show, ask, demo."""
    from membox_local import backends, memory
    from membox_local.cli import main

    monkeypatch.setattr(backends, "make_backend", lambda llm: FakeBackend())
    monkeypatch.setattr(memory, "make_embedder", lambda emb: FakeEmbedder())
    monkeypatch.setattr(memory, "preflight_models", lambda cfg, **kw: None)  # no model file is looked for either
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["conversations"] == 1
    assert main(["show", str(store)]) == 0
    assert "box 1" in capsys.readouterr().out
    assert main(["ask", str(store), "Which race did Maya sign up for?", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["answer"]
    assert main(["demo", "--store", str(tmp_path / "demo")]) == 0
    assert "Q: What is the name of Tom's cat?" in capsys.readouterr().out


@pytest.mark.integration
def test_the_real_cpu_models_load_and_run_without_network(tmp_path, no_network):
    """The shipped models are found and run offline: MiniLM and the llama.cpp GGUF (no download, no hub call)."""
    from membox_local.backends import make_backend
    from membox_local.backends.base import Prompt, TextRequest
    from membox_local.embed import make_embedder

    cfg = load_config("cpu")
    assert make_embedder(cfg.embedder).encode(["hello there"]).shape == (1, 384)
    backend = make_backend(cfg.llm)
    try:
        assert backend.text([TextRequest(Prompt("Answer briefly.", "Say hi."), "answer", 4)])[0].usage.prompt_tokens
    finally:
        backend.close()


# ---- plain http to another machine ------------------------------------------------------------------
REMOTE_HTTP = ["http://10.0.0.5:8000/v1", "http://example.com/v1", "HTTP://Example.com/v1", "http://[fe80::1]:80/v1"]
ACCEPTED = ["https://api.openai.com/v1", "http://localhost:8000/v1", "http://127.0.0.1:8000/v1",
            "http://[::1]:8000/v1", "http://LOCALHOST/v1", "", None]


def _openai_cfg(**kw):
    cfg = load_config("openai")
    for k, v in kw.items():
        setattr(cfg.llm, k, v)
    return cfg.llm


@pytest.mark.parametrize("url", REMOTE_HTTP)
def test_openai_refuses_plain_http_to_another_machine(url, monkeypatch, no_network):
    pytest.importorskip("openai")
    from membox_local.backends.openai import OpenAIBackend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ConfigError) as exc:
        OpenAIBackend(_openai_cfg(base_url=url))
    msg = str(exc.value)
    assert "\n" not in msg and "[llm] base_url" in msg and "allow_insecure_http = true" in msg and url in msg


@pytest.mark.parametrize("url", ACCEPTED)
def test_openai_accepts_https_and_this_machine(url, monkeypatch, no_network):
    pytest.importorskip("openai")
    from membox_local.backends.openai import OpenAIBackend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    OpenAIBackend(_openai_cfg(base_url=url or "")).close()  # constructing a client connects nowhere


def test_openai_plain_http_when_the_config_says_so(monkeypatch, no_network):
    pytest.importorskip("openai")
    from membox_local.backends.openai import OpenAIBackend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = load_config("openai", {"llm.base_url": REMOTE_HTTP[0], "llm.allow_insecure_http": True})
    assert cfg.llm.allow_insecure_http is True
    OpenAIBackend(cfg.llm).close()
    with pytest.raises(ConfigError, match="expected true/false"):
        load_config("openai", {"llm.allow_insecure_http": "yes"})


def test_openai_base_url_from_the_environment_is_checked_too(monkeypatch, no_network):
    pytest.importorskip("openai")
    from membox_local.backends.openai import OpenAIBackend, OpenAIEmbedder
    from membox_local.config import EmbedderConfig

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://192.168.1.20:8000/v1")
    with pytest.raises(ConfigError, match=r"\$OPENAI_BASE_URL \(used by \[llm\]\)"):
        OpenAIBackend(_openai_cfg(base_url=""))
    with pytest.raises(ConfigError, match=r"\[embedder\] allow_insecure_http"):
        OpenAIEmbedder(EmbedderConfig(backend="openai", model="emb"))
