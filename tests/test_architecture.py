"""The package's shape: no import cycles, and no module imports one from a layer above its own.

Imports are read from the source (every `import` statement, also inside functions; those under
`if TYPE_CHECKING:` are only for type hints and do not count)."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "membox_local"

# Lowest first; a module may import its own layer and the ones before it. A module not listed fails the test,
# so a new module gets a place here (a new memory system: its package goes beside `systems`).
LAYERS: list[tuple[str, set[str]]] = [
    # config is plain data (the names a config may use, the settings' dataclasses): it imports nothing of the package
    ("data types, contracts, config", {"records", "requests", "backends.base", "dates", "grounding", "tally", "private",
                                       "terminal", "argtypes", "config", "seams"}),
    ("retrieval contract", {"retrieval.base", "retrieval.layout"}),
    ("retrieval modes", {"retrieval", "retrieval.baselines", "retrieval.compact", "retrieval.boxmap", "retrieval.snapshot", "retrieval.boxhits",
                         "retrieval.lexical", "retrieval.eventgraph", "retrieval.eventkeys"}),
    ("registry", {"systems"}),
    ("storage, models, input", {"store", "store_lock", "store_connections", "index", "weights", "ingest", "jsonstream", "exports", "prompts", "backends",
                                "backends.llamacpp", "backends.llamacpp_grammar", "backends.openai", "backends.vllm",
                                "backends.transformers",
                                "backends.router",
                                "embed", "native", "testing", "continuity", "minilm",
                                "trust"}),  # what a config read from data may decide (config, the manifest)
    ("execution", {"execution", "execution.driver", "execution.progress", "execution.batch", "execution.merge",
                   "profile"}),  # the build profile: the driver's timing, the machine's ceiling
    ("box memory", {"judges", "worth", "attribution", "loom", "weaver", "systems.base", "systems.membox_tables", "systems.membox",
                    # the event graph (EventWeave), a memory system at the same level
                    "systems.eventweave_tables", "systems.eventweave_graph", "systems.eventweave"}),
    ("memory's parts", {"memory_settings", "memory_filing", "memory_erasure", "memory_verbs", "memory_reading"}),
    ("memory", {"memory", "exchange"}),
    ("applications", {"__init__", "execution.ray_engine", "asking", "show", "view", "view_style", "compare", "cli", "evaluation",
                      "graph_cli", "api_models", "service", "server", "server_guard", "mcp_server",
                      "evaluation.scorers", "evaluation.segmentation", "evaluation.locomo", "evaluation.locomo_report", "evaluation.longmemeval", "evaluation.results",
                      "evaluation.integrity", "evaluation.crash", "evaluation.soak", "evaluation.latency", "evaluation.backtracking", "evaluation.next_turn", "evaluation.bounded",
                      "evaluation.paired", "evaluation.records", "evaluation.scale", "evaluation.peers",
                      "fit", "fit.*"}),
]


def layer_of(module: str) -> int | None:
    """The layer listing the module, or its package as `package.*`."""
    for i, (_, mods) in enumerate(LAYERS):
        if module in mods or any(m.endswith(".*") and module.startswith(m[:-1]) for m in mods):
            return i
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" and len(rel.parts) > 1 else rel.parts
    return ".".join(parts)


def imports(path: Path, known: set[str]) -> set[str]:
    name = module_name(path)
    package = name if path.name == "__init__.py" and name != "__init__" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):  # every import: module level, inside functions, under TYPE_CHECKING
        targets = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("membox_local"):
                mod = node.module[len("membox_local."):] if node.module != "membox_local" else ""
            else:
                continue
            targets = [f"{mod}.{a.name}" if mod else a.name for a in node.names] + [mod]
        elif isinstance(node, ast.Import):
            targets = [a.name[len("membox_local."):] for a in node.names if a.name.startswith("membox_local.")]
        for t in targets:
            if t in known:
                out.add(t)
                break
    return out - {name}


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    known = set(files)
    return {n: imports(p, known) for n, p in files.items()}


def test_every_module_has_a_layer():
    missing = sorted(n for n in graph() if layer_of(n) is None)
    assert not missing, f"modules without a layer in tests/test_architecture.py: {missing}"


def test_no_import_cycles():
    g = graph()
    cycles, state = [], {}

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                cycles.append(" -> ".join(stack[stack.index(m):] + [m]))
            elif m not in state:
                visit(m, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_upward_imports():
    g = graph()
    rank = {n: layer_of(n) for n in g}
    up = [f"{n} ({LAYERS[rank[n]][0]}) imports {m} ({LAYERS[rank[m]][0]})"
          for n, deps in g.items() for m in deps
          if rank[n] is not None and rank[m] is not None and rank[m] > rank[n]]
    assert not up, "imports from a higher layer:\n" + "\n".join(sorted(up))


def test_config_imports_nothing_of_the_package():
    """The lowest floor: the names a config may use are plain data there, not read from the packages above."""
    assert graph()["config"] == set()


def test_no_module_is_over_600_lines():
    long = {module_name(p): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert not long, f"split these modules: {long}"


MAX_FUNCTION_LINES = 80


def test_no_function_over_80_lines():
    long = [f"{module_name(p)}.{node.name}: {node.end_lineno - node.lineno + 1} lines" for p in PKG.rglob("*.py")
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def calls_up(run) -> list[str]:
    """The calls `run()` makes from a module of the package into one of a higher layer (a callback, an object of a
    module above handed down): what the layers allow only where a lower module is given something to call."""
    import sys

    def module(frame):
        name = frame.f_globals.get("__name__", "") if frame is not None else ""
        return name[len("membox_local."):] if name.startswith("membox_local.") else None

    up = []

    def profile(frame, event, arg):
        if event == "call" and (callee := module(frame)) and (caller := module(frame.f_back)) and callee != caller:
            lc, lr = layer_of(callee), layer_of(caller)
            if lc is not None and lr is not None and lc > lr:
                up.append(f"{caller}.{frame.f_back.f_code.co_name} -> {callee}.{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return up


def test_opening_a_served_memory_climbs_the_layers_at_most_three_times(tmp_path, monkeypatch):
    """`membox serve DIR`'s way to an open memory (open_memory: config, models, store and components, build
    settings; the writer, the reader and the intake store), traced call by call."""
    from membox_local import memory
    from membox_local.server import open_service

    monkeypatch.setattr(memory, "preflight_models", lambda cfg, **kw: None)  # the models' own checks: not the path
    opened = []
    up = calls_up(lambda: opened.append(open_service(tmp_path / "mem")))
    opened[0].close()
    assert len(up) <= 3, up
