"""LoCoMo results kept in the repository: each question's scores without the dataset's text.

On a small CPU a whole-conversation LLM build takes about an hour, so the six dev conversations do not fit
one working session, and run folders (runs/) do not outlive it. `save_results` copies what a run measured
into a committed file, one line per (conversation, mode, question) with ids, category, recall, context tokens
and QA scores, never the question, gold answer, prediction or messages (the data's licence keeps them out),
plus each conversation's build statistics and the date. `pooled_summary` summarises every conversation
in such a file as one run would, so a table over conversations measured on different days is pooled from
the records themselves, not from rounded figures.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from ..config import load_config
from ..ingest import InputError
from .locomo import Settings, _questions, _read_records, load_samples, summarise

KEEP = ("conversation", "mode", "qid", "category", "evidence", "recall", "tokens", "qa_k", "qa_budget",
        "context_tokens", "qa_recall", "scores", "answer_s", "answerer")
FIXED = ("config", "k", "budgets", "categories", "sessions")  # what every saved run must share


def scores_only(rec: dict) -> dict:
    return {k: rec[k] for k in KEEP if rec.get(k) is not None}


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".gz").removesuffix(".jsonl") + ".json")


def _load(path: Path) -> tuple[dict[str, Any], dict[tuple, dict]]:
    """The file's settings and builds, and its records (a .jsonl.gz file is read through gzip)."""
    meta_path = _meta_path(path)
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return meta, _read_records(path)


def save_results(run_dirs: list[str | Path], path: str | Path, date: str) -> dict[str, Any]:
    """Add the records and build statistics of finished run folders to the results file `path` (.jsonl, or
    .jsonl.gz compressed; its settings and builds go beside it as .json). A record already there for the same
    conversation, mode and question is replaced (it keeps its date if nothing changed). Runs must share the
    file's settings (config, k, budgets, categories)."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:  # runs saved side by side wait their turn
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _save(run_dirs, path, date)


def _save(run_dirs: list[str | Path], path: Path, date: str) -> dict[str, Any]:
    meta, records = _load(path)
    for folder in map(Path, run_dirs):
        summary_path = folder / "summary.json"
        if not summary_path.exists():
            raise InputError(f"{folder}: no summary.json; finish the run (rerun its command) before saving it")
        summary = json.loads(summary_path.read_text())
        fixed = {k: summary["settings"][k] for k in FIXED}
        if meta.get("fixed", fixed) != fixed:
            raise InputError(f"{folder}: settings {fixed} differ from those of {path} {meta['fixed']}; "
                             f"save it to another results file")
        meta["fixed"] = fixed
        got = _read_records(folder / "questions.jsonl")
        for key, rec in got.items():
            if key[0] in summary["settings"]["conversations"]:
                new = scores_only(rec)
                old = records.get(key, {})
                records[key] = {**new, "date": old["date"] if {**old, "date": None} == {**new, "date": None} else date}
        for conv, stats in summary.get("builds", {}).items():
            old = meta.setdefault("builds", {}).get(conv, {})
            meta["builds"][conv] = {**stats, "date": old["date"] if {**old, "date": None} == {**stats, "date": None}
                                    else date}
    write_records(path, records)
    _meta_path(path).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def write_records(path: str | Path, records: dict[tuple, dict]) -> None:
    """Records (already `scores_only`, with their date) as the results file, sorted by key; .gz: the same records
    give the same bytes."""
    path = Path(path)
    lines = [json.dumps(records[key], sort_keys=True, separators=(",", ":")) for key in sorted(records)]
    text = "\n".join(lines) + "\n"
    if path.suffix == ".gz":  # mtime 0
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)


def pooled_summary(path: str | Path, data: str | Path, modes: list[str] | None = None,
                   conversations: list[str] | None = None) -> dict[str, Any]:
    """One summary (as `membox eval locomo` writes) over the saved records of `path`. The data file is read
    only to count the evidence ids each question dropped; nothing is built or retrieved."""
    path = Path(path)
    meta, records = _load(path)
    if not records:
        raise InputError(f"{path}: no saved records; save run folders first (membox_local.evaluation.results.save_results)")
    fixed = meta["fixed"]
    have = list(dict.fromkeys(key[0] for key in records))
    convs = conversations or have
    missing = [c for c in convs if c not in have]
    if missing:
        raise InputError(f"{path} holds no records of {missing}; it has {have}")
    from ..retrieval import RETRIEVERS

    order = {m: n for n, m in enumerate(RETRIEVERS)}  # registration order, as a run lists them
    all_modes = sorted({key[1] for key in records if key[0] in convs}, key=lambda m: (order.get(m, len(order)), m))
    s = Settings(data=str(data), config=fixed["config"], conversations=convs, modes=modes or all_modes,
                 k=fixed["k"], budgets=fixed["budgets"], categories=fixed["categories"],
                 sessions=fixed["sessions"], qa=False, out=str(path))
    issues = {"split": 0, "malformed": 0, "unknown": 0, "questions_without_evidence": 0}
    from ..ingest import load_locomo

    for sample in load_samples(s.data, convs):
        known = {m.message_id for m in load_locomo(s.data, [sample["sample_id"]])
                 if not s.sessions or int(m.session) <= s.sessions}
        _questions(sample, s, known, issues)
    chosen = [r for key, r in records.items() if key[0] in convs and key[1] in s.modes]
    answered = {(r.get("qa_k"), r.get("qa_budget")) for r in chosen if r.get("scores")}
    if len(answered) > 1:
        raise InputError(f"{path}: its answers were given with different k and budgets {sorted(answered)}; "
                         f"pool fewer modes or conversations (--modes)")
    if answered:
        s.qa_k, s.qa_budget = answered.pop()
    builds = {c: b for c, b in meta.get("builds", {}).items() if c in convs}
    summary = summarise(chosen, s, load_config(s.config), builds, issues)
    summary["dates"] = {c: sorted({r["date"] for r in chosen if r["conversation"] == c}) for c in convs}
    return summary
