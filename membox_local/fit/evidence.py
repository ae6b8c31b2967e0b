"""`membox fit evidence`: the evidence cross-encoder ([retrieve] evidence_model, box-hits' second stage) fitted on
LoCoMo dev's evidence lines, cross-validated by conversation.

    membox fit evidence [--builds runs/builds-locomo-ce] [--candidates 150] [--hard 10] [--random 3] [--epochs 2]
                        [--folds 3] [--budgets 100 250 500 1000 2000] [--priors 2 4 8 16] [--no-final] [--write]

For every LoCoMo dev question of categories 1-4 with evidence, box-hits' first stage (the config's box-hits with no
second stage: cosines, BM25, box priority) ranks the conversation's messages; its best --candidates are the question's
candidates, labelled by the question's evidence dia_ids. Training pairs are (question, "Speaker: line"): every
candidate that is evidence, the --hard best-ranked candidates that are not, and --random more of the rest (seed 0).
The model is continuity.PairModel in its evidence reading: the shipped MiniLM frozen, a rank-8 LoRA adapter and a
one-unit head fitted with binary cross-entropy (crossencoder.train).

Cross-validation: the conversations are cut into --folds folds in the file's order; each fold's model is fitted on
the other folds' questions and writes runs/evidence/evidence-fold<i>.safetensors; the fold's own questions are then
retrieved through the real retriever (`Retriever.retrieve` over the fold's memories) with and without that model as
the second stage, at every budget and each --priors value: evidence recall side by side, the models never in-sample
(the prior reported is chosen on these same pooled questions, at 250 and 500 tokens). Then (unless --no-final) one model
on every question: runs/evidence/evidence-locomo-<embedder>.safetensors, with --write configs/content/, where
[retrieve] evidence_model finds it. Builds are `membox eval locomo --boxes-only`'s (made when missing).
Report: runs/evidence/evidence.json (--save: benchmarks/results/evidence-fit.json).
"""
from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from ..config import CONFIG_DIR, load_config
from .crossencoder import train
from .report import RESULTS, command_line

RUNS = Path("runs") / "evidence"
CATEGORIES = (1, 2, 3, 4)


def add_arguments(p) -> None:
    """`membox fit evidence`'s options (fit/__init__.py makes the subcommand)."""
    from ..argtypes import count, number

    p.set_defaults(config="cpu-ce")
    p.add_argument("--builds", default="runs/builds-locomo-ce",
                   help="boxes-only builds of LoCoMo dev, per config and conversation (made when missing)")
    p.add_argument("--candidates", type=count(1), default=150, help="first-stage candidates per question")
    p.add_argument("--limit", type=count(0), default=0, help="at most N questions per conversation (0: all; smoke runs)")
    p.add_argument("--hard", type=count(0), default=10, help="best-ranked non-evidence candidates per question")
    p.add_argument("--random", type=count(0), default=3, help="more non-evidence candidates drawn per question")
    p.add_argument("--epochs", type=count(1), default=2, help="passes over the training pairs (default 2)")
    p.add_argument("--folds", type=count(2), default=3, help="folds of conversations (default 3)")
    p.add_argument("--budgets", nargs="+", type=count(1), default=[100, 250, 500, 1000, 2000],
                   help="context budgets of the recall measured out of fold (250 and 500 choose the prior)")
    p.add_argument("--priors", nargs="+", type=number(0.0), default=[2.0, 4.0, 8.0, 16.0],
                   help="[retrieve] evidence_prior values tried out of fold")
    p.add_argument("--no-final", action="store_true", help="cross-validation only, no model on every question")
    p.add_argument("--write", action="store_true",
                   help="write configs/content/evidence-locomo-<embedder>.safetensors")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def open_memories(data: Path, cfg, builds: str) -> dict:
    """conversation -> (its Memory, built boxes-only when missing, with no second stage; its LoCoMo sample)."""
    from ..evaluation import locomo as L
    from ..ingest import load_locomo

    samples = L.load_samples(data / "locomo-dev.json", [])
    shared = L.Shared(cfg)
    out = {}
    for s in samples:
        conv = s["sample_id"]
        msgs = load_locomo(data / "locomo-dev.json", [conv])
        out[conv] = (L.open_build(conv, msgs, cfg, builds, shared, build=False, boxes_only=True, progress=False), s)
    return out


def questions(sample: dict, known: set[str]) -> list[dict]:
    from ..evaluation.locomo import parse_evidence

    out = []
    for qi, q in enumerate(sample["qa"]):
        ev, _ = parse_evidence(q.get("evidence", []), known)
        if q.get("category") in CATEGORIES and ev:
            out.append({"qid": qi, "question": str(q["question"]), "evidence": ev})
    return out


def candidates(mem, conv: str, qs: list[dict], n: int) -> list[dict]:
    """Each question with its first stage's best `n` candidates (message id, line), best first."""
    from ..retrieval.base import make_retriever

    r = make_retriever("box-hits", mem)
    bm = r.box_map(conv)
    for q in qs:
        sims, prio = r.priorities(bm, mem.embedder.encode([q["question"]])[0], q["question"])
        q["candidates"] = [(bm.messages[i].message_id, bm.messages[i].render())
                           for i in np.lexsort((-sims, -prio))[:n]]
    return qs


def pairs_of(qs: list[dict], hard: int, rand: int, seed: int = 0) -> list[tuple[tuple[str, str], int]]:
    rng = random.Random(seed)
    out = []
    for q in qs:
        ev = set(q["evidence"])
        neg = [c for c in q["candidates"] if c[0] not in ev]
        out += [((q["question"], line), 1) for mid, line in q["candidates"] if mid in ev]
        rest = neg[hard:]
        out += [((q["question"], line), 0) for _, line in neg[:hard] + rng.sample(rest, min(rand, len(rest)))]
    return out


def recall_at(mem, conv: str, qs: list[dict], budgets: list[int], priors: list[float] = ()) -> dict[tuple, list[float]]:
    """Evidence recall of each question through the memory's own box-hits retriever at each budget (and with a
    second stage, each `[retrieve] evidence_prior` of `priors`): {(prior or None, budget): one value per question}.
    Questions outer, so the scorer's cache holds each question's pairs while its settings are tried."""
    from ..evaluation.locomo import FILL_K, evidence_recall
    from ..retrieval.base import make_retriever

    r = make_retriever("box-hits", mem)
    rc = mem.config.retrieve
    out: dict[tuple, list[float]] = {}
    for q in qs:
        for prior in priors or [None]:
            if prior is not None:
                rc.evidence_prior = prior
            for b in budgets:
                ctx = r.retrieve(q["question"], conv, FILL_K, b)
                out.setdefault((prior, b), []).append(evidence_recall(q["evidence"], ctx.message_ids))
    return out


def with_model(mem, path: Path | str, cfg):
    """The same memory folder read with `path` as its second stage (a new Memory over the same store)."""
    from ..memory import Memory

    retrieve = dataclasses.replace(cfg.retrieve, evidence_model=str(Path(path).resolve()))
    return Memory(mem.path, dataclasses.replace(cfg, retrieve=retrieve), embedder=mem.embedder.inner)


def main(args) -> int:
    from .data import data_dir

    data = data_dir(args.data_dir)
    cfg = load_config(args.config)
    cfg = dataclasses.replace(cfg, retrieve=dataclasses.replace(cfg.retrieve, evidence_model=""))
    t0 = time.time()
    mems = open_memories(data, cfg, args.builds)
    qs = {}
    for conv, (mem, sample) in mems.items():
        known = {m.message_id for m in mem.store.messages(conv)}
        qs[conv] = candidates(mem, conv, questions(sample, known)[:args.limit or None], args.candidates)
    log(f"evidence: {sum(map(len, qs.values()))} questions of {len(qs)} conversations, candidates in "
        f"{time.time() - t0:.0f}s")
    report = {"command": command_line(args), "date": time.strftime("%Y-%m-%d"), "candidates": args.candidates,
              "hard": args.hard, "random": args.random, "epochs": args.epochs, "budgets": args.budgets}
    try:
        report.update(cross_validate(mems, qs, cfg, args, report["command"]))
        if not args.no_final:
            report["weights"] = str(final_model(qs, cfg.embedder.model, args, report["command"]))
    finally:
        for mem, _ in mems.values():
            mem.close(models=False)
    report["seconds"] = round(time.time() - t0)
    text = json.dumps(report, indent=2) + "\n"
    (RUNS / "evidence.json").write_text(text)
    if args.save:
        (RESULTS / "evidence-fit.json").write_text(text)
    print(text)
    return 0


def cross_validate(mems: dict, qs: dict[str, list[dict]], cfg, args, command: str) -> dict:
    """Each fold's model fitted on the other folds; its conversations' recall measured without a second stage and
    with it at each --priors value; the prior chosen on the pooled out-of-fold recall at 250 and 500 tokens."""
    convs = list(qs)
    folds = [convs[i::args.folds] for i in range(args.folds)]
    first: dict[tuple, list[float]] = {}
    second: dict[tuple, list[float]] = {}
    seconds: list[float] = []
    RUNS.mkdir(parents=True, exist_ok=True)
    for f, test in enumerate(folds):
        pairs = pairs_of([q for c in convs if c not in test for q in qs[c]], args.hard, args.random)
        log(f"fold {f} (held out: {', '.join(test)}): {len(pairs)} pairs, {sum(y for _, y in pairs)} evidence")
        model = train(pairs, cfg.embedder.model, args.epochs, log=log, reading="evidence", threads=2)
        path = RUNS / f"evidence-fold{f}.safetensors"
        model.save(path, {"fitted_on": f"LoCoMo dev questions of {', '.join(c for c in convs if c not in test)}",
                          "command": command})
        for conv in test:
            for key, vals in recall_at(mems[conv][0], conv, qs[conv], args.budgets).items():
                first.setdefault(key, []).extend(vals)
            ranked = with_model(mems[conv][0], path, cfg)
            t1 = time.time()
            for key, vals in recall_at(ranked, conv, qs[conv], args.budgets, args.priors).items():
                second.setdefault(key, []).extend(vals)
            seconds.append((time.time() - t1) / max(1, len(qs[conv])))
            log(f"  {conv}: {len(qs[conv])} questions, {seconds[-1]:.2f}s each for every prior and budget")
            ranked.close(models=False)
    pct = lambda v: round(100 * float(np.mean(v)), 1)  # noqa: E731
    chosen = max(args.priors, key=lambda p: np.mean(second[(p, 250)] + second[(p, 500)]))
    out = {"folds": folds, "questions": {c: len(v) for c, v in qs.items()},
           "evidence_candidates": cfg.retrieve.evidence_candidates, "priors": args.priors, "chosen_prior": chosen,
           "first_stage": {b: pct(first[(None, b)]) for b in args.budgets},
           "second_stage": {str(p): {b: pct(second[(p, b)]) for b in args.budgets} for p in args.priors},
           "paired_se": {b: round(100 * float(np.std(np.subtract(second[(chosen, b)], first[(None, b)]), ddof=1)
                                              / np.sqrt(len(first[(None, b)]))), 1) for b in args.budgets},
           "s_per_question_all_settings": round(float(np.mean(seconds)), 2)}
    log(f"evidence recall, out of fold: first stage {out['first_stage']}, second (prior {chosen}) "
        f"{out['second_stage'][str(chosen)]}")
    return out


def final_model(qs: dict[str, list[dict]], base: str, args, command: str) -> Path:
    """One model on every question: runs/evidence/, or configs/content/ with --write."""
    pairs = pairs_of([q for v in qs.values() for q in v], args.hard, args.random)
    model = train(pairs, base, args.epochs, log=log, reading="evidence", threads=2)
    path = (CONFIG_DIR / "content" if args.write else RUNS) / f"evidence-locomo-{base}.safetensors"
    model.save(path, {"fitted_on": f"LoCoMo dev questions of {', '.join(qs)} (categories 1-4)", "command": command,
                      "train_pairs": len(pairs)})
    log(f"wrote {path}")
    return path
