"""The build profile: where a build's time goes, stage by stage, and how close it runs to the machine's ceiling.

Measured where the work is done, and kept per conversation and stage in the store (table build_time, beside the
token usage of llm_usage), so that `Memory.stats()` reports it and a resumed build adds to it:

- model stages (judge, extract, link, trace-init, ew-extract, ew-summary): the driver times each batched backend
  call (execution/driver.py). One call answers the requests of one kind, which may come from several stages and
  conversations (a JSON call carries extractions beside the Weaver's link calls). Its seconds are split over its
  requests **by tokens** (prompt + completion of each request's usage; a request that failed without usage
  weighs as the mean of the others, a call where none has usage is split evenly). Tokens stand in for cost:
  llama.cpp answers a call's prompts one after another, each taking longer the more tokens it has, though a
  generated token costs more than a prompt token. Calls: requests answered with token usage (= llm_usage rows).
- embed: the driver's embedder calls (the judge's and the Weaver's embeddings), split by texts; calls: requests.
- store: time inside the store's write transactions (Store.write_s, BEGIN to COMMIT), taken out of the stage in
  which it happened (the embedding cache's writes inside an embed call, a step filing a message); calls:
  transactions committed. The profile's own writes (one small transaction every FLUSH_S seconds) are not counted.
- pipeline: the steps' own work between their requests (Python, store reads; writes taken out); calls: resumptions.
- index: embedding extracted boxes into the box index (BoxMemory.sync, after a build or before the first search);
  calls: boxes indexed.
Not in any stage: loading the models (the embedder as the driver is made, the LLM on its first call) and the
driver's scheduling between rounds (the progress bar included).

The ceiling (`probe`): prompt-processing (pp) and generation (tg) tokens per second of the build's backend, from a
fixed probe (a ~512-token prompt answered with one token; 64 tokens generated greedily after a short prompt; the
best of `repeats` tries, after a warm-up). A stage's share of the ceiling is the time the ceiling would need for
its tokens (prompt / pp + completion / tg) over the seconds the stage took: 1.0 is the machine's rate; above 1,
the stage counted tokens it did not compute (llama.cpp reuses a cached prompt prefix, and label and score requests
count their whole prompt). The probe treats every backend alike: the test doubles answer at once, so their rates
are large and mean nothing, but they are rates.
"""
from __future__ import annotations

import os
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Sequence

from .backends.base import BackendError, Prompt, TextRequest

EMBED, STORE, PIPELINE, INDEX = "embed", "store", "pipeline", "index"
NOT_BUILT = ("answer",)  # usage stages that are no part of a build (`membox ask`)
FLUSH_S = 2.0  # a driver writes its accumulated times at most this often (and when it stops)
PROBE_PROMPT_TOKENS = 512  # tokens of the prompt-processing probe's user text
PROBE_GEN_TOKENS = 64  # tokens the generation probe asks for
FILLER = ("The committee met on Tuesday to review the harbour budget, the new ferry timetable and the repairs to "
          "the north pier, which storms had damaged twice since spring. ")
COUNTING = "Count from 1 to 500, one number after another, separated by commas."


# ---- measuring ---------------------------------------------------------------------------------------------------
@dataclass
class Span:
    """A piece of timed work: its wall seconds, and the store's write seconds and transactions inside them."""

    wall_s: float = 0.0
    write_s: float = 0.0
    writes: int = 0


@contextmanager
def span(store) -> Iterator[Span]:
    """Time the block, and how much of it the store spent in write transactions (Store.write_s, Store.writes)."""
    s = Span()
    t0, w0, n0 = time.perf_counter(), store.write_s, store.writes
    try:
        yield s
    finally:
        s.wall_s = time.perf_counter() - t0
        s.write_s, s.writes = store.write_s - w0, store.writes - n0


def shares(weights: Sequence[float]) -> list[float]:
    """Weights as fractions summing to 1; all zero: equal fractions."""
    total = float(sum(weights))
    if total <= 0:
        return [1.0 / len(weights)] * len(weights)
    return [w / total for w in weights]


def token_weights(results: Sequence[Any]) -> list[float]:
    """Each result's tokens (prompt + completion of its usage); one without usage (a failed call) weighs as the
    mean of the others, or 1 when none has usage."""
    tokens = [None if getattr(r, "usage", None) is None else r.usage.prompt_tokens + r.usage.completion_tokens
              for r in results]
    known = [t for t in tokens if t is not None]
    fill = sum(known) / len(known) if known else 1.0
    return [float(fill if t is None else t) for t in tokens]


class StageClock:
    """Seconds and calls by (conversation, stage), accumulated in memory and added to the store's build_time
    table by `flush` (a driver flushes at most every FLUSH_S seconds and when it stops)."""

    def __init__(self, store):
        self.store = store
        self.pending: dict[tuple[str, str], list] = {}  # (conversation, stage) -> [seconds, calls]
        self._flushed = time.perf_counter()

    def add(self, conversation: str, stage: str, seconds: float, calls: int) -> None:
        if seconds or calls:
            slot = self.pending.setdefault((conversation, stage), [0.0, 0])
            slot[0] += seconds
            slot[1] += calls

    def charge(self, sp: Span, conversations: Sequence[str], stages: Sequence[str], weights: Sequence[float],
               calls: Sequence[int]) -> None:
        """Split a span over the requests it served (one conversation, stage, weight and call count each): its
        write seconds to `store`, the rest to each request's stage, both by weight. The transactions count once,
        under the first conversation (so that their sum over conversations is their number)."""
        work = max(0.0, sp.wall_s - sp.write_s)
        for conv, stage, share, n in zip(conversations, stages, shares(weights), calls):
            self.add(conv, stage, work * share, n)
            self.add(conv, STORE, sp.write_s * share, 0)
        if sp.writes:
            self.add(conversations[0], STORE, 0.0, sp.writes)

    def due(self) -> bool:
        return time.perf_counter() - self._flushed >= FLUSH_S

    def flush(self) -> None:
        rows = [(conv, stage, s, n) for (conv, stage), (s, n) in self.pending.items()]
        self.pending, self._flushed = {}, time.perf_counter()
        if rows:
            self.store.record_build_time(rows)


@contextmanager
def indexing(store, conversations: Sequence[str]) -> Iterator[None]:
    """Time building the box index for these boxes' conversations (one entry per box) as the `index` stage."""
    with span(store) as sp:
        yield
    clock = StageClock(store)
    clock.charge(sp, conversations, [INDEX] * len(conversations), [1.0] * len(conversations),
                 [1] * len(conversations))
    clock.flush()


# ---- the machine's ceiling ---------------------------------------------------------------------------------------
@dataclass
class Ceiling:
    pp_tok_s: float  # prompt tokens evaluated per second (a ~512-token prompt, one token generated after it)
    tg_tok_s: float  # tokens generated per second, greedy (after a short prompt, whose evaluation is counted in)
    prompt_tokens: int  # the pp probe's prompt, in the backend's tokens (chat template included)
    generated_tokens: int  # tokens the tg probe generated (at most PROBE_GEN_TOKENS: the model may stop)
    copies: int  # prompts per call (one per llama.cpp instance of a --jobs pool): the rates are their sum
    backend: str  # what was measured (backend, model, threads)
    measured_at: str  # local time of the probe: a ceiling is the machine's on that day, under that load

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pp_tok_s"], out["tg_tok_s"] = round(self.pp_tok_s, 2), round(self.tg_tok_s, 2)
        return out

    def line(self) -> str:
        return (f"ceiling of {self.backend} ({self.measured_at}): prompt processing {self.pp_tok_s:.1f} tok/s "
                f"({self.prompt_tokens}-token prompt), generation {self.tg_tok_s:.1f} tok/s "
                f"({self.generated_tokens} tokens)" + (f", {self.copies} prompts per call" if self.copies > 1 else ""))


def backend_label(llm, jobs: int = 1) -> str:
    """What a probe of the [llm] section `llm` measures: backend, model, and llama.cpp's threads and instances."""
    label = f"{llm.backend} {llm.model}"
    if llm.backend == "llamacpp":
        threads = llm.n_threads or os.cpu_count() or 1
        label += f", {threads} threads" + (f" over {jobs} instances" if jobs > 1 else "")
    return label


def filler_text(backend, tokens: int) -> str:
    """FILLER repeated and cut to about `tokens` tokens of the backend's tokenizer."""
    words = (FILLER * (1 + tokens // 10)).split()
    n = tokens
    for _ in range(3):  # words per token settles after one or two corrections
        have = max(1, backend.count_tokens(" ".join(words[:n])))
        if have == tokens:
            break
        n = max(1, min(len(words), round(n * tokens / have)))
    return " ".join(words[:n])


def _request(user: str, max_tokens: int) -> TextRequest:
    # a fresh tag first: no prompt prefix is cached from the build or an earlier probe
    return TextRequest(Prompt(f"[probe {uuid.uuid4().hex[:8]}] Answer briefly.", user), stage="probe",
                       max_tokens=max_tokens)


def _rate(backend, user: str, max_tokens: int, copies: int, field: str) -> tuple[float, int]:
    """(tokens of `field` per second, tokens of one request) over one call of `copies` requests."""
    requests = [_request(user, max_tokens) for _ in range(copies)]
    t0 = time.perf_counter()
    results = backend.text(requests)
    wall = time.perf_counter() - t0
    for r in results:
        if isinstance(r, BaseException):
            raise BackendError(f"probe: the backend failed: {r}")
    tokens = [getattr(r.usage, field) for r in results]
    if min(tokens) <= 0:
        raise BackendError(f"probe: the backend reported no {field.replace('_', ' ')}; no rate can be measured")
    return sum(tokens) / wall, tokens[0]


def probe(backend, label: str, copies: int = 1, repeats: int = 2, prompt_tokens: int = PROBE_PROMPT_TOKENS,
          gen_tokens: int = PROBE_GEN_TOKENS) -> Ceiling:
    """Measure the backend's prompt-processing and generation rates (see the module docstring): a warm-up call,
    then the best of `repeats` tries of each. `copies` prompts go in each call (a pool answers them in parallel)."""
    if copies < 1 or repeats < 1:
        raise ValueError(f"probe: copies and repeats must be at least 1 (got {copies}, {repeats})")
    _rate(backend, COUNTING, 8, copies, "completion_tokens")  # warm-up: weights paged in, buffers allocated
    text = filler_text(backend, prompt_tokens)
    pp = max(_rate(backend, text, 1, copies, "prompt_tokens") for _ in range(repeats))
    tg = max(_rate(backend, COUNTING, gen_tokens, copies, "completion_tokens") for _ in range(repeats))
    return Ceiling(pp[0], tg[0], pp[1], tg[1], copies, label, time.strftime("%Y-%m-%d %H:%M"))


# ---- the profile -------------------------------------------------------------------------------------------------
def stage_rows(usage: dict[str, dict], times: dict[str, dict], ceiling: Ceiling | None) -> list[dict[str, Any]]:
    """One row per build stage (usage_by_stage and build_time_by_stage of a store), model stages first, then a
    total. Calls and tokens of a model stage are its usage's; stages without usage report build_time's calls."""
    names = [s for s in usage if s not in NOT_BUILT] + [s for s in times if s not in usage]
    rows = [_row(s, usage.get(s), times.get(s), ceiling) for s in names]
    if rows:
        total = {"wall_s": sum(r["wall_s"] for r in rows), "calls": None,
                 "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
                 "completion_tokens": sum(r["completion_tokens"] for r in rows)}
        rows.append(_rates({"stage": "total", **total}, ceiling))
    return rows


def _row(stage: str, usage: dict | None, time_: dict | None, ceiling: Ceiling | None) -> dict[str, Any]:
    row = {"stage": stage, "wall_s": (time_ or {}).get("wall_s") or 0.0,
           "calls": (usage or time_ or {}).get("calls", 0),
           "prompt_tokens": (usage or {}).get("prompt_tokens") or 0,
           "completion_tokens": (usage or {}).get("completion_tokens") or 0}
    return _rates(row, ceiling)


def _rates(row: dict[str, Any], ceiling: Ceiling | None) -> dict[str, Any]:
    """Add tok_s (prompt + completion tokens per wall second) and share_of_ceiling (the seconds the ceiling would
    need for those tokens over the wall seconds): None where there are no tokens, no time or no ceiling."""
    tokens, wall = row["prompt_tokens"] + row["completion_tokens"], row["wall_s"]
    row["tok_s"] = round(tokens / wall, 2) if tokens and wall > 0 else None
    row["share_of_ceiling"] = None
    if ceiling is not None and tokens and wall > 0:
        ideal = row["prompt_tokens"] / ceiling.pp_tok_s + row["completion_tokens"] / ceiling.tg_tok_s
        row["share_of_ceiling"] = round(ideal / wall, 3)
    row["wall_s"] = round(wall, 3)
    return row


def profile(stats: dict[str, Any], ceiling: Ceiling | None, no_ceiling: str = "no ceiling measured") -> dict:
    """The profile of a memory from its `Memory.stats()` (llm_usage, build_time) and a ceiling; without one,
    `no_ceiling` says why."""
    out = {"stages": stage_rows(stats["llm_usage"], stats["build_time"], ceiling),
           "ceiling": None if ceiling is None else ceiling.to_dict()}
    if ceiling is None:
        out["no_ceiling"] = no_ceiling
    return out


COLUMNS = (("stage", "stage", "{}"), ("wall s", "wall_s", "{:.2f}"), ("calls", "calls", "{}"),
           ("prompt tok", "prompt_tokens", "{}"), ("completion tok", "completion_tokens", "{}"),
           ("tok/s", "tok_s", "{:.1f}"), ("share of ceiling", "share_of_ceiling", "{:.1%}"))


def format_profile(prof: dict[str, Any]) -> str:
    """The profile as a text table, then the ceiling's line (or why there is none)."""
    cells = [[head for head, _, _ in COLUMNS]]
    cells += [["-" if r[key] is None else fmt.format(r[key]) for _, key, fmt in COLUMNS] for r in prof["stages"]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    c = prof["ceiling"]
    lines.append(Ceiling(**c).line() if c else prof["no_ceiling"])
    return "\n".join(lines)
