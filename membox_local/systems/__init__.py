"""Memory systems: each is a component of `Memory` (systems/base.py says what a component provides).

A config names the systems a memory builds (`[memory] systems`). Registering a system is one line here: its
name, the module that defines its component (imported only when a memory uses it) and the retrieval modes it
adds, so that a config can be checked without importing any system.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..config import SYSTEM_MODES


@dataclass(frozen=True)
class SystemInfo:
    module: str  # defines COMPONENT, the system's Component subclass
    modes: tuple[str, ...]  # retrieval modes that read what this system builds


# one registration line per system; its name and modes are config.SYSTEM_MODES' (the names a config may use)
SYSTEMS: dict[str, SystemInfo] = {
    "membox": SystemInfo("membox_local.systems.membox", SYSTEM_MODES["membox"]),
    "eventweave": SystemInfo("membox_local.systems.eventweave", SYSTEM_MODES["eventweave"]),
}


def component_class(name: str) -> type:
    """The Component subclass of the named system."""
    if name not in SYSTEMS:
        raise KeyError(f"unknown memory system {name!r}; known: {', '.join(SYSTEMS)}")
    return importlib.import_module(SYSTEMS[name].module).COMPONENT


def tables_for(names) -> list[type]:
    """The store mixins of the named systems (for `store.store_class`)."""
    return [t for t in (component_class(n).tables for n in names) if t is not None]
