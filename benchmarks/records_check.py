"""The records each build model writes with cited lines (issue 50): what code keeps, drops and corrects, and the
hand check of who the kept events name.

    # 30 LoCoMo dev boxes (10 each of conv-26, conv-30, conv-44, every n-th
    # box of 3+ messages) from the default judge's boxes-only builds (`membox eval locomo --config cpu-ce --boxes-only
    # --no-qa --conversations conv-26 conv-30 conv-44 --builds runs/builds-boxes --modes turn-rag --budgets 500
    # --out runs/records-boxes`), and the demo conversation's boxes; each model's raw output is saved
    python benchmarks/records_check.py run --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b --threads 1
    # the same boxes with [extract] events = "lines" (the model writes the topic; code takes the lines' words)
    python benchmarks/records_check.py run --models qwen2.5-coder-0.5b --events lines --threads 1
    # each box's numbered lines and each model's kept events (attribution.py applied to the saved output), numbered,
    # with their sources and what was dropped: what the hand check reads
    python benchmarks/records_check.py show
    # per model: events per box, dropped by reason, seconds per box, and from the hand labels
    # (benchmarks/results/records-labels.json: row -> box key -> numbers of kept events that name the wrong
    # person, or {"wrong": [...], "chat": [...], "repeated": [...]} with the numbers of the events that are
    # pleasantries and repeats too) their shares; --save writes benchmarks/results/records-check.json
    python benchmarks/records_check.py report --save

Raw outputs go to runs/records/<model>.jsonl (resumable): the attribution is applied when shown or reported, so a
change of attribution.py is measured again without a model call. Labels hold box keys and numbers only.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from membox_local.config import load_config
from membox_local.evaluation.records import (box_key as key, extract_raw, filed_boxes, keep_flags, kept,
                                             records_row, records_table, sample_boxes)
from membox_local.ingest import load_jsonl
from membox_local.prompts import numbered_lines
from membox_local.worth import line_sentences

REPO = Path(__file__).resolve().parent.parent
OUT = Path("runs/records")
LABELS = REPO / "benchmarks" / "results" / "records-labels.json"
SAVED = REPO / "benchmarks" / "results" / "records-check.json"
DEMO = REPO / "membox_local" / "data" / "demo.jsonl"
DEMO_BUILD = Path("runs/records-demo")
LINES = "+lines"  # the raw outputs of `run --events lines` (a topic: code makes the events from the lines)
KEEP = "+keep"  # their row with the config's [extract] keep_model (the labels of the row without it are older)


def without_keep(cfg):
    return dataclasses.replace(cfg, extract=dataclasses.replace(cfg.extract, keep_model=""))


def all_boxes(a) -> list:
    """The boxes of `--sample`: the LoCoMo dev sample, the demo's (filed as `make demo` files them), or both."""
    from membox_local import Memory

    locomo = sample_boxes(Path(a.builds), a.per_conversation) if a.sample in ("all", "locomo") else []
    if a.sample == "locomo":
        return locomo
    return locomo + filed_boxes(DEMO_BUILD, load_jsonl(DEMO), lambda: Memory(DEMO_BUILD, load_config(a.config)))


def run(a) -> None:
    from membox_local.backends import make_backend

    cfg = load_config(a.config)
    boxes = all_boxes(a)
    OUT.mkdir(parents=True, exist_ok=True)
    cfg.extract.events = a.events
    for model in a.models:
        backend = make_backend(dataclasses.replace(cfg.llm, model=model, n_threads=a.threads or cfg.llm.n_threads))
        try:
            extract_raw(boxes, cfg, backend, OUT / f"{model}{LINES if a.events == 'lines' else ''}.jsonl")
        finally:
            backend.close()


def records(model: str) -> dict[str, dict]:
    path = OUT / f"{model}.jsonl"
    return {r["box"]: r for r in map(json.loads, path.open())} if path.exists() else {}


def models_run() -> list[str]:
    return [p.stem for p in sorted(OUT.glob("*.jsonl"))]


def show(a) -> None:
    cfg = load_config(a.config)
    boxes = all_boxes(a)
    for box in boxes:
        print(f"=== {key(box)} ({box.session_date})")
        print("\n".join("  " + line for line in numbered_lines(box.messages).splitlines()))
        for model in models_run():
            rec = records(model).get(key(box), {})
            if "data" not in rec:
                print(f"  [{model}] {rec.get('error', 'not run')}")
                continue
            topic, events, dropped = kept(box, rec["data"], boxes, cfg)
            print(f"  [{model}] topic: {topic}   dropped: {dropped or '-'}")
            for i, e in enumerate(events, 1):
                print(f"  [{model} {i}] {e.text}  {e.sources}")
            if model.endswith(LINES) and cfg.extract.keep_model:  # the sentences the keep model left out
                for m, flags in zip(box.messages, keep_flags(box, cfg)):
                    gone = [x for x, k in zip(line_sentences(m.text), flags) if not k]
                    if gone:
                        print(f"  [{model} left out] {m.message_id}: {' | '.join(gone)}")


def report(a) -> dict:
    cfg = load_config(a.config)
    boxes = all_boxes(a)
    labels = {k: v for k, v in json.loads(LABELS.read_text()).items() if k != "what"} if LABELS.exists() else {}
    rows = {}
    for model in models_run():
        recs = records(model)
        ways = [(model, cfg)]
        if model.endswith(LINES) and cfg.extract.keep_model:  # the lines' events with the keep model, and without
            ways = [(model + KEEP, cfg), (model, without_keep(cfg))]
        for name, c in ways:
            for part, chosen in (("locomo", [b for b in boxes if b.conversation_id.startswith("conv-")]),
                                 ("demo", [b for b in boxes if not b.conversation_id.startswith("conv-")])):
                rows[f"{name} / {part}"] = records_row(chosen, boxes, recs, labels.get(name), c, key)
    print("\n".join(records_table(rows)))
    if a.save:  # rows of models whose raw outputs are not here are kept as saved before
        before = json.loads(SAVED.read_text())["rows"] if SAVED.exists() else {}
        SAVED.write_text(json.dumps({"command": "python benchmarks/records_check.py report --save",
                                     "config": a.config, "rows": before | rows}, indent=1) + "\n")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["run", "show", "report"])
    p.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    p.add_argument("--config", default="cpu-ce")
    p.add_argument("--builds", default="runs/builds-boxes/cpu-ce")
    p.add_argument("--per-conversation", type=int, default=10)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--sample", choices=["all", "locomo", "demo"], default="all")
    p.add_argument("--events", choices=["written", "lines"], default="written",
                   help="run: [extract] events (lines: saved as <model>+lines.jsonl, its own row)")
    p.add_argument("--save", action="store_true")
    a = p.parse_args()
    {"run": run, "show": show, "report": report}[a.what](a)


if __name__ == "__main__":
    main()
