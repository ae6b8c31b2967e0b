"""The build settings a memory is filed with, and the config stored in its folder: the fingerprint that refuses a
config with other build settings (`check_build_settings`, `check_fits`), the config snapshot (`record_config`,
`stored_config`, `memory_config`) and the embedder a folder was built with. A stored config is data: it opens its
memory only when it asks for nothing beyond the shipped, offline settings (trust.py); what is stored names no
absolute path of the machine that built it (`trust.portable`)."""
from __future__ import annotations

import json
from pathlib import Path

from .config import DEFAULT_CONFIG, Config, ConfigError, config_from_dict, load_config
from .store import StoreError, built_systems, store_class
from .systems import tables_for
from .trust import check_from_data, portable

CONFIG_KEY = "config"  # the meta key of the config a memory was built with (Memory.record_config)


def dump_json(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


def stored_config(path: str | Path) -> Config | None:
    """The config a memory folder was built with (the snapshot its first build stored); None for a folder without
    a memory or without a snapshot (built by an older version). A snapshot this version cannot load is a
    ConfigError naming the folder."""
    if not (Path(path) / "memory.db").exists():
        return None
    store = open_store(path)
    try:
        snapshot = store.get_meta(CONFIG_KEY)
    finally:
        store.close()
    if snapshot is None:
        return None
    try:
        return config_from_dict(json.loads(snapshot), where=f"{path}: the config stored at its first build",
                                read_files=False)  # data: its files are read once memory_config allows them
    except ConfigError as exc:
        raise ConfigError(f"{exc}; pass --config with the config it was built with") from None


def memory_config(path: str | Path, config: Config | str | Path | None = None) -> Config:
    """The config to open a memory folder with: `config` (a Config, a name or a .toml path) when given, else the one
    the folder was built with (stored_config), else DEFAULT_CONFIG (cpu-ce). A stored config that asks for a network
    backend, a key variable, a model outside the manifest or a file outside configs/ is refused (ConfigError, one
    line): the folder may come from elsewhere; the user names a config of theirs instead."""
    if config is None:
        stored = stored_config(path)
        if stored is None:
            return load_config(DEFAULT_CONFIG)
        return check_from_data(stored, str(path), "its stored config")
    return config if isinstance(config, Config) else load_config(config)


def open_store(path: str | Path):
    """A memory folder's store with the tables of every system built in it, for reading without a config."""
    db = Path(path) / "memory.db"
    return store_class(tables_for(built_systems(db)))(db)


class BuildSettings:
    """A part of `Memory` (memory.py: the class is made of these parts); it uses the attributes and models
    Memory.__init__ sets (store, config, components, the write lock)."""

    def _check_embedder_setting(self) -> None:
        name = portable(self.config.embedder.model)  # a path: its file name (trust.portable)
        stored = self.store.get_meta("embedder")
        if stored is None:
            self.store.set_meta("embedder", name)
        elif portable(stored) != name:
            raise StoreError(
                f"{self.path} was built with embedder '{stored}', but the config asks for '{name}'; "
                f"use the same embedder or a new memory folder"
            )

    def build_settings(self) -> dict:
        """The settings that decide what a build writes (the model, and each system's sections); execution
        settings such as threads, batch sizes or retrieval are free to change between runs. A path is kept as its
        file name (a model moved elsewhere is the same model; trust.portable)."""
        c = self.config
        out = {"llm.backend": c.llm.backend, "llm.model": c.llm.model, "llm.temperature": c.llm.temperature}
        for comp in self.components:
            out.update(comp.build_settings())
        return portable(out)

    def check_build_settings(self) -> None:
        """A memory is filed with one set of build settings: continuing it with others (another judge,
        other weights, another model) would mix two segmentations in one store, silently. Refused. The first build
        records the settings and the whole config (`record_config`: what `Memory(path)` opens it with later)."""
        before = self.check_fits()
        now = self.build_settings()
        if before is None or set(now) - set(before) or before != portable(before):  # new, or keys it was built
            # without (a system added to it, a key added since), or a path an older version stored: recorded
            self.store.set_meta("build_settings", json.dumps(now, sort_keys=True))
            self.record_config()
        elif self.store.get_meta(CONFIG_KEY) is None:  # a memory built before configs were stored
            self.record_config()

    def check_fits(self) -> dict | None:
        """Refuse (StoreError, one line) a config whose build settings differ from those the memory was built
        with; writes nothing (a reader may call it). Returns the recorded settings (None: nothing built yet)."""
        stored = self.store.get_meta("build_settings")
        if stored is None:
            return None
        before = json.loads(stored)
        diff = self.settings_differences(before)
        if diff:
            raise StoreError(f"{self.path} was built with other settings ({diff}); {self._built_with()}, or build "
                             f"into a new memory folder")
        return before

    def _built_with(self) -> str:
        """How to name the config the memory was built with, for an error line."""
        snapshot = self.store.get_meta(CONFIG_KEY)
        if snapshot is None:
            return "continue it with the config it was built with"
        name = json.loads(snapshot).get("name", "?")
        return f"use the config it was built with ({name!r}, stored in the folder: give no --config, or config=None)"

    def record_config(self) -> None:
        """Store the config as the memory's own (meta `config`: its name, source file and every key, as JSON), so
        that it can be opened, asked and served without naming a config (`stored_config`). Paths are kept as their
        last name (the config file's too): the folder names no path of this machine."""
        self.store.set_meta(CONFIG_KEY, json.dumps(portable(self.config.to_dict()), sort_keys=True))

    def settings_differences(self, before: dict) -> str:
        """How build settings recorded earlier (`before`: a store's, an export's) differ from this config's, as
        "key: old then, new now; ..." ("" when they fit). A setting added after they were recorded counts as
        unchanged while it keeps the value it had before its key existed."""
        now = self.build_settings()
        before = portable(dict(before))  # a path an older version stored: as its name, as now
        for comp in self.components:
            before.update({k: v for k, v in comp.before_key_existed.items() if k in now and k not in before})
        diff = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        shown = "; ".join(f"{k}: {before.get(k)!r} then, {now.get(k)!r} now" for k in diff[:6])
        return shown + (" ..." if len(diff) > 6 else "")
