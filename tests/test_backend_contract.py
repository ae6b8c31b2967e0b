"""One contract every language-model backend passes: labels, JSON, text, batching, token counts, errors.

Backends: the FakeBackend; llama.cpp with SmolLM2 (skipped without llama_cpp); OpenAI against a fake
HTTP server here and against llama-cpp-python's server (skipped without it); vLLM against a fake
`vllm` module and against the real engine (its CPU build, in .venv-vllm: `make test-vllm`); transformers with SmolLM2's GGUF (skipped without transformers,
outlines, gguf and accelerate; opt-in with MEMBOX_TRANSFORMERS_CONTRACT=1, as it is slow here).
"""
from __future__ import annotations

import json
import os
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import fake_vllm
from membox_local.testing import FakeBackend
from membox_local.backends.base import (BackendError, JsonRequest, JsonResult, LabelRequest, LabelResult, Prompt,
                                        ScoreRequest, ScoreResult, StructuredOutputError, TextRequest, TextResult,
                                        continuation_logprob, fit_score_tokens, validate_json)
from membox_local.config import LLMConfig, load_config
from membox_local.prompts import CONTINUITY_LABELS, answer_prompt, continuity_prompt, extract_prompt, extract_schema
from membox_local.records import Message

MSGS = [Message("c", "1", "Ann", "I adopted a cat named Milo yesterday."),
        Message("c", "2", "Bob", "Nice! What colour is Milo?"),
        Message("c", "3", "Ann", "He is orange and sleeps all day.")]
SCHEMA = extract_schema(load_config("cpu-fast").extract)


def label_req(logprobs=False, n=1):
    return LabelRequest(continuity_prompt(MSGS[:n], MSGS[n]), CONTINUITY_LABELS, "judge", logprobs)


def json_req(n=2):
    return JsonRequest(extract_prompt(MSGS[:n], "1 May 2024"), SCHEMA, "extract", max_tokens=200)


def text_req(q="What is the cat called?"):
    return TextRequest(answer_prompt("\n".join(m.render() for m in MSGS), q), "answer", max_tokens=16)


# ---- a fake OpenAI-compatible HTTP server ------------------------------------------------------------
class FakeOpenAIServer:
    """Honours response_format (json_schema), logprobs and usage; `script` queues HTTP error codes."""

    def __init__(self, delay_s: float = 0.0):
        self.requests: list[dict] = []
        self.script: list[int] = []
        self.delay_s = delay_s
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                    status = outer.script.pop(0) if outer.script else 200
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                time.sleep(outer.delay_s)
                with outer.lock:
                    outer.in_flight -= 1
                if status != 200:
                    return self._send(status, {"error": {"message": f"scripted {status}", "type": "test"}})
                self._send(200, outer.answer(body))

            def _send(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> dict:
        text = json.dumps(body["messages"])
        seed = zlib.crc32(text.encode())
        logprobs = None
        fmt = body.get("response_format")
        if fmt:
            schema = fmt["json_schema"]["schema"]
            content = json.dumps(fake_vllm.minimal_instance(schema, seed))
            if body.get("logprobs"):
                labels = schema["properties"]["label"]["enum"]
                value = json.loads(content)["label"]
                top = [{"token": label[:2], "logprob": -0.1 if label == value else -2.0 - i}
                       for i, label in enumerate(labels)]
                toks = ['{"', 'label', '":"', value[:2], value[2:], '"}']
                logprobs = {"content": [{"token": t, "logprob": -0.1, "top_logprobs": top if t == value[:2] else []}
                                        for t in toks]}
        else:
            content = "a short fake answer"
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": logprobs,
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": len(text.split()), "completion_tokens": len(content.split()),
                          "total_tokens": 0}}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# ---- backends under test -----------------------------------------------------------------------------
def smollm_cfg(**kw) -> LLMConfig:
    cfg = load_config("cpu-fast").llm
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


@pytest.fixture(scope="module")
def llamacpp_backend():
    pytest.importorskip("llama_cpp")
    from membox_local.backends.llamacpp import LlamaCppBackend

    b = LlamaCppBackend(smollm_cfg())
    yield b
    b.close()


@pytest.fixture(scope="module")
def openai_fake_server():
    s = FakeOpenAIServer()
    yield s
    s.close()


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


def test_continuation_logprob_and_cuts():
    import numpy as np

    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]))
    # tokens 0 -> 1 -> 2: p(1 | 0) = 0.25, p(2 | 0 1) = 0.1; from position 2 only the last
    assert continuation_logprob(logits, 1, [0, 1, 2]) == pytest.approx(np.log(0.25 * 0.1))
    assert continuation_logprob(logits, 2, [0, 1, 2]) == pytest.approx(np.log(0.1))
    assert fit_score_tokens([1, 2, 3], [4, 5], 10) == ([1, 2, 3], [4, 5])
    assert fit_score_tokens([1, 2, 3], [4, 5, 6, 7, 8, 9], 6) == ([1, 2, 3], [4, 5, 6])  # cut: half each, ends kept
    assert fit_score_tokens(list(range(10)), [4, 5], 6) == ([6, 7, 8, 9], [4, 5])


def test_llamacpp_score_plan_reuses_the_cache_and_asks_logits_only_for_the_continuation():
    from membox_local.backends.llamacpp import LlamaCppAdapter

    plan = LlamaCppAdapter.score_plan
    # nothing cached: every position decoded, logits only at positions 2..4 (they predict tokens 3..5)
    keep, chunks = plan([], [9, 8, 7, 6, 5, 4], 3, 512)
    assert keep == 0 and chunks == [[(0, False), (1, False), (2, True), (3, True), (4, True), (5, False)]]
    # a shared prefix is kept, but never the position that predicts the continuation's first token
    assert plan([9, 8, 7, 1, 1], [9, 8, 7, 6, 5, 4], 3, 512)[0] == 2
    assert plan([9, 1], [9, 8, 7, 6], 3, 512)[0] == 1
    # chunks of at most n_batch
    keep, chunks = plan([], list(range(5)), 1, 2)
    assert [len(c) for c in chunks] == [2, 2, 1] and [p for c in chunks for p, _ in c] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="continuation start"):
        plan([], [1, 2], 2, 512)


def test_llamacpp_cached_prefix_is_what_the_kv_cache_keeps():
    from membox_local.backends.llamacpp import cached_prefix

    assert cached_prefix([], [1, 2, 3]) == 0
    assert cached_prefix([1, 2, 9], [1, 2, 3, 4]) == 2
    assert cached_prefix([1, 2, 3], [1, 2, 3]) == 2  # the last token is read again for its logits
    assert cached_prefix([1, 2, 3, 4, 5], [1, 2, 3]) == 2


def test_store_reports_tokens_read_only_where_every_call_said():
    from membox_local.store import Store

    s = Store(":memory:")
    s.record_usage("c", "extract", 100, 10, cached_tokens=60)
    s.record_usage("c", "extract", 50, 5, cached_tokens=0)
    s.record_usage("c", "link", 80, 2, cached_tokens=30)
    s.record_usage("c", "link", 80, 2)  # a backend that does not say
    u = s.usage_by_stage("c")
    assert u["extract"] == {"calls": 2, "prompt_tokens": 150, "completion_tokens": 15, "read_tokens": 90}
    assert "read_tokens" not in u["link"] and u["link"]["prompt_tokens"] == 160


def test_openai_usage_reads_the_servers_cached_tokens():
    from types import SimpleNamespace as NS

    from membox_local.backends.openai import OpenAIAdapter

    with_cache = NS(usage=NS(prompt_tokens=120, completion_tokens=5, prompt_tokens_details=NS(cached_tokens=64)))
    without = NS(usage=NS(prompt_tokens=120, completion_tokens=5, prompt_tokens_details=None))
    assert OpenAIAdapter.usage(with_cache, "extract").cached_tokens == 64
    assert OpenAIAdapter.usage(without, "extract").cached_tokens is None


def test_grammar_greedy_checks_the_best_token_first_and_picks_what_constraining_first_would():
    import numpy as np

    from membox_local.backends.llamacpp import grammar_greedy

    rng = np.random.default_rng(0)
    for _ in range(300):
        logits = rng.normal(size=50).astype(np.float32)
        allowed = rng.random(50) < rng.choice([0.02, 0.3, 0.9])
        allowed[rng.integers(50)] = True
        constrained = np.where(allowed, logits, -np.inf)
        calls = []

        def constrain(x):
            calls.append(1)
            return np.where(allowed, x, -np.inf)

        token = grammar_greedy(logits, lambda t: bool(allowed[t]), constrain)
        assert token == int(np.argmax(constrained))
        assert calls == ([] if allowed[int(np.argmax(logits))] else [1])  # the vocabulary only when refused
    with pytest.raises(BackendError, match="allows no token"):
        grammar_greedy(np.zeros(4), lambda t: False, lambda x: np.full_like(x, -np.inf))


def test_llamacpp_grammar_first_check_writes_what_the_whole_vocabulary_grammar_writes(llamacpp_backend):
    """The real engine: JSON generated with the grammar checking the best token first is the same text, token
    for token, as llama-cpp-python's create_completion constraining every token (with the KV cache reused or not)."""
    import dataclasses

    b, cfg = llamacpp_backend, llamacpp_backend.cfg
    reqs = [json_req(1), json_req(2), JsonRequest(extract_prompt(MSGS[1:], "2 May 2024"), SCHEMA, "extract", 120)]
    try:
        b.cfg = dataclasses.replace(cfg, grammar_check_first=False)
        whole = b.json_batch(reqs)
        b.cfg = dataclasses.replace(cfg, grammar_check_first=True)
        checked = b.json_batch(reqs)
        again = b.json_batch(reqs[::-1])[::-1]
    finally:
        b.cfg = cfg
    for w, c, a in zip(whole, checked, again):
        assert isinstance(w, (JsonResult, StructuredOutputError)) and type(c) is type(w) and type(a) is type(w)
        assert c.raw == w.raw == a.raw and c.raw
        assert c.usage.completion_tokens == w.usage.completion_tokens


def test_llamacpp_json_strings_refuse_raw_control_characters(llamacpp_backend):
    """llama-cpp-python's JSON-schema converter lets a raw newline into a string (the output then is not JSON: an
    EventWeave summary failed so); the backend's grammar keeps JSON's string characters, on the real vocabulary."""
    from membox_local.backends.llamacpp import GrammarSampler, json_gbnf

    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 40}}, "required": ["s"]}
    assert 'char ::= [^"\\\\\\x7F\\x00-\\x1F]' in json_gbnf(schema)
    b = llamacpp_backend
    for kind in ("checked", "whole"):
        g = GrammarSampler(b._proto("control-characters", schema), b.llm.n_vocab())
        try:
            for t in b.tokenize('{"s": "one', special=False):
                assert g.accepts(t)
                g.accept(t)
            refused = [b.tokenize(c, special=False) for c in ("\n", "\t", "\r")]
            assert all(len(t) == 1 and not g.accepts(t[0]) for t in refused)
            assert g.accepts(b.tokenize(" two", special=False)[0])
            if kind == "whole":  # constraining the vocabulary: no token holding a control character is left
                allowed = np.flatnonzero(np.isfinite(g.constrain(np.zeros(b.llm.n_vocab(), dtype=np.float32))))
                assert not any(set(b.llm.detokenize([int(t)])) & set(range(32)) for t in allowed)
        finally:
            g.close()


def test_llamacpp_stage_contexts_give_each_stage_its_own_instance_up_to_the_cap():
    pytest.importorskip("llama_cpp")
    import dataclasses

    from membox_local.backends.llamacpp import MAX_STAGE_CONTEXTS, LlamaCppBackend

    b = LlamaCppBackend.__new__(LlamaCppBackend)  # no engine: instances are plain objects
    made = []
    b.llm, b._stage_llms = "main", {}
    b._make = lambda: made.append(f"ctx{len(made) + 1}") or made[-1]
    b.cfg = LLMConfig()
    stages = ["extract", "link", "trace-init", "answer", "extract", "link"]
    got = [b._context(st) for st in stages]
    assert MAX_STAGE_CONTEXTS == 3 and got == ["main", "ctx1", "ctx2", "main", "main", "ctx1"] and len(made) == 2
    b.cfg, b._stage_llms = dataclasses.replace(b.cfg, stage_contexts=False), {}
    assert {b._context(st) for st in stages} == {"main"} and len(made) == 2


def test_llamacpp_stage_contexts_keep_each_stage_instructions_cached(llamacpp_backend):
    """The real engine: extraction and linking alternate, and each stage's instance still holds its own
    instructions at the start of its KV cache; the outputs are valid JSON in both settings."""
    import dataclasses

    from membox_local.prompts import link_prompt, link_schema

    b, cfg = llamacpp_backend, llamacpp_backend.cfg
    link = JsonRequest(link_prompt("Ann's cat", [("Ann adopted Milo", "1 May")], ["Milo is orange"], "2 May"),
                       link_schema(1), "link", max_tokens=30)
    try:
        b.cfg = dataclasses.replace(cfg, stage_contexts=True)
        b._stage_llms = {}
        res = b.json_batch([json_req(1), link, json_req(2), link])
        ex, ln = b._context("extract"), b._context("link")
        assert ex is not ln
        for llm, req in ((ex, json_req(2)), (ln, link)):
            system = b.prompt_tokens(Prompt(req.prompt.system, ""))[:20]
            assert list(llm._input_ids[:20]) == system  # the stage's instructions stay cached
        b.cfg = dataclasses.replace(cfg, stage_contexts=False)
        res_one = b.json_batch([json_req(1), link, json_req(2), link])
    finally:
        b.cfg = cfg
    # what was read: the same link request again keeps all but its last token in its own instance; in one shared
    # instance the extraction between them evicted it
    assert res[3].usage.cached_tokens == res[3].usage.prompt_tokens - 1
    assert res_one[3].usage.cached_tokens < res[3].usage.cached_tokens
    for results in (res, res_one):
        for r, schema in zip(results, [SCHEMA, link.schema, SCHEMA, link.schema]):
            assert isinstance(r, JsonResult) and validate_json(r.data, schema) == []


def test_llamacpp_scores_do_not_depend_on_what_was_scored_before(llamacpp_backend):
    """The scorer reuses the KV cache of the previous request's shared prefix: the same request scores the same
    (to float noise from a different batch split) after any predecessor, and as the exact sum of its tokens."""
    line = "Ann: I adopted a cat named Milo yesterday.\n"
    req = ScoreRequest("A conversation.\n\nBob: Any news?\n", line, "judge")
    first = llamacpp_backend.score([req])[0].logprob
    after_other = llamacpp_backend.score([ScoreRequest("A conversation.\n\nBob: Hi.\n", line, "judge"), req])[1]
    again = llamacpp_backend.score([req])[0]
    assert after_other.logprob == pytest.approx(first, abs=0.01 * after_other.tokens)
    assert again.logprob == pytest.approx(first, abs=0.01 * again.tokens)


def test_vllm_score_requests_use_prompt_logprobs(monkeypatch):
    fake_vllm.install(monkeypatch)
    from membox_local.backends.vllm import VLLMBackend

    b = VLLMBackend(smollm_cfg(backend="vllm"), model="/models/fake")
    [res] = b.score([ScoreRequest("ab", "ba", "judge")])
    prompts, params = b.llm.calls[-1]
    assert prompts == [{"prompt_token_ids": [ord(c) for c in "abba"]}]
    assert params[0].kwargs == {"temperature": 1.0, "max_tokens": 1, "prompt_logprobs": 1, "seed": 0}
    assert res.tokens == 2 and res.logprob == pytest.approx(-1.0)  # both characters seen just before
    with pytest.raises(BackendError, match="no prompt log-probability"):
        b.adapter.prompt_continuation_logprob([None, {}], [1, 2], 1)


# ---- backend-specific behaviour ----------------------------------------------------------------------
def test_vllm_one_generate_call_per_batch_with_exact_arguments(monkeypatch):
    fake_vllm.install(monkeypatch)
    from membox_local.backends.vllm import VLLMBackend

    cfg = smollm_cfg(backend="vllm", dtype="bfloat16", gpu_memory_utilization=0.5, max_model_len=4096,
                     max_num_seqs=64, tensor_parallel_size=2, seed=7)
    b = VLLMBackend(cfg, model="/models/qwen")
    llm = fake_vllm.LLM.instances[-1]
    assert llm.kwargs == {"model": "/models/qwen", "dtype": "bfloat16", "gpu_memory_utilization": 0.5,
                          "max_model_len": 4096, "max_num_seqs": 64, "tensor_parallel_size": 2, "seed": 7,
                          "enable_prefix_caching": True, "logprobs_mode": "processed_logprobs",
                          "enforce_eager": False, "structured_outputs_config": {"backend": "outlines"}}
    b.label([label_req(n=1), label_req(logprobs=True, n=2)])
    b.json([json_req(1), json_req(2), json_req(3)])
    assert len(llm.calls) == 2  # one generate per batch
    prompts, params = llm.calls[0]
    assert prompts[0].startswith("<|system|>") and prompts[0].endswith("<|assistant|>")
    assert params[0].structured_outputs.choice == list(CONTINUITY_LABELS)
    assert params[0].kwargs["temperature"] == 0.0 and params[0].kwargs["seed"] == 7
    assert params[1].allowed_token_ids == [ord("y"), ord("p"), ord("n")] and params[1].logprobs == 3
    assert params[1].max_tokens == 1 and params[1].structured_outputs is None
    assert all(p.structured_outputs.json == SCHEMA and p.max_tokens == 200 for p in llm.calls[1][1])
    compact = VLLMBackend(smollm_cfg(backend="vllm", structured_engine="xgrammar"), model="m")
    assert fake_vllm.LLM.instances[-1].kwargs["structured_outputs_config"] == {"backend": "xgrammar",
                                                                             "disable_any_whitespace": True}
    compact.close()
    b.close()
    assert b.llm is None and llm.llm_engine.shut_down


def test_vllm_json_retry_is_batched_and_errors_are_results(monkeypatch):
    fake_vllm.install(monkeypatch)
    from membox_local.backends.vllm import VLLMBackend

    b = VLLMBackend(smollm_cfg(backend="vllm", max_retries=1), model="m")
    llm = fake_vllm.LLM.instances[-1]
    good = json.dumps({"topic": "cat", "keywords": ["Milo"], "events": []})
    llm.json_script = ['{"topic": "cat"', good, '{"topic": 1}', good, '{"topic": "still bad"']
    res = b.json([json_req(1), json_req(2), json_req(3)])
    assert [len(c[0]) for c in llm.calls] == [3, 2]  # the two failures retried together
    assert isinstance(res[1], JsonResult) and res[1].data["keywords"] == ["Milo"]
    assert isinstance(res[0], JsonResult)  # its retry got the next (valid) scripted output
    assert isinstance(res[2], StructuredOutputError) and "not JSON" in str(res[2])
    assert res[2].usage.prompt_tokens > 0


def test_vllm_unconstrained_label_output_fails_loudly(monkeypatch):
    fake_vllm.install(monkeypatch)
    from membox_local.backends.vllm import VLLMBackend

    b = VLLMBackend(smollm_cfg(backend="vllm"), model="m")
    fake_vllm.LLM.instances[-1].bad_choice = True
    with pytest.raises(BackendError, match="not one of"):
        b.label([label_req()])


def test_vllm_missing_is_an_install_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)
    from membox_local.backends.vllm import VLLMBackend

    with pytest.raises(ImportError, match="pip install"):
        VLLMBackend(smollm_cfg(backend="vllm"), model="m")


def test_openai_retries_transient_errors_with_backoff(openai_fake_server):
    from membox_local.backends.openai import OpenAIBackend

    b = OpenAIBackend(smollm_cfg(backend="openai", model="fake", base_url=openai_fake_server.url))
    waits = []
    b.sleep = waits.append
    openai_fake_server.script[:] = [429, 503, 500]
    [res] = b.text([text_req()])
    assert isinstance(res, TextResult) and waits == [0.5, 1.0, 2.0]
    openai_fake_server.script[:] = [429] * 10
    b.retries = 2
    with pytest.raises(BackendError, match="kept failing after 3 attempts"):
        b.text([text_req()])
    openai_fake_server.script[:] = [401]
    with pytest.raises(BackendError, match="HTTP 401"):
        b.text([text_req()])
    openai_fake_server.script.clear()
    b.close()


def test_openai_request_bodies_and_concurrency():
    from membox_local.backends.openai import OpenAIBackend

    server = FakeOpenAIServer(delay_s=0.05)
    try:
        b = OpenAIBackend(smollm_cfg(backend="openai", model="served-name", base_url=server.url, max_concurrency=3))
        b.label([label_req(logprobs=True)])
        body = server.requests[-1]
        assert body["model"] == "served-name" and body["temperature"] == 0.0 and body["top_logprobs"] == 20
        assert body["response_format"]["json_schema"]["strict"] is True
        assert body["response_format"]["json_schema"]["schema"]["properties"]["label"]["enum"] == list(CONTINUITY_LABELS)
        b.json([json_req()])
        schema = server.requests[-1]["response_format"]["json_schema"]["schema"]
        assert schema["additionalProperties"] is False and schema["properties"]["keywords"]["maxItems"] == SCHEMA["properties"]["keywords"]["maxItems"]
        server.max_in_flight = 0
        b.text([text_req()] * 9)
        assert server.max_in_flight == 3
        b.close()
    finally:
        server.close()


def test_openai_needs_a_key_or_a_server(monkeypatch):
    from membox_local.backends.openai import OpenAIBackend

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(BackendError, match="OPENAI_API_KEY"):
        OpenAIBackend(smollm_cfg(backend="openai", model="gpt"))


def test_openai_embedder(openai_fake_server, monkeypatch):
    import numpy as np

    from membox_local.backends.openai import OpenAIEmbedder
    from membox_local.config import EmbedderConfig

    class Client:  # the embeddings endpoint, in process
        class embeddings:
            @staticmethod
            def create(model, input):
                rows = [type("R", (), {"index": i, "embedding": [len(t), 1.0, 0.0]}) for i, t in enumerate(input)]
                return type("Resp", (), {"data": rows[::-1]})

    e = OpenAIEmbedder(EmbedderConfig(backend="openai", model="emb", batch_size=2), client=Client())
    v = e.encode(["a", "bbb", "cc"])
    assert v.shape == (3, 3) and e.dim == 3
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0) and v[1, 0] > v[0, 0]


def test_transformers_adapter_load_args(tmp_path):
    from membox_local.backends.transformers import TransformersAdapter

    (tmp_path / "m.gguf").write_bytes(b"")
    assert TransformersAdapter.load_args(tmp_path / "m.gguf") == (str(tmp_path), {"gguf_file": "m.gguf"})
    with pytest.raises(BackendError, match="config.json"):
        TransformersAdapter.load_args(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert TransformersAdapter.load_args(tmp_path) == (str(tmp_path), {})
    a = TransformersAdapter(smollm_cfg())
    assert a.generate_kwargs(5) == {"max_new_tokens": 5, "do_sample": False}


def test_make_backend_knows_every_backend():
    from membox_local.backends import BACKENDS, make_backend

    assert set(BACKENDS) == {"llamacpp", "openai", "vllm", "transformers"}
    with pytest.raises(ValueError, match="unknown LLM backend"):
        make_backend(smollm_cfg(backend="nope"))
