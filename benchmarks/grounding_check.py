"""Where the unmentioned-term guard (`[answer] check_terms`, membox_local/grounding.py) would answer "not mentioned"
instead of the model: on LongMemEval's dev questions (5 abstention, 93 answerable) and LoCoMo's six dev
conversations (categories 1-4, all answerable), over the same contexts the evaluations answer from (1000 tokens).
No language model runs: the builds' boxes (the cross-encoder judge) and MiniLM retrieval only.

    python benchmarks/grounding_check.py            # -> benchmarks/results/grounding-check.json (~2 minutes)

A guard firing on an abstention question is an abstention said; on an answerable one, a false abstention (unless
the model would have been wrong anyway: the QA run with `--set answer.check_terms=true` says which). Saved per
question: its id (LoCoMo: conversation:index into its qa list) and the terms found nowhere in each mode's context;
no text of either dataset. Also counted: the questions the wording rules of the answering step pick
(prompts.asks_for_advice, prompts.asks_for_total).
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

from membox_local.config import load_config
from membox_local.evaluation import longmemeval as lme
from membox_local.evaluation.locomo import (DEFAULT_CATEGORIES, DEFAULT_DATA as LOCOMO, FILL_K, Shared, load_samples,
                                           open_build)
from membox_local.grounding import unmentioned
from membox_local.prompts import asks_for_advice, asks_for_total
from membox_local.ingest import load_locomo
from membox_local.retrieval import make_retriever

RESULTS = Path(__file__).resolve().parent / "results"

def check(rows: list[dict], mode: str) -> dict:
    """Counts of the guard firing, split by whether the question can be answered."""
    fired = [r for r in rows if r["unmentioned"][mode]]
    return {"questions": len(rows), "answerable": sum(not r["abstention"] for r in rows),
            "abstention": sum(r["abstention"] for r in rows),
            "fired_answerable": sum(not r["abstention"] for r in fired),
            "fired_abstention": sum(r["abstention"] for r in fired)}


def longmemeval_rows(cfg, builds: str, modes: list[str], budget: int) -> list[dict]:
    shared, rows = Shared(cfg), []
    for rec in lme.read_file(lme.DEFAULT_DATA):
        q = lme.to_question(rec)
        mem = open_build(q.id, q.messages, cfg, builds, shared, build=False, boxes_only=True, progress=False)
        asked = lme.asked(q, cfg)
        try:
            miss = {m: unmentioned(asked, make_retriever(m, mem).retrieve(q.question, q.id, FILL_K, budget).text)
                    for m in modes}
        finally:
            mem.close()
        rows.append({"id": q.id, "abstention": q.abstention, "unmentioned": miss})
    return rows


def locomo_rows(cfg, data: str, builds: str, modes: list[str], budget: int) -> list[dict]:
    shared, rows = Shared(cfg), []
    for sample in load_samples(data, []):
        conv = sample["sample_id"]
        mem = open_build(conv, load_locomo(data, [conv]), cfg, builds, shared, build=False, boxes_only=True,
                         progress=False)
        try:
            retrievers = {m: make_retriever(m, mem) for m in modes}
            for i, q in enumerate(sample["qa"]):
                if q.get("category") not in DEFAULT_CATEGORIES:
                    continue
                miss = {m: unmentioned(q["question"], r.retrieve(q["question"], conv, FILL_K, budget).text)
                        for m, r in retrievers.items()}
                rows.append({"id": f"{conv}:{i}", "abstention": False,
                             "unmentioned": miss})
        finally:
            mem.close()
    return rows


def wording_rules(rules: dict, locomo: str) -> dict:
    """Which questions each wording rule of the answering step picks (prompts.asks_for_advice: the suggestion
    instructions; prompts.asks_for_total: a list the code adds up): LongMemEval dev's by question type and by id
    (the ids a `--redo` of that change names), LoCoMo dev's (every category) as a count. The data is read once."""
    lme_dev = list(lme.read_file(lme.DEFAULT_DATA))
    asked = [q["question"] for sample in load_samples(locomo, []) for q in sample["qa"]]
    out = {}
    for name, rule in rules.items():
        picked = [rec for rec in lme_dev if rule(rec["question"])]
        by_type: dict[str, int] = {}
        for rec in picked:
            by_type[rec["question_type"]] = by_type.get(rec["question_type"], 0) + 1
        out[name] = {"longmemeval-dev": by_type, "longmemeval-dev-ids": [rec["question_id"] for rec in picked],
                     "locomo-dev": {"questions": len(asked), "picked": sum(map(rule, asked))}}
    return out


def locomo_cost(rows: list[dict], answers: Path, model: str = "qwen2.5-coder-1.5b") -> dict:
    """What the guard would have cost the saved LoCoMo QA run (answer_models.py: box-hits at 1000 tokens, the
    model's own answers): of the questions it answered, how many the guard takes over and their F1 sum (x100 / n:
    the points lost). Those answers were read from cpu.toml's boxes, these checks from the --config's."""
    import gzip

    fired = {r["id"] for r in rows if r["unmentioned"].get("box-hits")}
    with gzip.open(answers, "rt", encoding="utf-8") as fh:
        recs = [r for r in map(json.loads, fh) if r["answerer"] == model]
    hit = [r for r in recs if f"{r['conversation']}:{r['qid']}" in fired]
    lost = sum(r["scores"]["locomo_f1"] for r in hit)
    return {"answers": str(answers.name), "model": model, "questions": len(recs), "fired": len(hit),
            "their_locomo_f1_sum": round(lost, 3), "points_lost": round(100 * lost / max(len(recs), 1), 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="cpu-ce", help="the boxes' config (default cpu-ce, as `eval longmemeval`)")
    p.add_argument("--modes", nargs="*", default=["box-hits", "turn-rag"])
    p.add_argument("--budget", type=int, default=1000, help="context tokens (default 1000, as the QA runs)")
    p.add_argument("--locomo", default=str(LOCOMO), help="LoCoMo dev file")
    p.add_argument("--locomo-builds", default="runs/builds-boxes", help="LoCoMo box builds (made when missing)")
    p.add_argument("--lme-builds", default="runs/builds-lme", help="LongMemEval builds (made when missing)")
    p.add_argument("--out", default="benchmarks/results/grounding-check.json")
    a = p.parse_args(argv)
    cfg = load_config(a.config)
    data = {"longmemeval-dev": longmemeval_rows(cfg, a.lme_builds, a.modes, a.budget),
            "locomo-dev": locomo_rows(cfg, a.locomo, a.locomo_builds, a.modes, a.budget)}
    result = {"date": date.today().isoformat(), "config": cfg.name, "budget": a.budget, "modes": a.modes,
              "summary": {name: {m: check(rows, m) for m in a.modes} for name, rows in data.items()},
              "locomo_qa_cost": locomo_cost(data["locomo-dev"], RESULTS / "answer-models.jsonl.gz"),
              **wording_rules({"advice_rule": asks_for_advice, "total_rule": asks_for_total}, a.locomo),
              "fired": {name: [r for r in rows if any(r["unmentioned"].values())] for name, rows in data.items()}}
    Path(a.out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    json.dump({**result["summary"], **{k: result[k] for k in ("locomo_qa_cost", "advice_rule", "total_rule")}},
              sys.stdout, indent=1)
    print(f"\nsaved: {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
