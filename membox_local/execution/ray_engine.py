"""`membox build --engine ray`: shard conversations over Ray actors, one backend and one store shard each.

SQLite has one writer, so every actor owns a shard: a full memory folder of its own,
`TARGET/shards/NN/`, holding a disjoint set of conversations. Each actor loads one backend (one GPU with
vLLM: `gpus_per_job=1`) and runs the batch scheduler over its conversations. When all actors are done the
shards are merged into `TARGET/memory.db`, the store `membox ask` and `Memory(TARGET)` read.

- Assignment is recorded in `TARGET/shards.json` and kept across runs: a conversation stays in its shard,
  new ones go to the least loaded shard. The shard count is fixed by the first build (`--jobs`).
- Resume: messages are written to a shard before they are processed, so rerunning the same command picks
  up every shard where it stopped, then merges again.
- Machines without a shared disk (`shard_dir`): each actor works on a node-local copy under `shard_dir`
  (SQLite must not run over a network filesystem), seeded from `TARGET/shards/NN/memory.db` when the node
  has none, and ships the finished database back to the driver, which keeps it under TARGET.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config import Config
from ..private import private_dir, write_private
from ..records import Message
from ..store import StoreError, copy_db

INSTALL = 'pip install "ray>=2.9"  (or: pip install -e ".[ray]")'
MANIFEST = "shards.json"


def require_ray():
    try:
        import ray
    except ImportError:
        raise ImportError(f"--engine ray needs Ray: {INSTALL}") from None
    return ray


def db_bytes(path: Path) -> bytes:
    """A consistent single-file copy of a (possibly WAL-mode) SQLite database."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.db"
        copy_db(path, copy)
        return copy.read_bytes()


class ShardBuilder:
    """The actor: owns one shard folder, one backend and one embedder for its whole life."""

    def __init__(self, shard: int, folder: str, config: Config, backend_factory: Callable | None,
                 embedder_factory: Callable | None, seed: bytes | None):
        from ..memory import Memory

        self.shard, self.folder = shard, Path(folder)
        private_dir(self.folder)
        db = self.folder / "memory.db"
        if seed is not None and not db.exists():
            write_private(db, seed)  # a node without this shard yet starts from the driver's copy
        self.memory = Memory(self.folder, config, backend=backend_factory,
                             embedder=embedder_factory() if embedder_factory else None)
        self.filed = 0

    def prepare(self, messages: list[Message]) -> int:
        """Store this shard's messages (skipping stored ones); returns how many wait to be filed (Memory.to_file:
        once per memory system)."""
        self.memory.store.add_messages(messages)
        convs = list(dict.fromkeys(m.conversation_id for m in messages))
        return sum(self.memory.to_file(convs).values())

    def build(self, conversations: list[str], batch_size: int, seal: bool, ship: bool) -> dict[str, Any]:
        from .batch import build_conversations

        def tick(n: int) -> None:
            self.filed += n

        t0 = time.perf_counter()
        self.memory.backend  # load the model before the clock of the build proper
        load_s = time.perf_counter() - t0
        report = build_conversations(self.memory, conversations, batch_size, seal, progress=tick)
        out = {"shard": self.shard, "model_load_s": round(load_s, 2), **report.to_dict()}
        self.memory.close()
        if ship:
            out["db"] = db_bytes(self.folder / "memory.db")
        return out

    def progress(self) -> int:
        return self.filed


def assign(manifest: dict[str, Any], messages: Sequence[Message], shards: int) -> dict[str, int]:
    """Conversation -> shard: recorded ones keep theirs, new ones go to the shard with fewest messages."""
    assignment: dict[str, int] = dict(manifest.get("assignment", {}))
    sizes: dict[str, int] = {}
    for m in messages:
        sizes[m.conversation_id] = sizes.get(m.conversation_id, 0) + 1
    load = [0] * shards
    for conv, s in assignment.items():
        load[s] += manifest.get("sizes", {}).get(conv, 0)
    for conv in sorted(sizes, key=lambda c: (-sizes[c], c)):
        if conv not in assignment:
            s = min(range(shards), key=lambda i: (load[i], i))
            assignment[conv] = s
            load[s] += sizes[conv]
    manifest["sizes"] = {**manifest.get("sizes", {}), **sizes}
    return assignment


def read_manifest(target: Path, jobs: int) -> dict[str, Any]:
    path = target / MANIFEST
    if not path.exists():
        if (target / "memory.db").exists():
            raise StoreError(f"{target} was built by the local engine; build it with the local engine "
                             f"or use a new folder for --engine ray")
        return {"shards": jobs, "assignment": {}, "sizes": {}}
    manifest = json.loads(path.read_text())
    if manifest["shards"] != jobs:
        raise StoreError(f"{target} has {manifest['shards']} shards; rerun with --jobs {manifest['shards']}")
    return manifest


def build_with_ray(target: str | Path, messages: Sequence[Message], config: Config, jobs: int, batch_size: int,
                   seal: bool = True, address: str | None = None, shard_dir: str | None = None,
                   cpus_per_job: float = 1, gpus_per_job: float = 0,
                   backend_factory: Callable | None = None, embedder_factory: Callable | None = None,
                   progress: Callable[[int], None] | None = None,
                   on_pending: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Build `messages` (already validated) into `target` with `jobs` Ray actors; returns a report.

    `backend_factory` / `embedder_factory` (picklable callables) replace the config's models, e.g. test
    doubles; by default each actor makes them from `config`. `on_pending(total)` is called once the shards
    know how many messages wait, `progress(n)` as they are filed.
    """
    if jobs < 1 or batch_size < 1:
        raise ValueError(f"--jobs and --batch-size must be at least 1 (got {jobs}, {batch_size})")
    target = Path(target).resolve()
    manifest = read_manifest(target, jobs)
    ray = require_ray()
    assignment = assign(manifest, messages, jobs)
    private_dir(target / "shards")  # owner-only, like every memory folder (private.py)
    private_dir(target)
    manifest["assignment"] = assignment
    write_private(target / MANIFEST, json.dumps(manifest, indent=1))

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    Actor = ray.remote(num_cpus=cpus_per_job, num_gpus=gpus_per_job, max_concurrency=2)(ShardBuilder)
    kept = [target / "shards" / f"{s:02d}" for s in range(jobs)]
    work = [Path(shard_dir).resolve() / target.name / f"{s:02d}" for s in range(jobs)] if shard_dir else kept
    by_shard: list[list[Message]] = [[] for _ in range(jobs)]
    for m in messages:
        by_shard[assignment[m.conversation_id]].append(m)
    live = [s for s in range(jobs) if by_shard[s]]
    t0 = time.perf_counter()
    actors = {}
    for s in live:
        seed = (kept[s] / "memory.db").read_bytes() if shard_dir and (kept[s] / "memory.db").exists() else None
        actors[s] = Actor.remote(s, str(work[s]), config, backend_factory, embedder_factory, seed)
    pending = ray.get([actors[s].prepare.remote(by_shard[s]) for s in live])
    if on_pending:
        on_pending(sum(pending))
    runs = {actors[s].build.remote(list(dict.fromkeys(m.conversation_id for m in by_shard[s])), batch_size,
                                   seal, bool(shard_dir)): s for s in live}
    reports, seen = [], 0
    while runs:
        ready, _ = ray.wait(list(runs), timeout=0.5, num_returns=len(runs))
        for ref in ready:
            s = runs.pop(ref)
            rep = ray.get(ref)
            if "db" in rep:
                private_dir(kept[s])
                tmp = kept[s] / "memory.db.incoming"
                write_private(tmp, rep.pop("db"))
                tmp.replace(kept[s] / "memory.db")
            reports.append(rep)
        if progress:
            live_actors = [actors[s] for s in runs.values()]
            done = sum(r["messages"] for r in reports) + sum(ray.get([a.progress.remote() for a in live_actors]))
            if done > seen:
                progress(done - seen)
                seen = done
    for a in actors.values():
        ray.kill(a)
    from .merge import merge_stores

    shards = [kept[s] / "memory.db" for s in range(jobs) if (kept[s] / "memory.db").exists()]
    copied = merge_stores(target / "memory.db", shards)
    return {"engine": "ray", "shards": jobs, "actors": len(live), "wall_s": round(time.perf_counter() - t0, 2),
            "messages_filed": sum(r["messages"] for r in reports), "per_shard": sorted(reports, key=lambda r: r["shard"]),
            "merged_rows": copied}

