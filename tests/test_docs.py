"""The documents' figures and links: BENCHMARKS.md's tables and README's headline figures are what
benchmarks/tables.py writes from benchmarks/results/ (no models, no dataset), the files they cite exist, and every
script a page names is in the tree or in docs/experiments.md (retired, with the commit that holds it)."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from conftest import benchmark_script

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
README = REPO / "README.md"
BENCHMARKS = REPO / "BENCHMARKS.md"
EXPERIMENTS = REPO / "docs" / "experiments.md"


@pytest.fixture(scope="module")
def tables():
    return benchmark_script("tables")


@pytest.mark.parametrize("path", [BENCHMARKS, README, REPO / "docs" / "continuity-judge.md"],
                         ids=["BENCHMARKS.md", "README.md", "continuity-judge.md"])
def test_every_marked_table_is_what_tables_py_writes(tables, path):
    text = path.read_text()
    stale = tables.stale(text)
    assert not stale, f"{path.name}: run `python benchmarks/tables.py` (blocks {stale} differ from the saved results)"
    assert tables.render(text) == text


def test_every_table_function_has_its_block_and_each_block_its_function(tables):
    used = [n for p in tables.FILES for n in (m.group(1) for m in tables.MARK.finditer(p.read_text()))]
    assert sorted(used) == sorted(set(used)), "a block appears twice"
    assert set(used) == set(tables.TABLES), (set(tables.TABLES) ^ set(used))
    with pytest.raises(KeyError, match="no table function"):
        tables.render("<!-- table:nonesuch -->\n<!-- /table:nonesuch -->\n")


def test_check_mode_names_a_stale_block_and_changes_nothing(tables, tmp_path, monkeypatch, capsys):
    page = tmp_path / "PAGE.md"
    page.write_text("intro\n\n<!-- table:reliability -->\n| old |\n<!-- /table:reliability -->\n\nafter\n")
    monkeypatch.setattr(tables, "FILES", (page,))
    before = page.read_text()
    assert tables.main(["--check"]) == 1
    assert "PAGE.md: reliability" in capsys.readouterr().err and page.read_text() == before
    assert tables.main([]) == 0
    text = page.read_text()
    assert text.startswith("intro\n\n<!-- table:reliability -->\n| question | harness | result |")
    assert text.endswith("<!-- /table:reliability -->\n\nafter\n") and tables.main(["--check"]) == 0


def saved(name: str) -> bool:
    """A result file BENCHMARKS.md names: whole, a pattern with `*`, or a name's tail (`-dev98.json`)."""
    if "*" in name:
        return any(RESULTS.glob(name))
    if name.startswith("-"):
        return any(p.name.endswith(name) for p in RESULTS.iterdir())
    return (RESULTS / name).exists() or (REPO / name).exists()


def test_benchmarks_is_short_and_cites_only_saved_results():
    text = BENCHMARKS.read_text()
    assert len(text.splitlines()) < 300, "BENCHMARKS.md shows the current state only"
    cited = set(re.findall(r"`(?:benchmarks/results/)?([A-Za-z0-9_.*\-]+\.(?:json|jsonl\.gz|md))`", text))
    assert cited and not [c for c in cited if not saved(c)], [c for c in cited if not saved(c)]


def test_readme_is_a_front_door_and_links_every_docs_page():
    text = README.read_text()
    assert len(text.splitlines()) < 200, "README.md: the two commands, what it is, an example; the rest in docs/"
    assert re.search(r"^make demo$", text, re.M) and re.search(r"^make test$", text, re.M)
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert [p for p in pages if f"(docs/{p})" not in text] == []
    for page in (REPO / "docs").glob("*.md"):  # each page links back, and its relative links land on a file
        assert "](../README.md)" in page.read_text(), page.name
        for target in re.findall(r"\]\((?!https?://|#)([^)#]+)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_benchmarks_readme_lists_every_script():
    index = (REPO / "benchmarks" / "README.md").read_text()
    missing = [p.name for p in sorted((REPO / "benchmarks").iterdir())
               if p.suffix in (".py", ".sh") and f"`{p.name}`" not in index]
    assert not missing, f"benchmarks/README.md should say what these are for: {missing}"


def named_scripts() -> dict[str, set[str]]:
    """benchmarks/NAME.py or .sh named by a page, a config or the library's comments: script -> where."""
    sources = [README, BENCHMARKS, *(REPO / "docs").glob("*.md"), *(REPO / "configs").glob("*.toml"),
               *(REPO / "membox_local").rglob("*.py"), *(REPO / "membox_local").rglob("*.toml"), REPO / "Makefile"]
    named: dict[str, set[str]] = {}
    for path in sources:
        for name in re.findall(r"benchmarks/([a-z0-9_]+\.(?:py|sh))", path.read_text()):
            named.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return named


def test_every_script_a_page_names_is_in_the_tree_or_retired_in_experiments_md():
    retired = set(re.findall(r"`benchmarks/([a-z0-9_]+\.(?:py|sh))", EXPERIMENTS.read_text()))
    assert retired and not [n for n in retired if (REPO / "benchmarks" / n).exists()], "retired but still here"
    unknown = {n: sorted(w) for n, w in named_scripts().items()
               if not (REPO / "benchmarks" / n).exists() and n not in retired}
    assert not unknown, f"scripts named but neither in benchmarks/ nor in docs/experiments.md: {unknown}"


def test_cpu_ce_holds_the_sweeps_chosen_row():
    """configs/cpu-ce.toml's judge is the row benchmarks/results/segmentation-ce-sweep-split.json chose."""
    from membox_local.config import load_config

    sweep = json.loads((RESULTS / "segmentation-ce-sweep-split.json").read_text())
    (row,) = [r for r in sweep["rows"] if r.get("chosen")]
    loom = load_config("cpu-ce").loom
    assert (loom.weights, loom.bias, loom.max_box_messages, loom.cap_split) == (row["weights"], row["bias"], row["cap"],
                                                                               row["cap_split"])
    assert loom.ce_model == sweep["ce_model"]


def test_saved_summaries_agree_with_their_records(tables):
    """The held-out DialSeg711 column and the pooled LongMemEval figures: summaries equal the per-item records."""
    report = json.loads((RESULTS / "segmentation-report-dialseg711_test.json").read_text())["configs"]["cpu"]
    held_out = report["dialogue_rows"][553:]
    assert len(report["dialogue_rows"]) - 553 == report["after_553"]["dialogues"]
    for m in ("pk", "wd", "f1"):
        assert abs(sum(r[m] for r in held_out) / len(held_out) - report["after_553"][m]) < 5e-5
    with gzip.open(RESULTS / "longmemeval-qa-dev98.jsonl.gz", "rt") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    judged = [r["judge"] for r in recs if r["mode"] == "box-hits"]
    assert len(judged) == 98 and tables.lme("longmemeval-qa-dev98.json", "box-hits", "qa", "judge") == \
        f"{100 * sum(judged) / len(judged):.1f}"
