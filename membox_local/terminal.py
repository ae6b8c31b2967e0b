"""Text from data on a terminal, with its control characters made visible.

A speaker name, a message, a topic or an id comes from whoever wrote the conversation file. Printed raw, an escape
sequence in it can retitle or clear the user's terminal, a carriage return can overwrite the line before it and a
bidi override can show text in another order. Two layers keep them off the terminal:
- `visible(text)`: one field made safe where it is printed (`membox show`, answers, progress descriptions, error
  lines): every control character, bidi control, line separator and lone surrogate as its escape (`\\x1b`,
  `\\u202e`), newlines included, so that a field stays on its own line;
- `guarded_streams()`: the command line's stdout and stderr filtered as a last net: the same characters, except
  newline and tab, written as JSON-style `\\uXXXX` escapes. A JSON document printed through it (`--json`,
  `membox export`) still parses to the same text: json.dumps escapes C0 itself, and `\\u0085` in a string means
  the character it replaced. The progress bar writes to the unfiltered stream (its own `\\r`), its texts through
  `visible`. Files (`membox view -o`, `export -o`) are written as they are.
A library's progress bar (tqdm's: transformers' "Loading weights", an evaluation's bar) is library output meant for
the terminal, not data: what tqdm writes keeps the two controls it draws with (a carriage return, the cursor moved up
a line) and has every other one escaped; with `--quiet` (`drop_bars`) it is not written at all.
"""
from __future__ import annotations

import io
import sys
import unicodedata
from contextlib import contextmanager

# bidi embeddings, overrides and isolates: reorder what follows them on screen
BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def _unsafe(ch: str) -> bool:
    if ch in BIDI:
        return True
    return unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")  # controls, lone surrogates, line/para separators


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


def visible(text: str) -> str:
    """`text` with every control character (newline and tab too), bidi control and lone surrogate escaped."""
    text = str(text)
    if text.isprintable():  # the common case, fast (isprintable is False for every character escaped here)
        return text
    return "".join(_escape(c) if _unsafe(c) else c for c in text)


def filtered(text: str, keep: str = "\n\t") -> str:
    """What the guarded streams write: newline and tab (the characters of `keep`) kept, the rest of `visible`'s set
    as `\\uXXXX`."""
    if text.isprintable():
        return text
    return "".join(f"\\u{ord(c):04x}" if _unsafe(c) and c not in keep else c for c in text)


BAR_CURSOR_UP = "\x1b[A"  # tqdm's move to the line above (a bar among several)


def bar_filtered(text: str) -> str:
    """What a progress bar writes, filtered: its carriage returns and cursor-up moves kept, every other control
    escaped (a bar's description is a library's text, or went through `visible`)."""
    return BAR_CURSOR_UP.join(filtered(part, keep="\n\t\r") for part in text.split(BAR_CURSOR_UP))


def from_progress_bar() -> bool:
    """Whether the write being filtered comes from tqdm (its file wrapper, or tqdm.write): the caller of
    GuardedStream.write, or the one before it."""
    try:
        frame = sys._getframe(2)
    except ValueError:  # called from the top of a stack
        return False
    for _ in range(2):
        if frame is None:
            return False
        if frame.f_globals.get("__name__", "").partition(".")[0] == "tqdm":
            return True
        frame = frame.f_back
    return False


def visible_lines(text: str) -> str:
    """A printout of several lines with each line made `visible` (its own newlines kept)."""
    return "\n".join(visible(line) for line in str(text).split("\n"))


class GuardedStream(io.TextIOBase):
    """A text stream that writes `filtered(text)` to `unfiltered`, the stream it wraps. It says it is no terminal
    (isatty False), so that libraries writing to it (uvicorn's log) send no colour codes of their own."""

    def __init__(self, stream):
        super().__init__()
        self.unfiltered = stream
        self.bars = True  # progress bars of libraries drawn (False: dropped, `--quiet`)

    def write(self, text: str) -> int:
        if from_progress_bar():
            if self.bars:
                self.unfiltered.write(bar_filtered(text))
            return len(text)
        self.unfiltered.write(filtered(text))
        return len(text)

    def flush(self) -> None:
        self.unfiltered.flush()

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.unfiltered.fileno()

    @property
    def encoding(self):
        return getattr(self.unfiltered, "encoding", "utf-8")

    @property
    def buffer(self):  # bytes written here bypass the filter: only for files meant to be written as they are
        return self.unfiltered.buffer


@contextmanager
def guarded_streams():
    """sys.stdout and sys.stderr filtered inside the block (a guarded stream is left as it is), then restored."""
    saved = sys.stdout, sys.stderr
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, GuardedStream):
            setattr(sys, name, GuardedStream(stream))
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, GuardedStream):
                stream.flush()
        sys.stdout, sys.stderr = saved


def drop_bars() -> None:
    """From now on, the guarded streams drop what progress bars write (tqdm's, a library's): `--quiet`."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, GuardedStream):
            stream.bars = False


def unfiltered(stream):
    """The stream under a guard (the progress bar draws with its own carriage returns), or `stream` itself."""
    return getattr(stream, "unfiltered", stream)
