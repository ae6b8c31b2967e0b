"""A run: the systems one after another on the same conversations, each built, then asked every question, the
same answering step grading each (answering.py); the results saved as one JSON file with the command, the date,
the machine and the settings, and no dataset text (unless --keep-text, for a run saved outside the repo)."""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .answering import Answerer, grade
from .data import Conversation
from .protocol import RequestFailed, WorkerError

PEERS = ("mem0", "amem")
SYSTEMS = ("membox",) + PEERS
SOURCES_KIND = {"membox": "the messages shown", "mem0": "the message whose add wrote the memory (approximate)",
                "amem": "the message of each note shown"}


@dataclass
class Settings:
    data: str
    conversations: list[str] = field(default_factory=list)
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))
    sessions: int = 0
    messages: int = 0
    questions: int = 0
    categories: list[int] = field(default_factory=lambda: [1, 2, 3, 4])
    config: str = "cpu-ce"
    overrides: dict = field(default_factory=dict)
    budget: int = 0  # 0: the config's [retrieve] budget_tokens
    k: int = 0  # membox_local's seeds; 0: the config's [retrieve] k
    peer_k: int = 100  # memories a peer's search is asked for (then cut to the budget)
    threads: int = 2
    n_ctx: int = 16384
    max_tokens: int = 1024  # the proxy's output limit for a request that sets none
    peers_python: str = ".venv-peers/bin/python"
    work: str = ""
    save: str = ""
    keep_text: bool = False
    timeout: float = 900.0


def log(msg: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"platform": platform.platform(), "machine": platform.machine(), "cpu": cpu, "cores": os.cpu_count(),
            "memory_gib": mem_gb, "python": platform.python_version(),
            "load_1min_at_start": round(load, 2) if load is not None else None}


def run_system(system, convs: list[Conversation], answerer: Answerer, keep_text: bool = False,
               out: dict | None = None, saved: Callable[[], None] | None = None) -> dict:
    """One system over every conversation: build, then each question graded, into `out`; `saved()` after each
    conversation (the results so far written). A worker that dies costs that conversation (its error is kept, one
    line); a peer that cannot start is 'failed' with the reason."""
    out = out if out is not None else {}
    out.update(status="ok", sources=SOURCES_KIND.get(system.name, ""), conversations={})
    for conv in convs:
        cid = conv.conversation_id
        rec: dict = {"questions": []}
        out["conversations"][cid] = rec
        try:
            system.open(conv)
            out["info"] = getattr(system, "info", {})
            log(f"{system.name} {cid}: building {len(conv.messages)} messages")
            rec["build"] = system.build(conv)
            b = rec["build"]
            log(f"{system.name} {cid}: built in {b['build_s']} s ({b['build_s'] / max(b['messages'], 1):.2f} s per "
                f"message, {b['failed_messages']} failed); {len(conv.questions)} questions")
            for q in conv.questions:
                try:
                    rec["questions"].append(grade(q, system.retrieve(q), answerer, keep_text))
                except RequestFailed as exc:  # this question's search failed; the worker is still there
                    rec["questions"].append({"qid": q.qid, "category": q.category, "error": str(exc)})
        except (WorkerError, RequestFailed) as exc:
            rec["error"] = str(exc)
            log(f"{system.name} {cid}: {exc}")
        finally:
            system.close_conversation()
        if saved:
            saved()
    errors = [c["error"] for c in out["conversations"].values() if "error" in c]
    if errors:
        out["status"] = "failed" if len(errors) == len(convs) else "partial"
        out["reason"] = errors[0]
    return out


def run_all(settings: Settings, convs: list[Conversation], make_system: Callable[[str], object],
            answerer: Answerer, header: dict, save_to: str = "") -> dict:
    """Every system of the settings in turn; `make_system(name)` returns a system, or a string saying why it is
    unavailable. With `save_to`, the results so far are written after each conversation (a long run that stops
    keeps what it measured)."""
    results = {**header, "systems": {}}

    def saved() -> None:
        if save_to:
            save(results, save_to)

    for name in settings.systems:
        system = make_system(name)
        if isinstance(system, str):
            results["systems"][name] = {"status": "unavailable", "reason": system, "conversations": {}}
            log(f"{name}: unavailable: {system}")
            continue
        results["systems"][name] = {}
        try:
            run_system(system, convs, answerer, settings.keep_text, results["systems"][name], saved)
        finally:
            system.close()
    saved()
    return results


def header(settings: Settings, convs: list[Conversation], extra: dict) -> dict:
    return {
        "benchmark": "peers on the same models (issue 52)",
        "command": "python -m benchmarks.peers " + " ".join(sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "settings": {k: v for k, v in asdict(settings).items() if k not in ("work",)},
        "conversations": {c.conversation_id: {"messages": len(c.messages), "questions": len(c.questions),
                                              "whole": c.whole} for c in convs},
        **extra,
    }


def save(results: dict, path: str) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, p)


def work_dir(settings: Settings) -> Path:
    """The run's folder for stores and logs: new, so that no build is resumed (its seconds would mean nothing)."""
    if not settings.work:
        return Path(tempfile.mkdtemp(prefix="membox-peers-"))
    path = Path(settings.work)
    if path.exists() and any(path.iterdir()):
        raise SystemExit(f"--work {path} is not empty: a build there would be resumed, not timed; pass a new folder")
    path.mkdir(parents=True, exist_ok=True)
    return path
