"""`membox ask` says what it waits for: one line on stderr, redrawn in place, when stderr is a terminal and --quiet
is not given (execution.progress.Waiting); scripts and pipes see what they saw before."""
from __future__ import annotations

import io
import time

import pytest

from membox_local.cli import main
from membox_local.execution.progress import Waiting

from conftest import DEMO
from test_cli import FAST, config, doubles  # noqa: F401  (doubles: a fixture)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_is_drawn_in_place_with_its_seconds_and_cleared():
    term = Terminal()
    with Waiting(stream=term) as wait:
        wait.say("loading qwen")
        wait.say("reading 312 tokens with qwen\x1b]0;x")  # text from data stays visible, not a control
        time.sleep(0.7)
    out = term.getvalue()
    assert "\r\x1b[Kloading qwen ... 0 s" in out
    assert "reading 312 tokens with qwen\\x1b]0;x ... " in out and "\x1b]0" not in out
    assert out.count("reading 312") >= 2  # redrawn while it waits
    assert out.endswith("\r\x1b[K")  # cleared: the answer is printed where the line was


@pytest.mark.parametrize("stream, quiet", [(io.StringIO(), False), (Terminal(), True)], ids=["pipe", "quiet"])
def test_nothing_is_written_to_a_pipe_or_with_quiet(stream, quiet):
    with Waiting(quiet=quiet, stream=stream) as wait:
        wait.say("searching")
    assert stream.getvalue() == ""


def test_ask_shows_its_steps_on_a_terminal_and_prints_the_same_answer(tmp_path, doubles, capsys, monkeypatch):  # noqa: F811
    store = tmp_path / "store"
    assert main(["build", str(DEMO), "--store", str(store), "--config", str(config(tmp_path, FAST)), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["ask", str(store), "What is the name of Tom's cat?"]) == 0
    piped = capsys.readouterr()
    assert "A: " in piped.out and "searching" not in piped.err  # not a terminal: as before

    import sys
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(["ask", str(store), "What is the name of Tom's cat?"]) == 0
    shown = term.getvalue()
    assert "loading " in shown and f"searching {store}" in shown and " tokens with " in shown
    assert capsys.readouterr().out == piped.out  # the answer itself is the same
    term.seek(0)
    term.truncate()
    assert main(["ask", str(store), "What is the name of Tom's cat?", "--quiet"]) == 0
    assert "searching" not in term.getvalue()


def test_the_answering_model_loads_beside_the_search_and_its_failure_is_raised():
    """asking.loading_beside: the model is made on another thread while the block runs and is there after it; a
    model that fails to load raises after the block; the block's own error comes first, the thread joined."""
    import threading
    import time

    import pytest

    from membox_local.asking import loading_beside

    class Mem:
        def __init__(self, fail=False):
            self.fail, self.threads, self.made = fail, set(), False

        @property
        def answer_backend(self):
            self.threads.add(threading.current_thread().name)
            time.sleep(0.05)
            if self.fail:
                raise RuntimeError("no such model file")
            self.made = True
            return self

    mem = Mem()
    with loading_beside(mem):
        assert not mem.made  # still loading while the search runs
    assert mem.made and mem.threads == {"membox-load-answering-model"}
    with pytest.raises(RuntimeError, match="no such model file"):
        with loading_beside(Mem(fail=True)):
            pass
    slow = Mem(fail=True)
    with pytest.raises(KeyError):  # the search's error, not the loader's; the loader has finished
        with loading_beside(slow):
            raise KeyError("conversation")
    assert slow.threads and not any(t.name == "membox-load-answering-model" for t in threading.enumerate())
