"""`membox fit keeping`: which sentences a record keeps ([extract] keep_model, worth.py), fitted on LoCoMo dev's
evidence lines, cross-validated by conversation.

    membox fit keeping [--builds runs/builds-locomo-ce] [--represented 0.95] [--write] [--save]

Every sentence of every line (worth.line_sentences) is labelled: 1 where its line is evidence of a category 1-4
question and it shares the most content words with that question and its answer among the line's sentences; 0 where
its line is no question's evidence; the other sentences of evidence lines are left out of the fit. A logistic model over the sentence's MiniLM vector and its counts (worth.FEATURES; sklearn, C=1) is fitted
six times, each time without one conversation, and scores that conversation's sentences (out of fold). The records
are then made as the Loom makes them under [extract] events = "lines" (attribution.extracted_events: no model call
is needed, the model writes only the topic) from the boxes of each conversation's boxes-only build, at each
threshold of a grid, and measured:
- record share: the words of the records' events over the words of the dialogue (every message);
- evidence represented: the share of evidence lines that an event cites (the target: at least --represented);
- answer kept: of the questions with one evidence line whose answer's content words are in it, the share whose
  line's events still hold them all (a stricter reading of "represented").
The threshold chosen is the highest whose out-of-fold evidence represented reaches --represented. The final model
is fitted on every conversation: runs/keep/keep-locomo-<embedder>.json, with --write configs/content/. Report:
runs/keep/keeping.json (--save: benchmarks/results/keep-fit.json).
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from ..attribution import extracted_events
from ..config import CONFIG_DIR, load_config
from ..grounding import content_words
from ..prompts import extract_system
from ..worth import KeepModel, features, line_sentences
from .evidence import CATEGORIES, open_memories
from .report import RESULTS, command_line

RUNS = Path("runs") / "keep"
GRID = [0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5]  # 0: every sentence kept (before)


def add_arguments(p) -> None:
    from ..argtypes import number

    p.set_defaults(config="cpu-ce")
    p.add_argument("--builds", default="runs/builds-locomo-ce",
                   help="boxes-only builds of LoCoMo dev, per config and conversation (made when missing)")
    p.add_argument("--represented", type=number(0.0, 1.0), default=0.95,
                   help="the share of evidence lines an event must still cite, out of fold (default 0.95)")
    p.add_argument("--write", action="store_true", help="write configs/content/keep-locomo-<embedder>.json")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def conversation_rows(mem, sample: dict) -> dict:
    """A conversation's boxes, speakers, sentences (with their message's evidence label) and questions to check."""
    from ..evaluation.locomo import parse_evidence

    conv = sample["sample_id"]
    boxes = mem.store.boxes(conv)
    lines = {m.message_id: m for b in boxes for m in b.messages}
    evidence: set[str] = set()
    best: set[tuple[str, str]] = set()  # (message id, sentence): the sentences of evidence lines a question needs
    answers = []
    for q in sample["qa"]:
        ev, _ = parse_evidence(q.get("evidence", []), set(lines))
        if q.get("category") not in CATEGORIES or not ev:
            continue
        evidence.update(ev)
        asked = set(content_words(f"{q['question']} {q.get('answer', '')}"))
        for mid in ev:
            sentences = line_sentences(lines[mid].text)
            overlap = [len(asked & set(content_words(x))) for x in sentences]
            top = max(overlap, default=0)
            best.update((mid, x) for x, o in zip(sentences, overlap) if (o == top if top else len(x) == max(map(len, sentences))))
        words = set(content_words(str(q.get("answer", ""))))
        if len(ev) == 1 and words:
            answers.append((ev[0], words))
    # a sentence of an evidence line is labelled 1 where it shares most words with a question (and its answer) that
    # cites the line, else left out of the fit (-1): the line's greetings and thanks are not what was asked about
    sentences = [(b.id, i, x, 1 if (m.message_id, x) in best else (-1 if m.message_id in evidence else 0))
                 for b in boxes for i, m in enumerate(b.messages) for x in line_sentences(m.text)]
    line_words = {m.message_id: set(content_words(m.text)) for b in boxes for m in b.messages}
    answers = [(mid, w) for mid, w in answers if w <= line_words[mid]]
    return {"boxes": boxes, "speakers": list(dict.fromkeys(m.speaker for b in boxes for m in b.messages)),
            "sentences": sentences, "evidence": evidence, "answers": answers,
            "words": sum(len(m.text.split()) for b in boxes for m in b.messages)}


def records(rows: dict, scores: np.ndarray, threshold: float, ec) -> dict:
    """The conversation's records at `threshold` (events as the Loom makes them), measured."""
    instructions = extract_system(ec)
    flags = iter(scores >= threshold)
    kept_of = {(bid, i): [] for bid, i, _, _ in rows["sentences"]}
    for bid, i, _, _ in rows["sentences"]:
        kept_of[(bid, i)].append(bool(next(flags)))
    words, cited, held = 0, set(), {}
    for box in rows["boxes"]:
        kept = [kept_of.get((box.id, i), []) for i in range(len(box.messages))]
        events, _ = extracted_events({"topic": ""}, box, box.messages, rows["speakers"], instructions, ec, kept)
        for e in events:
            words += len(e.text.split())
            cited.update(e.sources)
            held.setdefault(e.sources[0], set()).update(content_words(e.text))
    answered = sum(w <= held.get(mid, set()) for mid, w in rows["answers"])
    return {"record_words": words, "represented": len(rows["evidence"] & cited), "answers_kept": answered}


def fit_model(x: np.ndarray, y: np.ndarray):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=1.0, max_iter=3000).fit(x, y)


def labelled(xs: list[np.ndarray], ys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows with a label (the -1 ones left out)."""
    x, y = np.vstack(xs), np.concatenate(ys)
    return x[y >= 0], y[y >= 0]


def main(args) -> int:
    cfg = load_config(args.config, {"retrieve.evidence_model": ""})  # the builds are read by the first stage alone
    ec = dataclasses.replace(cfg.extract, events="lines")
    t0 = time.time()
    mems = open_memories(Path(args.data_dir), cfg, args.builds)
    rows, xs, ys = {}, {}, {}
    for conv, (mem, sample) in mems.items():
        rows[conv] = conversation_rows(mem, sample)
        texts = [s for _, _, s, _ in rows[conv]["sentences"]]
        xs[conv] = features(texts, mem.embedder.encode(texts))
        ys[conv] = np.array([label for *_, label in rows[conv]["sentences"]], dtype=int)
        log(f"{conv}: {len(texts)} sentences, {int((ys[conv] == 1).sum())} asked about, "
            f"{int((ys[conv] < 0).sum())} others of evidence lines")
    oof = {}
    for conv in rows:
        others = [c for c in rows if c != conv]
        model = fit_model(*labelled([xs[c] for c in others], [ys[c] for c in others]))
        oof[conv] = model.predict_proba(xs[conv])[:, 1]
    from sklearn.metrics import roc_auc_score

    y_all, p_all = np.concatenate([ys[c] for c in rows]), np.concatenate([oof[c] for c in rows])
    auc = roc_auc_score(y_all[y_all >= 0], p_all[y_all >= 0])
    dialogue = sum(r["words"] for r in rows.values())
    evidence = sum(len(r["evidence"]) for r in rows.values())
    answers = sum(len(r["answers"]) for r in rows.values())
    curve = []
    for t in GRID:
        got = [records(rows[c], oof[c], t, ec) for c in rows]
        curve.append({"threshold": t, "record_share": round(sum(g["record_words"] for g in got) / dialogue, 3),
                      "evidence_represented": round(sum(g["represented"] for g in got) / evidence, 4),
                      "answers_kept": round(sum(g["answers_kept"] for g in got) / answers, 4)})
        log(f"threshold {t}: {curve[-1]}")
    ok = [c for c in curve if c["evidence_represented"] >= args.represented]
    chosen = max(ok, key=lambda c: c["threshold"]) if ok else curve[0]
    final = fit_model(*labelled(list(xs.values()), list(ys.values())))
    name = f"keep-locomo-{cfg.embedder.model}.json"
    report = {"command": command_line(args), "date": time.strftime("%Y-%m-%d"), "conversations": list(rows),
              "sentences": int(sum(len(y) for y in ys.values())), "positives": int(sum((y == 1).sum() for y in ys.values())), "evidence_lines": evidence,
              "answer_checks": answers, "dialogue_words": dialogue, "oof_auc": round(float(auc), 3),
              "represented_target": args.represented, "curve": curve, "chosen": chosen,
              "seconds": round(time.time() - t0)}
    model = KeepModel(final.coef_[0], float(final.intercept_[0]), chosen["threshold"],
                      cfg.embedder.model, {"fitted_on": "LoCoMo dev evidence lines (every conversation), "
                                           "threshold chosen out of fold by conversation", "command": command_line(args),
                                           "date": report["date"], "out_of_fold": chosen, "oof_auc": report["oof_auc"]})
    RUNS.mkdir(parents=True, exist_ok=True)
    out = (CONFIG_DIR / "content" if args.write else RUNS) / name
    out.write_text(json.dumps(model.to_json()) + "\n")
    report["model"] = f"content/{name}" if args.write else str(out)
    (RUNS / "keeping.json").write_text(json.dumps(report, indent=1) + "\n")
    if args.save:
        (RESULTS / "keep-fit.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("oof_auc", "chosen", "model")}, indent=1))
    return 0
