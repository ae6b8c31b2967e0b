"""The figures README.md quotes, checked against the saved results in benchmarks/results/.

No models and no dataset: each figure is recomputed from a committed result file (per-question records,
per-dialogue rows or saved summaries) and README must contain it rounded as it is shown there.
`README_FIGURES` is the mapping: README phrase (with `{}` where the figures go) -> result file -> the key path
the figures come from. When a result file is re-saved with new figures, this test names the README sentence to
update. BENCHMARKS.md is checked for its length, for the result files it cites and for its default's rows.
"""
from __future__ import annotations

import gzip
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import benchmark_script

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
README = REPO / "README.md"
BENCHMARKS = REPO / "BENCHMARKS.md"


def normalise(text: str) -> str:
    """One space for every run of whitespace (README wraps its lines anywhere), none around '/'."""
    return re.sub(r"\s*/\s*", "/", re.sub(r"\s+", " ", text))


# ---- readers of the result files ------------------------------------------------------------------------------

def pct(mean: float) -> str:
    """A pooled share as the saved Markdown tables show it: the mean rounded to 4 places, then x100 to one decimal
    (membox_local/evaluation/locomo.py)."""
    return f"{100 * round(mean, 4):.1f}"


@lru_cache(maxsize=None)
def records(name: str) -> tuple[dict, ...]:
    with gzip.open(RESULTS / name, "rt") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def pooled(name: str, mode: str, field: str, key: str, conversations: tuple[str, ...] = ()) -> list[float]:
    """The per-question values of records[field][key] for one mode (and some conversations), None left out."""
    got = [r[field].get(key) for r in records(name)
           if r["mode"] == mode and (not conversations or r["conversation"] in conversations)]
    return [x for x in got if x is not None]


def recall(name: str, mode: str, budget: int) -> str:
    return pct(sum(xs := pooled(name, mode, "recall", f"budget={budget}")) / len(xs))


def qa(name: str, mode: str, scorer: str, conversations: tuple[str, ...] = ()) -> str:
    return pct(sum(xs := pooled(name, mode, "scores", scorer, conversations)) / len(xs))


def questions(name: str, mode: str, field: str, key: str, conversations: tuple[str, ...] = ()) -> str:
    return str(len(pooled(name, mode, field, key, conversations)))


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
    raise AssertionError(f"{name}: no row {mode!r} under config {config}")


@lru_cache(maxsize=None)
def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def segmentation(name: str, config: str, first: int = 0) -> str:
    """Pk/WD/F1 macro-averaged over the saved per-dialogue rows (from dialogue `first` on), to three decimals."""
    rows = load(name)["configs"][config]["dialogue_rows"][first:]
    return "/".join(f"{sum(r[m] for r in rows) / len(rows):.3f}" for m in ("pk", "wd", "f1"))


def speed(judge: str, key: str = "s_per_message") -> float:
    return next(r[key] for r in load("segmentation-speed.json")["rows"] if r["judge"] == judge)


def box_sizes(run: str) -> list[str]:
    """Mean messages per box over the six conversations, then the smallest and largest, as BENCHMARKS.md shows."""
    saved = load("segmentation-locomo-full.json")["runs"][run]
    sizes = saved["messages_per_box"].values()
    return [f"{saved['mean']:.2f}", f"{min(sizes):.2f}", f"{max(sizes):.2f}"]


def first_60(config: str) -> str:
    """Messages per box over the first 60 messages of each LoCoMo conversation (the fit's box-size constraint)."""
    return f"{load('segmentation-content.json')['configs_now'][config]['locomo']['mean']:.2f}"


CE_SWEEP = "segmentation-ce-sweep-split.json"  # benchmarks/ce_sweep.py's rows; cpu-ce.toml is its chosen one
CE_RECALL = "locomo-recall-ce-split.json"  # cpu-ce's boxes-only builds of the six LoCoMo dev conversations, recall
LEXICAL_FIT = "lexical-fit-locomo.json"  # box-hits' BM25 stage on those builds: cosine alone, BM25 alone, weights


def lexical_recall(budget: int, variant: str = "") -> str:
    """Pooled recall (%) of a variant of lexical_fit.py's LoCoMo fit (default: the weight configs/cpu.toml chose)."""
    from membox_local.config import load_config

    variant = variant or f"w={load_config('cpu').retrieve.lexical_weight:g}"
    return f"{load(LEXICAL_FIT)['recall'][variant][str(budget)]:.1f}"


def ce_box_sizes() -> list[str]:
    """cpu-ce's messages per box: whole conversations (its boxes-only builds of the recall run; mean, smallest,
    largest) and the first 60 messages of each (the sweep's chosen row: its set, offset and cap)."""
    sizes = [b["utterances_per_box"] for b in load(CE_RECALL)["builds"].values()]
    (sweep,) = [r["locomo60"] for r in load(CE_SWEEP)["rows"] if r.get("chosen")]
    return [f"{sum(sizes) / len(sizes):.2f}", f"{min(sizes):.2f}", f"{max(sizes):.2f}", f"{sweep:.2f}"]


def ce_dev() -> str:
    """cpu-ce's TIAGE dev Pk / WD / F1: the sweep's chosen row (the segmentation evaluator's figures)."""
    (row,) = [r for r in load(CE_SWEEP)["rows"] if r.get("chosen")]
    return " / ".join(f"{row['dev'][m]:.3f}" for m in ("pk", "wd", "f1"))


def judge_qa() -> list[str]:
    """LoCoMo F1 of box-hits on conv-26 and conv-30 pooled by questions: cpu-ce's boxes, cpu.toml's; the questions."""
    runs = {c: [load(f"locomo-qa-{conv}-{c}.json")["modes"]["box-hits"]["qa"] for conv in ("conv26", "conv30")]
            for c in ("cpu-ce-split", "cpu")}
    f1 = {c: pct(sum(r["n"] * r["overall"]["locomo_f1"] for r in rs) / sum(r["n"] for r in rs))
          for c, rs in runs.items()}
    return [f1["cpu-ce-split"], f1["cpu"], str(sum(r["n"] for r in runs["cpu"]))]


def lme_report():
    """benchmarks/longmemeval_report.py, loaded as a module."""
    return benchmark_script("longmemeval_report")


def lme_type(name: str, qtype: str) -> str:
    return f"{load(name)['modes']['box-hits']['qa']['by_type'][qtype]['judge']:.1f}"


def lme_oracle() -> list:
    """The oracle run against the whole histories: recall, judged and deterministic, the question-by-question split
    against box-hits there, and the gap to turn-rag + 10."""
    oracle = {r["qid"]: r["judge"] for r in records(LME_ORACLE.replace(".json", ".jsonl.gz"))}
    whole = {r["qid"]: r["judge"] for r in records(LME_QA98.replace(".json", ".jsonl.gz")) if r["mode"] == "box-hits"}
    assert set(oracle) == set(whole) and len(oracle) == 98
    split = [sum((oracle[q], whole[q]) == pair for q in oracle) for pair in ((1, 1), (0, 0), (0, 1), (1, 0))]
    b, t = lme(LME_QA98, "box-hits", "qa", "judge"), lme(LME_QA98, "turn-rag", "qa", "judge")
    assert b == t
    target = float(t) + 10
    return [lme(LME_ORACLE, "box-hits", "retrieval", "recall@1000"), lme(LME_RECALL, "box-hits", "retrieval",
            "recall@1000"), lme(LME_ORACLE, "box-hits", "qa", "judge"), lme(LME_ORACLE, "box-hits", "qa", "right"), b,
            *split, target - float(lme(LME_ORACLE, "box-hits", "qa", "judge")), target]


def ew_lme_cost() -> list:
    """The event graph's item writer on a LongMemEval history (benchmarks/eventweave_extract_models.py
    --longmemeval): one prompt for both models, the 1.5B's and 0.5B's seconds, the 0.5B's empty pairs."""
    rows = {r["model"]: r for r in load("eventweave-extract-lme.json")["rows"]}
    small, large = rows["qwen2.5-coder-0.5b"], rows["qwen2.5-coder-1.5b"]
    assert small["prompt_tokens_per_pair"] == large["prompt_tokens_per_pair"] and large["no_item"] == 0
    return [large["prompt_tokens_per_pair"], large["s_per_pair"], small["s_per_pair"], small["no_item"],
            small["pairs"]]


def lme_s4_boxes() -> list:
    """Every fourth LongMemEval dev history filed by today's default: histories, turns, boxes, turns per box."""
    hs = load("longmemeval-boxes-dev-s4.json")["histories"]
    turns, boxes = sum(h["messages"] for h in hs), sum(h["boxes"] for h in hs)
    assert all(h["failed_boxes"] == 0 for h in hs)
    return [len(hs), turns, boxes, f"{turns / boxes:.1f}"]


def lme_s4_versus() -> list[str]:
    """The refiled sample against the saved 98-question run on the same questions: equal, no question differing."""
    report = lme_report()
    rows = report.versus(report._saved_records("longmemeval-retrieval-dev-s4"),
                         report._saved_records("longmemeval-retrieval-dev"), ["box-hits", "turn-rag"])
    got = {(r["mode"], r["run"]): r for r in rows}
    for mode in ("box-hits", "turn-rag"):
        assert got[(mode, "new")]["recall@1000"] == got[(mode, "old")]["recall@1000"]
        assert got[(mode, "new")]["recall@1000 differs"] == 0
    return [str(rows[0]["questions"]), f"{got[('box-hits', 'new')]['recall@1000']:.1f}",
            f"{got[('turn-rag', 'new')]['recall@1000']:.1f}"]


def lme_compare() -> list[str]:
    """benchmarks/longmemeval_report.py compare over the saved QA records: box-hits showed more, then as much."""
    report = lme_report()
    more, same, _ = report.compare(list(records(LME_QA98.replace(".json", ".jsonl.gz"))), "box-hits", "turn-rag")
    return [str(more["questions"]), f"{100 * more['box-hits recall']:.1f}", f"{100 * more['turn-rag recall']:.1f}",
            f"{more['box-hits right']:.0f}", f"{more['turn-rag right']:.0f}", str(same["questions"]),
            f"{same['box-hits right']:.0f}", f"{same['turn-rag right']:.0f}"]


def build_minutes() -> tuple[str, str]:
    walls = [b["build_wall_s"] for b in load("locomo-recall-cpu.json")["builds"].values()]
    return f"{min(walls) / 60:.0f}", f"{max(walls) / 60:.0f}"


def qa_by(name: str, answerer: str, scorer: str) -> str:
    xs = [r["scores"][scorer] for r in records(name) if r.get("answerer") == answerer and r.get("scores")]
    return pct(sum(xs) / len(xs))


ANSWERS = "answer-models.jsonl.gz"
QA = "boxaware-qa-cpu.jsonl.gz"
RECALL = "locomo-recall-cpu.jsonl.gz"
CONV30 = ("conv-30",)
EVENTWEAVE = "eventweave-recall.jsonl.gz"  # conv-26 and conv-30 on the eventweave boxes-only builds
BUDGETS = (250, 500, 1000, 2000)
LME_RECALL = "longmemeval-retrieval-dev.json"  # the 98 LongMemEval dev questions (benchmarks/longmemeval_length.py run)
LME_QA98 = "longmemeval-qa-dev98.json"  # box-hits, turn-rag and full-context on all 98, the answering prompt of now
LME_BEFORE = "longmemeval-qa-dev98-before.json"  # box-hits and turn-rag, before the date lines said how long ago
LME_DATES = "longmemeval-qa-dev98-dates.json"  # the same with the date lines, before requests for advice
LME_GUARD = "longmemeval-qa-dev98-guard.json"  # the same with `--set answer.check_terms=true`
LME_FULL_BUILD = "longmemeval-full-build.json"  # benchmarks/longmemeval_build_cost.py over three full builds
LME_ORACLE = "longmemeval-qa-oracle-dev98.json"  # box-hits on the evidence sessions only (longmemeval_oracle.py)
LME_NOTALLY = "longmemeval-qa-dev98-notally.json"  # the three modes before totals were added up by the code
SPEED = "build-speed-split-{}.json"  # benchmarks/build_speed.py, cpu against cpu-ce, one run per conversation

# README phrase -> result file -> key path, and the figures read from it.
README_FIGURES = [
    ("LoCoMo F1 {} against mem0's {} and A-Mem's {}, building in {} s per message against {} and {}",
     "peers-conv30-s2.json", "peers-conv26-s2.json and peers-conv30-s2.json pooled: locomo_f1, build_s_per_message",
     lambda: [peers_row(n)[5 if n == "mem0" else 4] for n in ("membox", "mem0", "amem")]
     + [peers_row(n)[0] for n in ("membox", "mem0", "amem")]),
    ("it scores LoCoMo F1 {} against {} with the 0.5B model on the same {} dev questions", ANSWERS,
     "answerer 1.5b / 0.5b: scores.locomo_f1; questions each answered",
     lambda: [qa_by(ANSWERS, "qwen2.5-coder-1.5b", "locomo_f1"), qa_by(ANSWERS, "qwen2.5-coder-0.5b", "locomo_f1"),
              str(sum(r.get("answerer") == "qwen2.5-coder-1.5b" for r in records(ANSWERS)))]),
    ("({}% at 1000 tokens, against", "boxaware-recall-full-cpu.md", "config cpu: box-hits, budget=1000",
     lambda: [md_cell("boxaware-recall-full-cpu.md", "cpu", "box-hits", "budget=1000")]),
    ("against {}% for chunk-rag", RECALL, "chunk-rag: recall.budget=1000",
     lambda: [recall(RECALL, "chunk-rag", 1000)]),
    ("and {}% for `compact`", RECALL, "compact: recall.budget=1000",
     lambda: [recall(RECALL, "compact", 1000)]),
    ("LoCoMo F1 {} vs {} with the 0.5B model on the {} questions of conv-30", QA,
     "box-hits and compact, conv-30: scores.locomo_f1; number of compact answers",
     lambda: [qa(QA, "box-hits", "locomo_f1", CONV30), qa(QA, "compact", "locomo_f1", CONV30),
              questions(QA, "compact", "scores", "locomo_f1", CONV30)]),
    ("{} on all {} questions of conv-26 and conv-30", QA, "box-hits: scores.locomo_f1; number of answers",
     lambda: [qa(QA, "box-hits", "locomo_f1"), questions(QA, "box-hits", "scores", "locomo_f1")]),
    ("it scores Pk/WD/F1 {} on TIAGE dev", "segmentation-report-tiage_dev.json", "configs.cpu.dialogue_rows",
     lambda: [segmentation("segmentation-report-tiage_dev.json", "cpu")]),
    ("on TIAGE dev and {} on all 711 DialSeg711 dialogues", "segmentation-report-dialseg711_test.json",
     "configs.cpu.dialogue_rows", lambda: [segmentation("segmentation-report-dialseg711_test.json", "cpu")]),
    ("({} on dialogues 554-711", "segmentation-report-dialseg711_test.json", "configs.cpu.dialogue_rows[553:]",
     lambda: [segmentation("segmentation-report-dialseg711_test.json", "cpu", first=553)]),
    ("switch rule alone: {} on all 711 DialSeg711 dialogues", "segmentation-report-dialseg711_test.json",
     "configs.cpu-switch.dialogue_rows",
     lambda: [segmentation("segmentation-report-dialseg711_test.json", "cpu-switch")]),
    ("It takes {} s per message", "segmentation-speed.json", "rows[judge='hybrid (cpu)'].s_per_message",
     lambda: [f"{speed('hybrid (cpu)'):.2f}"]),
    ("MiniLM-only judge (about {}x faster", "segmentation-speed.json",
     "rows: hybrid (cpu) / hybrid (configs/cpu-minilm.toml) s_per_message, to tens",
     lambda: [f"{round(speed('hybrid (cpu)') / speed('hybrid (configs/cpu-minilm.toml)'), -1):.0f}"]),
    ("dev conversations get {} per box", "segmentation-locomo-full.json", "runs['--config cpu'].mean",
     lambda: [f"{load('segmentation-locomo-full.json')['runs']['--config cpu']['mean']:.1f}"]),
    ("previous default's {}-message boxes", "segmentation-locomo-full.json",
     "runs['--config runs/cpu-night.toml'].mean",
     lambda: [f"{load('segmentation-locomo-full.json')['runs']['--config runs/cpu-night.toml']['mean']:.1f}"]),
    ("({}% against {}% at 1000 tokens", "boxaware-recall-full-cpu.md",
     "config cpu and config cpu-night: box-hits, budget=1000",
     lambda: [md_cell("boxaware-recall-full-cpu.md", c, "box-hits", "budget=1000") for c in ("cpu", "cpu-night")]),
    ("at 1000 tokens, six dev conversations, {} questions", "boxaware-recall-full-cpu.md",
     "config cpu: box-hits, questions", lambda: [md_cell("boxaware-recall-full-cpu.md", "cpu", "box-hits",
                                                         "questions")]),
    ("LLM build takes {} to {} minutes", "locomo-recall-cpu.json", "builds.*.build_wall_s, min and max / 60",
     lambda: list(build_minutes())),
    # the README's headline table
    ("box-hits {}% (cosine alone, the default before: {}%; on cpu.toml's boxes {}%), chunk-rag {}%, turn-rag {}%",
     "boxaware-recall-full-cpu.md", f"{LEXICAL_FIT}: the chosen weight at 1000; {CE_RECALL}: box-hits at 1000; "
     "config cpu: budget=1000",
     lambda: [lexical_recall(1000), pct(load(CE_RECALL)["modes"]["box-hits"]["recall"]["budget=1000"])]
     + [md_cell("boxaware-recall-full-cpu.md", "cpu", m, "budget=1000")
        for m in ("box-hits", "chunk-rag", "turn-rag")]),
    ("TIAGE dev Pk / WD / F1 | {} (cpu.toml, the LLM-read judge before: {};", "segmentation-report-tiage_dev.json",
     f"{CE_SWEEP}: the chosen row's dev; configs.cpu.dialogue_rows",
     lambda: [ce_dev(), segmentation("segmentation-report-tiage_dev.json", "cpu")]),
    ("Qwen2.5-Coder-1.5B answering | {} on cpu.toml's boxes; the default's boxes against cpu.toml's on conv-26 and "
     "conv-30: {} against {} (*published", ANSWERS, "answerer 1.5b: scores.locomo_f1; locomo-qa-conv26/30-*: pooled",
     lambda: [qa_by(ANSWERS, "qwen2.5-coder-1.5b", "locomo_f1")] + judge_qa()[:2]),
    ("evidence turns at 1000 tokens on {} dev questions: box-hits {}%, turn-rag {}% ({}% with the same length "
     "penalty)", LME_RECALL, "modes.*.retrieval.recall@1000",
     lambda: [str(len({r["qid"] for r in records(LME_RECALL.replace(".json", ".jsonl.gz")) if not r["abstention"]}))]
     + [lme(LME_RECALL, m, "retrieval", "recall@1000") for m in ("box-hits", "turn-rag", "turn-rag:length-cost")]),
    ("{} s per message ({} s with events the model writes, side by side; {} s and {} LLM prompt tokens before records "
     "cited their lines), against {} s and {} with cpu.toml before them", SPEED.format("conv30"),
     "build-speed-lines-conv30.json: after and before s per message; then the split run's cpu-ce and cpu figures",
     lambda: lines_conv30() + speed_conv30()[:4]),
    ("judged right {}% with box-hits, {}% with turn-rag and {}% with full-context (deterministic {} / {} / {})",
     LME_QA98, "modes.*.qa.judge, right",
     lambda: [lme(LME_QA98, m, "qa", "judge") for m in LME_MODES] + [lme(LME_QA98, m, "qa", "right") for m in LME_MODES]),
    ("judged right {} -> {} with box-hits and {} -> {} with turn-rag (deterministic {} -> {} and {} -> {})",
     LME_DATES, "modes.*.qa.judge, right, before and after",
     lambda: [lme(f, m, "qa", k) for k in ("judge", "right") for m in ("box-hits", "turn-rag") for f in (LME_BEFORE, LME_DATES)]),
    ("event graph {}, box-hits {} ({} questions); evidence recall at 1000 tokens: event graph {}%, box-hits {}%",
     "eventweave-qa.jsonl.gz", "event-graph locomo_f1; box-hits from answer-models (1.5B, category 2, conv-26/30)",
     lambda: [qa("eventweave-qa.jsonl.gz", "event-graph", "locomo_f1"), ew_boxhits_temporal()[0],
              ew_boxhits_temporal()[1], recall(EVENTWEAVE, "event-graph", 1000), recall(EVENTWEAVE, "box-hits", 1000)]),
    ("no box failed, for length or otherwise; {} of {}, {} of {} and {} of {} boxes were too long", LME_FULL_BUILD,
     "histories.*: boxes_from_a_cut_excerpt, boxes (failed_boxes all 0)", lambda: full_build_boxes()),
    ("showed {} / {} / {}% of the evidence turns at 500 / 1000 / 2000 tokens against box-hits' {} / {} / {}",
     "longmemeval-full-build-dev3.json", "modes.compact/box-hits.retrieval.recall@N",
     lambda: [lme("longmemeval-full-build-dev3.json", m, "retrieval", f"recall@{b}") for m in ("compact", "box-hits")
              for b in (500, 1000, 2000)]),
    ("`make demo` in a fresh clone with no pip cache took {} s, again in the warm venv {} s; `make test` {} s ({} passed, "
     "{} skipped; then the logic tests on another OpenBLAS kernel and the numeric ones with two threads: {} and {} passed)",
     "fresh-clone.json", "steps: seconds; the test step's pytest summaries", lambda: fresh_clone()),
    ("on the {} answerable questions where box-hits' context held more of the evidence turns, {}% against {}% at 1000 "
     "tokens, the 1.5B model was judged right {} times with box-hits and {} with turn-rag, and on the {} where both held "
     "as much, {} and {}", LME_QA98.replace(".json", ".jsonl.gz"), "longmemeval_report.compare(box-hits, turn-rag)",
     lambda: lme_compare()),
    ("its prompt holds {} tokens per pair (LoCoMo: 370 per message), and configs/eventweave.toml's 1.5B writer took {} s "
     "per pair, the 0.5B {} s (finding no item in {} of the {} pairs, the 1.5B in none)", "eventweave-extract-lme.json",
     "rows: prompt tokens, s per pair, no item, pairs", lambda: ew_lme_cost()),
    ("Box-hits then shows {}% of the evidence turns at 1000 tokens ({} on the whole histories), and the 1.5B model is "
     "judged right {}% (deterministic {}): no better than with the whole histories ({} with box-hits or turn-rag; "
     "against box-hits there, question by question, {} right and {} wrong in both, {} lost and {} gained), and {:.1f} "
     "points short of the {:.1f}%", LME_ORACLE, "modes.box-hits: recall@1000, qa.judge, right; the 98's records",
     lambda: lme_oracle()),
    ("By type (judged): single-session user {}, assistant {}, preference {}, temporal {}, multi-session {} and knowledge "
     "update {} ({} on the whole histories", LME_ORACLE, "modes.box-hits.qa.by_type.*.judge",
     lambda: [lme_type(LME_ORACLE, t) for t in ("single-session-user", "single-session-assistant",
                                                "single-session-preference", "temporal-reasoning", "multi-session",
                                                "knowledge-update")] + [lme_type(LME_QA98, "knowledge-update")]),
    ("{} histories, {:,} turns in {:,} boxes: {} turns per box", "longmemeval-boxes-dev-s4.json",
     "histories: count, messages, boxes", lambda: lme_s4_boxes()),
    ("leaves the retrieval figures of its {} answerable questions as they were: box-hits {}% and turn-rag {}% of the "
     "evidence turns at 1000 tokens with either judge's boxes", "longmemeval-retrieval-dev-s4.jsonl.gz",
     "longmemeval_report.versus(s4, dev): recall@1000, equal in both runs", lambda: lme_s4_versus()),
    ("QA on all {}, judged right by the 1.5B model: box-hits {}%, turn-rag {}%, full context {}%; with only the evidence "
     "sessions (the oracle setting) {}%", LME_QA98, "questions; modes.*.qa.judge; the oracle run's box-hits",
     lambda: [load(LME_QA98)["questions"]] + [lme(LME_QA98, m, "qa", "judge") for m in LME_MODES]
     + [lme(LME_ORACLE, "box-hits", "qa", "judge")]),
    ("(+{:.1f} on all 98 by the judge, +{:.1f} by the deterministic check)", LME_QA98, "box-hits less full-context",
     lambda: [float(lme(LME_QA98, "box-hits", "qa", k)) - float(lme(LME_QA98, "full-context", "qa", k))
              for k in ("judge", "right")]),
    ("({} -> {} and {} -> {} overall)", LME_NOTALLY, "modes.*.qa.judge, after the date lines and after advice",
     lambda: [lme(f, m, "qa", "judge") for m in ("box-hits", "turn-rag") for f in (LME_DATES, LME_NOTALLY)]),
    ("Judged right {} -> {} with box-hits, {} -> {} with turn-rag, {} -> {} with full context; deterministic {} -> {}, "
     "{} -> {}, {} -> {}", LME_QA98, "modes.*.qa.judge, right, before and after the totals",
     lambda: [lme(f, m, "qa", k) for k in ("judge", "right") for m in LME_MODES for f in (LME_NOTALLY, LME_QA98)]),
    ("picks 11 of the 98, all multi-session, and none of LoCoMo's {:,}", "grounding-check.json", "total_rule",
     lambda: total_rule()),
    ("`--modes box-hits turn-rag full-context --redo {}`)", "grounding-check.json", "total_rule.longmemeval-dev-ids",
     lambda: [" ".join(load("grounding-check.json")["total_rule"]["longmemeval-dev-ids"])]),
    ("judged right {}% and {}%; it took over no answerable question with box-hits (false abstention stays {} of 93)",
     LME_GUARD, "modes.*.qa.judge; box-hits' false abstentions",
     lambda: [lme(LME_GUARD, "box-hits", "qa", "judge"), lme(LME_GUARD, "turn-rag", "qa", "judge"),
              lme_qa_row(LME_GUARD, "box-hits")[5]]),
    ("picks exactly the {} preference questions of the 98 and none of LoCoMo's {:,} dev questions", "grounding-check.json",
     "advice_rule", lambda: advice_rule()),
    ("Full-context (the newest 1000 tokens of a ~115k-token history) says \"not mentioned\" to {} of the {}", LME_QA98,
     "full-context records: abstained on answerable questions", lambda: lme_qa_row(LME_QA98, "full-context")[5:6]
     + [sum(not r["abstention"] for r in records(LME_QA98.replace(".json", ".jsonl.gz")) if r["mode"] == "box-hits")]),
    ("of the saved {} answers of the LoCoMo QA table, it takes over {}, whose F1 summed {}: {} F1", "grounding-check.json",
     "locomo_qa_cost", lambda: [(c := load("grounding-check.json")["locomo_qa_cost"])["questions"], c["fired"],
                                c["their_locomo_f1_sum"], c["points_lost"]]),
]
LME_MODES = ("box-hits", "turn-rag", "full-context")


def test_continuity_judge_qa_gate_matches_the_saved_runs():
    """cpu-ce's QA against cpu.toml's on conv-30 and conv-26, and over both (pooled by questions), as the gate says."""
    text = normalise((REPO / "docs" / "continuity-judge.md").read_text())
    qa = {(conv, c): load(f"locomo-qa-{conv}-{c}.json")["modes"]["box-hits"]["qa"]
          for conv in ("conv30", "conv26") for c in ("cpu-ce-split", "cpu")}

    def f1(*runs):
        return pct(sum(r["n"] * r["overall"]["locomo_f1"] for r in runs) / sum(r["n"] for r in runs))

    both = [f1(qa[("conv30", c)], qa[("conv26", c)]) for c in ("cpu-ce-split", "cpu")]
    n = qa[("conv30", "cpu")]["n"] + qa[("conv26", "cpu")]["n"]
    expected = (f"| conv-30 {f1(qa[('conv30', 'cpu-ce-split')])} against cpu.toml's {f1(qa[('conv30', 'cpu')])}; "
                f"conv-26 {f1(qa[('conv26', 'cpu-ce-split')])} against {f1(qa[('conv26', 'cpu')])}; both ({n}) "
                f"{both[0]} against {both[1]} |")
    assert expected in text, expected


def test_cpu_ce_is_the_sweeps_choice_and_the_docs_say_its_figures():
    """configs/cpu-ce.toml holds the row that benchmarks/ce_sweep.py chose, and BENCHMARKS.md and
    docs/continuity-judge.md show that row's TIAGE dev and DialSeg711 figures."""
    from membox_local.config import load_config

    (row,) = [r for r in load(CE_SWEEP)["rows"] if r.get("chosen")]
    loom = load_config("cpu-ce").loom
    assert (loom.weights, loom.bias, loom.max_box_messages, loom.cap_split) == (row["weights"], row["bias"], row["cap"],
                                                                               row["cap_split"])
    assert loom.ce_model == load(CE_SWEEP)["ce_model"]
    cells = "| {} | {} |".format(*(" / ".join(f"{row[ds][m]:.3f}" for m in ("pk", "wd", "f1"))
                                   for ds in ("dev", "dialseg711")))
    for doc in (BENCHMARKS, REPO / "docs" / "continuity-judge.md"):
        assert normalise(cells) in normalise(doc.read_text()).replace("**", ""), f"{doc.name} should show {cells}"
    report = load("segmentation-report-dialseg711_test-cpu-ce-split.json")["configs"]["cpu-ce"]  # the same judge
    assert [report[m] for m in ("pk", "wd", "f1")] == [row["dialseg711"][m] for m in ("pk", "wd", "f1")]
    held_out = " / ".join(f"{report['after_553'][m]:.3f}" for m in ("pk", "wd", "f1"))
    assert normalise(f"{cells} {held_out} | {report['hyp_boundaries_per_dialogue']:.2f} |") in normalise(
        BENCHMARKS.read_text()).replace("**", "")


def speed_row(conversation: str) -> list[str]:
    """cpu-ce's seconds, seconds per message, LLM prompt tokens sent and read per message, as BENCHMARKS.md shows."""
    row = speed_run(conversation)
    every = row["per_message"]["after"]["all"]
    return [f"{row['after_s']:,.0f}", f"{row['after_s_per_msg']:.2f}", f"{every['prompt_tokens']:.1f}",
            f"{every['read_tokens']:.1f}", f"{every['calls']:.2f}"]


def speed_run(conversation: str) -> dict:
    """The side-by-side run of one conversation (its only row)."""
    (row,) = load(SPEED.format(conversation.replace("-", "")))["rows"]
    assert row["conversation"] == conversation
    return row


def lines_conv30() -> list[str]:
    """The default's seconds per message on conv-30 with events made from the lines, and with events the model
    writes, side by side in one run alone (build_speed.py --before extract.events=written)."""
    row = json.loads((RESULTS / "build-speed-lines-conv30.json").read_text())["rows"][0]
    return [f"{row['after_s_per_msg']:.2f}", f"{row['before_s_per_msg']:.2f}"]


def speed_conv30() -> list[str]:
    """Seconds and LLM prompt tokens sent per message, cpu-ce then cpu, and the ratio, from the side-by-side run."""
    row = speed_run("conv-30")
    return [f"{row['after_s_per_msg']:.2f}", f"{row['per_message']['after']['all']['prompt_tokens']:.1f}",
            f"{row['before_s_per_msg']:.2f}", f"{row['per_message']['before']['all']['prompt_tokens']:.1f}",
            f"{row['ratio']:.2f}"]


def lme(name: str, mode: str, part: str, key: str) -> str:
    """A figure of a saved `membox eval longmemeval` summary (already a percentage with one decimal)."""
    return f"{load(name)['modes'][mode][part][key]:.1f}"


def docs_text() -> str:
    """README.md and the docs/ pages it links to, as one text: a figure may stand in any of them."""
    return "\n".join(p.read_text() for p in [README, *sorted((REPO / "docs").glob("*.md"))])


@pytest.mark.parametrize("phrase, source, key, figures", README_FIGURES, ids=[f[0] for f in README_FIGURES])
def test_readme_figure_matches_result_file(phrase, source, key, figures):
    assert (RESULTS / source).exists(), f"{source} is not in benchmarks/results/"
    expected = normalise(phrase.format(*figures()))
    assert expected in normalise(docs_text()), (
        f"README or docs/ should say {expected!r} (figures from benchmarks/results/{source}, {key})")


def test_saved_summaries_agree_with_the_records():
    """The held-out DialSeg711 column and the QA table: the saved summaries equal the per-item records."""
    report = load("segmentation-report-dialseg711_test.json")["configs"]["cpu"]
    held_out = report["dialogue_rows"][553:]
    for m in ("pk", "wd", "f1"):
        assert abs(sum(r[m] for r in held_out) / len(held_out) - report["after_553"][m]) < 5e-5
    assert len(report["dialogue_rows"]) - 553 == report["after_553"]["dialogues"]
    md = (RESULTS / "boxaware-qa-cpu.md").read_text()
    tokens = [r["context_tokens"] for r in records(QA) if r["mode"] == "box-hits"]
    row = "| box-hits | {} | {:.0f} | {} | {} | {} | {} |".format(
        questions(QA, "box-hits", "scores", "locomo_f1"), sum(tokens) / len(tokens),
        *(qa(QA, "box-hits", s) for s in ("locomo_f1", "mem0_f1", "mem0_bleu1", "membox_f1")))
    assert row in md
    assert md_cell("locomo-recall-cpu.md", "cpu", "compact", "budget=1000") == recall(RECALL, "compact", 1000)


PUBLISHED = ["0.400/0.420/0.427", "0.278/0.302/0.610", "0.265/0.287/0.572", "0.197/0.210/0.650"]


@pytest.mark.parametrize("figures", PUBLISHED)
def test_published_peer_figures_agree(figures):
    """Published peers (CSM, the RoBERTa segmenter) are quoted alike in README (or docs/) and BENCHMARKS.md."""
    assert figures in normalise(docs_text())
    assert figures in normalise(BENCHMARKS.read_text())


def test_benchmarks_is_short():
    lines = BENCHMARKS.read_text().splitlines()
    # two memory systems, four backends, two benchmark families: still one table per question, no history
    assert len(lines) < 300, f"BENCHMARKS.md has {len(lines)} lines; it shows the current state only"


def test_readme_is_a_front_door_and_links_every_docs_page():
    text = README.read_text()
    assert len(text.splitlines()) < 200, "README.md: the two commands, what it is, an example; the rest in docs/"
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md") if not p.name.endswith("-section.md"))
    assert [p for p in pages if f"(docs/{p})" not in text] == []
    for page in (REPO / "docs").glob("*.md"):  # each page links back, and its relative links land on a file
        assert page.name.endswith("-section.md") or "](../README.md)" in page.read_text(), page.name
        for target in re.findall(r"\]\((?!https?://|#)([^)#]+)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which is not there"


def test_benchmarks_cites_only_saved_results():
    cited = set(re.findall(r"benchmarks/results/([A-Za-z0-9_.\-]*[A-Za-z0-9_])", BENCHMARKS.read_text()))
    assert cited, "BENCHMARKS.md cites no result file"
    missing = sorted(name for name in cited if not (RESULTS / name).is_file())
    assert not missing, f"BENCHMARKS.md cites result files that do not exist: {missing}"


BENCHMARKS_FIGURES = [
    ("(configs/cpu.toml, the default until 2026-12-05) | {} | {} | {} |",
     lambda: [segmentation("segmentation-report-tiage_dev.json", "cpu"),
              segmentation("segmentation-report-dialseg711_test.json", "cpu"),
              segmentation("segmentation-report-dialseg711_test.json", "cpu", first=553)]),
    ("| box-hits, cosine alone | cpu.toml's judge (8.52 per box) | {} | {} | {} | {} |",
     lambda: [md_cell("boxaware-recall-full-cpu.md", "cpu", "box-hits", f"budget={b}")
              for b in (250, 500, 1000, 2000)]),
    ("| compact (the paper's mode) | LLM builds, judge of 2026-11-29 (5.36 per box) | {} | {} | {} | {} |",
     lambda: [recall(RECALL, "compact", b) for b in (250, 500, 1000, 2000)]),
    ("against compact {} / {} / {}",
     lambda: [qa(QA, "compact", s, CONV30) for s in ("locomo_f1", "mem0_f1", "membox_f1")]),
    ("| **Qwen2.5-Coder-1.5B (the CPU default)** | 313 | **{}** | **{}** | **{}** | **{}** |",
     lambda: [qa_by(ANSWERS, "qwen2.5-coder-1.5b", s) for s in ("locomo_f1", "mem0_f1", "mem0_bleu1", "membox_f1")]),
    ("| Qwen2.5-Coder-0.5B (the answering model before) | 313 | {} | {} | {} | {} |",
     lambda: [qa_by(ANSWERS, "qwen2.5-coder-0.5b", s) for s in ("locomo_f1", "mem0_f1", "mem0_bleu1", "membox_f1")]),
    ("| configs/cpu.toml (cap 16) | {} ({}-{}) | {} |", lambda: box_sizes("--config cpu") + [first_60("cpu")]),
    ("| **the default: cross-encoder judge (configs/cpu-ce.toml, cap 13 cut at the weakest point)** "
     "| **{} ({}-{})** | {} |",
     lambda: ce_box_sizes()),
    ("cpu-ce {} against cpu.toml's {} on conv-26 and conv-30 ({} questions;", lambda: judge_qa()),
    ("| conv-26: **cpu-ce** | **{}** | **{}** |", lambda: speed_row("conv-26")[:2]),
    ("| conv-30: **cpu-ce** | **{}** | **{}** |", lambda: speed_row("conv-30")[:2]),
    ("| **{} ({})** | {} |", lambda: speed_row("conv-26")[2:]),
    ("| **{} ({})** | {} |", lambda: speed_row("conv-30")[2:]),
    ("| ratio, conv-26 / conv-30 | **{}x / {}x** |",
     lambda: [f"{speed_run(c)['ratio']:.2f}" for c in ("conv-26", "conv-30")]),
    ("| **box-hits + BM25 (default)** | **the default judge, cpu-ce ({} per box)** | **{}** | **{}** | **{}** "
     "| **{}** |",
     lambda: [ce_box_sizes()[0]] + [lexical_recall(b) for b in BUDGETS]),
    ("| box-hits, BM25 alone | cpu-ce | {} | {} | {} | {} |", lambda: [lexical_recall(b, "bm25") for b in BUDGETS]),
    ("| box-hits, cosine alone (the default before) | cpu-ce | {} | {} | {} | {} |",
     lambda: [pct(load(CE_RECALL)["modes"]["box-hits"]["recall"][f"budget={b}"]) for b in BUDGETS]),
    ("| event-graph | 231 | {} | {} | {} | {} |", lambda: [recall(EVENTWEAVE, "event-graph", b) for b in BUDGETS]),
    ("| event-graph-boxes (events pull in their boxes) | 231 | {} | {} | {} | {} |",
     lambda: [recall(EVENTWEAVE, "event-graph-boxes", b) for b in BUDGETS]),
    ("| **box-hits (the default)** | 231 | **{}** | **{}** | **{}** | **{}** |",
     lambda: [recall(EVENTWEAVE, "box-hits", b) for b in BUDGETS]),
    ("| chunk-rag | 231 | {} | {} | {} | {} |", lambda: [recall(EVENTWEAVE, "chunk-rag", b) for b in BUDGETS]),
    ("| compact | 231 | {} | {} | {} | {} |",
     lambda: [pct(sum(xs := pooled(RECALL, "compact", "recall", f"budget={b}", ("conv-26", "conv-30"))) / len(xs))
              for b in BUDGETS]),
    ("**{} 5xx, {} tracebacks**; {} adds, each stored once ({} filed); search p50 {} s, p95 {} s; resident memory **{} MB "
     "after the first minute** beyond what the indexes took on ({} MB;", lambda: soak_row("soak-cpu-fast.json", "serve")),
    ("| **box-hits, 1000 tokens (the default budget now; before 1500)** | {} | **{}** | **{}** |",
     lambda: qa_arm("box-hits@1000")),
    ("| box-hits, 500 tokens | {} | {} | {} |", lambda: qa_arm("box-hits@500")),
    ("| box-hits-said, 500 tokens (each line followed by its events) | {} | {} | {} |",
     lambda: qa_arm("box-hits-said@500")),
    ("| box-hits-said, 500 tokens, the events made from the lines (the default records) | {} | {} | {} |",
     lambda: qa_arm("box-hits-said:lines@500")),
    ("| box-hits-events, 1000 tokens (those events as keys to their lines, weight 0.25) | {} | {} | {} |",
     lambda: qa_arm("box-hits-events:lines@1000")),
    ("| turn-rag, its ten best turns | {} | {} | {} |", lambda: qa_arm("turn-rag@1000")),
    ("With BM25 (the default now), the same {} at 1000 tokens: **{}** (mem0 F1 {}, BLEU-1 {}; evidence in context {}%;",
     lambda: [(t := load("locomo-qa-233.json")["arms"]["box-hits@1000"])["questions"], t["locomo_f1"], t["mem0_f1"],
              t["mem0_bleu1"], t["qa_recall"]]),
    ("warm {} / {} / {}, cold `membox ask` {} / {} / {}", lambda: latency("warm") + latency("cold")),
    ("| **box-hits** | **{}** | **{}** | {} | {} | {} | {} | {} |", lambda: lme_qa_row(LME_QA98, "box-hits")),
    ("| turn-rag | {} | {} | {} | {} | {} | {} | {} |", lambda: lme_qa_row(LME_QA98, "turn-rag")),
    ("| full-context | {} | {} | {} | {} | {} | {} | {} |", lambda: lme_qa_row(LME_QA98, "full-context")),
    ("| box-hits on the evidence sessions alone (the oracle setting: {}% of the evidence turns shown) | {} | {} | {} | {} "
     "| {} | {} | {} |", lambda: [lme(LME_ORACLE, "box-hits", "retrieval", "recall@1000")]
     + lme_qa_row(LME_ORACLE, "box-hits")),
    ("| box-hits with the unmentioned-term guard (`--set answer.check_terms=true`) | {} | {} | {} | {} | {} | {} | {} |",
     lambda: lme_qa_row(LME_GUARD, "box-hits")),
    ("on LoCoMo dev it takes over {} of {} (-{} F1, saved answers)", lambda: guard_locomo()),
    ("30 min (`--minutes 30`, `soak-cpu-fast-30min.json`): {} 5xx, {} tracebacks, {} adds, search p95 {} s, {} MB,",
     lambda: (lambda r: [r["server_errors"], r["tracebacks"], f"{r['accepted']:,}",
                         f"{r['routes']['search']['p95_s']:.2f}", f"{r['growth_beyond_data_mb']:+.1f}"])(
        load("soak-cpu-fast-30min.json")["results"]["serve"])),
    ("**0 5xx, 0 tracebacks** both; {} / {} adds, each stored once; search p95 {} / {} s; resident memory {} / {} MB",
     lambda: soak_pair()),
    ("(0.2 MB; target 50: met): heaps {} MB, mapped files' pages {} MB; the last minute's median against the first "
     "minute's after it {} MB", lambda: [f"{v:+.1f}" for v in load("soak-cpu-fast.json")["results"]["serve"][
         "rss_by_kind"].values()] + [f"{load('soak-cpu-fast.json')['results']['serve']['rss']['trend_mb']:+.1f}"]),
    ("the largest sample {} MB above the first after warm-up, with the answers in flight;", lambda: (lambda r: [
        f"{r['max_mb'] - r['warm_mb']:.0f}"])(load("soak-cpu-ce.json")["results"]["serve"]["rss"])),
    ("(cpu-ce: of 5.2 GB, the medians {} MB;", lambda: [
        f"{load('soak-cpu-ce.json')['results']['serve']['rss']['trend_mb']:+.1f}"]),
    ("answers p50 {} s ({} of {} a 409: nothing filed yet)", lambda: (lambda a: [
        f"{a['p50_s']:.0f}", a["statuses"]["409"], a["requests"]])(
        load("soak-cpu-fast.json")["results"]["serve"]["routes"]["answer"])),
    ("| **membox_local (the default)** | **{}** | {} / {} / {} | **{}** | **{}** | **{}** | {} / {} / {} / {} | {} |",
     lambda: peers_row("membox")),
    ("| mem0ai 2.2.1 | {} ({}x) | {} / {} / {} | {} | {} | {} | {} / {} / {} / {} | {} |", lambda: peers_row("mem0")),
    ("| A-Mem (a-mem 0.2.6) | {} | {} / {} / {} | {} | {} | {} | {} / {} / {} / {} | {} |", lambda: peers_row("amem")),
]


def lme_qa_row(name: str, mode: str) -> list:
    """A row of the LongMemEval QA table: judged, deterministic, temporal and multi-session (judged), abstention
    said and false abstention as counts (from the records), the judge's agreement."""
    qa = load(name)["modes"][mode]["qa"]
    recs = [r for r in records(name.replace(".json", ".jsonl.gz")) if r["mode"] == mode]
    said = int(sum(r["abstained"] for r in recs if r["abstention"]))
    false = int(sum(r["abstained"] for r in recs if not r["abstention"]))
    return [lme(name, mode, "qa", "judge"), lme(name, mode, "qa", "right"),
            f"{qa['by_type']['temporal-reasoning']['judge']:.1f}", f"{qa['by_type']['multi-session']['judge']:.1f}",
            said, false, f"{qa['judge_agreement']:.1f}"]


def advice_rule() -> list:
    """The advice wording rule picks only LongMemEval's preference questions and no LoCoMo question."""
    rule = load("grounding-check.json")["advice_rule"]
    assert list(rule["longmemeval-dev"]) == ["single-session-preference"] and rule["locomo-dev"]["picked"] == 0
    return [rule["longmemeval-dev"]["single-session-preference"], rule["locomo-dev"]["questions"]]


def ew_boxhits_temporal() -> tuple[str, int]:
    """box-hits' temporal F1 beside the event graph's: the 1.5B model's answers to category 2 of conv-26 and conv-30."""
    got = [r["scores"]["locomo_f1"] for r in records(ANSWERS) if r["answerer"] == "qwen2.5-coder-1.5b"
           and r["category"] == 2 and r["conversation"] in ("conv-26", "conv-30")]
    assert len(got) == sum(1 for r in records("eventweave-qa.jsonl.gz") if r["mode"] == "event-graph")
    return pct(sum(got) / len(got)), len(got)


def full_build_boxes() -> list:
    """Per complete full build (its order in the file): boxes read from a cut excerpt, and boxes; none failed."""
    got = load(LME_FULL_BUILD)
    rows = {h["history"]: h for h in got["histories"]}
    done = [rows[h] for h in ("07741c44", "80ec1f4f", "e48988bc")]
    assert got["complete"] == [h["history"] for h in sorted(done, key=lambda h: h["history"])]
    assert all(h["failed_boxes"] == 0 for h in done)
    return [x for h in done for x in (h["boxes_from_a_cut_excerpt"], h["boxes"])]


def fresh_clone() -> list:
    """The README's fresh-machine figures: each step's seconds (all exited 0) and make test's pytest counts."""
    import re

    steps = {st["step"]: st for st in load("fresh-clone.json")["steps"]}
    assert all(st["rc"] == 0 for st in steps.values())
    runs = [dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|skipped|failed)", line))
            for line in steps["test"]["tests"]]
    assert len(runs) == 3 and not any(r.get("failed") for r in runs)
    return [steps["demo fresh"]["seconds"], steps["demo warm"]["seconds"], steps["test"]["seconds"],
            runs[0]["passed"], runs[0]["skipped"], runs[1]["passed"], runs[2]["passed"]]


def total_rule() -> list:
    """The totals wording rule picks 11 LongMemEval dev questions, all multi-session, and no LoCoMo question."""
    rule = load("grounding-check.json")["total_rule"]
    assert rule["longmemeval-dev"] == {"multi-session": 11} and rule["locomo-dev"]["picked"] == 0
    return [rule["locomo-dev"]["questions"]]


def guard_locomo() -> list:
    g = load("grounding-check.json")
    box, cost = g["summary"]["locomo-dev"]["box-hits"], g["locomo_qa_cost"]
    return [box["fired_answerable"], box["answerable"], f"{cost['points_lost']:.2f}"]


def vllm_batching(n: int) -> list:
    """A row of the vLLM batching table from benchmarks/results/vllm-cpu-smoke.json."""
    rows = json.loads((RESULTS / "vllm-cpu-smoke.json").read_text())["batching"]["rows"]
    r = next(r for r in rows if r["N"] == n)
    return [n, f"{r['one_at_a_time_s']:.1f}", f"{r['batched_s']:.1f}", f"{r['speedup']:.2f}"]


def latency(mode: str) -> list:
    """p50 seconds per answer at 500 / 1000 / 1500 tokens (benchmarks/answer_latency.py's saved run)."""
    phases = {(p["budget"], p["mode"]): p for p in load("answer-latency.json")["phases"]}
    return [f"{phases[(b, mode)]['p50_s']:.1f}" for b in (500, 1000, 1500)]


def qa_arm(arm: str) -> list:
    """An arm of BENCHMARKS.md's budget table (benchmarks/qa_paired.py's saved comparison)."""
    t = load("locomo-qa-budgets.json")["arms"][arm]
    return [t["questions"], t["locomo_f1"], t["mem0_f1"]]


def soak_row(name: str, kind: str) -> list:
    """A soak's figures as BENCHMARKS.md's Reliability rows give them (benchmarks/soak.py)."""
    r = load(name)["results"][kind]
    search = r["routes"]["search"]
    return [r["server_errors"], r["tracebacks"], f"{r['accepted']:,}", f"{r['messages_filed']:,}",
            f"{search['p50_s']:.2f}", f"{search['p95_s']:.2f}", f"{r['growth_beyond_data_mb']:+.1f}",
            f"{r['indexes_mb']['end'] - r['indexes_mb']['warm']:.1f}"]


def soak_pair() -> list:
    """The Reliability row of the MCP soak (cpu-fast) and the soak on the CPU default (cpu-ce): adds, search p95 and
    resident memory after the first minute beyond the indexes, each pair in turn."""
    mcp, ce = load("soak-mcp-cpu-fast.json")["results"]["mcp"], load("soak-cpu-ce.json")["results"]["serve"]
    return [f"{mcp['accepted']:,}", f"{ce['accepted']:,}", f"{mcp['routes']['search']['p95_s']:.2f}",
            f"{ce['routes']['search']['p95_s']:.2f}", f"{mcp['growth_beyond_data_mb']:+.0f}",
            f"{ce['growth_beyond_data_mb']:+.0f}"]


PEERS_RUNS = ("peers-conv26-s2.json", "peers-conv30-s2.json")


def peers_row(system: str) -> list:
    """A system's row of BENCHMARKS.md's peers table: the saved runs pooled as `python -m benchmarks.peers report`
    pools them (benchmarks/peers/report.py, imported as the package it is)."""
    import sys

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from benchmarks.peers import report

    rows = report.summarise(report.merge([load(name) for name in PEERS_RUNS]))
    r = rows[system]
    cells = [f"{r['build_s_per_message']:.2f}"]
    if system == "mem0":
        cells.append(f"{r['build_s_per_message'] / rows['membox']['build_s_per_message']:.0f}")
    cells += [f"{r['llm_calls_per_message']:.2f}", f"{r['prompt_tokens_per_message']:,.0f}",
              f"{r['completion_tokens_per_message']:.1f}"]
    cells += [f"{100 * r[m]:.1f}" for m in ("locomo_f1", "mem0_f1", "mem0_bleu1")]
    cells += [f"{100 * r['by_category'][c]['locomo_f1']:.1f}" for c in (1, 2, 3, 4)]
    return cells + [f"{r['answer_s']:.2f}"]


# figures of the docs pages: docs/records.md (the events made from the lines, benchmarks/events_fit.py) and
# docs/backends.md ("vLLM's CPU build, measured", moved there from BENCHMARKS.md)
DOCS_FIGURES = [
    ("at 1000 tokens are judged right in {}% against {}%", lambda: [
        f"{load('longmemeval-qa-said-lines-dev-s4.json')['modes'][m]['qa']['judge']:.1f}"
        for m in ("box-hits-said:lines", "box-hits")]),
    *[(f"| {row} | {{}} | {{}} |", lambda v=variant: [events_fit("events-fit-locomo-lines.json", v),
                                                    events_fit("events-fit-lme-lines.json", v)])
      for row, variant in (("box-hits (no events)", "box-hits"), ("as keys, weight 0.25 (the mode's)", "keys x=0.25"),
                           ("as keys, weight 0.5", "keys x=0.5"), ("as keys, weight 1", "keys x=1"),
                           ("their words in BM25", "words"), ("shown under their lines", "said"))],
    ("N = {}, {} against {} s ({}x;", lambda: vllm_batching(16)),
    ("N = {}, {} against {} s ({}x;", lambda: vllm_batching(4)),
    ("| demo conversation | {} | {} / {} | {} / {} | {} |", lambda: vllm_compare()),
    ("adds +{} MB after the prepare batch with flash attention off and +{} MB with it on, the fill as fast ({} against {} s)",
     lambda: [(r := load("attention-memory.json")["arms"])["off"]["growth_after_prepare_mb"],
              r["on"]["growth_after_prepare_mb"], r["off"]["fill_s"], r["on"]["fill_s"]]),
    ("the server's resident memory changed by {} MB after the first minute beyond the indexes' {} MB (target: at most "
     "+50), {} MB in heaps and buffers and {} MB in pages of mapped files", lambda: (lambda r: [
         f"{r['growth_beyond_data_mb']:+.1f}", f"{r['indexes_mb']['end'] - r['indexes_mb']['warm']:.1f}",
         f"{r['rss_by_kind']['anon']:+.1f}", f"{r['rss_by_kind']['file']:+.1f}"])(
        load("soak-cpu-fast.json")["results"]["serve"])),
    ("after the first minute of a 10-minute soak changed by {} MB beyond the indexes, on the CPU default by {} MB",
     lambda: [f"{load(n)['results']['serve']['growth_beyond_data_mb']:+.1f}"
              for n in ("soak-cpu-fast.json", "soak-cpu-ce.json")]),
    ("0 5xx, {} adds each stored once, search p95 {} s, {} MB beyond the indexes' {} MB; each minute's lowest sample rose "
     "from {} to {} MB by minute 18 and stayed between {} and {} MB to minute 29", lambda: (lambda r, lows: [
         f"{r['accepted']:,}", f"{r['routes']['search']['p95_s']:.2f}", f"{r['growth_beyond_data_mb']:+.1f}",
         f"{r['indexes_mb']['end'] - r['indexes_mb']['warm']:.1f}", f"{lows[0]:,.0f}", f"{lows[17]:,.0f}",
         f"{min(lows[17:]):,.0f}", f"{max(lows[17:]):,.0f}"])(
        (r := load("soak-cpu-fast-30min.json")["results"]["serve"]), minute_lows(r))),
    ("each minute's lowest sample rose from {} to {} MB over the nine minutes", lambda: (lambda lows: [
        f"{lows[0]:,.0f}", f"{lows[-1]:,.0f}"])(minute_lows(load("soak-cpu-fast.json")["results"]["serve"]))),
    ("what was allocated then and still held at the end, {} of {} MB were these arrays", lambda: (lambda r: [
        f"{r['top'][0]['bytes'] / 1e6:.1f}", f"{r['held_mb']:.1f}"])(load("heap-leaks-before.json"))),
    ("the largest sample {} MB above the first after warm-up while the 1.5B answers", lambda: (lambda r: [
        f"{r['max_mb'] - r['warm_mb']:.0f}"])(load("soak-cpu-ce.json")["results"]["serve"]["rss"])),
    ("after, {} MB (`benchmarks/results/heap-leaks.json`", lambda: [f"{load('heap-leaks.json')['held_mb']:.1f}"]),
    ("on the CPU default (`--config cpu-ce`) {} MB (`benchmarks/results/heap-leaks-cpu-ce.json`", lambda: [
        f"{load('heap-leaks-cpu-ce.json')['held_mb']:.1f}"]),
    ("the same answer to {} of {} LoCoMo dev questions with it on and off (F1 {}, standard error {};",
     lambda: (lambda d: [d["same_answers"], load("locomo-qa-flash.json")["arms"]["box-hits@1000 llm.flash_attn=true"][
         "questions"], f"{-d['mean']:+.1f}", d["se"]])(next(iter(load("locomo-qa-flash.json")["differences"].values())))),
    ("the median of the last minute's samples against the first minute's after warm-up: {} MB", lambda: [
        f"{load('soak-cpu-fast.json')['results']['serve']['rss']['trend_mb']:+.1f}"]),
    ("On the CPU default (cpu-ce, the same load, `benchmarks/results/soak-cpu-ce.json`, after the grammar fix): {} MB "
     "on {} GB (medians {} MB), search p95 {} s; each minute's lowest sample rose from {} to {} MB",
     lambda: (lambda r, lows: [f"{r['growth_beyond_data_mb']:+.1f}", f"{r['rss']['warm_mb'] / 1000:.1f}",
                               f"{r['rss']['trend_mb']:+.1f}", f"{r['routes']['search']['p95_s']:.2f}",
                               f"{lows[0]:,.0f}", f"{lows[-1]:,.0f}"])(
        (r := load("soak-cpu-ce.json")["results"]["serve"]), minute_lows(r))),
    ("in {} of {} comparisons with it on against {} off", lambda: (lambda a: [
        a["on"]["differ_by_order"] + a["on"]["differ_warm_vs_empty_cache"], 2 * a["on"]["texts"],
        a["off"]["differ_by_order"] + a["off"]["differ_warm_vs_empty_cache"]])(load("flash-history-0.5b.json")["arms"])),
    ("kept +{} MB without and +{} MB trimmed after each (`python benchmarks/heap_trim.py`)", lambda: [
        load("heap-trim.json")["arms"][a]["kept_mb"] for a in ("kept", "trimmed")]),
    ("`benchmarks/shape_memory.py`: {} calls +{} MB on, +{} MB off", lambda: [
        (r := load("shape-memory.json"))["calls"], r["arms"]["on"]["growth_mb_by_quarter"][-1],
        r["arms"]["off"]["growth_mb_by_quarter"][-1]]),
]


@pytest.mark.parametrize("phrase, figures", DOCS_FIGURES, ids=[f[0][:40] for f in DOCS_FIGURES])
def test_docs_rows_match_result_files(phrase, figures):
    assert normalise(phrase.format(*figures())) in normalise(docs_text())


def minute_lows(result: dict) -> list[float]:
    """A saved soak's lowest resident-memory sample in each whole minute of its load after the first, as
    benchmarks/soak.py prints them (evaluation.soak.minute_lows)."""
    from membox_local.evaluation.soak import minute_lows as lows

    return lows(result["rss_samples"], result["load"]["seconds"])


def events_fit(name: str, variant: str) -> str:
    """A variant's evidence recall at each budget, "a/b/c/d" (benchmarks/events_fit.py's saved run)."""
    row = load(name)["pooled"][variant]
    return "/".join(f"{row[f'budget={b}']:.1f}" for b in (250, 500, 1000, 2000))


def vllm_compare() -> list:
    row = json.loads((RESULTS / "compare-llamacpp-vllm.json").read_text())["conversations"]["maya-tom"]
    return [f"{row['labels']['agreement']:.3f}", f"{row['segmentation']['pk']:.3f}", f"{row['segmentation']['wd']:.3f}",
            row["boxes"]["A"], row["boxes"]["B"], row["extraction"]["boxes_same_span"]]


@pytest.mark.parametrize("phrase, figures", BENCHMARKS_FIGURES, ids=[f[0][:40] for f in BENCHMARKS_FIGURES])
def test_benchmarks_default_rows_match_result_files(phrase, figures):
    expected = normalise(phrase.format(*figures()))
    assert expected in normalise(BENCHMARKS.read_text()), f"BENCHMARKS.md should contain {expected!r}"


def test_benchmarks_readme_lists_every_script():
    """benchmarks/README.md is the index of the rerunnable measurements: every script in benchmarks/ has its line."""
    index = (REPO / "benchmarks" / "README.md").read_text()
    missing = [p.name for p in sorted((REPO / "benchmarks").iterdir())
               if p.suffix in (".py", ".sh") and f"`{p.name}`" not in index]
    assert not missing, f"benchmarks/README.md should say what these are for: {missing}"
