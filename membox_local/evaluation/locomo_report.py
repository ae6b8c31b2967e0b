"""The LoCoMo evaluation's report (evaluation/locomo.py): the summary of a run's per-question records, by mode
and conversation (retrieval recall and tokens, QA scores by category), and its Markdown tables."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Protocol

from ..config import Config
from .scorers import SCORERS, metric_names


class RunSettings(Protocol):
    """What the report reads of a run's settings (evaluation/locomo.py Settings)."""

    conversations: list[str]
    modes: list[str]
    k: list[int]
    budgets: list[int]


# LoCoMo's question categories, by number
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 4) if xs else None


def _retrieval_summary(recs: list[dict], s: RunSettings) -> dict[str, Any]:
    keys = [f"k={k}" for k in s.k] + [f"budget={b}" for b in s.budgets]
    return {
        "questions": len(recs),
        "questions_with_evidence": sum(bool(r["evidence"]) for r in recs),
        "recall": {key: _mean(r["recall"].get(key) for r in recs) for key in keys},
        "tokens": {key: _mean(r["tokens"].get(key) for r in recs) for key in keys},
        "qa_setting": {"recall": _mean(r.get("qa_recall") for r in recs),
                       "context_tokens": _mean(r["context_tokens"] for r in recs)},
    }


def _qa_summary(recs: list[dict]) -> dict[str, Any] | None:
    answered = [r for r in recs if r.get("scores")]
    if not answered:
        return None
    names = metric_names()
    by_cat = {}
    for cat in sorted({r["category"] for r in answered}):
        rs = [r for r in answered if r["category"] == cat]
        by_cat[str(cat)] = {"n": len(rs), **{m: _mean(r["scores"][m] for r in rs) for m in names}}
    return {"n": len(answered), "overall": {m: _mean(r["scores"][m] for r in answered) for m in names},
            "by_category": by_cat, "answer_s": _mean(r.get("answer_s") for r in answered)}


def summary_rows(recs: list[dict], modes: list[str]) -> dict[str, list[dict]]:
    """Records by table row: one per mode, or one per mode and answering model when several answered."""
    answerers = list(dict.fromkeys(r.get("answerer", "") for r in recs if r.get("scores")))
    rows: dict[str, list[dict]] = {}
    for mode in modes:
        rs = [r for r in recs if r["mode"] == mode]
        if len(answerers) > 1:
            for a in answerers:
                rows[f"{mode} · {a}"] = [r for r in rs if r.get("answerer", "") == a]
        else:
            rows[mode] = rs
    return rows


def summarise(recs: list[dict], s: RunSettings, cfg: Config, builds: dict, issues: dict) -> dict[str, Any]:
    modes, per_conv = {}, {}
    for row, rs in summary_rows(recs, s.modes).items():
        modes[row] = {**_retrieval_summary(rs, s), "qa": _qa_summary(rs)}
        for conv in s.conversations:
            cr = [r for r in rs if r["conversation"] == conv]
            per_conv.setdefault(conv, {})[row] = {**_retrieval_summary(cr, s), "qa": _qa_summary(cr)}
    return {"config": cfg.name, "llm": cfg.llm.model, "answer_llm": cfg.answer_llm().model,
            "embedder": cfg.embedder.model, "data": s.data,
            "settings": asdict(s), "scorers": list(SCORERS), "modes": modes, "per_conversation": per_conv,
            "evidence_issues": issues, "builds": builds}


def _fmt(x, pct: bool = True) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}" if pct else f"{x:.0f}"


def markdown(summary: dict) -> str:
    s = summary["settings"]
    keys = [f"k={k}" for k in s["k"]] + [f"budget={b}" for b in s["budgets"]]
    prefix = f" (first {s['sessions']} sessions of each, questions whose evidence is there)" if s["sessions"] else ""
    lines = [f"# LoCoMo: config {summary['config']} (LLM {summary['llm']}, embedder {summary['embedder']})", "",
             f"Conversations: {', '.join(s['conversations'])}{prefix}; categories {s['categories']}.", "",
             "## Evidence recall (%), mean context tokens in brackets", "",
             "| mode | questions | " + " | ".join(keys) + " |",
             "|---|---|" + "---|" * len(keys)]
    for mode, m in summary["modes"].items():
        cells = [f"{_fmt(m['recall'][k])} ({_fmt(m['tokens'][k], False)})" for k in keys]
        lines.append(f"| {mode} | {m['questions_with_evidence']} | " + " | ".join(cells) + " |")
    per_conv = summary.get("per_conversation", {})
    if len(per_conv) > 1 and s["budgets"]:
        budgets = [f"budget={b}" for b in s["budgets"]]
        lines += ["", "Per conversation, evidence recall (%) at each budget:", "",
                  "| conversation | questions | " + " | ".join(f"{mode} {'/'.join(str(b) for b in s['budgets'])}"
                                                         for mode in summary["modes"]) + " |",
                  "|---|---|" + "---|" * len(summary["modes"])]
        for conv, by_mode in per_conv.items():
            n = max(m["questions_with_evidence"] for m in by_mode.values())
            lines.append(f"| {conv} | {n} | " + " | ".join(
                "/".join(_fmt(by_mode[mode]["recall"][b]) for b in budgets) for mode in summary["modes"]) + " |")
    ev = summary["evidence_issues"]
    lines += ["", f"Evidence ids: {ev['split']} split from one string, {ev['malformed']} malformed and "
                  f"{ev['unknown']} naming no message (dropped); {ev['questions_without_evidence']} question(s) "
                  f"without usable evidence are left out of recall.", ""]
    if any(m["qa"] for m in summary["modes"].values()):
        names = metric_names()
        lines += [f"## QA (k={s['qa_k']}, budget {s['qa_budget']} tokens), scores x100", "",
                  "| mode | n | context tokens | " + " | ".join(names) + " | s/answer |",
                  "|---|---|---|" + "---|" * len(names) + "---|"]
        for mode, m in summary["modes"].items():
            qa = m["qa"]
            if not qa:
                continue
            lines.append(f"| {mode} | {qa['n']} | {_fmt(m['qa_setting']['context_tokens'], False)} | "
                         + " | ".join(_fmt(qa["overall"][n]) for n in names)
                         + f" | {'-' if qa['answer_s'] is None else format(qa['answer_s'], '.1f')} |")
        lines += ["", "By category (locomo_f1 / mem0_f1 / membox_f1):", "",
                  "| mode | " + " | ".join(f"{c} {CATEGORY_NAMES[c]}" for c in s["categories"]) + " |",
                  "|---|" + "---|" * len(s["categories"])]
        for mode, m in summary["modes"].items():
            if not m["qa"]:
                continue
            cells = []
            for c in s["categories"]:
                bc = m["qa"]["by_category"].get(str(c))
                cells.append("-" if not bc else f"{_fmt(bc['locomo_f1'])} / {_fmt(bc['mem0_f1'])} / "
                             f"{_fmt(bc['membox_f1'])} (n={bc['n']})")
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
        lines.append("")
    if not summary["builds"]:
        return "\n".join(lines) + "\n"
    lines += ["## Builds (memory tokens: whitespace tokens of box records + messages)", "",
              "| conversation | utterances | boxes | utt/box | memory/dialogue tokens | tokens/box | "
              "LLM calls/utt | LLM tokens/utt | LLM tokens/box | by stage (calls, tokens/utt) | build s |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for conv, b in summary["builds"].items():
        stages = "; ".join(f"{k} {v['calls']}, {v['tokens_per_utterance']}" for k, v in b["by_stage"].items())
        lines.append(f"| {conv} | {b['utterances']} | {b['boxes']} | {b['utterances_per_box']} | "
                     f"{b['token_ratio']} | {b['memory_tokens_per_box']} | {b['llm_calls_per_utterance']} | "
                     f"{b['llm_tokens_per_utterance']} | {b['llm_tokens_per_box']} | {stages or '-'} | "
                     f"{b['build_wall_s']:.0f} |")
    return "\n".join(lines) + "\n"


# ---- command line ---------------------------------------------------------------------------------
