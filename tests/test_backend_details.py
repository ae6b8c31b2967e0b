"""What each language-model backend does beyond the common contract (tests/test_backend_contract.py): llama.cpp's
scoring plan, prompt cache, grammar and per-stage contexts; vLLM's one generate call per batch, retries and install
hint; the OpenAI client's retries, request bodies, concurrency and embedder; transformers' load arguments; and
`make_backend` knowing every backend. Real engines where installed (llama.cpp with SmolLM2), doubles elsewhere."""
from __future__ import annotations

import json

import numpy as np
import pytest

import fake_vllm
from backend_doubles import MSGS, SCHEMA, FakeOpenAIServer, json_req, label_req, smollm_cfg, text_req
from membox_local.backends.base import (BackendError, JsonRequest, JsonResult, Prompt, ScoreRequest,
                                        StructuredOutputError, TextResult, continuation_logprob, fit_score_tokens,
                                        validate_json)
from membox_local.config import LLMConfig
from membox_local.prompts import CONTINUITY_LABELS, extract_prompt


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

    from membox_local.backends.llamacpp_grammar import grammar_greedy

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
    for token, as llama-cpp-python's create_completion constraining every token, the KV cache reused between the
    calls. Each side starts on empty caches: a prompt's greedy text may depend on what its instance evaluated
    before (config.py, flash_attn), which is not what this compares."""
    import dataclasses

    b, cfg = llamacpp_backend, llamacpp_backend.cfg
    reqs = [json_req(1), json_req(2), JsonRequest(extract_prompt(MSGS[1:], "2 May 2024"), SCHEMA, "extract", 120)]

    def from_empty_caches(check_first: bool) -> list:
        for llm in {id(x): x for x in (b.llm, *b._stage_llms.values())}.values():
            llm.reset()  # n_tokens 0: the next eval empties the KV cache first
        b.cfg = dataclasses.replace(cfg, grammar_check_first=check_first)
        return b.json_batch(reqs)

    try:
        whole, checked = from_empty_caches(False), from_empty_caches(True)
    finally:
        b.cfg = cfg
    for w, c in zip(whole, checked):
        assert isinstance(w, (JsonResult, StructuredOutputError)) and type(c) is type(w)
        assert c.raw == w.raw and c.raw
        assert c.usage.completion_tokens == w.usage.completion_tokens


def test_llamacpp_json_strings_refuse_raw_control_characters(llamacpp_backend):
    """llama-cpp-python's JSON-schema converter lets a raw newline into a string (the output then is not JSON: an
    EventWeave summary failed so); the backend's grammar keeps JSON's string characters, on the real vocabulary."""
    from membox_local.backends.llamacpp_grammar import GrammarSampler, json_gbnf

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


def test_llamacpp_prepare_makes_each_stage_instance_and_later_calls_answer_the_same(llamacpp_backend):
    """The real engine: `prepare` makes the stages' instances up front (a server does it at start) and decodes a
    short text in each; a request after it gets the same JSON as without it (greedy)."""
    import dataclasses

    b, cfg = llamacpp_backend, llamacpp_backend.cfg
    try:
        b.cfg = dataclasses.replace(cfg, stage_contexts=True)
        b._stage_llms = {}
        before = b.json_batch([json_req(1)])[0]
        b._stage_llms = {}
        b.prepare(["extract", "link"])
        assert set(b._stage_llms) == {"extract", "link"} and b._stage_llms["extract"] is not b._stage_llms["link"]
        after = b.json_batch([json_req(1)])[0]
    finally:
        b.cfg = cfg
    assert isinstance(after, JsonResult) and after.data == before.data


def test_a_memory_prepares_the_stages_its_systems_generate_in(tmp_path):
    import dataclasses

    from membox_local.backends.router import StageRouter
    from membox_local.config import load_config
    from membox_local.memory import Memory
    from membox_local.testing import FakeBackend, FakeEmbedder

    class Recording(FakeBackend):
        def __init__(self):
            super().__init__()
            self.prepared: list[str] = []

        def prepare(self, stages):
            self.prepared += list(stages)

    cfg = load_config("cpu-fast")
    b = Recording()
    Memory(tmp_path / "a", cfg, backend=b, embedder=FakeEmbedder()).prepare_build()
    assert b.prepared == ["extract", "link", "trace-init"]  # embedding judge: no judge stage
    cfg2 = dataclasses.replace(cfg, loom=dataclasses.replace(cfg.loom, judge="llm"),
                               weaver=dataclasses.replace(cfg.weaver, enabled=False),
                               memory=dataclasses.replace(cfg.memory, systems=["membox", "eventweave"]))
    b2 = Recording()
    Memory(tmp_path / "b", cfg2, backend=b2, embedder=FakeEmbedder()).prepare_build()
    assert b2.prepared == ["judge", "extract", "ew-extract", "ew-summary"]
    default, own = Recording(), Recording()  # a stage with a model of its own is prepared in that model
    StageRouter(default, {"ew-extract": own}).prepare(["extract", "ew-extract", "ew-summary"])
    assert default.prepared == ["extract", "ew-summary"] and own.prepared == ["ew-extract"]


def test_release_sampler_frees_the_last_generations_sampler_once():
    from membox_local.backends.llamacpp import release_sampler

    class Sampler:
        closed = 0

        def close(self):
            Sampler.closed += 1

    class Llm:
        _sampler = Sampler()

    llm = Llm()
    release_sampler(llm)
    release_sampler(llm)  # nothing left to free: no second close
    assert llm._sampler is None and Sampler.closed == 1
    release_sampler(object())  # an engine without the attribute: nothing to do


def test_llamacpp_text_generations_leave_no_sampler_for_the_garbage_collector(llamacpp_backend):
    """The real engine: llama-cpp-python keeps each generation's sampler chain (native buffers, in a reference
    cycle) until Python's full collection; after our text calls, plain and streamed, none is left alive."""
    import dataclasses
    import gc

    from llama_cpp._internals import LlamaSampler

    b = llamacpp_backend
    gc.collect()
    pieces: list[str] = []
    for _ in range(3):
        plain = b.text_batch([text_req()])[0]
        streamed = b.text_batch([dataclasses.replace(text_req(), on_text=pieces.append)])[0]
        assert isinstance(plain, TextResult) and isinstance(streamed, TextResult)
    gc.disable()  # count what reference counting alone left, as a server between its rare full collections
    try:
        alive = [o for o in gc.get_objects() if type(o) is LlamaSampler and o.sampler is not None]
    finally:
        gc.enable()
    assert alive == [] and b.llm._sampler is None


def test_llamacpp_grammar_checked_json_leaves_no_vocabulary_array_for_the_garbage_collector(llamacpp_backend):
    """The real engine: the grammar sampler's vocabulary-sized token array (one per JSON request) is freed by
    reference counting when the request ends, not left in a reference cycle for Python's rare full collections
    (ctypes.cast of an array made one: a server kept megabytes of them, issue 53)."""
    import ctypes
    import dataclasses
    import gc

    b, cfg = llamacpp_backend, llamacpp_backend.cfg
    n_vocab = b.llm.n_vocab()
    gc.collect()
    gc.disable()  # count what reference counting alone left, as a server between its rare full collections
    try:
        b.cfg = dataclasses.replace(cfg, grammar_check_first=True)
        for n in (1, 2, 1):
            assert isinstance(b.json_batch([json_req(n)])[0], (JsonResult, StructuredOutputError))
        alive = [o for o in gc.get_objects() if issubclass(type(o), ctypes.Array) and len(o) == n_vocab]
    finally:
        b.cfg = cfg
        gc.enable()
    assert alive == []


def test_llamacpp_flash_attn_key_reaches_every_instance_and_requests_still_answer():
    """[llm] flash_attn: each llama.cpp instance the backend makes (the main one, a stage's, the scorer) is made with
    it; the real engine answers JSON and text requests with it on (greedy output may differ from off: structure only)."""
    pytest.importorskip("llama_cpp")
    import llama_cpp

    from membox_local.backends.llamacpp import LlamaCppBackend

    b = LlamaCppBackend(smollm_cfg(flash_attn=True))
    try:
        on = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        assert b.llm.context_params.flash_attn_type == on
        assert b._make().context_params.flash_attn_type == on
        assert isinstance(b.json_batch([json_req(1)])[0], JsonResult)
        assert isinstance(b.text_batch([text_req()])[0], TextResult)
        b.score_batch([ScoreRequest("The cat is called", " Tom", "judge")])
        assert b._scorer.context_params.flash_attn_type == on
    finally:
        b.close()
