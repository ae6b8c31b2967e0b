"""Where the fits write: runs/segmentation/<name>.json, and with --save a copy kept in the repository as
benchmarks/results/segmentation-<name>.json (both relative to the working directory: a checkout's root)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

RUNS = Path("runs") / "segmentation"
RESULTS = Path("benchmarks") / "results"


def command_line(args) -> str:
    """The command as it was given, rebuilt from the parsed options (whatever called `membox_local.cli.main`):
    the options that differ from their defaults, then the positional arguments."""
    parser = args.fit_parser
    options, positional = [], []
    for action in parser._actions:
        if action.dest in ("help", "fit_parser") or action.dest not in vars(args):
            continue
        value = getattr(args, action.dest)
        if not action.option_strings:
            positional.append(str(value))
        elif value != action.default:
            flag = action.option_strings[-1]
            if action.nargs == 0:
                options.append(flag)
            else:
                options += [flag, *map(str, value if isinstance(value, list) else [value])]
    return " ".join(["membox", "fit", args.fit_cmd, *options, *positional])


def write_result(name: str, report: dict, save: bool, indent: int = 2) -> Path:
    """runs/segmentation/<name>.json; with `save` also benchmarks/results/segmentation-<name>.json."""
    text = json.dumps(report, indent=indent) + "\n"
    RUNS.mkdir(parents=True, exist_ok=True)
    path = RUNS / f"{name}.json"
    path.write_text(text)
    if save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"segmentation-{name}.json").write_text(text)
        print(f"wrote {path} and {RESULTS / f'segmentation-{name}.json'}", file=sys.stderr)
    return path
