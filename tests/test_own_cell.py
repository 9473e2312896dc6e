"""A cell of one's own (docs/own-cell.md): register_cell, model.cell = "module:Class" (and
"file.py:Class"), the ``rnnlab.cells`` entry-point group, and the post-step hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def _final_weights(run: Path) -> dict:
    ck = torch.load(run / "checkpoint.pt", weights_only=False)
    return ck["model"] if "model" in ck else ck


def test_a_built_in_cells_subclass_with_its_own_forward_trains_its_own_step(mycells, tmp_path, capsys):
    """A subclass of GRUCell that overrides forward used to train number for number as the GRU:
    the layer took GRUCell's fused sequence, which never calls forward."""
    import mycells as m

    from rnnlab.cells import Recurrent, unroll

    torch.manual_seed(0)
    layer = Recurrent(3, 5, cell=m.HalfGRU).double()
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    out, h_n = layer(x)
    ref, s_ref = unroll(layer.cells[0], x)
    assert torch.allclose(out, ref, atol=1e-12, rtol=0) and torch.allclose(h_n[0], s_ref, atol=1e-12, rtol=0)
    assert layer.cells[0].small_sequence(x) is None  # no compiled loop of the parent's either
    runs = {}
    for cell in ("gru", "mycells:HalfGRU"):
        runs[cell] = tmp_path / cell.replace(":", "-")
        argv = ["train", "demo/lstm", "--set", f"model.cell={cell}", "--set", "train.steps=3"]
        assert main(argv + ["--out", str(runs[cell])] + FAST) == 0
    a, b = _final_weights(runs["gru"]), _final_weights(runs["mycells:HalfGRU"])
    assert a.keys() == b.keys()
    assert any(not torch.equal(a[k], b[k]) for k in a), "HalfGRU trained exactly as the built-in GRU"
    with pytest.raises(TypeError, match="overrides forward"):
        rnnlab.to_torch(layer)


def test_a_built_in_cell_name_cannot_be_taken_by_another_cell(mycells):
    import mycells as m

    for name in ("gru", "lstm"):
        with pytest.raises(ValueError, match=f"'{name}' is the built-in .*register_cell\\('{name}-mine'"):
            rnnlab.register_cell(name, m.MinGated, replace=True)
        with pytest.raises(ValueError, match="built-in"):
            rnnlab.CELLS[name] = m.MinGated
    assert rnnlab.CELLS["gru"] is rnnlab.cells.GRUCell and rnnlab.CELLS["lstm"] is rnnlab.cells.LSTMCell
    rnnlab.register_cell("gru", rnnlab.cells.GRUCell)  # the built-in itself again: fine


def _rnnlab(*args, cwd, pythonpath=()) -> subprocess.CompletedProcess:
    """``rnnlab ARGS`` in a subprocess run in ``cwd`` (``pythonpath``: folders put in front)."""
    src = str(Path(rnnlab.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, *map(str, pythonpath)])}
    return subprocess.run(
        [sys.executable, "-m", "rnnlab.cli", *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True
    )


BROKEN = {
    "syntax.py": ("def f(:\n", ["SyntaxError", "syntax.py, line 1", "fix the file"]),
    "raises.py": ('raise RuntimeError("no GPU found")\n', ["RuntimeError: no GPU found", "raises.py, line 1"]),
    "needs.py": ("import notinstalledpkg_rnnlab\n", ["imports 'notinstalledpkg_rnnlab', which is not installed"]),
}


@pytest.mark.parametrize("form", ["file", "module"])
def test_a_plug_in_that_does_not_import_is_one_line(tmp_path, form):
    """A cell's file or module that fails to import (a syntax error, an exception, a missing
    dependency) gave a 37-line traceback."""
    for name, (text, words) in BROKEN.items():
        (tmp_path / name).write_text(text)
        spec = f"{name}:X" if form == "file" else f"{name[:-3]}:X"
        r = _rnnlab(
            "train", "demo/lstm", "--set", f"model.cell={spec}", "--out", "run", cwd=tmp_path, pythonpath=[tmp_path]
        )
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("rnnlab: error: "), r.stderr
        for w in words:
            assert w in lines[0], lines[0]
        assert not (tmp_path / "run").exists()


def test_a_broken_entry_point_is_one_line_of_rnnlab_list_and_only_where_used(tmp_path):
    """One entry point of the rnnlab.cells group whose module does not import took
    `rnnlab list` down with a traceback."""
    (tmp_path / "syntaxcells.py").write_text("def f(:\n")
    write_entry_point(tmp_path / "site", {"brokencell": "syntaxcells:X"})
    path = [tmp_path / "site", tmp_path]
    r = _rnnlab("list", "cells", cwd=tmp_path, pythonpath=path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    (line,) = [x for x in r.stdout.splitlines() if x.strip().startswith("brokencell")]
    assert "unavailable" in line and "SyntaxError" in line and "syntaxcells.py, line 1" in line
    assert any(x.strip().startswith("lstm ") for x in r.stdout.splitlines())
    r = _rnnlab("train", "demo/lstm", "--set", "model.cell=brokencell", "--out", "run", cwd=tmp_path, pythonpath=path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "SyntaxError" in r.stderr, r.stderr


def test_a_relative_cell_file_from_another_directory_is_not_called_a_damaged_config(tmp_path):
    """A run of `file.py:Class` (relative) resumed or evaluated from another directory was
    reported as a damaged config.json."""
    write_cells(tmp_path / "proj", "relcells")
    flags = ["--set", "model.cell=relcells.py:MinGated", "--set", "train.steps=2"] + FAST
    out = tmp_path / "proj" / "run"
    assert _rnnlab("train", "demo/lstm", *flags, "--out", out, cwd=tmp_path / "proj").returncode == 0
    for args, words in (
        (["evaluate", out], ["relative to the directory the run was started in", "run this command from"]),
        (["train", "demo/lstm", *flags, "--out", out, "--resume"], ["no file", "relative to the current directory"]),
    ):
        r = _rnnlab(*args, cwd=tmp_path)
        (line,) = r.stderr.strip().splitlines()
        assert r.returncode == 2 and "damaged" not in line and "valid run configuration" not in line, line
        assert all(w in line for w in words), line
        assert _rnnlab(*args, cwd=tmp_path / "proj").returncode == 0  # the fix works
