"""The build profile (membox_local/profile.py): seconds, calls and tokens per stage, kept per conversation in the
store and added up across resumed builds; the machine's ceiling (the probe) and each stage's share of it; the
`membox build --profile` table and `membox probe`.

The doubles answer at once, so the timing tests run them with a cost: `Clocked` sleeps as a machine with known
prompt-processing and generation rates would take for each request's tokens, one request after another."""
from __future__ import annotations

import json
import sqlite3
import time

import pytest

from membox_local.backends.base import Backend, JsonRequest, JsonResult, Prompt, TextResult, Usage
from membox_local.execution.batch import build_conversations
from membox_local.execution.driver import Driver
from membox_local.execution.merge import merge_stores
from membox_local.ingest import load_jsonl
from membox_local.memory import Memory
from membox_local.profile import (EMBED, INDEX, PIPELINE, STORE, Ceiling, Span, StageClock, format_profile, probe,
                                  profile, token_weights)
from membox_local.store import Store
from membox_local.testing import FakeBackend, FakeContinuityScorer, FakeEmbedder

from conftest import DEMO
from test_batch import conversations, weaving_backend

PP, TG = 20000.0, 2000.0  # the Clocked double's machine: prompt and generated tokens per second


class Clocked(FakeBackend):
    """The weaving double (tests/test_batch.py), each request costing prompt / PP + completion / TG seconds. A
    probe's text request generates all of its max_tokens (a model counting to 500 would)."""

    def __init__(self):
        super().__init__()
        self.responder = weaving_backend().responder

    @staticmethod
    def _cost(results) -> None:
        time.sleep(sum(r.usage.prompt_tokens / PP + r.usage.completion_tokens / TG
                       for r in results if getattr(r, "usage", None) is not None))

    def label_batch(self, requests):
        out = super().label_batch(requests)
        self._cost(out)
        return out

    def json_batch(self, requests):
        out = super().json_batch(requests)
        self._cost(out)
        return out

    def score_batch(self, requests):
        out = super().score_batch(requests)
        self._cost(out)
        return out

    def text_batch(self, requests):
        out = [TextResult(" ".join(map(str, range(r.max_tokens))),
                          Usage(r.stage, len(f"{r.prompt.system} {r.prompt.user}".split()), r.max_tokens))
               if r.stage == "probe" else res for r, res in zip(requests, super().text_batch(requests))]
        self._cost(out)
        return out


@pytest.fixture
def cfg(cfg):
    cfg.weaver.vote_threshold = 0.2  # as tests/test_batch.py: the double's events vote and link
    return cfg


def build(folder, cfg, convs: dict, backend=None, batch_size: int = 3) -> Memory:
    mem = Memory(folder, cfg, backend=backend or Clocked(), embedder=FakeEmbedder())
    mem.store.add_messages([m for msgs in convs.values() for m in msgs])
    build_conversations(mem, list(convs), batch_size=batch_size)
    return mem


def model_stages(stats: dict) -> dict:
    return {s: u for s, u in stats["llm_usage"].items() if s != "answer"}


# ---- what a build records --------------------------------------------------------------------------------------------
def test_a_batched_build_times_every_stage_that_ran_with_the_usage_tables_calls(tmp_path, cfg):
    convs = {c: msgs[:14] for c, msgs in list(conversations().items())[:3]}
    mem = build(tmp_path / "m", cfg, convs)
    mem.sync()  # the box index: the `index` stage
    stats = mem.stats()
    times, usage = stats["build_time"], model_stages(stats)
    assert {"extract", "link"} <= set(usage)
    assert set(usage) | {EMBED, STORE, PIPELINE, INDEX} == set(times)
    for stage, u in usage.items():
        assert times[stage]["calls"] == u["calls"], stage  # requests answered with usage = usage rows
    assert all(t["wall_s"] > 0 for t in times.values()), times
    for conv in convs:  # per conversation too, each with its own usage
        own = mem.store.build_time_by_stage(conv)
        assert {s: own[s]["calls"] for s in mem.store.usage_by_stage(conv)} == \
            {s: u["calls"] for s, u in mem.store.usage_by_stage(conv).items()}
    assert stats["build_time"][INDEX]["calls"] == stats["box_status"]["extracted"]  # one per box indexed
    mem.close()


def test_one_at_a_time_builds_are_timed_too(memory):
    memory.add(load_jsonl(DEMO)[:12], seal=True)
    times = memory.stats()["build_time"]
    assert {"extract", EMBED, STORE, PIPELINE} <= set(times)
    assert times["extract"]["calls"] == memory.stats()["llm_usage"]["extract"]["calls"]


class Failing(Clocked):
    """Clocked until its `left`-th JSON call, which fails as a crash would (not a BackendError: the build stops)."""

    def __init__(self, left: int):
        super().__init__()
        self.left = left

    def json_batch(self, requests):
        self.left -= 1
        if self.left < 0:
            raise RuntimeError("the machine went away")
        return super().json_batch(requests)


def test_an_interrupted_build_keeps_its_times_and_the_resumed_one_adds_to_them(tmp_path, cfg):
    convs = {c: msgs[:20] for c, msgs in list(conversations().items())[:2]}
    with Memory(tmp_path / "m", cfg, backend=Failing(left=2), embedder=FakeEmbedder()) as mem:
        mem.store.add_messages([m for msgs in convs.values() for m in msgs])
        with pytest.raises(RuntimeError, match="went away"):
            build_conversations(mem, list(convs), batch_size=3)
        first = mem.stats()
    assert first["build_time"]["extract"]["wall_s"] > 0  # flushed as the build failed
    assert first["build_time"][PIPELINE]["wall_s"] > 0

    mem = build(tmp_path / "m", cfg, convs)  # resumed
    again = mem.stats()
    mem.close()
    assert again["messages"] == sum(len(m) for m in convs.values())
    for stage, t in first["build_time"].items():
        assert again["build_time"][stage]["wall_s"] > t["wall_s"], stage
    for stage, u in model_stages(again).items():
        before = first["llm_usage"].get(stage, {}).get("calls", 0)
        assert again["build_time"][stage]["calls"] == u["calls"] > before, stage


def test_build_times_go_with_their_conversation(tmp_path, cfg):
    convs = {c: msgs[:10] for c, msgs in list(conversations().items())[:2]}
    mem = build(tmp_path / "m", cfg, convs)
    gone, kept = list(convs)
    mem.forget(gone)
    assert mem.store.build_time_by_stage(gone) == {} and mem.store.build_time_by_stage(kept)
    mem.reset()
    assert mem.store.build_time_by_stage() == {}
    mem.close()


def test_sharded_stores_merge_their_build_times(tmp_path, cfg):
    convs = list(conversations().items())[:2]
    shards = []
    for n, (conv, msgs) in enumerate(convs):
        mem = build(tmp_path / f"s{n}", cfg, {conv: msgs[:8]}, backend=FakeBackend())
        shards.append((mem.store.path, mem.store.build_time_by_stage()))
        mem.close()
    merge_stores(tmp_path / "merged.db", [p for p, _ in shards])
    merged = Store(tmp_path / "merged.db")
    got = merged.build_time_by_stage()
    merged.close()
    for stage in set(shards[0][1]) | set(shards[1][1]):
        parts = [t[stage] for _, t in shards if stage in t]
        assert got[stage]["calls"] == sum(p["calls"] for p in parts)
        assert got[stage]["wall_s"] == pytest.approx(sum(p["wall_s"] for p in parts))


def test_a_schema_2_store_gets_the_build_time_table(tmp_path):
    Store(tmp_path / "m.db").close()
    db = sqlite3.connect(tmp_path / "m.db")
    db.execute("DROP TABLE build_time")
    db.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    db.commit()
    db.close()
    s = Store(tmp_path / "m.db")
    assert s.get_meta("schema_version") == "5"
    s.record_build_time([("c", "extract", 1.5, 2)])
    s.record_build_time([("c", "extract", 0.5, 1)])  # adds up
    assert s.build_time_by_stage() == {"extract": {"wall_s": 2.0, "calls": 3}}
    s.close()


# ---- how a call's time is split --------------------------------------------------------------------------------------
class Mixed(Backend):
    """Answers JSON requests with fixed token counts by stage, taking 50 ms a call."""

    name = "mixed"
    TOKENS = {"extract": (250, 50), "link": (90, 10)}

    def json_batch(self, requests):
        time.sleep(0.05)
        return [JsonResult({}, Usage(r.stage, *self.TOKENS[r.stage])) for r in requests]

    def label_batch(self, requests):
        raise NotImplementedError

    def text_batch(self, requests):
        raise NotImplementedError


def test_a_mixed_call_is_split_over_its_stages_by_tokens(tmp_path):
    store = Store(tmp_path / "m.db")
    schema = {"type": "object", "properties": {}}
    driver = Driver(store, FakeEmbedder(), Mixed())
    requests = [JsonRequest(Prompt("s", "u"), schema, stage) for stage in ("extract", "link", "extract")]
    driver.execute(requests, ["a", "b", "c"])
    driver.clock.flush()
    a, b, c = (store.build_time_by_stage(conv) for conv in "abc")
    assert a["extract"]["calls"] == b["link"]["calls"] == c["extract"]["calls"] == 1
    assert a["extract"]["wall_s"] / b["link"]["wall_s"] == pytest.approx(300 / 100)
    assert a["extract"]["wall_s"] + b["link"]["wall_s"] + c["extract"]["wall_s"] >= 0.05
    store.close()


def test_a_span_splits_its_writes_to_the_store_stage(tmp_path):
    store = Store(tmp_path / "m.db")
    clock = StageClock(store)
    failed = RuntimeError("no usage")
    weights = token_weights([JsonResult({}, Usage("extract", 250, 50)), failed])
    assert weights == [300.0, 300.0]  # a request without usage weighs as the mean of the others
    clock.charge(Span(wall_s=1.0, write_s=0.2, writes=3), ["a", "b"], ["extract", "link"], weights, [1, 0])
    clock.flush()
    a, b = store.build_time_by_stage("a"), store.build_time_by_stage("b")
    assert a["extract"] == {"wall_s": pytest.approx(0.4), "calls": 1}
    assert b["link"] == {"wall_s": pytest.approx(0.4), "calls": 0}
    assert a[STORE] == {"wall_s": pytest.approx(0.1), "calls": 3} and b[STORE] == {"wall_s": pytest.approx(0.1),
                                                                                 "calls": 0}
    store.close()


def test_the_store_times_its_write_transactions(tmp_path):
    store = Store(tmp_path / "m.db")
    before = (store.write_s, store.writes)
    with store.transaction():
        with store.transaction():  # nested: one transaction
            store.set_meta("k", "v")
    assert store.writes == before[1] + 1 and store.write_s > before[0]
    store.close()


# ---- the ceiling and the share of it ---------------------------------------------------------------------------------
def test_the_probe_measures_a_known_machine():
    c = probe(Clocked(), "clocked double", repeats=2)
    # the pp probe's one generated token and the tg probe's short prompt are counted in: a few % below the rates
    assert 0.7 * PP < c.pp_tok_s <= 1.05 * PP and 0.7 * TG < c.tg_tok_s <= 1.05 * TG
    assert c.generated_tokens == 64 and c.prompt_tokens > 300 and c.backend == "clocked double"


def test_the_probe_on_the_plain_double_gives_positive_rates():
    """The double answers at once: its rates are large and mean nothing, but they are rates (no special case)."""
    c = probe(FakeBackend(), "fake", repeats=1)
    assert c.pp_tok_s > 0 and c.tg_tok_s > 0 and c.prompt_tokens > 0 and c.generated_tokens > 0


def test_a_build_at_the_machines_rates_shows_a_share_near_one(tmp_path, cfg):
    backend = Clocked()
    with Memory(tmp_path / "m", cfg, backend=backend, embedder=FakeEmbedder()) as mem:
        mem.add(load_jsonl(DEMO)[:14], seal=True)  # one at a time: no call mixes stages
        stats = mem.stats()
        prof = profile(stats, probe(backend, "clocked double"))
    rows = {r["stage"]: r for r in prof["stages"]}
    assert list(rows)[-1] == "total" and rows["extract"]["calls"] == stats["llm_usage"]["extract"]["calls"]
    for stage in ("extract", "link"):
        assert 0.5 < rows[stage]["share_of_ceiling"] < 1.2, rows[stage]
        assert rows[stage]["tok_s"] == pytest.approx(
            (rows[stage]["prompt_tokens"] + rows[stage]["completion_tokens"]) / rows[stage]["wall_s"], rel=0.01)
    assert rows[EMBED]["share_of_ceiling"] is None and rows[EMBED]["tok_s"] is None  # no tokens
    assert rows["total"]["wall_s"] == pytest.approx(sum(r["wall_s"] for s, r in rows.items() if s != "total"),
                                                    abs=0.01)


def test_the_share_is_the_ceilings_time_over_the_stages_time():
    ceiling = Ceiling(pp_tok_s=1000, tg_tok_s=10, prompt_tokens=512, generated_tokens=64, copies=1, backend="x",
                      measured_at="today")
    stats = {"llm_usage": {"extract": {"calls": 2, "prompt_tokens": 2000, "completion_tokens": 30},
                           "answer": {"calls": 1, "prompt_tokens": 5, "completion_tokens": 5}},
             "build_time": {"extract": {"wall_s": 10.0, "calls": 2}, STORE: {"wall_s": 1.0, "calls": 7}}}
    prof = profile(stats, ceiling)
    rows = {r["stage"]: r for r in prof["stages"]}
    assert set(rows) == {"extract", STORE, "total"}  # answering is no part of a build
    assert rows["extract"]["share_of_ceiling"] == pytest.approx((2000 / 1000 + 30 / 10) / 10)  # 5 s of 10
    assert rows["extract"]["tok_s"] == pytest.approx(203.0)
    assert rows[STORE]["calls"] == 7 and rows[STORE]["share_of_ceiling"] is None
    assert rows["total"]["share_of_ceiling"] == pytest.approx(5 / 11, abs=1e-3)
    table = format_profile(prof)
    assert table.splitlines()[0].split() == ["stage", "wall", "s", "calls", "prompt", "tok", "completion", "tok",
                                             "tok/s", "share", "of", "ceiling"]
    assert "50.0%" in table and table.splitlines()[-1].startswith("ceiling of x (today): prompt processing 1000.0")
    assert format_profile(profile(stats, None, "no ceiling: why")).splitlines()[-1] == "no ceiling: why"


# ---- the command line ------------------------------------------------------------------------------------------------
def write_jsonl(path, convs: dict) -> None:
    with open(path, "w") as fh:
        for msgs in convs.values():
            for m in msgs:
                fh.write(json.dumps({"conversation_id": m.conversation_id, "message_id": m.message_id,
                                     "speaker": m.speaker, "text": m.text, "session": m.session,
                                     "session_date": m.session_date}) + "\n")


@pytest.fixture
def doubles(monkeypatch):
    from membox_local import backends, continuity, memory

    monkeypatch.setattr(backends, "make_backend", lambda cfg: Clocked())
    monkeypatch.setattr(memory, "make_embedder", lambda cfg: FakeEmbedder())
    monkeypatch.setitem(continuity.MODELS, "scorer", FakeContinuityScorer)


def test_cli_build_profile_prints_the_table_and_puts_it_in_the_stats(tmp_path, capsys, doubles):
    from membox_local.cli import main

    data = tmp_path / "two.jsonl"
    write_jsonl(data, {c: msgs[:12] for c, msgs in list(conversations().items())[:2]})
    args = ["build", str(data), "--store", str(tmp_path / "store"), "--config", "cpu", "--batch-size", "2",
            "--jobs", "1", "--profile", "--json"]  # cpu: its judge makes score requests, a stage of the table
    assert main(args) == 0
    out, err = capsys.readouterr()
    stats = json.loads(out)
    rows = {r["stage"]: r for r in stats["profile"]["stages"]}
    assert {"judge", "extract", EMBED, STORE, PIPELINE, INDEX, "total"} <= set(rows)  # cpu: the hybrid judge scores
    assert all(r["wall_s"] > 0 for r in rows.values())
    assert stats["profile"]["ceiling"]["pp_tok_s"] > 0 and rows["extract"]["share_of_ceiling"] > 0
    assert {s: r["calls"] for s, r in rows.items() if s in stats["llm_usage"]} == \
        {s: u["calls"] for s, u in stats["llm_usage"].items()}
    assert "share of ceiling" in err and "ceiling of llamacpp qwen2.5-coder-0.5b" in err  # --json: the table on stderr

    assert main(args) == 0  # nothing left to build: the same model calls, the ceiling measured again
    again = json.loads(capsys.readouterr().out)
    assert {r["stage"]: r["calls"] for r in again["profile"]["stages"] if r["stage"] in stats["llm_usage"]} == \
        {s: u["calls"] for s, u in stats["llm_usage"].items()}

    assert main(args[:-1]) == 0  # without --json: the table after the summary, on stdout
    out = capsys.readouterr().out
    assert out.index("share of ceiling") > out.index("this build took") and "\ntotal " in out


def test_cli_probe(capsys, doubles):
    from membox_local.cli import main

    assert main(["probe", "--json", "--repeats", "1"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["pp_tok_s"] > 0 and got["tg_tok_s"] > 0 and got["copies"] == 1
    with pytest.raises(SystemExit) as exc:
        main(["probe", "--repeats", "0"])
    assert exc.value.code == 2


@pytest.mark.integration
def test_cli_build_profile_on_the_real_cpu_stack(tmp_path, capsys):
    """SmolLM2-135M on llama.cpp (cpu-fast): the profile's model stages run at a measurable share of the
    ceiling measured just after them."""
    pytest.importorskip("llama_cpp")
    from membox_local.cli import main

    data = tmp_path / "demo.jsonl"
    msgs = load_jsonl(DEMO)[:10]
    write_jsonl(data, {"demo": msgs})
    assert main(["build", str(data), "--store", str(tmp_path / "store"), "--config", "cpu-fast", "--jobs", "1",
                 "--profile", "--json"]) == 0
    out, err = capsys.readouterr()
    prof = json.loads(out)["profile"]
    rows = {r["stage"]: r for r in prof["stages"]}
    assert prof["ceiling"]["pp_tok_s"] > 0 and prof["ceiling"]["tg_tok_s"] > 0
    assert prof["ceiling"]["generated_tokens"] > 0 and "smollm2-135m" in prof["ceiling"]["backend"]
    assert rows["extract"]["calls"] >= 1 and rows["extract"]["share_of_ceiling"] > 0
    assert all(r["wall_s"] > 0 for r in rows.values())
    print(err)  # the table, for the record (pytest -s)
