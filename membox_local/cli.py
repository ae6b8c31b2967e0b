"""Command line: `membox build | ask | show | demo`."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .config import ConfigError, load_config
from .ingest import InputError, load_messages
from .models import ModelNotFound
from .store import StoreError

DEMO_DATA = Path(__file__).parent / "data" / "demo.jsonl"

# Modules under membox_local/evaluation/ that add a `membox eval <name>` subcommand via add_parser(subparsers).
EVAL_MODULES: list[str] = []
# Other modules that add a top-level subcommand via add_parser(subparsers).
COMMAND_MODULES: list[str] = []


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="msg", dynamic_ncols=True, file=sys.stderr)


def cmd_build(args) -> int:
    from .memory import Memory

    messages = load_messages(args.data, args.conversations)  # validated in full before any write
    cfg = load_config(args.config)
    with Memory(args.store, cfg) as mem:
        before = len(mem.store.message_rows())
        added = mem.store.add_messages(messages)
        convs = list(dict.fromkeys(m.conversation_id for m in messages))
        pending = sum(len(mem.store.pending_messages(c)) for c in convs)
        print(f"{args.store}: {added} new messages ({before} already stored), {pending} to file, "
              f"{len(convs)} conversation(s), config {cfg.name}", file=sys.stderr)
        t0 = time.time()
        driver = mem.driver()
        with _progress(pending, "loom") as bar:
            for conv in convs:
                bar.set_postfix_str(conv)
                driver.drive(mem.conversation_step(conv, seal=not args.keep_open, progress=bar.update), conv)
        mem.sync_box_index()
        stats = mem.stats()
        stats["wall_s"] = round(time.time() - t0, 2)
        failed = stats["box_status"].get("failed", 0)
        print(json.dumps(stats, indent=2))
        if failed:
            print(f"warning: {failed} box(es) failed extraction (see `membox show {args.store} --failed`); "
                  f"rerun the same build to retry them", file=sys.stderr)
    return 0


def cmd_ask(args) -> int:
    from .memory import Memory

    cfg = load_config(args.config)
    _require_store(args.store)
    with Memory(args.store, cfg) as mem:
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
    return 0


def cmd_show(args) -> int:
    from .store import Store

    _require_store(args.store)
    store = Store(Path(args.store) / "memory.db")
    if args.traces:
        from .show import print_traces

        print_traces(store, args.conversation)
        return 0
    for box in store.boxes(args.conversation):
        if args.failed and box.status != "failed":
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


def cmd_demo(args) -> int:
    store = Path(args.store)
    rc = cmd_build(argparse.Namespace(data=str(DEMO_DATA), store=str(store), config=args.config,
                                      conversations=None, keep_open=False))
    if rc:
        return rc
    cmd_show(argparse.Namespace(store=str(store), conversation=None, traces=False, failed=False, messages=False))
    questions = [
        "Which race did Maya sign up for?",
        "What did the physio tell Maya to do about her knee?",
        "What is the name of Tom's cat?",
    ]
    return cmd_ask(argparse.Namespace(store=str(store), config=args.config, question=questions, conversation=None,
                                      mode=None, k=None, budget=None, json=False, verbose=False))


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
    s.add_argument("--failed", action="store_true", help="only boxes whose extraction failed")
    s.add_argument("--messages", action="store_true", help="print each box's messages")
    s.set_defaults(func=cmd_show)

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
    except (InputError, ConfigError, ModelNotFound, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
