"""`python -m benchmarks.peers run|report` (run from the repository root with the project's `.venv/bin/python`).

    python -m benchmarks.peers run --data ../shared/data/locomo-dev.json --conversations conv-26 conv-30 \\
        --systems membox mem0 amem --save benchmarks/results/peers.json
    python -m benchmarks.peers run ... --sessions 1 --messages 20 --questions 5 --threads 1 --save /tmp/peers.json
    python -m benchmarks.peers report benchmarks/results/peers.json

The peers run in `.venv-peers` (`make install-peers`); a peer whose venv is missing is reported unavailable and
the run goes on. docs/peers.md says what each peer is configured with and why.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from membox_local.evaluation.locomo import evidence_recall, load_samples, parse_evidence
from membox_local.evaluation.scorers import score_all
from membox_local.ingest import load_locomo
from membox_local.records import Message
from membox_local.retrieval.base import Context, count_tokens

from .workers import OFFLINE_ENV, RequestFailed, WorkerClient, WorkerError

PEERS = ("mem0", "amem")
SYSTEMS = ("membox",) + PEERS
SOURCES_KIND = {"membox": "the messages shown", "mem0": "the message whose add wrote the memory (approximate)",
                "amem": "the message of each note shown"}
WORKER_SCRIPT = Path(__file__).resolve().parent / "workers.py"


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
    peer_k: int = 100
    threads: int = 2
    n_ctx: int = 16384
    max_tokens: int = 1024
    peers_python: str = ".venv-peers/bin/python"
    work: str = ""
    save: str = ""
    keep_text: bool = False
    timeout: float = 900.0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from membox_local.config import DEFAULT_CONFIG

    p = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="build and ask each system, save the results")
    r.add_argument("--data", default=os.path.join(os.environ.get("MEMBOX_DATA", "../shared/data"), "locomo-dev.json"))
    r.add_argument("--conversations", nargs="*", default=[], help="sample ids (default: every one in the file)")
    r.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    r.add_argument("--sessions", type=int, default=0, help="only each conversation's first N sessions")
    r.add_argument("--messages", type=int, default=0, help="then only its first N messages (smoke runs)")
    r.add_argument("--questions", type=int, default=0, help="only the first N questions of each conversation")
    r.add_argument("--categories", nargs="+", type=int, default=[1, 2, 3, 4])
    r.add_argument("--config", default=DEFAULT_CONFIG, help="membox_local's config (its build and answer settings)")
    r.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="membox_local config keys")
    r.add_argument("--budget", type=int, default=0, help="context tokens (default: the config's budget_tokens)")
    r.add_argument("--k", type=int, default=0, help="membox_local's retrieval k (default: the config's)")
    r.add_argument("--peer-k", type=int, default=100, help="memories a peer's search returns (then the budget)")
    r.add_argument("--threads", type=int, default=2, help="llama.cpp and torch threads for every system")
    r.add_argument("--n-ctx", type=int, default=16384, help="the llama.cpp server's context (mem0's prompt is ~8k)")
    r.add_argument("--max-tokens", type=int, default=1024,
                   help="output limit the proxy gives a request that sets none (0: none; the server then generates "
                        "until its context is full)")
    r.add_argument("--peers-python", default=".venv-peers/bin/python")
    r.add_argument("--work", default="", help="folder for the stores and logs (default: a new temporary one)")
    r.add_argument("--save", default="", help="results JSON (default: <work>/peers.json)")
    r.add_argument("--keep-text", action="store_true",
                   help="also save questions, gold answers, predictions and contexts (never into the repo)")
    r.add_argument("--timeout", type=float, default=900.0, help="seconds one worker request may take")
    rep = sub.add_parser("report", help="the markdown table of a saved run (several runs of the same slice: one)")
    rep.add_argument("results", nargs="+")
    return p.parse_args(argv)


def log(msg: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- the slice -------------------------------------------------------------------------------------------------
@dataclass
class Question:
    qid: int
    question: str
    gold: str
    category: int
    evidence: list[str] = field(default_factory=list)


@dataclass
class Conversation:
    conversation_id: str
    messages: list[Message]
    questions: list[Question]
    whole: bool  # the whole conversation (no session or message limit)


def slice_messages(messages: list[Message], sessions: int = 0, limit: int = 0) -> list[Message]:
    kept = [m for m in messages if not sessions or int(m.session) <= sessions]
    return kept[:limit] if limit else kept


def select_questions(qa: list[dict], known: set[str], categories: tuple[int, ...] = (1, 2, 3, 4),
                     whole: bool = True, limit: int = 0) -> list[Question]:
    """Questions of `categories` in file order; on a slice (whole=False) only those with evidence, all of it in
    `known`; at most `limit` (0: all)."""
    out: list[Question] = []
    for qid, q in enumerate(qa):
        cat = q.get("category")
        if cat not in categories or not isinstance(q.get("question"), str) or not q["question"].strip():
            continue
        evidence, issues = parse_evidence(q.get("evidence", []), known)
        if not whole and (not evidence or issues["unknown"] or issues["malformed"]):
            continue
        out.append(Question(qid, q["question"], str(q.get("answer", "")), cat, evidence))
        if limit and len(out) >= limit:
            break
    return out


def load_conversations(s: Settings) -> list[Conversation]:
    out = []
    for sample in load_samples(s.data, s.conversations):
        conv = str(sample["sample_id"])
        every = load_locomo(s.data, [conv])
        kept = slice_messages(every, s.sessions, s.messages)
        whole = len(kept) == len(every)
        qs = select_questions(sample["qa"], {m.message_id for m in kept}, tuple(s.categories), whole, s.questions)
        out.append(Conversation(conv, kept, qs, whole))
    return out


# ---- the shared answering step ---------------------------------------------------------------------------------
@dataclass
class Retrieved:
    """What one system showed for one question: its context and the dia_ids behind it (None: gives no sources)."""

    context: Context
    sources: list[str] | None
    search_s: float = 0.0
    items_returned: int = 0
    items_shown: int = 0


def fit_budget(items: list[dict], budget: int) -> list[dict]:
    """Items (best first, each with "text") that fit `budget` count_tokens as one line each, in their order (one
    that does not fit is skipped: a shorter one after it may fit)."""
    kept, used = [], 0
    for item in items:
        text = " ".join(str(item.get("text", "")).split())
        cost = count_tokens(f"- {text}")
        if text and used + cost <= budget:
            kept.append({**item, "text": text})
            used += cost
    return kept


def items_context(items: list[dict], budget: int,
                  gives_sources: bool = True) -> tuple[Context, list[str] | None, int]:
    """The context a peer's memories make, the sources of those shown (None for a system that gives none), and how
    many were shown."""
    kept = fit_budget(items, budget)
    sources = list(dict.fromkeys(s for it in kept for s in it.get("sources") or []))
    text = "\n".join(f"- {it['text']}" for it in kept)
    return Context(text=text, message_ids=sources), (sources if gives_sources else None), len(kept)


class MemboxAnswerer:
    """membox_local's answering step (Memory.answer_from: its prompt, `[answer]` max_tokens, the tally of total
    questions) with the config's answering model, on an empty scratch Memory: no system's store takes part."""

    def __init__(self, cfg, scratch: Path, backend=None):
        from membox_local.backends import make_backend
        from membox_local.memory import Memory

        llm = cfg.answer_llm()
        self.name = llm.model
        self.backend = backend if backend is not None else make_backend(llm)
        self.memory = Memory(Path(scratch), cfg, backend=self.backend, answer_backend=self.backend)

    def answer(self, question: str, ctx: Context) -> str:
        return self.memory.answer_from(question, ctx, None, backend=self.backend).text

    def close(self) -> None:
        self.memory.close(models=False)
        self.backend.close()


def grade(question: Question, retrieved: Retrieved, answerer, keep_text: bool = False) -> dict:
    """One question's record: retrieval figures, the answer's seconds and scores (no dataset text unless
    keep_text)."""
    t0 = time.time()
    prediction = answerer.answer(question.question, retrieved.context)
    answer_s = time.time() - t0
    rec = {"qid": question.qid, "category": question.category, "context_tokens": count_tokens(retrieved.context.text),
           "items_returned": retrieved.items_returned, "items_shown": retrieved.items_shown,
           "search_s": round(retrieved.search_s, 3), "answer_s": round(answer_s, 3),
           "recall": evidence_recall(question.evidence, retrieved.sources) if retrieved.sources is not None else None,
           "scores": score_all(prediction, question.gold, question.category)}
    if keep_text:
        rec.update(question=question.question, gold=question.gold, prediction=prediction,
                   context=retrieved.context.text)
    return rec


# ---- the systems -----------------------------------------------------------------------------------------------
class MemboxSystem:
    """membox_local in this process, built as `membox eval locomo` builds (evaluation/locomo.py open_build), read by
    its configured retrieval mode within the budget."""

    name = "membox"

    def __init__(self, cfg, work: Path, budget: int, k: int, mode: str = ""):
        import importlib.metadata as md

        from membox_local.evaluation.locomo import Shared

        self.cfg, self.work, self.budget, self.k = cfg, Path(work), budget, k
        self.mode = mode or cfg.retrieve.mode
        self.shared = Shared(cfg)
        self.mem, self.conv = None, ""
        try:
            version = md.version("membox_local")
        except md.PackageNotFoundError:
            version = "unknown"
        self.info = {"system": "membox_local", "version": version, "config": cfg.name, "mode": self.mode, "k": k,
                     "budget_tokens": budget}

    def open(self, conv: Conversation) -> None:
        self.shared.backend()  # the build model and the embedder load before the clock starts
        _ = self.shared.embedder
        self.conv = conv.conversation_id

    def build(self, conv: Conversation) -> dict:
        from membox_local.evaluation.locomo import build_stats, open_build

        t0 = time.time()
        self.mem = open_build(conv.conversation_id, conv.messages, self.cfg, self.work / "builds", self.shared,
                              progress=False)
        wall = time.time() - t0
        st = build_stats(self.mem, conv.conversation_id)
        stages = st["by_stage"].values()
        failed_boxes = [b for b in self.mem.store.boxes(conv.conversation_id) if b.status == "failed"]
        return {"messages": len(conv.messages), "build_s": round(wall, 2), "llm_calls": sum(s["calls"] for s in stages),
                "prompt_tokens": sum(s["prompt_tokens"] for s in stages),
                "completion_tokens": sum(s["completion_tokens"] for s in stages),
                "failed_messages": 0,  # a box whose record failed keeps its messages, and box-hits reads them
                "degraded_messages": sum(len(getattr(b, "messages", []) or []) for b in failed_boxes),
                "detail": {"boxes": st["boxes"], "failed_boxes": len(failed_boxes), "events": st["events"]}}

    def retrieve(self, question: Question) -> Retrieved:
        t0 = time.time()
        ctx = self.mem.context(question.question, self.conv, mode=self.mode, k=self.k, budget_tokens=self.budget)
        n = len(ctx.message_ids)
        return Retrieved(ctx, list(ctx.message_ids), time.time() - t0, n, n)

    def close_conversation(self) -> None:
        if self.mem is not None:
            self.mem.close(models=False)
            self.mem = None

    def close(self) -> None:
        self.close_conversation()
        self.shared.close()


class PeerSystem:
    """A peer's worker (`script NAME`, workers.py by default, run by `python`, the peers' venv)."""

    def __init__(self, name: str, python: str, work: Path, budget: int, k: int, base_url: str = "",
                 model: str = "", embedder: str = "", threads: int = 0, usage=None, timeout: float = 900.0,
                 script: Path | None = None):
        self.name, self.python, self.work, self.budget, self.k = name, python, Path(work), budget, k
        self.base_url, self.model, self.embedder, self.threads = base_url, model, embedder, threads
        self.usage, self.timeout = usage, timeout  # usage: a UsageProxy (None: no LLM figures)
        self.script = Path(script) if script else WORKER_SCRIPT
        self.worker: WorkerClient | None = None
        self.info: dict = {}

    def env(self) -> dict[str, str]:
        env = dict(OFFLINE_ENV, OPENAI_API_KEY="sk-local", PYTHONUNBUFFERED="1")
        if self.base_url:
            env["OPENAI_BASE_URL"] = self.base_url
        if self.threads:
            env.update(OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads))
        return env

    def open(self, conv: Conversation) -> None:
        cid = conv.conversation_id
        self.worker = WorkerClient(self.name, [self.python, str(self.script), self.name],
                                   self.work / "logs" / f"{self.name}-{cid}.log", env=self.env(), timeout=self.timeout)
        reply = self.worker.request("init", store=str(self.work / self.name / cid), base_url=self.base_url,
                                    model=self.model, embedder=self.embedder, threads=self.threads, conversation=cid)
        self.info = reply.get("info", {})

    def build(self, conv: Conversation) -> dict:
        before = self.usage.snapshot() if self.usage else None
        failed, with_errors, memories, reasons = 0, 0, 0, []
        t0 = time.time()
        for m in conv.messages:
            message = {"id": m.message_id, "speaker": m.speaker, "text": m.text, "session": m.session,
                       "date": m.session_date}
            try:
                r = self.worker.request("add", message=message)
            except RequestFailed as exc:  # the worker is alive; this message is lost
                failed += 1
                reasons.append(str(exc))
                continue
            failed += bool(r.get("failed"))
            with_errors += bool(r.get("errors")) and not r.get("failed")
            memories += int(r.get("memories", 0))
            if r.get("reason") and len(reasons) < 5:
                reasons.append(r["reason"])
        wall = time.time() - t0
        try:
            detail = self.worker.request("stats").get("stats", {})
        except RequestFailed as exc:  # figures about the store only: the build stands
            detail = {"error": str(exc)}
        out = {"messages": len(conv.messages), "build_s": round(wall, 2), "failed_messages": failed,
               "degraded_messages": with_errors, "memories_written": memories, "detail": detail,
               "reasons": reasons[:5]}
        if before is not None:
            used = self.usage.snapshot().minus(before)
            out.update(llm_calls=used.calls, prompt_tokens=used.prompt_tokens,
                       completion_tokens=used.completion_tokens, llm_failed_requests=used.failed,
                       llm_translated=used.translated, llm_capped=used.capped, llm_cut=used.cut)
        return out

    def retrieve(self, question: Question) -> Retrieved:
        t0 = time.time()
        items = self.worker.request("search", question=question.question, k=self.k).get("items", [])
        search_s = time.time() - t0
        ctx, sources, shown = items_context(items, self.budget, bool(self.info.get("gives_sources", True)))
        return Retrieved(ctx, sources, search_s, len(items), shown)

    def close_conversation(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    close = close_conversation


# ---- the run ---------------------------------------------------------------------------------------------------
def machine() -> dict:
    cpu, mem_gb = "", None
    with contextlib.suppress(OSError):
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    with contextlib.suppress(ValueError, OSError, AttributeError):
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"platform": platform.platform(), "machine": platform.machine(), "cpu": cpu, "cores": os.cpu_count(),
            "memory_gib": mem_gb, "python": platform.python_version(),
            "load_1min_at_start": round(load, 2) if load is not None else None}


def run_system(system, convs: list[Conversation], answerer, keep_text: bool = False,
               out: dict | None = None, saved: Callable[[], None] | None = None) -> dict:
    """One system over every conversation into `out` (build, then each question graded; `saved()` after each). A
    worker that dies costs that conversation (its error kept, one line); one that cannot start: 'failed'."""
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
            b = rec["build"] = system.build(conv)
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
            answerer, header: dict, save_to: str = "") -> dict:
    """Every system of the settings in turn (`make_system(name)`: a system, or why it is unavailable); with
    `save_to`, the results so far written after each conversation (a long run that stops keeps what it measured)."""
    results = {**header, "systems": {}}

    def saved() -> None:
        if save_to:
            p = Path(save_to)
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_suffix(p.suffix + ".tmp")
            tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
            os.replace(tmp, p)

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
        "settings": {k: v for k, v in asdict(settings).items() if k != "work"},
        "conversations": {c.conversation_id: {"messages": len(c.messages), "questions": len(c.questions),
                                              "whole": c.whole} for c in convs},
        **extra,
    }


def work_dir(settings: Settings) -> Path:
    """The run's folder for stores and logs: new, so that no build is resumed (its seconds would mean nothing)."""
    if not settings.work:
        return Path(tempfile.mkdtemp(prefix="membox-peers-"))
    path = Path(settings.work)
    if path.exists() and any(path.iterdir()):
        raise SystemExit(f"--work {path} is not empty: a build there would be resumed, not timed; pass a new folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def cmd_run(s: Settings) -> int:
    from membox_local.config import load_config
    from membox_local.weights import resolve_model

    from .llm_server import LlamaServer, ServerError, UsageProxy
    from membox_local.evaluation.peers import markdown

    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the embedders' torch threads here, as each worker gets
        os.environ.setdefault(key, str(s.threads))
    with contextlib.suppress(ImportError):
        import torch

        torch.set_num_threads(s.threads)
    cfg = load_config(s.config, {"llm.n_threads": s.threads, **s.overrides})
    budget, k = s.budget or cfg.retrieve.budget_tokens, s.k or cfg.retrieve.k
    convs = load_conversations(s)
    work = work_dir(s)
    log(f"work folder {work}; {len(convs)} conversations, systems {' '.join(s.systems)}")
    build_model, embedder = str(resolve_model(cfg.llm.model)), str(resolve_model(cfg.embedder.model))
    py = Path(s.peers_python).absolute()  # not resolved: a venv's python is a link that must keep its own path
    answerer = MemboxAnswerer(cfg, work / "answerer")  # loaded first: a model that cannot load leaves no server
    server = proxy = None
    why = "" if py.exists() else f"no peers venv at {s.peers_python}: run `make install-peers`"
    if not why and any(n in PEERS for n in s.systems):
        try:
            server = LlamaServer(sys.executable, build_model, work / "logs" / "llama-server.log", s.n_ctx,
                                 s.threads, alias=cfg.llm.model).start()
        except ServerError as exc:
            why = f"the build model's server did not start: {exc}"
        else:
            proxy = UsageProxy(server.base_url, timeout=s.timeout, max_tokens=s.max_tokens).start()
            log(f"llama.cpp server on {server.base_url} (n_ctx {s.n_ctx}, {s.threads} threads), proxy {proxy.base_url}")

    def make_system(name: str):
        if name == "membox":
            return MemboxSystem(cfg, work / "membox", budget, k)
        return why or PeerSystem(name, str(py), work, budget, s.peer_k, proxy.base_url, cfg.llm.model, embedder,
                                 s.threads, proxy, s.timeout)

    extra = {"budget_tokens": budget, "membox_k": k, "build_model": cfg.llm.model,
             "answer_model": cfg.answer_llm().model, "embedder": cfg.embedder.model,
             "server": ({"n_ctx": s.n_ctx, "threads": s.threads, "max_tokens_default": s.max_tokens}
                        if server else None)}
    path = s.save or str(work / "peers.json")
    try:
        results = run_all(s, convs, make_system, answerer, header(s, convs, extra), save_to=path)
    finally:
        answerer.close()
        if proxy:
            proxy.stop()
        if server:
            server.stop()
    print(markdown(results))
    log(f"saved {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from membox_local.config import parse_assignment

    a = parse(argv)
    if a.cmd == "report":
        from membox_local.evaluation.peers import markdown, merge

        print(markdown(merge([json.loads(Path(path).read_text()) for path in a.results])))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # as an exception: `finally` stops server and workers
    s = Settings(**{f: getattr(a, f) for f in Settings.__dataclass_fields__ if f != "overrides"},
                 overrides=dict(parse_assignment(x) for x in a.set))
    return cmd_run(s)
