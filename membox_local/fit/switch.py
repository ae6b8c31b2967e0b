"""`membox fit switch`: why a judge chosen on TIAGE does not transfer to DialSeg711, and the hard-switch judge that
does (configs/cpu-switch.toml).

Measured on TIAGE dev (annotated shifts), TIAGE dev joined in pairs with only the joins as boundaries, and
DialSeg711's first dialogues (LLM scores from the cache folder, computed if missing):

1. `bias`: the default judge (configs/cpu.toml) with its bias moved. If DialSeg711's over-segmentation were a
   matter of level (the same ranking, a threshold in the wrong place), some offset would fix it there.
2. `pmi`: a judge on the LLM's PMI alone (the hybrid with weights {lm_pmi: 1}: a new box when the box's last
   two lines make the new line less than e^t times likelier per token), for a range of t. DialSeg711's
   boundaries are joins of different dialogues; TIAGE's are shifts inside one chat. Which t each dataset would
   pick shows whether one threshold can serve both; the joins-only TIAGE column is what TIAGE offers to choose t
   for hard switches.
3. `switch`: the same with the PMI divided by the conversation's median PMI over its last `history` messages
   (`lm_pmi_ratio`): the scale differs between genres (continuing turns: median PMI 1.74 in TIAGE, 1.16 in
   DialSeg711), the ratio does not. Its threshold is fitted on the first 100 TIAGE-train dialogues joined in
   pairs, joins as the only boundaries (online sweep, best objective); the chosen value is configs/cpu-switch.toml.

Thresholds read off the DialSeg711 column are oracle choices (test data), reported as analysis only.

    membox fit switch [--dialseg-limit 125] [--train-limit 100]
Writes runs/segmentation/transfer.json (with --save also benchmarks/results/segmentation-transfer.json).
"""
from __future__ import annotations

import sys
import time

import numpy as np

from ..config import load_config
from .cache import LookupEmbedder, ScoreCache, score_cache_path
from .data import data_dir, dialogues, joins_only, locomo_conversations
from .measure import locomo_sizes, no_boundaries, objective, run, with_loom
from .report import RUNS, command_line, write_result


def main(args) -> int:
    data = data_dir(args.data_dir)
    train = joins_only(dialogues(data, "tiage_train", args.train_limit))
    locomo = {c: v[:args.locomo_limit] for c, v in locomo_conversations(data).items()}
    sets = {"tiage_dev": dialogues(data, "tiage_dev")}
    sets["tiage_dev_joins_only"] = joins_only(sets["tiage_dev"])
    sets["dialseg711"] = dialogues(data, "dialseg711_test", args.dialseg_limit)
    cfg = load_config(args.config)
    texts = [m.text for ds in [*sets.values(), train] for d in ds for m in d.messages]
    emb = LookupEmbedder(cfg, texts + [m.text for v in locomo.values() for m in v], RUNS / "vectors.npz")
    scorer = ScoreCache(cfg, score_cache_path(cfg, args.cache_dir))
    out = {"date": time.strftime("%Y-%m-%d"), "command": command_line(args), "config": args.config,
           "llm": cfg.llm.model, "dialogues": {k: len(v) for k, v in sets.items()},
           "no_boundaries": {k: no_boundaries(v) for k, v in sets.items()}, "bias": [], "pmi": [], "switch": []}

    def measure(c) -> dict:
        return {k: run(c, ds, emb, scorer) for k, ds in sets.items()}

    def show(label, row):
        print(f"{label:16s} " + " | ".join(
            f"{k} {r['pk']:.3f}/{r['wd']:.3f}/{r['f1']:.3f} ({r['hyp_boundaries_per_dialogue']:.1f} vs "
            f"{r['ref_boundaries_per_dialogue']:.1f})" for k, r in row.items()), file=sys.stderr, flush=True)

    for offset in np.round(np.arange(-1.0, 1.01, 0.25), 2):
        row = measure(with_loom(cfg, bias=cfg.loom.bias + float(offset)))
        out["bias"].append({"offset": float(offset), **row})
        show(f"bias {offset:+.2f}", row)
    for t in np.round(np.arange(0.0, 1.51, 0.125), 3):
        row = measure(with_loom(cfg, judge="hybrid", weights={"lm_pmi": 1.0}, bias=-float(t)))
        out["pmi"].append({"threshold": float(t), **row})
        show(f"pmi < {t:.3f}", row)

    def switch(t: float):
        return with_loom(cfg, judge="hybrid", weights={"lm_pmi_ratio": 1.0}, bias=-float(t))

    for t in np.round(np.arange(0.1, 0.81, 0.05), 2):
        row = {"tiage_train_joins_only": run(switch(t), train, emb, scorer), **measure(switch(t))}
        out["switch"].append({"threshold": float(t), **row})
        show(f"ratio < {t:.2f}", row)
    best = max(out["switch"], key=lambda r: objective(r["tiage_train_joins_only"]))
    out["switch_chosen"] = {"threshold": best["threshold"], "by": "objective on TIAGE train joins-only",
                            "locomo_messages_per_box": locomo_sizes(switch(best["threshold"]), locomo, emb, scorer)}
    print(f"chosen on TIAGE train joins: lm_pmi_ratio < {best['threshold']} opens a box; "
          f"LoCoMo {out['switch_chosen']['locomo_messages_per_box']['mean']} messages per box", file=sys.stderr)
    write_result("transfer", out, args.save)
    return 0
