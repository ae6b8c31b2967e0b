"""A large JSON file read a piece at a time (chat exports of years run to hundreds of MB): the elements of a list, or
of a list inside an object, parsed one by one from a buffer refilled a chunk at a time, so that only one element and
about a chunk of text are held, never the whole file as JSON. A malformed element is refused with its number and
line, one line (ingest.InputError)."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .ingest import InputError

CHUNK = 1 << 20


class Reader:
    """A JSON text read a chunk at a time: the next character past white space, and the next value, from a buffer
    that holds what is not yet consumed (about a chunk, or one value longer than that)."""

    def __init__(self, fh, path: Path, chunk: int = CHUNK):
        self.fh, self.path, self.chunk, self.buf, self.pos, self.line = fh, path, chunk, "", 0, 1
        self.decoder = json.JSONDecoder()

    def more(self) -> bool:
        data = self.fh.read(max(self.chunk, len(self.buf) - self.pos))  # a long value: twice the buffer each time
        if not data:
            return False
        self.line += self.buf.count("\n", 0, self.pos)
        self.buf, self.pos = self.buf[self.pos:] + data, 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos:self.pos + 1]

    def value(self, what: str = "value"):
        """The next JSON value, read whole; a malformed one is an InputError naming `what` and its line, as soon as
        the error is seen (not where the buffer's end cuts the value: there the next chunk is read first)."""
        self.peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
                number = isinstance(value, (int, float)) and not isinstance(value, bool)
                # a number the buffer's end cuts ("12" of "1234", "89" of "89.5e3") goes on in the next chunk
                if not (number and (end >= len(self.buf) or self.buf[end] in ".eE+-")) or not self.more():
                    self.pos = end
                    return value
            except json.JSONDecodeError as exc:
                cut = exc.pos >= len(self.buf) - 6 or exc.msg.startswith("Unterminated string")
                if not (cut and self.more()):
                    line = self.line_at(exc.pos)
                    raise InputError(f"{self.path} line {line} ({what}): not JSON ({exc.msg})") from None

    def skip(self, what: str = "value") -> None:
        """Pass over the next value, an object or list a member or element at a time (memory: the largest of them)."""
        c = self.peek()
        if c == "{":
            for key in self.members():
                self.skip(key)
        elif c == "[":
            for _ in self.elements(what):
                pass
        else:
            self.value(what)

    def expect(self, char: str, what: str) -> None:
        if self.peek() != char:
            raise InputError(f"{self.path} line {self.line_at()}: expected {char!r} ({what})")
        self.pos += 1

    def line_at(self, pos: int | None = None) -> int:
        return self.line + self.buf.count("\n", 0, self.pos if pos is None else pos)

    def elements(self, what: str) -> Iterator:
        """The elements of the list that starts here, one at a time (`what`: an element's name in errors)."""
        self.expect("[", f"a list of {what}s")
        n = 0
        while (c := self.peek()) != "]":
            if n:
                if c != ",":
                    raise InputError(f"{self.path} line {self.line_at()}: expected ',' or ']' after {what} {n - 1}")
                self.pos += 1
            yield self.value(f"{what} {n}")
            n += 1
        self.pos += 1

    def members(self) -> Iterator[str]:
        """The keys of the object that starts here, each yielded with the reader at its value: the caller reads the
        value (`value`, `elements`, or another `members`) before asking for the next key."""
        self.expect("{", "an object")
        first = True
        while (c := self.peek()) != "}":
            if not first:
                if c != ",":
                    raise InputError(f"{self.path} line {self.line_at()}: expected ',' or '}}'")
                self.pos += 1
            key = self.value("a key")
            if not isinstance(key, str):
                raise InputError(f"{self.path} line {self.line_at()}: an object's key is a string")
            self.expect(":", f"after the key {key!r}")
            yield key
            first = False
        self.pos += 1


@contextmanager
def reading(path: Path, chunk: int = CHUNK) -> Iterator[Reader]:
    """A Reader of the file; a file that cannot be read or is not UTF-8 is an InputError naming it."""
    try:
        with path.open(encoding="utf-8-sig") as fh:
            yield Reader(fh, path, chunk)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not valid UTF-8") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None
