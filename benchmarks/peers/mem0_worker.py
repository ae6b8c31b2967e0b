"""mem0 (the `mem0ai` open-source library, unmodified) behind the peers protocol (worker_common.py).

Run by the harness as `.venv-peers/bin/python benchmarks/peers/mem0_worker.py`. Configuration only, with mem0's
documented options (docs/peers.md says why each):
- llm: provider "openai" with `openai_base_url` at the harness's loopback llama.cpp server (the build model),
  temperature 0 (a repeatable build, as membox_local's);
- embedder: provider "huggingface" with the shipped all-MiniLM-L6-v2 folder as `model` (a local path: no hub),
  `embedding_dims` 384;
- vector_store: its default, qdrant, local (`path` in this conversation's folder, `on_disk`), 384 dimensions;
- history_db_path in the same folder.
Each LoCoMo turn is one `add` of one user message "Speaker: text" under `user_id` = the conversation, with its
session date and dia_id as `metadata`; `search(question, top_k=k, filters={"user_id": ...})` retrieves. A memory's
source is the dia_id of the `add` that wrote it (mem0 returns the metadata of that call): approximate, since mem0
reads the last messages of the session too when it extracts.
"""
from __future__ import annotations

import importlib.metadata as md
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from worker_common import ErrorCount, limit_threads, serve, set_offline  # noqa: E402

set_offline()


class Mem0Worker:
    def __init__(self) -> None:
        self.memory = None
        self.user_id = ""
        self.errors = ErrorCount()
        self.counts = {"adds": 0, "failed": 0, "with_errors": 0, "no_memory": 0, "memories_written": 0}

    def init(self, req: dict) -> dict:
        limit_threads(int(req.get("threads", 0)))
        logging.getLogger().addHandler(self.errors)
        from mem0 import Memory

        store = Path(req["store"])
        store.mkdir(parents=True, exist_ok=True)
        config = {
            "llm": {"provider": "openai", "config": {
                "model": req["model"], "openai_base_url": req["base_url"], "api_key": "sk-local",
                "temperature": 0.0}},
            "embedder": {"provider": "huggingface", "config": {"model": req["embedder"], "embedding_dims": 384}},
            "vector_store": {"provider": "qdrant", "config": {
                "collection_name": "mem0", "path": str(store / "qdrant"), "on_disk": True,
                "embedding_model_dims": 384}},
            "history_db_path": str(store / "history.db"),
        }
        self.memory = Memory.from_config(config)
        self.user_id = req["conversation"]
        return {"info": {"system": "mem0", "gives_sources": True, "version": md.version("mem0ai"),
                         "config": _shown(config)}}

    def add(self, req: dict) -> dict:
        m = req["message"]
        before = self.errors.count
        self.counts["adds"] += 1
        try:
            res = self.memory.add([{"role": "user", "content": f"{m['speaker']}: {m['text']}"}],
                                  user_id=self.user_id,
                                  metadata={"dia_id": m["id"], "session_date": m.get("date", "")})
        except Exception as exc:  # mem0 raises on a failed LLM call (LLMError): the message is dropped
            self.counts["failed"] += 1
            return {"memories": 0, "failed": True, "errors": self.errors.count - before,
                    "reason": f"{type(exc).__name__}: {exc}"[:300]}
        written = [r for r in (res or {}).get("results", []) if r.get("event") in ("ADD", "UPDATE")]
        errors = self.errors.count - before
        self.counts["with_errors"] += errors > 0
        self.counts["no_memory"] += not written
        self.counts["memories_written"] += len(written)
        return {"memories": len(written), "failed": False, "errors": errors,
                "reason": self.errors.last if errors else ""}

    def search(self, req: dict) -> dict:
        res = self.memory.search(req["question"], top_k=int(req.get("k", 20)), filters={"user_id": self.user_id})
        items = []
        for r in res.get("results", []):
            meta = r.get("metadata") or {}
            date = meta.get("session_date", "")
            text = f"[{date}] {r['memory']}" if date else r["memory"]
            items.append({"text": text, "sources": [meta["dia_id"]] if meta.get("dia_id") else [],
                          "score": r.get("score")})
        return {"items": items}

    def stats(self, req: dict) -> dict:
        stored = self.memory.get_all(filters={"user_id": self.user_id}, top_k=100000).get("results", [])
        return {"stats": {**self.counts, "memories_stored": len(stored)}}


def _shown(config: dict) -> dict:
    """The config as saved with the results (paths of this machine's temporary folders dropped)."""
    out = {k: v for k, v in config.items() if k != "history_db_path"}
    out["vector_store"] = {"provider": "qdrant", "config": {k: v for k, v in config["vector_store"]["config"].items()
                                                           if k != "path"}}
    out["embedder"] = {"provider": "huggingface", "config": {"model": os.path.basename(config["embedder"]["config"]
                                                                                        ["model"]),
                                                             "embedding_dims": 384}}
    out["llm"] = {"provider": "openai", "config": {k: v for k, v in config["llm"]["config"].items()
                                                   if k not in ("api_key", "openai_base_url")}}
    return out


def main() -> int:
    w = Mem0Worker()
    return serve({"init": w.init, "add": w.add, "search": w.search, "stats": w.stats})


if __name__ == "__main__":
    sys.exit(main())
