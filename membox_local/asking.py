"""`membox ask`'s answers on the terminal: what it waits for said on stderr while it runs (execution.progress.Waiting),
and, when stdout is a terminal, the answer printed as the answering model writes it (AnswerPrinter). `--json`,
`--quiet` and a stdout that is no terminal get each answer whole, once it is done, as before."""
from __future__ import annotations

import json
import sys
import threading
from contextlib import contextmanager

from .execution.progress import Waiting
from .memory_reading import source_list
from .terminal import unfiltered, visible


def print_answers(mem, args) -> None:
    """Answer each of args.question in turn and print it (the command line's checks are done: cli._ask)."""
    for q in args.question:
        printer = AnswerPrinter(q) if streams(args) else None
        ans = answer_showing_the_wait(mem, args, q, printer)
        if args.json:
            print(json.dumps({"question": q, "answer": ans.text, "boxes": ans.context.box_ids,
                              "context_tokens": ans.context.tokens, "sources": source_list(ans)}))
            continue
        if printer is None or not printer.finish(ans.text):
            print(f"Q: {visible(q)}\nA: {visible(ans.text)}")
        if ans.sources:
            print("   read from " + "; ".join(visible(f"{m.message_id} ({m.speaker}, {m.session_date or 'no date'})")
                                           for m in ans.sources))
        print(f"   from boxes {ans.context.box_ids} ({ans.context.tokens} context tokens)")
        if args.verbose:
            print("\n".join("   " + visible(line) for line in ans.context.text.split("\n")))
        print()


def streams(args) -> bool:
    """Whether answers are printed as they are written: stdout is a terminal (under the command line's guard:
    terminal.unfiltered), and neither --json nor --quiet is given."""
    return not args.json and not getattr(args, "quiet", False) and unfiltered(sys.stdout).isatty()


def answer_showing_the_wait(mem, args, question: str, printer: "AnswerPrinter | None" = None):
    """Memory.answer's steps, each said on stderr while it runs when that is a terminal (execution.progress.Waiting):
    loading the answering model (the first question), searching, reading the context's tokens. With a `printer`,
    the answer's text goes to it as the model writes it, the waiting line cleared at its first piece."""
    today = args.today or ""
    asked = mem.asked(question, today)  # `today` checked before any work
    with Waiting(quiet=getattr(args, "quiet", False)) as wait:  # `membox demo` asks without the option
        model = mem.config.answer_llm().model
        wait.say(f"searching {mem.path}, loading {model}")
        with loading_beside(mem):  # the model loads on the other core while the search reads the memory
            ctx = mem.context(question, args.conversation, mode=args.mode, k=args.k, budget_tokens=args.budget)
        wait.say(f"reading {ctx.tokens} tokens with {model}")
        if printer is not None:
            printer.wait = wait
        return mem.answer_from(asked, ctx, args.conversation, today=today, on_text=printer)


@contextmanager
def loading_beside(mem):
    """Memory.answer_backend made on a thread of its own while the block runs (llama.cpp loads and repacks its
    weights in native code, beside the search's Python and torch: about 1 s less of a cold `membox ask` on two
    cores), joined at the block's end; a failure to load is raised there (the block's own error first)."""
    failed: list[BaseException] = []

    def load() -> None:
        try:
            mem.answer_backend
        except BaseException as exc:  # raised in the asking thread
            failed.append(exc)

    thread = threading.Thread(target=load, name="membox-load-answering-model", daemon=True)
    thread.start()
    try:
        yield
    except Exception:  # the next question must not load the model a second time beside this thread
        thread.join()
        raise
    thread.join()  # (Ctrl-C leaves at once: the thread is a daemon)
    if failed:
        raise failed[0]


class AnswerPrinter:
    """Prints "Q: ...\\nA: " at the answer's first piece (after clearing the waiting line, so that the two never
    share a line), then each piece as it comes, every one through `visible` as any answer is; `finish` ends the
    line. Memory.answer_from hands over pieces only where the model's text is the answer, and they join to it."""

    def __init__(self, question: str, out=None):
        self.question, self.out = question, out
        self.wait: Waiting | None = None
        self.text = ""  # what was printed, as the model wrote it

    def __call__(self, piece: str) -> None:
        out = self.out or sys.stdout
        if not self.text:
            if self.wait is not None:
                self.wait.done()
            out.write(f"Q: {visible(self.question)}\nA: ")
        self.text += piece
        out.write(visible(piece))
        out.flush()

    def finish(self, answer: str) -> bool:
        """End the printed answer's line; False when nothing was printed (the answer was decided without the model's
        text: the caller prints it whole)."""
        if not self.text:
            return False
        out = self.out or sys.stdout
        out.write("\n")
        if self.text != answer:  # never expected (answer_from streams only the answer itself): the answer is shown
            out.write(f"A: {visible(answer)}\n")
        return True
