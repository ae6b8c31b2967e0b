"""llama.cpp backend (llama-cpp-python), in process, CPU by default.

- labels: one forward pass over the chat-formatted prompt, then the next-token logits of each label's
  first token: exact, constrained by construction, and gives label probabilities for free;
- JSON: greedy generation under llama.cpp's own JSON-schema grammar (faster here than outlines over llama.cpp,
  which also drops the KV cache between calls), the grammar asked about the model's best token first and applied
  to the whole vocabulary only when it refuses that token (`grammar_greedy` in llamacpp_grammar.py; [llm]
  grammar_check_first);
- text: greedy generation; with a request's `on_text`, each piece handed over as it is decoded (`_stream`).
Consecutive prompts share their fixed instructions, and llama.cpp reuses the KV cache for that prefix.

`LlamaCppAdapter` turns our requests into llama.cpp arguments and is tested without the engine;
`LlamaCppBackend` is the thin wrapper that owns the model. `LlamaCppPool` runs several instances with the
cores split between them and answers a batch by splitting it (`membox build --jobs N`).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Sequence

import numpy as np

from ..config import LLMConfig
from .base import (Backend, BackendError, JsonRequest, JsonResult, LabelRequest, LabelResult, Prompt, PromptTooLong,
                   label_distribution,
                   ScoreRequest, ScoreResult, StructuredOutputError, TextRequest, TextResult, Usage,
                   fit_score_tokens, next_token_logprob, parse_json_output)
from .llamacpp_grammar import GrammarSampler, grammar_greedy, json_gbnf

# llama.cpp's OpenMP threads spin while they wait by default. With any other load on the cores (a second
# model, the embedder, other jobs) that spinning made generation 4-5x slower here (Qwen 0.5B, 2 threads at
# load ~6: 0.28 s/token spinning, 0.07 s/token passive). It must be set before the library loads (this
# module imports llama_cpp lazily); a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

INSTALL = 'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install "llama-cpp-python>=0.3.8"  (or: pip install -e ".[cpu]")'
GGUF_MAGIC = b"GGUF"
# [llm] stage_contexts: at most this many llama.cpp instances for generation (each holds its own KV cache, compute
# buffers and weights repacked for the CPU: resident memory 635 MB with one instance of the 0.5B model at n_ctx
# 4096, 1,224 MB with two, 1,813 MB with three: `python benchmarks/json_levers.py --memory`)
MAX_STAGE_CONTEXTS = 3


def check_gguf(path) -> None:
    """Refuse a file that is not a GGUF model (its first four bytes are not b'GGUF'): a folder, a text file
    renamed .gguf, a download that stopped at an HTML page. One line, before llama.cpp is asked to load it."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise BackendError(f"[llm] model {str(p)!r} is a folder, not a GGUF file; the llamacpp backend loads one "
                           f".gguf file (a name in models/manifest.toml or a path to the file)")
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise BackendError(f"[llm] model {str(p)!r}: cannot read it ({exc.strerror})") from None
    if head != GGUF_MAGIC:
        raise BackendError(f"[llm] model {str(p)!r} is not a GGUF model file (it starts with {head!r}, not "
                           f"{GGUF_MAGIC!r}); name a GGUF file or a model in models/manifest.toml")


def cached_prefix(cached: Sequence[int], tokens: Sequence[int]) -> int:
    """How many of `tokens` a llama.cpp context holding `cached` keeps from its KV cache: their longest common
    prefix, never the last token (evaluated again for its logits), as llama-cpp-python's generate does."""
    n = 0
    for a, b in zip(cached, tokens[:-1]):
        if a != b:
            break
        n += 1
    return n


def release_sampler(llm) -> None:
    """Free the sampler chain llama-cpp-python made for the last generation (`generate` keeps it on the instance
    until the next one). Its Python object sits in a reference cycle, so dropping it leaves its native buffers
    (top-p keeps one of the vocabulary's size) to Python's rare full collections: a long-running server gained
    megabytes of them per hundred answers (issue 53). Freed here when each generation ends."""
    sampler = getattr(llm, "_sampler", None)
    if sampler is not None:
        llm._sampler = None
        sampler.close()


class LlamaCppAdapter:
    """Pure translation from requests to llama.cpp call arguments."""

    def __init__(self, cfg: LLMConfig):
        self.cfg = cfg

    def completion_kwargs(self, max_tokens: int) -> dict[str, Any]:
        return {"max_tokens": max_tokens, "temperature": self.cfg.temperature, "top_k": 1 if self.cfg.temperature == 0 else 40,
                "seed": self.cfg.seed, "repeat_penalty": 1.0}

    @staticmethod
    def schema_key(schema: dict[str, Any]) -> str:
        return json.dumps(schema, sort_keys=True)

    @staticmethod
    def label_first_tokens(labels: tuple[str, ...], tokenize) -> list[int] | None:
        """First token of each label as the model would write it; None when two labels share one."""
        firsts = [tokenize(label)[0] for label in labels]
        return firsts if len(set(firsts)) == len(firsts) else None

    @staticmethod
    def label_grammar(labels: tuple[str, ...]) -> str:
        return "root ::= " + " | ".join(json.dumps(label) for label in labels)

    @staticmethod
    def score_plan(cached: list[int], tokens: list[int], start: int,
                   n_batch: int) -> tuple[int, list[list[tuple[int, bool]]]]:
        """How to evaluate `tokens` (context, then the continuation from `start`) for a score request.

        Returns (keep, chunks): keep the first `keep` tokens already in the KV cache (`cached`: their longest
        common prefix, but never position start - 1, whose logits predict the continuation's first token), then
        decode the rest in chunks of at most `n_batch` (position, wants_logits) pairs, where only positions
        start - 1 .. len - 2 want logits: the vocabulary projection is skipped for every other token."""
        if not 1 <= start < len(tokens):
            raise ValueError(f"score request: continuation start {start} outside 1..{len(tokens) - 1}")
        keep = 0
        for a, b in zip(cached, tokens[:start - 1]):
            if a != b:
                break
            keep += 1
        plan = [(pos, start - 1 <= pos <= len(tokens) - 2) for pos in range(keep, len(tokens))]
        return keep, [plan[i:i + n_batch] for i in range(0, len(plan), n_batch)]


class LlamaCppBackend(Backend):
    name = "llamacpp"

    @classmethod
    def preflight(cls, cfg: LLMConfig) -> None:
        """The model found (weights.resolve_model: ModelNotFound) and a GGUF file; llama-cpp-python installed."""
        import importlib.util

        from ..weights import resolve_model

        check_gguf(resolve_model(cfg.model))
        if importlib.util.find_spec("llama_cpp") is None:
            raise BackendError(f"the llamacpp backend needs llama-cpp-python: {INSTALL}")

    def __init__(self, cfg: LLMConfig, model_path: str | None = None):
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise ImportError(f"the llamacpp backend needs llama-cpp-python: {INSTALL}") from None
        from ..weights import resolve_model

        self.cfg = cfg
        self.adapter = LlamaCppAdapter(cfg)
        path = model_path or str(resolve_model(cfg.model))
        threads = cfg.n_threads or os.cpu_count() or 1
        check_gguf(path)
        self._make = lambda: Llama(model_path=path, n_ctx=cfg.n_ctx, n_threads=threads, n_threads_batch=threads,
                                   n_batch=cfg.n_batch, seed=cfg.seed, flash_attn=cfg.flash_attn, verbose=False)
        try:
            self.llm = self._make()
        except ValueError as exc:  # llama-cpp-python: "Failed to load model from file: ..."
            raise BackendError(f"[llm] model {path}: llama.cpp could not load it ({exc})") from None
        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise BackendError(f"{path} carries no chat template; use a chat/instruct GGUF")
        tok = self.llm._model
        self.formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=tok.token_get_text(self.llm.token_eos()),
            bos_token=tok.token_get_text(self.llm.token_bos()),
        )
        self._grammars: dict[str, Any] = {}
        self._protos: dict[str, Any] = {}  # parsed grammar samplers, cloned for each request (grammar_check_first)
        self.model_path = path
        self._scorer = None  # a second, small instance for score requests, made on the first one
        self._scored: list[int] = []  # the tokens in the scorer's KV cache, in order
        self._stage_llms: dict[str, Any] = {}  # stage -> its instance ([llm] stage_contexts)

    # ---- helpers ---------------------------------------------------------------------------------
    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        """The chat-formatted prompt as tokens, exactly as llama-cpp-python's chat handler (and so its
        OpenAI-compatible server) builds them: BOS only when the template did not write it."""
        res = self.formatter(messages=prompt.messages())
        return self.llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True)

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text, special=False))

    def _grammar(self, key: str, build):
        if key not in self._grammars:
            self._grammars[key] = build()
        return self._grammars[key]

    def _context(self, stage: str):
        """The llama.cpp instance a stage's prompts run in. With [llm] stage_contexts, one per stage (the first
        stage gets the main one, the next MAX_STAGE_CONTEXTS - 1 their own, any further stage the main one), so
        that a stage's fixed instructions stay in its own KV cache between its calls instead of being read again
        after every other stage's call (extraction and the Weaver's calls alternate box by box)."""
        if not self.cfg.stage_contexts:
            return self.llm
        llm = self._stage_llms.get(stage)
        if llm is None:
            if self._stage_llms and len(self._stage_llms) < MAX_STAGE_CONTEXTS:
                llm = self._make()
            else:
                llm = self.llm
            self._stage_llms[stage] = llm
        return llm

    def prepare(self, stages) -> None:
        """Each stage's instance made (`_context`) and a batch of text decoded in it (one `n_batch` of tokens, at
        most half its context): its compute buffers and the start of its KV cache are in use now rather than from
        the stage's first calls. What is left to fill is the rest of the KV cache, bounded by `n_ctx`."""
        sentence = self.tokenize("A text decoded once so that this instance's buffers are in use. ", special=False)
        size = max(1, min(self.cfg.n_batch, self.cfg.n_ctx // 2))
        warm = (sentence * (size // len(sentence) + 1))[:size]
        done: set[int] = set()
        for stage in stages:
            llm = self._context(stage)
            if id(llm) not in done:  # stages that share an instance warm it once
                done.add(id(llm))
                llm.reset()
                llm.eval(warm)

    def _complete(self, prompt: Prompt, max_tokens: int, grammar=None, llm=None) -> tuple[str, Usage, str]:
        llm = llm or self.llm
        tokens = self.prompt_tokens(prompt)
        cached = cached_prefix(llm._input_ids, tokens)  # what create_completion keeps of its KV cache
        try:
            out = llm.create_completion(tokens, grammar=grammar, **self.adapter.completion_kwargs(max_tokens))
        finally:
            release_sampler(llm)
        choice = out["choices"][0]
        u = out["usage"]
        usage = Usage("", u["prompt_tokens"], u["completion_tokens"], cached)
        return choice["text"], usage, choice.get("finish_reason") or ""

    def _stream(self, prompt: Prompt, max_tokens: int, on_text: Callable[[str], None], llm) -> tuple[str, Usage]:
        """Text generation that hands each piece to `on_text` as it is decoded. The generation is create_completion's
        (llm.generate with its sampler settings and seed, the KV cache of the prompt prefix kept, a stop at an
        end-of-generation token or after max_tokens), and so is the usage: the prompt's tokens, the tokens generated
        without the end one. Its stream mode is not used: it decodes each token alone (a character split over two
        tokens is lost) and reports no usage. Here the bytes go through an incremental UTF-8 decoder, so the pieces
        join to what create_completion's text would be, and the text returned is that join."""
        import codecs
        import random

        import llama_cpp

        tokens = self.prompt_tokens(prompt)
        if len(tokens) >= llm.n_ctx():
            raise ValueError(f"Requested tokens ({len(tokens)}) exceed context window of {llm.n_ctx()}")
        kw = self.adapter.completion_kwargs(max_tokens)
        limit = min(max_tokens, llm.n_ctx() - len(tokens))
        cached = cached_prefix(llm._input_ids, tokens)  # what generate keeps of its KV cache
        llm.set_seed(kw["seed"] if kw["seed"] is not None else random.Random(llm._seed).randint(0, 2**32))
        decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")
        pieces: list[str] = []
        n = 0
        try:
            for token in llm.generate(tokens, top_k=kw["top_k"], temp=kw["temperature"],
                                      repeat_penalty=kw["repeat_penalty"]):
                if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
                    break
                n += 1
                pieces.append(decoder.decode(llm.detokenize([token])))
                if pieces[-1]:
                    on_text(pieces[-1])
                if n >= limit:
                    break
        finally:
            release_sampler(llm)
        pieces.append(decoder.decode(b"", final=True))
        if pieces[-1]:
            on_text(pieces[-1])
        return "".join(pieces), Usage("", len(tokens), n, cached)

    def _json_complete(self, prompt: Prompt, max_tokens: int, key: str, schema: dict,
                       stage: str) -> tuple[str, Usage, str]:
        """One JSON generation under the schema's grammar: grammar-first checking (our loop) or llama-cpp-python's
        create_completion, which applies the grammar to the whole vocabulary at every token."""
        llm = self._context(stage)
        if not self.cfg.grammar_check_first:
            from llama_cpp import LlamaGrammar

            grammar = self._grammar(key, lambda: LlamaGrammar.from_string(json_gbnf(schema), verbose=False))
            return self._complete(prompt, max_tokens, grammar, llm)
        return self._complete_checked(prompt, max_tokens, self._proto(key, schema), llm)

    def _proto(self, key: str, schema: dict):
        """The schema's grammar parsed once into a llama.cpp grammar sampler (a prototype that requests clone)."""
        if key not in self._protos:
            import llama_cpp
            from llama_cpp.llama_grammar import LLAMA_GRAMMAR_DEFAULT_ROOT

            gbnf = json_gbnf(schema)
            proto = llama_cpp.llama_sampler_init_grammar(self.llm._model.vocab, gbnf.encode("utf-8"),
                                                         LLAMA_GRAMMAR_DEFAULT_ROOT.encode("utf-8"))
            if not proto:
                raise BackendError(f"llama.cpp could not parse the grammar of a JSON schema: {gbnf[:200]!r}")
            self._protos[key] = proto
        return self._protos[key]

    def _complete_checked(self, prompt: Prompt, max_tokens: int, proto, llm=None) -> tuple[str, Usage, str]:
        """Greedy generation under a grammar with `grammar_greedy`, reusing the KV cache of the prompt prefix
        shared with the previous call (as create_completion does). Stops at an end-of-generation token or after
        `max_tokens` (finish reason "length")."""
        import llama_cpp

        llm = llm or self.llm
        tokens = self.prompt_tokens(prompt)
        if len(tokens) + max_tokens > llm.n_ctx():
            raise PromptTooLong(f"{len(tokens)} prompt tokens + {max_tokens} to generate exceed the context window "
                                f"of {llm.n_ctx()}", len(tokens) + max_tokens, llm.n_ctx())
        cached = self._eval_from_cache(tokens, llm)
        vocab, n_vocab = llm._model.vocab, llm.n_vocab()
        g = GrammarSampler(proto, n_vocab)
        out: list[int] = []
        finish = "length"
        try:
            for _ in range(max_tokens):
                logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
                token = grammar_greedy(logits, g.accepts, g.constrain)
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    finish = "stop"
                    break
                g.accept(token)
                out.append(token)
                llm.eval([token])
        finally:
            g.close()
        text = llm.detokenize(out).decode("utf-8", errors="replace")
        return text, Usage("", len(tokens), len(out), cached), finish

    def _eval_from_cache(self, tokens: list[int], llm) -> int:
        """Evaluate `tokens` in `llm`, keeping the KV cache of their longest prefix already evaluated (never all of
        them: the last one is evaluated again for its logits); returns how many were kept."""
        prefix = cached_prefix(llm._input_ids, tokens)
        llm.n_tokens = prefix
        llm.eval(tokens[prefix:])
        return prefix

    def _next_logits(self, tokens: list[int], llm) -> tuple[np.ndarray, int]:
        """Evaluate `tokens`, reusing the cached prefix; the last position's logits and how many tokens were
        kept from the cache."""
        cached = self._eval_from_cache(tokens, llm)
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy(), cached

    # ---- the three request kinds -----------------------------------------------------------------
    def label_batch(self, requests: list[LabelRequest]) -> list[LabelResult]:
        results = []
        for req in requests:
            firsts = self.adapter.label_first_tokens(req.labels, lambda s: self.tokenize(s, special=False))
            if firsts is None:
                if req.logprobs:
                    raise BackendError(f"labels {req.labels} share a first token: no label probabilities")
                g = self._grammar("label:" + "|".join(req.labels), lambda: self._make_grammar_str(
                    self.adapter.label_grammar(req.labels)))
                text, usage, _ = self._complete(req.prompt, 8, g, self._context(req.stage))
                results.append(LabelResult(text.strip(), dataclasses.replace(usage, stage=req.stage)))
                continue
            tokens = self.prompt_tokens(req.prompt)
            logits, cached = self._next_logits(tokens, self._context(req.stage))
            probs = label_distribution(req.labels, logits[firsts])
            best = max(req.labels, key=probs.__getitem__)
            results.append(LabelResult(best, Usage(req.stage, len(tokens), 1, cached), probs if req.logprobs else None))
        return results

    def _make_grammar_str(self, text: str):
        from llama_cpp import LlamaGrammar

        return LlamaGrammar.from_string(text, verbose=False)

    def json_batch(self, requests: list[JsonRequest]) -> list[JsonResult | StructuredOutputError]:
        results: list[Any] = []
        for req in requests:
            # the grammar keeps the schema's property order (the key is sorted, for caching only): fields are
            # generated in the order the prompt describes them
            key = self.adapter.schema_key(req.schema)
            total = Usage(req.stage, 0, 0, 0)
            error = None
            for _ in range(1 + max(0, self.cfg.max_retries)):
                try:
                    raw, usage, finish = self._json_complete(req.prompt, req.max_tokens, key, req.schema, req.stage)
                except PromptTooLong as exc:
                    error = PromptTooLong(f"{req.stage}: {exc}", exc.tokens, exc.limit)
                    break
                except (ValueError, RuntimeError) as exc:  # e.g. a prompt longer than n_ctx: this request fails
                    error = BackendError(f"{req.stage}: llama.cpp failed: {exc}")
                    break
                total.prompt_tokens += usage.prompt_tokens
                total.completion_tokens += usage.completion_tokens
                total.cached_tokens += usage.cached_tokens or 0
                try:
                    results.append(JsonResult(parse_json_output(raw, req.schema), total, raw))
                    error = None
                    break
                except ValueError as exc:
                    hint = " (hit max_tokens)" if finish == "length" else ""
                    error = StructuredOutputError(f"{req.stage}: output did not match the schema{hint}: {exc}", raw, total)
            if error is not None:
                results.append(error)
        return results

    def text_batch(self, requests: list[TextRequest]) -> list[TextResult]:
        results = []
        for req in requests:
            if req.on_text is not None:
                text, usage = self._stream(req.prompt, req.max_tokens, req.on_text, self._context(req.stage))
            else:
                text, usage, _ = self._complete(req.prompt, req.max_tokens, llm=self._context(req.stage))
            results.append(TextResult(text.strip(), dataclasses.replace(usage, stage=req.stage)))
        return results

    def score_batch(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        """Prompt log-likelihoods, from a second, small instance (`score_ctx`) so that scoring leaves the
        generating instance's cached prompt prefix alone. Each request reuses the KV cache of the text it shares
        with the previous one and computes next-token logits only where they predict the continuation
        (`LlamaCppAdapter.score_plan`)."""
        if self._scorer is None:
            from llama_cpp import Llama

            threads = self.cfg.n_threads or os.cpu_count() or 1
            self._scorer = Llama(model_path=self.model_path, n_ctx=self.cfg.score_ctx, n_threads=threads,
                                 n_threads_batch=threads, n_batch=self.cfg.n_batch, seed=self.cfg.seed,
                                 flash_attn=self.cfg.flash_attn, verbose=False)
            self._scored = []
        results = []
        for req in requests:
            ctx, cont = fit_score_tokens(self.tokenize(req.context, special=False),
                                         self.tokenize(req.continuation, special=False), self.cfg.score_ctx)
            toks = ctx + cont
            rows, kept = self._continuation_rows(toks, len(ctx))
            results.append(ScoreResult(next_token_logprob(rows, cont), len(cont), Usage(req.stage, len(toks), 0, kept)))
        return results

    def _continuation_rows(self, tokens: list[int], start: int) -> tuple[np.ndarray, int]:
        """The next-token logits at positions start - 1 .. len - 2 of `tokens`, one row each, and how many tokens
        were kept from the KV cache."""
        sc, n_vocab = self._scorer, self._scorer.n_vocab()
        keep, chunks = self.adapter.score_plan(self._scored, tokens, start, self.cfg.n_batch)
        batch = sc._batch.batch
        rows = []
        try:
            sc._ctx.kv_cache_seq_rm(0, keep, -1)
            self._scored = self._scored[:keep]
            for chunk in chunks:
                batch.n_tokens = len(chunk)
                for j, (pos, wants) in enumerate(chunk):
                    batch.token[j], batch.pos[j], batch.n_seq_id[j] = tokens[pos], pos, 1
                    batch.seq_id[j][0] = 0
                    batch.logits[j] = wants
                sc._ctx.decode(sc._batch)
                self._scored += [tokens[pos] for pos, _ in chunk]
                rows += [np.ctypeslib.as_array(sc._ctx.get_logits_ith(j), shape=(n_vocab,)).copy()
                         for j, (_, wants) in enumerate(chunk) if wants]
        except Exception:
            sc._ctx.kv_cache_seq_rm(0, 0, -1)  # the cache no longer matches what we recorded: start over
            self._scored = []
            raise
        return np.stack(rows), keep

    def close(self) -> None:
        protos, self._protos = getattr(self, "_protos", {}), {}
        if protos:
            import llama_cpp

            for proto in protos.values():
                llama_cpp.llama_sampler_free(proto)
        llm, self.llm = getattr(self, "llm", None), None
        for other in {id(x): x for x in getattr(self, "_stage_llms", {}).values()}.values():
            if other is not llm:
                other.close()
        self._stage_llms = {}
        if llm is not None:
            llm.close()
        scorer, self._scorer = getattr(self, "_scorer", None), None
        if scorer is not None:
            scorer.close()


class LlamaCppPool(Backend):
    """`workers` llama.cpp instances, the threads split between them; a batch is cut into contiguous
    chunks answered in parallel threads (llama.cpp computes without the GIL), results in request order.

    Several small decodes side by side use the cores better than one instance's single-sequence decode,
    at the cost of one model copy in memory per worker. `python benchmarks/build_throughput.py` measures when it
    pays on a given machine.
    """

    name = "llamacpp-pool"

    def __init__(self, cfg: LLMConfig, workers: int, model_path: str | None = None,
                 make: Callable[[LLMConfig], Backend] | None = None):
        from concurrent.futures import ThreadPoolExecutor

        threads = cfg.n_threads or os.cpu_count() or 1
        if not 1 <= workers <= threads:
            raise ValueError(f"llama.cpp pool: {workers} workers for {threads} threads; use 1..{threads}")
        sub = dataclasses.replace(cfg, n_threads=threads // workers)
        make = make or (lambda c: LlamaCppBackend(c, model_path))
        self.workers = [make(sub) for _ in range(workers)]
        self._threads = ThreadPoolExecutor(workers, thread_name_prefix="llamacpp")

    def _split(self, method: str, requests: list) -> list:
        n = len(self.workers)
        size = -(-len(requests) // n)
        chunks = [requests[i:i + size] for i in range(0, len(requests), size)] if requests else []
        futures = [self._threads.submit(getattr(w, method), chunk) for w, chunk in zip(self.workers, chunks)]
        return [res for f in futures for res in f.result()]

    def label_batch(self, requests: list[LabelRequest]) -> list[LabelResult]:
        return self._split("label_batch", requests)

    def json_batch(self, requests: list[JsonRequest]) -> list[JsonResult | StructuredOutputError]:
        return self._split("json_batch", requests)

    def text_batch(self, requests: list[TextRequest]) -> list[TextResult]:
        return self._split("text_batch", requests)

    def score_batch(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        return self._split("score_batch", requests)

    def count_tokens(self, text: str) -> int:
        return self.workers[0].count_tokens(text)

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        for w in self.workers:
            w.close()
