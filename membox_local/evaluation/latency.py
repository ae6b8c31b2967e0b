"""Seconds per answer, cold and warm, measured from outside (benchmarks/answer_latency.py composes it).

Cold: `membox ask STORE QUESTION --conversation C --budget B --quiet --json`, a new process per question, timed
around the process: the wall time a person waits at the command line, Python's start, the imports and the model
loads included. Warm: one `membox serve STORE` process on a free loopback port, started once and warmed with one
question that is not timed (WARMUP: no dataset text), then one POST /answer per question with `budget_tokens`,
timed around the request (a new loopback connection each, opened before the clock starts). Each context budget is
run in both modes on the same questions, in the same order; the phases alternate (budget 1 cold then warm, budget 2
warm then cold, ...) so that a drift of the machine's load falls on both modes alike. The answers' text is read only
for its context tokens: neither the questions nor the answers are printed or saved (LoCoMo is CC BY-NC), only
question indices and categories. The server's log goes to a temporary folder (it holds no question either).

The figures mean something only when the machine is otherwise idle: every phase records the 1-minute load average
before and after it, and a ratio is claimed only between phases of one run, side by side.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..ingest import InputError
from .soak import Server, free_port, rest_call

CATEGORIES = (1, 2, 3, 4)  # LoCoMo's answerable categories (5: adversarial, left out)
WARMUP = "What did they talk about?"  # the warm server's first, untimed question: no text of the data set
MODES = ("cold", "warm")


@dataclass(frozen=True)
class Question:
    """One question to time: `index` is its place in the conversation's qa list (LoCoMo) or the line number of a
    questions file, `category` LoCoMo's (None for a file); `text` is sent, never printed or saved."""
    index: int
    category: int | None
    text: str
    conversation: str | None

    def label(self) -> dict[str, Any]:
        """What is saved of it: numbers only."""
        return {"index": self.index, "category": self.category}


# ---- which questions, in which order ------------------------------------------------------------------------------
def spread(items: list, n: int) -> list:
    """`n` of `items` evenly over them with a fixed stride (len // n, at least 1), from the first."""
    if n <= 0:
        return []
    stride = max(1, len(items) // n)
    return items[::stride][:n]


def locomo_questions(data: Path, conversation: str, n: int) -> list[Question]:
    """`n` of the conversation's category 1-4 questions, spread evenly (`spread`), in the file's order."""
    from .locomo import load_samples

    sample = load_samples(data, [conversation])[0]
    answerable = [Question(i, q.get("category"), q.get("question", ""), conversation)
                  for i, q in enumerate(sample["qa"]) if q.get("category") in CATEGORIES]
    picked = spread(answerable, n)
    bad = [q.index for q in picked if not isinstance(q.text, str) or not q.text.strip()]
    if bad:
        raise InputError(f"{data} ({conversation}): qa {bad} hold no question text")
    return picked


def file_questions(path: Path, n: int, conversation: str | None = None) -> list[Question]:
    """`n` questions of a JSON-lines file of {"question", "conversation_id"} (the id may be left out when the memory
    holds one conversation, or given by `conversation`), spread evenly; the index is the line number (from 1)."""
    found = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("question"), str) or not row["question"].strip():
            raise InputError(f'{path}:{lineno}: needs {{"question": "...", "conversation_id": "..."}}')
        found.append(Question(lineno, None, row["question"], row.get("conversation_id") or conversation))
    if not found:
        raise InputError(f"{path}: no questions")
    return spread(found, n)


def plan(budgets: list[int]) -> list[tuple[int, str]]:
    """The phases in order: each budget in both modes, cold first for the 1st, 3rd, ... budget and warm first for
    the others (so that the two modes alternate and neither always comes first)."""
    out = []
    for i, budget in enumerate(budgets):
        out += [(budget, mode) for mode in (MODES if i % 2 == 0 else MODES[::-1])]
    return out


# ---- the figures --------------------------------------------------------------------------------------------------
def summary(seconds: list[float], tokens: list[int | None]) -> dict[str, Any]:
    """n, p50, p90, mean and max seconds (numpy's linear percentiles), and the context tokens per answer."""
    if not seconds:
        return {"n": 0, "p50_s": None, "p90_s": None, "mean_s": None, "max_s": None, "context_tokens_mean": None}
    s = np.asarray(seconds, dtype=float)
    known = [t for t in tokens if t is not None]
    return {"n": len(seconds), "p50_s": round(float(np.percentile(s, 50)), 3),
            "p90_s": round(float(np.percentile(s, 90)), 3), "mean_s": round(float(s.mean()), 3),
            "max_s": round(float(s.max()), 3),
            "context_tokens_mean": round(float(np.mean(known)), 1) if known else None}


def ratios(phases: list[dict]) -> dict[str, float | None]:
    """Per budget: cold p50 / warm p50 (how many times longer a person waits at the command line)."""
    by = {(p["budget"], p["mode"]): p for p in phases}
    out = {}
    for budget in dict.fromkeys(p["budget"] for p in phases):
        cold, warm = by.get((budget, "cold")), by.get((budget, "warm"))
        ok = cold and warm and cold["p50_s"] and warm["p50_s"]
        out[str(budget)] = round(cold["p50_s"] / warm["p50_s"], 1) if ok else None
    return out


def table(result: dict) -> str:
    """The Markdown table of a run's phases (in the order they ran), with the loads and the cold/warm ratios."""
    rows = ["| budget | mode | n | p50 s | p90 s | mean s | max s | context tokens | load before / after |",
            "|---|---|---|---|---|---|---|---|---|"]
    for p in result["phases"]:
        rows.append(f"| {p['budget']} | {p['mode']} | {p['n']} | {p['p50_s']} | {p['p90_s']} | {p['mean_s']} | "
                    f"{p['max_s']} | {p['context_tokens_mean']} | {p['load_before']} / {p['load_after']} |")
    ratio = ", ".join(f"budget {b}: {r}x" for b, r in result["ratios"].items())
    server = result["server"]
    rows.append(f"\ncold p50 / warm p50: {ratio}. The server listened after {server['start_s']} s and answered "
                f"its untimed first question in {server['warmup_s']} s (1-minute load {server['load_before']} "
                f"before it). Figures of a machine that was not otherwise idle mean little.")
    return "\n".join(rows)


def machine() -> dict[str, Any]:
    """Cores and CPU model of this machine."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu}


def load1() -> float:
    return round(os.getloadavg()[0], 2)


# ---- the two ways of asking ---------------------------------------------------------------------------------------
def membox_command() -> list[str]:
    """How a person starts `membox`: the console script beside this Python, else the module through it."""
    script = Path(sys.executable).with_name("membox")
    if script.exists():
        return [str(script)]
    found = shutil.which("membox")
    return [found] if found else [sys.executable, "-c", "from membox_local.cli import main; main()"]


def cold_command(store: Path, q: Question, budget: int, config: str | None) -> list[str]:
    return (membox_command() + ["ask", str(store), q.text, "--budget", str(budget), "--quiet", "--json"]
            + (["--conversation", q.conversation] if q.conversation else []) + (["--config", config] if config else []))


def ask_cold(store: Path, q: Question, budget: int, config: str | None, timeout_s: float = 1800.0
             ) -> tuple[float, int | None]:
    """(seconds the process ran, context tokens) of one `membox ask` (a failure: RuntimeError with its stderr's
    tail, which names no question)."""
    cmd = cold_command(store, q, budget, config)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"membox ask (question {q.index}) exited {done.returncode}: {done.stderr[-1500:]}")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    try:
        return seconds, json.loads(lines[-1]).get("context_tokens")
    except (IndexError, ValueError):
        raise RuntimeError(f"membox ask (question {q.index}) printed no JSON answer") from None


class Served(Server):
    """`membox serve STORE [--config C]` as a process of its own on a free loopback port (soak.Server's waiting and
    stopping), the command a person types; without a config the server reads the one stored in the memory."""

    def __init__(self, store: Path, config: str | None, log: Path):
        self.port, self.kind, self.log = free_port(), "serve", log
        cmd = membox_command() + ["serve", str(store), "--port", str(self.port)] + (
            ["--config", config] if config else [])
        self.out = open(log, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def ask_warm(port: int, q: Question, budget: int, timeout_s: float = 1800.0) -> tuple[float, int | None]:
    """(seconds, context tokens) of one POST /answer (not 200: RuntimeError), timed from the request's first byte to
    the answer's last: a new loopback connection each, opened before the clock starts (the server closes an idle
    keep-alive one within seconds, and the cold phases leave it idle for minutes)."""
    body = {"question": q.text, "budget_tokens": budget}
    if q.conversation:
        body["conversation_id"] = q.conversation
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.connect()
        t0 = time.perf_counter()
        status, answer, _ = rest_call(conn, "answer", body)
        seconds = time.perf_counter() - t0
    finally:
        conn.close()
    if status != 200:
        raise RuntimeError(f"POST /answer (question {q.index}) answered {status}: {answer.get('error', '')[:500]}")
    return seconds, answer.get("context_tokens")


# ---- a run --------------------------------------------------------------------------------------------------------
Asker = Callable[[Question, int], tuple[float, int | None]]


def phase(budget: int, mode: str, questions: list[Question], ask: Asker,
          say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every question asked once at `budget` by `ask`, timed; the loads before and after, the summary, and per
    answer its question's index and category, seconds and context tokens."""
    before = load1()
    rows = []
    for i, q in enumerate(questions, 1):
        seconds, tokens = ask(q, budget)
        rows.append(q.label() | {"seconds": round(seconds, 3), "context_tokens": tokens})
        say(f"{mode} budget {budget}: {i}/{len(questions)} {seconds:.1f} s")
    out = {"budget": budget, "mode": mode, "load_before": before, "load_after": load1()}
    return out | summary([r["seconds"] for r in rows], [r["context_tokens"] for r in rows]) | {"answers": rows}


def start_warm(store: Path, config: str | None, log: Path, first: Question, budget: int,
               timeout_s: float) -> tuple[Served, dict[str, Any]]:
    """The server started and asked WARMUP once (in `first`'s conversation, at `budget`), untimed as a measure but
    its seconds kept: (server, its start figures)."""
    before = load1()
    t0 = time.perf_counter()
    server = Served(store, config, log)
    try:
        server.wait_ready(timeout_s)
        started = time.perf_counter() - t0
        warm_s, _ = ask_warm(server.port, Question(0, None, WARMUP, first.conversation), budget, timeout_s)
    except BaseException:
        server.stop()
        raise
    return server, {"start_s": round(started, 3), "warmup_s": round(warm_s, 3), "load_before": before,
                          "load_after": load1()}


def measure(store: Path, questions: list[Question], budgets: list[int], *, config: str | None = None,
            log: Path | None = None, timeout_s: float = 1800.0,
            say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The whole run: the warm server started and warmed first (so that its start is no phase's), then the phases
    of `plan(budgets)` in order; the server stopped at the end (or on an error). Returns what `table` prints."""
    if not questions or not budgets:
        raise InputError("latency: needs at least one question and one budget")
    log = log or Path(tempfile.mkdtemp(prefix="membox-latency-")) / "serve.log"  # nothing written beside the store
    say(f"starting membox serve {store} (its log: {log})")
    server, started = start_warm(store, config, log, questions[0], budgets[0], timeout_s)
    askers: dict[str, Asker] = {"cold": lambda q, b: ask_cold(store, q, b, config, timeout_s),
                                "warm": lambda q, b: ask_warm(server.port, q, b, timeout_s)}
    try:
        phases = [phase(budget, mode, questions, askers[mode], say) for budget, mode in plan(budgets)]
    finally:
        server.stop()
    return {"store": str(store), "config": config_name(store, config), "budgets": budgets,
            "questions": [q.label() for q in questions], "server": started | {"log": str(log)},
            "phases": phases, "ratios": ratios(phases), "tracebacks": traceback_count(log)}


def config_name(store: Path, config: str | None) -> str | None:
    """The config's name: `config`, else the one stored in the memory (what both ways of asking use)."""
    try:
        from ..memory_settings import memory_config

        return memory_config(store, config).name
    except Exception:  # noqa: BLE001 - a name for the record only
        return config


def traceback_count(log: Path) -> int:
    try:
        return len(re.findall(r"^Traceback \(most recent call last\)", log.read_text(errors="replace"), re.M))
    except OSError:
        return 0
