"""Command line: `membox build | ask | show | forget | export | import | demo` (and the modules' commands)."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from .argtypes import Parser, count, nonblank, number
from .backends.base import BackendError
from .config import DEFAULT_CONFIG, ConfigError, load_config
from .exports import FORMATS, load_input
from .ingest import InputError, load_messages
from .weights import ModelNotFound
from .store import StoreError
from .terminal import drop_bars, guarded_streams, visible

DEMO_DATA = Path(__file__).parent / "data" / "demo.jsonl"
DEMO_QUESTIONS = [
    "Which race did Maya sign up for?",
    "What did the physio tell Maya to do about her knee?",
    "What is the name of Tom's cat?",
]

# Modules under membox_local/evaluation/ that add a `membox eval <name>` subcommand via add_parser(subparsers).
EVAL_MODULES: list[str] = ["segmentation", "locomo", "longmemeval"]
# Other modules that add a top-level subcommand via add_parser(subparsers).
COMMAND_MODULES: list[str] = ["compare", "fit", "view", "server", "mcp_server", "graph_cli"]


def _progress(args, total: int | None, desc: str = "build", unit: str = "turn"):
    """A bar: units per second, the ETA and what the model is doing (execution/progress.py); --quiet: none."""
    from .execution.progress import Bar

    return Bar(total, desc, unit=unit, quiet=getattr(args, "quiet", False))


def _say(args, line: str) -> None:
    """A line of what is going on, to stderr (not with --quiet)."""
    if not getattr(args, "quiet", False):
        print(line, file=sys.stderr)


def cmd_build(args) -> int:
    from .memory import memory_config, open_memory, preflight_models

    read = load_input(args.data, args.conversations, args.format, args.user)  # validated in full before any write
    messages = read.messages
    if read.format in FORMATS:
        _say(args, f"{args.data}: {read.summary()}")
    cfg = memory_config(args.store, args.config)  # no --config: the one the memory was built with, else DEFAULT_CONFIG
    convs = list(dict.fromkeys(m.conversation_id for m in messages))
    if args.jobs is None:
        args.jobs = 1 if args.engine == "ray" else auto_jobs(cfg, len(convs), args.batch_size)
    if args.engine == "ray":
        return _build_ray(args, messages, convs, cfg)
    if (Path(args.store) / "shards.json").exists():
        raise InputError(f"{args.store} is sharded (built with --engine ray); rerun with --engine ray")
    backend = _local_backend(cfg, args.jobs)
    preflight_models(cfg)  # a missing or broken model, a server that does not answer: one line, nothing written
    with open_memory(args.store, cfg, writer="membox build", backend=backend) as mem:  # other build settings: refused
        return _build_local(mem, args, messages, convs)


def _build_local(mem, args, messages, convs: list[str]) -> int:
    with mem.writing("membox build"):  # a second writer is refused, naming this process; readers work on
        return _build_locked(mem, args, messages, convs)


def _build_locked(mem, args, messages, convs: list[str]) -> int:
    from .execution.batch import build_conversations

    cfg = mem.config
    before = len(mem.store.message_rows())
    mem.check_build_settings()  # a store built with other settings is refused before a message is written
    added = mem.store.add_messages(messages)
    todo = mem.to_file(convs)  # per memory system: what the bar counts
    _say(args, f"{args.store}: {added} new messages ({before} already stored), {_to_file(todo)}, "
               f"{len(convs)} conversation(s), config {cfg.name}, batch size {args.batch_size}, "
               f"model instances {args.jobs}")
    t0 = time.time()
    with _progress(args, sum(todo.values())) as bar:
        report = build_conversations(mem, convs, args.batch_size, seal=not args.keep_open, progress=bar.update,
                                     on_conversation=lambda c: bar.set_postfix_str(f"done {c}"),
                                     describe=bar.describe)
    return _finish_profiled(mem, args, convs, time.time() - t0, {"batched_calls": report.calls,
                                                                 "requests": report.requests})


def _to_file(todo: dict[str, int]) -> str:
    """"40 to file", or with several memory systems "80 to file (40 membox, 40 eventweave)"."""
    total = sum(todo.values())
    if len(todo) < 2:
        return f"{total} to file"
    return f"{total} to file ({', '.join(f'{n} {name}' for name, n in todo.items())})"


def auto_jobs(cfg, conversations: int, batch_size: int) -> int:
    """Default --jobs on the local engine: with llama.cpp and several conversations in flight, one model
    instance per core (one thread each); otherwise one. Measured on a 2-core CPU with Qwen2.5-0.5B
    (benchmarks/build_throughput.py, in BENCHMARKS.md's git history): 16 conversations built batched ran 0.50
    turns/s with two one-thread instances against 0.31 with one two-thread instance. One conversation at a time gains
    nothing from a pool (its requests come one by one), so it keeps all threads in one instance."""
    if cfg.llm.backend != "llamacpp":
        return 1
    threads = cfg.llm.n_threads or os.cpu_count() or 1
    return max(1, min(threads, conversations, batch_size))


def _local_backend(cfg, jobs: int):
    """--jobs on the local engine: llama.cpp model instances sharing the cores (see backends/llamacpp.py)."""
    if jobs == 1:
        return None  # the config's backend, made on first use
    if cfg.llm.backend != "llamacpp":
        raise InputError(f"--jobs {jobs} with the local engine splits llama.cpp over several model instances; "
                         f"the {cfg.llm.backend} backend batches by itself: use --batch-size, or --engine ray")
    from .backends.llamacpp import LlamaCppPool

    return lambda: LlamaCppPool(cfg.llm, jobs)


def _build_ray(args, messages, convs, cfg) -> int:
    from .execution.ray_engine import build_with_ray, read_manifest, require_ray
    from .memory import Memory
    from .store import WriteLock

    read_manifest(Path(args.store), args.jobs)  # a local-engine store or another shard count: refused first
    try:
        require_ray()
    except ImportError as exc:
        raise InputError(str(exc)) from None

    _say(args, f"{args.store}: {len(messages)} messages, {len(convs)} conversation(s) over {args.jobs} Ray actor(s), "
               f"config {cfg.name}, batch size {args.batch_size}")
    t0 = time.time()
    with WriteLock(args.store, "membox build --engine ray"), _progress(args, None) as bar:
        report = build_with_ray(args.store, messages, cfg, args.jobs, args.batch_size, seal=not args.keep_open,
                                address=args.ray_address, shard_dir=args.shard_dir, cpus_per_job=args.cpus_per_job,
                                gpus_per_job=args.gpus_per_job, progress=bar.update,
                                on_pending=bar.reset)
    with Memory(args.store, cfg) as mem:
        return _finish_profiled(mem, args, convs, time.time() - t0,
                                {"engine": "ray", "per_shard": [{k: r[k] for k in ("shard", "conversations", "messages",
                                                                                   "wall_s", "calls")}
                                                                for r in report["per_shard"]]}, ceiling=False)


def _finish_profiled(mem, args, convs: list[str], wall_s: float, extra: dict, ceiling: bool = True) -> int:
    """_finish_build; with --profile, the build's profile (profile.py) in its stats and as a table after its
    summary (with --json, on stderr), against the ceiling measured now on the build's own backend (ceiling=False:
    none)."""
    if not getattr(args, "profile", False):
        return _finish_build(mem, args, convs, wall_s, extra)
    from .profile import backend_label, format_profile, probe, profile

    mem.sync()  # the box index first: indexing is the profile's `index` stage
    if ceiling:
        _say(args, "profile: measuring the model's ceiling (as `membox probe`) ...")
        extra["profile"] = profile(mem.stats(), probe(mem.backend, backend_label(mem.config.llm, args.jobs),
                                                      copies=args.jobs))
    else:
        extra["profile"] = profile(mem.stats(), None, "no ceiling: the models ran in the Ray actors; measure it "
                                                      "where they run with `membox probe --config ...`")
    code = _finish_build(mem, args, convs, wall_s, extra)
    print(format_profile(extra["profile"]), file=sys.stderr if getattr(args, "json", False) else sys.stdout)
    return code


def _finish_build(mem, args, convs: list[str], wall_s: float, extra: dict) -> int:
    """Print the build's summary (--json: its full stats) and warnings; 1 (with an error line) when more boxes
    failed than [extract] max_failed_share allows, else 0."""
    store = args.store
    mem.sync()
    stats = mem.stats()
    stats["wall_s"] = round(wall_s, 2)
    stats.update(extra)
    print(json.dumps(stats, indent=2) if getattr(args, "json", False) else build_summary(store, stats, convs))
    for comp in mem.components:
        for line in comp.warnings(convs):
            print(f"warning: {visible(line)}", file=sys.stderr)
    counts = [comp.failures(convs) for comp in mem.components]
    failed, total = sum(c[0] for c in counts), sum(c[1] for c in counts)
    limit = mem.config.extract.max_failed_share
    if total and failed / total > limit:
        print(f"error: {failed} of {total} boxes failed ({failed / total:.0%}, more than [extract] max_failed_share "
              f"= {limit:g}); the reasons: `membox show {store} --failed`; rerun the same build to retry them",
              file=sys.stderr)
        return 1
    return 0


def build_summary(store: str, stats: dict, convs: list[str]) -> str:
    """The build for a person (Memory.stats, the wall time): what the memory holds now, and the command to run next."""
    held = []
    if "boxes" in stats:  # the box memory
        held.append(f"{stats['messages']} messages filed in {stats['boxes']} boxes ({stats['failed_boxes']} failed), "
                    f"{stats['traces']} traces")
    graph = stats.get("eventweave")
    if graph:
        held.append(f"event graph: {graph['pairs']} turns read ({graph['failed_pairs']} failed), {graph['nodes']} "
                    f"nodes from {graph['events']} events")
    where = shlex.quote(store)
    one = f" --conversation {shlex.quote(convs[0])}" if stats["conversations"] > 1 and convs else ""
    return (f"{store}: {stats['conversations']} conversation(s); {'; '.join(held)}; this build took "
            f"{stats['wall_s']:.1f} s\n"
            f"next: membox ask {where}{one} \"your question\"   (also: membox show {where}, membox view {where} "
            f"-o memory.html; every stat: --json)")


def cmd_probe(args) -> int:
    """The machine's ceiling for a config's model: prompt and generation tokens per second (profile.probe)."""
    from .backends import make_backend
    from .memory import preflight_models
    from .profile import backend_label, probe

    cfg = load_config(args.config)
    preflight_models(cfg, embedder=False)
    pool = _local_backend(cfg, args.jobs)
    backend = pool() if pool is not None else make_backend(cfg.llm)
    try:
        ceiling = probe(backend, backend_label(cfg.llm, args.jobs), copies=args.jobs, repeats=args.repeats)
    finally:
        backend.close()
    print(json.dumps(ceiling.to_dict(), indent=2) if args.json else ceiling.line())
    return 0


def cmd_ask(args) -> int:
    with _open_memory(args) as mem:
        _ask(mem, args)
    return 0


def _open_memory(args):
    """The memory folder args.store (it must hold a memory) with --config, or without it with the config it was
    built with (stored in it); a --config whose build settings do not fit the memory is refused, one line."""
    from .memory import open_memory

    cfg = load_config(args.config) if args.config is not None else None  # a bad config file: its error first
    _require_store(args.store)
    return open_memory(args.store, cfg)


def _ask(mem, args) -> None:
    if args.mode is not None and args.mode not in mem.modes():
        raise InputError(f"--mode {args.mode} reads a memory system {args.store} does not build (it builds "
                         f"{', '.join(mem.config.memory.systems)}); its modes: {', '.join(mem.modes())}")
    _require_conversation(mem.store, args.conversation)
    from .asking import print_answers

    print_answers(mem, args)


def cmd_show(args) -> int:
    from .memory import open_store

    _require_store(args.store)
    store = open_store(args.store)
    _require_conversation(store, args.conversation)
    if getattr(args, "graph", False) or not hasattr(store, "boxes"):  # the event graph (an eventweave-only memory)
        from .graph_cli import print_graph

        print_graph(store, args.conversation)
        return 0
    if args.traces:
        from .show import print_traces

        print_traces(store, args.conversation)
        return 0
    from .show import print_boxes

    print_boxes(store, args.conversation, failed=args.failed, messages=args.messages)
    return 0


def cmd_forget(args) -> int:
    """Erase messages (or a whole conversation) and everything derived from them, on disk too."""
    _require_store(args.store)
    if args.messages is not None and not args.messages:
        raise InputError("--messages needs at least one message id (leave it out to forget the whole conversation)")
    with _open_memory(args) as mem:
        _require_conversation(mem.store, args.conversation)
        n = mem.forget(args.conversation, args.messages)
    what = "conversation" if args.messages is None else "messages of conversation"
    print(f"forgot {what} {args.conversation}: {n['messages']} message(s), {n.get('boxes', 0)} box(es), "
          f"{n.get('events', 0)} event(s), {n.get('traces', 0)} trace(s), {n.get('cached_vectors', 0)} cached "
          f"vector(s) removed; {n.get('boxes_to_extract', 0)} box(es) to re-extract and "
          f"{n.get('boxes_to_weave', 0)} to re-weave on the next build")
    if not n.get("scrubbed", 1):
        print(f"warning: {args.store}/memory.db could not be compacted (another process has it open, or the disk "
              f"has no room for a copy of it): old copies of the forgotten text may stay in memory.db-wal until "
              f"every process using the memory has closed it", file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    """Write a memory as JSON lines (membox_local/exchange.py) to stdout or, atomically and owner-only, a file."""
    from .exchange import export_memory, export_to_file
    from .memory import open_store

    _require_store(args.store)
    store = open_store(args.store)
    try:
        counts = export_to_file(store, args.output) if args.output else export_memory(store, sys.stdout)
    finally:
        store.close()
    _print_moved(f"{args.store}: exported", counts)
    return 0


def cmd_import(args) -> int:
    """Read an export file in full, then write it into an empty memory folder (created if missing)."""
    from .exchange import export_config, import_export, read_export
    from .memory import Memory

    with _progress(args, None, "import", unit="line") as bar:
        bar.describe(f"checking {args.file}")
        export = read_export(args.file, progress=bar.update)  # every line checked before the memory folder is opened
        bar.describe(f"writing into {args.store}")
        with Memory(args.store, args.config or export_config(export)) as mem:
            counts = import_export(mem, export)
    _print_moved(f"{args.store}: imported", counts)
    return 0


def _print_moved(what: str, counts: dict[str, int]) -> None:
    print(f"{visible(what)} {counts['messages']} message(s), {counts['boxes']} box(es), {counts['traces']} trace(s) of "
          f"{counts['conversations']} conversation(s)", file=sys.stderr)


def cmd_demo(args) -> int:
    """Build the bundled conversation, print its boxes and ask it questions, with one model load."""
    from .memory import Memory

    store = Path(args.store)
    build = argparse.Namespace(store=str(store), keep_open=False, batch_size=8, jobs=1, json=False, quiet=False)
    ask = argparse.Namespace(question=DEMO_QUESTIONS, conversation=None, mode=None, k=None, budget=None, today=None,
                             json=False, verbose=False)
    messages = load_messages(DEMO_DATA)
    with Memory(store, args.config) as mem:
        _build_local(mem, build, messages, [messages[0].conversation_id])
        cmd_show(argparse.Namespace(store=str(store), conversation=None, traces=False, failed=False,
                                    messages=False))
        _ask(mem, ask)
    return 0


def _require_conversation(store, conversation: str | None) -> None:
    """An id the memory does not hold is refused, naming the ones it holds (never an answer from nothing)."""
    if conversation is None:
        return
    convs = store.conversations()
    if conversation not in convs:
        shown = ", ".join(convs[:5]) + (", ..." if len(convs) > 5 else "") if convs else "none"
        raise InputError(f"--conversation {conversation}: no such conversation in this memory (it holds "
                         f"{len(convs)}: {shown})")


def _require_store(path: str) -> None:
    if not (Path(path) / "memory.db").exists():
        raise InputError(f"{path}: no memory here; create one with `membox build DATA --store {path}`")


CONFIG_HELP = ("config name in configs/ or a .toml path (default: the config the memory was built with, stored in "
               f"it, when it keeps to the shipped models and this machine; {DEFAULT_CONFIG} for a new memory)")


def _add_build(sub) -> None:
    """`membox build`."""
    b = sub.add_parser("build", help="file a conversation file (LoCoMo .json, messages .jsonl or a chat export) into "
                                     "a memory")
    b.add_argument("data", help="a LoCoMo .json file, a .jsonl file of messages (one JSON object per line), or a chat "
                                "export: ChatGPT or Claude conversations.json, Telegram's result.json, WhatsApp's "
                                "chat .txt, a 'Name: text' transcript (docs/import.md)")
    b.add_argument("--store", required=True, help="memory folder (created if missing)")
    b.add_argument("--config", help=CONFIG_HELP)
    b.add_argument("--format", choices=FORMATS, help="read DATA as this chat export instead of telling it by its "
                                                     "content (docs/import.md)")
    b.add_argument("--user", default="", help="a chat export: the name of its own person (default: user)")
    b.add_argument("--conversations", nargs="*", help="only these conversation ids")
    b.add_argument("--keep-open", action="store_true", help="leave each conversation's last box open")
    b.add_argument("--batch-size", type=count(1), default=8,
                   help="conversations advanced together; their requests go to the model in one call per stage")
    b.add_argument("--jobs", type=count(1), default=None,
                   help="local engine: llama.cpp model instances (default: one per core when several "
                        "conversations are built, else 1); ray engine: actors (= store shards, default 1)")
    b.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="ray: shard conversations over Ray actors (pip install -e '.[ray]')")
    b.add_argument("--ray-address", help="Ray cluster to join (e.g. auto); default: start a local one")
    b.add_argument("--shard-dir", help="ray: node-local folder for shards when nodes share no disk")
    b.add_argument("--cpus-per-job", type=number(0, low_open=True), default=1, help="ray: CPUs each actor reserves")
    b.add_argument("--gpus-per-job", type=number(0), default=0, help="ray: GPUs each actor reserves (vLLM: 1)")
    b.add_argument("--profile", action="store_true",
                   help="after the build, measure the model's ceiling and print seconds, calls, tokens, tokens/s "
                        "and share of the ceiling per stage (also in the stats, as \"profile\")")
    b.add_argument("--json", action="store_true", help="print the build's full stats as JSON instead of a summary")
    b.add_argument("--quiet", action="store_true", help="no progress bar and no progress lines (for scripts)")
    b.set_defaults(func=cmd_build)


def _add_probe(sub) -> None:
    """`membox probe`."""
    pr = sub.add_parser("probe", help="measure the config's model here: prompt and generation tokens per second "
                                      "(the ceiling `membox build --profile` compares with)")
    pr.add_argument("--config", default=DEFAULT_CONFIG,
                    help=f"config name in configs/ or a .toml path (default {DEFAULT_CONFIG})")
    pr.add_argument("--jobs", type=count(1), default=1,
                    help="llama.cpp instances sharing the cores, as `membox build --jobs` (one prompt each per call)")
    pr.add_argument("--repeats", type=count(1), default=2, help="tries of each measure, the best kept")
    pr.add_argument("--json", action="store_true", help="print the measures as JSON")
    pr.set_defaults(func=cmd_probe)


def _add_ask(sub) -> None:
    """`membox ask`."""
    from .retrieval import RETRIEVERS

    a = sub.add_parser("ask", help="answer questions from a memory")
    a.add_argument("store", help="memory folder (built by `membox build`)")
    a.add_argument("question", nargs="+", help="one or more questions, each answered in turn")
    a.add_argument("--config", help=CONFIG_HELP + "; its answering model may differ, its build settings may not")
    a.add_argument("--conversation", type=nonblank, help="conversation id (needed when the memory holds several)")
    a.add_argument("--mode", choices=sorted(RETRIEVERS), metavar="MODE",
                   help=f"retrieval mode: {', '.join(sorted(RETRIEVERS))} (default: the config's [retrieve] mode)")
    a.add_argument("-k", type=count(1), help="boxes, messages or events retrieved at most (default: the config's)")
    a.add_argument("--budget", type=count(1), help="context token budget (default: the config's)")
    a.add_argument("--today", metavar="DATE", help="when the questions are asked (e.g. 2024-06-20): said to the "
                   "model, each excerpt's date then says how long before it was")
    a.add_argument("--json", action="store_true", help="one JSON object per question (answer, boxes, tokens)")
    a.add_argument("-v", "--verbose", action="store_true", help="print the context too")
    a.add_argument("--quiet", action="store_true", help="no line of what it is doing (shown only on a terminal)")
    a.set_defaults(func=cmd_ask)


def _add_show(sub) -> None:
    """`membox show`."""
    s = sub.add_parser("show", help="print boxes with topics, keywords and events (each with the messages it was "
                       "read from)")
    s.add_argument("store", help="memory folder")
    s.add_argument("--conversation", type=nonblank, help="only this conversation (default: every one)")
    s.add_argument("--traces", action="store_true", help="print the traces (events followed across sessions)")
    s.add_argument("--failed", action="store_true", help="only boxes whose extraction (or weaving) failed")
    s.add_argument("--messages", action="store_true", help="print each box's messages")
    s.add_argument("--graph", action="store_true",
                   help="print the event graph (eventweave): nodes with their events and dates, edges by kind")
    s.set_defaults(func=cmd_show)


def _add_forget(sub) -> None:
    """`membox forget`."""
    f = sub.add_parser("forget", help="erase a conversation or some of its messages, and all derived from them")
    f.add_argument("store", help="memory folder")
    f.add_argument("--conversation", type=nonblank, required=True, help="conversation id")
    f.add_argument("--messages", nargs="*", metavar="ID",
                   help="only these message ids (default: the whole conversation)")
    f.add_argument("--config", help=CONFIG_HELP)
    f.set_defaults(func=cmd_forget)


def _add_export_import(sub) -> None:
    """`membox export` and `membox import`."""
    x = sub.add_parser("export", help="write a memory as JSON lines (header, then messages, boxes, traces)")
    x.add_argument("store", help="memory folder")
    x.add_argument("-o", "--output", metavar="FILE", help="write to FILE (owner-only) instead of stdout")
    x.set_defaults(func=cmd_export)

    i = sub.add_parser("import", help="load an export file into an empty memory folder")
    i.add_argument("store", help="memory folder (created if missing; must hold no messages)")
    i.add_argument("file", help="a file written by `membox export`")
    i.add_argument("--config", help="the config the memory was built with (default: the one the export file "
                                    "carries, when it keeps to the shipped models and this machine; "
                                    f"{DEFAULT_CONFIG} for a file without one)")
    i.add_argument("--quiet", action="store_true", help="no progress bar (for scripts)")
    i.set_defaults(func=cmd_import)


def _add_demo(sub) -> None:
    """`membox demo`."""
    d = sub.add_parser("demo", help="build the bundled demo conversation and ask it questions")
    d.add_argument("--store", default="stores/demo", help="memory folder (default: stores/demo)")
    d.add_argument("--config", help=CONFIG_HELP)
    d.set_defaults(func=cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    from . import __version__

    p = Parser(prog="membox", description="Topic-continuity memory on local models.")
    p.add_argument("--version", action="version", version=f"membox {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    for add in (_add_build, _add_probe, _add_ask, _add_show, _add_forget, _add_export_import, _add_demo):
        add(sub)
    ev = sub.add_parser("eval", help="evaluations (LoCoMo QA and retrieval, topic segmentation)")
    evsub = ev.add_subparsers(dest="eval_cmd", required=True)
    for name in EVAL_MODULES:
        importlib.import_module(f"membox_local.evaluation.{name}").add_parser(evsub)
    for name in COMMAND_MODULES:
        importlib.import_module(f"membox_local.{name}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    with guarded_streams():  # no raw control character from data reaches the terminal (terminal.py)
        args = build_parser().parse_args(argv)
        if getattr(args, "quiet", False):
            drop_bars()  # a library's own progress bar too (transformers' "Loading weights")
        try:
            return args.func(args)
        except (InputError, ConfigError, ModelNotFound, StoreError, BackendError) as exc:
            print(f"error: {one_line(str(exc))}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\ninterrupted: {interrupted(args, argv)}", file=sys.stderr)
            return 130  # the shell's status for a command ended by SIGINT


# What Ctrl-C leaves behind, per command: every command writes in transactions (a build files message by message,
# an import is one transaction, an export file appears whole or not at all), so nothing stored is lost.
RESUMABLE = {
    "build": "what was filed is stored in {store}; rerun the same command to go on from there: {again}",
    "eval": "results so far are saved; rerun the same command to go on from there: {again}",
    "import": "nothing was imported ({store} is as it was); rerun the same command: {again}",
    "serve": "the server stopped; every memory written so far is stored",
    "mcp": "the server stopped; every memory written so far is stored",
    "forget": "an erasure is one transaction: done or not begun (`membox show` tells); to be sure: {again}",
}


def interrupted(args, argv: list[str] | None) -> str:
    """The one line said on Ctrl-C: what was stored and the command that resumes."""
    again = "membox " + shlex.join(sys.argv[1:] if argv is None else argv)
    line = RESUMABLE.get(args.cmd, "nothing was changed; rerun the same command: {again}")
    return visible(line.format(store=getattr(args, "store", None), again=again))


def one_line(text: str) -> str:
    """An error message as one printable line: a newline, NUL, escape or lone surrogate the input put in it
    (an id, a key) is shown escaped (terminal.visible, as every text from data is)."""
    return visible(text)


if __name__ == "__main__":
    sys.exit(main())
