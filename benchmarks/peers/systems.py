"""The systems a run compares, behind one interface: `open(conv)` (untimed: models loaded, an empty store),
`build(conv)` (timed: every message in), `retrieve(question)` (the system's own retrieval, then the shared budget),
`close_conversation()`, `close()`.

- MemboxSystem: membox_local in this process, built as `membox eval locomo` builds (evaluation/locomo.py
  open_build: the messages stored, then filed and extracted in one build), read by its configured retrieval mode
  (box-hits by default) within the budget.
- PeerSystem: a peer in its own venv, a worker process per conversation (protocol.py), one `add` per message,
  its LLM calls counted by the proxy in front of the shared llama.cpp server (llm_server.py).
"""
from __future__ import annotations

import time
from pathlib import Path

from .answering import Retrieved, items_context
from .data import Conversation, Question, message_dict
from .protocol import RequestFailed, WorkerClient
from .worker_common import OFFLINE_ENV

WORKERS = Path(__file__).resolve().parent


class MemboxSystem:
    name = "membox"

    def __init__(self, cfg, work: Path, budget: int, k: int, mode: str = ""):
        from membox_local.evaluation.locomo import Shared

        self.cfg, self.work, self.budget, self.k = cfg, Path(work), budget, k
        self.mode = mode or cfg.retrieve.mode
        self.shared = Shared(cfg)
        self.mem = None
        self.conv = ""
        self.info = {"system": "membox_local", "version": _version("membox_local"), "config": cfg.name,
                     "mode": self.mode, "k": k, "budget_tokens": budget}

    def open(self, conv: Conversation) -> None:
        self.shared.backend()  # the build model and the embedder load before the clock starts
        self.shared.embedder
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
        return {
            "messages": len(conv.messages), "build_s": round(wall, 2),
            "llm_calls": sum(s["calls"] for s in stages),
            "prompt_tokens": sum(s["prompt_tokens"] for s in stages),
            "completion_tokens": sum(s["completion_tokens"] for s in stages),
            "failed_messages": 0,  # a box whose record failed keeps its messages, and box-hits reads them
            "degraded_messages": sum(len(getattr(b, "messages", []) or []) for b in failed_boxes),
            "detail": {"boxes": st["boxes"], "failed_boxes": len(failed_boxes), "events": st["events"]},
        }

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
    """A peer's worker (`<name>_worker.py` run by `python`, the peers' venv)."""

    def __init__(self, name: str, python: str, work: Path, budget: int, k: int, base_url: str = "",
                 model: str = "", embedder: str = "", threads: int = 0, usage=None, timeout: float = 900.0,
                 script: Path | None = None):
        self.name, self.python, self.work, self.budget, self.k = name, python, Path(work), budget, k
        self.base_url, self.model, self.embedder, self.threads = base_url, model, embedder, threads
        self.usage, self.timeout = usage, timeout  # usage: a UsageProxy (None: no LLM figures)
        self.script = Path(script) if script else WORKERS / f"{name}_worker.py"
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
        self.worker = WorkerClient(self.name, [self.python, str(self.script)], self.work / "logs" /
                                   f"{self.name}-{cid}.log", env=self.env(), timeout=self.timeout)
        reply = self.worker.request("init", store=str(self.work / self.name / cid), base_url=self.base_url,
                                    model=self.model, embedder=self.embedder, threads=self.threads,
                                    conversation=cid)
        self.info = reply.get("info", {})

    def build(self, conv: Conversation) -> dict:
        before = self.usage.snapshot() if self.usage else None
        failed, with_errors, memories, reasons = 0, 0, 0, []
        t0 = time.time()
        for m in conv.messages:
            try:
                r = self.worker.request("add", message=message_dict(m))
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
        out = {"messages": len(conv.messages), "build_s": round(wall, 2), "failed_messages": failed,
               "degraded_messages": with_errors, "memories_written": memories,
               "detail": self._stats(), "reasons": reasons[:5]}
        if before is not None:
            used = self.usage.snapshot().minus(before)
            out.update(llm_calls=used.calls, prompt_tokens=used.prompt_tokens,
                       completion_tokens=used.completion_tokens, llm_failed_requests=used.failed,
                       llm_translated=used.translated, llm_capped=used.capped, llm_cut=used.cut)
        return out

    def _stats(self) -> dict:
        try:
            return self.worker.request("stats").get("stats", {})
        except RequestFailed as exc:  # figures about the store only: the build stands
            return {"error": str(exc)}

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

    def close(self) -> None:
        self.close_conversation()


def _version(dist: str) -> str:
    import importlib.metadata as md

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "unknown"


def peers_python(path: str) -> str | None:
    """The peers' venv python, or None when it is not installed (`make install-peers`)."""
    p = Path(path).absolute()  # not resolved: a venv's python is a link that must keep its own path
    return str(p) if p.exists() else None

