"""`membox eval segmentation`: the Loom's continue/new-box decision scored against human topic boundaries.

Each dialogue's turns go through `loom.decide`, the same online rule the Loom uses (min-context rule and
max box size and its split rule included, no look-ahead), one session per dialogue. Scoring follows the SuperDialseg
convention (see ../shared/data/segmentation/README.md): per dialogue a 0/1 string with 1 on the last turn of
each segment (the final turn always 0), nltk-style Pk and WindowDiff with k = max(2, round(turns / reference
segments / 2)), binary boundary F1 (0 when neither side has a boundary, as sklearn's f1_score), macro-averaged.
Speakers missing from the data (DialSeg711) are filled A/B by turn order.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..config import DEFAULT_CONFIG, Config, LoomConfig, load_config
from ..ingest import InputError, read_json
from ..judges import JUDGES, Decision, Judge, make_judge
from ..records import Message
from ..requests import Step
from ..argtypes import count


@dataclass
class Dialogue:
    id: str
    messages: list[Message]
    boundaries: list[int]  # indices of turns that start a new segment


# ---- data -----------------------------------------------------------------------------------------
def load_dialogues(path: str | Path, limit: int | None = None) -> list[Dialogue]:
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a list of {{id, turns, boundaries}} dialogues")
    out = []
    for n, rec in enumerate(data[:limit] if limit else data):
        where = f"{path} dialogue {n}"
        if not isinstance(rec, dict) or not isinstance(rec.get("turns"), list) or \
                not isinstance(rec.get("boundaries"), list):
            raise InputError(f"{where}: needs 'id', 'turns' (list) and 'boundaries' (list)")
        did = str(rec.get("id", n))
        turns = rec["turns"]
        msgs = []
        for i, t in enumerate(turns):
            if not isinstance(t, dict) or not isinstance(t.get("text"), str) or not t["text"].strip():
                raise InputError(f"{where} ({did}) turn {i}: needs a non-empty string 'text'")
            speaker = t.get("speaker") or "AB"[i % 2]  # unknown speakers: alternate A/B
            msgs.append(Message(did, str(i), str(speaker), t["text"], "1", "", i))
        bounds = rec["boundaries"]
        if any(not isinstance(b, int) or not 0 < b < len(turns) for b in bounds) or bounds != sorted(set(bounds)):
            raise InputError(f"{where} ({did}): boundaries must be increasing turn indices in 1..{len(turns) - 1}, "
                             f"got {bounds}")
        if len(turns) < 2:
            raise InputError(f"{where} ({did}): needs at least two turns")
        out.append(Dialogue(did, msgs, list(bounds)))
    if not out:
        raise InputError(f"{path}: no dialogues")
    return out


# ---- metrics --------------------------------------------------------------------------------------
def boundary_string(boundaries: Sequence[int], n_turns: int) -> str:
    """0/1 string, 1 on the last turn of each segment; the final turn is always 0."""
    marks = ["0"] * n_turns
    for b in boundaries:
        marks[b - 1] = "1"
    return "".join(marks)


def window_size(ref: str) -> int:
    return max(2, round(len(ref) / (ref.count("1") + 1) / 2))


def pk(ref: str, hyp: str, k: int) -> float:
    """Probability that the ends of a k-wide window disagree on being in one segment (nltk.metrics.segmentation.pk)."""
    _check(ref, hyp, k)
    n = len(ref) - k + 1
    return sum(("1" in ref[i:i + k]) != ("1" in hyp[i:i + k]) for i in range(n)) / n


def windowdiff(ref: str, hyp: str, k: int) -> float:
    """Share of k-wide windows whose boundary counts differ (nltk.metrics.segmentation.windowdiff)."""
    _check(ref, hyp, k)
    n = len(ref) - k + 1
    return sum(ref[i:i + k].count("1") != hyp[i:i + k].count("1") for i in range(n)) / n


def _check(ref: str, hyp: str, k: int) -> None:
    if len(ref) != len(hyp):
        raise ValueError(f"segmentations differ in length: {len(ref)} vs {len(hyp)}")
    if not 0 < k <= len(ref):
        raise ValueError(f"window {k} must be in 1..{len(ref)}")


def boundary_f1(ref: str, hyp: str) -> float:
    tp = sum(r == h == "1" for r, h in zip(ref, hyp))
    pred, gold = hyp.count("1"), ref.count("1")
    return 2 * tp / (pred + gold) if pred + gold else 0.0


def score(ref_bounds: Sequence[int], hyp_bounds: Sequence[int], n_turns: int) -> dict[str, float]:
    ref, hyp = boundary_string(ref_bounds, n_turns), boundary_string(hyp_bounds, n_turns)
    k = window_size(ref)
    k_eff = min(k, n_turns)
    return {"pk": pk(ref, hyp, k_eff), "wd": windowdiff(ref, hyp, k_eff), "f1": boundary_f1(ref, hyp), "k": k_eff}


# ---- the online segmenter -------------------------------------------------------------------------
def segment(lc: LoomConfig, judge: Judge, messages: Sequence[Message], progress=None) -> Step:
    """File `messages` one by one with the Loom's rule; returns one Decision per message. `progress(1)` is called
    after each decision."""
    from ..loom import decide

    decisions: list[Decision] = []
    start = 0  # index of the open box's first message
    for i, m in enumerate(messages):
        d = yield from decide(lc, judge, messages[start:i], m,
                              messages[max(0, i - judge.history):i] if judge.history else (),
                              [x.score for x in decisions[start:i]])
        if d.split_at is not None:  # the full box is cut: the message at the cut opens the box `m` continues
            start += d.split_at
            decisions[start] = Decision(False, "split", decisions[start].score)
        elif not d.continues:
            start = i
        decisions.append(d)
        if progress:
            progress(1)
    return decisions


def hyp_boundaries(decisions: Sequence[Decision]) -> list[int]:
    return [i for i, d in enumerate(decisions) if i > 0 and not d.continues]


def run_segmenter(cfg: Config, conversations: dict[str, Sequence[Message]], embedder=None, backend=None,
                  judge: Judge | None = None, progress=None) -> tuple[dict[str, list[Decision]], dict[str, Any]]:
    """Drive `segment` over many conversations together (embeddings batched across them).

    Returns decisions per conversation and run facts (wall time, LLM calls and tokens)."""
    from ..execution.driver import Driver
    from ..embed import CachedEmbedder, make_embedder
    from ..store import Store

    judge = judge or make_judge(cfg.loom)
    store = Store(":memory:")  # embedding cache and LLM usage for this run only
    try:
        emb = CachedEmbedder(embedder or make_embedder(cfg.embedder), store)
        if backend is None and judge.uses_llm:
            from ..backends import make_backend

            backend = lambda: make_backend(cfg.llm)  # noqa: E731  (loaded on first use)
        driver = Driver(store, emb, backend)
        t0 = time.time()
        steps = {cid: (cid, segment(cfg.loom, judge, msgs, progress)) for cid, msgs in conversations.items()}
        decisions = driver.drive_many(steps)
        wall = time.time() - t0
        usage = store.usage_by_stage()
    finally:
        store.close()
    n = sum(len(m) for m in conversations.values())
    return decisions, {"wall_s": round(wall, 3), "messages": n, "s_per_message": round(wall / max(n, 1), 5),
                       "llm_usage": usage, "embedded_texts": emb.computed}


def evaluate(cfg: Config, dialogues: Sequence[Dialogue], embedder=None, backend=None,
             progress=None) -> tuple[list[dict], dict]:
    decisions, facts = run_segmenter(cfg, {d.id: d.messages for d in dialogues}, embedder, backend, progress=progress)
    rows = []
    for d in dialogues:
        dec = decisions[d.id]
        hyp = hyp_boundaries(dec)
        rows.append({"id": d.id, "turns": len(d.messages), "ref": d.boundaries, "hyp": hyp,
                     **score(d.boundaries, hyp, len(d.messages)),
                     "labels": [x.label for x in dec],
                     "scores": [None if x.score is None else round(x.score, 4) for x in dec]})
    summary = summarise(rows)
    summary.update(facts)
    return rows, summary


def summarise(rows: Sequence[dict]) -> dict[str, Any]:
    n = len(rows)
    macro = {m: round(sum(r[m] for r in rows) / n, 4) for m in ("pk", "wd", "f1")}
    turns = sum(r["turns"] for r in rows)
    boxes = sum(len(r["hyp"]) + 1 for r in rows)
    return {"dialogues": n, **macro, "hyp_boundaries_per_dialogue": round(sum(len(r["hyp"]) for r in rows) / n, 3),
            "ref_boundaries_per_dialogue": round(sum(len(r["ref"]) for r in rows) / n, 3),
            "messages_per_box": round(turns / boxes, 3)}


def box_sizes(decisions: dict[str, Sequence[Decision]]) -> dict[str, float]:
    """Mean messages per box for each conversation (a box opens at every decision that does not continue)."""
    return {cid: round(len(dec) / max(1, sum(not d.continues for d in dec)), 2) for cid, dec in decisions.items()}


# ---- command line ---------------------------------------------------------------------------------
def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    import tomllib

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise InputError(f"--set {item!r}: expected section.key=value, e.g. loom.min_box_messages=1")
        try:
            out[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = value  # a bare string
    return out


def write_report(out: Path, rows: Sequence[dict], summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "dialogues.jsonl", "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    lc = summary["loom"]
    md = [
        f"# Topic segmentation: {summary['data']}",
        "",
        f"judge `{lc['judge']}`, config `{summary['config']}`, min_box_messages {lc['min_box_messages']}, "
        f"max_box_messages {lc['max_box_messages']}, {summary['dialogues']} dialogues",
        "",
        "| Pk | WD | F1 | boundaries (hyp / ref per dialogue) | messages per box | s per message |",
        "|---|---|---|---|---|---|",
        f"| {summary['pk']:.3f} | {summary['wd']:.3f} | {summary['f1']:.3f} | "
        f"{summary['hyp_boundaries_per_dialogue']} / {summary['ref_boundaries_per_dialogue']} | "
        f"{summary['messages_per_box']} | {summary['s_per_message']} |",
        "",
        f"Command: `{summary['command']}`",
        "",
    ]
    (out / "summary.md").write_text("\n".join(md), encoding="utf-8")


def cmd_segmentation(args) -> int:
    overrides = _parse_set(args.set or [])
    if args.judge:
        overrides["loom.judge"] = args.judge
    cfg = load_config(args.config, overrides)
    make_judge(cfg.loom)  # an unknown judge or a bad content vector fails here, before any model loads
    dialogues = load_dialogues(args.data, args.limit)
    from tqdm import tqdm

    with tqdm(total=sum(len(d.messages) for d in dialogues), desc=f"segmentation ({cfg.loom.judge})", unit="turn",
              dynamic_ncols=True, file=sys.stderr, disable=args.quiet) as bar:  # turns/s, ETA: LLM judges ~1 s a turn
        rows, summary = evaluate(cfg, dialogues, progress=bar.update)
    summary = {"data": str(args.data), "config": cfg.name, "loom": cfg.loom.__dict__, **summary,
               "command": "membox " + " ".join(sys.argv[1:])}
    if cfg.loom.judge in ("llm", "llm-logprob", "authors"):
        summary["model"] = cfg.llm.model
    summary["embedder"] = cfg.embedder.model
    out = Path(args.out or f"runs/segmentation/{Path(args.data).stem}-{cfg.loom.judge}")
    write_report(out, rows, summary)
    print(json.dumps({k: summary[k] for k in ("dialogues", "pk", "wd", "f1", "messages_per_box", "s_per_message")}))
    print(f"wrote {out}/dialogues.jsonl, summary.json, summary.md", file=sys.stderr)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("segmentation", help="score the Loom's continuity decisions on human topic boundaries")
    p.add_argument("--data", required=True, help="segmentation JSON ({id, turns, boundaries} list)")
    p.add_argument("--judge",
                   help=f"continuity judge: {', '.join(sorted(JUDGES))} (default: the config's [loom] judge)")
    p.add_argument("--config", default=DEFAULT_CONFIG,
                   help=f"config name in configs/ or a .toml path (default {DEFAULT_CONFIG})")
    p.add_argument("--limit", type=count(1), help="only the first N dialogues")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. --set loom.min_box_messages=1 (repeatable)")
    p.add_argument("--out", help="report folder (default runs/segmentation/<data>-<judge>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (for scripts)")
    p.set_defaults(func=cmd_segmentation)
