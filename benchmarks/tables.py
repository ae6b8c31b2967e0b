"""BENCHMARKS.md's tables and README's headline figures, written from the saved results in benchmarks/results/.

    python benchmarks/tables.py            # rewrite every marked block of BENCHMARKS.md and README.md
    python benchmarks/tables.py --check    # change nothing; exit 1 naming each block that is not what this writes

A block is the lines between `<!-- table:NAME -->` and `<!-- /table:NAME -->`; NAME is a function below
(`@table`), which reads result files only: no model, no dataset. The prose around a block is written by hand and
keeps the reasoning; the figures are here. tests/test_docs.py checks that both files are what this writes, so a
re-saved result names the block to regenerate instead of a sentence to find.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
FILES = (REPO / "BENCHMARKS.md", REPO / "README.md", REPO / "docs" / "continuity-judge.md")
BUDGETS = (250, 500, 1000, 2000)
TABLES: dict = {}
MARK = re.compile(r"^<!-- table:([a-z0-9-]+) -->\n(.*?)^<!-- /table:\1 -->\n", re.M | re.S)


def table(fn):
    TABLES[fn.__name__.replace("_", "-")] = fn
    return fn


# ---- readers ----------------------------------------------------------------------------------------------------

load = lru_cache(maxsize=None)(lambda name: json.loads((RESULTS / name).read_text()))  # a saved result, read once


@lru_cache(maxsize=None)
def records(name: str) -> tuple:
    with gzip.open(RESULTS / name, "rt") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def pct(mean: float) -> str:
    """A pooled share as the evaluators' Markdown shows it: rounded to 4 places, then x100 to one decimal."""
    return f"{100 * round(mean, 4):.1f}"


def mean_pct(xs) -> str:
    return pct(statistics.fmean(xs))


def recall(name: str, mode: str, budget: int, conversations: tuple = ()) -> str:
    return mean_pct(r["recall"][f"budget={budget}"] for r in records(name) if r["mode"] == mode
                    and r["recall"].get(f"budget={budget}") is not None
                    and (not conversations or r["conversation"] in conversations))


def md_cell(name: str, config: str, mode: str, column: str) -> str:
    """A cell of the first table under '# LoCoMo: config CONFIG (' in a saved Markdown report, brackets dropped."""
    lines = (RESULTS / name).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"# LoCoMo: config {config} ("))
    header = next(line for line in lines[start:] if line.startswith("| mode |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    for line in lines[lines.index(header, start):]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == mode:
            return cells[cols.index(column)].split(" (")[0]
    raise KeyError(f"{name}: no row {mode!r} under config {config}")


def f3(x: float) -> str:
    """Three decimals, halves rounded up (a saved 0.4105 is 0.411, as the evaluators print it)."""
    return f"{round(x + 1e-9, 3):.3f}"


def seg(name: str, config: str, after: bool = False) -> str:
    """Pk / WD / F1 of a saved segmentation report, macro-averaged over its per-dialogue rows (with `after`: the
    held-out DialSeg711 dialogues 554-711), or its 4-decimal summary where it saved no rows."""
    r = load(name)["configs"][config]
    rows = r.get("dialogue_rows", [])[553 if after else 0:]
    if rows:
        r = {m: sum(d[m] for d in rows) / len(rows) for m in ("pk", "wd", "f1")}
    elif after:
        r = r["after_553"]
    return " / ".join(f3(r[m]) for m in ("pk", "wd", "f1"))


def row(*cells, bold: tuple = ()) -> str:
    """A Markdown row; the cells whose index is in `bold` in bold."""
    return "| " + " | ".join(f"**{c}**" if i in bold and c != "" else str(c) for i, c in enumerate(cells)) + " |"


def head(*names: str) -> list[str]:
    return ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]


def lme(name: str, mode: str, part: str, key: str) -> str:
    return f"{load(name)['modes'][mode][part][key]:.1f}"


# ---- BENCHMARKS.md -----------------------------------------------------------------------------------------------

TIAGE, DIALSEG = "segmentation-report-tiage_dev.json", "segmentation-report-dialseg711_test.json"
CE_SWEEP, CE_REPORT = "segmentation-ce-sweep-split.json", "segmentation-report-dialseg711_test-cpu-ce-split.json"


@table
def segmentation() -> list[str]:
    (ce,) = [r for r in load(CE_SWEEP)["rows"] if r.get("chosen")]
    rep = load(CE_REPORT)["configs"]["cpu-ce"]
    out = head("judge (config)", "TIAGE dev Pk / WD / F1", "DialSeg711, all 711", "DialSeg711 554-711 (held out)",
               "boundaries per DialSeg711 dialogue")
    out.append(row("the default: continuity cross-encoder, no LLM call (configs/cpu-ce.toml; adapter: TIAGE train + "
                   "300 LongMemEval dev sessions)", *(" / ".join(f"{ce[d][m]:.3f}" for m in ("pk", "wd", "f1"))
                                                     for d in ("dev", "dialseg711")),
                   seg(CE_REPORT, "cpu-ce", after=True), f"{rep['hyp_boundaries_per_dialogue']:.2f}",
                   bold=(0, 1, 2, 3)))
    for config, label in (("cpu", "hybrid with content vector, LLM PMI and switch rule (configs/cpu.toml, the default "
                                  "until 2026-12-05)"), ("cpu-switch", "switch rule only (configs/cpu-switch.toml)"),
                          ("cpu-minilm", "MiniLM only, no LLM (configs/cpu-minilm.toml)"),
                          ("cpu:embedding", "embedding, t = 0.275 (`cpu:embedding`)")):
        out.append(row(label, seg(TIAGE, config), seg(DIALSEG, config), seg(DIALSEG, config, after=True),
                       f"{load(DIALSEG)['configs'][config]['hyp_boundaries_per_dialogue']:.2f}"))
    floor = [" / ".join(f3(load(n)['no_boundaries'][m]).replace("0.000", "0") for m in ("pk", "wd", "f1"))
             for n in (TIAGE, DIALSEG)]
    out.append(row("no boundaries (measured floor)", *floor, "", "0"))
    for name, tiage, dialseg in (("CSM", "0.400 / 0.420 / 0.427", "0.278 / 0.302 / 0.610"),
                                 ("RoBERTa segmenter trained on TIAGE train", "0.265 / 0.287 / 0.572",
                                  "0.197 / 0.210 / 0.650"),
                                 ("GPT-4 zero-shot", "0.363 / 0.401 / 0.596", "0.093 / 0.103 / 0.888"),
                                 ("TextTiling", "0.469 / 0.488 / 0.204", "0.470 / 0.493 / 0.245")):
        out.append(row(f"*{name} (published; TIAGE test)*", f"*{tiage}*", f"*{dialseg}*", "", ""))
    return out


@table
def box_sizes() -> list[str]:
    runs = load("segmentation-locomo-full.json")["runs"]
    now = load("segmentation-content.json")["configs_now"]
    sizes = [b["utterances_per_box"] for b in load("locomo-recall-ce-split.json")["builds"].values()]
    (ce,) = [r for r in load(CE_SWEEP)["rows"] if r.get("chosen")]

    def whole(run):
        s = runs[run]["messages_per_box"].values()
        return f"{runs[run]['mean']:.2f} ({min(s):.2f}-{max(s):.2f})"

    out = head("judge (config)", "whole conversations (range)", "first 60 messages of each (the fit's constraint: 4-8)")
    out.append(row(f"the default: cross-encoder judge (configs/cpu-ce.toml, cap {ce['cap']} cut at the weakest point)",
                   f"{sum(sizes) / len(sizes):.2f} ({min(sizes):.2f}-{max(sizes):.2f})", f"{ce['locomo60']:.2f}",
                   bold=(0, 1)))
    for run, config, label in (("--config cpu", "cpu", "configs/cpu.toml (cap 16)"),
                               ("--config configs/cpu-switch.toml", "cpu-switch", "switch rule only (configs/cpu-switch.toml)"),
                               ("--config configs/cpu-minilm.toml", "cpu-minilm", "MiniLM only (configs/cpu-minilm.toml)"),
                               ("--config cpu --judge embedding", "cpu:embedding", "embedding, t = 0.275, cap 16")):
        out.append(row(label, whole(run), f"{now[config]['locomo']['mean']:.2f}"))
    walls = load("locomo-recall-cpu.json")["builds"]
    per_box = [b["utterances_per_box"] for b in walls.values()]
    out.append(row("judge of 2026-11-29, in the saved LLM builds that compact below was measured on",
                   f"{sum(per_box) / len(per_box):.2f} ({min(per_box):.2f}-{max(per_box):.2f})", ""))
    out.append(row("*Membox paper, GPT-4o-mini (published)*", "*4.9-6.6*", ""))
    return out


LEXICAL, CE_RECALL, RECALL_MD = "lexical-fit-locomo.json", "locomo-recall-ce-split.json", "boxaware-recall-full-cpu.md"
EVIDENCE = "evidence-fit.json"


@table
def evidence_recall() -> list[str]:
    lex = load(LEXICAL)["recall"]
    ce = load(CE_RECALL)["modes"]["box-hits"]["recall"]
    ev, out = load(EVIDENCE), head("mode", "boxes", "250 tokens", "500", "1000", "2000", "measured")
    two = ev["second_stage"][str(ev["chosen_prior"])]
    out.append(row(f"box-hits + BM25 + second stage (default; out of fold, prior {ev['chosen_prior']:g})",
                   "the default judge, cpu-ce", *(f"{two[str(b)]:.1f}" for b in BUDGETS), ev["date"], bold=tuple(range(6))))
    out.append(row("box-hits + BM25, first stage alone (the default before)", "the default judge, cpu-ce",
                   *(f"{ev['first_stage'][str(b)]:.1f}" for b in BUDGETS), ev["date"]))
    out.append(row("box-hits, BM25 alone", "cpu-ce", *(f"{lex['bm25'][str(b)]:.1f}" for b in BUDGETS), load(LEXICAL)["date"]))
    out.append(row("box-hits, cosine alone (the default before)", "cpu-ce", *(pct(ce[f"budget={b}"]) for b in BUDGETS),
                   "2026-12-05"))
    for mode, label, boxes in (("box-hits", "box-hits, cosine alone", "cpu.toml's judge"), ("chunk-rag", "chunk-rag", "(none)"),
                               ("turn-rag", "turn-rag", "(none)")):
        out.append(row(label, boxes, *(md_cell(RECALL_MD, "cpu", mode, f"budget={b}") for b in BUDGETS), "2026-12-02"))
    for mode, label, boxes in (("compact", "compact (the paper's mode)", "LLM builds, judge of 2026-11-29"),
                               ("full-context", "full-context", "(none)")):
        out.append(row(label, boxes, *(recall("locomo-recall-cpu.jsonl.gz", mode, b) for b in BUDGETS), "2026-11-30"))
    return out


ANSWERS, DATES_OFF = "answer-models.jsonl.gz", "answer-dates-off.jsonl.gz"
MODELS = (("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B (the answering model before)"),
          ("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B (the CPU default)"))
SCORERS = ("locomo_f1", "mem0_f1", "mem0_bleu1", "membox_f1")


def answers(name: str, model: str, category: int = 0) -> list[dict]:
    return [r for r in records(name) if r["answerer"] == model and r.get("scores")
            and (not category or r["category"] == category)]


@table
def qa_models() -> list[str]:
    out = head("answering model", "questions", "locomo F1", "mem0 F1", "mem0 BLEU-1", "membox F1", "s per answer")
    secs = {m: sum(r["answer_s"] for r in answers(ANSWERS, m)) / len(answers(ANSWERS, m)) for m, _ in MODELS}
    for model, label in MODELS:
        rs = answers(ANSWERS, model)
        s = f"{secs[model]:.1f}" + (f" ({secs[model] / secs[MODELS[0][0]]:.1f}x)" if model != MODELS[0][0] else "")
        out.append(row(label, len(rs), *(mean_pct(r["scores"][k] for r in rs) for k in SCORERS), s,
                       bold=(0, 2, 3, 4, 5) if model == MODELS[1][0] else ()))
    out.append(row("*Qwen2.5-1.5B answering, published (A-Mem, SimpleMem papers): full context / A-Mem / Mem0 / "
                   "SimpleMem*", "", "*8.6 / 20.7 / 23.8 / 25.2*", "", "", "", ""))
    return out


@table
def qa_categories() -> list[str]:
    def cell(name, model, category):
        rs = answers(name, model, category)
        return " / ".join(mean_pct(r["scores"][k] for r in rs) for k in ("locomo_f1", "mem0_f1", "membox_f1"))

    counts = [len(answers(ANSWERS, MODELS[1][0], c)) for c in (1, 2, 3, 4)]
    off = len(answers(DATES_OFF, MODELS[1][0], 2))
    out = head("answering model", *(f"{c} {n} ({k})" for c, n, k in zip((1, 2, 3, 4), ("multi-hop", "temporal",
               "open-domain", "single-hop"), counts)), f"2 temporal ({off}), dates as said")
    for model, label in MODELS:
        out.append(row(label.split(" (")[0], *(cell(ANSWERS, model, c) for c in (1, 2, 3, 4)), cell(DATES_OFF, model, 2),
                       bold=(0, 1, 2, 3, 4) if model == MODELS[1][0] else ()))
    return out


BUDGET_ARMS = (("box-hits@1000 (saved 2026-12-06)", "first stage, 1000 tokens (the default before)"),
               ("box-hits@500 retrieve.evidence_model=out-of-fold", "**second stage (out of fold), 500 tokens (cpu-ce's budget)**"),
               ("box-hits@250 retrieve.evidence_model=out-of-fold", "second stage (out of fold), 250 tokens"),
               ("turn-rag@1000", "turn-rag, its ten best turns"))


@table
def qa_budget() -> list[str]:
    got = load("locomo-qa-budget-233.json")
    arms, diffs, base = got["arms"], got["differences"], BUDGET_ARMS[0][0]
    out = head("the 1.5B answering from", "questions", "locomo F1", "mem0 F1", "BLEU-1",
               "evidence in context", "tokens", "F1 against the first, paired (standard error)")
    for arm, label in BUDGET_ARMS:
        if arm not in arms:
            continue
        a = arms[arm]
        d = diffs.get(f"{arm} - {base}")
        out.append(row(label, a["questions"], a["locomo_f1"], a["mem0_f1"], a["mem0_bleu1"], a["qa_recall"],
                       a["context_tokens"], f"{d['mean']:+.1f} ({d['se']:.1f})" if d else ""))
    return out


@table
def qa_latency() -> list[str]:
    phases = {(p["budget"], p["mode"]): p for p in load("answer-latency.json")["phases"]}
    budgets = load("answer-latency.json")["budgets"]
    out = head("p50 s per answer (alone)", *(f"{b} tokens" for b in budgets))
    for mode, label in (("warm", "warm (`membox serve`, POST /answer)"), ("cold", "cold (`membox ask`, a new process)")):
        out.append(row(label, *(f"{phases[(b, mode)]['p50_s']:.1f}" for b in budgets)))
    return out


RECORD_ROWS = (("qwen2.5-coder-0.5b+lines+keep", "0.5B: made from the lines by code, the keep model's sentences (the default)"),
               ("qwen2.5-coder-0.5b+lines", "0.5B: made from the lines by code, every sentence (before)"),
               ("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B: written, citing a line"),
               ("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B: written, citing a line"))


@table
def records_check() -> list[str]:
    rows = load("records-check.json")["rows"]
    out = head("build model: events", "events per box (LoCoMo / demo)", "words of the dialogue's",
               "wrong person, hand check (LoCoMo / demo)", "pleasantries / repeats (LoCoMo; demo)",
               "grounded in its cited line alone", "names no participant", "s per box")
    for key, label in RECORD_ROWS:
        lo, de = rows[f"{key} / locomo"], rows[f"{key} / demo"]
        wrong = (f"{lo['wrong_person']} of {lo['events']} ({100 * lo['wrong_person_share']:.1f}%) / "
                 f"{de['wrong_person']} of {de['events']}")
        told = (f"{100 * lo['chat_share']:.0f}% / {100 * lo['repeated_share']:.0f}%; {100 * de['chat_share']:.0f}% / "
                f"{100 * de['repeated_share']:.0f}%" if lo.get("chat_share") is not None else "not read")
        default = key.endswith("+keep")
        out.append(row(f"**{label}**" if default else label,
                       f"{lo['events_per_box']:.2f} / {de['events_per_box']:.1f}",
                       f"{lo['record_share']:.2f} / {de['record_share']:.2f}" if "record_share" in lo else "",
                       f"**{wrong}**" if default else wrong, told,
                       f"{100 * lo['grounded_in_cited_line']:.0f}% / {100 * de['grounded_in_cited_line']:.0f}%",
                       f"{100 * lo['names_no_participant'] / lo['events']:.0f}% / "
                       f"{100 * de['names_no_participant'] / de['events']:.0f}%", f"{lo['s_per_box']:.1f}"))
    return out


def speed_cells(r: dict, side: str) -> list[str]:
    """Seconds, s per message, prompt tokens per message by stage, all sent (read), calls per message."""
    pm = r["per_message"][side]

    def stage(s):
        st = pm.get(s, {})
        if not st.get("prompt_tokens"):
            return "0"
        gen = f" + {st['completion_tokens']:.1f}" if st.get("completion_tokens") else ""
        return f"{st['prompt_tokens']:.1f}{gen}"

    s = r[f"{side}_s"]
    return [f"{s:,.0f}", f"{s / r['messages']:.2f}", " / ".join(stage(k) for k in ("judge", "extract", "link", "trace-init")),
            f"{pm['all']['prompt_tokens']:.1f} ({pm['all']['read_tokens']:.1f})", f"{pm['all']['calls']:.2f}"]


@table
def build_speed() -> list[str]:
    out = head("conversation: config", "s", "s per message",
               "LLM prompt tokens per message: judge / extract / link / trace-init", "all: sent (read)", "calls per message")
    ratios = []
    for conv in ("conv26", "conv30"):
        r = load(f"build-speed-split-{conv}.json")["rows"][0]
        name = r["conversation"]
        out.append(row(f"{name} ({r['messages']} messages): cpu (LLM judge)", *speed_cells(r, "before")))
        out.append(row(f"{name}: **cpu-ce**", *(f"**{c}**" if i in (0, 1, 3) else c
                                                 for i, c in enumerate(speed_cells(r, "after")))))
        ratios.append(r)
    lines = load("build-speed-lines-conv30.json")["rows"][0]
    out.append(row("conv-30: cpu-ce, records citing lines, written by the 0.5B (2026-12-06)", *speed_cells(lines, "before")))
    out.append(row("conv-30: **cpu-ce, events made from the lines (the default)**, same run",
                   *(f"**{c}**" if i in (0, 1) else c for i, c in enumerate(speed_cells(lines, "after")))))
    sent = [r["per_message"]["before"]["all"]["prompt_tokens"] / r["per_message"]["after"]["all"]["prompt_tokens"]
            for r in ratios]
    out.append(row("ratio, conv-26 / conv-30", " / ".join(f"{r['ratio']:.2f}x" for r in ratios), "", "",
                   " / ".join(f"{s:.1f}x" for s in sent) + " fewer sent", "", bold=(1,)))
    out.append(row("*Membox paper, GPT-4o-mini: construction tokens per message (Table 5, published)*", "", "", "", "*236*",
                   ""))
    return out


LME_RECALL, LME_QA98 = "longmemeval-retrieval-dev.json", "longmemeval-qa-dev98.json"
LME_GUARD, LME_ORACLE = "longmemeval-qa-dev98-guard.json", "longmemeval-qa-oracle-dev98.json"
LME_S4 = (("longmemeval-evidence-dev-s4.json", "box-hits + second stage (the default since 2026-12-07), every 4th question"),
          ("longmemeval-first-dev-s4.json", "box-hits, first stage alone, the same questions (2026-12-07)"))


@table
def longmemeval_retrieval() -> list[str]:
    keys = ("session_any@5", "session_ndcg@10", "turn_any@5", "turn_all@10", "recall@500", "recall@1000", "recall@2000")
    out = head("mode", "session any@5", "session NDCG@10", "turn any@5", "turn all@10", "turns at 500 tokens", "1000",
               "2000")
    for mode, label in (("box-hits", "**box-hits**"), ("box-hits:no-length-cost",
                        "box-hits without the length penalty (ablation)"),
                        ("turn-rag:length-cost", "turn-rag with box-hits' length penalty (ablation)"),
                        ("turn-rag", "turn-rag"), ("chunk-rag", "chunk-rag"),
                        ("session-rag", "session-rag (whole sessions)"), ("full-context", "full-context (the newest turns)")):
        out.append(row(label, *(lme(LME_RECALL, mode, "retrieval", k) for k in keys)))
    out += [row(label, *(lme(name, "box-hits", "retrieval", k) for k in keys)) for name, label in LME_S4]
    out.append(row("*published, all-MiniLM-L6-v2: agentmemory BM25 + vector / MemPalace raw vectors (session any@5)*",
                   "*95.2 / 96.6*", "", "", "", "", "", ""))
    return out


def lme_qa_row(name: str, mode: str) -> list:
    qa = load(name)["modes"][mode]["qa"]
    recs = [r for r in records(name.replace(".json", ".jsonl.gz")) if r["mode"] == mode]
    said = int(sum(r["abstained"] for r in recs if r["abstention"]))
    false = int(sum(r["abstained"] for r in recs if not r["abstention"]))
    return [lme(name, mode, "qa", "judge"), lme(name, mode, "qa", "right"),
            f"{qa['by_type']['temporal-reasoning']['judge']:.1f}", f"{qa['by_type']['multi-session']['judge']:.1f}",
            said, false, f"{qa['judge_agreement']:.1f}"]


@table
def longmemeval_qa() -> list[str]:
    out = head("mode", "judged right", "deterministic check", "temporal", "multi-session", "abstention said (of 5)",
               "false abstention (of 93)", "judge agreement")
    out.append(row("box-hits", *lme_qa_row(LME_QA98, "box-hits"), bold=(0, 1, 2)))
    out.append(row("turn-rag", *lme_qa_row(LME_QA98, "turn-rag")))
    out.append(row("full-context", *lme_qa_row(LME_QA98, "full-context")))
    out.append(row("box-hits with the unmentioned-term guard (`--set answer.check_terms=true`)",
                   *lme_qa_row(LME_GUARD, "box-hits")))
    out.append(row(f"box-hits on the evidence sessions alone (the oracle setting: "
                   f"{lme(LME_ORACLE, 'box-hits', 'retrieval', 'recall@1000')}% of the evidence turns shown)",
                   *lme_qa_row(LME_ORACLE, "box-hits")))
    out.append(row("*published, GPT-4o answering and judging: full context (LongMemEval paper) / Zep*", "*60.6 / 71.2*",
                   "", "", "", "", "", ""))
    return out


EW_RECALL, TWO = "eventweave-recall.jsonl.gz", ("conv-26", "conv-30")


@table
def eventweave_recall() -> list[str]:
    out = head("mode", "questions", "250 tokens", "500", "1000", "2000")
    n = len([r for r in records(EW_RECALL) if r["mode"] == "box-hits" and r["recall"].get("budget=1000") is not None])
    for mode, label in (("event-graph", "event-graph"), ("event-graph-boxes", "event-graph-boxes (events pull in their boxes)"),
                        ("box-hits", "box-hits (the default)"), ("chunk-rag", "chunk-rag"), ("turn-rag", "turn-rag")):
        out.append(row(label, n, *(recall(EW_RECALL, mode, b) for b in BUDGETS),
                       bold=(0, 2, 3, 4, 5) if mode == "box-hits" else ()))
    out.append(row("compact", n, *(recall("locomo-recall-cpu.jsonl.gz", "compact", b, TWO) for b in BUDGETS)))
    return out


@table
def eventweave_qa() -> list[str]:
    box = [r for r in answers(ANSWERS, MODELS[1][0], 2) if r["conversation"] in TWO]
    ew = [r for r in records("eventweave-qa.jsonl.gz") if r["mode"] == "event-graph"]
    out = head("mode", "questions", "locomo F1", "mem0 F1", "mem0 BLEU-1", "membox F1")
    out.append(row("box-hits (the default)", len(box), *(mean_pct(r["scores"][k] for r in box) for k in SCORERS)))
    out.append(row("event-graph", len(ew), *(mean_pct(r["scores"][k] for r in ew) for k in SCORERS), bold=(0, 2, 3, 4, 5)))
    return out


PEERS = (("membox", "membox_local (the default)"), ("mem0", "mem0ai 2.2.1"), ("amem", "A-Mem (a-mem 0.2.6)"))


def peers_rows() -> dict:  # the saved peers runs pooled as `python -m benchmarks.peers report` pools them
    from membox_local.evaluation.peers import merge, summarise

    return summarise(merge([load(n) for n in ("peers-conv26-s2.json", "peers-conv30-s2.json")]))


@table
def peers() -> list[str]:
    rows = peers_rows()
    out = head("system", "build s per message", "LLM calls / prompt / generated tokens per message", "LoCoMo F1",
               "mem0 F1", "BLEU-1", "F1 multi-hop / temporal / open / single-hop", "s per answer")
    for system, label in PEERS:
        r = rows[system]
        build = f"{r['build_s_per_message']:.2f}"
        if system == "mem0":
            build += f" ({r['build_s_per_message'] / rows['membox']['build_s_per_message']:.0f}x)"
        out.append(row(label, build, f"{r['llm_calls_per_message']:.2f} / {r['prompt_tokens_per_message']:,.0f} / "
                       f"{r['completion_tokens_per_message']:.1f}",
                       *(f"{100 * r[m]:.1f}" for m in ("locomo_f1", "mem0_f1", "mem0_bleu1")),
                       " / ".join(f"{100 * r['by_category'][c]['locomo_f1']:.1f}" for c in (1, 2, 3, 4)),
                       f"{r['answer_s']:.2f}", bold=(0, 1, 3, 4, 5) if system == "membox" else ()))
    return out


def soak_cells(name: str, kind: str) -> list[str]:
    r = load(name)["results"][kind]
    s = r["routes"]["search"]
    return [f"{r['server_errors']} / {r['tracebacks']}", f"{r['accepted']:,} ({r['messages_filed']:,} filed)",
            f"{s['p50_s']:.2f} / {s['p95_s']:.2f}", f"{r['growth_beyond_data_mb']:+.1f}",
            f"{r['rss']['trend_mb']:+.1f}", f"{r['rss']['max_mb'] - r['rss']['warm_mb']:.0f}"]


@table
def soak() -> list[str]:
    out = head("run (8 clients, LoCoMo dev's lines, alone)", "5xx / tracebacks", "adds, each stored once",
               "search p50 / p95 s", "MB after the first minute beyond the indexes", "last minute's median against the "
               "first's, MB", "largest sample above the first, MB")
    for name, kind, label in (("soak-cpu-fast.json", "serve", "REST, cpu-fast, 10 min"),
                              ("soak-cpu-fast-30min.json", "serve", "REST, cpu-fast, 30 min"),
                              ("soak-mcp-cpu-fast.json", "mcp", "MCP, cpu-fast, 3 min"),
                              ("soak-cpu-ce.json", "serve", "REST, the CPU default (cpu-ce: 0.5B files, 1.5B answers), 10 min")):
        out.append(row(label, *soak_cells(name, kind)))
    return out


@table
def reliability() -> list[str]:
    c, f = load("crash-harness.json"), load("fuzz.json")["totals"]
    out = head("question", "harness", "result")
    out.append(row("crash: SIGKILL at random and phase-aimed points, then resume; "
                   f"{c['settings']['messages']} messages, {c['settings']['conversations']} conversations, test doubles",
                   f"`python benchmarks/crash_harness.py --kills {c['kills']} --seed {c['settings']['seed']}`",
                   f"**{c['kills']} kills: {c['lost']} lost, {c['doubled']} doubled, {c['inconsistent']} inconsistent** "
                   f"({c['checks']} checks); {c['final_equal']}/{c['runs']} finished builds equal to an uninterrupted one"))
    out.append(row("bad input: readers, damaged files, `membox build`/`ask`, `Memory.add`, questions, configs (hypothesis)",
                   "`python benchmarks/fuzz.py`", f"**{f['cases']:,} cases: {f['tracebacks']} tracebacks, "
                   f"{f['store_changed']} refused inputs that changed a store**"))
    out.append(row("forgetting: a marker string in every file of the folder (db, WAL, indexes, caches)",
                   "`pytest tests/test_forget.py`", "found before, **0 times after**"))
    out.append(row("network on the default path (build, ask, show, forget), sockets blocked", "`pytest tests/test_offline.py`",
                   "**0 attempts**"))
    out.append(row("model failures (raises, unparsable, timeout, missing or broken model)",
                   "`pytest tests/test_model_checks.py`", "**0 silent**: each box failed with its reason, or one line "
                   "before filing"))
    return out


@table
def scale() -> list[str]:
    out = head("messages in the folder", "write ms per message", "folder MB", "open s", "search ms p50 / p95 (cold)",
               "first-stage context ms p50 / p95 (cold)", "context after 96 more filed, ms",
               "first context after reopening, ms", "resident MB")
    for name, where in (("scale.json", " in one conversation"), ("scale-20-conversations.json", " in 20, one asked")):
        out += [row(f"{r['messages']:,}{where}", f"{1000 * r['write_s_per_message']:.2f}", f"{r['folder_mb']:,.0f}",
                    f"{r['open_s']:.2f}", f"{r['search_warm_p50_ms']:.1f} / {r['search_warm_p95_ms']:.1f} "
                    f"({r['search_cold_ms']:,.0f})", f"{r['context_warm_p50_ms']:.1f} / {r['context_warm_p95_ms']:.1f} "
                    f"({r['context_cold_ms']:,.0f})", f"{r['context_after_write_ms']}",
                    f"{r['context_reopened_ms']:,.0f}" if "context_reopened_ms" in r else "", f"{r['resident_mb']:,}")
                for r in load(name)["rows"]]
    return out


# ---- README.md ---------------------------------------------------------------------------------------------------

@table
def fresh_clone() -> list[str]:
    """benchmarks/fresh_clone.sh's steps: seconds, exit status, the load before, pytest's summaries."""
    got = load("fresh-clone.json")
    m = got["machine"]
    out = head(f"step (fresh clone of {got['commit']}, {got['date']}, {m['cores']} cores, {m['cpu']}, no pip cache)",
               "seconds", "exit status", "load before", "tests")
    for st in got["steps"]:
        out.append(row(f"`{st['command']}` ({st['step']})", st["seconds"], st["rc"], st["load_before"],
                       "; ".join(t.split(" in ")[0] for t in st["tests"])))
    return out


def headline_rows() -> list[tuple[str, str, str]]:
    """README's headline rows: (BENCHMARKS.md anchor, question with its linked words ending in "]", figure)."""
    (ce,) = [r for r in load(CE_SWEEP)["rows"] if r.get("chosen")]
    lex, ce_rec = load(LEXICAL)["recall"], load(CE_RECALL)["modes"]["box-hits"]["recall"]
    at1000 = {m: md_cell(RECALL_MD, "cpu", m, "budget=1000") for m in ("box-hits", "chunk-rag", "turn-rag")}
    ev = load(EVIDENCE)
    ev2 = {b: ev["second_stage"][str(ev["chosen_prior"])][str(b)] for b in (500, 1000)}
    qa = {m: mean_pct(r["scores"]["locomo_f1"] for r in answers(ANSWERS, m)) for m, _ in MODELS}
    arms, t233 = load("locomo-qa-budgets.json")["arms"], load("locomo-qa-233.json")["arms"]["box-hits@1000"]
    b500 = load("locomo-qa-budget-233.json")["arms"][BUDGET_ARMS[1][0]]
    p50 = {(p["budget"], p["mode"]): p["p50_s"] for p in load("answer-latency.json")["phases"]}
    p = peers_rows()
    wrong = {k: 100 * load("records-check.json")["rows"][f"{k} / locomo"]["wrong_person_share"] for k, _ in RECORD_ROWS}
    lines, split = (load(f"build-speed-{n}-conv30.json")["rows"][0] for n in ("lines", "split"))
    box = [r for r in answers(ANSWERS, MODELS[1][0], 2) if r["conversation"] in TWO]
    ew = [r for r in records("eventweave-qa.jsonl.gz") if r["mode"] == "event-graph"]
    judged = {m: lme(LME_QA98, m, "qa", "judge") for m in ("box-hits", "turn-rag", "full-context")}
    return [
        ("topic-segmentation-tiage-dev-dialseg711", "Topic segmentation], TIAGE dev Pk / WD / F1",
         " / ".join(f3(ce["dev"][m]) for m in ("pk", "wd", "f1")) + f" (cpu.toml, the LLM-read judge before: "
         f"{seg(TIAGE, 'cpu')}; *published RoBERTa segmenter trained on TIAGE: 0.265 / 0.287 / 0.572*)"),
        ("evidence-recall-locomo", "Evidence recall] at 500 / 1000 context tokens, LoCoMo",
         f"box-hits with its second stage {ev2[500]:.1f}% / {ev2[1000]:.1f}% (out of fold; without it "
         f"{lex['w=0.3']['500']:.1f}% / {lex['w=0.3']['1000']:.1f}%; cosine alone {pct(ce_rec['budget=1000'])}% at "
         f"1000), chunk-rag {at1000['chunk-rag']}%, turn-rag {at1000['turn-rag']}% at 1000"),
        ("qa-the-answering-model-locomo-f1-three-scorers", "QA], LoCoMo F1, Qwen2.5-Coder-1.5B answering",
         f"{qa[MODELS[1][0]]} on cpu.toml's boxes (0.5B: {qa[MODELS[0][0]]}; *published, Qwen2.5-1.5B with Mem0: 23.8*); "
         f"with BM25, {t233['questions']} questions at 1000 tokens: {t233['locomo_f1']} ({arms['box-hits@1000']['questions']} "
         f"of them: {arms['box-hits@1000']['locomo_f1']} against turn-rag's ten best turns "
         f"{arms['turn-rag@1000']['locomo_f1']}); with the second stage (the default) at 500 tokens: {b500['locomo_f1']}; "
         f"an answer takes {p50[(500, 'warm')]:.1f} s warm, {p50[(500, 'cold')]:.1f} s cold (p50, alone)"),
        ("peers-on-the-same-models-mem0-a-mem-two-slices", "Peers on the same models], LoCoMo conv-26 and conv-30, "
         "sessions 1-2 of each", f"LoCoMo F1 {100 * p['membox']['locomo_f1']:.1f} against mem0's "
         f"{100 * p['mem0']['locomo_f1']:.1f} and A-Mem's {100 * p['amem']['locomo_f1']:.1f}, building in "
         f"{p['membox']['build_s_per_message']:.2f} s per message against {p['mem0']['build_s_per_message']:.2f} and "
         f"{p['amem']['build_s_per_message']:.2f}, same models (small slices: [docs](docs/peers.md))"),
        ("records-who-did-what-read-by-hand", "Records], 30 LoCoMo dev boxes and the demo's read by hand",
         f"every event cites its message; events naming the wrong person: {wrong['qwen2.5-coder-0.5b+lines+keep']:.1f}% "
         f"with the default (events made from the lines by code), {wrong['qwen2.5-coder-0.5b']:.1f}% / "
         f"{wrong['qwen2.5-coder-1.5b']:.1f}% with events the 0.5B / 1.5B writes ([docs](docs/records.md))"),
        ("build-speed-seconds-and-llm-tokens-per-message-side-by-side", "Build speed and cost], LoCoMo conv-30 whole",
         f"the default (configs/cpu-ce.toml): {lines['after_s'] / lines['messages']:.2f} s per message "
         f"({lines['before_s'] / lines['messages']:.2f} s with events the model writes, side by side), against "
         f"{split['before_s'] / split['messages']:.2f} s with cpu.toml (the LLM judges every message)"),
        ("eventweave-the-event-graph", "EventWeave], LoCoMo conv-26 and conv-30",
         f"temporal questions, F1 with Qwen2.5-Coder-1.5B answering: event graph "
         f"{mean_pct(r['scores']['locomo_f1'] for r in ew)}, box-hits {mean_pct(r['scores']['locomo_f1'] for r in box)} "
         f"({len(box)} questions); evidence recall at 1000 tokens: event graph {recall(EW_RECALL, 'event-graph', 1000)}%, "
         f"box-hits {recall(EW_RECALL, 'box-hits', 1000)}%"),
        ("longmemeval-user-and-assistant-histories-dev-slice", "LongMemEval], user-and-assistant histories",
         f"evidence turns at 1000 tokens: box-hits {lme(LME_RECALL, 'box-hits', 'retrieval', 'recall@1000')}%, turn-rag "
         f"{lme(LME_RECALL, 'turn-rag', 'retrieval', 'recall@1000')}%; QA on all {load(LME_QA98)['questions']}, judged "
         f"right by the 1.5B model: box-hits {judged['box-hits']}%, turn-rag {judged['turn-rag']}%, full context "
         f"{judged['full-context']}%; with only the evidence sessions {lme(LME_ORACLE, 'box-hits', 'qa', 'judge')}%: the "
         "answering model, not retrieval, sets the limit ([docs](docs/longmemeval.md))"),
    ]


@table
def headline() -> list[str]:
    """README's headline figures, each row linking to its table in BENCHMARKS.md."""
    out = head("question", "figure")
    for anchor, what, figure in headline_rows():
        name, rest = what.split("]", 1)  # the linked words, then the rest of the question
        out.append(row(f"[{name}](BENCHMARKS.md#{anchor}){rest}", figure))
    return out


# ---- the writer --------------------------------------------------------------------------------------------------

def render(text: str) -> str:
    """`text` with every marked block replaced by what its function writes; an unknown block name raises."""
    def block(m: re.Match) -> str:
        name = m.group(1)
        if name not in TABLES:
            raise KeyError(f"no table function for block {name!r} (benchmarks/tables.py)")
        return f"<!-- table:{name} -->\n" + "\n".join(TABLES[name]()) + f"\n<!-- /table:{name} -->\n"
    return MARK.sub(block, text)


def stale(text: str) -> list[str]:
    """The blocks of `text` that are not what their function writes now."""
    return [m.group(1) for m in MARK.finditer(text)
            if m.group(1) not in TABLES or "\n".join(TABLES[m.group(1)]()) + "\n" != m.group(2)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is not what this writes")
    args = ap.parse_args(argv)
    found = [f"{path.name}: {n}" for path in FILES for n in stale(path.read_text())]
    if args.check:
        if found:
            print("stale (run python benchmarks/tables.py): " + ", ".join(found), file=sys.stderr)
        return 1 if found else 0
    for path in (p for p in FILES if stale(p.read_text())):
        path.write_text(render(path.read_text()))
    print("rewritten: " + ", ".join(found) if found else "every block is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
