"""Extraction with each model on the same sample of LoCoMo boxes: grounding, speaker grounding, mix-ups.

    # 30 boxes (10 per conversation, spread evenly, 3+ messages) from the boxes-only builds that
    # benchmarks/answer_models.py made (runs/builds-boxes/cpu/<conversation>); each model extracts every box
    python benchmarks/extract_models.py run --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b --threads 1
    # print each box's messages and each model's events (de-duplicated as the Loom stores them), numbered,
    # for the hand check
    python benchmarks/extract_models.py show
    # the table: events per box, share lexically grounded, share grounded in the named speaker's lines, and,
    # from the hand labels (benchmarks/results/extract-mixups.json: model -> box key -> numbers of the events
    # that name the wrong person), mix-ups per event and how many the speaker check flags
    python benchmarks/extract_models.py report
    # the Weaver with each model: the sampled boxes of each conversation, in time order, with that model's events,
    # woven by that same model (link verification and trace initialisation); traces, events per trace
    python benchmarks/extract_models.py weave --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b --threads 1

Records go to runs/extract-models/<model>.jsonl (resumable), weaving figures to runs/extract-models/weave-<model>.json;
the hand labels hold box keys and event numbers only, no dataset text.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from membox_local.config import load_config
from membox_local.loom import event_grounding
from membox_local.memory import open_store

REPO = Path(__file__).resolve().parent.parent
CONVERSATIONS = ["conv-26", "conv-30", "conv-44"]
OUT = Path("runs/extract-models")
LABELS = REPO / "benchmarks" / "results" / "extract-mixups.json"


def sample_boxes(builds: Path, per_conversation: int):
    """Every n-th box of 3+ messages of each conversation, `per_conversation` of them."""
    out = []
    for conv in CONVERSATIONS:
        store = open_store(builds / conv)
        boxes = [b for b in store.boxes(conv) if len(b.messages) >= 3]
        store.close()
        if not boxes:
            raise SystemExit(f"{builds / conv}: no boxes; run benchmarks/answer_models.py qa first (it builds them)")
        step = max(1, len(boxes) // per_conversation)
        out += [b for b in boxes[::step][:per_conversation]]
    return out


def key(box) -> str:
    return f"{box.conversation_id}/{box.messages[0].message_id}"


def run(a) -> None:
    from membox_local.backends import make_backend
    from membox_local.backends.base import JsonRequest
    from membox_local.prompts import extract_prompt, extract_schema

    cfg = load_config(a.config)
    boxes = sample_boxes(Path(a.builds), a.per_conversation)
    OUT.mkdir(parents=True, exist_ok=True)
    for model in a.models:
        path = OUT / f"{model}.jsonl"
        done = {json.loads(l)["box"] for l in path.open()} if path.exists() else set()
        backend = make_backend(dataclasses.replace(cfg.llm, model=model, n_threads=a.threads or cfg.llm.n_threads))
        try:
            with path.open("a") as fh:
                for box in boxes:
                    if key(box) in done:
                        continue
                    t0 = time.time()
                    res = backend.json([JsonRequest(extract_prompt(box.messages, box.session_date),
                                                    extract_schema(cfg.extract), "extract", cfg.extract.max_tokens)])[0]
                    if isinstance(res, BaseException):
                        rec = {"box": key(box), "error": str(res), "s": round(time.time() - t0, 2)}
                    else:
                        rec = {"box": key(box), "events": res.data.get("events", []), "s": round(time.time() - t0, 2)}
                    fh.write(json.dumps(rec) + "\n")
                    fh.flush()
                    print(f"{model} {key(box)} {rec['s']} s", file=sys.stderr)
        finally:
            backend.close()


def _records(model: str) -> dict[str, dict]:
    """A model's records by box key, events de-duplicated as the Loom stores them."""
    from membox_local.loom import _dedupe

    path = OUT / f"{model}.jsonl"
    recs = {r["box"]: r for r in map(json.loads, path.open())} if path.exists() else {}
    return {k: dict(r, events=_dedupe(r.get("events", []))) for k, r in recs.items()}


def show(a) -> None:
    boxes = sample_boxes(Path(a.builds), a.per_conversation)
    models = [p.stem for p in sorted(OUT.glob("*.jsonl"))]
    for box in boxes:
        print(f"=== {key(box)} ({box.session_date})")
        for m in box.messages:
            print(f"  {m.render()}")
        for model in models:
            rec = _records(model).get(key(box), {})
            for i, e in enumerate(rec.get("events", []), 1):
                print(f"  [{model} {i}] {e}  (speaker grounding {event_grounding(e, box, True):.2f})")


def report(a) -> dict:
    cfg = load_config(a.config)
    boxes = {key(b): b for b in sample_boxes(Path(a.builds), a.per_conversation)}
    labels = {k: v for k, v in json.loads(LABELS.read_text()).items() if k != "what"} if LABELS.exists() else {}
    rows = {}
    for path in sorted(OUT.glob("*.jsonl")):
        model = path.stem
        recs = [r for k, r in _records(model).items() if k in boxes]
        events = [(r["box"], i, e) for r in recs for i, e in enumerate(r.get("events", []), 1)]
        lex = [event_grounding(e, boxes[b], False) >= cfg.extract.min_grounding for b, _, e in events]
        spk = [event_grounding(e, boxes[b], True) >= cfg.extract.min_grounding for b, _, e in events]
        mixed = {(b, i) for b, nums in labels.get(model, {}).items() for i in nums}
        flagged = [(b, i) for (b, i, _), ok in zip(events, spk) if not ok]
        n = len(events) or 1
        rows[model] = {
            "boxes": len(recs), "failed": sum("error" in r for r in recs), "events": len(events),
            "events_per_box": round(len(events) / max(1, len(recs)), 2),
            "lexically_grounded": round(sum(lex) / n, 3), "speaker_grounded": round(sum(spk) / n, 3),
            "hand_checked": model in labels, "mixups": len(mixed), "mixup_share": round(len(mixed) / n, 3),
            "mixups_flagged": len(mixed & set(flagged)), "flagged_not_mixups": len(set(flagged) - mixed),
            "s_per_box": round(sum(r["s"] for r in recs) / max(1, len(recs)), 1),
        }
    print("| model | boxes | events/box | lexically grounded | speaker grounded | mix-ups (hand) | "
          "mix-ups flagged by the speaker check | flagged, not mix-ups | s/box |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model, r in rows.items():
        hand = f"{r['mixups']} ({100 * r['mixup_share']:.1f}%)" if r["hand_checked"] else "not checked"
        print(f"| {model} | {r['boxes']} | {r['events_per_box']} | {100 * r['lexically_grounded']:.1f}% | "
              f"{100 * r['speaker_grounded']:.1f}% | {hand} | {r['mixups_flagged']} | {r['flagged_not_mixups']} | "
              f"{r['s_per_box']} |")
    if a.save:
        Path(a.save).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=2) + "\n")
    return rows


def weave(a) -> dict:
    """Each model weaves its own events of the sampled boxes, per conversation, in a scratch memory; the figures
    say how readily it links: traces, events per trace, the largest trace, traces spanning several boxes."""
    import tempfile

    from membox_local.backends import make_backend
    from membox_local.memory import Memory
    from membox_local.records import Event
    from membox_local.weaver import Weaver

    boxes = sample_boxes(Path(a.builds), a.per_conversation)
    out = {}
    for model in a.models:
        recs = _records(model)
        cfg = load_config(a.config, {"llm.model": model, "llm.n_threads": a.threads or 0})
        backend = make_backend(cfg.llm)
        t0, rows = time.time(), []
        try:
            for conv in CONVERSATIONS:
                with tempfile.TemporaryDirectory() as tmp:
                    mem = Memory(tmp, cfg, backend=backend)
                    store, weaver = mem.store, Weaver(mem.store, cfg)
                    for box in (b for b in boxes if b.conversation_id == conv):
                        store.add_messages(box.messages)
                        box_id = store.open_box(box.messages[0])
                        for m in box.messages:
                            store.file_message(m, box_id, "continue", None)
                        texts = recs.get(key(box), {}).get("events", [])
                        box.id = box_id
                        events = [Event(0, box_id, conv, t, box.session_date,
                                        event_grounding(t, box, cfg.extract.speaker_grounding)) for t in texts]
                        stored = store.save_extraction(box_id, "", [], events)
                        mem.driver().drive(weaver.weave(store.box(box_id)), conv)
                        print(f"{model} woven {key(box)} ({len(stored)} events)", file=sys.stderr)
                    for trace, evs in store.traces_with_events(conv):
                        rows.append({"conversation": conv, "events": len(evs),
                                     "boxes": len({e.box_id for e in evs})})
                    mem.store.close()  # not mem.close(): that would close the backend the next conversation uses
        finally:
            backend.close()
        sizes = [r["events"] for r in rows] or [0]
        out[model] = {"traces": len(rows), "events_per_trace": round(sum(sizes) / max(1, len(rows)), 2),
                      "largest_trace": max(sizes), "multi_box_traces": sum(r["boxes"] > 1 for r in rows),
                      "seconds": round(time.time() - t0, 1)}
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"weave-{model}.json").write_text(json.dumps(out[model], indent=1) + "\n")
        print(json.dumps({model: out[model]}))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["run", "show", "report", "weave"])
    p.add_argument("--config", default="cpu")
    p.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    p.add_argument("--builds", default="runs/builds-boxes/cpu")
    p.add_argument("--per-conversation", type=int, default=10)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--save", help="report: write the table's figures to this JSON file")
    a = p.parse_args(argv)
    {"run": run, "show": show, "report": report, "weave": weave}[a.step](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
