"""`membox fit hybrid`: the hybrid with the LLM's likelihood features (lm_pmi, lm_cond, lm_pmi_low and the
conversation-relative *_conv), by the protocol of `membox fit embedding`: logistic weights on teacher-forced
TIAGE-train states, bias offset swept online on train, choice on TIAGE dev (min_box 2, LoCoMo 4-8 messages per
box). With --join K, the MiniLM-only sets `cos`, `all` and `conv` are candidates too, every fit uses the train
dialogues joined K at a time, and the choice the mean objective on TIAGE dev as it is and joined K at a time.
The config's current judge and the embedding judge are measured on the same subsets for comparison. Scores:
<cache-dir>/lm-scores-<backend>-<model>.tsv (missing ones ~0.6 s per message on a 2-core CPU, resumable);
results: runs/segmentation/fit-lm[-join][-historyN].json and .md (fit-minilm... with --no-lm). With --ce the sets
with the continuity cross-encoder's logit (`ce_continue`, [loom] ce_model: `membox fit crossencoder --write`) are
candidates too (its logits on TIAGE train are in-sample: `membox fit content --ce` stacks it out of fold).
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config import load_config
from .cache import LookupEmbedder, ScoreCache, precompute_scores, score_cache_path
from .data import data_dir, dialogues, joined, locomo_conversations, sessions_of
from .logistic import CE_FEATURE_SETS, FEATURE_SETS, LM_FEATURE_SETS, choose_knot, fit_logistic, teacher_forced
from .measure import choose, chosen_fields, locomo_sizes, no_boundaries, objective, run, with_loom
from .report import RUNS, command_line, write_result


@dataclass
class Fit:
    """The subsets every candidate is measured on, their embedder and score caches, and the report they fill."""
    args: Any
    cfg: Any
    train: list
    dev: list
    test: list  # DialSeg711
    locomo: dict
    fit_on: list  # TIAGE train, joined in pairs with --join
    dev_joined: list
    emb: Any
    scorer: Any
    report: dict = field(default_factory=dict)

    def record(self, name: str, c) -> None:
        """One candidate config measured on every subset, added to the report and printed."""
        emb, scorer, join = self.emb, self.scorer, self.args.join
        entry = {"name": name, "loom": {k: getattr(c.loom, k) for k in
                                        ("judge", "threshold", "min_box_messages", "max_box_messages", "weights", "bias",
                                         "lm_knot", "history")},
                 "train": run(c, self.fit_on, emb, scorer), "dev": run(c, self.dev, emb, scorer),
                 "dialseg711": run(c, self.test, emb, scorer), "locomo": locomo_sizes(c, self.locomo, emb, scorer)}
        if join:
            entry["dev_joined"] = run(c, self.dev_joined, emb, scorer)
            entry["dev_only"] = dict(entry["dev"])
            # the choice (by "dev") sees both kinds of topic change: annotated shifts and joins
            entry["dev"] = {m: round((entry["dev_only"][m] + entry["dev_joined"][m]) / 2, 4) for m in ("pk", "wd", "f1")}
        self.report["candidates"].append(entry)
        print(f"{name:40s} train F1 {entry['train']['f1']:.3f} | " + " | ".join(
            f"{ds} {entry[ds]['pk']:.3f}/{entry[ds]['wd']:.3f}/{entry[ds]['f1']:.3f}" for ds in ("dev", "dialseg711"))
            + f" | LoCoMo {entry['locomo']['mean']} msg/box", file=sys.stderr, flush=True)


def load(args) -> Fit:
    """The subsets, the config, the embedder and the score caches (LLM scores and cross-encoder logits computed
    where missing)."""
    data = data_dir(args.data_dir)
    train = dialogues(data, "tiage_train", args.train_limit)
    dev = dialogues(data, "tiage_dev")
    test = dialogues(data, "dialseg711_test", args.dialseg_limit)
    locomo = {c: v[: args.locomo_limit] for c, v in locomo_conversations(data).items()}
    overrides = {**({"loom.history": args.history} if args.history else {}),
                 **({"loom.ce_model": args.ce_model} if args.ce_model else {})}
    cfg = load_config(args.config, overrides or None)
    join = args.join
    fit_on = joined(train, join) if join else train
    dev_joined = joined(dev, join) if join else []
    texts = [m.text for ds in (train, dev, test) for d in ds for m in d.messages] + \
        [m.text for v in locomo.values() for m in v]
    emb = LookupEmbedder(cfg, texts, RUNS / "vectors.npz")
    scorer = None if args.no_lm else ScoreCache(cfg, score_cache_path(cfg, args.cache_dir))
    for label, groups in (("TIAGE train", [d.messages for d in train]), ("TIAGE dev", [d.messages for d in dev]),
                          ("LoCoMo", sessions_of(locomo)), ("DialSeg711", [d.messages for d in test]),
                          ("TIAGE train joined", [d.messages for d in fit_on] if join else []),
                          ("TIAGE dev joined", [d.messages for d in dev_joined])):
        if scorer is not None:
            precompute_scores(groups, scorer, cfg.loom.window, label)
    if args.ce and not args.score_only:
        from .cache import precompute_ce

        precompute_ce([d.messages for ds in (fit_on, dev, test, dev_joined) for d in ds] + sessions_of(locomo),
                      cfg.loom, "every judged pair")
    return Fit(args, cfg, train, dev, test, locomo, fit_on, dev_joined, emb, scorer)


def run_name(args) -> str:
    """The result's name: which features, joins, history and cross-encoder the fit used."""
    return (("fit-minilm" if args.no_lm else "fit-lm") + ("-ce" if args.ce else "") +
            ("-join" if args.join else "") + (f"-history{args.history}" if args.history else "") +
            (f"-{Path(args.ce_model).stem}" if args.ce_model else ""))


def table(report: dict, join: int) -> list[str]:
    """The candidates as a Markdown table."""
    sets_shown = ("dev_only", "dev_joined", "dialseg711") if join else ("dev", "dialseg711")
    heads = {"dev": "TIAGE dev", "dev_only": "TIAGE dev", "dev_joined": "TIAGE dev joined", "dialseg711": "DialSeg711"}
    lines = ["| candidate | " + " | ".join(f"{heads[ds]} Pk / WD / F1" for ds in sets_shown) + " | LoCoMo msg/box | chosen |",
             "|---|" + "---|" * len(sets_shown) + "---|---|"]
    for c in report["candidates"]:
        cells = [" / ".join(f"{c.get(ds, c['dev'])[m]:.3f}" for m in ("pk", "wd", "f1")) for ds in sets_shown]
        lines.append(f"| {c['name']} | " + " | ".join(cells) + f" | {c['locomo']['mean']} | {'yes' if c['chosen'] else ''} |")
    return lines


def main(args) -> int:
    fit = load(args)
    if args.score_only:
        return 0
    cfg, join, emb, scorer = fit.cfg, args.join, fit.emb, fit.scorer
    fit.report = {"config": cfg.name, "embedder": cfg.embedder.model, "llm": cfg.llm.model,
                  "date": time.strftime("%Y-%m-%d"), "command": command_line(args),
                  "subsets": {"tiage_train": len(fit.train), "tiage_dev": len(fit.dev), "dialseg711": len(fit.test),
                              "locomo_messages": args.locomo_limit},
                  "join": join, "candidates": [],
                  "no_boundaries": {"dev": no_boundaries(fit.dev), "dialseg711": no_boundaries(fit.test),
                                    **({"dev_joined": no_boundaries(fit.dev_joined)} if join else {})}}
    fit.record(f"{cfg.name} default ({cfg.loom.judge}), same subsets", cfg)
    fit.record("embedding, same subsets", with_loom(cfg, judge="embedding", weights={}))
    knot = cfg.loom.lm_knot if args.no_lm else choose_knot(cfg, fit.fit_on, fit.dev_joined or fit.dev, emb, scorer,
                                                           fit.report)
    cfg = with_loom(cfg, lm_knot=knot)
    X, y = teacher_forced(fit.fit_on, emb, cfg.loom, 2, scorer, ce=args.ce)
    sets = {**({k: FEATURE_SETS[k] for k in ("cos", "all", "conv")} if join or args.no_lm else {}),
            **({} if args.no_lm else LM_FEATURE_SETS), **(CE_FEATURE_SETS if args.ce else {})}
    for fs, names in sets.items():
        weights, bias = fit_logistic(X, y, names)
        offsets = np.round(np.arange(-2.0, 2.01, 0.25), 2)
        best = max(offsets, key=lambda o: objective(run(with_loom(
            cfg, judge="hybrid", weights=weights, bias=bias + float(o)), fit.fit_on, emb, scorer)))
        fit.record(f"hybrid {fs} min_box=2" + (f", fitted with joins of {join}" if join else ""),
                   with_loom(cfg, judge="hybrid", weights=weights, bias=round(bias + float(best), 4),
                             min_box_messages=2))
    name = run_name(args)
    chosen = choose({"candidates": fit.report["candidates"][2:]}, f"{name}-chosen.md")["hybrid"]
    for c in fit.report["candidates"]:
        c["chosen"] = c is chosen
    lines = table(fit.report, join)
    (RUNS / f"{name}.md").write_text("\n".join(lines) + "\n")
    write_result(name, fit.report, args.save)
    print("\n".join(lines), file=sys.stderr)
    print(json.dumps(chosen_fields(chosen), indent=2))
    return 0
