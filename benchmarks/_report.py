"""Shared by the benchmark scripts: print a JSON report and optionally write it to a file."""
from __future__ import annotations

import json
from pathlib import Path


def emit(report: dict, out: str | None) -> None:
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
