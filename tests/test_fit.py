"""`membox fit ...` end to end through `membox_local.cli.main`, on a tiny TIAGE / DialSeg711 / LoCoMo-shaped data
set written here, with the deterministic doubles answering what the caches miss (membox_local.fit.cache.MODELS).

The data: dialogues of three topics, each topic's lines drawn from its own words, so that the bag-of-words double
sees topic shifts; DialSeg711's turns carry no speaker, as in the real file."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from membox_local.cli import main
from membox_local.config import FEATURES, load_config
from membox_local.fit import cache
from membox_local.testing import FakeBackend, FakeEmbedder

pytestmark = pytest.mark.numeric  # scores through BLAS: rerun on another kernel (make test-numeric)

TOPICS = {
    "garden": "tomatoes garden plants soil watering seeds harvest sunshine compost roses",
    "cars": "car engine garage tyres mechanic brakes oil highway battery repair",
    "cooking": "recipe pasta oven sauce garlic onions baking flour dinner spices",
    "music": "guitar concert band songs album drums singer chords piano melody",
    "travel": "flight hotel beach passport luggage island museum train tickets holiday",
    "books": "novel author chapter library reading poetry fiction mystery pages story",
}


def dialogue(rng: random.Random, did: str, speakers: bool = True) -> dict:
    turns, bounds = [], []
    for topic in rng.sample(sorted(TOPICS), 3):
        if turns:
            bounds.append(len(turns))
        for _ in range(rng.randint(3, 5)):
            text = " ".join(rng.sample(TOPICS[topic].split(), 3)).capitalize() + ("?" if rng.random() < 0.3 else ".")
            turns.append({"text": text, **({"speaker": "AB"[len(turns) % 2]} if speakers else {})})
    return {"id": did, "turns": turns, "boundaries": bounds}


def write_data(root: Path) -> list[str]:
    """segmentation/{tiage_train,tiage_dev,dialseg711_test}.json and locomo-dev.json under `root`; returns every
    line written (none may reach the committed score cache)."""
    rng = random.Random(7)
    (root / "segmentation").mkdir(parents=True)
    lines = []
    for name, n, speakers in (("tiage_train", 8, True), ("tiage_dev", 4, True), ("dialseg711_test", 4, False)):
        dls = [dialogue(rng, f"{name}-{i}", speakers) for i in range(n)]
        lines += [t["text"] for d in dls for t in d["turns"]]
        (root / "segmentation" / f"{name}.json").write_text(json.dumps(dls))
    samples = []
    for c in range(2):
        conv = {"speaker_a": "Ann", "speaker_b": "Bob"}
        for s in (1, 2):
            conv[f"session_{s}_date_time"] = f"{s} May 2023"
            conv[f"session_{s}"] = [{"speaker": ("Ann", "Bob")[i % 2], "dia_id": f"D{s}:{i + 1}", "text": t["text"]}
                                    for i, t in enumerate(dialogue(rng, "x")["turns"])]
            lines += [t["text"] for t in conv[f"session_{s}"]]
        samples.append({"sample_id": f"conv-{c}", "conversation": conv, "qa": []})
    (root / "locomo-dev.json").write_text(json.dumps(samples))
    return lines


@pytest.fixture
def fit_dir(tmp_path, monkeypatch):
    """A working directory with the data in data/; results land in runs/ and benchmarks/ there, LLM scores in
    cache/; vectors and scores the caches miss come from the doubles."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(cache.MODELS, "embedder", lambda cfg: FakeEmbedder())
    monkeypatch.setitem(cache.MODELS, "backend", lambda cfg: FakeBackend())
    write_data(tmp_path / "data")
    return tmp_path


def fit(*args: str) -> int:
    return main(["fit", *args, "--data-dir", "data", "--cache-dir", "cache"])


def stdout_json(capsys):
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def test_fit_embedding_chooses_a_threshold_of_its_grid_and_choose_only_agrees(fit_dir, capsys):
    assert fit("embedding", "--save") == 0
    printed = stdout_json(capsys)
    report = json.loads((fit_dir / "runs/segmentation/fit.json").read_text())
    assert report["command"] == "membox fit embedding --data-dir data --cache-dir cache --save"
    assert (fit_dir / "benchmarks/results/segmentation-fit.json").read_text() == \
        (fit_dir / "runs/segmentation/fit.json").read_text()
    grid = set(np.round(np.arange(0.0, 0.61, 0.025), 3).tolist())
    chosen = {c["loom"]["judge"]: c for c in report["candidates"] if c.get("chosen")}
    assert set(chosen) == {"embedding", "hybrid"} == set(printed)
    assert chosen["embedding"]["loom"]["threshold"] in grid
    assert all(c["loom"]["min_box_messages"] == 2 for c in chosen.values())
    assert set(chosen["hybrid"]["loom"]["weights"]) <= set(FEATURES)
    assert printed["embedding"]["loom"] == chosen["embedding"]["loom"]
    assert "| chosen |" in (fit_dir / "runs/segmentation/fit.md").read_text()

    assert fit("embedding", "--choose-only") == 0  # the selection rule again, on the saved candidates
    assert stdout_json(capsys) == printed


def test_fit_hybrid_runs_on_the_cached_scores_alone_and_saves_its_choice(fit_dir, capsys, monkeypatch):
    assert fit("hybrid", "--score-only", "--join", "2") == 0
    scores = next((fit_dir / "cache").glob("lm-scores-*.tsv")).read_text()
    assert "tomatoes" not in scores and len(scores.splitlines()) > 100  # hashes and numbers, no text

    def no_model(cfg):
        raise AssertionError("a score missing from the cache")

    monkeypatch.setitem(cache.MODELS, "backend", no_model)
    assert fit("hybrid", "--join", "2", "--save") == 0
    printed = stdout_json(capsys)
    report = json.loads((fit_dir / "runs/segmentation/fit-lm-join.json").read_text())
    assert (fit_dir / "benchmarks/results/segmentation-fit-lm-join.json").exists()
    chosen = [c for c in report["candidates"] if c["chosen"]]
    assert len(chosen) == 1 and chosen[0]["name"] == printed["name"]
    fitted = [c["name"] for c in report["candidates"][2:]]  # the first two are the references
    assert printed["name"] in fitted and {"hybrid cos min_box=2, fitted with joins of 2",
                                          "hybrid conv+lm min_box=2, fitted with joins of 2"} <= set(fitted)
    assert set(printed["loom"]["weights"]) <= set(FEATURES)
    assert report["knot"]["chosen"] in (0.5, 0.75, 1.0, 1.25, 1.5)
    assert {"dev_only", "dev_joined"} <= set(chosen[0])


def test_fit_content_writes_a_unit_vector_that_its_chosen_judge_loads(fit_dir, capsys, monkeypatch):
    import copy

    from membox_local.fit import content
    from membox_local.judges import make_judge

    monkeypatch.setattr(content, "CONTENT_DIR", fit_dir / "configs" / "content")  # not the package's own
    assert fit("content", "--lm-fold", "4", "--write", "--compare", "cpu-minilm") == 0
    out = capsys.readouterr().out
    vec = json.loads((fit_dir / "configs/content/tiage-all-minilm-l6-v2.json").read_text())
    assert vec["dim"] == len(vec["vector"]) == FakeEmbedder.dim
    assert np.linalg.norm(vec["vector"]) == pytest.approx(1.0, abs=1e-4)
    assert vec["command"].startswith("membox fit content") and "--write" in vec["command"]
    report = json.loads((fit_dir / "runs/segmentation/content.json").read_text())
    assert (fit_dir / "benchmarks/results/segmentation-content.json").exists()  # --write keeps the result too
    best = report["chosen"]
    assert best["offset"] in [r["offset"] for r in report["sweep"]]
    assert best["loom"]["max_box_messages"] in content.CAPS and best["loom"]["switch_ratio"] == content.SWITCH_RATIO
    assert {"content", "lm_pmi_conv", "lm_pmi_conv_low"} <= set(best["loom"]["weights"]) <= set(FEATURES)
    assert f"bias = {best['loom']['bias']}" in out and set(report["configs_now"]) == {"cpu-minilm"}
    lc = copy.deepcopy(load_config("cpu").loom)
    lc.weights, lc.bias = best["loom"]["weights"], best["loom"]["bias"]
    lc.content_vector = str(fit_dir / "configs/content" / best["loom"]["content_vector"])
    assert np.linalg.norm(make_judge(lc).content) == pytest.approx(1.0, abs=1e-3)


def test_fit_switch_chooses_a_ratio_of_its_grid(fit_dir):
    assert fit("switch", "--dialseg-limit", "2", "--train-limit", "6") == 0
    report = json.loads((fit_dir / "runs/segmentation/transfer.json").read_text())
    grid = np.round(np.arange(0.1, 0.81, 0.05), 2).tolist()
    assert [r["threshold"] for r in report["switch"]] == grid
    assert report["switch_chosen"]["threshold"] in grid and len(report["bias"]) == 9 and len(report["pmi"]) == 13
    assert report["dialogues"] == {"tiage_dev": 4, "tiage_dev_joins_only": 2, "dialseg711": 2}
    assert report["switch_chosen"]["locomo_messages_per_box"]["mean"] > 1


def test_fit_prob_replays_a_scored_run(fit_dir, capsys):
    from membox_local.evaluation.segmentation import evaluate, load_dialogues, write_report

    data = fit_dir / "data/segmentation/tiage_train.json"
    cfg = load_config("cpu", {"loom.judge": "llm-logprob", "loom.prob_threshold": 0.0})
    rows, summary = evaluate(cfg, load_dialogues(data), embedder=FakeEmbedder(), backend=FakeBackend())
    write_report(fit_dir / "scored", rows, {"data": str(data), "config": cfg.name, "loom": cfg.loom.__dict__,
                                            **summary, "command": "test"})
    assert main(["fit", "prob", "scored", "--save"]) == 0
    printed = json.loads(capsys.readouterr().out)
    scores = [s for r in rows for s in r["scores"] if s is not None]
    assert min(scores) <= printed["prob_threshold"] <= max(scores) and printed["dialogues"] == 8
    assert 0 <= printed["auc_p_yes"] <= 1 and printed["boundary_turns"] > 0
    assert json.loads((fit_dir / "runs/segmentation/fit-prob.json").read_text()) == printed
    assert (fit_dir / "benchmarks/results/segmentation-fit-prob.json").exists()


@pytest.mark.parametrize("command", [["embedding"], ["hybrid"], ["content"], ["switch"]])
def test_an_unknown_data_folder_is_one_error_line(fit_dir, capsys, command):
    assert main(["fit", *command, "--data-dir", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: nowhere: no such data folder")
    assert not (fit_dir / "runs").exists()


def test_bad_fit_requests_are_one_error_line(fit_dir, capsys):
    assert main(["fit", "prob", "no-such-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: no-such-run: no dialogues.jsonl")
    assert fit("content", "--no-lm", "--write") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --no-lm fits the same content vector")
