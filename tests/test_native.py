"""native.onednn_off: torch's oneDNN off inside, the process's flag set back by the last caller out, and MiniLM's
vectors the same with it off (native.py says why: native state per input shape, issue 53); MiniLM's weights resident
after make_resident."""
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from membox_local import native
from membox_local.native import onednn_off


@pytest.mark.parametrize("before", [True, False])
def test_the_flag_is_off_inside_and_set_back_after_calls_on_several_threads(before):
    import torch

    torch.backends.mkldnn.enabled = before
    seen, rnd = [], random.Random(0)
    pauses = [rnd.random() / 50 for _ in range(12)]

    def call(pause):
        with onednn_off():
            time.sleep(pause)
            seen.append(torch.backends.mkldnn.enabled)
            with onednn_off():  # nested: still off, and the outer call's exit sets it back
                seen.append(torch.backends.mkldnn.enabled)
            seen.append(torch.backends.mkldnn.enabled)

    try:
        threads = [threading.Thread(target=call, args=(p,)) for p in pauses]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(seen) == 36 and not any(seen)
        assert torch.backends.mkldnn.enabled is before
        with pytest.raises(RuntimeError):
            with onednn_off():
                raise RuntimeError("a failed call")
        assert torch.backends.mkldnn.enabled is before
    finally:
        torch.backends.mkldnn.enabled = True


@pytest.mark.integration
def test_minilm_gives_sentence_transformers_vectors_with_onednn_off():
    """The embedder's own MiniLM (minilm.py, run inside onednn_off) against sentence-transformers reading the same
    folder with oneDNN on: the same unit vectors, texts cut at 256 word pieces alike."""
    import torch
    from sentence_transformers import SentenceTransformer

    from membox_local.config import load_config
    from membox_local.embed import SentenceTransformerEmbedder
    from membox_local.weights import resolve_model

    cfg = load_config("cpu-ce").embedder
    emb = SentenceTransformerEmbedder(cfg)
    assert emb.lean is not None and emb.model is None
    texts = ["Caroline went to an LGBTQ support group yesterday.", "ok", "What did Melanie paint? " * 120, "",
             "Ünïcödé café, naïve 😀 THE CAPS"]
    off = emb.encode(texts)  # encode runs inside onednn_off
    assert torch.backends.mkldnn.enabled is True
    reference = SentenceTransformer(str(resolve_model(cfg.model)), device="cpu")
    vecs = reference.encode(texts, normalize_embeddings=True, convert_to_numpy=True)  # oneDNN on
    assert off.shape == vecs.shape == (5, emb.dim)
    assert np.abs(off - vecs).max() < 1e-5


def _resident_kb(path_part: str) -> int:
    """KiB of this process's mappings of files whose path holds `path_part` that are resident (/proc/self/smaps)."""
    total, mine = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0]:
            mine = len(head) > 5 and path_part in head[5]
        elif mine and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_minilm_weights_are_resident_after_make_resident_so_new_words_add_none():
    """safetensors maps the weights: a word-embedding page becomes resident when a text first uses one of its words.
    After make_resident the whole file is; texts with words never seen before add no resident page of it."""
    from membox_local.config import load_config
    from membox_local.embed import SentenceTransformerEmbedder
    from membox_local.weights import resolve_model

    cfg = load_config("cpu-ce").embedder
    emb = SentenceTransformerEmbedder(cfg)
    weights = next(resolve_model(cfg.model).rglob("*.safetensors"))
    emb.encode(["warm up"])
    before = _resident_kb(weights.name)
    emb.make_resident()
    resident = _resident_kb(weights.name)
    assert resident > before and resident * 1024 >= 0.95 * weights.stat().st_size
    rare = ["zygomorphic quokka xylophone", "Kierkegaard's axolotl ombudsman", "ptarmigan gazpacho fjord vellum"]
    emb.encode(rare)
    assert _resident_kb(weights.name) - resident < 64  # no new weights page (a few pages' slack)


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_a_memory_reads_in_its_embedder_and_its_judges_cross_encoder(tmp_path):
    """Memory.make_resident (a server at start) on the CPU default: the embedder's and the continuity cross-encoder's
    mappings of MiniLM's weights file are both resident, though nothing was filed or embedded yet."""
    from membox_local.config import load_config
    from membox_local.memory import Memory
    from membox_local.weights import resolve_model

    cfg = load_config("cpu-ce")
    weights = next(resolve_model(cfg.embedder.model).rglob("*.safetensors"))
    memory = Memory(tmp_path / "mem", cfg)
    try:
        memory.make_resident()
        assert _resident_kb(weights.name) * 1024 >= 2 * 0.95 * weights.stat().st_size
    finally:
        memory.close()


def test_the_heap_is_trimmed_at_most_once_per_interval_over_all_threads(monkeypatch):
    calls = []
    monkeypatch.setattr(native, "_malloc_trim", lambda pad: calls.append(pad) or 1)
    monkeypatch.setattr(native, "_trimmed_at", float("-inf"))
    results = []
    threads = [threading.Thread(target=lambda: results.append(native.give_back_freed_heap(60.0))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True] and calls == [0]
    assert native.give_back_freed_heap(0.0) and calls == [0, 0]  # no interval: every call trims


def test_without_glibc_the_heap_is_left_as_it_is(monkeypatch):
    monkeypatch.setattr(native, "_malloc_trim", False)
    monkeypatch.setattr(native, "_trimmed_at", float("-inf"))
    assert native.give_back_freed_heap(0.0) is False




@pytest.mark.integration
def test_minilm_gives_transformers_token_states_for_pairs():
    """The cross-encoders' encoder (minilm.load) against transformers' BertModel on the same folder: a batch of
    (question, line) pairs, padded and cut as the evidence reading cuts them, gives the same last-layer states."""
    import torch
    from transformers import AutoModel

    from membox_local import minilm
    from membox_local.weights import resolve_model

    folder = resolve_model("all-minilm-l6-v2")
    model, tok = minilm.load(folder)
    enc = tok(["What did Caroline paint?", "When did Tom adopt his cat?"],
              ["Caroline: I painted a lake at sunrise last week. " * 20, "Tom: Pepper!"],
              truncation="only_second", max_length=128)
    reference = AutoModel.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        ours, theirs = model(**enc), reference(**enc).last_hidden_state
    mask = enc["attention_mask"].bool()
    assert enc["input_ids"].shape[1] == 128 and torch.allclose(ours[mask], theirs[mask], atol=1e-4)
