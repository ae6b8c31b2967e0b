"""Nothing leaves the machine because a file said so (docs/reliability.md, "Threat model"): a memory folder's
stored config and an export's header may carry build settings, never where text is sent, which environment
variable is read as a key, or which model or file is loaded; such a folder or export is refused in one line,
exit status 2, nothing written, with every socket blocked, until the user names a config of theirs. What is stored
and exported names no path of the machine that built it. Through the test doubles (tests/test_cli.py's)."""
from __future__ import annotations

import json

import pytest

from membox_local import backends
from membox_local.cli import main
from membox_local.config import ConfigError, load_config
from membox_local.exchange import read_export
from membox_local.memory import CONFIG_KEY, Memory, open_store, stored_config
from membox_local.trust import beyond, hide_paths, portable, shipped_file

from conftest import DEMO
from test_cli import FAST, config, doubles, error_lines  # noqa: F401  (doubles: a fixture)
from test_offline import no_network  # noqa: F401  (a fixture: every socket refused)

QUESTION = "What is the name of Tom's cat?"


def section(name: str, **keys):
    """A change to a config dict: `keys` set in its section `name` ("llm", "loom", ...)."""
    return lambda data: data.setdefault(name, {}).update(keys)


# (what the data asks for, the change to its config, what the refusal says)
CRAFTED = [
    ("another backend", section("llm", backend="openai", base_url="https://evil.example/v1", api_key_env="SECRET"),
     "send text to https://evil.example/v1 ([llm] backend openai, key from $SECRET)"),
    ("the OpenAI API", section("llm", backend="openai"),
     "send text to the OpenAI API (or $OPENAI_BASE_URL) ([llm] backend openai, key from $OPENAI_API_KEY)"),
    ("a key variable", section("llm", api_key_env="AWS_SECRET_ACCESS_KEY"),
     "use [llm] api_key_env = 'AWS_SECRET_ACCESS_KEY'"),
    ("a server address", section("llm", base_url="http://10.0.0.5:8000/v1"), "use [llm] base_url = 'http://10.0.0"),
    ("plain http", section("llm", allow_insecure_http=True), "use [llm] allow_insecure_http = True"),
    ("an absolute model path", section("llm", model="/etc/passwd"),
     "load the model '/etc/passwd' ([llm] model: not a name in the model manifest)"),
    ("a relative model path", section("llm", model="models/evil.gguf"), "load the model 'models/evil.gguf'"),
    ("a hub id", section("llm", backend="vllm", model="someone/some-model"), "load the model 'someone/some-model'"),
    ("an answering server", section("answer", llm={"backend": "openai", "base_url": "https://evil.example/v1"}),
     "send text to https://evil.example/v1 ([answer.llm] backend openai"),
    ("an event-graph model path", section("eventweave", llm={"model": "~/models/x.gguf"}),
     "load the model '~/models/x.gguf' ([eventweave] llm model"),
    ("an embedding server", section("embedder", backend="openai"), "([embedder] backend openai, key from"),
    ("an embedder path", section("embedder", model="/opt/minilm"), "load the model '/opt/minilm' ([embedder] model"),
    ("an absolute file", section("loom", ce_model="/etc/shadow"), "read the file '/etc/shadow' ([loom] ce_model"),
    ("a file outside configs/", section("loom", content_vector="../../../../../etc/vec.json"),
     "read the file '../../../../../etc/vec.json' ([loom] content_vector"),
]
IDS = [c[0] for c in CRAFTED]


@pytest.fixture
def made(monkeypatch):
    """The models made, recorded (a refusal makes none)."""
    from membox_local.testing import FakeBackend

    out = []
    monkeypatch.setattr(backends, "make_backend", lambda llm: out.append(llm) or FakeBackend())
    return out


def built(tmp_path, name: str = "store"):
    """A memory built with the user's config (tests/test_cli.py's FAST, a file of theirs); (folder, config file)."""
    cfg = config(tmp_path)
    store = tmp_path / name
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(cfg), "--quiet"]) == 0
    return store, cfg


def change_stored_config(store, change) -> None:
    """What a memory folder from elsewhere holds: its stored config edited."""
    s = open_store(store)
    try:
        data = json.loads(s.get_meta(CONFIG_KEY))
        change(data)
        s.set_meta(CONFIG_KEY, json.dumps(data))
    finally:
        s.close()


def meta_and_rows(store) -> tuple:
    s = open_store(store)
    try:
        return s.get_meta(CONFIG_KEY), s.get_meta("build_settings"), len(s.message_rows()), len(s.box_ids())
    finally:
        s.close()


def refused_once(capsys, says: str) -> str:
    out, err = capsys.readouterr()
    lines = error_lines(err)
    assert len(lines) == 1 and not out, err
    assert says in lines[0] and "name a config of yours that allows it: --config FILE" in lines[0], lines[0]
    return lines[0]


# ---- memory folders ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("what,change,says", CRAFTED, ids=IDS)
def test_a_memory_folder_cannot_choose_endpoints_keys_or_files(tmp_path, doubles, made, capsys, no_network, what,
                                                               change, says):
    store, cfg = built(tmp_path)
    change_stored_config(store, change)
    made.clear()
    capsys.readouterr()
    before = meta_and_rows(store)
    for command in (["ask", str(store), QUESTION], ["build", str(DEMO), "--store", str(store)],
                    ["forget", str(store), "--conversation", "maya-tom"]):
        assert main(command) == 2, command
        line = refused_once(capsys, says)
        assert line.startswith(f"error: {store}: its stored config asks to ")
    with pytest.raises(ConfigError, match="its stored config asks to"):
        Memory(store)  # the Python API the same
    assert made == [] and meta_and_rows(store) == before  # no model made, nothing written
    # the user allows it by naming a config of theirs: every setting is then theirs, the build settings still fit
    assert main(["ask", str(store), QUESTION, "--config", str(cfg)]) == 0
    assert "A: " in capsys.readouterr().out and made and all(m.backend == "llamacpp" for m in made)


def test_the_server_opens_no_memory_whose_config_reaches_out(tmp_path, doubles, no_network):
    pytest.importorskip("fastapi")
    from membox_local.server import open_service

    store, _ = built(tmp_path)
    change_stored_config(store, CRAFTED[0][1])
    with pytest.raises(ConfigError, match=r"send text to https://evil\.example/v1"):
        open_service(store)


def test_the_default_memory_opens_as_before(tmp_path, doubles, no_network, capsys):
    """Built with no --config (the shipped default), asked with none: nothing to refuse."""
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--quiet"]) == 0
    assert main(["ask", str(store), QUESTION]) == 0 and "A: " in capsys.readouterr().out
    assert stored_config(store).name == "cpu-ce"
    for name in ("cpu", "cpu-ce", "cpu-fast", "cpu-minilm", "cpu-switch", "eventweave", "vllm-cpu"):
        assert beyond(load_config(name)) == [], name  # every offline config of the package may be stored


# ---- exports ------------------------------------------------------------------------------------------------------
def header_change(path, change) -> None:
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    change(header["config"])
    path.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")


@pytest.mark.parametrize("what,change,says", CRAFTED, ids=IDS)
def test_an_export_cannot_choose_endpoints_keys_or_files(tmp_path, doubles, made, capsys, no_network, what, change,
                                                         says):
    store, cfg = built(tmp_path)
    path = tmp_path / "m.jsonl"
    assert main(["export", str(store), "-o", str(path)]) == 0
    header_change(path, change)
    made.clear()
    capsys.readouterr()
    new = tmp_path / "new"
    assert main(["import", str(new), str(path), "--quiet"]) == 2
    line = refused_once(capsys, says)
    assert line.startswith(f"error: {path}: its header's config asks to ")
    assert not new.exists() and made == []  # nothing written, no model made
    # the user's own config: imported, and the memory's config is theirs from now on
    assert main(["import", str(new), str(path), "--config", str(cfg), "--quiet"]) == 0
    assert beyond(stored_config(new)) == []
    assert main(["ask", str(new), QUESTION]) == 0


def test_the_files_a_carried_config_names_are_not_opened_to_check_it(tmp_path, doubles, capsys, monkeypatch):
    """A hybrid judge's content vector is checked against the embedder by reading it: not for a config from data."""
    from membox_local import config as config_module

    store, _ = built(tmp_path)
    path = tmp_path / "m.jsonl"
    assert main(["export", str(store), "-o", str(path)]) == 0
    outside = tmp_path / "vector.json"
    outside.write_text('{"embedder": "other", "vector": [1.0]}')
    header_change(path, section("loom", judge="hybrid", content_vector=str(outside)))

    def opened(name):
        raise AssertionError(f"opened {name}")
    monkeypatch.setattr(config_module, "read_content_file", opened)
    read_export(path)  # reading the file opens nothing it names
    capsys.readouterr()
    assert main(["import", str(tmp_path / "new"), str(path), "--quiet"]) == 2
    refused_once(capsys, f"read the file '{outside}' ([loom] content_vector")


# ---- no path of the building machine in what is stored or exported ------------------------------------------------
def test_stored_configs_and_exports_keep_no_absolute_path(tmp_path, doubles, capsys):
    models = tmp_path / "models"
    models.mkdir()
    (models / "mine.gguf").write_bytes(b"GGUF")
    mine = config(tmp_path, FAST + f'content_vector = "{tmp_path}/vector.json"\n[llm]\nmodel = "{models}/mine.gguf"\n',
                  "mine")
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(mine), "--quiet"]) == 0
    snapshot, settings, _, _ = meta_and_rows(store)
    assert str(tmp_path) not in snapshot + settings
    cfg = stored_config(store)
    assert (cfg.source, cfg.llm.model, cfg.loom.content_vector) == ("mine.toml", "mine.gguf", "vector.json")
    assert json.loads(settings)["llm.model"] == "mine.gguf"
    assert main(["export", str(store), "-o", str(tmp_path / "m.jsonl")]) == 0
    assert str(tmp_path) not in (tmp_path / "m.jsonl").read_text()
    capsys.readouterr()
    # a stored model path opens nothing by itself; the user's config (the model moved, too) fits the memory
    assert main(["ask", str(store), QUESTION]) == 2
    refused_once(capsys, "load the model 'mine.gguf' ([llm] model: not a name in the model manifest)")
    moved = config(tmp_path, mine.read_text().replace(str(models), "/elsewhere"), "moved")
    for user in (mine, moved):
        assert main(["ask", str(store), QUESTION, "--config", str(user)]) == 0, user


def test_a_path_an_older_version_stored_still_fits_and_is_cut_by_the_next_build(tmp_path, doubles):
    mine = config(tmp_path, FAST + '[llm]\nmodel = "/models/mine.gguf"\n', "mine")
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(mine), "--quiet"]) == 0
    s = open_store(store)
    settings = json.loads(s.get_meta("build_settings"))
    s.set_meta("build_settings", json.dumps({**settings, "llm.model": "/models/mine.gguf"}))  # as stored before
    s.close()
    assert main(["ask", str(store), QUESTION, "--config", str(mine)]) == 0
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(mine), "--quiet"]) == 0
    assert json.loads(meta_and_rows(store)[1])["llm.model"] == "mine.gguf"


def test_each_request_is_said_once_where_it_is_set():
    """[answer.llm] and [eventweave] llm take [llm]'s keys under their own: only their own are said again."""
    cfg = load_config("cpu-ce", {"llm.backend": "openai", "llm.base_url": "https://evil.example/v1",
                                 "llm.api_key_env": "SECRET"})
    assert cfg.answer.llm and cfg.answer_llm().base_url == "https://evil.example/v1"  # inherited, inert (llamacpp)
    assert beyond(cfg) == ["send text to https://evil.example/v1 ([llm] backend openai, key from $SECRET)"]
    cfg = load_config("cpu", {"answer.llm": {"base_url": "https://a.example/v1", "model": "/m/x.gguf"}})
    assert beyond(cfg) == ["load the model '/m/x.gguf' ([answer.llm] model: not a name in the model manifest)",
                           "use [answer.llm] base_url = 'https://a.example/v1'"]


def test_portable_hide_paths_and_shipped_files():
    assert portable({"a": "/home/ann/m/x.gguf", "b": ["~/v.json", "content/y.json", 3], "c": "C:\\m\\z.bin",
                     "d": "https://a.example/v1"}) == \
        {"a": "x.gguf", "b": ["v.json", "content/y.json", 3], "c": "z.bin", "d": "https://a.example/v1"}
    assert hide_paths("/srv/stores/alice: no box 7", "/srv/stores/alice") == "alice: no box 7"
    assert hide_paths("model at /home/ann/.cache/m.gguf has the wrong size (see https://a.example/x/y)") == \
        "model at .../m.gguf has the wrong size (see https://a.example/x/y)"
    assert hide_paths("cannot read '~/secret/file.json'") == "cannot read '.../file.json'"
    assert shipped_file("content/tiage-all-minilm-l6-v2.json") and shipped_file("cpu.toml")
    for name in ("../README.md", "/etc/passwd", "~/x", "content/none.json", "content/../../../pyproject.toml",
                 "x" * 5000):
        assert not shipped_file(name), name


# ---- conversation files ---------------------------------------------------------------------------------------------
def test_a_conversation_file_with_unexpected_fields_is_refused_or_inert(tmp_path, doubles, capsys, no_network):
    line = {"conversation_id": "c", "message_id": "m1", "speaker": "Ann", "text": "I adopted a cat named Miso."}
    reaching = tmp_path / "reaching.jsonl"
    reaching.write_text(json.dumps({**line, "base_url": "https://evil.example/v1", "config": "/tmp/evil.toml"}) + "\n")
    assert main(["build", str(reaching), "--store", str(tmp_path / "a"), "--quiet"]) == 2
    [err] = error_lines(capsys.readouterr().err)
    assert "unknown fields ['base_url', 'config']" in err and not (tmp_path / "a").exists()

    # in a message's metadata the same fields are data: stored as they are, obeyed by nothing
    inert = tmp_path / "inert.jsonl"
    meta = {"base_url": "https://evil.example/v1", "api_key_env": "SECRET", "model": "/etc/passwd"}
    inert.write_text(json.dumps({**line, "metadata": meta}) + "\n" +
                     json.dumps({**line, "message_id": "m2", "speaker": "Bo", "text": "Miso is a lovely name."}) + "\n")
    assert main(["build", str(inert), "--store", str(tmp_path / "b"), "--quiet"]) == 0
    assert beyond(stored_config(tmp_path / "b")) == [] and stored_config(tmp_path / "b").name == "cpu-ce"
    with Memory(tmp_path / "b") as mem:
        assert mem.get(("c", "m1")).metadata == meta

    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps([{"sample_id": "s", "config": {"llm": {"backend": "openai"}},
                                   "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "May 1",
                                                    "session_1": [
                                                        {"speaker": "A", "dia_id": "D1:1", "text": "Look at this.",
                                                         "img_url": ["http://evil.example/a.png"],
                                                         "blip_caption": "a cat", "base_url": "http://evil.example"},
                                                        {"speaker": "B", "dia_id": "D1:2", "text": "Cute cat!"}]}}]))
    assert main(["build", str(locomo), "--store", str(tmp_path / "c"), "--quiet"]) == 0
    assert stored_config(tmp_path / "c").name == "cpu-ce"
