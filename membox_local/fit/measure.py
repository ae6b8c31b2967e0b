"""What the fits measure and how they choose: online runs of a setting (the Loom's own rule), the objective,
LoCoMo box sizes, and the selection rule among fitted candidates."""
from __future__ import annotations

import copy
import sys

from ..config import Config, load_config
from ..evaluation.segmentation import box_sizes, evaluate, run_segmenter
from .report import RUNS


def objective(s: dict) -> float:
    """One number to pick a setting: Pk and WD can be gamed alone, so F1 counts as much as both."""
    return ((1 - s["pk"]) + (1 - s["wd"])) / 2 + s["f1"]


def with_loom(cfg: Config, **kw) -> Config:
    c = copy.deepcopy(cfg)
    for k, v in kw.items():
        setattr(c.loom, k, v)
    return c


def config_of(spec: str) -> Config:
    """A config named as the reports name them: a name or file, optionally with a judge (`cpu:embedding`)."""
    name, _, judge = spec.partition(":")
    return load_config(name, {"loom.judge": judge} if judge else None)


def _backend(cfg, scorer):
    """`scorer`, or without one the config's LLM, loaded once (`cache.config_model`) if the judge asks it."""
    from .cache import config_model

    return scorer if scorer is not None else (lambda: config_model(cfg))


def run(cfg, dialogues, emb, scorer=None) -> dict:
    rows, s = evaluate(cfg, dialogues, embedder=emb, backend=_backend(cfg, scorer))
    return {k: s[k] for k in ("pk", "wd", "f1", "messages_per_box", "hyp_boundaries_per_dialogue",
                              "ref_boundaries_per_dialogue", "s_per_message")}


def no_boundaries(dialogues) -> dict:
    """The reference point that Pk alone flatters: a segmenter that never opens a box."""
    import numpy as np

    from ..evaluation.segmentation import score

    rows = [score(d.boundaries, [], len(d.messages)) for d in dialogues]
    return {m: round(float(np.mean([r[m] for r in rows])), 4) for m in ("pk", "wd", "f1")}


def locomo_sizes(cfg, conversations, emb, scorer=None) -> dict:
    import numpy as np

    decisions, facts = run_segmenter(cfg, conversations, embedder=emb, backend=_backend(cfg, scorer))
    sizes = box_sizes(decisions)
    return {"per_conversation": sizes, "mean": round(float(np.mean(list(sizes.values()))), 2)}


def choose(report: dict, md_name: str = "fit.md") -> dict:
    """Per judge: the best TIAGE-dev objective among settings that keep the Loom's minimal-context rule
    (min_box_messages=2: single-message boxes extract poorly) and give LoCoMo boxes of 4-8 messages (the paper:
    4.9-6.6). DialSeg711 is reported for every candidate and used for nothing. The table goes to
    runs/segmentation/`md_name`."""
    chosen = {}
    for c in report["candidates"]:
        c.pop("chosen", None)
    for judge in sorted({c["loom"]["judge"] for c in report["candidates"]}):
        cands = [c for c in report["candidates"] if c["loom"]["judge"] == judge and c["loom"]["min_box_messages"] == 2]
        sane = [c for c in cands if 4 <= c["locomo"]["mean"] <= 8]
        chosen[judge] = max(sane or cands, key=lambda c: objective(c["dev"]))
        chosen[judge]["chosen"] = "dev objective, min_box 2, LoCoMo 4-8 msg/box" if sane else \
            "dev objective, min_box 2 (no candidate with LoCoMo 4-8 msg/box)"
    lines = ["| candidate | TIAGE dev Pk / WD / F1 | DialSeg711 Pk / WD / F1 | LoCoMo msg/box | chosen |",
             "|---|---|---|---|---|"]
    for c in report["candidates"]:
        cells = [" / ".join(f"{c[ds][m]:.3f}" for m in ("pk", "wd", "f1")) for ds in ("dev", "dialseg711")]
        lines.append(f"| {c['name']} | {cells[0]} | {cells[1]} | {c['locomo']['mean']} | {'yes' if c.get('chosen') else ''} |")
    RUNS.mkdir(parents=True, exist_ok=True)
    (RUNS / md_name).write_text("\n".join(lines) + "\n")
    print("\n".join(lines), file=sys.stderr)
    return chosen


def chosen_fields(c: dict) -> dict:
    """A chosen candidate's settings and figures, as the fits print them on stdout."""
    return {k: c[k] for k in ("name", "loom", "dev", "dialseg711", "locomo")}


def uses_llm(cfg) -> bool:
    """Whether the config's judge asks the LLM (only the hybrid's score requests can come from the cache)."""
    from ..judges import make_judge

    judge = make_judge(cfg.loom)
    if judge.uses_llm and cfg.loom.judge != "hybrid":
        raise SystemExit(f"{cfg.name}: judge {cfg.loom.judge!r} asks the LLM in words; this report reads only "
                         "cached likelihood scores (use `membox eval segmentation` for it)")
    return judge.uses_llm


def cached_prefix(dialogues, cache, window: int) -> int:
    """How many leading dialogues have every score the judges ask for in the cache (a fit.cache.ScoreCache)."""
    from .cache import judge_order

    for n, d in enumerate(dialogues):
        if not all(r in cache for per in judge_order(d.messages, window) for r in per):
            return n
    return len(dialogues)


def configs_report(cfgs: dict[str, Config], dialogues, emb, scorer, after: int, stem: str) -> dict:
    """Each config's judge on the dialogues (the Loom's online rule, `evaluate`; the hybrid's LLM scores from
    `scorer`): macro Pk / WD / F1, box sizes and each dialogue's row; with `after`, also the macro averages over the
    dialogues after the first `after` (a part held out of a choice). A line per config to stderr."""
    import time

    from ..evaluation.segmentation import summarise

    out = {}
    for spec, cfg in cfgs.items():
        t0 = time.time()
        rows, s = evaluate(cfg, dialogues, embedder=emb, backend=scorer if uses_llm(cfg) else None)
        out[spec] = {"judge": cfg.loom.judge, **{k: s[k] for k in ("pk", "wd", "f1", "messages_per_box",
                                                                   "hyp_boundaries_per_dialogue",
                                                                   "ref_boundaries_per_dialogue")},
                     "dialogue_rows": [{k: r[k] for k in ("id", "turns", "pk", "wd", "f1", "hyp")} for r in rows]}
        print(f"{stem} {spec:16s} {s['pk']:.3f} / {s['wd']:.3f} / {s['f1']:.3f}  "
              f"({s['hyp_boundaries_per_dialogue']:.2f} boundaries per dialogue, reference "
              f"{s['ref_boundaries_per_dialogue']:.2f}; {time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
        if 0 < after < len(rows):
            rest = summarise(rows[after:])
            out[spec][f"after_{after}"] = {k: rest[k] for k in ("dialogues", "pk", "wd", "f1",
                                                                "hyp_boundaries_per_dialogue")}
            print(f"{stem} {spec:16s} {rest['pk']:.3f} / {rest['wd']:.3f} / {rest['f1']:.3f}  "
                  f"(dialogues {after + 1}-{len(rows)} alone)", file=sys.stderr, flush=True)
    return out
