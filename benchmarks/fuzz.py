"""The full fuzzing run of tests/test_fuzz.py (issue 24: bad input tried systematically), with the counts.

    nice -n 15 .venv/bin/python benchmarks/fuzz.py [--examples 2000] [--seed N] [--out benchmarks/results/fuzz.json]

runs `pytest tests/test_fuzz.py` with MEMBOX_FUZZ_EXAMPLES=--examples (examples per property, times each
property's weight: 2000 makes over 10,000 cases) and a random seed (or --seed; hypothesis prints it again on a
failure), and writes, per property, the cases run, accepted and refused, the tracebacks (inputs refused with
anything but the library's own errors), the refused inputs that changed the memory folder, and other violations
(a verdict other than the format's rules give, an error line that does not name the file), with the date, the
command and pytest's exit status. Cases counted include those hypothesis replays while it shrinks a failure.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNTS = ("cases", "accepted", "rejected", "tracebacks", "store_changed", "other_violations")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=2000, help="MEMBOX_FUZZ_EXAMPLES (examples per property)")
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: a random one, recorded)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fuzz.json"))
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    with tempfile.TemporaryDirectory() as tmp:
        tally_path = Path(tmp) / "tally.json"
        env = dict(os.environ, MEMBOX_FUZZ_EXAMPLES=str(args.examples), MEMBOX_FUZZ_REPORT=str(tally_path))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fuzz.py",
               f"--hypothesis-seed={seed}", "--hypothesis-show-statistics", "--durations=0"]
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=ROOT, env=env)
        wall = time.time() - t0
        tally = json.loads(tally_path.read_text()) if tally_path.exists() else {}
    props = {name: {k: c.get(k, 0) for k in COUNTS} for name, c in sorted(tally.items())}
    totals = {k: sum(p[k] for p in props.values()) for k in COUNTS}
    result = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": f"nice -n 15 .venv/bin/python benchmarks/fuzz.py --examples {args.examples} --seed {seed}",
        "pytest_command": f"MEMBOX_FUZZ_EXAMPLES={args.examples} " + " ".join(["python"] + cmd[1:]),
        "examples_per_property": args.examples,
        "seed": seed,
        "pytest_exit": proc.returncode,
        "wall_s": round(wall, 1),
        "properties": props,
        "totals": totals,
        "notes": "cases: generated inputs run through a property (hypothesis replays while shrinking included; "
                 "api_add_as_jsonl and model_names are checks made inside test_api_add and test_configs); "
                 "tracebacks: inputs that raised anything but InputError, ConfigError, StoreError or ModelNotFound "
                 "(out of `membox` in-process: anything but an exit status); store_changed: refused inputs after "
                 "which a file of the memory folder differed or the folder appeared (build.lock's holder token "
                 "aside when the refusal came from a check under the write lock: an id stored with other text, "
                 "other build settings); other_violations: a verdict other than the format's rules give, a second "
                 "read or answer that differed, stderr other than one `error: ...` line, an error naming no file "
                 "or not the bad line and field.",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"totals": totals, "pytest_exit": proc.returncode, "out": str(out)}))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
