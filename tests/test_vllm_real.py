"""The real vLLM engine: its CPU build on this machine (`make install-vllm` makes .venv-vllm, `make test-vllm`
runs this file and the vLLM case of tests/test_backend_contract.py there); skipped where vllm is not installed.

The model is SmolLM2-135M as a Hugging Face folder derived from the shipped GGUF (fast; its records are
unusable, so these tests assert structure, not content); MEMBOX_VLLM_TEST_MODEL names another manifest model
(e.g. qwen2.5-coder-0.5b-hf, what configs/vllm-cpu.toml builds with).
"""
from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="vLLM is not installed in this venv: `make install-vllm`, then `make test-vllm`")

from membox_local import weights  # noqa: E402
from membox_local.compare import compare  # noqa: E402
from membox_local.config import load_config  # noqa: E402
from membox_local.ingest import load_messages  # noqa: E402
from membox_local.memory import Memory  # noqa: E402

from conftest import DEMO  # noqa: E402

MODEL = os.environ.get("MEMBOX_VLLM_TEST_MODEL", "smollm2-135m-hf")
QUESTIONS = ["Which race did Maya sign up for?", "What is the name of Tom's cat?"]


def vllm_config(model: str = MODEL):
    cfg = load_config("vllm-cpu", {"llm.model": model})
    cfg.answer.llm = {}  # the vLLM model answers too
    return cfg


def test_derived_folder_is_recorded_and_complete():
    manifest = weights.load_manifest()
    spec = manifest[MODEL]
    folder = weights.resolve_model(MODEL)
    source_sha = manifest[spec.source].sha256 or weights.sha256_file(weights.resolve_model(spec.source))
    assert weights.derived_record_problem(folder, spec, source_sha) is None
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "tokenizer_config.json", weights.RECORD} <= names
    assert any(n.endswith(".safetensors") for n in names)
    assert "quantization_config" not in (folder / "config.json").read_text()  # plain tensors, no GGUF loader


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The demo conversation built on vLLM: hybrid judge (its LLM scores from prompt log-probabilities),
    extraction under a JSON schema, the Weaver, and answers, all from the one engine."""
    mem = Memory(tmp_path_factory.mktemp("vllm") / "mem", vllm_config())
    mem.add(load_messages(DEMO), seal=True)
    yield mem
    mem.close()


def test_demo_builds_end_to_end_on_vllm(built):
    conv = "maya-tom"
    boxes = built.boxes(conv)
    filed = [m.message_id for b in boxes for m in b.messages]
    assert len(boxes) >= 2 and sorted(filed) == sorted(m.message_id for m in load_messages(DEMO))
    assert all(b.status in ("extracted", "failed") for b in boxes)
    extracted = [b for b in boxes if b.status == "extracted"]
    assert extracted and all(b.error.startswith("extraction failed") for b in boxes if b.status == "failed")
    for b in extracted:  # records keep the schema's bounds, from vLLM's own grammar-constrained decoding
        ec = built.config.extract
        assert len(b.keywords) <= ec.max_keywords and len(b.events) <= ec.max_events
        assert all(len(e.text) <= ec.max_event_chars for e in b.events)
    usage = built.store.usage_by_stage(conv)
    assert {"judge", "extract"} <= set(usage) and usage["extract"]["completion_tokens"] > 0
    unwoven = built.store.unwoven_boxes(conv)  # a failed weave is recorded on its box and retried by the next build
    assert len(unwoven) < len(extracted) and all(b.error.startswith("weaving failed") for b in unwoven)
    assert built.store.traces(conv)
    for q in QUESTIONS:
        ans = built.answer(q, conv)
        assert ans.text.strip() and ans.context.box_ids


def test_compare_llamacpp_with_vllm_on_the_same_weights(tmp_path):
    """llama.cpp on the GGUF against vLLM on the folder dequantized from it: the report has every stage."""
    spec = weights.load_manifest()[MODEL]
    cfg_a = load_config("vllm-cpu", {"llm.backend": "llamacpp", "llm.model": spec.source})
    cfg_a.answer.llm = {}
    msgs = load_messages(DEMO)[:16]
    r = compare(cfg_a, vllm_config(), msgs, tmp_path, asks=QUESTIONS[:1])
    row = r["conversations"]["maya-tom"]
    assert 0.0 <= row["labels"]["agreement"] <= 1.0 and row["labels"]["messages"] == 16
    assert row["boxes"]["A"] >= 1 and row["boxes"]["B"] >= 1
    assert row["failed_boxes"]["B"] <= row["boxes"]["B"]
    [asked] = row["answers"]
    assert asked["A"].strip() and asked["B"].strip() and 0.0 <= asked["f1_between"] <= 1.0
    assert r["cost"]["B"]["llm_usage"]["judge"]["calls"] > 0
