"""A soak: a steady, mixed, agent-like load on `membox serve` or `membox mcp`, measured from outside.

N clients for a set time, each adding one message at a time to one of many conversations, searching every third
request and asking for an answer every twentieth, while the server files in the background. Measured: every
response's status per route, latency percentiles per route, the server's resident memory over time, tracebacks in
its log, and afterwards, from the memory folder itself, that every accepted message is stored exactly once and no
refused one is stored. `benchmarks/soak.py` runs it; tests/test_soak.py runs a short one in `make test`.

The server is a process of its own (started with the command a user types, on a free loopback port) so that its
resident memory is its own; the clients are threads of this process (REST: one keep-alive connection each) or tasks
of one event loop (MCP: one session each, over streamable HTTP).
"""
from __future__ import annotations

import http.client
import json
import os
import random
import re
import statistics
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..ingest import load_messages

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo.jsonl"
QUESTIONS = ("What race is Maya training for?", "What is the name of Tom's cat?", "Where does Tom work?",
             "What did the physio say about the knee?", "When is the half marathon?")


@dataclass
class Load:
    """What the clients do: `clients` at once for `seconds`, over `conversations` conversations; a client's n-th
    request searches when n % search_every == 0, answers when n % answer_every == 0, else adds one message."""
    clients: int = 8
    seconds: float = 600.0
    conversations: int = 20
    search_every: int = 3
    answer_every: int = 20
    seed: int = 0
    timeout_s: float = 300.0  # a request not answered in this long counts as an error ("timeout")


@dataclass
class Tally:
    """What the clients saw, shared by them (under its lock)."""
    calls: list[tuple[str, str, float, float]] = field(default_factory=list)  # (route, status, start, seconds)
    accepted: list[tuple[str, str]] = field(default_factory=list)  # (conversation, message id) answered 202
    refused: list[tuple[str, str]] = field(default_factory=list)  # adds answered with an error
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, route: str, status: str, start: float, seconds: float, message: tuple[str, str] | None = None):
        with self.lock:
            self.calls.append((route, status, start, seconds))
            if message is not None:
                (self.accepted if status in ("202", "ok") else self.refused).append(message)


def texts(data: Path | None) -> list[tuple[str, str]]:
    """(speaker, text) of the messages the clients send, in order: a LoCoMo .json or messages .jsonl (default: the
    bundled demo conversation)."""
    return [(m.speaker, m.text) for m in load_messages(data or DEMO)]


def _status_mb(pid: int | str, fields: tuple[str, ...]) -> dict[str, float] | None:
    """Lines of /proc/<pid>/status (Linux) in MB, by field name; None where the file or a field cannot be read."""
    try:
        found = {line.split(":")[0]: int(line.split()[1]) / 1024
                 for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(fields)}
    except (OSError, ValueError, IndexError):
        return None
    return found if len(found) == len(fields) else None


def rss_mb(pid: int | str = "self") -> float | None:
    """A process's resident memory in MB (VmRSS); None where it cannot be read."""
    found = _status_mb(pid, ("VmRSS",))
    return None if found is None else found["VmRSS"]


def rss_parts_mb(pid: int | str = "self") -> dict[str, float] | None:
    """A process's resident memory in MB by kind: "anon" (its heaps and buffers, RssAnon) and "file" (pages of
    mapped files: model weights, libraries; shared with every process mapping the same file, and given back to the
    OS's file cache under pressure; RssFile); None where they cannot be read."""
    found = _status_mb(pid, ("RssAnon", "RssFile"))
    return None if found is None else {"anon": round(found["RssAnon"], 1), "file": round(found["RssFile"], 1)}


def request_plan(load: Load, client: int, lines: list[tuple[str, str]]) -> Callable[[int], tuple[str, dict]]:
    """The client's n-th request as (route, arguments): add / search / answer over the load's conversations."""
    rng = random.Random(load.seed * 1000 + client)

    def query() -> str:
        """A search as an agent makes it, from what was just said: the first words of a line (3 or more; most are
        texts never embedded before, of every length the data has), or one of the questions."""
        if rng.random() < 0.25:
            return rng.choice(QUESTIONS)
        words = lines[rng.randrange(len(lines))][1].split()
        return " ".join(words[:rng.randint(min(3, len(words)), max(3, len(words)))]) or rng.choice(QUESTIONS)

    def nth(n: int) -> tuple[str, dict]:
        conv = f"soak-{rng.randrange(load.conversations):02d}"
        if n % load.answer_every == 0:
            return "answer", {"question": rng.choice(QUESTIONS), "conversation_id": conv}
        if n % load.search_every == 0:
            return "search", {"q": query(), "conversation_id": conv}
        speaker, text = lines[(client * 7919 + n) % len(lines)]
        return "add", {"conversation_id": conv, "messages": [{
            "conversation_id": conv, "message_id": f"c{client}-{n}", "speaker": speaker, "text": text,
            "session": "1", "session_date": "10:00 am on 1 June, 2024"}]}
    return nth


# ---- the server ------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`membox serve DIR` (or `membox mcp DIR --transport http`) as a process of its own, its log in a file."""

    def __init__(self, store: Path, config: str, kind: str, log: Path, env: dict[str, str] | None = None):
        self.port, self.kind, self.log = free_port(), kind, log
        cmd = [sys.executable, "-c", "from membox_local.cli import main; main()", kind, str(store),
               "--config", config, "--port", str(self.port)] + (["--transport", "http"] if kind == "mcp" else [])
        self.out = open(log, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the server did not listen within {timeout_s:.0f} s: {self.log_tail()}")

    def rss_mb(self) -> float | None:
        return rss_mb(self.proc.pid)

    def rss_parts_mb(self) -> dict[str, float] | None:
        return rss_parts_mb(self.proc.pid)

    def indexes_mb(self) -> float | None:
        """What the server says its vector indexes hold in memory (status `indexes_mb`); None when not read."""
        try:
            if self.kind == "serve":
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("GET", "/status")
                status = json.loads(conn.getresponse().read())
                conn.close()
            else:
                status = mcp_status(self.port)
            return float(status["indexes_mb"])
        except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException):
            return None

    def log_tail(self, chars: int = 2000) -> str:
        self.out.flush()
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> int:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        return self.proc.returncode


def sample_rss(server: Server, stop: threading.Event, every_s: float, out: list[tuple[float, float]],
               warm_s: float = float("inf"), held: dict | None = None,
               parts: list[tuple[float, float, float]] | None = None) -> None:
    """Resident memory every `every_s` seconds into `out` (and by kind, (seconds, anon, file), into `parts`); and
    into `held["warm"]`, what the server's indexes hold when warm-up ends (read right after the first sample at or
    past `warm_s`)."""
    t0 = time.monotonic()
    while not stop.is_set():
        rss = server.rss_mb()
        if rss is not None:
            out.append((round(time.monotonic() - t0, 1), round(rss, 1)))
            kinds = server.rss_parts_mb() if parts is not None else None
            if kinds is not None:
                parts.append((out[-1][0], kinds["anon"], kinds["file"]))
            if held is not None and "warm" not in held and out[-1][0] >= warm_s:
                held["warm"] = server.indexes_mb()
        stop.wait(every_s)


# ---- REST clients ----------------------------------------------------------------------------------------------
def rest_call(conn: http.client.HTTPConnection, route: str, args: dict) -> tuple[int, dict, bool]:
    """(status, body, the server closes the connection: open a new one) of one request."""
    if route == "search":
        from urllib.parse import urlencode

        conn.request("GET", "/memories/search?" + urlencode(args))
    else:
        path = "/memories" if route == "add" else "/answer"
        conn.request("POST", path, body=json.dumps(args), headers={"content-type": "application/json"})
    resp = conn.getresponse()
    body = resp.read()
    try:
        return resp.status, json.loads(body), resp.will_close
    except ValueError:
        return resp.status, {}, resp.will_close


def rest_client(port: int, load: Load, client: int, lines: list, tally: Tally, until: float) -> None:
    nth = request_plan(load, client, lines)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=load.timeout_s)
    n = 1
    while time.monotonic() < until:
        route, args = nth(n)
        t0 = time.monotonic()
        try:
            code, _, closing = rest_call(conn, route, args)
            status = str(code)
        except (OSError, http.client.HTTPException) as exc:
            status = "timeout" if isinstance(exc, TimeoutError) else f"error:{type(exc).__name__}"
            closing = True
        if closing:  # the server said it closes the connection (or it broke): a new one for the next request
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=load.timeout_s)
        message = (args["conversation_id"], args["messages"][0]["message_id"]) if route == "add" else None
        tally.add(route, status, t0, time.monotonic() - t0, message)
        n += 1
    conn.close()


def run_rest(port: int, load: Load, lines: list, tally: Tally) -> None:
    until = time.monotonic() + load.seconds
    threads = [threading.Thread(target=rest_client, args=(port, load, c, lines, tally, until), daemon=True)
               for c in range(load.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# ---- MCP clients -----------------------------------------------------------------------------------------------
MCP_TOOLS = {"add": "add_memory", "search": "search_memory", "answer": "answer"}


def mcp_status(port: int) -> dict:
    """The MCP server's memory_status tool, called in a session of its own."""
    import anyio
    from mcp import Client

    async def call() -> dict:
        async with Client(f"http://127.0.0.1:{port}/mcp") as session:
            res = await session.call_tool("memory_status", {})
            return res.structured_content or json.loads(res.content[0].text)

    return anyio.run(call)


def mcp_arguments(route: str, args: dict) -> dict:
    if route == "search":
        return {"query": args["q"], "conversation_id": args["conversation_id"]}
    return args if route == "answer" else {"messages": args["messages"]}


def run_mcp(port: int, load: Load, lines: list, tally: Tally) -> None:
    """Each client a session over streamable HTTP; a tool error counts as "tool_error", an exception as an error."""
    import anyio
    from mcp import Client

    until = time.monotonic() + load.seconds

    async def client(c: int) -> None:
        nth = request_plan(load, c, lines)
        async with Client(f"http://127.0.0.1:{port}/mcp") as session:
            n = 1
            while time.monotonic() < until:
                route, args = nth(n)
                t0 = time.monotonic()
                try:
                    with anyio.fail_after(load.timeout_s):
                        res = await session.call_tool(MCP_TOOLS[route], mcp_arguments(route, args))
                    status = "tool_error" if res.is_error else "ok"
                except TimeoutError:
                    status = "timeout"
                except Exception as exc:  # noqa: BLE001 - counted, the client goes on
                    status = f"error:{type(exc).__name__}"
                message = (args["conversation_id"], args["messages"][0]["message_id"]) if route == "add" else None
                tally.add(route, status, t0, time.monotonic() - t0, message)
                n += 1

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for c in range(load.clients):
                group.start_soon(client, c)

    anyio.run(main)


# ---- checks and the report -------------------------------------------------------------------------------------
def stored_counts(store: Path) -> tuple[Counter, int]:
    """(conversation, message id) -> rows in the memory, and how many messages were filed (read-only)."""
    db = sqlite3.connect(f"file:{store / 'memory.db'}?mode=ro", uri=True)
    try:
        rows = Counter((c, m) for c, m in db.execute("SELECT conversation_id, message_id FROM messages"))
        return rows, db.execute("SELECT COUNT(*) FROM messages WHERE processed=1").fetchone()[0]
    finally:
        db.close()


def latency(calls: list[tuple[str, str, float, float]], ok: tuple[str, ...]) -> dict[str, dict]:
    """Per route: requests, statuses, and seconds of the answered ones (p50, p95, max)."""
    by: dict[str, list] = defaultdict(list)
    for route, status, _, s in calls:
        by[route].append((status, s))
    out = {}
    for route, rows in sorted(by.items()):
        secs = np.array([s for st, s in rows if st in ok] or [np.nan])
        out[route] = {"requests": len(rows), "statuses": dict(Counter(st for st, _ in rows)),
                      "p50_s": round(float(np.nanpercentile(secs, 50)), 3),
                      "p95_s": round(float(np.nanpercentile(secs, 95)), 3), "max_s": round(float(np.nanmax(secs)), 3)}
    return out


def rss_growth(samples: list[tuple[float, float]], warm_s: float, span_s: float = 60.0) -> dict[str, float | None]:
    """Resident memory at the end of warm-up (the first sample at or after `warm_s`), at the end, and the growth;
    and `trend_mb`: the median of the last `span_s` seconds' samples less the median of the first `span_s` after
    warm-up (a heap given back between calls goes up and down with the calls in flight at each sample)."""
    after = [(t, r) for t, r in samples if t >= warm_s]
    if not after:
        return {"warm_mb": None, "end_mb": None, "growth_mb": None, "max_mb": None, "trend_mb": None}
    first = [r for t, r in after if t < after[0][0] + span_s]
    last = [r for t, r in after if t > after[-1][0] - span_s]
    return {"warm_mb": after[0][1], "end_mb": after[-1][1], "growth_mb": round(after[-1][1] - after[0][1], 1),
            "max_mb": max(r for _, r in samples),
            "trend_mb": round(statistics.median(last) - statistics.median(first), 1)}


def minute_lows(samples: list[tuple[float, float]], seconds: float) -> list[float]:
    """The lowest resident-memory sample in each whole minute of a `seconds`-long load after its first (minutes 1 to
    9 of a 10-minute load): with the heap given back between calls the samples swing with the calls in flight, so
    what a minute's lowest does over the run is what the server keeps."""
    return [min((r for t, r in samples if m * 60 <= t < m * 60 + 60), default=None)
            for m in range(1, int(seconds // 60))]


def beyond_data(rss: dict, held_warm: float | None, held_end: float | None) -> float | None:
    """The resident memory's growth after warm-up less what the server's indexes took on for the data stored since
    (their own account: status `indexes_mb`, VectorIndex.held_bytes)."""
    if rss.get("growth_mb") is None or held_warm is None or held_end is None:
        return None
    return round(rss["growth_mb"] - (held_end - held_warm), 1)


TRACEBACK = re.compile(r"^Traceback \(most recent call last\)", re.M)


def first_traceback(log_text: str, chars: int = 4000) -> str:
    """The first traceback in the server's log, with the line before it (what the server was doing); "" if none."""
    found = TRACEBACK.search(log_text)
    if found is None:
        return ""
    start = log_text.rfind("\n", 0, max(found.start() - 1, 0)) + 1
    return log_text[start:found.start() + chars]


def report(tally: Tally, stored: Counter, samples: list, log_text: str, load: Load, warm_s: float,
           ok: tuple[str, ...], parts: list | None = None) -> dict[str, Any]:
    """The soak's figures and its verdicts: no 500, no traceback, every accepted message stored once, none of the
    refused ones stored."""
    accepted, refused = set(tally.accepted), set(tally.refused)
    parts = parts or []
    statuses = Counter(st for _, st, _, _ in tally.calls)
    return {
        "load": vars(load) | {"warm_s": warm_s},
        "routes": latency(tally.calls, ok),
        "statuses": dict(statuses),
        "server_errors": sum(n for st, n in statuses.items() if st.startswith("5") or st.startswith("error")
                             or st == "timeout"),
        "tracebacks": len(TRACEBACK.findall(log_text)),
        "first_traceback": first_traceback(log_text),
        "accepted": len(tally.accepted), "accepted_distinct": len(accepted),
        "accepted_not_stored": sorted(accepted - set(stored))[:10],
        "stored_twice": sorted(k for k, n in stored.items() if n > 1)[:10],
        "refused_but_stored": sorted(k for k in refused - accepted if k in stored)[:10],
        "rss": rss_growth(samples, warm_s), "rss_samples": samples,
        # the same growth by kind: the heaps ("anon") and mapped files' pages ("file": model weights read in)
        "rss_by_kind": {kind: rss_growth([(p[0], p[i]) for p in parts], warm_s)["growth_mb"]
                        for i, kind in ((1, "anon"), (2, "file"))},
        "rss_parts_samples": parts,
        "messages_stored": sum(stored.values()),
    }


def verdicts(result: dict) -> list[str]:
    """What the soak found wrong, one line each (empty: it held)."""
    bad = []
    if result["server_errors"]:
        bad.append(f"{result['server_errors']} response(s) were 5xx, errors or timeouts: {result['statuses']}")
    if result["tracebacks"]:
        bad.append(f"{result['tracebacks']} traceback(s) in the server's log")
    for key in ("accepted_not_stored", "stored_twice", "refused_but_stored"):
        if result[key]:
            bad.append(f"{key.replace('_', ' ')}: {result[key]}")
    return bad


def soak(store: Path, config: str, load: Load, *, kind: str = "serve", data: Path | None = None,
         warm_s: float = 60.0, sample_s: float = 5.0, log: Path | None = None,
         env: dict[str, str] | None = None, on_ready: Callable[[Server], None] | None = None) -> dict[str, Any]:
    """Start the server on `store`, run the load, stop the server and report (see `report`), with what the server's
    indexes held at the end of warm-up and at the end (`indexes_mb`) and its growth after warm-up beyond that.
    `on_ready(server)` is called once it listens, before the load starts (a profiler attaching to it)."""
    lines = texts(data)
    log = log or store.with_name(store.name + f"-{kind}.log")
    server = Server(store, config, kind, log, env)
    samples: list[tuple[float, float]] = []
    parts: list[tuple[float, float, float]] = []
    held: dict[str, float | None] = {}
    stop = threading.Event()
    try:
        server.wait_ready()
        if on_ready is not None:
            on_ready(server)
        sampler = threading.Thread(target=sample_rss, args=(server, stop, sample_s, samples, warm_s, held, parts),
                                   daemon=True)
        sampler.start()
        started = time.monotonic()
        tally = Tally()
        (run_rest if kind == "serve" else run_mcp)(server.port, load, lines, tally)
        stop.set()
        sampler.join()
        held["end"] = server.indexes_mb()
        rss_end = server.rss_mb()
        kinds_end = server.rss_parts_mb()
        if rss_end is not None:  # the last sample is the one the account at the end goes with
            samples.append((round(time.monotonic() - started, 1), round(rss_end, 1)))
            if kinds_end is not None:
                parts.append((samples[-1][0], kinds_end["anon"], kinds_end["file"]))
    finally:
        stop.set()
        server.stop()
    ok = ("200", "202") if kind == "serve" else ("ok",)
    stored, filed = stored_counts(store)
    result = report(tally, stored, samples, log.read_text(errors="replace"), load, warm_s, ok, parts)
    at_warm = sum(1 for route, st, t0, _ in tally.calls if route == "add" and st in ok and t0 < started + warm_s)
    return result | {"messages_filed": filed, "messages_stored_at_warm": at_warm,
                     "indexes_mb": {"warm": held.get("warm"), "end": held.get("end")},
                     "growth_beyond_data_mb": beyond_data(result["rss"], held.get("warm"), held.get("end"))}
