"""Typed configuration, loaded from TOML files in configs/ (or any path).

Every section is a dataclass; unknown keys and wrong types fail with a message that names the file,
the section and the key, so a typo never silently falls back to a default.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "configs"


@dataclass
class LLMConfig:
    backend: str = "llamacpp"  # llamacpp | openai | vllm | transformers
    model: str = "qwen2.5-coder-0.5b"  # a name in models/manifest.toml, or a path
    n_ctx: int = 4096
    n_threads: int = 0  # 0: every core
    n_batch: int = 512
    score_ctx: int = 512  # llama.cpp: context of the separate instance that answers score requests
    seed: int = 0
    temperature: float = 0.0
    max_retries: int = 1  # extra attempts when structured output fails to parse
    # OpenAI-compatible servers
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    max_concurrency: int = 8
    response_format: str = "json_schema"  # json_schema (OpenAI, vLLM) | json_object (llama-cpp-python server)
    extra_body: dict[str, Any] = field(default_factory=dict)  # extra request fields, e.g. {repeat_penalty = 1.0}
    # vLLM
    dtype: str = "auto"
    gpu_memory_utilization: float = 0.85
    max_model_len: int = 8192
    max_num_seqs: int = 256
    tensor_parallel_size: int = 1
    structured_engine: str = "outlines"
    # transformers
    device: str = "cpu"


@dataclass
class EmbedderConfig:
    backend: str = "sentence-transformers"  # sentence-transformers | openai
    model: str = "all-minilm-l6-v2"
    batch_size: int = 64
    device: str = "cpu"


@dataclass
class LoomConfig:
    judge: str = "embedding"  # embedding | llm | llm-logprob | hybrid | authors
    window: int = 2  # recent messages of the open box the judge compares against
    threshold: float = 0.3  # embedding judge: cosine below this opens a new box
    prob_threshold: float = 0.5  # llm-logprob judge: p(yes) below this opens a new box
    min_box_messages: int = 2  # minimal-context rule: a new box takes one adjacent reply unjudged
    max_box_messages: int = 24  # a box this long seals regardless of the judge
    seal_on_session_change: bool = True
    # hybrid judge: logistic weights over named features (membox_local.judges.FEATURES), fitted by
    # `python benchmarks/segmentation.py fit` or `fit-lm`
    weights: dict[str, float] = field(default_factory=dict)
    bias: float = 0.0
    # hybrid judge, likelihood features: lm_pmi_low = min(lm_pmi, lm_knot), the part of the model's PMI that
    # marks a hard switch (the box's lines do not help predict the new one)
    lm_knot: float = 1.0
    # hybrid judge, *_conv features: how many of the conversation's earlier messages set its own level
    history: int = 30
    # hybrid judge, `content` feature: a JSON file with a vector fitted for the embedder (relative paths are
    # taken from configs/); `content` = that vector . the new message's unit embedding (what a line that
    # opens a topic looks like), fitted by `python benchmarks/segmentation_content.py`
    content_vector: str = ""
    # hybrid judge: a box also opens whenever lm_pmi_ratio (the new line's PMI over the conversation's median)
    # falls below this, whatever the logistic says (hard switches); 0 turns the rule off
    switch_ratio: float = 0.0


@dataclass
class ExtractConfig:
    max_topic_chars: int = 80
    max_keywords: int = 8
    max_keyword_chars: int = 40
    max_events: int = 6
    max_event_chars: int = 160
    min_grounding: float = 0.5  # share of an event's content words found in the box text
    max_tokens: int = 400


@dataclass
class WeaverConfig:
    enabled: bool = True
    vote_threshold: float = 0.5
    max_candidates: int = 4
    max_tokens: int = 200


@dataclass
class RetrieveConfig:
    mode: str = "compact"  # compact | trace
    k: int = 10
    budget_tokens: int = 1500
    event_k: int = 2


@dataclass
class AnswerConfig:
    max_tokens: int = 48


@dataclass
class Config:
    llm: LLMConfig = field(default_factory=LLMConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    loom: LoomConfig = field(default_factory=LoomConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    weaver: WeaverConfig = field(default_factory=WeaverConfig)
    retrieve: RetrieveConfig = field(default_factory=RetrieveConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    name: str = "default"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ConfigError(ValueError):
    pass


def _build(cls, data: dict[str, Any], where: str):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{where}: unknown key '{key}'; known keys: {', '.join(sorted(fields))}")
        default = getattr(cls(), key)
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected true/false, got {value!r}")
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, type(default)):
            raise ConfigError(f"{where}.{key}: expected {type(default).__name__}, got {value!r}")
        kwargs[key] = value
    return cls(**kwargs)


def config_from_dict(data: dict[str, Any], where: str = "config") -> Config:
    sections = {f.name: f for f in dataclasses.fields(Config) if f.name != "name"}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key == "name":
            kwargs["name"] = str(value)
            continue
        if key not in sections:
            raise ConfigError(f"{where}: unknown section [{key}]; known: {', '.join(sorted(sections))}")
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: [{key}] must be a table")
        kwargs[key] = _build(sections[key].default_factory, value, f"{where} [{key}]")
    return Config(**kwargs)


def resolve_config_path(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return p
    for candidate in (Path("configs") / f"{name_or_path}.toml", CONFIG_DIR / f"{name_or_path}.toml"):
        if candidate.exists():
            return candidate
    known = sorted(x.stem for x in CONFIG_DIR.glob("*.toml")) if CONFIG_DIR.exists() else []
    raise ConfigError(f"config '{name_or_path}' not found: pass a .toml path or one of {known}")


def read_content_file(name: str) -> tuple[Path, dict[str, Any]]:
    """[loom] content_vector's file: an absolute path, or one relative to configs/ (then to the working
    directory); returns (path, its JSON object)."""
    import json

    p = Path(name)
    candidates = [p] if p.is_absolute() else [CONFIG_DIR / p, p]
    path = next((c for c in candidates if c.exists()), None)
    if path is None:
        raise ConfigError(f"[loom] content_vector: {name!r} not found (looked at {', '.join(map(str, candidates))})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ConfigError(f"{path}: not a content vector file (not JSON: {e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a content vector file (needs a JSON object with a list 'vector')")
    return path, data


def _check_content_embedder(cfg: Config, where: str) -> None:
    """A content vector is fitted for one embedder: refuse a config that pairs it with another (a file without an
    'embedder' field is not checked)."""
    if not cfg.loom.content_vector or not cfg.loom.weights.get("content"):
        return
    path, data = read_content_file(cfg.loom.content_vector)
    fitted_for = data.get("embedder")
    if fitted_for and fitted_for != cfg.embedder.model:
        raise ConfigError(f"{where} [loom] content_vector: {path.name} was fitted for the embedder {fitted_for!r}, "
                          f"the config uses {cfg.embedder.model!r}: fit one for it "
                          "(benchmarks/segmentation_content.py) "
                          "or set the 'content' weight to 0")


def load_config(name_or_path: str | Path = "cpu", overrides: dict[str, Any] | None = None) -> Config:
    """Load a config by name (configs/<name>.toml) or path; `overrides` is {"section.key": value}."""
    path = resolve_config_path(name_or_path)
    with open(path, "rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        data.setdefault(section, {})[key] = value
    cfg = config_from_dict(data, where=str(path))
    _check_content_embedder(cfg, str(path))
    return cfg
