"""Build speed: today's build and the faster one side by side, in one run, on whole LoCoMo dev conversations.

    python benchmarks/build_speed.py --conversations conv-26 conv-30            # whole conversations
    python benchmarks/build_speed.py --conversations conv-26 --sessions 5       # a cheaper pass: sessions 1-5
    python benchmarks/build_speed.py --before-config cpu --before --config cpu-ce   # two judges (issue 35)

Each conversation is built twice into fresh memories, one after the other in this process, with the same config
(`--config`, default cpu): A ("before") with the speed settings set back (`--before`, default
llm.grammar_check_first=false llm.stage_contexts=false), B with the config as it is. `--before-config` gives side A
a config of its own (e.g. today's default against a new judge: `--before-config cpu --before --config cpu-ce`;
a bare `--before` sets nothing back). `membox compare` (membox_local/compare.py) does the
builds and says how far B's memory differs from A's: the judge's decisions (label agreement, Pk and WindowDiff of
B's boxes against A's), boxes, failed boxes, keywords and events of same-span boxes (Jaccard). A speed setting
that leaves the build as it was shows agreement 1.0, Pk 0 and Jaccard 1.0; one that changes it needs the
segmentation and recall checks of BENCHMARKS.md instead. Reports seconds per conversation, messages per second
and the ratio A/B, and B's profile (seconds, tokens, share of the machine's ceiling per stage, `membox probe`).
Also per side: LLM calls and tokens per message by stage, seconds per message, and the machine's load (1-minute
load average before and after each build, `os.getloadavg`): the speed figures mean something only when the run
had the machine to itself. Writes JSON (--out, default benchmarks/results/build-speed.json) and prints Markdown.
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
    p.add_argument("--config", default="cpu", help="side B's config (default cpu)")
    p.add_argument("--before-config", help="side A's config (default: --config), before --before is applied")
    p.add_argument("--messages", type=int, default=0, help="only the first N messages of each (a smoke test)")
    p.add_argument("--no-profile", action="store_true", help="skip B's profile (it probes the LLM's rates)")
    p.add_argument("--before", nargs="*", default=["llm.grammar_check_first=false", "llm.stage_contexts=false"],
                   metavar="KEY=VALUE", help="the settings of today's build (side A)")
    p.add_argument("--out", default=str(REPO / "benchmarks/results/build-speed.json"))
    p.add_argument("--workdir", help="keep the memories here (default: a temporary folder)")
    a = p.parse_args(argv)

    cfg_a = load_config(a.before_config or a.config, dict(parse_assignment(x) for x in a.before) or None)
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
            msgs = msgs[:a.messages] if a.messages else msgs
            load_before = os.getloadavg()[0]
            rep = compare(cfg_a, cfg_b, msgs, work / conv)
            load_after = os.getloadavg()[0]
            side = rep["conversations"][conv]
            cost = rep["cost"]
            sa, sb = cost["A"]["build_wall_s"], cost["B"]["build_wall_s"]
            rows.append({"conversation": conv, "messages": len(msgs), "before_s": sa, "after_s": sb,
                         "ratio": round(sa / sb, 2) if sb else None,
                         "before_msg_per_s": round(len(msgs) / sa, 3), "after_msg_per_s": round(len(msgs) / sb, 3),
                         "labels": side["labels"], "segmentation": side["segmentation"], "boxes": side["boxes"],
                         "failed_boxes": side["failed_boxes"], "extraction": side["extraction"],
                         "before_s_per_msg": round(sa / len(msgs), 3), "after_s_per_msg": round(sb / len(msgs), 3),
                         "load_1min": {"start": round(load_before, 2), "end": round(load_after, 2)},
                         "llm_usage": {"before": cost["A"]["llm_usage"], "after": cost["B"]["llm_usage"]},
                         "build_time": {"before": cost["A"]["build_time"], "after": cost["B"]["build_time"]},
                         "per_message": {"before": per_message(cost["A"]["llm_usage"], len(msgs)),
                                         "after": per_message(cost["B"]["llm_usage"], len(msgs))}})
            print(json.dumps({k: rows[-1][k] for k in ("conversation", "messages", "before_s", "after_s", "ratio")}),
                  flush=True)
        # B's profile per conversation, against the ceiling measured now on B's model (as `membox build --profile`)
        ceiling = None
        if not a.no_profile:
            with Memory(work / a.conversations[-1] / "b") as mem:
                ceiling = probe(mem.backend, backend_label(cfg_b.llm))
            for row in rows:
                with Memory(work / row["conversation"] / "b") as mem:
                    row["profile_after"] = profile(mem.stats(), ceiling)
    result = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "config": a.config, "before_config": a.before_config or a.config, "before": a.before, "sessions": a.sessions, "ceiling": ceiling.to_dict() if ceiling else None, "rows": rows,
              "total": {"messages": sum(r["messages"] for r in rows), "before_s": sum(r["before_s"] for r in rows),
                        "after_s": sum(r["after_s"] for r in rows)}}
    t = result["total"]
    t["ratio"] = round(t["before_s"] / t["after_s"], 2) if t["after_s"] else None
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return 0


def per_message(usage: dict, messages: int) -> dict:
    """LLM calls and tokens per message, by stage and in all, from `usage_by_stage`'s totals; read_tokens (prompt
    tokens less those kept from the engine's KV cache) where the backend said, for every stage."""
    keys = ("calls", "prompt_tokens", "completion_tokens", "read_tokens")
    out = {stage: {k: round(u[k] / messages, 2) for k in keys if k in u} for stage, u in usage.items()}
    out["all"] = {k: round(sum(u[k] for u in usage.values()) / messages, 2)
                  for k in keys if k != "read_tokens" or usage and all(k in u for u in usage.values())}
    return out


def token_lines(r: dict) -> list[str]:
    """Prompt + completion tokens per message by stage, before and after, and seconds per message with the load."""
    if not any("per_message" in x for x in r["rows"]):
        return []
    lines = ["", "| conversation | side | s per message | load (1 min, start-end) | " + " | ".join(
        f"{st} tokens/msg" for st in STAGES) + " | LLM prompt tokens/msg in all | calls/msg |",
             "|---|---|---|---|" + "---|" * len(STAGES) + "---|---|"]
    for x in r["rows"]:
        if "per_message" not in x:
            continue
        for side in ("before", "after"):
            pm = x["per_message"][side]
            cells = [f"{pm[st]['prompt_tokens']:g} + {pm[st]['completion_tokens']:g}" if st in pm else "0"
                     for st in STAGES]
            read = f" ({pm['all']['read_tokens']:g} read)" if "read_tokens" in pm["all"] else ""
            lines.append(f"| {x['conversation']} | {side} | {x[side + '_s_per_msg']} | {x['load_1min']['start']}-"
                         f"{x['load_1min']['end']} | " + " | ".join(cells) +
                         f" | {pm['all']['prompt_tokens']:g}{read} | {pm['all']['calls']:g} |")
    return lines


STAGES = ("judge", "extract", "link", "trace-init")


def markdown(r: dict) -> str:
    before = " ".join(r["before"])
    if r.get("before_config", r["config"]) != r["config"]:  # side A is another config
        before = f"{r['before_config']} {before}".strip()
    lines = [f"Build speed, {r['date']}, {r['machine']}, config {r['config']}; before = {before}",
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
    return "\n".join(lines + token_lines(r))


if __name__ == "__main__":
    raise SystemExit(main())
