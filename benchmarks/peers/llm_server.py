"""The build model every peer talks to: llama-cpp-python's OpenAI-compatible server on a free loopback port, and a
counting proxy in front of it, which forwards every request unchanged but in two ways (docs/peers.md, "Stand-ins and
limits": `translate` and `cap`) and reads the `usage` of every JSON reply; the harness takes a snapshot of the
counts before and after a build."""
from __future__ import annotations

import http.client
import json
import subprocess
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from .workers import last_line


class ServerError(RuntimeError):
    pass


def server_command(python: str, model: str, port: int, n_ctx: int, threads: int, alias: str) -> list[str]:
    """llama_cpp.server's command line: the model's own chat template (no --chat_format), logits for the last token
    only (logits_all false: an 8k-token prompt would otherwise keep 8k rows of logits)."""
    return [python, "-m", "llama_cpp.server", "--model", model, "--model_alias", alias, "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch",
            str(threads), "--logits_all", "false", "--seed", "0"]


class LlamaServer:
    """Started by `start()`, stopped by `stop()`; `base_url` ends in /v1."""

    def __init__(self, python: str, model: str, log_path: Path, n_ctx: int = 16384, threads: int = 2,
                 alias: str = "build-model"):
        self.python, self.model, self.log_path = python, model, Path(log_path)
        self.n_ctx, self.threads, self.alias = n_ctx, threads, alias
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 300.0) -> LlamaServer:
        from membox_local.evaluation.soak import free_port

        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = server_command(self.python, self.model, self.port, self.n_ctx, self.threads, self.alias)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"llama_cpp.server exited (code {self.proc.returncode}) before it answered: "
                                  f"{last_line(self.log_path)} [log: {self.log_path}]")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise ServerError(f"llama_cpp.server did not answer in {timeout:.0f} s [log: {self.log_path}]")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed: int = 0
    translated: int = 0  # json_schema response formats turned into json_object + schema
    capped: int = 0  # requests with no output limit given the proxy's
    cut: int = 0  # replies that stopped at their output limit (finish_reason "length")
    seconds: float = 0.0

    def minus(self, other: Usage) -> Usage:
        return Usage(**{k: round(v - getattr(other, k), 3) for k, v in asdict(self).items()})


def translate(body: dict) -> tuple[dict, bool]:
    """The request the server is sent: an OpenAI json_schema response format as the server's json_object + schema."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        new = {"type": "json_object", **({"schema": schema} if isinstance(schema, dict) else {})}
        return {**body, "response_format": new}, True
    return body, False


def cap(body: dict, max_tokens: int) -> tuple[dict, bool]:
    """A request that sets no output limit gets `max_tokens` (0: none), as OpenAI's API caps every model's output;
    llama-cpp-python's server would otherwise generate until its context is full."""
    if max_tokens and body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        return {**body, "max_tokens": max_tokens}, True
    return body, False


class UsageProxy:
    """A loopback HTTP proxy to `target` (an http://host:port/v1 URL) that counts usage; `base_url` ends in /v1."""

    def __init__(self, target: str, timeout: float = 900.0, max_tokens: int = 0):
        parts = urlsplit(target)
        self.host, self.port_to, self.timeout, self.max_tokens = parts.hostname, parts.port, timeout, max_tokens
        self.usage = Usage()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Relay)
        self.server.daemon_threads, self.server.proxy = True, self
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def snapshot(self) -> Usage:
        with self.lock:
            return Usage(**asdict(self.usage))

    def start(self) -> UsageProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def forward(self, method: str, path: str, body: bytes, headers: dict) -> tuple[int, bytes, str]:
        translated = capped = False
        if body and method == "POST":
            try:
                data, translated = translate(json.loads(body))
                data, capped = cap(data, self.max_tokens)
                body = json.dumps(data).encode("utf-8") if translated or capped else body
            except (ValueError, AttributeError):  # not a JSON object: forwarded as it came
                pass
        t0 = time.time()
        conn = http.client.HTTPConnection(self.host, self.port_to, timeout=self.timeout)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            status, payload, ctype = resp.status, resp.read(), resp.getheader("Content-Type", "application/json")
        finally:
            conn.close()
        self.count(status, payload, time.time() - t0, path, translated, capped)
        return status, payload, ctype

    def count(self, status: int, payload: bytes, seconds: float, path: str, translated: bool = False,
              capped: bool = False) -> None:
        if not path.rstrip("/").endswith(("completions", "embeddings")):
            return
        usage, cut = {}, False
        try:
            reply = json.loads(payload)
            usage = reply.get("usage") or {}
            cut = any(c.get("finish_reason") == "length" for c in reply.get("choices") or [])
        except (ValueError, AttributeError):
            pass
        with self.lock:
            u = self.usage
            u.calls += 1
            u.failed += status >= 400
            u.translated += translated
            u.capped += capped
            u.cut += cut
            u.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            u.completion_tokens += int(usage.get("completion_tokens") or 0)
            u.seconds += seconds


class _Relay(BaseHTTPRequestHandler):
    """One request to the proxy (`self.server.proxy`), forwarded; a server that cannot be reached answers 502."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server's names)
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
        try:
            status, payload, ctype = self.server.proxy.forward(self.command, self.path, body, headers)
        except OSError as exc:
            status, ctype = 502, "application/json"
            payload = json.dumps({"error": {"message": f"proxy: {exc}"}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST

    def log_message(self, *args):  # quiet: the server's own log has the requests
        pass
