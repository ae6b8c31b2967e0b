"""`membox compare CONFIG_A CONFIG_B --data PATH`: build the same conversations under two configs
(e.g. two backends) and report where they differ, stage by stage, with A as the reference:

- continuity labels: share of messages with the same judge decision;
- segmentation: Pk and WindowDiff of B's box boundaries against A's (evaluation/segmentation.py);
- boxes: counts; extraction overlap on boxes that hold exactly the same messages (keyword and event
  Jaccard, after lower-casing and collapsing whitespace);
- retrieval: Jaccard of the messages shown by the top-k boxes for each question (LoCoMo data only);
- QA: LoCoMo F1 of each config's answers (LoCoMo data only, `--questions` per conversation);
- answers to the questions given with `--ask` (any data): both sides' text and the token F1 between them;
- extraction validity: boxes whose extraction failed on each side (the model's output did not parse or fit);
- cost: LLM calls and tokens per stage, and wall time, of each.
Writes Markdown to stdout (or --out) and JSON with --json.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from .config import Config, load_config, parse_assignment
from .ingest import load_messages
from .records import Box, Message
from .argtypes import count


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    sa, sb = {_norm(x) for x in a}, {_norm(x) for x in b}
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def boundaries(boxes: Sequence[Box]) -> list[int]:
    """Message indices (within the conversation) that open a box, the first message excluded."""
    out, i = [], 0
    for box in boxes:
        if i > 0:
            out.append(i)
        i += len(box.messages)
    return out


def compare_labels(rows_a, rows_b) -> dict[str, Any]:
    a = {(r["conversation_id"], r["message_id"]): r["decision"] for r in rows_a}
    b = {(r["conversation_id"], r["message_id"]): r["decision"] for r in rows_b}
    keys = [k for k in a if k in b]
    same = sum(a[k] == b[k] for k in keys)
    return {"messages": len(keys), "same_decision": same, "agreement": same / len(keys) if keys else None}


def compare_segmentation(boxes_a: Sequence[Box], boxes_b: Sequence[Box]) -> dict[str, Any]:
    from .evaluation.segmentation import score

    n = sum(len(b.messages) for b in boxes_a)
    if n != sum(len(b.messages) for b in boxes_b):
        raise ValueError("the two builds filed a different number of messages; rebuild both from scratch")
    if n < 2:
        return {"pk": 0.0, "wd": 0.0, "k": 0}
    s = score(boundaries(boxes_a), boundaries(boxes_b), n)
    return {"pk": s["pk"], "wd": s["wd"], "k": s["k"]}


def compare_extractions(boxes_a: Sequence[Box], boxes_b: Sequence[Box]) -> dict[str, Any]:
    by_span = {tuple(m.message_id for m in b.messages): b for b in boxes_b}
    kw, ev, same_topic, matched = [], [], 0, 0
    for box in boxes_a:
        other = by_span.get(tuple(m.message_id for m in box.messages))
        if other is None or box.status != "extracted" or other.status != "extracted":
            continue
        matched += 1
        kw.append(jaccard(box.keywords, other.keywords))
        ev.append(jaccard([e.text for e in box.events], [e.text for e in other.events]))
        same_topic += _norm(box.topic) == _norm(other.topic)
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return {"boxes_same_span": matched, "keyword_jaccard": mean(kw), "event_jaccard": mean(ev),
            "same_topic": same_topic}


def locomo_questions(data: Path, conversations: Sequence[str], per_conversation: int) -> dict[str, list[dict]]:
    """Questions with gold answers from a LoCoMo .json (none for other formats)."""
    if data.suffix != ".json" or per_conversation <= 0:
        return {}
    from .evaluation.locomo import load_samples

    out = {}
    for s in load_samples(data, list(conversations)):
        qs = [q for q in s["qa"] if isinstance(q.get("question"), str) and q.get("category") != 5 and "answer" in q]
        out[str(s["sample_id"])] = qs[:per_conversation]
    return out


class Side:
    """One config's build, timed, in its own memory folder."""

    def __init__(self, name: str, cfg: Config, folder: Path, messages: list[Message], backend=None, embedder=None):
        from .memory import Memory

        self.name, self.cfg = name, cfg
        self.mem = Memory(folder, cfg, backend=backend, embedder=embedder)
        t0 = time.time()
        self.mem.add(messages, seal=True)
        self.mem.sync()
        self.build_s = time.time() - t0
        self.answer_s = 0.0

    def boxes(self, conv: str) -> list[Box]:
        return self.mem.boxes(conv)

    def shown(self, question: str, conv: str, k: int) -> list[str]:
        return [m.message_id for box, _ in self.mem.search(question, k=k, conversation_id=conv) for m in box.messages]

    def answer(self, question: str, conv: str) -> str:
        t0 = time.time()
        text = self.mem.answer(question, conv).text
        self.answer_s += time.time() - t0
        return text

    def cost(self) -> dict[str, Any]:
        return {"build_wall_s": round(self.build_s, 2), "answer_wall_s": round(self.answer_s, 2),
                "llm_usage": self.mem.store.usage_by_stage(), "build_time": self.mem.store.build_time_by_stage()}


def compare(cfg_a: Config, cfg_b: Config, messages: list[Message], workdir: Path,
            questions: dict[str, list[dict]] | None = None, k: int = 5,
            backends: tuple = (None, None), embedders: tuple = (None, None),
            asks: Sequence[str] = ()) -> dict[str, Any]:
    """Build both sides and compare; `backends`/`embedders` override the configs' (tests, notebooks)."""
    convs = list(dict.fromkeys(m.conversation_id for m in messages))
    a = Side("A", cfg_a, workdir / "a", messages, backends[0], embedders[0])
    b = Side("B", cfg_b, workdir / "b", messages, backends[1], embedders[1])
    try:
        report: dict[str, Any] = {"configs": {"A": cfg_a.name, "B": cfg_b.name}, "conversations": {}}
        for conv in convs:
            ba, bb = a.boxes(conv), b.boxes(conv)
            row: dict[str, Any] = {
                "labels": compare_labels(a.mem.store.message_rows(conv), b.mem.store.message_rows(conv)),
                "segmentation": compare_segmentation(ba, bb),
                "boxes": {"A": len(ba), "B": len(bb)},
                "failed_boxes": {"A": sum(x.status == "failed" for x in ba), "B": sum(x.status == "failed" for x in bb)},
                "extraction": compare_extractions(ba, bb),
            }
            if asks:
                from .evaluation.scorers import locomo_f1

                row["answers"] = []
                for q in asks:
                    ta, tb = a.answer(q, conv), b.answer(q, conv)
                    row["answers"].append({"question": q, "A": ta, "B": tb, "f1_between": locomo_f1(tb, ta)})
            qs = (questions or {}).get(conv, [])
            if qs:
                from .evaluation.scorers import score_locomo

                overlap, f1a, f1b = [], [], []
                for q in qs:
                    overlap.append(jaccard(a.shown(q["question"], conv, k), b.shown(q["question"], conv, k)))
                    f1a.append(score_locomo(a.answer(q["question"], conv), q["answer"], q["category"])["f1"])
                    f1b.append(score_locomo(b.answer(q["question"], conv), q["answer"], q["category"])["f1"])
                row["retrieval"] = {"questions": len(qs), "k": k, "shown_message_jaccard": sum(overlap) / len(qs)}
                row["qa_f1"] = {"A": sum(f1a) / len(qs), "B": sum(f1b) / len(qs)}
            report["conversations"][conv] = row
        report["cost"] = {"A": a.cost(), "B": b.cost()}
        return report
    finally:
        a.mem.close()
        b.mem.close()


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "/")


def to_markdown(report: dict[str, Any]) -> str:
    lines = [f"# membox compare: A = {report['configs']['A']}, B = {report['configs']['B']}", "",
             "| conversation | label agreement | Pk (B vs A) | WindowDiff | boxes A / B | failed A / B | same-span boxes | "
             "keyword Jaccard | event Jaccard | top-k overlap | QA F1 A / B |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for conv, r in report["conversations"].items():
        ret, qa = r.get("retrieval", {}), r.get("qa_f1")
        lines.append(f"| {conv} | {_fmt(r['labels']['agreement'])} | {_fmt(r['segmentation']['pk'])} | "
                     f"{_fmt(r['segmentation']['wd'])} | {r['boxes']['A']} / {r['boxes']['B']} | "
                     f"{r['failed_boxes']['A']} / {r['failed_boxes']['B']} | "
                     f"{r['extraction']['boxes_same_span']} | {_fmt(r['extraction']['keyword_jaccard'])} | "
                     f"{_fmt(r['extraction']['event_jaccard'])} | {_fmt(ret.get('shown_message_jaccard'))} | "
                     f"{_fmt(qa['A']) + ' / ' + _fmt(qa['B']) if qa else '-'} |")
    asked = [(conv, x) for conv, r in report["conversations"].items() for x in r.get("answers", [])]
    if asked:
        lines += ["", "| conversation | question | answer A | answer B | F1 between |", "|---|---|---|---|---|"]
        lines += [f"| {conv} | {_cell(x['question'])} | {_cell(x['A'])} | {_cell(x['B'])} | {_fmt(x['f1_between'])} |"
                  for conv, x in asked]
    lines += ["", "| config | build wall s | answer wall s | stage | calls | prompt tokens | completion tokens |",
              "|---|---|---|---|---|---|---|"]
    for side, c in report["cost"].items():
        for stage, u in sorted(c["llm_usage"].items()) or [("-", {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})]:
            lines.append(f"| {side} | {c['build_wall_s']} | {c['answer_wall_s']} | {stage} | {u['calls']} | "
                         f"{u['prompt_tokens']} | {u['completion_tokens']} |")
    return "\n".join(lines) + "\n"


def cmd_compare(args) -> int:
    cfg_a = load_config(args.config_a, dict(parse_assignment(x) for x in args.set_a) or None)
    cfg_b = load_config(args.config_b, dict(parse_assignment(x) for x in args.set_b) or None)
    if cfg_a.embedder.model != cfg_b.embedder.model:
        print(f"note: the configs use different embedders ({cfg_a.embedder.model} vs {cfg_b.embedder.model})",
              file=sys.stderr)
    messages = load_messages(args.data, args.conversations)
    convs = list(dict.fromkeys(m.conversation_id for m in messages))
    questions = locomo_questions(Path(args.data), convs, args.questions)
    with tempfile.TemporaryDirectory(prefix="membox-compare-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        report = compare(cfg_a, cfg_b, messages, workdir, questions, args.k, asks=args.ask)
    md = to_markdown(report)
    if args.out:
        Path(args.out).write_text(md)
    else:
        print(md)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("compare", help="build the same data under two configs and compare stage by stage")
    p.add_argument("config_a", help="reference config (name in configs/ or .toml path)")
    p.add_argument("config_b", help="the config compared with it (name in configs/ or .toml path)")
    p.add_argument("--data", required=True, help="LoCoMo .json or messages .jsonl")
    p.add_argument("--conversations", nargs="*", help="only these conversation ids")
    p.add_argument("--questions", type=count(0), default=10, help="LoCoMo questions per conversation (0: none)")
    p.add_argument("-k", type=count(1), default=5, help="top-k boxes for the retrieval overlap")
    p.add_argument("--set-a", nargs="*", default=[], metavar="KEY=VALUE",
                   help="change config A's keys, e.g. llm.backend=llamacpp llm.model=qwen2.5-coder-0.5b 'answer.llm={}'")
    p.add_argument("--set-b", nargs="*", default=[], metavar="KEY=VALUE", help="the same for config B")
    p.add_argument("--ask", nargs="*", default=[], metavar="QUESTION",
                   help="questions both sides answer (any data); the report shows both answers side by side")
    p.add_argument("--workdir", help="keep the two memories here (default: a temporary folder)")
    p.add_argument("--out", help="write the Markdown report here instead of stdout")
    p.add_argument("--json", help="also write the full report as JSON here")
    p.set_defaults(func=cmd_compare)
