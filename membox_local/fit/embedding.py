"""`membox fit embedding`: the embedding judge's threshold and the MiniLM-only hybrids.

Embedding judge: the threshold swept online on TIAGE train, for each min-context setting. Hybrid: logistic
weights on teacher-forced TIAGE-train states for each feature set, the bias offset swept online on train.
Choice per judge on TIAGE dev (`measure.choose`); DialSeg711 and LoCoMo box sizes are reported. Results:
runs/segmentation/fit.json and fit.md. --choose-only re-applies the selection rule to an existing fit.json.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from ..config import load_config
from .cache import LookupEmbedder
from .data import data_dir, dialogues, locomo_conversations
from .logistic import FEATURE_SETS, fit_logistic, teacher_forced
from .measure import choose, chosen_fields, locomo_sizes, objective, run, with_loom
from .report import RUNS, command_line, write_result


def rechoose(args) -> int:
    path = RUNS / "fit.json"
    if not path.exists():
        from ..ingest import InputError

        raise InputError(f"{path}: no fit to choose from; run `membox fit embedding` first")
    report = json.loads(path.read_text())
    chosen = choose(report)
    write_result("fit", report, args.save)
    print(json.dumps({j: chosen_fields(c) for j, c in chosen.items()}, indent=2))
    return 0


def main(args) -> int:
    if args.choose_only:
        return rechoose(args)
    data = data_dir(args.data_dir)
    train = dialogues(data, "tiage_train")
    dev = dialogues(data, "tiage_dev")
    test = dialogues(data, "dialseg711_test", args.dialseg_limit)
    locomo = locomo_conversations(data)
    cfg = load_config(args.config)
    texts = [m.text for ds in (train, dev, test) for d in ds for m in d.messages] + \
        [m.text for v in locomo.values() for m in v]
    emb = LookupEmbedder(cfg, texts, RUNS / "vectors.npz")
    report: dict = {"config": cfg.name, "embedder": cfg.embedder.model, "date": time.strftime("%Y-%m-%d"),
                    "command": command_line(args), "candidates": []}

    def record(name, c, extra=None):
        entry = {"name": name, "loom": {k: getattr(c.loom, k) for k in
                                        ("judge", "threshold", "min_box_messages", "max_box_messages", "weights", "bias")},
                 "train": run(c, train, emb), "dev": run(c, dev, emb), "dialseg711": run(c, test, emb),
                 "locomo": locomo_sizes(c, locomo, emb), **(extra or {})}
        report["candidates"].append(entry)
        print(f"{name:40s} train F1 {entry['train']['f1']:.3f} | " + " | ".join(
            f"{ds} {entry[ds]['pk']:.3f}/{entry[ds]['wd']:.3f}/{entry[ds]['f1']:.3f}" for ds in ("dev", "dialseg711"))
            + f" | LoCoMo {entry['locomo']['mean']} msg/box", file=sys.stderr)
        return entry

    # 1. embedding judge: threshold fitted on train (online sweep), for each min-context setting.
    grid = np.round(np.arange(0.0, 0.61, 0.025), 3)
    for min_box in (2, 1):
        best = max(grid, key=lambda t: objective(run(with_loom(cfg, judge="embedding", threshold=float(t),
                                                                 min_box_messages=min_box), train, emb)))
        for max_box in (24, 8):
            record(f"embedding min_box={min_box} max_box={max_box}", with_loom(
                cfg, judge="embedding", threshold=float(best), min_box_messages=min_box, max_box_messages=max_box))

    # 2. hybrid judge: logistic weights on teacher-forced train states, bias offset swept online on train.
    for min_box in (2, 1):
        X, y = teacher_forced(train, emb, cfg.loom, min_box)
        for fs, names in FEATURE_SETS.items():
            weights, bias = fit_logistic(X, y, names)
            offsets = np.round(np.arange(-2.0, 2.01, 0.25), 2)
            best = max(offsets, key=lambda o: objective(run(with_loom(
                cfg, judge="hybrid", weights=weights, bias=bias + float(o), min_box_messages=min_box), train, emb)))
            record(f"hybrid {fs} min_box={min_box}", with_loom(cfg, judge="hybrid", weights=weights,
                                                              bias=round(bias + float(best), 4),
                                                              min_box_messages=min_box))

    chosen = choose(report)
    write_result("fit", report, args.save)
    print(json.dumps({j: chosen_fields(c) for j, c in chosen.items()}, indent=2))
    return 0
