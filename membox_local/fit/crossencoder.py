"""`membox fit crossencoder`: the continuity cross-encoder (membox_local/continuity.py) fitted on TIAGE train.

    membox fit crossencoder [--epochs 2] [--skip N] [--train-limit N] [--write]
                            [--longmemeval FILE [--lme-sessions 300]]

Pairs: each TIAGE-train turn i >= 2 against its two previous turns (what the hybrid judge shows it: with
min_box_messages = 2 the open box's last two messages are always the two turns before), labelled "continues"
unless a reference segment starts at i; plus, for DialSeg711-like hard switches built from TIAGE train only, the
last two turns of one dialogue against the first turn of another (dialogue j with j + 1 and with j + 7): "shift".
MiniLM's weights stay frozen; a rank-8 adapter on each layer's query, value and feed-forward layers and a one-unit
head on the mean-pooled tokens are fitted with binary cross-entropy (AdamW, linear decay, batches of 16, seed 0,
one CPU thread). With --longmemeval, distinct user-and-assistant sessions of that (dev) file are added the same way:
each session's turns continue it, its end against another session's first turn is a switch (configs/cpu-ce.toml's
adapter, ce-tiage-lme-<embedder>). Dev (TIAGE dev's teacher-forced pairs) is only reported: its ROC AUC. --skip N
leaves the first N training dialogues out (the out-of-fold model of `membox fit content --ce`). Writes the weights
to runs/segmentation/ce-tiage-<embedder>.safetensors (with --write to configs/content/, where [loom] ce_model finds
it) and runs/segmentation/crossencoder.json. About 4 minutes per epoch on one core of a 2-core x86_64 VM.
"""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from ..config import CONFIG_DIR, load_config
from .data import data_dir, dialogues, longmemeval_sessions
from .report import RUNS, command_line, write_result

JOIN_OFFSETS = (1, 7)  # dialogue j's end against dialogue j + offset's first turn: a hard switch


def training_pairs(dials, joins: bool = True) -> list[tuple[tuple[str, str], int]]:
    """((context, new line), 1 if it continues) for every turn with two turns before it, and the joins."""
    from ..continuity import pair_text

    out = []
    for d in dials:
        starts = set(d.boundaries)
        for i in range(2, len(d.messages)):
            out.append((pair_text(d.messages[i - 2:i], d.messages[i]), int(i not in starts)))
    if joins:
        for off in JOIN_OFFSETS:
            for j in range(len(dials) - off):
                out.append((pair_text(dials[j].messages[-2:], dials[j + off].messages[0]), 0))
    return out


def add_arguments(p) -> None:
    """`membox fit crossencoder`'s options (fit/__init__.py makes the subcommand)."""
    from ..argtypes import count

    p.add_argument("--epochs", type=count(1), default=2, help="passes over the training pairs (default 2)")
    p.add_argument("--train-limit", type=count(1), help="only the first N TIAGE-train dialogues")
    p.add_argument("--skip", type=count(0), default=0, help="leave the first N training dialogues out (out of fold)")
    p.add_argument("--dev-limit", type=count(1), help="only the first N TIAGE-dev dialogues for the reported AUC")
    p.add_argument("--longmemeval", metavar="FILE",
                   help="also user-and-assistant sessions of this LongMemEval file (dev only: e.g. "
                        "../shared/data/longmemeval/longmemeval_s_dev.json.gz), each with its joins; the weights are "
                        "named ce-tiage-lme-<embedder>")
    p.add_argument("--lme-sessions", type=count(1), default=300,
                   help="--longmemeval: how many distinct sessions, drawn by a seeded shuffle (default 300)")
    p.add_argument("--write", action="store_true",
                   help="write configs/content/ce-tiage-<embedder>.safetensors (and keep the result, as --save)")


def train(pairs, base: str, epochs: int, seed: int = 0, batch: int = 16, lr: float = 5e-4, log=None,
          reading: str = "continuity", threads: int = 1):
    """The adapter and head fitted on `pairs`; returns the PairModel (adapters unmerged)."""
    import torch

    from ..continuity import PairModel

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    model = PairModel(base, trainable=True, reading=reading)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    order, rng = list(range(len(pairs))), random.Random(seed)
    steps = epochs * ((len(pairs) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / max(1, steps)))
    t0, done = time.time(), 0
    for epoch in range(epochs):
        rng.shuffle(order)
        total = 0.0
        for k in range(0, len(order), batch):
            idx = order[k:k + batch]
            y = torch.tensor([float(pairs[i][1]) for i in idx])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model.logits([pairs[i][0] for i in idx]), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
            done += 1
            if log and done % 50 == 0:
                log(f"  step {done}/{steps}, loss {loss.item():.3f}, {time.time() - t0:.0f}s")
        if log:
            log(f"epoch {epoch + 1}: mean loss {total / len(order):.4f} ({time.time() - t0:.0f}s)")
    return model


def pair_auc(model, pairs) -> float:
    import torch
    from sklearn.metrics import roc_auc_score

    with torch.no_grad():
        z = [v for k in range(0, len(pairs), 64) for v in model.logits([p for p, _ in pairs[k:k + 64]]).tolist()]
    return float(roc_auc_score([y for _, y in pairs], z))


def fit(train_dials, dev_dials, base: str, epochs: int, path: Path, meta: dict, log=print, extra=()) -> dict:
    """Train on `train_dials` and the `extra` dialogues (each set with its own joins), save to `path`, report seconds
    and TIAGE dev's pair AUC."""
    pairs = training_pairs(train_dials) + training_pairs(list(extra))
    log(f"cross-encoder: {len(pairs)} training pairs ({sum(1 - y for _, y in pairs)} shifts), {epochs} epochs")
    t0 = time.time()
    model = train(pairs, base, epochs, log=log)
    seconds = round(time.time() - t0, 1)
    dev_pairs = training_pairs(dev_dials, joins=False)
    auc = round(pair_auc(model, dev_pairs), 4)
    info = {**meta, "train_pairs": len(pairs), "epochs": epochs, "train_seconds": seconds,
            "tiage_dev_pair_auc": auc, "date": time.strftime("%Y-%m-%d")}
    model.save(path, info)
    log(f"cross-encoder: {seconds}s; TIAGE dev pair AUC {auc}; wrote {path} ({path.stat().st_size} bytes)")
    return info


def main(args) -> int:
    data = data_dir(args.data_dir)
    cfg = load_config(args.config)
    train_dials = dialogues(data, "tiage_train", args.train_limit)[args.skip:]
    dev = dialogues(data, "tiage_dev", args.dev_limit)
    extra = longmemeval_sessions(args.longmemeval, args.lme_sessions) if args.longmemeval else []
    tag = "tiage" + ("-lme" if extra else "")
    name = f"ce-{tag}-{cfg.embedder.model}" + (f"-skip{args.skip}" if args.skip else "") + ".safetensors"
    path = (CONFIG_DIR / "content" if args.write else RUNS) / name
    fitted_on = f"TIAGE train dialogues {args.skip}-{args.skip + len(train_dials) - 1} and their joins " \
                f"(offsets {JOIN_OFFSETS})"
    if extra:
        fitted_on += f"; {len(extra)} LongMemEval sessions of {Path(args.longmemeval).name} (seed 0) and their joins"
    meta = {"fitted_on": fitted_on, "command": command_line(args)}
    info = fit(train_dials, dev, cfg.embedder.model, args.epochs, path,
               meta, log=lambda s: print(s, file=sys.stderr, flush=True), extra=extra)
    write_result(f"crossencoder{'-lme' if extra else ''}" + (f"-skip{args.skip}" if args.skip else ""),
                 {**info, "weights": str(path)}, args.save or args.write)
    print(json.dumps(info, indent=2))
    return 0
