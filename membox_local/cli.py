"""Command line: `membox build | ask | show | forget | export | import | demo` (and the modules' commands)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .backends.base import BackendError
from .config import ConfigError, load_config
from .ingest import InputError, load_messages
from .weights import ModelNotFound
from .store import StoreError

DEMO_DATA = Path(__file__).parent / "data" / "demo.jsonl"
DEMO_QUESTIONS = [
    "Which race did Maya sign up for?",
    "What did the physio tell Maya to do about her knee?",
    "What is the name of Tom's cat?",
]

# Modules under membox_local/evaluation/ that add a `membox eval <name>` subcommand via add_parser(subparsers).
EVAL_MODULES: list[str] = ["segmentation", "locomo"]
# Other modules that add a top-level subcommand via add_parser(subparsers).
COMMAND_MODULES: list[str] = ["compare", "fit", "view", "server", "mcp_server", "graph_cli"]


def _progress(total: int | None, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="turn", dynamic_ncols=True, file=sys.stderr)  # turns/s and ETA


def cmd_build(args) -> int:
    from .memory import Memory, preflight_models

    if args.batch_size < 1 or (args.jobs is not None and args.jobs < 1):
        raise InputError(f"--batch-size and --jobs must be at least 1 (got {args.batch_size}, {args.jobs})")
    messages = load_messages(args.data, args.conversations)  # validated in full before any write
    cfg = load_config(args.config)
    convs = list(dict.fromkeys(m.conversation_id for m in messages))
    if args.jobs is None:
        args.jobs = 1 if args.engine == "ray" else auto_jobs(cfg, len(convs), args.batch_size)
    if args.engine == "ray":
        return _build_ray(args, messages, convs, cfg)
    if (Path(args.store) / "shards.json").exists():
        raise InputError(f"{args.store} is sharded (built with --engine ray); rerun with --engine ray")
    backend = _local_backend(cfg, args.jobs)
    preflight_models(cfg)  # a missing or broken model, a server that does not answer: one line, nothing written
    with Memory(args.store, cfg, backend=backend) as mem:
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
    pending = sum(len(mem.store.pending_messages(c)) for c in convs)
    print(f"{args.store}: {added} new messages ({before} already stored), {pending} to file, "
          f"{len(convs)} conversation(s), config {cfg.name}, batch size {args.batch_size}, "
          f"model instances {args.jobs}", file=sys.stderr)
    t0 = time.time()
    with _progress(pending, "loom") as bar:
        report = build_conversations(mem, convs, args.batch_size, seal=not args.keep_open, progress=bar.update,
                                     on_conversation=lambda c: bar.set_postfix_str(f"done {c}", refresh=False))
    return _finish_build(mem, convs, args.store, time.time() - t0, {"batched_calls": report.calls,
                                                                    "requests": report.requests})


def auto_jobs(cfg, conversations: int, batch_size: int) -> int:
    """Default --jobs on the local engine: with llama.cpp and several conversations in flight, one model
    instance per core (one thread each); otherwise one. Measured on a 2-core CPU with Qwen2.5-0.5B
    (BENCHMARKS.md, "Build throughput"): 16 conversations built batched ran 0.50 turns/s with two
    one-thread instances against 0.31 with one two-thread instance. One conversation at a time gains
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

    print(f"{args.store}: {len(messages)} messages, {len(convs)} conversation(s) over {args.jobs} Ray actor(s), "
          f"config {cfg.name}, batch size {args.batch_size}", file=sys.stderr)
    t0 = time.time()
    with WriteLock(args.store, "membox build --engine ray"), _progress(None, "loom") as bar:
        report = build_with_ray(args.store, messages, cfg, args.jobs, args.batch_size, seal=not args.keep_open,
                                address=args.ray_address, shard_dir=args.shard_dir, cpus_per_job=args.cpus_per_job,
                                gpus_per_job=args.gpus_per_job, progress=bar.update,
                                on_pending=lambda n: bar.reset(total=n))
    with Memory(args.store, cfg) as mem:
        return _finish_build(mem, convs, args.store, time.time() - t0,
                             {"engine": "ray", "per_shard": [{k: r[k] for k in ("shard", "conversations", "messages",
                                                                                "wall_s", "calls")}
                                                             for r in report["per_shard"]]})


def _finish_build(mem, convs: list[str], store: str, wall_s: float, extra: dict) -> int:
    """Print the build's stats and warnings; 1 (with an error line) when more boxes failed than
    [extract] max_failed_share allows, else 0."""
    mem.sync()
    stats = mem.stats()
    stats["wall_s"] = round(wall_s, 2)
    stats.update(extra)
    print(json.dumps(stats, indent=2))
    for comp in mem.components:
        for line in comp.warnings(convs):
            print(f"warning: {line}", file=sys.stderr)
    counts = [comp.failures(convs) for comp in mem.components]
    failed, total = sum(c[0] for c in counts), sum(c[1] for c in counts)
    limit = mem.config.extract.max_failed_share
    if total and failed / total > limit:
        print(f"error: {failed} of {total} boxes failed ({failed / total:.0%}, more than [extract] max_failed_share "
              f"= {limit:g}); the reasons: `membox show {store} --failed`; rerun the same build to retry them",
              file=sys.stderr)
        return 1
    return 0


def cmd_ask(args) -> int:
    from .memory import Memory

    cfg = load_config(args.config)
    _require_store(args.store)
    with Memory(args.store, cfg) as mem:
        _ask(mem, args)
    return 0


def _ask(mem, args) -> None:
    for q in args.question:
        ans = mem.answer(q, args.conversation, mode=args.mode, k=args.k, budget_tokens=args.budget)
        if args.json:
            print(json.dumps({"question": q, "answer": ans.text, "boxes": ans.context.box_ids,
                              "context_tokens": ans.context.tokens}))
            continue
        print(f"Q: {q}\nA: {ans.text}")
        print(f"   from boxes {ans.context.box_ids} ({ans.context.tokens} context tokens)")
        if args.verbose:
            print("   " + ans.context.text.replace("\n", "\n   "))
        print()


def cmd_show(args) -> int:
    from .memory import open_store

    _require_store(args.store)
    store = open_store(args.store)
    if getattr(args, "graph", False) or not hasattr(store, "boxes"):  # the event graph (an eventweave-only memory)
        from .graph_cli import print_graph

        print_graph(store, args.conversation)
        return 0
    if args.traces:
        from .show import print_traces

        print_traces(store, args.conversation)
        return 0
    for box in store.boxes(args.conversation):
        if args.failed and box.status != "failed" and not box.error:  # extraction or weaving failed
            continue
        first = box.messages[0].message_id if box.messages else "-"
        last = box.messages[-1].message_id if box.messages else "-"
        print(f"box {box.id} [{box.conversation_id} {first}..{last}, {len(box.messages)} msgs, "
              f"{box.session_date or 'session ' + box.session}] {box.status}")
        if box.topic:
            print(f"  topic: {box.topic}")
        if box.keywords:
            print(f"  keywords: {', '.join(box.keywords)}")
        for e in box.events:
            mark = "" if e.grounding >= 0.5 else f"  (weakly grounded: {e.grounding:.2f})"
            print(f"  - {e.text}{mark}")
        if box.error:
            print(f"  error: {box.error}")
        if args.messages:
            for m in box.messages:
                print(f"    {m.render()}")
    return 0


def cmd_forget(args) -> int:
    """Erase messages (or a whole conversation) and everything derived from them, on disk too."""
    from .memory import Memory

    _require_store(args.store)
    if args.messages is not None and not args.messages:
        raise InputError("--messages needs at least one message id (leave it out to forget the whole conversation)")
    cfg = load_config(args.config)
    with Memory(args.store, cfg) as mem:
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
    from .exchange import import_export, read_export
    from .memory import Memory

    export = read_export(args.file)  # every line checked before the memory folder is opened
    with Memory(args.store, load_config(args.config)) as mem:
        counts = import_export(mem, export)
    _print_moved(f"{args.store}: imported", counts)
    return 0


def _print_moved(what: str, counts: dict[str, int]) -> None:
    print(f"{what} {counts['messages']} message(s), {counts['boxes']} box(es), {counts['traces']} trace(s) of "
          f"{counts['conversations']} conversation(s)", file=sys.stderr)


def cmd_demo(args) -> int:
    """Build the bundled conversation, print its boxes and ask it questions, with one model load."""
    from .memory import Memory

    store = Path(args.store)
    build = argparse.Namespace(store=str(store), keep_open=False, batch_size=8, jobs=1)
    ask = argparse.Namespace(question=DEMO_QUESTIONS, conversation=None, mode=None, k=None, budget=None,
                             json=False, verbose=False)
    messages = load_messages(DEMO_DATA)
    with Memory(store, load_config(args.config)) as mem:
        _build_local(mem, build, messages, [messages[0].conversation_id])
        cmd_show(argparse.Namespace(store=str(store), conversation=None, traces=False, failed=False,
                                    messages=False))
        _ask(mem, ask)
    return 0


def _require_store(path: str) -> None:
    if not (Path(path) / "memory.db").exists():
        raise InputError(f"{path}: no memory here; create one with `membox build DATA --store {path}`")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="membox", description="Topic-continuity memory on local models.")
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="file a conversation file (LoCoMo .json or messages .jsonl) into a memory")
    b.add_argument("data")
    b.add_argument("--store", required=True, help="memory folder (created if missing)")
    b.add_argument("--config", default="cpu", help="config name in configs/ or a .toml path")
    b.add_argument("--conversations", nargs="*", help="only these conversation ids")
    b.add_argument("--keep-open", action="store_true", help="leave each conversation's last box open")
    b.add_argument("--batch-size", type=int, default=8,
                   help="conversations advanced together; their requests go to the model in one call per stage")
    b.add_argument("--jobs", type=int, default=None,
                   help="local engine: llama.cpp model instances (default: one per core when several "
                        "conversations are built, else 1); ray engine: actors (= store shards, default 1)")
    b.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="ray: shard conversations over Ray actors (pip install -e '.[ray]')")
    b.add_argument("--ray-address", help="Ray cluster to join (e.g. auto); default: start a local one")
    b.add_argument("--shard-dir", help="ray: node-local folder for shards when nodes share no disk")
    b.add_argument("--cpus-per-job", type=float, default=1, help="ray: CPUs each actor reserves")
    b.add_argument("--gpus-per-job", type=float, default=0, help="ray: GPUs each actor reserves (vLLM: 1)")
    b.set_defaults(func=cmd_build)

    a = sub.add_parser("ask", help="answer questions from a memory")
    a.add_argument("store")
    a.add_argument("question", nargs="+")
    a.add_argument("--config", default="cpu")
    a.add_argument("--conversation")
    a.add_argument("--mode", help="retrieval mode (default from config)")
    a.add_argument("-k", type=int)
    a.add_argument("--budget", type=int, help="context token budget")
    a.add_argument("--json", action="store_true")
    a.add_argument("-v", "--verbose", action="store_true", help="print the context too")
    a.set_defaults(func=cmd_ask)

    s = sub.add_parser("show", help="print boxes with topics, keywords and events")
    s.add_argument("store")
    s.add_argument("--conversation")
    s.add_argument("--traces", action="store_true")
    s.add_argument("--failed", action="store_true", help="only boxes whose extraction (or weaving) failed")
    s.add_argument("--messages", action="store_true", help="print each box's messages")
    s.add_argument("--graph", action="store_true",
                   help="print the event graph (eventweave): nodes with their events and dates, edges by kind")
    s.set_defaults(func=cmd_show)

    f = sub.add_parser("forget", help="erase a conversation or some of its messages, and all derived from them")
    f.add_argument("store")
    f.add_argument("--conversation", required=True, help="conversation id")
    f.add_argument("--messages", nargs="*", metavar="ID",
                   help="only these message ids (default: the whole conversation)")
    f.add_argument("--config", default="cpu", help="the config the memory was built with")
    f.set_defaults(func=cmd_forget)

    x = sub.add_parser("export", help="write a memory as JSON lines (header, then messages, boxes, traces)")
    x.add_argument("store")
    x.add_argument("-o", "--output", metavar="FILE", help="write to FILE (owner-only) instead of stdout")
    x.set_defaults(func=cmd_export)

    i = sub.add_parser("import", help="load an export file into an empty memory folder")
    i.add_argument("store", help="memory folder (created if missing; must hold no messages)")
    i.add_argument("file", help="a file written by `membox export`")
    i.add_argument("--config", default="cpu", help="the config the memory was built with")
    i.set_defaults(func=cmd_import)

    d = sub.add_parser("demo", help="build the bundled demo conversation and ask it questions")
    d.add_argument("--store", default="stores/demo")
    d.add_argument("--config", default="cpu")
    d.set_defaults(func=cmd_demo)

    import importlib

    ev = sub.add_parser("eval", help="evaluations (LoCoMo QA and retrieval, topic segmentation)")
    evsub = ev.add_subparsers(dest="eval_cmd", required=True)
    for name in EVAL_MODULES:
        importlib.import_module(f"membox_local.evaluation.{name}").add_parser(evsub)
    for name in COMMAND_MODULES:
        importlib.import_module(f"membox_local.{name}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (InputError, ConfigError, ModelNotFound, StoreError, BackendError) as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return 2


def one_line(text: str) -> str:
    """An error message as one printable line: a newline, NUL, escape or lone surrogate the input put in it
    (an id, a key) is shown escaped, as repr() shows it."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


if __name__ == "__main__":
    sys.exit(main())
