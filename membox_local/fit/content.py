"""`membox fit content`: the CPU default's continuity judge, the hybrid with a `content` vector and the hard-switch
rule, from TIAGE.

    membox fit content [--dialseg-limit N] [--locomo-limit 60] [--write] [--compare SPEC ...]
    membox fit content --no-lm ...   # ablation: the content model alone, no LLM

Protocol (TIAGE only: DialSeg711 and LoCoMo are measured, never used to fit or choose):
1. Content model: a logistic regression over the MiniLM cues of FEATURE_SETS["conv"] (cosines, the box's age,
   question and length cues against the conversation's level) and the new message's own embedding (what a line
   that opens a topic looks like), on teacher-forced states of all 300 TIAGE-train dialogues; its
   regularisation C is chosen by ROC AUC on TIAGE dev's teacher-forced states.
2. The LLM's part: a second logistic, on TIAGE-train dialogues 0-99 (--lm-fold), over the content model's logit
   and the conversation-relative PMI (lm_pmi_conv, lm_pmi_conv_low). The content logit there comes from a
   content model fitted on dialogues 100-299 (out of fold), so the PMI's weight is not starved by an in-sample
   fit.
3. Both fold into one linear hybrid (weights, bias, a unit `content` vector); the hard-switch rule (a box opens
   when lm_pmi_ratio < 0.40, configs/cpu-switch.toml's threshold, fitted on TIAGE-train joins by
   `membox fit switch`) is added, and a bias offset is swept online. The objective: the mean of Pk/WD/F1's
   `objective` on TIAGE dev as it is and joined in pairs.
4. Each offset gets its cap on a box's length (max_box_messages): the smallest of 24, 20, 16, 12, 10, 8 that
   leaves its objective unchanged to three decimals. TIAGE's dialogues are short and barely reach a cap;
   LoCoMo's conversations are long, and a box that runs on for 24 messages there has usually moved on.
5. The offset: the best objective among offsets whose capped judge gives LoCoMo boxes of 4-8 messages (the
   paper: 4.9-6.6). Until the late night of 2026-12-01 the box-size condition was applied before the cap (each
   offset at 24), which ruled out the offset with the best objective for boxes the cap would have shortened.

With --ce (no LLM at all): step 2 stacks the continuity cross-encoder's logit (`ce_continue`, membox_local/continuity.py)
instead of the PMI: its out-of-fold logits on dialogues 0-99 come from the cross-encoder fitted on dialogues
100-299 (`membox fit crossencoder --skip 100`), the judge uses the one fitted on all 300 (`membox fit crossencoder
--write`). Its hard-switch rule (a box opens when ce_conv < -ce_switch: the logit this far below the conversation's
median) replaces the PMI's: ce_switch is chosen among CE_SWITCHES on TIAGE-train dialogues 0-99 joined in pairs with
the joins as the only boundaries, judged by the out-of-fold cross-encoder (`membox fit switch`'s protocol; no
dialogue there was seen by that cross-encoder). The offsets swept reach -2. The content vector of step 1 is the same fit as the
default's: the committed file is used and checked against this run's.

Every online figure goes through `membox_local.evaluation.segmentation.evaluate` (the Loom's own rule). LLM
scores come from the cache folder (computed if missing, ~0.7 s per message on a 2-core CPU). Writes
runs/segmentation/content.json (with --save or --write also benchmarks/results/segmentation-content.json) and,
with --write, configs/content/tiage-<embedder>.json (package data); prints the [loom] lines for configs/cpu.toml.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import CONFIG_DIR, FEATURES, load_config
from ..ingest import InputError
from .cache import LookupEmbedder, ScoreCache, precompute_scores, score_cache_path
from .data import data_dir, dialogues, joined, joins_only, locomo_conversations, sessions_of
from .logistic import FEATURE_SETS, teacher_forced
from .measure import config_of, locomo_sizes, no_boundaries, objective, run, with_loom
from .report import RUNS, command_line, write_result

CUES = FEATURE_SETS["conv"]
C_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
SWITCH_RATIO = 0.40  # configs/cpu-switch.toml, fitted on TIAGE-train joins by `membox fit switch`
SWEEP_MAX_BOX = 24  # no cap in effect (the LoomConfig default): LoCoMo sizes without the cap are reported too
CAPS = (24, 20, 16, 12, 10, 8)  # then the smallest of these that TIAGE does not notice
CE_SWITCHES = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0)  # --ce: the cross-encoder's hard-switch thresholds tried
CONTENT_DIR = CONFIG_DIR / "content"  # where --write puts the vector: the configs' `content_vector` files


def fit_content(X, y, V, C: float):
    """Logistic regression over the cues and the message embedding; returns (cue weights, vector, bias) in the
    features' own units."""
    from sklearn.linear_model import LogisticRegression

    A = np.hstack([X[:, [FEATURES.index(f) for f in CUES]], V])
    mu, sd = A.mean(axis=0), A.std(axis=0)
    sd = np.where(sd > 1e-6, sd, np.inf)  # a constant column (MiniLM has a few near-constant dimensions) gets 0
    clf = LogisticRegression(C=C, max_iter=5000).fit((A - mu) / sd, y)
    w = clf.coef_[0] / sd
    return w[:len(CUES)], w[len(CUES):], float(clf.intercept_[0] - np.sum(clf.coef_[0] * mu / sd))


def content_logit(model, X, V) -> np.ndarray:
    ws, wn, b = model
    return b + X[:, [FEATURES.index(f) for f in CUES]] @ ws + V @ wn


def ce_models(embedder: str, fold: int) -> tuple[Path, Path]:
    """--ce: (the judge's cross-encoder, the out-of-fold one that left dialogues 0..fold-1 out); loud if missing."""
    final = CONTENT_DIR / f"ce-tiage-{embedder}.safetensors"
    held = RUNS / f"ce-tiage-{embedder}-skip{fold}.safetensors"
    for path, cmd in ((final, "membox fit crossencoder --write"), (held, f"membox fit crossencoder --skip {fold}")):
        if not path.is_file():
            raise InputError(f"--ce needs {path}: make it with `{cmd}`")
    return final, held


def committed_vector(wn: np.ndarray, embedder: str) -> Path:
    """--ce: the committed content vector, checked against this run's fit of the same vector."""
    path = CONTENT_DIR / f"tiage-{embedder}.json"
    have = np.asarray(json.loads(path.read_text())["vector"])
    diff = float(np.max(np.abs(have - wn / np.linalg.norm(wn))))
    if diff > 1e-3:
        raise InputError(f"{path}: this run's content vector differs by {diff:.4f}; refit it first "
                         "(`membox fit content --write`)")
    return path


def choose_ce_switch(base, held_ce: Path, fold, emb, out: dict) -> float:
    """--ce: the hard-switch threshold on ce_conv with the best objective on `fold`'s dialogues joined in pairs, joins
    the only boundaries, judged by the switch rule alone with the cross-encoder that never saw them."""
    from .cache import precompute_ce

    sets = joins_only(fold)
    rule = with_loom(base, judge="hybrid", weights={"ce_continue": 0.0}, bias=10.0, switch_ratio=0.0,
                     ce_model=str(held_ce.resolve()), max_box_messages=SWEEP_MAX_BOX)
    precompute_ce([d.messages for d in sets], rule.loom, "TIAGE train joins (held-out cross-encoder)")
    rows = {t: run(with_loom(rule, ce_switch=t), sets, emb) for t in CE_SWITCHES}
    best = max(rows, key=lambda t: objective(rows[t]))
    out["ce_switch"] = {"by": "objective on TIAGE-train dialogues 0-99 joined in pairs, joins only, out-of-fold "
                              "cross-encoder", "rows": {str(t): r for t, r in rows.items()}, "chosen": best}
    print("ce_switch: " + " | ".join(f"{t}: {r['pk']:.3f}/{r['wd']:.3f}/{r['f1']:.3f}" for t, r in rows.items())
          + f"; chosen {best}", file=sys.stderr, flush=True)
    return best


@dataclass
class Inputs:
    """What every step of the fit reads: the data sets, the base config, the caches and the choices of `args`."""
    args: Any
    base: Any  # the config fitted for (with --ce: the judge's cross-encoder set)
    train: list
    sets: dict  # name -> dialogues the sweep measures
    locomo: dict  # conversation -> messages for the box-size condition ({} without --locomo-limit)
    report_locomo: dict  # conversation -> messages whose box sizes are reported
    emb: Any
    scorer: Any  # the LLM score cache (None with --no-lm)
    lm_names: list  # the features stacked on the content logit (the PMI's, or ce_continue with --ce)
    llm: bool  # the judge reads the LLM
    out: dict
    final_ce: Path | None = None
    held_ce: Path | None = None


def prepare(args) -> Inputs:
    """The data sets, the embedder and score caches (filled here), and the result's header."""
    if args.no_lm and args.write:
        raise InputError("--no-lm fits the same content vector as the default's run: use the committed one, "
                         "without --write")
    data = data_dir(args.data_dir)
    train, dev = dialogues(data, "tiage_train"), dialogues(data, "tiage_dev")
    dialseg = dialogues(data, "dialseg711_test", args.dialseg_limit)
    locomo = locomo_conversations(data)
    report_locomo = {c: v[:args.locomo_report] for c, v in locomo.items()}
    locomo = {c: v[:args.locomo_limit] for c, v in locomo.items()} if args.locomo_limit else {}
    base, final_ce, held_ce = load_config(args.config), None, None
    if args.ce:
        final_ce, held_ce = ce_models(base.embedder.model, args.lm_fold)
        base = with_loom(base, ce_model=str(final_ce.resolve()), switch_ratio=0.0)
    sets = {"tiage_dev": dev, "tiage_dev_joined": joined(dev, 2), "tiage_dev_joins_only": joins_only(dev),
            "dialseg711": dialseg}
    emb = LookupEmbedder(base, [m.text for ds in (train, dev, dialseg) for d in ds for m in d.messages] +
                         [m.text for v in report_locomo.values() for m in v], RUNS / "vectors.npz")
    # --ce: the cache only answers the configs compared at the end (today's default reads the PMI)
    scorer = None if args.no_lm else ScoreCache(base, score_cache_path(base, args.cache_dir))
    llm = not (args.no_lm or args.ce)
    sessions = sessions_of(report_locomo)
    if args.ce:
        from .cache import precompute_ce

        precompute_ce([d.messages for ds in (train, dev, sets["tiage_dev_joined"], dialseg) for d in ds] + sessions,
                      base.loom, "every judged pair")
    for label, groups in ((f"TIAGE train 0-{args.lm_fold - 1}", [d.messages for d in train[:args.lm_fold]]),
                          ("TIAGE dev", [d.messages for d in dev]),
                          ("TIAGE dev joined", [d.messages for d in sets["tiage_dev_joined"]]),
                          ("DialSeg711", [d.messages for d in dialseg]), ("LoCoMo", sessions)):
        if llm:
            precompute_scores(groups, scorer, base.loom.window, label)
    out: dict = {"date": time.strftime("%Y-%m-%d"), "command": command_line(args), "config": base.name,
                 "embedder": base.embedder.model, "llm": base.llm.model,
                 "dialogues": {k: len(v) for k, v in sets.items()},
                 "no_boundaries": {k: no_boundaries(v) for k, v in sets.items()}}
    lm_names = args.ce_features if args.ce else [] if args.no_lm else args.lm
    return Inputs(args, base, train, sets, locomo, report_locomo, emb, scorer, lm_names, llm, out, final_ce, held_ce)


def fit_hybrid(inp: Inputs) -> tuple[dict, float, np.ndarray]:
    """Steps 1-3: the content model (C by teacher-forced AUC on TIAGE dev), the LLM's (or cross-encoder's) weight
    against its logit out of fold, folded into one linear hybrid: (weights in the features' units with a unit
    `content` vector's weight, bias, the content vector)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    args, base, emb, scorer, out = inp.args, inp.base, inp.emb, inp.scorer, inp.out
    lm_fold, content_fold = inp.train[:args.lm_fold], inp.train[args.lm_fold:]
    # 1. the content model; C by teacher-forced AUC on TIAGE dev
    Xtr, ytr, Vtr = teacher_forced(inp.train, emb, base.loom, 2, None, vectors=True)
    Xdev, ydev, Vdev = teacher_forced(inp.sets["tiage_dev"], emb, base.loom, 2, scorer if inp.llm else None,
                                      vectors=True, ce=args.ce)
    aucs = {C: float(roc_auc_score(ydev, content_logit(fit_content(Xtr, ytr, Vtr, C), Xdev, Vdev))) for C in C_GRID}
    C = max(aucs, key=aucs.get)
    out["content_auc_tiage_dev_by_C"] = {str(k): round(v, 4) for k, v in aucs.items()}
    out["content_C"] = C
    print(f"content model: TIAGE dev AUC by C {out['content_auc_tiage_dev_by_C']}; C = {C}", file=sys.stderr)
    ws, wn, b = fit_content(Xtr, ytr, Vtr, C)

    # 2. the LLM's weight against the content logit, out of fold
    a, a0 = np.array([1.0]), 0.0  # --no-lm: the content model as it is
    if inp.lm_names:
        Xa, ya, Va = teacher_forced(content_fold, emb, base.loom, 2, None, vectors=True)
        if args.ce:  # out of fold: the cross-encoder that never saw these dialogues
            Xb, yb, Vb = teacher_forced(lm_fold, emb, with_loom(base, ce_model=str(inp.held_ce.resolve())).loom, 2,
                                        None, vectors=True, ce=True)
        else:
            Xb, yb, Vb = teacher_forced(lm_fold, emb, base.loom, 2, scorer, vectors=True)
        S = np.column_stack([content_logit(fit_content(Xa, ya, Va, C), Xb, Vb)] +
                            [Xb[:, FEATURES.index(f)] for f in inp.lm_names])
        stack = LogisticRegression(C=1.0, max_iter=2000).fit(S, yb)
        a, a0 = stack.coef_[0], float(stack.intercept_[0])

    # 3. one linear hybrid: weights in the features' units, the content vector of unit length
    weights = {f: round(float(a[0] * w), 4) for f, w in zip(CUES, ws)}
    weights["content"] = round(float(a[0] * np.linalg.norm(wn)), 4)
    weights.update({f: round(float(w), 4) for f, w in zip(inp.lm_names, a[1:])})
    Xd_lm = Xdev[:, [FEATURES.index(f) for f in inp.lm_names]]
    z_dev = a0 + a[0] * content_logit((ws, wn, b), Xdev, Vdev) + Xd_lm @ a[1:]
    out["teacher_forced_auc_tiage_dev"] = {"content_model": round(aucs[C], 4), "with_pmi": round(float(
        roc_auc_score(ydev, z_dev)), 4)}
    return weights, a0 + a[0] * b, wn


def write_vector(inp: Inputs, wn: np.ndarray) -> Path:
    """The content vector, of unit length, where the judge reads it (--write: the package's configs/content)."""
    args, base, out = inp.args, inp.base, inp.out
    vector = {"embedder": base.embedder.model, "dim": len(wn), "fitted_on": "TIAGE train (300 dialogues), "
              "teacher-forced states; C chosen on TIAGE dev", "C": out["content_C"], "command": out["command"],
              "date": out["date"], "vector": [round(float(x), 6) for x in wn / np.linalg.norm(wn)]}
    RUNS.mkdir(parents=True, exist_ok=True)
    vec_path = (CONTENT_DIR if args.write and not args.ce else RUNS) / f"tiage-{base.embedder.model}.json"
    vec_path.parent.mkdir(parents=True, exist_ok=True)
    vec_path.write_text(json.dumps(vector) + "\n")
    return committed_vector(wn, base.embedder.model) if args.ce else vec_path


@dataclass
class Sweep:
    """Steps 4-5: the judge at each bias offset with its cap, measured online."""
    inp: Inputs
    weights: dict
    bias: float
    vec_path: Path
    ce_switch: float

    def judge(self, offset: float, max_box: int = SWEEP_MAX_BOX):
        return with_loom(self.inp.base, judge="hybrid", weights=self.weights, bias=round(self.bias + offset, 4),
                         max_box_messages=max_box, content_vector=str(self.vec_path.resolve()),
                         switch_ratio=SWITCH_RATIO if self.inp.llm else 0.0, ce_switch=self.ce_switch)

    def sizes(self, c) -> dict:
        return locomo_sizes(c, self.inp.locomo, self.inp.emb, self.inp.scorer) if self.inp.locomo else {"mean": None}

    def selection(self, c) -> float:
        rows = [run(c, self.inp.sets[k], self.inp.emb, self.inp.scorer) for k in ("tiage_dev", "tiage_dev_joined")]
        return round(sum(objective(r) for r in rows) / 2, 4)

    def capped(self, offset: float) -> tuple[int, list]:
        """The smallest cap that leaves this offset's objective unchanged to three decimals, and each cap's row."""
        rows = [{"max_box_messages": cap, "selection": self.selection(self.judge(offset, cap))} for cap in CAPS]
        top = round(rows[0]["selection"], 3)
        return min(r["max_box_messages"] for r in rows if round(r["selection"], 3) == top), rows

    def row(self, offset: float) -> dict:
        inp = self.inp
        cap, cap_rows = self.capped(offset)
        c = self.judge(offset, cap)
        row = {"offset": offset, "max_box_messages": cap, "caps": cap_rows,
               **{k: run(c, v, inp.emb, inp.scorer) for k, v in inp.sets.items()}, "locomo": self.sizes(c)}
        row["locomo_uncapped"] = row["locomo"] if cap == SWEEP_MAX_BOX else self.sizes(self.judge(offset))
        row["selection"] = round((objective(row["tiage_dev"]) + objective(row["tiage_dev_joined"])) / 2, 4)
        return row

    def choose(self):
        """Every offset's row into `out["sweep"]`; the chosen judge (the best objective among LoCoMo 4-8 msg/box)."""
        inp, out = self.inp, self.inp.out
        out["sweep"] = []
        for offset in np.round(np.arange(-2.0 if inp.args.ce else -1.0, 1.01, 0.25), 2):
            row = self.row(float(offset))
            out["sweep"].append(row)
            show(f"offset {offset:+.2f}", row)
            print(f"               cap {row['max_box_messages']}; selection objective {row['selection']}; LoCoMo "
                  f"without the cap {row['locomo_uncapped']['mean']} msg/box", file=sys.stderr)
        sane = [r for r in out["sweep"] if r["locomo"]["mean"] is not None and 4 <= r["locomo"]["mean"] <= 8]
        best = max(sane or out["sweep"], key=lambda r: r["selection"])
        chosen = self.judge(best["offset"], best["max_box_messages"])
        out["chosen_row"] = {**{k: best[k] for k in inp.sets}, "locomo": best["locomo"],
                             "locomo_report": locomo_sizes(chosen, inp.report_locomo, inp.emb, inp.scorer)}
        show("chosen", out["chosen_row"])
        out["chosen"] = {"offset": best["offset"], "by": "each offset with the smallest cap TIAGE does not notice; "
                         "then the mean objective on TIAGE dev and TIAGE dev joined, LoCoMo 4-8 msg/box",
                         "loom": {"weights": chosen.loom.weights, "bias": chosen.loom.bias,
                                  "max_box_messages": best["max_box_messages"],
                                  "switch_ratio": chosen.loom.switch_ratio, "content_vector": self.vec_path.name,
                                  "ce_switch": self.ce_switch}}
        return chosen


def show(label: str, row: dict) -> None:
    print(f"{label:14s} " + " | ".join(
        f"{k} {r['pk']:.3f}/{r['wd']:.3f}/{r['f1']:.3f} ({r['hyp_boundaries_per_dialogue']:.1f} vs "
        f"{r['ref_boundaries_per_dialogue']:.1f})" for k, r in row.items() if isinstance(r, dict) and "pk" in r)
        + (f" | LoCoMo {row['locomo']['mean']} msg/box" if "locomo" in row else ""), file=sys.stderr, flush=True)


def compare(inp: Inputs, sweep: Sweep) -> None:
    """Other configs (--compare; by default the base and the config the fit is meant to beat) on the same subsets."""
    args = inp.args
    for spec in args.compare or (["cpu-minilm"] if args.no_lm else [args.config, "cpu-minilm"] if args.ce
                                 else [args.config, "cpu-switch"]):
        c = config_of(spec)
        inp.out.setdefault("configs_now", {})[spec] = {
            **{k: run(c, v, inp.emb, inp.scorer) for k, v in inp.sets.items()}, "locomo": sweep.sizes(c),
            "locomo_report": locomo_sizes(c, inp.report_locomo, inp.emb, inp.scorer)}
        show(spec, inp.out["configs_now"][spec])


def main(args) -> int:
    inp = prepare(args)
    weights, bias, wn = fit_hybrid(inp)
    vec_path = write_vector(inp, wn)
    ce_switch = choose_ce_switch(inp.base, inp.held_ce, inp.train[:args.lm_fold], inp.emb, inp.out) if args.ce \
        else 0.0
    sweep = Sweep(inp, weights, bias, vec_path, ce_switch)
    chosen = sweep.choose()
    compare(inp, sweep)
    name = "content-ce" if args.ce else "content-minilm" if args.no_lm else "content"
    write_result(name, inp.out, args.save or args.write, indent=1)
    inline = ", ".join(f"{k} = {v}" for k, v in chosen.loom.weights.items())
    lines = [f"chosen offset {inp.out['chosen']['offset']:+.2f}; [loom] for configs/cpu.toml:",
             f"weights = {{ {inline} }}", f"bias = {chosen.loom.bias}", f'content_vector = "content/{vec_path.name}"',
             f"switch_ratio = {chosen.loom.switch_ratio}",
             f"max_box_messages = {inp.out['chosen']['loom']['max_box_messages']}"]
    if args.ce:
        lines += [f'ce_model = "content/{inp.final_ce.name}"', f"ce_switch = {ce_switch}"]
    print("\n".join(lines))
    return 0
