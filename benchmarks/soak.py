"""A soak of `membox serve` (and `membox mcp`): N clients, mixed adds, searches and answers over many conversations
for a set time, while the server files in the background (membox_local/evaluation/soak.py).

    python benchmarks/soak.py --config cpu-fast --clients 8 --minutes 10 --save benchmarks/results/soak-cpu-fast.json
    python benchmarks/soak.py --kind mcp --minutes 3 ...

Each server starts on a fresh memory folder in a temporary directory. Run it alone on the machine: the table says
the load average before it. Exit status 1 when any response was a 5xx (or a refused connection, a timeout), the
server's log holds a traceback, or an accepted message was not stored exactly once.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from membox_local.argtypes import count, number
from membox_local.evaluation.soak import Load, minute_lows, soak, verdicts


def table(results: dict[str, dict]) -> str:
    rows = ["| server | route | requests | statuses | p50 s | p95 s | max s |", "|---|---|---|---|---|---|---|"]
    for kind, res in results.items():
        for route, r in res["routes"].items():
            statuses = ", ".join(f"{k}: {v}" for k, v in sorted(r["statuses"].items()))
            rows.append(f"| {kind} | {route} | {r['requests']} | {statuses} | {r['p50_s']} | {r['p95_s']} | "
                        f"{r['max_s']} |")
    for kind, res in results.items():
        rss = res["rss"]
        rows.append(f"\n{kind}: resident memory {rss['warm_mb']} MB after {res['load']['warm_s']:.0f} s, "
                    f"{rss['end_mb']} MB at the end ({rss['growth_mb']:+} MB; largest {rss['max_mb']} MB; the last "
                    f"minute's median against the first minute's after it {rss['trend_mb']:+} MB; "
                    f"{res['messages_stored']} messages "
                    f"stored, {res['messages_filed']} filed); tracebacks {res['tracebacks']}; accepted {res['accepted']}, not stored "
                    f"{len(res['accepted_not_stored'])}, stored twice {len(res['stored_twice'])}, refused but "
                    f"stored {len(res['refused_but_stored'])}")
        lows = minute_lows(res["rss_samples"], res["load"]["seconds"])
        rows.append(f"{kind}: each minute's lowest sample after the first, MB: {', '.join(str(x) for x in lows)}")
        by_kind = res.get("rss_by_kind") or {}
        if by_kind.get("anon") is not None:
            rows.append(f"{kind}: of that growth, heaps and buffers {by_kind['anon']:+} MB, pages of mapped files "
                        f"(model weights read in) {by_kind['file']:+} MB")
        held = res.get("indexes_mb") or {}
        if res.get("growth_beyond_data_mb") is not None:
            rows.append(f"{kind}: the server's vector indexes held {held['warm']} MB at the end of warm-up "
                        f"({res['messages_stored_at_warm']} messages stored) and {held['end']} MB at the end; the "
                        f"growth after warm-up beyond that: {res['growth_beyond_data_mb']:+} MB")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="cpu-fast", help="the server's config (default cpu-fast, the test config)")
    ap.add_argument("--kind", choices=("serve", "mcp", "both"), default="serve", help="which server(s), in turn")
    ap.add_argument("--clients", type=count(1), default=8)
    ap.add_argument("--minutes", type=number(0, low_open=True), default=10.0)
    ap.add_argument("--conversations", type=count(1), default=20)
    ap.add_argument("--warm-s", type=number(0), default=60.0,
                    help="resident memory's growth is counted from this many seconds in (default 60)")
    ap.add_argument("--data", type=Path, help="messages to send: a LoCoMo .json or a messages .jsonl (default the "
                                               "bundled demo conversation)")
    ap.add_argument("--save", type=Path, help="write the results here (JSON)")
    args = ap.parse_args(argv)
    load = Load(clients=args.clients, seconds=args.minutes * 60, conversations=args.conversations)
    results, bad = {}, []
    for kind in (("serve", "mcp") if args.kind == "both" else (args.kind,)):
        load1 = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="membox-soak-") as tmp:
            print(f"soak: {kind} for {args.minutes:g} min, {args.clients} clients, config {args.config} "
                  f"(1-minute load {load1:.2f})", file=sys.stderr)
            res = soak(Path(tmp) / "mem", args.config, load, kind=kind, data=args.data, warm_s=args.warm_s)
        res["load_before"] = round(load1, 2)
        results[kind] = res
        bad += [f"{kind}: {line}" for line in verdicts(res)]
    print(table(results))
    for line in bad:
        print("FAILED " + line, file=sys.stderr)
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text(json.dumps({"command": "python benchmarks/soak.py " + " ".join(argv or sys.argv[1:]),
                                         "date": time.strftime("%Y-%m-%d"), "machine": machine(),
                                         "config": args.config, "results": results}, indent=1) + "\n")
    return 1 if bad else 0


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return f"{os.cpu_count()} cores, {cpu}"


if __name__ == "__main__":
    sys.exit(main())
