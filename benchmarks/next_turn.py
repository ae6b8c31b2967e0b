"""EventWeave's own task on LoCoMo dev builds (issue 23; membox_local.evaluation.next_turn): the next turn of the
conversation generated with and without the event-graph memory of what was said before, scored against the turn
that was said (BLEU-4 with sacrebleu, ROUGE-L F1 with rouge-score), the same model and targets for both.

    python benchmarks/next_turn.py --conversations conv-26 conv-30 --builds runs/builds-boxes --turns 30 \\
        --save benchmarks/results/next-turn.json

The builds are those of `membox eval locomo --config eventweave --boxes-only` (benchmarks/fit_eventweave.py says
how). The model is the config's answering model unless --model names another (models/manifest.toml). The saved
file holds ids and scores only (no turn text: the data's licence keeps it out). Resumable: records already in
--records are kept.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import sys
from pathlib import Path

from membox_local.evaluation.locomo import DEFAULT_DATA, build_dir


def table(records: list[dict], conditions: list[str]) -> list[str]:
    from membox_local.evaluation.next_turn import corpus_bleu

    lines = ["| memory | turns | BLEU-4 (corpus) | BLEU-4 (mean of turns) | ROUGE-L F1 | memory tokens | s/turn |",
             "|---|---|---|---|---|---|---|"]
    for c in conditions:
        rs = [r for r in records if r["condition"] == c]
        if not rs:
            continue
        n = len(rs)
        lines.append(f"| {c} | {n} | {corpus_bleu([r['prediction'] for r in rs], [r['reference'] for r in rs]):.2f} | "
                     f"{sum(r['bleu4'] for r in rs) / n:.2f} | {sum(r['rougeL'] for r in rs) / n:.2f} | "
                     f"{sum(r['memory_tokens'] for r in rs) / n:.0f} | {sum(r['seconds'] for r in rs) / n:.1f} |")
    return lines


def main(argv: list[str] | None = None, embedder=None, backend=None) -> int:
    """`embedder`, `backend`: doubles for tests (default: the config's embedder and answering model)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="a LoCoMo-format .json file")
    ap.add_argument("--config", default="eventweave", help="the config the builds were made with")
    ap.add_argument("--conversations", nargs="+", required=True, help="conversations with an event graph built")
    ap.add_argument("--builds", default="runs/builds-boxes", help="where the builds are (as eval locomo --builds)")
    ap.add_argument("--turns", type=int, default=30, help="target turns per conversation, spread evenly")
    ap.add_argument("--recent", type=int, default=6, help="turns of the session shown before the target")
    ap.add_argument("--budget", type=int, default=500, help="the memory's context budget in tokens")
    ap.add_argument("--max-tokens", type=int, default=60, help="the generated turn's budget in model tokens")
    ap.add_argument("--model", help="the generating model (default: the config's answering model)")
    ap.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0: the config's)")
    ap.add_argument("--records", default="runs/next-turn.jsonl", help="per-turn records (with text; not committed)")
    ap.add_argument("--save", help="write the table and the per-turn scores here (JSON, ids and scores only)")
    a = ap.parse_args(argv)

    from membox_local.config import load_config
    from membox_local.evaluation.locomo import load_samples
    from membox_local.evaluation.next_turn import generate, sample_targets
    from membox_local.memory import Memory

    cfg = load_config(a.config)
    llm = cfg.answer_llm()
    if a.model:
        llm = dataclasses.replace(llm, model=a.model)
    if a.threads:
        llm = dataclasses.replace(llm, n_threads=a.threads)
    if backend is None:
        from membox_local.backends import make_backend

        backend = make_backend(llm)
    conditions = ["none", "event-graph"]
    path = Path(a.records)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            r = json.loads(line)
            done[(r["conversation"], r["message_id"], r["condition"], r["model"])] = r
    records = []
    try:
        for sample in load_samples(a.data, a.conversations):
            conv = sample["sample_id"]
            folder = build_dir(a.builds, cfg, conv)
            if not (folder / "memory.db").exists():
                sys.exit(f"error: no build of {conv} in {folder}; build it first (see this script's help)")
            mem = Memory(folder, cfg, embedder=embedder)
            try:
                targets = sample_targets(mem.store.messages(conv), a.turns, a.recent)
                for i, t in enumerate(targets, 1):
                    keys = [(conv, t.message.message_id, c, llm.model) for c in conditions]
                    if not all(k in done for k in keys):
                        with open(path, "a", encoding="utf-8") as fh:
                            for r in generate(mem, conv, [t], backend, conditions, a.budget, max_tokens=a.max_tokens):
                                r["model"] = llm.model
                                done[(conv, r["message_id"], r["condition"], llm.model)] = r
                                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
                        print(f"{conv}: {i}/{len(targets)} turns", file=sys.stderr)
                    records += [done[k] for k in keys]
            finally:
                mem.close()
    finally:
        backend.close()
    lines = table(records, conditions)
    print("\n".join(lines))
    if a.save:
        Path(a.save).write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {platform.node()}",
            "config": a.config, "model": llm.model, "conversations": a.conversations, "turns": a.turns,
            "recent": a.recent, "budget": a.budget, "table": lines,
            "records": [{k: r[k] for k in ("conversation", "message_id", "condition", "bleu4", "rougeL",
                                           "memory_tokens", "seconds")} for r in records],
            "command": "python benchmarks/next_turn.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
