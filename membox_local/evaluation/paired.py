"""Runs compared question by question: LoCoMo QA arm by arm on the questions every arm answered
(benchmarks/qa_paired.py composes it), LongMemEval modes and runs on the answerable questions both hold
(benchmarks/longmemeval_report.py compare / versus).

An arm is a retrieval mode at an answering budget ("box-hits@1000"), followed by the run's `--set` keys, so two
runs that differ only there are two arms. Each folder is a `membox eval locomo ... --out DIR` run (its
questions.jsonl); runs stopped early count the questions they finished.
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

SCORES = ("locomo_f1", "mem0_f1", "mem0_bleu1")


def overrides(folder: Path) -> str:
    """The run's `--set` config keys as " key=value ..." ("" when none, or no settings.json)."""
    try:
        keys = json.loads((folder / "settings.json").read_text())["fixed"].get("overrides") or {}
    except (OSError, ValueError, KeyError, AttributeError):
        return ""
    return "".join(f" {k}={out_of_fold(v)}" for k, v in sorted(keys.items()))


def out_of_fold(value) -> str:
    """A `--set` value as an arm names it: a fold's model (`membox fit evidence`'s runs/evidence/*-fold<i>.*, each
    conversation answered with the model fitted without it) is one arm, "out-of-fold", whichever fold it is."""
    return "out-of-fold" if isinstance(value, str) and re.search(r"-fold\d+\.[a-z]+$", value) else json.dumps(value)


def arms(folders: list[Path]) -> dict[str, dict[tuple[str, int], dict]]:
    """arm ("mode@budget", followed by the run's `--set` keys: two runs that differ only there are two arms) ->
    (conversation, question id) -> its record (answered questions only)."""
    out: dict[str, dict[tuple[str, int], dict]] = {}
    for folder in folders:
        keys = overrides(folder)
        for line in (folder / "questions.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec.get("scores"):
                out.setdefault(f"{rec['mode']}@{rec['qa_budget']}{keys}", {})[(rec["conversation"], rec["qid"])] = rec
    return out


def saved_arms(path: Path) -> dict[str, dict[tuple[str, int], dict]]:
    """The arms of a result qa_paired saved (--save): per question its scores only (no prediction, so "the same
    answer" is never counted against them; context tokens, evidence and seconds are the arm's means)."""
    data = json.loads(Path(path).read_text())
    out: dict[str, dict[tuple[str, int], dict]] = {}
    for arm, means in data["arms"].items():
        for q in data["per_question"]:
            if arm in q:
                out.setdefault(f"{arm} (saved {data['date']})", {})[(q["conversation"], q["qid"])] = {
                    "scores": q[arm], "category": q["category"], "context_tokens": means["context_tokens"],
                    "qa_recall": means["qa_recall"] / 100, "answer_s": means["answer_s"], "prediction": None}
    return out


def paired(by_arm: dict[str, dict[tuple[str, int], dict]]) -> tuple[list[tuple[str, int]], dict[str, dict]]:
    """The questions every arm answered, and each arm's means over them."""
    common = sorted(set.intersection(*(set(q) for q in by_arm.values()))) if by_arm else []
    table = {}
    for arm, recs in by_arm.items():
        rows = [recs[q] for q in common]
        n = len(rows) or 1
        table[arm] = {"questions": len(rows), **{s: round(100 * sum(r["scores"][s] for r in rows) / n, 1) for s in SCORES},
                      "qa_recall": round(100 * sum(r.get("qa_recall") or 0 for r in rows) / n, 1),
                      "context_tokens": round(sum(r["context_tokens"] for r in rows) / n),
                      "answer_s": round(sum(r.get("answer_s") or 0 for r in rows) / n, 1)}
    return common, table


def differences(by_arm: dict[str, dict[tuple[str, int], dict]], common: list[tuple[str, int]]) -> dict[str, dict]:
    """"A - B" -> the mean of A's LoCoMo F1 less B's over the common questions, its standard error (x100), and how
    many of the two arms' answers are the same text (a setting that should not change answers: how many it did)."""
    out = {}
    arms = list(by_arm)
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            d = [100 * (by_arm[a][q]["scores"]["locomo_f1"] - by_arm[b][q]["scores"]["locomo_f1"]) for q in common]
            se = statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else None
            same = sum(by_arm[a][q].get("prediction") is not None
                       and by_arm[a][q].get("prediction") == by_arm[b][q].get("prediction") for q in common)
            out[f"{a} - {b}"] = {"mean": round(statistics.fmean(d), 1) if d else None,
                                 "se": None if se is None else round(se, 1), "same_answers": same}
    return out


def table_lines(table: dict[str, dict]) -> list[str]:
    """The arms as a Markdown table."""
    out = ["| arm | questions | LoCoMo F1 | mem0 F1 | BLEU-1 | evidence in context | tokens | s per answer |",
           "|---|---|---|---|---|---|---|---|"]
    return out + [f"| {arm} | {t['questions']} | {t['locomo_f1']} | {t['mem0_f1']} | {t['mem0_bleu1']} | "
                  f"{t['qa_recall']} | {t['context_tokens']} | {t['answer_s']} |" for arm, t in table.items()]


def per_question(by_arm: dict[str, dict[tuple[str, int], dict]], common: list[tuple[str, int]]) -> list[dict]:
    """Per common question its conversation, id, category and each arm's scores (no question, answer or context)."""
    first = next(iter(by_arm))
    return [{"conversation": c, "qid": q, "category": by_arm[first][(c, q)]["category"],
             **{arm: by_arm[arm][(c, q)]["scores"] for arm in by_arm}} for c, q in common]


# ---- LongMemEval: two modes of one run (compare), two runs of the same questions (versus) ----------------------

def compare(records: list[dict], a: str, b: str, budget: int = 1000) -> list[dict]:
    """Rows (part, questions, judged right with a, with b, a's and b's mean recall) over the answerable questions both
    modes answered: where a's context held more of the evidence turns than b's, as much, less."""
    key = f"recall@{budget}"
    by_qid: dict[str, dict[str, dict]] = {}
    for r in records:
        if not r.get("abstention") and key in r and r.get("judge") is not None:
            by_qid.setdefault(r["qid"], {})[r["mode"]] = r
    parts: dict[str, list[tuple[dict, dict]]] = {f"{a} more": [], "as much": [], f"{b} more": []}
    for modes in by_qid.values():
        if a in modes and b in modes:
            ra, rb = modes[a][key], modes[b][key]
            parts[f"{a} more" if ra > rb else f"{b} more" if rb > ra else "as much"].append((modes[a], modes[b]))
    rows = []
    for part, pairs in parts.items():
        n = len(pairs)
        rows.append({"part": part, "questions": n, f"{a} right": sum(x["judge"] for x, _ in pairs),
                     f"{b} right": sum(y["judge"] for _, y in pairs),
                     f"{a} recall": sum(x[key] for x, _ in pairs) / n if n else 0.0,
                     f"{b} recall": sum(y[key] for _, y in pairs) / n if n else 0.0})
    return rows


VERSUS_KEYS = ("session_any@5", "turn_any@5", "recall@500", "recall@1000", "recall@2000")


def versus(new: list[dict], old: list[dict], modes: list[str]) -> list[dict]:
    """Per mode, over the answerable questions both runs hold: each run's mean of VERSUS_KEYS (x100) and how many
    questions' recall@1000 differs between them."""
    def index(records):
        return {(r["qid"], r["mode"]): r for r in records if not r.get("abstention") and "recall@1000" in r}

    a, b = index(new), index(old)
    rows = []
    for mode in modes:
        both = sorted(q for (q, m) in a if m == mode and (q, mode) in b)
        for name, runs in (("new", a), ("old", b)):
            rs = [runs[(q, mode)] for q in both]
            rows.append({"mode": mode, "run": name, "questions": len(both),
                         **{k: round(100 * sum(r[k] for r in rs) / len(rs), 1) if rs else 0.0 for k in VERSUS_KEYS},
                         "recall@1000 differs": sum(a[(q, mode)]["recall@1000"] != b[(q, mode)]["recall@1000"]
                                                    for q in both)})
    return rows


def answerers_report(runs: list[str], config: str, budget: int, save: str | None = None) -> str:
    """One Markdown QA table over LoCoMo run folders (or saved .jsonl.gz results) of several answering models
    (benchmarks/answer_models.py report): each model's scores on the questions every model answered; a run
    folder named "dates-off" counts as another answerer ("dates as said"). `save`: those answers written there
    (ids and scores, no dataset text), each keeping its date where its scores are unchanged."""
    import time

    from ..config import load_config
    from .locomo import Settings, _read_records, markdown, summarise
    from .results import _load, scores_only, write_records

    records = {}
    for src in map(Path, runs):
        off = "dates-off" in src.name
        for (conv, mode, qid, who), r in _read_records(src if src.suffix == ".gz" else src / "questions.jsonl").items():
            if r.get("scores"):
                r = dict(r, answerer=f"{who} (dates as said)" if off else who)
                records[(conv, mode, qid, r["answerer"])] = r
    answerers = list(dict.fromkeys(k[3] for k in records))
    on = [w for w in answerers if not w.endswith("(dates as said)")]
    common = set.intersection(*({k[:3] for k in records if k[3] == w} for w in on)) if on else set()
    convs = sorted({k[0] for k in common})
    s = Settings(config=config, conversations=convs, modes=["box-hits"], k=[10], budgets=[budget], qa_k=10,
                 qa_budget=budget, answer_models=answerers)
    summary = summarise([r for k, r in records.items() if k[:3] in common], s, load_config(config), {},
                        {"split": 0, "malformed": 0, "unknown": 0, "questions_without_evidence": 0})
    out = [f"<!-- {len(common)} questions answered by every model ({', '.join(on)}) in {', '.join(convs)}; "
           f"pooled from {' '.join(runs)} on {time.strftime('%Y-%m-%d')} -->",
           markdown(summary).split("## QA", 1)[1].join(["## QA", ""])]
    if save:
        _, before = _load(Path(save)) if Path(save).exists() else ({}, {})
        today, kept = time.strftime("%Y-%m-%d"), {}
        for key, r in records.items():
            if key[:3] in common:
                new, old = scores_only(r), before.get(key, {})
                kept[key] = {**new, "date": old["date"] if {**old, "date": None} == {**new, "date": None} else today}
        write_records(save, kept)
        out.append(f"<!-- saved {len(kept)} answers to {save} -->")
    return "\n".join(out)
