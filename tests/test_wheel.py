"""The package as a user installs it: a wheel built from this checkout, installed into a fresh venv and used from
outside the checkout, finds its default config and model manifest (package data) and runs `membox --help`; a
`configs/` folder in the working directory does not shadow the package's configs."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(cmd, cwd, **kw):
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300, **kw)
    assert res.returncode == 0, f"{cmd}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", REPO],
        cwd=tmp)
    wheels = list((tmp / "dist").glob("membox_local-*.whl"))
    assert len(wheels) == 1
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp)  # pip from ensurepip: offline
    py = venv / "bin" / "python"
    site = Path(run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp).strip())
    run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheels[0]], cwd=tmp)
    # the dependencies (numpy, hnswlib, ...) come from this venv, after the fresh one's own packages; a plain
    # path line does not run this venv's editable-install hook, so `membox_local` is the wheel's copy
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    outside = tmp / "elsewhere"
    (outside / "configs").mkdir(parents=True)
    (outside / "configs" / "cpu.toml").write_text("[loom]\njudge = 'not-a-judge'\n")  # must not be read
    return py, site, outside


def test_wheel_loads_the_default_config_and_manifest_outside_the_checkout(wheel_venv):
    py, site, outside = wheel_venv
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = run([py, "-c", (
        "import membox_local, membox_local.config as c, membox_local.weights as w\n"
        "print(membox_local.__file__)\n"
        "cfg = c.load_config('cpu'); print(cfg.name, cfg.loom.judge, cfg.retrieve.mode)\n"
        "print(sorted(w.load_manifest()))\n"
        "print(sorted(p.stem for p in c.CONFIG_DIR.glob('*.toml')))\n"
        "print(c.read_content_file(cfg.loom.content_vector)[0])\n"
        "d = c.load_config(); print(d.name, d.loom.judge, c.resolve_ce_weights(d.loom.ce_model))\n")],
        cwd=outside, env=env)
    lines = out.splitlines()
    assert lines[0].startswith(str(site)), lines[0]  # the wheel's copy, not the checkout
    assert lines[1] == "cpu hybrid box-hits"  # the package's cpu.toml, not ./configs/cpu.toml
    assert "qwen2.5-coder-0.5b" in lines[2] and "all-minilm-l6-v2" in lines[2]
    assert {"cpu", "cpu-fast", "cpu-minilm", "cpu-switch", "openai", "vllm"} <= set(eval(lines[3]))
    assert lines[4].startswith(str(site))
    name, judge, ce_file = lines[5].split()  # the default, cpu-ce, finds its cross-encoder inside the wheel
    assert (name, judge) == ("cpu-ce", "hybrid") and ce_file.startswith(str(site)) and ce_file.endswith(".safetensors")


def test_wheel_console_script_runs(wheel_venv):
    py, site, outside = wheel_venv
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = run([py.parent / "membox", "--help"], cwd=outside, env=env)
    assert "build" in out and "ask" in out and "show" in out
    # a config file the user names by path is read as given: its bad judge is one clear error line
    res = subprocess.run([str(py.parent / "membox"), "ask", str(outside), "q", "--config", "configs/cpu.toml"],
                         cwd=outside, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "not-a-judge" in res.stderr, res.stderr
