"""LoCoMo QA of several runs compared on the questions every one of them answered: each (mode, answering budget)
an arm, scored on the same questions (runs that were stopped early count the questions they finished).

    python benchmarks/qa_paired.py runs/qa-500-conv-30 runs/qa-1000-conv-30 runs/qa-500-conv-26 runs/qa-1000-conv-26 \
        --save benchmarks/results/locomo-qa-budgets.json

Each folder is a `membox eval locomo ... --out DIR` run (its questions.jsonl). The table: per arm the questions, the
LoCoMo F1, mem0's F1 and BLEU-1, evidence recall in the context, context tokens and seconds per answer (means); then
each pair of arms' LoCoMo F1 difference, question by question, with its standard error, and how many answers
the two give word for word. Runs that differ only in `--set` keys (e.g. `--set llm.flash_attn=true`) are two arms,
named by those keys. The saved JSON holds per question its conversation, id, category and each arm's scores (no question, answer or context
text).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

SCORES = ("locomo_f1", "mem0_f1", "mem0_bleu1")


def overrides(folder: Path) -> str:
    """The run's `--set` config keys as " key=value ..." ("" when none, or no settings.json)."""
    try:
        keys = json.loads((folder / "settings.json").read_text())["fixed"].get("overrides") or {}
    except (OSError, ValueError, KeyError, AttributeError):
        return ""
    return "".join(f" {k}={json.dumps(v)}" for k, v in sorted(keys.items()))


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
            same = sum(by_arm[a][q].get("prediction") == by_arm[b][q].get("prediction") for q in common)
            out[f"{a} - {b}"] = {"mean": round(statistics.fmean(d), 1) if d else None,
                                 "se": None if se is None else round(se, 1), "same_answers": same}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, nargs="+", help="run folders of `membox eval locomo --out`")
    p.add_argument("--save", type=Path)
    a = p.parse_args(argv)
    by_arm = arms(a.runs)
    common, table = paired(by_arm)
    print(f"{len(common)} questions answered by every arm")
    print("| arm | questions | LoCoMo F1 | mem0 F1 | BLEU-1 | evidence in context | tokens | s per answer |")
    print("|---|---|---|---|---|---|---|---|")
    for arm, t in table.items():
        print(f"| {arm} | {t['questions']} | {t['locomo_f1']} | {t['mem0_f1']} | {t['mem0_bleu1']} | "
              f"{t['qa_recall']} | {t['context_tokens']} | {t['answer_s']} |")
    diffs = differences(by_arm, common)
    for pair, d in diffs.items():
        print(f"{pair}: {d['mean']:+} F1, standard error {d['se']}; the same answer to {d['same_answers']} of "
              f"{len(common)}")
    if a.save:
        per_q = [{"conversation": c, "qid": q, "category": by_arm[next(iter(by_arm))][(c, q)]["category"],
                  **{arm: by_arm[arm][(c, q)]["scores"] for arm in by_arm}} for c, q in common]
        a.save.write_text(json.dumps({"command": "python benchmarks/qa_paired.py " + " ".join(argv or sys.argv[1:]),
                                      "date": time.strftime("%Y-%m-%d"), "arms": table, "differences": diffs,
                                      "per_question": per_q},
                                     indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
