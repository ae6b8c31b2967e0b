"""Typed configuration, loaded from TOML files: the package's own (membox_local/configs/<name>.toml, found the
same way from a wheel and from a checkout) or a path the user passes.

The dataclass defaults below are configs/cpu.toml's, the base every shipped config extends (cpu.toml holds the
same values with what each means and which command fitted it; a test keeps the two equal). The config a new memory
and every command take when none is named is DEFAULT_CONFIG. A config may start with
`extends = "cpu"` (a package config's name, or a path relative to the file) and hold only what differs.
Every value is checked when the file loads: unknown sections and keys, wrong types, names outside their
enumeration and numbers outside their range fail with one line that names the file, the section and the key.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PACKAGE_DIR = Path(__file__).resolve().parent
CONFIG_DIR = PACKAGE_DIR / "configs"  # package data: the configs users name with `--config NAME`
# The config a new memory and every command take when none is named: on the CPU, the judge that makes no LLM call
# (configs/cpu-ce.toml; it met every gate of the LLM-judged cpu.toml on dev data, docs/continuity-judge.md). A
# memory built before keeps opening with the config stored in it.
DEFAULT_CONFIG = "cpu-ce"

# Names a config may use. The registries that implement them (backends.BACKENDS, judges.JUDGES,
# systems.SYSTEMS) are checked against these lists by tests/test_config.py.
LLM_BACKENDS = ("llamacpp", "openai", "vllm", "transformers")
EMBEDDER_BACKENDS = ("sentence-transformers", "openai")
JUDGE_NAMES = ("embedding", "llm", "llm-logprob", "hybrid", "authors")
# each memory system with the retrieval modes that read what it builds (systems.SYSTEMS is made from this), and the
# modes that read stored messages alone; retrieval.register refuses a mode named in neither
SYSTEM_MODES: dict[str, tuple[str, ...]] = {
    "membox": ("compact", "trace", "box-hits", "box-hits-trace", "box-hits-events", "box-hits-said"),
    # event-graph-boxes reads the box memory's boxes too: it needs systems = ["membox", "eventweave"]
    "eventweave": ("event-graph", "event-graph-boxes"),
}
MESSAGE_MODES: tuple[str, ...] = ("turn-rag", "chunk-rag", "session-rag", "full-context")
RETRIEVAL_MODES: tuple[str, ...] = MESSAGE_MODES + tuple(m for modes in SYSTEM_MODES.values() for m in modes)
# the hybrid judge's features: the keys [loom] weights accepts (computed in judges.py)
LM_FEATURES = ("lm_pmi", "lm_cond", "lm_pmi_low", "lm_pmi_conv", "lm_pmi_conv_low", "lm_pmi_ratio")
CONV_FEATURES = ("new_question_conv", "last_question_conv", "len_new_conv", "len_last_conv", "lm_pmi_conv",
                 "lm_pmi_conv_low", "lm_pmi_ratio", "ce_conv", "ce_conv_low")
# the continuity cross-encoder's (membox_local/continuity.py): its logit, and against the conversation's median
CE_FEATURES = ("ce_continue", "ce_conv", "ce_conv_low")
FEATURES = ("cos_last", "cos_prev", "cos_window", "cos_box", "cohesion", "rel_last", "rel_window", "max_box",
            "speaker_change", "new_question", "last_question", "len_new", "len_last", "box_age",
            "new_question_conv", "last_question_conv", "len_new_conv", "len_last_conv", "content") + CE_FEATURES + LM_FEATURES
LEVEL_AFTER = 3  # the *_conv features are neutral until the conversation has this many earlier messages


# What a setting reaches beyond the memory itself (`reach=`): a config read from data (the one stored in a memory
# folder, an export's header) may not choose these, only a config the user names (trust.py, docs/reliability.md):
# "backend" where text is sent (a network backend), "model" the model file loaded (a name outside the model
# manifest is a path or a hub id), "endpoint" a server's address or how it may be reached, "secret" which
# environment variable is read as a key, "file" a file read (shipped ones, under configs/, are allowed).
REACHES = ("backend", "model", "endpoint", "secret", "file")


def _opt(default: Any, *, choices: tuple | None = None, what: str = "value", lo: float | None = None,
         hi: float | None = None, factory: bool = False, reach: str | None = None):
    """A field with its default and the values it accepts (checked at load); `what` names a choice in errors;
    `reach`: what the setting reaches beyond the memory (REACHES)."""
    if reach is not None and reach not in REACHES:
        raise ValueError(f"reach {reach!r}: one of {REACHES}")
    meta = {"choices": choices, "what": what, "lo": lo, "hi": hi, "reach": reach}
    if factory:
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class LLMConfig:
    backend: str = _opt("llamacpp", choices=LLM_BACKENDS, what="LLM backend", reach="backend")
    model: str = _opt("qwen2.5-coder-0.5b", reach="model")  # a name in models/manifest.toml, or a path
    n_ctx: int = _opt(4096, lo=256)
    n_threads: int = _opt(0, lo=0)  # 0: every core
    n_batch: int = _opt(512, lo=1)
    score_ctx: int = _opt(512, lo=64)  # llama.cpp: context of the separate instance that answers score requests
    seed: int = 0
    temperature: float = _opt(0.0, lo=0.0, hi=2.0)
    max_retries: int = _opt(1, lo=0, hi=10)  # extra attempts when structured output fails to parse
    # llama.cpp, JSON: check the model's best token against the grammar first and constrain the whole vocabulary
    # only when it is refused (the same greedy output; 1.03-1.7x on the JSON stages, benchmarks/json_levers.py);
    # false: llama-cpp-python's create_completion, which constrains the whole vocabulary at every token
    grammar_check_first: bool = True
    # llama.cpp: one instance per stage (extraction, the Weaver's linking, its trace start; at most 3), each keeping
    # its own instructions in its KV cache between calls; costs ~590 MB of memory per extra instance (0.5B model)
    # (a further 1.3-1.7x on the JSON stages, benchmarks/json_levers.py); false: one instance, instructions read again
    stage_contexts: bool = True
    # llama.cpp: flash attention (on by default since 2026-12-07; figures dated before were measured with it off:
    # --set llm.flash_attn=false reproduces them). On, an instance's attention memory stays flat as prompts reach
    # deeper; with either setting a greedy text can depend on the KV prefix an instance kept. Measured, with the
    # commands: docs/backends.md. Not a build setting
    flash_attn: bool = True
    # OpenAI-compatible servers
    base_url: str = _opt("", reach="endpoint")
    # a plain http:// base_url to another machine sends the conversation text (and the key) unencrypted, so it is
    # refused unless this is true; https:// and http:// to this machine (localhost, 127.0.0.1, ::1) need nothing
    allow_insecure_http: bool = _opt(False, reach="endpoint")
    api_key_env: str = _opt("OPENAI_API_KEY", reach="secret")  # the environment variable read as the key
    timeout_s: float = _opt(60.0, lo=0.1)
    max_concurrency: int = _opt(8, lo=1)
    # json_schema (OpenAI, vLLM) | json_object (llama-cpp-python server)
    response_format: str = _opt("json_schema", choices=("json_schema", "json_object"), what="response format")
    extra_body: dict[str, Any] = _opt(dict, factory=True)  # extra request fields, e.g. {repeat_penalty = 1.0}
    # vLLM
    dtype: str = "auto"
    gpu_memory_utilization: float = _opt(0.85, lo=0.05, hi=1.0)
    max_model_len: int = _opt(8192, lo=256)
    max_num_seqs: int = _opt(256, lo=1)
    tensor_parallel_size: int = _opt(1, lo=1)
    structured_engine: str = "outlines"
    enforce_eager: bool = False  # no CUDA graphs / torch.compile: slower steps, much faster start (vLLM's CPU build)
    cpu_kv_cache_gb: int = _opt(0, lo=0)  # vLLM's CPU build: GiB of KV cache (VLLM_CPU_KVCACHE_SPACE); 0: vLLM's default
    # transformers
    device: str = "cpu"


@dataclass
class EmbedderConfig:
    backend: str = _opt("sentence-transformers", choices=EMBEDDER_BACKENDS, what="embedder backend",
                        reach="backend")
    model: str = _opt("all-minilm-l6-v2", reach="model")
    batch_size: int = _opt(64, lo=1)
    device: str = "cpu"
    # openai: as [llm] allow_insecure_http, for $OPENAI_BASE_URL
    allow_insecure_http: bool = _opt(False, reach="endpoint")


@dataclass
class MemoryConfig:
    # the memory systems a build makes, each a component of Memory (membox_local/systems): "membox" files
    # messages into topic boxes with records and traces; "eventweave" builds an event graph from the same messages
    systems: list[str] = _opt(lambda: ["membox"], factory=True)


_CPU_WEIGHTS = {
    "cos_last": 1.4044, "cos_prev": 0.7793, "cos_window": 1.5329, "cos_box": 1.431, "cohesion": 0.495,
    "rel_last": 0.8219, "rel_window": 0.7524, "max_box": 1.3465, "box_age": 0.0356, "new_question_conv": -0.7133,
    "last_question_conv": 0.5783, "len_new_conv": -0.2879, "len_last_conv": -0.0874, "content": 14.6803,
    "lm_pmi_conv": 0.5642, "lm_pmi_conv_low": -0.4283,
}


@dataclass
class LoomConfig:
    judge: str = _opt("hybrid", choices=JUDGE_NAMES, what="continuity judge")
    window: int = _opt(2, lo=1, hi=64)  # recent messages of the open box the judge compares against
    threshold: float = _opt(0.275, lo=-1.0, hi=1.0)  # embedding judge: cosine below this opens a new box
    prob_threshold: float = _opt(0.5, lo=0.0, hi=1.0)  # llm-logprob judge: p(yes) below this opens a new box
    min_box_messages: int = _opt(2, lo=1)  # minimal-context rule: a new box takes one adjacent reply unjudged
    max_box_messages: int = _opt(16, lo=1)  # a box this long seals regardless of the judge
    # what a box that reaches max_box_messages does: "at-cap" seals it as it is (the next message opens a box);
    # "weakest" cuts it again where the judge was least sure it went on (the lowest continue score among its
    # messages after the first min_box_messages; ties: the later one), seals the part before the cut and keeps the
    # rest open with the next message in it (online: only messages already filed are moved; loom.split_point)
    cap_split: str = _opt("at-cap", choices=("at-cap", "weakest"), what="cap split rule")
    seal_on_session_change: bool = True
    weights: dict[str, float] = _opt(lambda: dict(_CPU_WEIGHTS), factory=True)  # hybrid judge: feature -> weight
    bias: float = 0.5798
    lm_knot: float = 1.0  # hybrid: lm_pmi_low = min(lm_pmi, lm_knot)
    history: int = _opt(30, lo=0)  # hybrid, *_conv features: earlier messages that set the conversation's level
    # hybrid, `content`: file relative to configs/
    content_vector: str = _opt("content/tiage-all-minilm-l6-v2.json", reach="file")
    switch_ratio: float = _opt(0.4, lo=0.0)  # hybrid: a box opens when lm_pmi_ratio < this (0: off)
    # hybrid, `ce_continue`: the continuity cross-encoder's weights (continuity.py), relative to configs/
    ce_model: str = _opt("content/ce-tiage-all-minilm-l6-v2.safetensors", reach="file")
    # hybrid: a box also opens when ce_conv < -ce_switch, i.e. the cross-encoder's logit falls this far below the
    # conversation's median (a hard switch, as switch_ratio for the PMI; 0: off)
    ce_switch: float = _opt(0.0, lo=0.0)


@dataclass
class ExtractConfig:
    max_topic_chars: int = _opt(80, lo=8)
    max_keywords: int = _opt(8, lo=1)
    max_keyword_chars: int = _opt(40, lo=4)
    max_events: int = _opt(6, lo=1)
    max_event_chars: int = _opt(160, lo=16)
    min_grounding: float = _opt(0.5, lo=0.0, hi=1.0)  # share of an event's content words found in the box text
    # ... and found in the lines of the speaker the event names (or lines naming them): events with the people
    # swapped fall below min_grounding, are kept flagged (`membox show`) and left out of traces
    speaker_grounding: bool = True
    max_tokens: int = _opt(400, lo=16)
    # who writes a record's keywords: "model" (asked for in the extraction call) or "text" (picked from the box's own
    # words by code, loom.text_keywords: capitalised names and repeated content words; the call then writes no
    # keywords: 12% and 27% fewer tokens generated per box on LoCoMo conv-26 and conv-30, BENCHMARKS.md)
    keywords: str = _opt("model", choices=("model", "text"), what="keywords source")
    # who writes an event's words: "written" (the model writes each event with the number of the line it comes from;
    # attribution.py keeps that line's own sentences where they hold the model's words) or "lines" (the model lists
    # the numbers of the lines that tell something and code takes those lines' sentences, persons and dates
    # resolved: far fewer tokens generated, and what a small model writes is mostly a copy of its line anyway)
    events: str = _opt("written", choices=("written", "lines"), what="events source")
    # under events = "lines": a keep model's file (worth.py, `membox fit keeping`); a line's sentences it scores below
    # its threshold make no event. "": every sentence that tells something does
    keep_model: str = _opt("", reach="file")
    # `membox build` ends with an error (exit code 1) when more than this share of its sealed boxes failed
    # extraction (the model raised, timed out or wrote unparsable output); not a build setting
    max_failed_share: float = _opt(0.2, lo=0.0, hi=1.0)


@dataclass
class WeaverConfig:
    enabled: bool = True
    vote_threshold: float = _opt(0.5, lo=-1.0, hi=1.0)
    max_candidates: int = _opt(4, lo=1)  # traces verified per box at most (one "link" call each), most votes first
    max_tokens: int = _opt(200, lo=16)
    # a cheaper link verification (configs/cpu.toml says what its values cost): the trace's latest events a link
    # call shows; whether it shows only the new events that voted for that trace (not all of the box's); and the
    # characters each shown event is cut to (0: whole)
    shown_trace_events: int = _opt(8, lo=1)
    link_voters_only: bool = False
    link_event_chars: int = _opt(0, lo=0)
    # an event whose vote reaches this similarity joins its trace without a link call (0: every link is asked)
    auto_link: float = _opt(0.0, lo=0.0, hi=1.0)


@dataclass
class EventWeaveConfig:
    """The event graph (systems/eventweave.py); configs/eventweave.toml says what each key means."""
    max_events: int = _opt(3, lo=1, hi=8)  # events one (previous turn, new turn) pair may yield; [] = no event
    max_event_chars: int = _opt(160, lo=16)
    max_when_chars: int = _opt(40, lo=4)  # the time expression of an event, as said ("last Sunday")
    max_tokens: int = _opt(240, lo=16)  # one extraction call
    # share of an item's content words (names left out) that must be words of the two turns (systems/eventweave.py
    # `unkept`, which also drops copied turns, questions, loops and items about a person the new turn is not about)
    min_grounding: float = _opt(0.5, lo=0.0, hi=1.0)
    cluster_threshold: float = _opt(0.8, lo=-1.0, hi=1.0)  # delta: an event joins a node above this cosine
    reasoning_threshold: float = _opt(0.6, lo=-1.0, hi=1.0)  # theta: nodes linked above this context cosine
    update_threshold: float = _opt(0.97, lo=-1.0, hi=1.0)  # beta: a node's mean moving below this is an update
    summaries: bool = True  # one summary node per session (one bounded call per session)
    max_summary_chars: int = _opt(240, lo=16)
    summary_max_tokens: int = _opt(160, lo=16)
    max_nodes: int = _opt(0, lo=0)  # bounded memory: event nodes kept per conversation (0: no cap)
    utility_uniqueness: float = _opt(1.0, lo=0.0)  # lambda1
    utility_reference: float = _opt(1.0, lo=0.0)  # lambda2
    utility_cost: float = _opt(0.5, lo=0.0)  # lambda3
    utility_half_life: float = _opt(20.0, lo=0.1)  # events after which an unreferenced node's recency halves
    # retrieval (event-graph modes); not build settings
    recency_weight: float = _opt(0.1, lo=0.0)  # w1
    relevance_weight: float = _opt(1.0, lo=0.0)  # w2
    pagerank_weight: float = _opt(0.1, lo=0.0)  # w3
    half_life: float = _opt(4.0, lo=0.01)  # recency halves after this many half_life_units
    half_life_unit: str = _opt("sessions", choices=("sessions", "days"), what="half-life unit")
    damping: float = _opt(0.85, lo=0.0, hi=1.0)  # PageRank's alpha
    # the model of the event graph's calls (ew-extract, ew-summary): keys of [llm] that differ for them
    # (`[eventweave] llm = {model = "..."}`); empty: the build model. A build setting (it changes what is built).
    llm: dict[str, Any] = _opt(dict, factory=True)


@dataclass
class RetrieveConfig:
    mode: str = "box-hits"  # a mode of membox_local.retrieval or of a configured memory system
    k: int = _opt(10, lo=1)
    budget_tokens: int = _opt(1000, lo=1)
    event_k: int = _opt(2, lo=0)
    # shown messages get relative time ("yesterday", "last week") resolved against their session's date
    resolve_dates: bool = True
    # box-hits: a message longer than `length_free` tokens (count_tokens) loses length_cost x log(tokens /
    # length_free) of its priority (0: off): a short turn as relevant as a long one comes first
    length_cost: float = _opt(0.2, lo=0.0, hi=1.0)
    length_free: int = _opt(100, lo=1)
    # box-hits: a message's relevance (its and its window's cosine) also gains lexical_weight x its BM25 score
    # (retrieval/lexical.py), divided by the best message's; 0: cosine only. The index is in memory, never on disk.
    lexical_weight: float = _opt(0.3, lo=0.0, hi=2.0)
    # box-hits' second stage: the evidence cross-encoder (`membox fit evidence`'s file, relative to configs/; "":
    # none) reads (question, line) for the first stage's best `evidence_candidates` messages, shown best first by its
    # logit + evidence_prior x their priority, each with `evidence_neighbours` messages of its box on either side
    evidence_model: str = _opt("", reach="file")
    evidence_candidates: int = _opt(50, lo=1)
    evidence_prior: float = _opt(16.0, lo=0.0)
    evidence_neighbours: int = _opt(0, lo=0)


@dataclass
class AnswerConfig:
    max_tokens: int = _opt(48, lo=1)
    # the unmentioned-term guard (grounding.py): a question naming something no excerpt mentions ("Seattle", the
    # "chili peppers" of "tomatoes and chili peppers") is answered "not mentioned" without the model. Off: a
    # lexical rule, fitted on LongMemEval dev's 5 abstention questions (benchmarks/grounding_check.py).
    check_terms: bool = False
    # a question asking for a total across the history ("the total cost of...", "how many fish in total",
    # prompts.asks_for_total) is answered by a list the model fills, each part with the amount it adds, summed by
    # the code (tally.py): the 1.5B model finds the parts but adds them up wrong. Measured on LongMemEval dev's 11
    # such questions by `membox eval longmemeval --modes box-hits turn-rag full-context` (docs/longmemeval.md,
    # "totals"); false: they are answered as any other question.
    tally: bool = True
    tally_items: int = _opt(12, lo=1)  # at most this many parts listed
    tally_max_tokens: int = _opt(320, lo=16)  # the list's token budget; a list cut short falls back to a plain answer
    # the answering model: keys of [llm] that differ for answering (`[answer.llm]`, e.g. model = "..."); empty:
    # the build model answers. Not a build setting: another answering model never invalidates a built memory.
    llm: dict[str, Any] = _opt(dict, factory=True)


@dataclass
class Config:
    llm: LLMConfig = field(default_factory=LLMConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    loom: LoomConfig = field(default_factory=LoomConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    weaver: WeaverConfig = field(default_factory=WeaverConfig)
    eventweave: EventWeaveConfig = field(default_factory=EventWeaveConfig)
    retrieve: RetrieveConfig = field(default_factory=RetrieveConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    name: str = "default"
    source: str = ""  # the file it was loaded from (load_config); a memory folder stores its name, not its path

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def answer_llm(self) -> LLMConfig:
        """The answering model's settings: [llm] with [answer.llm]'s keys over it."""
        return dataclasses.replace(self.llm, **self.answer.llm) if self.answer.llm else self.llm

    def stage_llms(self) -> dict[str, LLMConfig]:
        """Build stages answered by a model other than [llm]'s: stage -> its settings (backends/router.py)."""
        if "eventweave" not in self.memory.systems or not self.eventweave.llm:
            return {}
        llm = dataclasses.replace(self.llm, **self.eventweave.llm)
        return {} if llm == self.llm else {"ew-extract": llm, "ew-summary": llm}


class ConfigError(ValueError):
    pass


def _check_value(cls, f: dataclasses.Field, value: Any, where: str) -> Any:
    default = getattr(cls(), f.name)
    if isinstance(default, bool) and not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, type(default)) or (isinstance(value, int) and isinstance(value, bool)
                                                 and not isinstance(default, bool)):
        raise ConfigError(f"{where}: expected {type(default).__name__}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    meta = f.metadata
    if meta.get("choices") and value not in meta["choices"]:
        raise ConfigError(f"{where}: unknown {meta['what']} {value!r}; choose one of {', '.join(meta['choices'])}")
    if meta.get("lo") is not None and value < meta["lo"]:
        raise ConfigError(f"{where}: {value!r} is below the smallest accepted value, {meta['lo']}")
    if meta.get("hi") is not None and value > meta["hi"]:
        raise ConfigError(f"{where}: {value!r} is above the largest accepted value, {meta['hi']}")
    return value


def _build(cls, data: dict[str, Any], where: str):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{where}: unknown key '{key}'; known keys: {', '.join(sorted(fields))}")
        kwargs[key] = _check_value(cls, fields[key], value, f"{where}.{key}")
    return cls(**kwargs)


LABELS = ("name", "source")  # Config's fields that say where it came from, not how to build


def config_from_dict(data: dict[str, Any], where: str = "config", read_files: bool = True) -> Config:
    """A Config from a dict shaped like the TOML file (sections of keys); every value checked. `read_files=False`:
    the files it names are not opened (a config read from data: trust.check_from_data opens them once allowed)."""
    sections = {f.name: f for f in dataclasses.fields(Config) if f.name not in LABELS}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in LABELS:
            kwargs[key] = str(value)
            continue
        if key not in sections:
            raise ConfigError(f"{where}: unknown section [{key}]; known: {', '.join(sorted(sections))}")
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: [{key}] must be a table")
        kwargs[key] = _build(sections[key].default_factory, value, f"{where} [{key}]")
    cfg = Config(**kwargs)
    validate(cfg, where, read_files)
    return cfg


def validate(cfg: Config, where: str = "config", read_files: bool = True) -> None:
    """Checks across keys and against the names a config may use: systems, retrieval mode, hybrid weights; with
    `read_files`, the content vector's and the cross-encoder's files against the embedder."""
    for name in cfg.memory.systems:
        if not isinstance(name, str) or name not in SYSTEM_MODES:
            raise ConfigError(f"{where} [memory] systems: unknown memory system {name!r}; "
                              f"known: {', '.join(SYSTEM_MODES)}")
    if not cfg.memory.systems or len(set(cfg.memory.systems)) != len(cfg.memory.systems):
        raise ConfigError(f"{where} [memory] systems: name at least one system, each once")
    modes = set(RETRIEVAL_MODES)
    if cfg.retrieve.mode not in modes:
        raise ConfigError(f"{where} [retrieve] mode: {cfg.retrieve.mode!r} is not a mode of these memory systems; "
                          f"choose one of {', '.join(sorted(modes))}")
    if cfg.answer.llm:
        _build(LLMConfig, {**dataclasses.asdict(cfg.llm), **cfg.answer.llm}, f"{where} [answer.llm]")
    if cfg.eventweave.llm:
        _build(LLMConfig, {**dataclasses.asdict(cfg.llm), **cfg.eventweave.llm}, f"{where} [eventweave] llm")
    lc = cfg.loom
    for feature, weight in lc.weights.items():
        if feature not in FEATURES:
            raise ConfigError(f"{where} [loom] weights: unknown hybrid feature {feature!r}; known: "
                              f"{', '.join(FEATURES)}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ConfigError(f"{where} [loom] weights.{feature}: expected a finite number, got {weight!r}")
    if lc.min_box_messages > lc.max_box_messages:
        raise ConfigError(f"{where} [loom]: min_box_messages ({lc.min_box_messages}) exceeds max_box_messages "
                          f"({lc.max_box_messages})")
    if lc.judge == "hybrid":
        used = {k for k, w in lc.weights.items() if w} | ({"lm_pmi_ratio"} if lc.switch_ratio else set()) | \
            ({"ce_conv"} if lc.ce_switch else set())
        if not lc.weights:
            raise ConfigError(f"{where}: the hybrid judge needs [loom] weights (feature -> weight); fit them with "
                              "`membox fit` or keep configs/cpu.toml's")
        if used & set(CONV_FEATURES) and lc.history < LEVEL_AFTER:
            raise ConfigError(f"{where} [loom] history = {lc.history}: the *_conv features need at least "
                              f"{LEVEL_AFTER} earlier messages")
        if "content" in used:
            if not lc.content_vector:
                raise ConfigError(f"{where}: the hybrid feature 'content' needs [loom] content_vector (a JSON file "
                                  "fitted by `membox fit content`, e.g. content/tiage-all-minilm-l6-v2.json)")
            if read_files:
                _check_content_embedder(cfg, where)
        if used & set(CE_FEATURES) and read_files:
            _check_ce_embedder(cfg, where)


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A path the user passes (a .toml file that exists), else the name of a package config. The current
    directory never shadows the package's configs: pass ./configs/x.toml to use a file there."""
    p = Path(name_or_path)
    try:
        if p.suffix == ".toml":
            if p.is_file():
                return p
            raise ConfigError(f"config file {p} not found")
        candidate = CONFIG_DIR / f"{name_or_path}.toml"
        if candidate.is_file() and "/" not in str(name_or_path):
            return candidate
    except OSError as exc:  # a name too long for the file system
        raise ConfigError(f"config {str(name_or_path)[:80]!r}...: cannot read it ({exc.strerror})") from None
    known = sorted(x.stem for x in CONFIG_DIR.glob("*.toml")) if CONFIG_DIR.exists() else []
    raise ConfigError(f"config '{name_or_path}' not found: pass a .toml path or one of {known}")


def read_content_file(name: str) -> tuple[Path, dict[str, Any]]:
    """[loom] content_vector's file: an absolute path, or one relative to the package's configs/ (then to the
    working directory); returns (path, its JSON object)."""
    p = Path(name)
    candidates = [p] if p.is_absolute() else [CONFIG_DIR / p, p]
    try:
        path = next((c for c in candidates if c.is_file()), None)
    except OSError as e:  # a name too long for the file system
        raise ConfigError(f"[loom] content_vector: {name[:80]!r}: cannot read it ({e.strerror})") from None
    if path is None:
        raise ConfigError(f"[loom] content_vector: {name!r} not found (looked at {', '.join(map(str, candidates))})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"[loom] content_vector: {name[:80]!r}: cannot read it ({e.strerror})") from None
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{path}: not a content vector file (not JSON: {e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a content vector file (needs a JSON object with a list 'vector')")
    return path, data


def _check_content_embedder(cfg: Config, where: str) -> None:
    """A content vector is fitted for one embedder: refuse a config that pairs it with another (a file without an
    'embedder' field is not checked)."""
    path, data = read_content_file(cfg.loom.content_vector)
    fitted_for = data.get("embedder")
    if fitted_for and fitted_for != cfg.embedder.model:
        raise ConfigError(f"{where} [loom] content_vector: {path.name} was fitted for the embedder {fitted_for!r}, "
                          f"the config uses {cfg.embedder.model!r}: fit one for it (`membox fit content`) "
                          "or set the 'content' weight to 0")


def resolve_ce_weights(name: str, key: str = "[loom] ce_model") -> Path:
    """A cross-encoder's weights file: absolute, or relative to the package's configs/ (then the working directory)."""
    if not name:
        raise ConfigError(f"the hybrid feature 'ce_continue' needs {key} (a file written by "
                          "`membox fit crossencoder --write`, e.g. content/ce-tiage-all-minilm-l6-v2.safetensors)")
    p = Path(name)
    for c in ([p] if p.is_absolute() else [CONFIG_DIR / p, p]):
        if c.is_file():
            return c
    raise ConfigError(f"{key}: {name!r} not found (looked in {CONFIG_DIR} and the working directory)")


def read_ce_meta(path: Path) -> dict:
    """The weights file's metadata (base model, rank, alpha, how it was fitted)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as fh:  # no torch import to check a config
            meta = fh.metadata() or {}
    except Exception as e:  # safetensors raises its own error types for a file that is not one
        raise ConfigError(f"{path}: not a cross-encoder weights file ({e})") from None
    if "membox" not in meta:
        raise ConfigError(f"{path}: not a cross-encoder weights file (no 'membox' metadata)")
    return json.loads(meta["membox"])


def _check_ce_embedder(cfg: Config, where: str) -> None:
    """The cross-encoder's adapter is fitted on one base model: it must be the config's embedder."""
    try:
        path = resolve_ce_weights(cfg.loom.ce_model)
        base = read_ce_meta(path).get("base")
    except ConfigError as e:
        raise ConfigError(f"{where} {e}") from None
    if base != cfg.embedder.model:
        raise ConfigError(f"{where} [loom] ce_model: {path.name} adapts the model {base!r}, the config's embedder is "
                          f"{cfg.embedder.model!r}: fit one for it (`membox fit crossencoder`) or set the "
                          "'ce_continue' weight to 0")


def parse_assignment(text: str) -> tuple[str, Any]:
    """`key=value` from a command line: the value read as TOML (true, 5, 0.5, "x"), else as a bare string."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. retrieve.resolve_dates=false")
    try:
        return key.strip(), tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key.strip(), value


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: nested too deeply") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, section by section (a key's value replaces the base's whole, tables too)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def read_config_data(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's tables with its `extends` chain applied (the base first, then what this file changes)."""
    data = _read_toml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: extends must be a config name or a path, got {parent!r}")
    try:
        parent_path = resolve_config_path(path.parent / parent if parent.endswith(".toml") else parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: extends {parent!r}: {exc}") from None
    if parent_path.resolve() in seen or parent_path.resolve() == path.resolve():
        raise ConfigError(f"{path}: extends {parent!r} makes a loop")
    return _merge(read_config_data(parent_path, seen + (path.resolve(),)), data)


def load_config(name_or_path: str | Path = DEFAULT_CONFIG, overrides: dict[str, Any] | None = None) -> Config:
    """Load a config by name (the package's configs/<name>.toml) or path; `overrides` is {"section.key": value}
    (nested tables with more dots: "answer.llm.model")."""
    path = resolve_config_path(name_or_path)
    data = read_config_data(path)
    data.setdefault("name", path.stem)
    data["source"] = str(path.resolve())
    for dotted, value in (overrides or {}).items():
        *tables, key = dotted.split(".")
        node = data
        for t in tables:
            node = node.setdefault(t, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {dotted}: {t} is not a table")
        node[key] = value
    given = ", ".join(f"{k}={v!r}" for k, v in (overrides or {}).items())
    return config_from_dict(data, where=f"{path} (with --set {given})" if given else str(path))
