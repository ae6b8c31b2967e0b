"""`membox eval locomo`: LoCoMo retrieval and QA for every retrieval mode, with build statistics.

    membox eval locomo --data ../shared/data/locomo-dev.json --config cpu --conversations conv-26 \
        --modes compact turn-rag --no-qa --out runs/locomo-cpu

Each conversation is built once into `<builds>/<config name>/<conversation>/` (a Memory folder; building
is resumable) and reused by every mode and run. A run folder holds:
- `questions.jsonl`: one record per (conversation, mode, question): gold, category, evidence, evidence
  recall and context tokens at each k and each token budget, and for QA the context shown (box and message
  ids, tokens), the prediction and every scorer's numbers. A rerun skips records already there.
- `summary.json` and `summary.md`: recall and QA tables per mode, evidence-id issues, build statistics.

Evidence recall = share of a question's gold evidence messages (LoCoMo `evidence` dia_ids) among the
messages the context shows. "At k" uses the mode's k with no budget; "at budget B" lets the mode fill B
context tokens (count_tokens) with as many units as fit, so modes are compared at equal context size.
"""
from __future__ import annotations

import gzip
import dataclasses
import os
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import DEFAULT_CONFIG, Config, load_config, parse_assignment
from ..ingest import InputError, read_json
from ..records import Message
from .scorers import score_all
from .locomo_report import CATEGORY_NAMES, markdown, summarise, summary_rows  # noqa: F401  (re-exported)
from ..argtypes import count

DEFAULT_DATA = Path(os.environ.get("MEMBOX_DATA", "../shared/data")) / "locomo-dev.json"  # from a checkout
DEFAULT_BUDGETS = (250, 500, 1000, 2000)
DEFAULT_CATEGORIES = (1, 2, 3, 4)
UNBOUNDED = 10**9  # "no budget" for the k sweep
FILL_K = 10**6  # "as many as fit" for the budget sweep
_DIA_ID = re.compile(r"D(\d+):(\d+)")


@dataclass
class Settings:
    data: str = str(DEFAULT_DATA)
    config: str = DEFAULT_CONFIG
    conversations: list[str] = field(default_factory=list)  # empty: every conversation in the file
    modes: list[str] = field(default_factory=list)  # empty: every registered mode
    k: list[int] = field(default_factory=list)  # empty: the config's retrieve.k
    budgets: list[int] = field(default_factory=lambda: list(DEFAULT_BUDGETS))
    categories: list[int] = field(default_factory=lambda: list(DEFAULT_CATEGORIES))
    qa: bool = True
    qa_k: int = 0  # 0: the config's retrieve.k
    qa_budget: int = 0  # 0: the config's retrieve.budget_tokens
    limit: int = 0  # questions per conversation (0: all), for smoke runs
    stride: int = 1  # every stride-th question of categories 1-4 (a sample spread over the whole conversation)
    sessions: int = 0  # >0: only each conversation's first N sessions, and the questions whose evidence is there
    out: str = ""
    builds: str = "runs/builds"
    build: bool = True  # False: store the messages only (no language model); baseline modes only
    boxes_only: bool = False  # with build=False: also file them into boxes (the Loom's judge, no extraction)
    threads: int = 0  # llama.cpp threads (0: the config's); an execution setting, not part of the build key
    # answering models side by side on the same contexts (names or paths, each over the config's answering
    # settings); empty: the config's answering model
    answer_models: list[str] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)  # config keys set for this run ("retrieve.k": 5)

    def fixed(self) -> dict[str, Any]:
        """The settings a resumed run must share with the records already written."""
        fixed = {"config": self.config, "k": self.k, "budgets": self.budgets, "qa_k": self.qa_k,
                 "qa_budget": self.qa_budget}
        if self.overrides:
            fixed["overrides"] = self.overrides
        if self.sessions:
            fixed["sessions"] = self.sessions
        return fixed


# ---- data -----------------------------------------------------------------------------------------
def load_samples(path: str | Path, conversations: list[str]) -> list[dict]:
    """The LoCoMo samples to evaluate (messages are loaded and validated by ingest.load_locomo)."""
    path = Path(path)
    data = read_json(path, "; pass --data PATH to a LoCoMo-format .json")
    known = [s.get("sample_id") for s in data if isinstance(s, dict)]
    missing = [c for c in conversations if c not in known]
    if missing:
        raise InputError(f"{path}: no conversation {missing}; the file has {known}")
    samples = [s for s in data if not conversations or s.get("sample_id") in conversations]
    for s in samples:
        if not isinstance(s.get("qa"), list):
            raise InputError(f"{path} ({s.get('sample_id')}): needs a 'qa' list")
    return samples


def parse_evidence(raw: Any, known: set[str]) -> tuple[list[str], dict[str, int]]:
    """Gold evidence dia_ids of one question, normalised, and a count of each kind of problem.

    A string holding several ids ("D8:6; D9:17") is split ('split'); "D3:05" becomes "D3:5"; a string that
    is not an id ("D", "D:11:26") is dropped ('malformed'); a well-formed id that names no message of the
    conversation is dropped ('unknown').
    """
    issues = {"split": 0, "malformed": 0, "unknown": 0}
    ids: list[str] = []
    for item in raw if isinstance(raw, list) else [raw]:
        parts = [p.strip() for p in str(item).split(";") if p.strip()]
        if len(parts) > 1:
            issues["split"] += 1
        for p in parts:
            m = _DIA_ID.fullmatch(p)
            if not m:
                issues["malformed"] += 1
                continue
            norm = f"D{int(m.group(1))}:{int(m.group(2))}"
            if norm not in known:
                issues["unknown"] += 1
                continue
            if norm not in ids:
                ids.append(norm)
    return ids, issues


def evidence_recall(evidence: list[str], shown: list[str]) -> float | None:
    if not evidence:
        return None
    have = set(shown)
    return sum(e in have for e in evidence) / len(evidence)


# ---- builds ---------------------------------------------------------------------------------------
class Shared:
    """One embedder and one (lazily loaded) backend for every conversation's Memory."""

    def __init__(self, cfg: Config, backend=None, embedder=None, answer_backends: dict | None = None):
        self.cfg, self._backend, self._embedder = cfg, backend, embedder
        self._answerers = dict(answer_backends or {})
        self._made: dict = {}  # models made here, by settings: a stage's model answering too is loaded once
        self._injected = backend is not None and not answer_backends

    @property
    def embedder(self):
        if self._embedder is None:
            from ..embed import make_embedder

            self._embedder = make_embedder(self.cfg.embedder)
        return self._embedder

    def backend(self):
        if self._backend is None:  # the build's backend, a stage router when a system has its own model
            from ..backends.router import build_backend

            self._backend = build_backend(self.cfg, made=self._made)
        return self._backend

    def answerer(self, model: str):
        """The backend that answers with `model` over the config's answering settings (the build backend when
        that is the same model)."""
        if model not in self._answerers:
            llm = dataclasses.replace(self.cfg.answer_llm(), model=model)
            if llm == self.cfg.llm or self._injected:  # a double passed in answers too, unless others are
                self._answerers[model] = self.backend()
            else:
                from ..backends import make_backend
                from ..backends.router import llm_key

                if not self._injected and self._backend is None and self.cfg.stage_llms():
                    self.backend()  # a stage's model may be this one: made once
                key = llm_key(llm)
                if key not in self._made:
                    self._made[key] = make_backend(llm)
                self._answerers[model] = self._made[key]
        return self._answerers[model]

    def close(self) -> None:
        """Every model loaded here (the build's, a stage's, the answering ones), at the end of a run (`eval locomo`,
        `eval longmemeval`), whose memories are closed with `close(models=False)`; models passed in stay the
        caller's."""
        for b in {id(b): b for b in self._made.values()}.values():
            b.close()


def build_dir(builds: str | Path, cfg: Config, conversation_id: str, sessions: int = 0) -> Path:
    """One folder per config and conversation; a prefix of the first N sessions is its own build."""
    return Path(builds) / cfg.name / (f"{conversation_id}-s{sessions}" if sessions else conversation_id)


def open_build(conv: str, messages: list[Message], cfg: Config, builds: str | Path, shared: Shared,
               build: bool = True, sessions: int = 0, boxes_only: bool = False, progress: bool = True):
    """The conversation's Memory, built (or finished) first; reused across modes and runs. `progress`: a bar
    while it builds.

    With build=False only the messages are stored (what the baselines need); a later build files them.
    With boxes_only too they are filed into sealed boxes, not extracted (box-hits); a later build extracts them.
    """
    from ..memory import Memory

    mem = Memory(build_dir(builds, cfg, conv, sessions), cfg, backend=shared.backend, embedder=shared.embedder)
    try:
        if build:
            _build(mem, conv, messages, progress)
            mem.sync()
        else:
            mem.store.add_messages(messages)
            if boxes_only:
                _boxes_and_other_systems(mem, conv, progress)
    except BaseException:
        mem.close(models=False)  # the models are `shared`'s, closed by Shared.close at the run's end
        raise
    return mem


def _boxes_and_other_systems(mem, conv: str, progress: bool = True) -> None:
    """--boxes-only: the box memory files the messages into sealed boxes and extracts none; every other system
    of the config (eventweave) is built in full, so its modes run on the same boxes as box-hits."""
    from ..execution.progress import Bar
    from ..loom import file_into_boxes

    others = [c for c in mem.components if c.name != "membox"]
    if not mem.store.pending_messages(conv) and not any(c.todo(conv) for c in others):
        return
    _lock_build(mem)
    if mem.store.pending_messages(conv):
        file_into_boxes(mem, conv)
    for comp in others:
        todo = comp.todo(conv)
        if not todo:
            continue
        t0 = time.time()
        with Bar(todo, f"{conv} {comp.name}", quiet=not progress) as bar:
            mem.driver(bar.describe).drive(comp.build_step(conv, True, bar.update), conv)
        wall = float(mem.store.get_meta("build_wall_s", "0")) + time.time() - t0
        mem.store.set_meta("build_wall_s", f"{wall:.2f}")


def _build(mem, conv: str, messages: list[Message], progress: bool = True) -> None:
    from ..execution.progress import Bar

    added = mem.store.add_messages(messages)  # messages already stored are skipped (same content)
    todo = sum(comp.todo(conv) for comp in mem.components)
    if not todo:
        return
    _lock_build(mem)
    if progress:
        print(f"{conv}: building ({added} new messages, {todo} messages/boxes to process) in {mem.path}",
              file=sys.stderr)
    t0 = time.time()
    with Bar(sum(mem.to_file([conv]).values()), f"{conv} build", quiet=not progress) as bar:
        # the messages are stored: file the pending ones, retry failed boxes
        mem.add([], seal=True, progress=bar.update, describe=bar.describe)
    wall = float(mem.store.get_meta("build_wall_s", "0")) + time.time() - t0
    mem.store.set_meta("build_wall_s", f"{wall:.2f}")


def _lock_build(mem) -> None:
    """Refuse to build a conversation another process is building (two Looms would file the same messages):
    the memory folder's write lock (store.WriteLock, as every writer takes it), held by the Memory until it is
    closed; a second writer gets StoreBusy naming this process. Kept on the Memory as `build_lock` too."""
    mem.build_lock = mem.hold_write_lock("LoCoMo eval build")


def build_stats(mem, conv: str) -> dict[str, Any]:
    """The paper's Table 2 (memory size; whitespace tokens) and Table 5 (LLM cost) for one build."""
    boxes = mem.store.boxes(conv)
    msgs = mem.store.messages(conv)
    dialogue = sum(len(m.text.split()) for m in msgs)
    memory = sum(len(_box_memory_text(b).split()) for b in boxes)
    usage = {s: u for s, u in mem.store.usage_by_stage(conv).items() if s != "answer"}
    n = max(len(msgs), 1)
    total_calls = sum(u["calls"] for u in usage.values())
    total_tokens = sum(u["prompt_tokens"] + u["completion_tokens"] for u in usage.values())
    status: dict[str, int] = {}
    for b in boxes:
        status[b.status] = status.get(b.status, 0) + 1
    graph = mem.system("eventweave").stats(conv) if "eventweave" in mem.config.memory.systems else {}
    return {
        **graph,  # the event graph's counts (events, nodes, edges by kind, summaries), when it is built
        "utterances": len(msgs),
        "boxes": len(boxes),
        "box_status": status,
        "utterances_per_box": round(len(msgs) / len(boxes), 2) if boxes else 0.0,
        "events": sum(len(b.events) for b in boxes),
        "dialogue_tokens": dialogue,
        "memory_tokens": memory,
        "token_ratio": round(memory / dialogue, 3) if dialogue else 0.0,
        "memory_tokens_per_box": round(memory / len(boxes), 1) if boxes else 0.0,
        "llm_calls_per_utterance": round(total_calls / n, 3),
        "llm_tokens_per_utterance": round(total_tokens / n, 1),
        "llm_tokens_per_box": round(total_tokens / len(boxes), 1) if boxes else 0.0,
        "by_stage": {s: {"calls": u["calls"], "prompt_tokens": u["prompt_tokens"],
                         "completion_tokens": u["completion_tokens"],
                         "calls_per_utterance": round(u["calls"] / n, 3),
                         "tokens_per_utterance": round((u["prompt_tokens"] + u["completion_tokens"]) / n, 1)}
                     for s, u in usage.items()},
        "build_wall_s": float(mem.store.get_meta("build_wall_s", "0")),
        # the driver's seconds and calls by stage, summed over every run of the build (a resumed one adds up)
        "time_by_stage": {s: {"wall_s": round(t["wall_s"], 1), "calls": t["calls"]}
                          for s, t in mem.store.build_time_by_stage(conv).items()},
    }


def _box_memory_text(box) -> str:
    """What a box keeps: its record (topic, keywords, events) and its messages."""
    parts = [box.topic, " ".join(box.keywords), *(e.text for e in box.events), box.text()]
    return "\n".join(p for p in parts if p)


# ---- the run --------------------------------------------------------------------------------------
def _key(r: dict) -> tuple:
    return r["conversation"], r["mode"], r["qid"], r.get("answerer", "")


def _read_records(path: Path) -> dict[tuple, dict]:
    """Records of a questions.jsonl (or a saved .jsonl.gz) by (conversation, mode, question id, answerer)."""
    records: dict[tuple, dict] = {}
    if path.exists():
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                raise InputError(f"{path} line {n}: not valid JSON (an interrupted write?); delete that line "
                                 f"and rerun to resume") from None
            records[_key(r)] = r  # a later record replaces an earlier one
    return records


def check_run_settings(out: Path, fixed: dict[str, Any], free: tuple[str, ...] = ()) -> None:
    """A run folder (`eval locomo`, `eval longmemeval`) holds records of one setting: resuming it with other
    settings is refused in one line. `free`: keys of `fixed` allowed to change (a regrade's judge)."""
    path = out / "settings.json"
    if path.exists():
        before = json.loads(path.read_text()).get("fixed")
        if before is not None:
            before = {**before, **{k: fixed[k] for k in free}}
        if before != fixed:
            raise InputError(f"{out} holds a run with other settings {before} than these {fixed}; pass a new --out "
                             "or the same settings to resume")


def write_run_settings(out: Path, fixed: dict[str, Any], last: dict[str, Any]) -> None:
    """settings.json of a run folder: what a resume must share (`fixed`) and every setting of the last run."""
    path = out / "settings.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"fixed": fixed, "last": last}, indent=2))
    os.replace(tmp, path)


def resolve(settings: Settings, cfg: Config) -> Settings:
    from ..retrieval import RETRIEVERS
    from ..systems import SYSTEMS

    s = Settings(**asdict(settings))
    # by default every mode the config's systems serve (as Memory.modes: a mode of a system needs it built)
    claimed = {m for info in SYSTEMS.values() for m in info.modes}
    own = {m for n in cfg.memory.systems for m in SYSTEMS[n].modes}
    s.modes = s.modes or [m for m in RETRIEVERS if m not in claimed or m in own]
    unknown = [m for m in s.modes if m not in RETRIEVERS]
    if unknown:
        raise InputError(f"unknown mode(s) {unknown}; choose from {sorted(RETRIEVERS)}")
    if not s.build:
        def modes(needs: tuple[str, ...]) -> list[str]:
            return [m for m, r in RETRIEVERS.items() if r.needs in needs]

        allowed = modes(("messages", "boxes") if s.boxes_only else ("messages",))
        if s.boxes_only:  # the config's other systems are built in full (_boxes_and_other_systems)
            allowed += [m for n in cfg.memory.systems if n != "membox" for m in SYSTEMS[n].modes]
        s.modes = settings.modes or allowed
        need_boxes = [m for m in s.modes if m not in allowed]
        if need_boxes:
            raise InputError(f"mode(s) {need_boxes} need a built memory; without a build only "
                             f"{allowed} can run (--boxes-only adds {modes(('boxes',))})")
    s.k = s.k or [cfg.retrieve.k]
    s.qa_k = s.qa_k or cfg.retrieve.k
    s.qa_budget = s.qa_budget or cfg.retrieve.budget_tokens
    s.answer_models = s.answer_models or [cfg.answer_llm().model]
    bad = [c for c in s.categories if c not in CATEGORY_NAMES]
    if bad:
        raise InputError(f"unknown categories {bad}; LoCoMo has 1-5")
    if s.sessions < 0:
        raise InputError("--sessions must be positive (0: whole conversations)")
    if any(x <= 0 for x in s.k + s.budgets):
        raise InputError("--k and --budgets must be positive")
    s.out = s.out or f"runs/locomo-{cfg.name}"
    return s


def run(settings: Settings, backend=None, embedder=None, progress: bool = True,
        answer_backends: dict | None = None) -> dict[str, Any]:
    """Evaluate; returns the summary (also written to the run folder). Doubles may be passed for tests
    (`answer_backends`: answering model name -> backend)."""
    from ..ingest import load_locomo
    from ..retrieval import make_retriever

    overrides = dict(settings.overrides)
    if settings.threads:  # the answering model takes them too, unless [answer.llm] sets its own
        overrides["llm.n_threads"] = settings.threads
    cfg = load_config(settings.config, overrides or None)
    s = resolve(settings, cfg)
    out = Path(s.out)
    out.mkdir(parents=True, exist_ok=True)
    check_run_settings(out, s.fixed())
    write_run_settings(out, s.fixed(), asdict(s))
    samples = load_samples(s.data, s.conversations)
    s.conversations = [x["sample_id"] for x in samples]
    jsonl = out / "questions.jsonl"
    records = _read_records(jsonl)
    shared = Shared(cfg, backend, embedder, answer_backends)
    builds: dict[str, dict] = {}
    evidence_issues = {"split": 0, "malformed": 0, "unknown": 0, "questions_without_evidence": 0}
    opened = []  # closed together at the end: they share one backend, which closing a Memory closes
    try:
        with open(jsonl, "a", encoding="utf-8") as fh:
            for sample in samples:
                conv = sample["sample_id"]
                messages = [m for m in load_locomo(s.data, [conv])
                            if not s.sessions or int(m.session) <= s.sessions]
                mem = open_build(conv, messages, cfg, s.builds, shared, s.build, s.sessions, s.boxes_only, progress)
                opened.append(mem)
                if s.build or s.boxes_only:
                    builds[conv] = build_stats(mem, conv)
                questions = _questions(sample, s, {m.message_id for m in messages}, evidence_issues)
                mem.embedder.encode([q["question"] for q in questions])  # one batch; every mode hits the cache
                for mode in s.modes:
                    retriever = make_retriever(mode, mem)
                    names = s.answer_models if s.qa else [""]
                    missing = {q["qid"]: [a for a in names if not _done(records.get((conv, mode, q["qid"], a)), s.qa)]
                               for q in questions}
                    todo = [q for q in questions if missing[q["qid"]]]
                    bar = _bar(len(todo), f"{conv} {mode}", progress)
                    for q in todo:
                        for rec in _evaluate(q, conv, mode, retriever, mem, s, shared, missing[q["qid"]]):
                            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                            fh.flush()
                            records[_key(rec)] = rec
                        bar.update(1)
                    bar.close()
    finally:
        for mem in opened:
            mem.close(models=False)
        shared.close()
    wanted = set(s.answer_models if s.qa else [""])
    chosen = [r for key, r in records.items() if key[0] in s.conversations and key[1] in s.modes
              and r["category"] in s.categories and (key[3] in wanted or not s.qa and not key[3])]
    summary = summarise(chosen, s, cfg, builds, evidence_issues)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    (out / "summary.md").write_text(markdown(summary))
    return summary


def _questions(sample: dict, s: Settings, known: set[str], issues: dict[str, int]) -> list[dict]:
    out = []
    seen = 0  # questions of categories 1-4 so far: a stride picks the same questions whatever the categories
    for qid, q in enumerate(sample["qa"]):
        cat = q.get("category")
        seen += cat in DEFAULT_CATEGORIES
        if cat not in s.categories or (s.stride > 1 and (cat not in DEFAULT_CATEGORIES or (seen - 1) % s.stride)):
            continue
        if not isinstance(q.get("question"), str) or not q["question"].strip():
            raise InputError(f"{s.data} ({sample['sample_id']}) qa {qid}: no question text")
        if cat != 5 and "answer" not in q:
            raise InputError(f"{s.data} ({sample['sample_id']}) qa {qid}: category {cat} needs an 'answer'")
        evidence, found = parse_evidence(q.get("evidence", []), known)
        if s.sessions and (not evidence or found["unknown"] or found["malformed"]):
            continue  # a prefix keeps only questions whose every evidence id is inside it
        for key, v in found.items():
            issues[key] += v
        issues["questions_without_evidence"] += not evidence
        gold = str(q["answer"]) if "answer" in q else ""
        out.append({"qid": qid, "question": q["question"], "gold": gold, "category": cat, "evidence": evidence,
                    "evidence_issues": {k: v for k, v in found.items() if v}})
        if s.limit and len(out) >= s.limit:
            break
    return out


def _done(rec: dict | None, qa: bool) -> bool:
    return rec is not None and (not qa or rec.get("prediction") is not None)


def _evaluate(q: dict, conv: str, mode: str, retriever, mem, s: Settings, shared: Shared,
              answerers: list[str]) -> list[dict]:
    """The question's retrieval records, one per answering model (the same context for each)."""
    rec = dict(q, conversation=conv, mode=mode, recall={}, tokens={})
    for k in s.k:
        ctx = retriever.retrieve(q["question"], conv, k, UNBOUNDED)
        rec["recall"][f"k={k}"] = evidence_recall(q["evidence"], ctx.message_ids)
        rec["tokens"][f"k={k}"] = ctx.tokens
    for b in s.budgets:
        ctx = retriever.retrieve(q["question"], conv, FILL_K, b)
        rec["recall"][f"budget={b}"] = evidence_recall(q["evidence"], ctx.message_ids)
        rec["tokens"][f"budget={b}"] = ctx.tokens
    ctx = retriever.retrieve(q["question"], conv, s.qa_k, s.qa_budget)
    rec.update(qa_k=s.qa_k, qa_budget=s.qa_budget, box_ids=ctx.box_ids, message_ids=ctx.message_ids,
               context_tokens=ctx.tokens, qa_recall=evidence_recall(q["evidence"], ctx.message_ids),
               prediction=None, scores=None)
    if not s.qa:
        return [rec]
    out = []
    for name in answerers:
        t0 = time.time()
        ans = mem.answer_from(q["question"], ctx, conv, backend=shared.answerer(name))
        out.append(dict(rec, answerer=name, prediction=ans.text, answer_s=round(time.time() - t0, 2),
                        scores=score_all(ans.text, q["gold"], q["category"])))
    return out


def _bar(total: int, desc: str, on: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="q", disable=not on or total == 0, file=sys.stderr,
                dynamic_ncols=True)


def cmd_locomo(args) -> int:
    settings = Settings(
        data=args.data, config=args.config, conversations=args.conversations or [], modes=args.modes or [],
        k=args.k or [], budgets=args.budgets, categories=args.categories, qa=not args.no_qa,
        qa_k=args.qa_k or 0, qa_budget=args.qa_budget or 0, limit=args.limit, stride=args.stride, out=args.out or "",
        builds=args.builds, threads=args.threads, build=not (args.no_build or args.boxes_only),
        boxes_only=args.boxes_only, sessions=args.sessions, answer_models=args.answer_models,
        overrides=dict(parse_assignment(a) for a in args.set),
    )
    summary = run(settings, progress=not args.quiet)
    print(markdown(summary))
    print(f"written to {summary['settings']['out']}/ (questions.jsonl, summary.json, summary.md)", file=sys.stderr)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("locomo", help="LoCoMo evidence recall and QA for each retrieval mode")
    p.add_argument("--data", default=str(DEFAULT_DATA), help="a LoCoMo-format .json file")
    p.add_argument("--config", default=DEFAULT_CONFIG,
                   help=f"config name in configs/ or a .toml path (default {DEFAULT_CONFIG})")
    p.add_argument("--conversations", nargs="*", help="sample ids (default: all in the file)")
    p.add_argument("--modes", nargs="*", help="retrieval modes (default: every registered mode)")
    p.add_argument("--k", nargs="*", type=count(1), help="evidence recall at each k, no budget (default: config k)")
    p.add_argument("--budgets", nargs="*", type=count(1), default=list(DEFAULT_BUDGETS),
                   help="evidence recall at each context-token budget")
    p.add_argument("--categories", nargs="*", type=count(1, 5), default=list(DEFAULT_CATEGORIES),
                   help=f"LoCoMo question categories (1-5; default: {' '.join(map(str, DEFAULT_CATEGORIES))})")
    p.add_argument("--no-qa", action="store_true", help="retrieval metrics only (no answering model)")
    p.add_argument("--qa-k", type=count(1), help="k for answering (default: config)")
    p.add_argument("--qa-budget", type=count(1), help="context budget for answering (default: config)")
    p.add_argument("--limit", type=count(0), default=0, help="at most this many questions per conversation (0: all)")
    p.add_argument("--stride", type=count(1), default=1, help="every N-th question only (a sample spread evenly)")
    p.add_argument("--out", help="run folder (default runs/locomo-<config>)")
    p.add_argument("--builds", default="runs/builds", help="where builds are cached, per config and conversation")
    p.add_argument("--sessions", type=count(0), default=0,
                   help="only the first N sessions of each conversation, and the questions whose evidence is there")
    p.add_argument("--boxes-only", action="store_true",
                   help="file messages into boxes with the config's judge but extract no box records (no language "
                        "model with the embedding or hybrid judge): baseline modes and box-hits; the config's other "
                        "memory systems (eventweave) are built in full, and their modes run on the same boxes")
    p.add_argument("--no-build", action="store_true",
                   help="store messages only, no language model: baseline modes (turn-rag, chunk-rag, full-context)")
    p.add_argument("--answer-models", nargs="*", default=[],
                   help="answer each question with each of these models (names in models/manifest.toml or paths) "
                        "on the same context (default: the config's answering model)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="config keys for this run, e.g. retrieve.resolve_dates=false (TOML values); the build "
                        "folder stays the config's, so only settings that are not build settings belong here")
    p.add_argument("--quiet", action="store_true", help="no progress bars and no progress lines (for scripts)")
    p.add_argument("--threads", type=count(0), default=0,
                   help="llama.cpp threads (default: the config's); 1 is much faster on an oversubscribed CPU")
    p.set_defaults(func=cmd_locomo)
