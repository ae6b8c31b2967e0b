"""What long work shows while it runs: a tqdm bar that counts steps and says what the model is doing.

Two hooks, both optional and independent, so that a caller that only counts keeps working:
- `progress(n)`: n more units done (a message taken in by a memory system; a question answered);
- `describe(text)`: what the next model call is about ("extracting box 12", "eventweave: events of turn D1:3"),
  said before a call that may take minutes, so that a bar never sits silent on one turn.

`DescribingDriver` calls `describe` before each batched model call (embeddings are quick and say nothing);
`Bar` is the tqdm bar with both hooks (`quiet`: nothing is shown, the hooks still work).
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

from ..backends.base import JsonRequest, LabelRequest, ScoreRequest, TextRequest
from ..requests import Request
from ..terminal import unfiltered, visible
from .driver import Driver

Describe = Callable[[str], None]

# a request's stage -> what the bar says while it runs
STAGE_WORDS = {"judge": "judging continuity", "extract": "extracting", "link": "weaving", "trace-init": "weaving",
               "ew-extract": "eventweave: events of", "ew-summary": "eventweave: summarising", "answer": "answering"}
MODEL_KINDS = (LabelRequest, JsonRequest, TextRequest, ScoreRequest)
SHOWN = 3  # the `about`s named for one stage; the rest are counted


def describe_requests(requests: list[Request]) -> str:
    """One line for a batch of model requests: each stage's words and what its requests are about, e.g.
    "extracting box 12", "extracting boxes 12, 14, 17 +2 more, judging continuity x3"; "" for embeddings only."""
    by_stage: dict[str, list[str]] = {}
    for r in requests:
        if isinstance(r, MODEL_KINDS):
            by_stage.setdefault(r.stage, []).append(getattr(r, "about", ""))
    return ", ".join(_stage_line(stage, abouts) for stage, abouts in by_stage.items())


def _stage_line(stage: str, abouts: list[str]) -> str:
    words = STAGE_WORDS.get(stage, stage)
    named = [a for a in dict.fromkeys(abouts) if a]
    if not named:
        return words + (f" x{len(abouts)}" if len(abouts) > 1 else "")
    if len(named) == 1:
        return f"{words} {named[0]}"
    kind, _, _ = named[0].partition(" ")  # "box 12", "box 14" -> "boxes 12, 14"
    if all(a.partition(" ")[0] == kind for a in named):
        shown = ", ".join(a.partition(" ")[2] for a in named[:SHOWN])
        named_as = f"{_plural(kind)} {shown}"
    else:
        named_as = ", ".join(named[:SHOWN])
    return f"{words} {named_as}" + (f" +{len(named) - SHOWN} more" if len(named) > SHOWN else "")


def _plural(word: str) -> str:
    return word + ("es" if word.endswith(("x", "s")) else "s")


class DescribingDriver(Driver):
    """A Driver that says what each batched model call is about (`describe`) before making it."""

    def __init__(self, *args, describe: Describe | None = None, **kw):
        super().__init__(*args, **kw)
        self.describe = describe

    def execute(self, requests: list[Request], conversations: list[str]) -> list[Any]:
        if self.describe is not None:
            text = describe_requests(requests)
            if text:
                self.describe(text)
        return super().execute(requests, conversations)


class Bar:
    """A tqdm bar on stderr (rate and ETA) with the two hooks: `update(n)` and `describe(text)`; a description
    is redrawn only when it changes. `quiet`: nothing is drawn."""

    def __init__(self, total: int | None, desc: str, unit: str = "turn", quiet: bool = False, leave: bool = True):
        from tqdm import tqdm

        self.desc = visible(desc)  # descriptions name conversations and boxes: text from data
        self._said = ""
        # the bar redraws itself with carriage returns: it writes under the command line's guard (terminal.py)
        self.bar = tqdm(total=total, desc=self.desc, unit=unit, dynamic_ncols=True, file=unfiltered(sys.stderr),
                        disable=quiet, leave=leave)

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def describe(self, text: str) -> None:
        if text != self._said:
            self._said = text
            text = visible(text)
            self.bar.set_description_str(f"{self.desc}: {text}" if self.desc else text)

    def reset(self, total: int | None = None) -> None:
        self.bar.reset(total=total)

    def set_postfix_str(self, text: str) -> None:
        self.bar.set_postfix_str(visible(text), refresh=False)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Waiting:
    """One line on stderr saying what a command waits for and for how long ("reading 1480 tokens with
    qwen2.5-coder-1.5b ... 12 s"), redrawn in place twice a second and cleared when the work is done: shown only when
    stderr is a terminal and not `quiet`, so scripts and pipes see what they saw before. Use: `with Waiting() as
    wait: wait.say("searching"); ...`."""

    def __init__(self, quiet: bool = False, stream=None):
        out = unfiltered(stream or sys.stderr)
        self.out = out if not quiet and out.isatty() else None
        self.text, self.since = "", 0.0
        self._shown = False  # a line is on the screen (cleared once only: text may be printed after it)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        """What is being done now (shown at once, its seconds counted from now)."""
        with self._lock:
            self.text, self.since = visible(text), time.monotonic()
        self._draw()
        if self.out is not None and self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="membox-waiting", daemon=True)
            self._thread.start()

    def _draw(self, clear: bool = False) -> None:
        if self.out is None:
            return
        with self._lock:
            if clear and not self._shown:
                return
            line = "" if clear else f"{self.text} ... {time.monotonic() - self.since:.0f} s"
            self.out.write("\r\x1b[K" + line)
            self.out.flush()
            self._shown = not clear

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self._draw()

    def done(self) -> None:
        """Clear the line (the answer is printed where it was); once: a second call writes nothing, so that text
        printed after the first (a streamed answer) stays."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._draw(clear=True)
        self._stop.clear()

    def __enter__(self) -> "Waiting":
        return self

    def __exit__(self, *exc) -> None:
        self.done()
