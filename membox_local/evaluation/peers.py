"""The peers harness's report (benchmarks/peers, `python -m benchmarks.peers report`): figures of a saved peers
run, per system (pooled over its conversations: per message, build seconds, LLM calls and tokens; per question, answer seconds, context tokens, every scorer's mean, the LoCoMo F1 of each category,
evidence recall where the system gave sources), their markdown table, and the issue's targets below it: membox_local's
LoCoMo F1 above every peer's, and at least 3x fewer build seconds per message than mem0."""
from __future__ import annotations

from .locomo_report import CATEGORY_NAMES

LABELS = {"membox": "membox_local (default)", "mem0": "mem0", "amem": "A-Mem"}
SPEED_TARGET = 3.0  # build seconds per message: mem0's at least this many times membox_local's


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _per(total: float | None, n: int) -> float | None:
    return total / n if total is not None and n else None


def summarise_system(entry: dict) -> dict:
    """One system's pooled figures from its saved entry."""
    convs = [c for c in entry.get("conversations", {}).values() if "build" in c]
    builds = [c["build"] for c in convs]
    qs = [q for c in convs for q in c.get("questions", []) if "scores" in q]
    unanswered = sum(1 for c in convs for q in c.get("questions", []) if "scores" not in q)
    n = sum(b["messages"] for b in builds)

    def total(key):
        vals = [b.get(key) for b in builds]
        return None if not vals or any(v is None for v in vals) else sum(vals)

    out = {
        "status": entry.get("status", "?"), "reason": entry.get("reason", ""), "messages": n, "questions": len(qs),
        **{f"{key}_per_message": _per(total(key), n) for key in ("build_s", "llm_calls", "prompt_tokens",
                                                                   "completion_tokens")},
        "failed_messages": total("failed_messages") or 0,
        "degraded_messages": total("degraded_messages") or 0,
        "answer_s": _mean(q["answer_s"] for q in qs),
        "search_s": _mean(q.get("search_s") for q in qs),
        "context_tokens": _mean(q["context_tokens"] for q in qs),
        "recall": _mean(q.get("recall") for q in qs),
        "sources": entry.get("sources", ""),
        "errors": [c["error"] for c in entry.get("conversations", {}).values() if "error" in c],
        "questions_failed": unanswered,
        **{metric: _mean(q["scores"][metric] for q in qs) for metric in ("locomo_f1", "mem0_f1", "mem0_bleu1")},
    }
    out["by_category"] = {cat: {"questions": len(sel), "locomo_f1": _mean(q["scores"]["locomo_f1"] for q in sel)}
                          for cat in sorted({q["category"] for q in qs})
                          for sel in [[q for q in qs if q["category"] == cat]]}
    return out


def summarise(results: dict) -> dict[str, dict]:
    return {name: summarise_system(entry) for name, entry in results.get("systems", {}).items()}


def _f(x, digits: int = 2, pct: bool = False) -> str:
    return "-" if x is None else f"{100 * x:.1f}" if pct else f"{x:.{digits}f}"


def table(rows: dict[str, dict]) -> list[str]:
    cats = sorted({c for r in rows.values() for c in r["by_category"]})
    head = (["system", "build s/msg", "LLM calls/msg", "prompt tok/msg", "gen tok/msg", "failed (degraded) msgs",
             "questions", "answer s/q", "ctx tokens", "LoCoMo F1", "mem0 F1", "BLEU-1", "evidence recall"]
            + [f"F1 {c} {CATEGORY_NAMES.get(c, '')}" for c in cats])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in rows.items():
        label = LABELS.get(name, name)
        if r["status"] in ("unavailable", "failed"):
            lines.append(f"| {label} | {r['status']}: {r['reason'][:160]} |" + " |" * (len(head) - 2))
            continue
        cells = [label, _f(r["build_s_per_message"]), _f(r["llm_calls_per_message"]),
                 _f(r["prompt_tokens_per_message"], 0), _f(r["completion_tokens_per_message"], 1),
                 f"{r['failed_messages']} ({r['degraded_messages']})",
                 str(r["questions"]) + (f" (+{r['questions_failed']} failed)" if r["questions_failed"] else ""),
                 _f(r["answer_s"]), _f(r["context_tokens"], 0), _f(r["locomo_f1"], pct=True),
                 _f(r["mem0_f1"], pct=True), _f(r["mem0_bleu1"], pct=True), _f(r["recall"], pct=True)]
        cells += [_f(r["by_category"].get(c, {}).get("locomo_f1"), pct=True) for c in cats]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def targets(rows: dict[str, dict]) -> list[str]:
    """The issue's two targets, met or missed and by how much."""
    ours = rows.get("membox")
    if not ours or ours["locomo_f1"] is None:
        return ["- targets: no membox_local row to compare with"]
    out = []
    for name, r in rows.items():
        if name == "membox" or r["locomo_f1"] is None:
            continue
        gap = 100 * (ours["locomo_f1"] - r["locomo_f1"])
        out.append(f"- LoCoMo F1, membox_local {_f(ours['locomo_f1'], pct=True)} against {LABELS.get(name, name)} "
                   f"{_f(r['locomo_f1'], pct=True)}: {'met' if gap > 0 else 'missed'} ({gap:+.1f} points)")
    mem0 = rows.get("mem0")
    if mem0 and mem0["build_s_per_message"] and ours["build_s_per_message"]:
        ratio = mem0["build_s_per_message"] / ours["build_s_per_message"]
        out.append(f"- build seconds per message, mem0 / membox_local = {ratio:.2f}x (target {SPEED_TARGET:.0f}x): "
                   f"{'met' if ratio >= SPEED_TARGET else 'missed'}")
    return out


def markdown(results: dict) -> str:
    convs, rows = results.get("conversations", {}), summarise(results)
    lines = [f"Peers on the same models: {', '.join(convs)} "
             f"({sum(c['messages'] for c in convs.values())} messages, "
             f"{sum(c['questions'] for c in convs.values())} questions), budget {results.get('budget_tokens')} tokens, "
             f"{results.get('date', '')}, {results.get('machine', {}).get('cpu', '')}", ""]
    lines += table(rows) + [""] + targets(rows)
    notes = [f"- evidence recall of {LABELS.get(n, n)}: {r['sources']}" for n, r in rows.items()
             if r["recall"] is not None and r["sources"]]
    errors = [f"- {LABELS.get(n, n)}: {e}" for n, r in rows.items() for e in r["errors"]]
    return "\n".join(lines + notes + errors) + "\n"


# what makes two runs the same slice and settings (a run's "settings", as `run` saved them), beside the models
SLICE_SETTINGS = ("sessions", "messages", "questions", "categories", "config", "overrides", "budget", "k", "peer_k",
                  "threads", "n_ctx", "max_tokens")


def _same_settings(first: dict, other: dict) -> None:
    a, b = first.get("settings", {}), other.get("settings", {})
    pairs = [(key, first.get(key), other.get(key)) for key in ("budget_tokens", "answer_model", "build_model",
                                                                "embedder")]
    for key, x, y in pairs + [(f"settings.{key}", a.get(key), b.get(key)) for key in SLICE_SETTINGS]:
        if x != y:
            raise SystemExit(f"these runs differ in {key}: {x} against {y}; "
                             "only runs of the same slice and settings share a table")


def merge(runs: list[dict]) -> dict:
    """Runs of the same slice and settings as one table. Runs of the same conversations (say one system per run,
    one after another): every run's systems, a later run's row of the same system replacing an earlier one. Runs
    of other conversations (say conv-26 in one, conv-30 in another): each system's conversations pooled, so every
    system must be in every run (a row pooled over fewer conversations than another's would not compare)."""
    first = runs[0]
    for other in runs[1:]:
        _same_settings(first, other)
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault(tuple(sorted(run.get("conversations", {}))), []).append(run)
    seen: set[str] = set()
    for convs in groups:
        if seen & set(convs):
            raise SystemExit(f"conversation(s) {sorted(seen & set(convs))} are in two runs of different "
                             "conversations; pool runs of disjoint conversations")
        seen |= set(convs)
    merged = {**first, "systems": {}, "conversations": {}, "commands": [run.get("command", "") for run in runs]}
    pooled: list[dict] = []
    for group in groups.values():
        systems: dict[str, dict] = {}
        for run in group:
            systems.update(run.get("systems", {}))
            merged["conversations"].update(run.get("conversations", {}))
        pooled.append(systems)
    names = set(pooled[0])
    for systems in pooled[1:]:
        if set(systems) != names:
            raise SystemExit(f"runs of other conversations measured other systems ({sorted(names)} against "
                             f"{sorted(systems)}); every system must be in every conversation's runs")
    for name in pooled[0]:
        entries = [systems[name] for systems in pooled]
        merged["systems"][name] = {**entries[0], "conversations": {
            conv: data for entry in entries for conv, data in entry.get("conversations", {}).items()}}
        failed = [e for e in entries if e.get("status") in ("unavailable", "failed")]
        if failed:
            merged["systems"][name].update(status=failed[0]["status"], reason=failed[0].get("reason", ""))
    return merged
