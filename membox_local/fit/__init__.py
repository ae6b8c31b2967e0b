"""`membox fit`: fit the continuity judges' weights and thresholds on human topic boundaries (TIAGE), with
DialSeg711 and LoCoMo box sizes measured beside them (BENCHMARKS.md, "Topic segmentation").

    membox fit embedding   # the embedding judge's threshold and MiniLM-only hybrids (configs' `threshold`)
    membox fit hybrid      # the hybrid with the LLM's likelihood features (--join K, --history N, --no-lm)
    membox fit content     # the CPU default's judge: content vector, weights, cap and bias (configs/cpu.toml)
    membox fit switch      # the hard-switch threshold on the PMI ratio (configs/cpu-switch.toml)
    membox fit crossencoder  # the continuity cross-encoder over MiniLM (ce_continue; configs/cpu.toml)
    membox fit prob RUN    # llm-logprob's prob_threshold from a scored `membox eval segmentation` run
    membox fit evidence    # box-hits' second stage ([retrieve] evidence_model) on LoCoMo dev's evidence lines
    membox fit keeping     # which sentences a record keeps ([extract] keep_model), on LoCoMo dev's evidence lines

Every decision goes through the Loom's own online rule (`evaluation.segmentation.run_segmenter`). Data:
--data-dir (default $MEMBOX_DATA, else ../shared/data). Embedding vectors are kept in
runs/segmentation/vectors.npz, LLM scores in --cache-dir (default benchmarks/cache: committed and text-free;
missing ones are computed and appended, so a long run resumes). Results: runs/segmentation/<name>.json, and with
--save a copy in benchmarks/results/. Paths are relative to the working directory: run it from a checkout's root.
Each subcommand's module holds its protocol; the shared pieces are cache, data, logistic, measure and report.
"""
from __future__ import annotations

import argparse
from ..argtypes import count

COMMANDS = {  # subcommand -> (module, help)
    "embedding": ("embedding", "the embedding judge's threshold and the MiniLM-only hybrids (fit, choose, report)"),
    "hybrid": ("hybrid", "the hybrid with the LLM's likelihood features (fit, choose, report)"),
    "content": ("content", "the CPU default's judge: content vector + LLM weight, cap and bias, from TIAGE"),
    "switch": ("switch", "the hard-switch threshold on the PMI ratio, from TIAGE-train joins"),
    "crossencoder": ("crossencoder", "the continuity cross-encoder over MiniLM (LoRA adapter + head) on TIAGE train"),
    "prob": ("prob", "llm-logprob's prob_threshold from a run scored with prob_threshold=0"),
    "evidence": ("evidence", "box-hits' second stage: the evidence cross-encoder on LoCoMo dev, cross-validated"),
    "keeping": ("keeping", "which sentences a record keeps ([extract] keep_model), on LoCoMo dev, cross-validated"),
}
# `membox fit content`: the LLM's features beside the content logit, by default and to choose from
CONTENT_LM = ["lm_pmi_conv", "lm_pmi_conv_low"]
CONTENT_LM_CHOICES = CONTENT_LM + ["lm_pmi_ratio", "lm_pmi", "lm_pmi_low", "lm_cond"]


def _run(args) -> int:
    import importlib

    return importlib.import_module(f"{__name__}.{COMMANDS[args.fit_cmd][0]}").main(args)


def _common(data: bool = True) -> argparse.ArgumentParser:
    from .data import default_data_dir

    p = argparse.ArgumentParser(add_help=False)
    if data:
        p.add_argument("--data-dir", default=default_data_dir(),
                       help="folder with segmentation/*.json and locomo-dev.json (default: $MEMBOX_DATA or "
                            "../shared/data)")
        p.add_argument("--config", default="cpu", help="config name in configs/ or a .toml path (default: cpu)")
        p.add_argument("--cache-dir", default="benchmarks/cache",
                       help="folder of the LLM-score cache lm-scores-<backend>-<model>.tsv (default: benchmarks/cache)")
    p.add_argument("--save", action="store_true",
                   help="also keep the result as benchmarks/results/segmentation-<name>.json")
    return p


def _own_options(p, name: str) -> None:
    """A subcommand whose module says its own options (add_arguments)."""
    import importlib

    importlib.import_module(f"{__name__}.{name}").add_arguments(p)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("fit", help="fit the continuity judges and the evidence scorer (see BENCHMARKS.md)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="fit_cmd", required=True)
    def command(name: str, data: bool = True) -> argparse.ArgumentParser:
        module, helptext = COMMANDS[name]
        sp = sub.add_parser(name, help=helptext, parents=[_common(data)])
        sp.set_defaults(func=_run, fit_parser=sp)
        return sp

    e = command("embedding")
    e.add_argument("--dialseg-limit", type=count(1), help="only the first N DialSeg711 dialogues")
    e.add_argument("--choose-only", action="store_true",
                   help="only re-apply the selection rule to runs/segmentation/fit.json")

    h = command("hybrid")
    h.add_argument("--train-limit", type=count(1), help="only the first N TIAGE-train dialogues")
    h.add_argument("--dialseg-limit", type=count(1), help="only the first N DialSeg711 dialogues")
    h.add_argument("--locomo-limit", type=count(0), default=60, help="first N messages of each LoCoMo conversation")
    h.add_argument("--score-only", action="store_true", help="only compute and cache the scores")
    h.add_argument("--history", type=count(1), help="loom.history for the *_conv features (default: the config's)")
    h.add_argument("--no-lm", action="store_true", help="MiniLM features only (no LLM scores): sets cos and all")
    h.add_argument("--ce", action="store_true",
                   help="also the sets with the continuity cross-encoder's logit (ce_continue, [loom] ce_model)")
    h.add_argument("--ce-model", metavar="FILE",
                   help="--ce: these cross-encoder weights instead of the config's [loom] ce_model (e.g. "
                        "content/ce-tiage-lme-all-minilm-l6-v2.safetensors)")
    h.add_argument("--join", type=count(0), default=0, metavar="K",
                   help="also fit on TIAGE-train dialogues joined K at a time, and choose on TIAGE dev as it is and "
                        "joined K at a time (DialSeg711's construction, from TIAGE only)")

    c = command("content")
    c.add_argument("--dialseg-limit", type=count(0), default=0,
                   help="first N DialSeg711 dialogues (reported only; default 0: all 711, every score is cached)")
    c.add_argument("--locomo-limit", type=count(0), default=60,
                   help="first N messages of each LoCoMo conversation (0: none, and no box-size condition)")
    c.add_argument("--locomo-report", type=count(0), default=200,
                   help="LoCoMo box sizes are also reported on the first N messages of each conversation")
    c.add_argument("--lm", nargs="+", default=CONTENT_LM, choices=CONTENT_LM_CHOICES,
                   help=f"the LLM's features beside the content logit (default: {' '.join(CONTENT_LM)})")
    c.add_argument("--lm-fold", type=count(1), default=100, metavar="N",
                   help="TIAGE-train dialogues 0..N-1 fit the LLM's weight, the others the content model that "
                        "gives it its logit (out of fold; default 100)")
    c.add_argument("--compare", nargs="+", metavar="SPEC", default=None,
                   help="configs measured on the same subsets, as benchmarks/segmentation_report.py names them "
                        "(default: --config and cpu-switch)")
    c.add_argument("--no-lm", action="store_true",
                   help="ablation: no LLM at all, the content model alone and no switch rule")
    c.add_argument("--ce", action="store_true",
                   help="no LLM: the continuity cross-encoder's logit (ce_continue) beside the content logit instead of "
                        "the PMI, no switch rule (needs `membox fit crossencoder --write` and `... --skip 100`)")
    c.add_argument("--ce-features", nargs="+", default=["ce_continue", "ce_conv_low"],
                   choices=["ce_continue", "ce_conv", "ce_conv_low"],
                   help="--ce: the cross-encoder's features beside the content logit (default: ce_continue ce_conv_low)")
    c.add_argument("--write", action="store_true",
                   help="write configs/content/tiage-<embedder>.json (and keep the result, as --save)")

    s = command("switch")
    s.add_argument("--dialseg-limit", type=count(1), default=125, help="first N DialSeg711 dialogues")
    s.add_argument("--train-limit", type=count(1), default=100, help="first N TIAGE-train dialogues (switch fit)")
    s.add_argument("--locomo-limit", type=count(0), default=200, help="first N messages of each LoCoMo conversation")

    for name in ("crossencoder", "evidence", "keeping"):
        _own_options(command(name), name)
    pr = command("prob", data=False)
    pr.add_argument("scored", help="output folder of `membox eval segmentation --judge llm-logprob "
                                   "--set loom.prob_threshold=0 --out DIR`")
