"""llama.cpp's grammars for the llamacpp backend's JSON stages: a JSON schema's GBNF grammar (`json_gbnf`), one
request's grammar state (`GrammarSampler`) and the greedy token under it, checked best-token-first
(`grammar_greedy`; [llm] grammar_check_first)."""
from __future__ import annotations

import json
from typing import Callable

import numpy as np

from .base import BackendError

# llama-cpp-python's port of llama.cpp's JSON-schema converter lets any character but a quote or a backslash into a
# string (`char ::= [^"\\]`), so a raw newline could end up inside one and the output not parse as JSON (seen: an
# EventWeave summary, "Invalid control character"). llama.cpp's own converter excludes the control characters.
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'


def json_gbnf(schema: dict) -> str:
    """The GBNF grammar of a JSON schema (llama-cpp-python's converter), with JSON's own string characters: no raw
    control character inside a string."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return json_schema_to_gbnf(json.dumps(schema)).replace(_LOOSE_CHAR, _JSON_CHAR)


def grammar_greedy(logits: np.ndarray, accepts: Callable[[int], bool],
                   constrain: Callable[[np.ndarray], np.ndarray]) -> int:
    """The greedy token under a grammar, found cheaply: the unconstrained best token, if the grammar accepts it
    (one token checked), else the best of what the grammar allows over the whole vocabulary (`constrain` returns
    the logits with refused tokens at -inf). The same token as constraining first, since the best token that the
    grammar accepts is the best allowed one; llama.cpp's own server samples this way. Checking one token instead of
    ~150,000 (Qwen's vocabulary) per generated token: 1.03-1.7x on the JSON stages (benchmarks/json_levers.py)."""
    best = int(np.argmax(logits))
    if accepts(best):
        return best
    allowed = constrain(logits)
    best = int(np.argmax(allowed))
    if not np.isfinite(allowed[best]):
        raise BackendError("the JSON grammar allows no token here")
    return best


class GrammarSampler:
    """One request's grammar state in llama.cpp (a grammar sampler cloned from a parsed prototype): `accepts`
    checks one token, `constrain` the whole vocabulary, `accept` advances the state past the chosen token."""

    def __init__(self, proto, n_vocab: int):
        import ctypes

        import llama_cpp

        self._lib, self._ct = llama_cpp, ctypes
        self.smpl = llama_cpp.llama_sampler_clone(proto)
        self._one = (llama_cpp.llama_token_data * 1)()
        self._all = (llama_cpp.llama_token_data * n_vocab)()
        # Pointers made from the arrays' addresses: ctypes.cast(array, ...) files the array in its own `_objects`,
        # a reference cycle that left each request's vocabulary-sized array (0.6-1.8 MB) to Python's rare full
        # collections: a server under an add-only load kept 13.6 MB of them in 3.5 minutes (issue 53; heaptrack,
        # benchmarks/heap_leaks.py). These pointers keep nothing alive; the arrays live as long as this sampler.
        self._one_p = ctypes.cast(ctypes.addressof(self._one), llama_cpp.llama_token_data_p)
        self._all_p = ctypes.cast(ctypes.addressof(self._all), llama_cpp.llama_token_data_p)
        view = np.frombuffer(self._all, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
        view["id"] = np.arange(n_vocab, dtype=np.int32)
        self._view = view

    def _apply(self, data, size: int) -> None:
        arr = self._lib.llama_token_data_array(data=data, size=size, selected=-1, sorted=False)
        self._lib.llama_sampler_apply(self.smpl, self._ct.byref(arr))

    def accepts(self, token: int) -> bool:
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 0.0, 0.0
        self._apply(self._one_p, 1)
        return self._one[0].logit != float("-inf")

    def constrain(self, logits: np.ndarray) -> np.ndarray:
        self._view["logit"] = logits
        self._apply(self._all_p, len(logits))
        return self._view["logit"].copy()

    def accept(self, token: int) -> None:
        self._lib.llama_sampler_accept(self.smpl, token)

    def close(self) -> None:
        smpl, self.smpl = self.smpl, None
        if smpl:
            self._lib.llama_sampler_free(smpl)
