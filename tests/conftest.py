from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before any test imports llama_cpp (see backends/llamacpp.py)

import pytest

from membox_local.config import Config, load_config
from membox_local.memory import Memory

from membox_local.testing import FakeBackend, FakeEmbedder

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("MEMBOX_DATA", REPO.parent / "shared" / "data"))
DEMO = REPO / "membox_local" / "data" / "demo.jsonl"


def benchmark_script(name: str):
    """A benchmarks/ script loaded as a module (its logic tested on the doubles or on saved results)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def cfg() -> Config:
    c = load_config("cpu")
    c.loom.judge, c.loom.threshold = "embedding", 0.15  # the doubles are calibrated for the cosine judge
    c.retrieve.mode = "compact"  # logic tests of the paper's mode; box-aware modes have tests/test_boxaware.py
    c.retrieve.resolve_dates = False  # messages shown as said (dated rendering: tests/test_answering.py)
    c.answer.llm = {}  # the double that builds also answers
    return c


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def memory(tmp_path, cfg, fake_backend, fake_embedder) -> Memory:
    mem = Memory(tmp_path / "mem", cfg, backend=fake_backend, embedder=fake_embedder)
    yield mem
    mem.close()


@pytest.fixture
def ew(tmp_path, cfg) -> Memory:
    """A Memory of the box memory and EventWeave's event graph over the scripted doubles (tests/eventweave_doubles.py)."""
    from eventweave_doubles import ew_memory

    mem = ew_memory(tmp_path / "ew", cfg)
    yield mem
    mem.close()


@pytest.fixture(scope="module")
def llamacpp_backend():
    """llama.cpp with SmolLM2 (the tests' model), one per test module; skipped without llama_cpp."""
    pytest.importorskip("llama_cpp")
    from membox_local.backends.llamacpp import LlamaCppBackend

    from backend_doubles import smollm_cfg

    b = LlamaCppBackend(smollm_cfg())
    yield b
    b.close()


@pytest.fixture(scope="module")
def openai_fake_server():
    """A fake OpenAI-compatible HTTP server (tests/backend_doubles.py), one per test module."""
    from backend_doubles import FakeOpenAIServer

    s = FakeOpenAIServer()
    yield s
    s.close()


@pytest.fixture
def locomo_path() -> Path:
    p = DATA_DIR / "locomo-dev.json"
    if not p.exists():
        pytest.skip(f"LoCoMo dev data not found at {p} (set MEMBOX_DATA)")
    return p
