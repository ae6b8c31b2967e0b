"""One contract every language-model backend passes: labels, JSON, text, batching, token counts, errors, scores.

Backends: the FakeBackend; llama.cpp with SmolLM2 (skipped without llama_cpp); OpenAI against a fake HTTP server
here and against llama-cpp-python's server (skipped without it); vLLM against a fake `vllm` module and against the
real engine (its CPU build, in .venv-vllm: `make test-vllm`); transformers with SmolLM2's GGUF (skipped without
transformers, outlines, gguf and accelerate; opt-in with MEMBOX_TRANSFORMERS_CONTRACT=1, as it is slow here).
What each backend does beyond the contract: tests/test_backend_details.py; the shared requests and the fake server:
tests/backend_doubles.py.
"""
from __future__ import annotations

import json
import os

import pytest

import fake_vllm
from backend_doubles import SCHEMA, json_req, label_req, smollm_cfg, text_req
from membox_local.testing import FakeBackend
from membox_local.backends.base import (BackendError, JsonRequest, JsonResult, LabelRequest, LabelResult, Prompt,
                                        ScoreRequest, ScoreResult, StructuredOutputError, TextResult, validate_json)
from membox_local.config import load_config
from membox_local.prompts import CONTINUITY_LABELS


# ---- backends under test -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama_server():
    from test_parity import LlamaServer

    with LlamaServer.start_or_skip() as server:
        yield server


@pytest.fixture(scope="module")
def transformers_backend():
    if not os.environ.get("MEMBOX_TRANSFORMERS_CONTRACT"):
        pytest.skip("set MEMBOX_TRANSFORMERS_CONTRACT=1: on a 2-core CPU, loading SmolLM2's GGUF into transformers "
                    "takes ~30 s and outlines' first JSON-schema index several minutes")
    for mod in ("transformers", "outlines", "gguf", "accelerate"):
        pytest.importorskip(mod)
    from membox_local.backends.transformers import TransformersBackend

    b = TransformersBackend(smollm_cfg(backend="transformers"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def vllm_real_backend():
    """The real vLLM engine (its CPU build here, `make install-vllm`; any build on a GPU box) on SmolLM2-135M as a
    Hugging Face folder derived from the shipped GGUF. `make test-vllm` runs these cases."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        pytest.skip("vLLM is not installed in this venv: `make install-vllm` makes .venv-vllm, `make test-vllm` runs "
                    "the contract against the real engine")
    from membox_local.backends.vllm import VLLMBackend

    cfg = load_config("vllm-cpu").llm
    cfg.model = "smollm2-135m-hf"
    b = VLLMBackend(cfg)
    yield b
    b.close()


BACKENDS = ["fake", "llamacpp", "openai-fake-http", "openai-llamacpp-server", "vllm-fake", "transformers",
            pytest.param("vllm-real", marks=pytest.mark.vllm)]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    name = request.param
    if name == "fake":
        yield FakeBackend()
    elif name == "llamacpp":
        yield request.getfixturevalue("llamacpp_backend")
    elif name == "openai-fake-http":
        from membox_local.backends.openai import OpenAIBackend

        b = OpenAIBackend(smollm_cfg(backend="openai", model="fake", base_url=request.getfixturevalue("openai_fake_server").url))
        yield b
        b.close()
    elif name == "openai-llamacpp-server":
        from membox_local.backends.openai import OpenAIBackend

        server = request.getfixturevalue("llama_server")
        b = OpenAIBackend(smollm_cfg(backend="openai", model=server.model_alias, base_url=server.url, max_concurrency=2,
                                     response_format="json_object", extra_body={"repeat_penalty": 1.0}))
        yield b
        b.close()
    elif name == "vllm-fake":
        fake_vllm.install(monkeypatch)
        from membox_local.backends.vllm import VLLMBackend

        b = VLLMBackend(smollm_cfg(backend="vllm"), model="/models/fake")
        yield b
        b.close()
    elif name == "transformers":
        yield request.getfixturevalue("transformers_backend")
    elif name == "vllm-real":
        yield request.getfixturevalue("vllm_real_backend")


# ---- the contract ------------------------------------------------------------------------------------
def check_usage(res, stage):
    assert res.usage.stage == stage
    assert res.usage.prompt_tokens > 0 and res.usage.completion_tokens >= 1


def test_label_is_one_of_the_labels(backend):
    [res] = backend.label([label_req()])
    assert isinstance(res, LabelResult) and res.label in CONTINUITY_LABELS
    assert res.probs is None
    check_usage(res, "judge")


def test_label_probabilities(backend):
    [res] = backend.label([label_req(logprobs=True)])
    assert set(res.probs) == set(CONTINUITY_LABELS)
    assert sum(res.probs.values()) == pytest.approx(1.0, abs=1e-6)
    assert res.label == max(res.probs, key=res.probs.get)


def test_json_matches_the_schema(backend):
    [res] = backend.json([json_req()])
    if isinstance(res, StructuredOutputError):  # allowed, but it must carry the raw output and usage
        assert res.raw is not None and res.usage is not None
        return
    assert isinstance(res, JsonResult) and validate_json(res.data, SCHEMA) == []
    assert json.loads(res.raw) == res.data
    check_usage(res, "extract")


def test_text(backend):
    [res] = backend.text([text_req()])
    assert isinstance(res, TextResult) and isinstance(res.text, str)
    check_usage(res, "answer")


def test_mixed_batch_keeps_request_order(backend):
    reqs = [text_req(), label_req(n=1), json_req(1), label_req(n=2), text_req("Who adopted a cat?")]
    res = backend.run(reqs)
    kinds = [TextResult, LabelResult, (JsonResult, StructuredOutputError), LabelResult, TextResult]
    assert all(isinstance(r, k) for r, k in zip(res, kinds)) and len(res) == len(reqs)
    assert [r.usage.stage for r in res] == ["answer", "judge", "extract", "judge", "answer"]


def test_batch_equals_one_by_one_when_greedy(backend):
    reqs = [label_req(n=1), label_req(n=2)]
    together = [r.label for r in backend.label(reqs)]
    alone = [backend.label([r])[0].label for r in reqs]
    assert together == alone


def test_token_counts(backend):
    assert backend.count_tokens("the cat sleeps all day") > 0
    short, long = backend.text([text_req("Cat?"), text_req("What is the name of the cat that Ann adopted yesterday?")])
    assert long.usage.prompt_tokens > short.usage.prompt_tokens


def test_bad_requests_fail_loudly(backend):
    with pytest.raises(ValueError, match="two or more distinct"):
        backend.label([LabelRequest(Prompt("s", "u"), ("yes",), "judge")])
    with pytest.raises(ValueError, match="without maxItems"):
        backend.json([JsonRequest(Prompt("s", "u"), {"type": "object", "properties": {"x": {"type": "array"}}}, "x")])


def test_score_likelihoods(backend):
    """log p(line | context): negative, summed over the line's tokens, higher when the context already holds
    the line (every language model copies), identical alone and in a batch. OpenAI-compatible servers give no
    prompt log-probabilities through chat completions: refused, loudly."""
    line = "Ann: I adopted a cat named Milo yesterday.\n"
    reqs = [ScoreRequest("A conversation.\n\n" + line, line, "judge"), ScoreRequest("A conversation.\n\n", line, "judge")]
    if backend.name == "openai":
        with pytest.raises(BackendError, match="cannot score"):
            backend.score(reqs)
        return
    seen, unseen = backend.score(reqs)
    assert isinstance(seen, ScoreResult) and seen.usage.stage == "judge"
    assert seen.tokens == unseen.tokens > 0
    assert unseen.logprob < seen.logprob < 0
    # vLLM computes in bfloat16 and its kernels change with the batch's shape: alone and batched agree to ~0.2% there
    # (measured on its CPU build: 0.13 in 62 nats), exactly elsewhere
    tol = {"rel": 1e-2} if backend.name == "vllm" else {"abs": 1e-3}
    assert [r.logprob for r in backend.score(reqs[1:])] == pytest.approx([unseen.logprob], **tol)
    with pytest.raises(ValueError, match="non-empty context"):
        backend.score([ScoreRequest("", line, "judge")])
