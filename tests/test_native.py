"""native.onednn_off: torch's oneDNN off inside, the process's flag set back by the last caller out, and MiniLM's
vectors the same with it off (native.py says why: native state per input shape, issue 53)."""
import random
import threading
import time

import numpy as np
import pytest

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
def test_minilm_gives_the_same_vectors_with_onednn_off():
    import torch

    from membox_local.config import load_config
    from membox_local.embed import SentenceTransformerEmbedder

    emb = SentenceTransformerEmbedder(load_config("cpu-ce").embedder)
    texts = ["Caroline went to an LGBTQ support group yesterday.", "ok", "What did Melanie paint? " * 12]
    off = emb.encode(texts)  # encode runs inside onednn_off
    assert torch.backends.mkldnn.enabled is True
    vecs = emb.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)  # oneDNN on
    assert off.shape == vecs.shape == (3, emb.dim)
    assert np.min(np.sum(off * vecs, axis=1)) > 0.9999


@pytest.mark.integration
def test_llamacpp_attention_room_grows_with_the_kv_cache_unless_flash_attention(tmp_path):
    """benchmarks/attention_memory.py on the tests' model: each arm in its own process, the saved figures complete;
    filling the context after the prepare batch adds resident memory with flash attention off, less with it on."""
    import json

    pytest.importorskip("llama_cpp")
    from conftest import benchmark_script

    out = tmp_path / "attention.json"
    assert benchmark_script("attention_memory").main(["--model", "smollm2-135m", "--n-ctx", "1024", "--threads", "1",
                                                      "--save", str(out)]) == 0
    arms = json.loads(out.read_text())["arms"]
    for r in arms.values():
        assert list(r["by_depth_mb"]) == ["960"] and r["loaded_mb"] <= r["prepared_mb"]
    assert arms["off"]["growth_after_prepare_mb"] > arms["on"]["growth_after_prepare_mb"] + 5
