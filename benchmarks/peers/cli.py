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
import os
import signal
import sys
from pathlib import Path

from .runner import PEERS, SYSTEMS, Settings, header, log, run_all, work_dir


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


def settings_from(a: argparse.Namespace) -> Settings:
    from membox_local.config import parse_assignment

    return Settings(data=a.data, conversations=a.conversations, systems=a.systems, sessions=a.sessions,
                    messages=a.messages, questions=a.questions, categories=a.categories, config=a.config,
                    overrides=dict(parse_assignment(x) for x in a.set), budget=a.budget, k=a.k, peer_k=a.peer_k,
                    threads=a.threads, n_ctx=a.n_ctx, max_tokens=a.max_tokens, peers_python=a.peers_python,
                    work=a.work, save=a.save, keep_text=a.keep_text, timeout=a.timeout)


def cmd_run(s: Settings) -> int:
    from membox_local.config import load_config
    from membox_local.weights import resolve_model

    from . import data
    from .answering import MemboxAnswerer
    from .llm_server import LlamaServer, ServerError, UsageProxy
    from .report import markdown
    from .systems import MemboxSystem, PeerSystem, peers_python

    _threads(s.threads)
    cfg = load_config(s.config, {"llm.n_threads": s.threads, **s.overrides})
    budget, k = s.budget or cfg.retrieve.budget_tokens, s.k or cfg.retrieve.k
    convs = data.load(s.data, s.conversations, s.sessions, s.messages, s.questions, tuple(s.categories))
    work = work_dir(s)
    log(f"work folder {work}; {len(convs)} conversations, systems {' '.join(s.systems)}")
    build_model, embedder = str(resolve_model(cfg.llm.model)), str(resolve_model(cfg.embedder.model))
    py = peers_python(s.peers_python)
    answerer = MemboxAnswerer(cfg, work / "answerer")  # loaded first: a model that cannot load leaves no server
    server = proxy = None
    why = "" if py else f"no peers venv at {s.peers_python}: run `make install-peers`"
    if py and any(n in PEERS for n in s.systems):
        try:
            server = LlamaServer(sys.executable, build_model, work / "logs" / "llama-server.log", s.n_ctx,
                                 s.threads, alias=cfg.llm.model).start()
        except ServerError as exc:
            why = f"the build model's server did not start: {exc}"
        else:
            proxy = UsageProxy(server.base_url, timeout=s.timeout, max_tokens=s.max_tokens).start()
            log(f"llama.cpp server on {server.base_url} (n_ctx {s.n_ctx}, {s.threads} threads), "
                f"proxy {proxy.base_url}")

    def make_system(name: str):
        if name == "membox":
            return MemboxSystem(cfg, work / "membox", budget, k)
        if why:
            return why
        return PeerSystem(name, py, work, budget, s.peer_k, proxy.base_url, cfg.llm.model, embedder, s.threads,
                          proxy, s.timeout)

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


def _threads(n: int) -> None:
    """The embedders' torch threads in this process (membox_local's MiniLM), as every peer's worker gets."""
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(key, str(n))
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:
        pass


def _stop_on_term(*_) -> None:
    raise SystemExit(143)  # SIGTERM as an exception: the finally blocks stop the server and the workers


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.cmd == "report":
        from .report import load, markdown, merge

        print(markdown(merge([load(Path(path)) for path in a.results])))
        return 0
    signal.signal(signal.SIGTERM, _stop_on_term)
    return cmd_run(settings_from(a))
