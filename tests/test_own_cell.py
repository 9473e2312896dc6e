"""A cell of one's own (docs/own-cell.md): register_cell, model.cell = "module:Class" (and
"file.py:Class"), the ``rnnlab.cells`` entry-point group, and the post-step hook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import rnnlab
from conftest import set_flags, tiny_copy
from owncell import forget, write_cells, write_entry_point
from rnnlab import config
from rnnlab.cli import main
from rnnlab.rundir import load_run

FAST = [*set_flags(*tiny_copy(K=None, eval_size=32, hidden=None, batch=8, eval_every=3, log_every=None)), "--quiet"]


def test_path_trains_resumes_and_reloads(mycells, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "demo/lstm", "--set", "model.cell=mycells:MinGated", "--out", str(out)] + FAST
    assert main(argv + ["--set", "train.steps=3"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["model"]["cell"] == "mycells:MinGated"  # the run records the path
    assert main(argv + ["--set", "train.steps=6", "--resume"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["steps"] == 6 and result["cell"] == "mycells:MinGated"
    _, _, model = load_run(out)  # rebuilt from config.json: imports the module again
    (cell,) = [m for m in model.modules() if isinstance(m, rnnlab.cells.Cell)]
    assert type(cell).__name__ == "MinGated" and type(cell).__module__ == "mycells"
    # the weights are the trained ones, not a fresh initialisation
    ck = torch.load(out / "best.pt", weights_only=False)
    state = ck["model"] if "model" in ck else ck
    key = next(k for k in state if k.endswith("weight_hh"))
    assert torch.equal(model.state_dict()[key], state[key])


def test_file_path_outside_sys_path(tmp_path, capsys):
    path = write_cells(tmp_path / "elsewhere", "filecells")
    cls = rnnlab.CELLS[f"{path}:MinGated"]
    assert cls.__name__ == "MinGated"
    assert rnnlab.CELLS[f"{path}:MinGated"] is cls  # imported once
    out = tmp_path / "run"
    assert (
        main(
            ["train", "demo/lstm", "--set", f"model.cell={path}:MinGated", "--set", "train.steps=2"]
            + ["--out", str(out)]
            + FAST
        )
        == 0
    )
    assert (out / "result.json").exists()


@pytest.mark.parametrize(
    "spec, words",
    [
        ("nosuchpackage.cells:MyCell", ["cannot import module 'nosuchpackage.cells'", "PYTHONPATH"]),
        ("mycells:NoSuchCell", ["module 'mycells' has no name 'NoSuchCell'", "MinGated"]),
        ("mycells:torch", ["not a subclass of rnnlab.cells.Cell"]),
        ("missing/file.py:X", ["no file", "file.py"]),
    ],
)
def test_bad_paths_are_one_line(mycells, tmp_path, capsys, spec, words):
    assert main(["train", "demo/lstm", "--set", f"model.cell={spec}", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    with pytest.raises(config.ConfigError, match="model.cell"):
        config.load("demo/lstm", [f"model.cell={spec}"])


def test_register_cell(mycells, tmp_path):
    import mycells as m

    assert rnnlab.register_cell("mingated-test", m.MinGated) is m.MinGated
    try:
        cfg = config.load("demo/lstm", ["model.cell=mingated-test", "model.hidden_size=6"])
        from rnnlab.model import build_model
        from rnnlab.tasks import build_task

        model = build_model(cfg.model, build_task(cfg.task))
        assert any(isinstance(c, m.MinGated) for c in model.modules())
        with pytest.raises(ValueError, match="taken by"):
            rnnlab.register_cell("lstm", m.MinGated)
        with pytest.raises(ValueError, match="must be lowercase"):
            rnnlab.register_cell("My:Cell", m.MinGated)
        with pytest.raises(ValueError, match="not a subclass"):
            rnnlab.register_cell("notacell", torch.nn.Linear)
        rnnlab.register_cell("mingated-test", m.MinGated)  # the same class again: fine
    finally:
        del rnnlab.CELLS["mingated-test"]
    assert "mingated-test" not in rnnlab.CELLS


def test_entry_point_lists_and_trains(mycells, tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    write_entry_point(site, {"epgated": "mycells:MinGated", "epbroken": "mycells:Nothing"})
    monkeypatch.syspath_prepend(str(site))
    assert "epgated" not in dict.keys(rnnlab.CELLS)  # never added to the registry's keys
    assert main(["list", "cells"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("epgated"))
    assert "MinGated(backend='auto')" in line and "entry point mycells:MinGated" in line
    assert "epbroken" in out and "unavailable" in out
    assert rnnlab.CELLS["epgated"].__name__ == "MinGated"
    run = tmp_path / "run"
    assert (
        main(
            ["train", "demo/lstm", "--set", "model.cell=epgated", "--set", "train.steps=2"] + ["--out", str(run)] + FAST
        )
        == 0
    )
    assert json.loads((run / "result.json").read_text())["cell"] == "epgated"


def test_entry_points_are_not_read_at_import():
    import subprocess
    import sys

    code = (
        "import importlib.metadata as m; calls = []; orig = m.entry_points\n"
        "m.entry_points = lambda *a, **k: calls.append(k.get('group')) or orig(*a, **k)\n"
        "import rnnlab, rnnlab.cells; rnnlab.CELLS['lstm']; print(calls.count('rnnlab.cells'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_post_step_hook_runs_after_each_optimizer_step(mycells, tmp_path):
    (mycells / "hookcells.py").write_text(
        "import torch\nfrom mycells import MinGated\n\n"
        "class Clipped(MinGated):\n"
        "    calls = 0\n\n"
        "    def after_optimizer_step(self):\n"
        "        type(self).calls += 1\n"
        "        assert not torch.is_grad_enabled()\n"
        "        self.weight_hh.clamp_(-0.01, 0.01)\n"
    )
    out = tmp_path / "run"
    assert (
        main(
            ["train", "demo/lstm", "--set", "model.cell=hookcells:Clipped", "--set", "train.steps=4"]
            + ["--out", str(out)]
            + FAST
        )
        == 0
    )
    import hookcells

    assert hookcells.Clipped.calls == 4
    _, _, model = load_run(out)
    W = next(p for n, p in model.named_parameters() if n.endswith("weight_hh"))
    assert W.abs().max() <= 0.01
    forget("hookcells")


# --------------------------------------------------------------------------- a cell in a file outside the package


def _preset(tmp_path, cell: str) -> Path:
    """A preset file naming ``cell`` (a path), at a handful of steps."""
    path = tmp_path / "mine.toml"
    path.write_text(
        f'name = "mine"\n\n[task]\nname = "copy"\nK = 4\nL = 6\nval_size = 16\ntest_size = 16\n\n'
        f'[model]\ncell = "{cell}"\nparams = 600\n\n[optim]\nname = "adam"\nlr = 0.01\n\n'
        f"[train]\nsteps = 4\nbatch_size = 8\neval_every = 2\n"
    )
    return path


def test_a_file_cell_trains_in_a_suite_and_an_ensemble(tmp_path, capsys):
    cells = write_cells(tmp_path / "outside", "suitecells")
    preset = _preset(tmp_path, f"{cells}:MinGated")
    suite = tmp_path / "s.toml"
    suite.write_text(f'name = "own"\npresets = ["{preset}"]\nseeds = [0, 1]\nensemble = true\n')
    assert main(["suite", str(suite), "--runs-dir", str(tmp_path / "runs")]) == 0
    results = [json.loads(p.read_text()) for p in sorted((tmp_path / "runs" / "own").glob("*/seed*/result.json"))]
    assert [r["seed"] for r in results] == [0, 1]
    assert all(r["conditions"]["ensemble"] == 2 and r["params"]["budget"] == 600 for r in results)
    out = tmp_path / "ens"
    argv = ["train", str(preset), "--seeds", "2,3", "--ensemble", "--runs-dir", str(out), "--quiet"]
    assert main(argv) == 0
    assert len(list(out.glob("*/seed*/result.json"))) == 2


@pytest.mark.slow  # Optuna workers: about 15 s
def test_a_file_cell_trains_in_a_sweep(tmp_path, capsys):
    pytest.importorskip("optuna")
    cells = write_cells(tmp_path / "outside", "sweepcells")
    preset = _preset(tmp_path, f"{cells}:MinGated")
    spec = tmp_path / "sw.toml"
    spec.write_text(
        f'name = "own"\npreset = "{preset}"\nmetric = "val/loss"\ntrials = 2\npruner = "none"\n\n'
        '[space]\n"optim.lr" = { type = "loguniform", low = 1e-3, high = 1e-2 }\n'
    )
    assert main(["sweep", str(spec), "--out", str(tmp_path / "sw")]) == 0
    configs = [json.loads(p.read_text()) for p in (tmp_path / "sw" / "trials").glob("*/config.json")]
    assert len(configs) == 2 and all(c["model"]["cell"] == f"{cells}:MinGated" for c in configs)
