"""Where a server's C heap grows under load: heaptrack attached to `membox serve` after warm-up, for an add-only load
(8 clients adding messages and searching, no answers), then the allocations made while attached and still held at
the end, by the place in the code that made them.

    python benchmarks/heap_leaks.py --data ../shared/data/locomo-dev.json --save benchmarks/results/heap-leaks.json

Needs heaptrack and gdb (Debian: `apt-get install heaptrack gdb`); the server runs slower while heaptrack is
attached. Caches that fill up (SQLite's page caches, MKL's buffers per thread) show here too, and what the requests
in flight when heaptrack detaches hold (a JSON request's vocabulary-sized arrays): what matters is what keeps growing
with the load, so compare two windows (--detach-at). Run it alone: what it reports depends on how far the load gets.
`--keep FILE` keeps heaptrack's own file (`heaptrack --analyze FILE` reads it).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from membox_local.evaluation.soak import Load, Server, soak

# a place heaptrack reports: "1.39M leaked over 2209090 calls from" (an allocation function), then its call paths,
# "1.34M leaked over 1 calls from:" each, the colon telling them apart, their frames indented below
ENTRY = re.compile(r"^([0-9.]+)([KMGT]?)B? leaked over (\d+) calls from(:?)$")
UNIT = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}  # heaptrack prints sizes in powers of 1000
# frames that say nothing about who allocated: the interpreter's own and heaptrack's "at file:line" lines
PLUMBING = re.compile(r"^(at |in )|PyEval|gen_send|PyGen_|_PyObject_|_PyVectorcall|do_call_core|type_call|slot_tp"
                      r"|method_vectorcall|cfunction|^0x|_PyFunction|PyObject_Call|^thread_run|^pythread|^start_thread"
                      r"|^clone|^and [0-9.]+[KMGT]?B? from \d+ other places")


def size(number: str, unit: str) -> int:
    """Bytes of a size heaptrack printed ("589.82" "K")."""
    return int(float(number) * UNIT[unit])


def call_paths(text: str, frames: int = 6) -> list[dict]:
    """heaptrack_print's leak section as one row per call path: bytes, calls, the allocation function it reached
    and its first `frames` frames that are not the interpreter's plumbing, biggest first."""
    rows: list[dict] = []
    current, allocator, expect_allocator = None, "", False
    for line in text.splitlines():
        m = ENTRY.match(line)
        if m:
            current, expect_allocator = None, not m.group(4)
            if m.group(4):  # a call path of the allocation function above
                current = {"bytes": size(m.group(1), m.group(2)), "calls": int(m.group(3)),
                           "allocator": allocator, "frames": []}
                rows.append(current)
            continue
        if not line.startswith(" "):  # an allocation function's own line, or the summary: not a call path's frame
            current = None
            if expect_allocator and line.strip():
                allocator, expect_allocator = line.strip(), False
        name = line.strip()
        if current is not None and name and not PLUMBING.search(name) and len(current["frames"]) < frames:
            current["frames"].append(name)
    return sorted(rows, key=lambda r: -r["bytes"])


def attach(server: Server, out: Path, at_s: float, until_s: float, log: Path, said: dict) -> threading.Thread:
    """heaptrack attached to the server from `at_s` to `until_s` seconds after it listens, on a thread."""
    def run() -> None:
        time.sleep(at_s)
        said["rss_attached_mb"] = server.rss_mb()
        with open(log, "w") as f:
            ht = subprocess.Popen(["heaptrack", "-o", str(out), "-p", str(server.proc.pid)], stdout=f,
                                  stderr=subprocess.STDOUT)
            time.sleep(until_s - at_s)
            said["rss_detached_mb"] = server.rss_mb()
            ht.send_signal(signal.SIGINT)  # heaptrack stops recording and writes its file
            said["heaptrack_rc"] = ht.wait(300)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="cpu-fast", help="the server's config (default cpu-fast, the test config)")
    p.add_argument("--data", type=Path, help="LoCoMo-style JSON whose lines the clients add (default: the demo)")
    p.add_argument("--seconds", type=float, default=330.0, help="how long the load runs")
    p.add_argument("--attach-at", type=float, default=90.0, help="seconds after the server listens (after warm-up)")
    p.add_argument("--detach-at", type=float, default=300.0)
    p.add_argument("--top", type=int, default=8, help="call paths to report")
    p.add_argument("--save", type=Path)
    p.add_argument("--keep", type=Path, help="copy heaptrack's file here")
    a = p.parse_args(argv)
    missing = [tool for tool in ("heaptrack", "heaptrack_print", "gdb") if shutil.which(tool) is None]
    if missing:
        print(f"heap_leaks.py: {', '.join(missing)} not found (Debian: apt-get install heaptrack gdb)", file=sys.stderr)
        return 2
    if not a.attach_at < a.detach_at < a.seconds:
        print(f"heap_leaks.py: needs --attach-at < --detach-at < --seconds, got {a.attach_at}, {a.detach_at}, "
              f"{a.seconds}", file=sys.stderr)
        return 2
    said: dict = {}
    threads: list[threading.Thread] = []
    with tempfile.TemporaryDirectory(prefix="membox-heap-") as tmp:
        out = Path(tmp) / "heaptrack"
        load = Load(clients=8, seconds=a.seconds, conversations=20, answer_every=10**9)
        res = soak(Path(tmp) / "store", a.config, load, data=a.data,
                   on_ready=lambda s: threads.append(attach(s, out, a.attach_at, a.detach_at, Path(tmp) / "ht.log",
                                                            said)))
        threads[0].join()
        found = sorted(Path(tmp).glob("heaptrack*.zst")) + sorted(Path(tmp).glob("heaptrack*.gz"))
        if not found:
            print(f"heap_leaks.py: heaptrack wrote no file: {(Path(tmp) / 'ht.log').read_text()[-500:]}",
                  file=sys.stderr)
            return 1
        if a.keep:
            shutil.copyfile(found[0], a.keep)
        text = subprocess.run(["heaptrack_print", "-f", str(found[0]), "--print-leaks", "1", "--print-peaks", "0",
                               "--print-allocators", "0", "--print-temporary", "0", "-n", "40"],
                              capture_output=True, text=True, check=True).stdout
    total = re.search(r"total memory leaked: ([0-9.]+)([KMGT]?)", text)
    held = size(*total.groups()) if total else None
    paths = call_paths(text)[:a.top]
    shown = f"{held / 1e6:.2f}" if held is not None else "?"
    print(f"attached {a.detach_at - a.attach_at:.0f} s: {shown} MB allocated then and still held at the end;"
          f" {res['messages_stored']} messages stored, {res['messages_filed']} filed")
    for r in paths:
        print(f"  {r['bytes'] / 1e6:7.2f} MB over {r['calls']} calls to {r['allocator']}: "
              f"{' < '.join(r['frames'][:4])}")
    if a.save:
        a.save.parent.mkdir(parents=True, exist_ok=True)
        a.save.write_text(json.dumps({
            "command": "python benchmarks/heap_leaks.py " + " ".join(argv or sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d"), "config": a.config, "attached_s": [a.attach_at, a.detach_at],
            "held_mb": round(held / 1e6, 2) if held is not None else None, "top": paths,
            "rss_mb": {k: said.get(k) for k in ("rss_attached_mb", "rss_detached_mb")},
            "messages": {"stored": res["messages_stored"], "filed": res["messages_filed"]}}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
