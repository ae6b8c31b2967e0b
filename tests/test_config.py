"""Configs: the package's own are found by name (never shadowed by the working directory), `extends` holds only
what differs, the dataclass defaults are the shipped default, and every value is checked when a file loads."""
from __future__ import annotations

import dataclasses

import pytest

from membox_local import config as C
from membox_local.config import Config, ConfigError, load_config


def test_the_dataclass_defaults_are_the_shipped_cpu_default():
    shipped, defaults = dataclasses.asdict(load_config("cpu")), dataclasses.asdict(Config(name="cpu"))
    assert shipped.pop("source") == str(C.CONFIG_DIR / "cpu.toml") and defaults.pop("source") == ""  # where from
    # one difference, on purpose: a config written from scratch answers with its own build model (never with a
    # local GGUF it did not name); cpu.toml answers with the 1.5B model
    assert defaults["answer"].pop("llm") == {}
    assert shipped["answer"].pop("llm") == {"backend": "llamacpp", "model": "qwen2.5-coder-1.5b"}
    assert shipped == defaults


def test_configs_on_other_backends_answer_with_their_own_model():
    for name in ("openai", "vllm", "cpu-fast"):
        cfg = load_config(name)
        assert cfg.answer_llm() == cfg.llm


@pytest.mark.parametrize("name", sorted(p.stem for p in C.CONFIG_DIR.glob("*.toml")))
def test_every_shipped_config_loads(name):
    cfg = load_config(name)
    assert cfg.name == name and cfg.memory.systems == (["membox", "eventweave"] if name == "eventweave" else ["membox"])


def test_extends_keeps_the_base_and_changes_only_what_the_file_says():
    base, fast = load_config("cpu"), load_config("cpu-fast")
    assert (fast.llm.model, fast.loom.judge, fast.extract.max_events, fast.retrieve.mode) == \
        ("smollm2-135m", "embedding", 4, "compact")
    assert fast.embedder == base.embedder and fast.weaver == base.weaver and fast.llm.backend == base.llm.backend


def test_extends_a_file_by_relative_path_and_refuses_loops(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "cpu"\n[retrieve]\nk = 3\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\n[answer]\nmax_tokens = 9\n')
    cfg = load_config(tmp_path / "b.toml")
    assert (cfg.retrieve.k, cfg.answer.max_tokens, cfg.loom.judge) == (3, 9, "hybrid")
    (tmp_path / "c.toml").write_text('extends = "d.toml"\n')
    (tmp_path / "d.toml").write_text('extends = "c.toml"\n')
    with pytest.raises(ConfigError, match="loop"):
        load_config(tmp_path / "c.toml")


def test_the_working_directory_never_shadows_a_package_config(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "cpu.toml").write_text("[loom]\njudge = 'embedding'\n")
    monkeypatch.chdir(tmp_path)
    assert load_config("cpu").loom.judge == "hybrid"
    assert load_config("configs/cpu.toml").loom.judge == "embedding"  # a path the user passes is read
    with pytest.raises(ConfigError, match="not found"):
        load_config("configs/nope.toml")
    with pytest.raises(ConfigError, match="not found: pass a .toml path or one of"):
        load_config("nope")


BAD = [
    ("[loom]\njudge = 'psychic'\n", "unknown continuity judge 'psychic'"),
    ("[llm]\nbackend = 'telepathy'\n", "unknown LLM backend"),
    ("[embedder]\nbackend = 'x'\n", "unknown embedder backend"),
    ("[retrieve]\nmode = 'vibes'\n", "is not a mode"),
    ("[memory]\nsystems = ['nope']\n", "unknown memory system"),
    ("[memory]\nsystems = []\n", "at least one system"),
    ("[loom]\nweights = { vibes = 1.0 }\n", "unknown hybrid feature 'vibes'"),
    ("[loom]\nweights = { cos_last = 'high' }\n", "expected a finite number"),
    ("[loom]\nweights = {}\n", "needs \\[loom\\] weights"),
    ("[loom]\nmax_box_messages = 0\n", "below the smallest accepted value"),
    ("[loom]\nmin_box_messages = 5\nmax_box_messages = 4\n", "exceeds max_box_messages"),
    ("[loom]\nthreshold = 3.0\n", "above the largest accepted value"),
    ("[loom]\nthreshold = nan\n", "finite"),
    ("[loom]\nwindow = 2.5\n", "expected int"),
    ("[retrieve]\nk = true\n", "expected int"),
    ("[weaver]\nenabled = 1\n", "expected true/false"),
    ("[loom]\ntypo = 1\n", "unknown key 'typo'"),
    ("[lom]\njudge = 'llm'\n", "unknown section \\[lom\\]"),
    ("loom = 3\n", "must be a table"),
    ("[loom\n", "not valid TOML"),
    ("extends = 3\n", "extends must be"),
    ("extends = 'missing'\n", "not found"),
    ("[loom]\nhistory = 1\n", "need at least 3"),
    ("[loom]\ncontent_vector = 'no/such.json'\n", "not found"),
]


@pytest.mark.parametrize("text,message", BAD)
def test_every_value_is_checked_at_load_with_one_line_naming_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert str(path) in str(err.value) or "content_vector" in str(err.value)
    assert "\n" not in str(err.value).strip()


def test_the_names_a_config_accepts_are_the_registries():
    from membox_local.backends import BACKENDS
    from membox_local.judges import JUDGES
    from membox_local.retrieval import RETRIEVERS
    from membox_local.systems import SYSTEMS, component_class

    assert tuple(BACKENDS) == C.LLM_BACKENDS
    assert set(JUDGES) == set(C.JUDGE_NAMES)
    for name, info in SYSTEMS.items():
        assert component_class(name).name == name
        assert set(info.modes) <= set(RETRIEVERS), f"{name}: modes not registered"
