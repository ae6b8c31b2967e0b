"""A-Mem (the `a-mem` package, module `agentic_memory`, unmodified) behind the peers protocol (worker_common.py).

Run by the harness as `.venv-peers/bin/python benchmarks/peers/amem_worker.py`. Configuration only:
- `AgenticMemorySystem(model_name=<the shipped all-MiniLM-L6-v2 folder>, llm_backend="openai", llm_model=NAME,
  storage_path=<this conversation's folder>)`: its ChromaDB store on disk, its sentence-transformers embedder
  from a local path;
- its "openai" backend builds `OpenAI(api_key=...)` with no base URL argument; the openai client then reads the
  documented `OPENAI_BASE_URL` environment variable, which the harness sets to its loopback proxy in front of the
  llama.cpp server (llama_server.py: the proxy turns OpenAI's `json_schema` response format, which A-Mem sends and
  llama-cpp-python's server does not accept, into the server's own `json_object` + schema: a server-side adapter,
  not a change to A-Mem).
Each LoCoMo turn is one `add_note("Speaker: text", time=<session date>)` (as the A-Mem authors' LoCoMo run does);
`search_agentic(question, k)` retrieves (its vector hits and their linked notes), each note read back with `read`.
A note is one message, so its source is exact. A-Mem asks its model at temperature 1.0 (its code's default, not an
option): its builds are not repeatable.
"""
from __future__ import annotations

import importlib.metadata as md
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from worker_common import ErrorCount, limit_threads, serve, set_offline  # noqa: E402

set_offline()


class AMemWorker:
    def __init__(self) -> None:
        self.system = None
        self.sources: dict[str, str] = {}  # note id -> dia_id
        self.errors = ErrorCount()
        self.counts = {"adds": 0, "failed": 0, "with_errors": 0, "no_analysis": 0}

    def init(self, req: dict) -> dict:
        limit_threads(int(req.get("threads", 0)))
        logging.getLogger().addHandler(self.errors)
        from agentic_memory.memory_system import AgenticMemorySystem

        store = Path(req["store"])
        store.mkdir(parents=True, exist_ok=True)
        self.system = AgenticMemorySystem(model_name=req["embedder"], llm_backend="openai", llm_model=req["model"],
                                          api_key="sk-local", storage_path=str(store / "chroma"))
        return {"info": {"system": "a-mem", "gives_sources": True, "version": md.version("a-mem"),
                         "config": {"llm_backend": "openai", "llm_model": req["model"],
                                    "model_name": Path(req["embedder"]).name,
                                    "evo_threshold": self.system.evo_threshold}}}

    def add(self, req: dict) -> dict:
        m = req["message"]
        before = self.errors.count
        self.counts["adds"] += 1
        try:
            note_id = self.system.add_note(f"{m['speaker']}: {m['text']}", time=m.get("date") or None)
        except Exception as exc:  # a failed model call it does not catch: the message is dropped
            self.counts["failed"] += 1
            return {"memories": 0, "failed": True, "errors": self.errors.count - before,
                    "reason": f"{type(exc).__name__}: {exc}"[:300]}
        self.sources[note_id] = m["id"]
        note = self.system.read(note_id)
        # analyze_content catches its own failure and keeps the note with no keywords, context "General", no tags
        unanalysed = note is not None and not note.keywords and note.context == "General" and not note.tags
        self.counts["no_analysis"] += unanalysed
        errors = self.errors.count - before
        self.counts["with_errors"] += errors > 0
        return {"memories": 1, "failed": False, "errors": errors, "unanalysed": unanalysed,
                "reason": self.errors.last if errors else ""}

    def search(self, req: dict) -> dict:
        items = []
        for hit in self.system.search_agentic(req["question"], int(req.get("k", 5))):
            note = self.system.read(hit["id"])
            if note is None:
                continue
            text = f"[{note.timestamp}] {note.content}" if note.timestamp else note.content
            if note.context and note.context != "General":
                text += f" (context: {note.context})"
            src = self.sources.get(hit["id"])
            items.append({"text": text, "sources": [src] if src else [], "score": hit.get("score"),
                          "neighbor": bool(hit.get("is_neighbor"))})
        return {"items": items}

    def stats(self, req: dict) -> dict:
        return {"stats": {**self.counts, "notes_stored": self.system.retriever.count(),
                          "evolutions": self.system.evo_cnt}}


def main() -> int:
    w = AMemWorker()
    return serve({"init": w.init, "add": w.add, "search": w.search, "stats": w.stats})


if __name__ == "__main__":
    sys.exit(main())
