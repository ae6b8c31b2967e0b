"""Build speed: today's build and the faster one side by side, in one run, on whole LoCoMo dev conversations.

    python benchmarks/build_speed.py --conversations conv-26 conv-30            # whole conversations
    python benchmarks/build_speed.py --conversations conv-26 --sessions 5       # a cheaper pass: sessions 1-5

Each conversation is built twice into fresh memories, one after the other in this process, with the same config
(`--config`, default cpu): A ("before") with the speed settings set back (`--before`, default
llm.grammar_check_first=false llm.stage_contexts=false), B with the config as it is. `membox compare` (membox_local/compare.py) does the
builds and says how far B's memory differs from A's: the judge's decisions (label agreement, Pk and WindowDiff of
B's boxes against A's), boxes, failed boxes, keywords and events of same-span boxes (Jaccard). A speed setting
that leaves the build as it was shows agreement 1.0, Pk 0 and Jaccard 1.0; one that changes it needs the
segmentation and recall checks of BENCHMARKS.md instead. Reports seconds per conversation, messages per second
and the ratio A/B, and B's profile (seconds, tokens, share of the machine's ceiling per stage, `membox probe`).
Writes JSON (--out, default benchmarks/results/build-speed.json) and prints Markdown.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from datetime import date
from pathlib import Path

from membox_local.compare import compare
from membox_local.config import load_config, parse_assignment
from membox_local.ingest import load_messages
from membox_local.memory import Memory
from membox_local.profile import backend_label, probe, profile

REPO = Path(__file__).resolve().parent.parent


def prefix(messages, sessions: int):
    """The messages of the first `sessions` sessions, in the order they appear (all when 0)."""
    if not sessions:
        return messages
    firsts = set(list(dict.fromkeys(m.session for m in messages))[:sessions])
    return [m for m in messages if m.session in firsts]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(REPO.parent / "shared/data/locomo-dev.json"))
    p.add_argument("--conversations", nargs="+", default=["conv-26", "conv-30"])
    p.add_argument("--sessions", type=int, default=0, help="only the first N sessions of each (0: whole)")
    p.add_argument("--config", default="cpu")
    p.add_argument("--before", nargs="*", default=["llm.grammar_check_first=false", "llm.stage_contexts=false"],
                   metavar="KEY=VALUE", help="the settings of today's build (side A)")
    p.add_argument("--out", default=str(REPO / "benchmarks/results/build-speed.json"))
    p.add_argument("--workdir", help="keep the memories here (default: a temporary folder)")
    a = p.parse_args(argv)

    cfg_a = load_config(a.config, dict(parse_assignment(x) for x in a.before))
    cfg_b = load_config(a.config)
    rows = []
    with tempfile.TemporaryDirectory(prefix="membox-speed-") as tmp:
        work = Path(a.workdir or tmp)
        used = [c for c in a.conversations if (work / c).exists() and any((work / c).iterdir())]
        if used:
            p.error(f"--workdir {work}: {used[0]} holds memories already (a build there would resume, not run); "
                    "give an empty folder")
        for conv in a.conversations:
            msgs = prefix(load_messages(a.data, [conv]), a.sessions)
            rep = compare(cfg_a, cfg_b, msgs, work / conv)
            side = rep["conversations"][conv]
            cost = rep["cost"]
            sa, sb = cost["A"]["build_wall_s"], cost["B"]["build_wall_s"]
            rows.append({"conversation": conv, "messages": len(msgs), "before_s": sa, "after_s": sb,
                         "ratio": round(sa / sb, 2) if sb else None,
                         "before_msg_per_s": round(len(msgs) / sa, 3), "after_msg_per_s": round(len(msgs) / sb, 3),
                         "labels": side["labels"], "segmentation": side["segmentation"], "boxes": side["boxes"],
                         "failed_boxes": side["failed_boxes"], "extraction": side["extraction"],
                         "llm_usage": {"before": cost["A"]["llm_usage"], "after": cost["B"]["llm_usage"]}})
            print(json.dumps({k: rows[-1][k] for k in ("conversation", "messages", "before_s", "after_s", "ratio")}),
                  flush=True)
        # B's profile per conversation, against the ceiling measured now on B's model (as `membox build --profile`)
        with Memory(work / a.conversations[-1] / "b") as mem:
            ceiling = probe(mem.backend, backend_label(cfg_b.llm))
        for row in rows:
            with Memory(work / row["conversation"] / "b") as mem:
                row["profile_after"] = profile(mem.stats(), ceiling)
    result = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "config": a.config, "before": a.before, "sessions": a.sessions, "ceiling": ceiling.to_dict(), "rows": rows,
              "total": {"messages": sum(r["messages"] for r in rows), "before_s": sum(r["before_s"] for r in rows),
                        "after_s": sum(r["after_s"] for r in rows)}}
    t = result["total"]
    t["ratio"] = round(t["before_s"] / t["after_s"], 2) if t["after_s"] else None
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return 0


def markdown(r: dict) -> str:
    lines = [f"Build speed, {r['date']}, {r['machine']}, config {r['config']}; before = {' '.join(r['before'])}",
             "", "| conversation | messages | before s | after s | before msg/s | after msg/s | ratio | label agreement "
             "| Pk | event Jaccard | failed boxes (before/after) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        ex = x["extraction"]
        lines.append(f"| {x['conversation']} | {x['messages']} | {x['before_s']:.0f} | {x['after_s']:.0f} | "
                     f"{x['before_msg_per_s']:.3f} | {x['after_msg_per_s']:.3f} | {x['ratio']} | "
                     f"{x['labels'].get('agreement', '-')} | {x['segmentation'].get('pk', '-')} | "
                     f"{ex.get('event_jaccard', '-')} | {x['failed_boxes']['A']}/{x['failed_boxes']['B']} |")
    t = r["total"]
    lines.append(f"| **all** | {t['messages']} | {t['before_s']:.0f} | {t['after_s']:.0f} | | | **{t['ratio']}** | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
