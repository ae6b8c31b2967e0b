"""Checked option values for every `membox` subcommand: a count below its minimum, a NaN, an unknown port or a
blank id is refused by argparse with one line naming the option and why, exit status 2, before anything runs.

Every numeric option of the command line takes its `type=` from here (tests/test_cli.py walks the parser tree and
refuses a bare `int` or `float`): `count(minimum)` for whole numbers, `number(low, high)` for reals, `PORT`.
`Parser` is the ArgumentParser whose errors are one line (argparse prints the usage first); subcommands inherit it.
"""
from __future__ import annotations

import argparse
import math
from typing import Callable

from .terminal import visible


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose error is one line on stderr, `membox ask: error: argument -k: ...`, exit status 2."""

    def error(self, message: str):  # argparse's contract: never returns
        self.exit(2, f"{self.prog}: error: {visible(message)} (see `{self.prog} --help`)\n")


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def count(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number from `minimum` (0 where 0 means "none" or "all", as --limit) up to `maximum`."""

    def parse(text: str) -> int:
        value = _whole(text)
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"at least {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise argparse.ArgumentTypeError(f"must be {bound} (got {value})")
        return value

    parse.__name__ = f"count(min={minimum})"  # argparse names the type in "invalid <name> value"
    parse.minimum, parse.maximum = minimum, maximum  # read by the test that walks the parser tree
    return parse


def number(low: float = 0.0, high: float = math.inf, low_open: bool = False) -> Callable[[str], float]:
    """A finite real number in [low, high] ((low, high] with `low_open`); NaN and infinities are refused."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < low or value > high or (low_open and value == low):
            lo = f"above {low:g}" if low_open else f"at least {low:g}"
            bound = lo if high == math.inf else f"{lo} and at most {high:g}"
            raise argparse.ArgumentTypeError(f"must be a finite number {bound} (got {text})")
        return value

    parse.__name__ = "number"
    parse.minimum, parse.maximum = low, high
    return parse


PORT = count(1, 65535)


def nonblank(text: str) -> str:
    """An id or a name: not empty, not only spaces."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be blank")
    return text

