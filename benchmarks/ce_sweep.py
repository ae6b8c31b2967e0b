"""The bias offset and box cap of a cross-encoder hybrid judge, chosen on TIAGE dev (as it is and joined in pairs)
with LoCoMo boxes of 4-8 messages (the first 60 of each dev conversation) as the condition; DialSeg711 is measured
for every setting and used for nothing.

    python benchmarks/ce_sweep.py --config configs/cpu-ce.toml [--set loom.ce_model=...] [--offsets ...] [--caps ...]
        [--fit runs/segmentation/fit-minilm-ce-join.json --sets ce cos+ce conv+ce conv+ce_conv]

With --fit, each named feature set's weights and bias come from that `membox fit hybrid --ce` result (its candidate
"hybrid <set> min_box=2..."), in place of the config's. Choice: the best mean of the objective (fit.measure.objective:
Pk, WD and F1) over TIAGE dev and TIAGE dev joined two at a time, among settings whose LoCoMo boxes average 4-8
messages (the first 60 of each conversation; with --whole, whole conversations) and, with --gate PK WD F1, whose
TIAGE dev figures are no worse than those (the gate is then met on dev by construction: DialSeg711 is the check).
The box cap's rule is the config's `loom.cap_split` (`--set loom.cap_split=weakest`). No LLM (the judge must not
read one);
cross-encoder logits are cached in runs/segmentation/ce-logits-<weights>.json. Writes runs/segmentation/<out>.json
(with --save also benchmarks/results/segmentation-<out>.json) and prints the table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from membox_local.config import LM_FEATURES, ConfigError, load_config, parse_assignment
from membox_local.fit.cache import LookupEmbedder, precompute_ce
from membox_local.fit.data import data_dir, default_data_dir, dialogues, joined, locomo_conversations, sessions_of
from membox_local.fit.measure import locomo_sizes, objective, run, with_loom
from membox_local.fit.report import RUNS, write_result
from membox_local.ingest import InputError


def measure(cfg, sets, locomo, emb, whole=None) -> dict:
    out = {name: run(cfg, ds, emb) for name, ds in sets.items()}
    out["locomo60"] = locomo_sizes(cfg, locomo, emb)["mean"]
    if whole:
        out["locomo_whole"] = locomo_sizes(cfg, whole, emb)
    out["sel"] = round((objective(out["dev"]) + objective(out["dev_joined"])) / 2, 4)
    return out


def eligible(row: dict, gate: list[float] | None) -> bool:
    """The condition of the choice: LoCoMo boxes of 4-8 messages (whole conversations when measured, else the first
    60 of each) and, with `gate` (Pk, WD, F1), TIAGE dev no worse than it."""
    size = row["locomo_whole"]["mean"] if "locomo_whole" in row else row["locomo60"]
    dev = row["dev"]
    return 4 <= size <= 8 and (not gate or (dev["pk"] <= gate[0] and dev["wd"] <= gate[1] and dev["f1"] >= gate[2]))


def rule(whole: bool, gate: list[float] | None) -> str:
    where = "whole" if whole else "first 60"
    cond = f", TIAGE dev Pk/WD/F1 no worse than {gate[0]}/{gate[1]}/{gate[2]}" if gate else ""
    return (f"best mean objective over TIAGE dev and dev joined in pairs, LoCoMo {where} in 4-8 msg/box{cond}; "
            "DialSeg711 reported only")


def candidates(cfg, fit: str | None, names: list[str]) -> list[tuple[str, dict, float]]:
    """(name, weights, bias) to sweep: the config's own, or each named set of a `membox fit hybrid --ce` result."""
    if not fit:
        return [("config", dict(cfg.loom.weights), cfg.loom.bias)]
    fitted = {c["name"].split()[1]: c["loom"] for c in json.loads(Path(fit).read_text())["candidates"]
              if c["name"].startswith("hybrid ")}
    missing = [n for n in names if n not in fitted]
    if missing or not names:
        print(f"error: --sets {' '.join(missing or names) or '(none)'}: not in {fit} (it has {sorted(fitted)})",
              file=sys.stderr)
        raise SystemExit(2)
    return [(n, fitted[n]["weights"], fitted[n]["bias"]) for n in names]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/cpu-ce.toml")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a config value (as membox's --set), e.g. loom.ce_model=content/x.safetensors")
    ap.add_argument("--offsets", type=float, nargs="+", default=[-0.5, -0.25, 0.0, 0.25, 0.5, 0.75],
                    help="added to the config's bias")
    ap.add_argument("--caps", type=int, nargs="+", default=[16, 12], help="max_box_messages values")
    ap.add_argument("--fit", help="a `membox fit hybrid --ce` result JSON whose candidates' weights are swept")
    ap.add_argument("--sets", nargs="+", default=[], help="--fit: the feature sets to sweep (e.g. ce conv+ce)")
    ap.add_argument("--data-dir", default=default_data_dir())
    ap.add_argument("--out", default="ce-sweep", help="result name (runs/segmentation/<out>.json)")
    ap.add_argument("--save", action="store_true", help="also benchmarks/results/segmentation-<out>.json")
    ap.add_argument("--whole", action="store_true",
                    help="also measure LoCoMo boxes on whole dev conversations; the 4-8 condition reads those")
    ap.add_argument("--gate", type=float, nargs=3, metavar=("PK", "WD", "F1"),
                    help="choose only among settings whose TIAGE dev Pk and WD are at most, F1 at least, these")
    args = ap.parse_args(argv)
    try:
        overrides = dict(parse_assignment(s) for s in args.set)
        cfg = load_config(args.config, overrides or None)
        data = data_dir(args.data_dir)
    except (ConfigError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not cfg.loom.ce_model or cfg.loom.switch_ratio or set(cfg.loom.weights) & set(LM_FEATURES):
        print(f"error: {args.config}: needs a cross-encoder hybrid judge that reads no LLM", file=sys.stderr)
        return 2
    dev = dialogues(data, "tiage_dev")
    sets = {"dev": dev, "dev_joined": joined(dev, 2), "dialseg711": dialogues(data, "dialseg711_test")}
    whole = locomo_conversations(data)
    locomo = {c: v[:60] for c, v in whole.items()}
    texts = [m.text for ds in sets.values() for d in ds for m in d.messages] + \
        [m.text for v in (whole if args.whole else locomo).values() for m in v]
    emb = LookupEmbedder(cfg, texts, RUNS / "vectors.npz")
    precompute_ce([d.messages for ds in sets.values() for d in ds] + sessions_of(whole if args.whole else locomo),
                  cfg.loom, "sweep")
    rows, t0 = [], time.time()
    for name, weights, bias in candidates(cfg, args.fit, args.sets):
        for cap, off in [(cap, off) for cap in args.caps for off in args.offsets]:
            c = with_loom(cfg, weights=weights, bias=round(bias + off, 4), max_box_messages=cap)
            row = {"set": name, "offset": off, "cap": cap, "cap_split": c.loom.cap_split, "bias": c.loom.bias,
                   "weights": weights, **measure(c, sets, locomo, emb, whole if args.whole else None)}
            rows.append(row)
            print(f"{name} offset {off:+.2f} cap {cap}: dev {row['dev']['pk']:.3f}/{row['dev']['wd']:.3f}/"
                  f"{row['dev']['f1']:.3f} joined F1 {row['dev_joined']['f1']:.3f} DialSeg711 "
                  f"{row['dialseg711']['pk']:.3f}/{row['dialseg711']['wd']:.3f}/{row['dialseg711']['f1']:.3f} "
                  f"LoCoMo {row['locomo60']}" + (f" whole {row['locomo_whole']['mean']}" if args.whole else "") +
                  f" sel {row['sel']} ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    sane = [r for r in rows if eligible(r, args.gate)]
    best = max(sane or rows, key=lambda r: r["sel"])
    best["chosen"] = True
    report = {"config": args.config, "set": overrides, "ce_model": cfg.loom.ce_model,
              "date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/ce_sweep.py " + " ".join(
                  argv if argv is not None else sys.argv[1:]),
              "rule": rule(args.whole, args.gate) + ("" if sane else " (no setting met the condition)"),
              "rows": rows}
    write_result(args.out, report, args.save)
    print(json.dumps({k: best[k] for k in ("set", "offset", "cap", "cap_split", "bias", "dev", "dialseg711",
                                           "locomo60") + (("locomo_whole",) if args.whole else ())}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
