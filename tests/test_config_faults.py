"""Runs and configuration that must never give a silently wrong answer: each case is tried as a
hostile user would (a resume in another precision, a deleted metrics.jsonl, a missing best.pt,
misspelt metrics, values of the wrong type, a newline in a run name, an infinite gradient norm
under clipping) and must be refused with the reason, or recorded so that nothing mixes."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import typing

import pytest
import torch

import rnnlab
from conftest import set_flags, tiny_copy
from rnnlab import config, rundir
from rnnlab import train as train_mod
from rnnlab.cli import main
from rnnlab.config import ConfigError
from rnnlab.results import find_results, summarize, table
from rnnlab.train import TrainingDiverged, evaluate, load_run, train

TINY = tiny_copy(L=6, eval_size=32, hidden=12, batch=16, log_every=1)


def tiny(steps=10, *extra):
    return config.load("demo/lstm", TINY + [f"train.steps={steps}", *extra])


def cli(argv, capsys):
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def one_error(err: str) -> str:
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("rnnlab: error:")]
    assert len(lines) == 1, err
    return lines[0]


# --- one definition of what is part of an experiment ----------------------------------------


def test_not_experiment_keys_are_left_out_of_the_run_key_and_may_change_on_resume():
    """One definition, read by the run key (it omits RUN_KEY_OMITS), resume (all but the seeds)
    and the ledger (all of them)."""
    base = tiny()
    values = {
        "name": "other",
        "description": "x",
        "paper": {"test/loss": 1.0},
        "train.epoch_steps": 200,
        "train.seed": 7,
        "train.data_seed": 9,
        "train.threads": 3,
        "train.device": "cpu",
        "train.tensorboard": True,
        "train.checkpoint_every": 5,
        "train.log_every": 3,
        "train.eval_batch_size": 64,
        "train.test": False,
    }
    assert sorted(values) == sorted(config.NOT_EXPERIMENT)
    assert set(config.RUN_KEY_OMITS) == {
        "name",
        "description",
        "paper",
        "train.epoch_steps",
        "train.seed",
        "train.threads",
        "train.device",
        "train.tensorboard",
        "train.checkpoint_every",
    }
    for key, category in config.NOT_EXPERIMENT.items():
        flat = config.flatten(base.to_dict())
        assert key in flat or key == "paper"  # (an empty [paper] table adds no key)
        changed = config.from_dict(config.apply_overrides(base.to_dict(), [f"{key}={config.toml_value(values[key])}"]))
        same_key = rundir.config_key(changed) == rundir.config_key(base)
        assert same_key == (key in config.RUN_KEY_OMITS), key
        refused = config.resume_refusals(base, changed)
        assert (refused == []) == (category != "seed"), (key, refused)
    for key in config.RESUME_MAY_ALSO_CHANGE:  # part of the experiment, allowed on resume
        assert config.resume_may_change(key)
    exp = config.load("demo/lstm", TINY + ["optim.lr=0.01"])
    assert rundir.config_key(exp) != rundir.config_key(base)
    assert config.resume_refusals(base, exp) == ["optim.lr: 0.001 -> 0.01"]


def test_resume_with_other_threads_finds_the_run_and_continues_it(tmp_path, capsys):
    """`rnnlab train X --resume --set train.threads=2` found the run, then refused it (four
    lists of such keys disagreed)."""
    runs = tmp_path / "runs"
    argv = ["train", "demo/lstm", "--runs-dir", runs, "--quiet", *set_flags(*TINY)]
    rc, err = cli(argv + set_flags("train.steps=5"), capsys)
    assert rc == 0, err
    rc, err = cli(argv + set_flags("train.steps=10", "train.threads=2") + ["--resume"], capsys)
    assert rc == 0, err
    results = list(runs.rglob("result.json"))
    assert len(results) == 1
    r = json.loads(results[0].read_text())
    assert r["steps"] == 10 and r["conditions"]["threads"] == 2


# --- precision changed on resume ----------------------------------------------------------------


def test_resume_in_another_precision_is_a_mixed_run_that_table_keeps_apart(tmp_path, capsys, caplog):
    mixed, pure_bf16, pure_fp32 = tmp_path / "runs" / "a", tmp_path / "runs" / "b", tmp_path / "runs" / "c"
    train(tiny(10, "train.device='cpu'"), mixed, progress=False)
    capsys.readouterr()
    r = train(tiny(15, "train.device='cpu'", "train.precision='bf16'"), mixed, resume=True, progress=False)
    assert "mixed-precision run" in caplog.text  # the library's note, through logging
    assert r["precision_segments"] == [[0, "fp32"], [10, "bf16"]]
    assert json.loads((mixed / "result.json").read_text())["precision_segments"] == [[0, "fp32"], [10, "bf16"]]
    pure = train(tiny(15, "train.device='cpu'", "train.precision='bf16'", "train.seed=2"), pure_bf16, progress=False)
    assert pure["precision_segments"] == [[0, "bf16"]]
    train(tiny(15, "train.device='cpu'", "train.seed=3"), pure_fp32, progress=False)
    rows = summarize(find_results(tmp_path / "runs"), ["test/loss"])
    assert len(rows) == 3 and all(row["seeds"] == 1 for row in rows), rows
    labels = sorted(row["name"] for row in rows)
    assert sum("mixed precision: fp32 from step 0, bf16 from step 10" in name for name in labels) == 1, labels
    assert "mixed precision" in table(tmp_path / "runs")
    # a second resume back in fp32 stays mixed, with all three segments
    r = train(tiny(20, "train.device='cpu'"), mixed, resume=True, progress=False)
    assert r["precision_segments"] == [[0, "fp32"], [10, "bf16"], [15, "fp32"]]


# --- metrics.jsonl missing on resume -----------------------------------------------------------


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_resume_after_metrics_were_lost_is_refused_and_keeps_the_checkpoint(damage, tmp_path, capsys):
    out = tmp_path / "run"
    train(tiny(10), out, progress=False)
    if damage == "deleted":
        (out / "metrics.jsonl").unlink()
    else:
        (out / "metrics.jsonl").write_text("")
    before = (out / "checkpoint.pt").read_bytes()
    rc, err = cli(
        ["train", "demo/lstm", "--out", out, "--quiet", "--resume", *set_flags(*TINY, "train.steps=15")], capsys
    )
    line = one_error(err)
    assert rc == 1 and "metrics.jsonl" in line and ("is missing" in line or "holds no rows" in line)
    assert "restore it from a copy, or start the run over" in line
    assert (out / "checkpoint.pt").read_bytes() == before


# --- which="best" without best.pt --------------------------------------------------------------


def test_which_best_without_best_pt_is_an_error_not_checkpoint_pt(tmp_path, capsys):
    out = tmp_path / "run"
    train(tiny(10), out, progress=False)
    (out / "best.pt").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=r"has no best.pt \(which='best'\); checkpoint.pt exists: load it "
        r"with which='last'",
    ):
        load_run(out, which="best")
    rc, err = cli(["evaluate", out, "--which", "best"], capsys)
    assert rc == 1 and "has no best.pt" in one_error(err) and "--which last" in err
    _, _, model = load_run(out, which="last")  # the other file is still there for who asks for it
    assert model is not None


# --- metric names checked against the task ------------------------------------------------------


@pytest.mark.parametrize(
    "key,value,hint",
    [
        ("train.select_metric", "val/los", "Did you mean 'val/loss'"),
        ("train.target_metric", "val/accuracyy", "Did you mean 'val/accuracy'"),
        ("train.target_metric", "train/loss", "val/loss, val/accuracy, val/recall_accuracy"),
        ("train.select_metric", "val/bpc", "its validation metrics"),
    ],
)
def test_misspelt_selection_or_target_metric_is_refused_before_anything_runs(key, value, hint, tmp_path, capsys):
    out = tmp_path / "run"
    rc, err = cli(
        ["train", "demo/lstm", "--out", out, "--quiet", *set_flags(*TINY, "train.steps=5", f"{key}='{value}'")], capsys
    )
    line = one_error(err)
    assert rc == 2 and f"{key} = {value!r} is not a metric of task 'copy'" in line and hint in line
    assert not out.exists()  # nothing written, not even the directory


def _fixture_task(name, tmp_path):
    from test_cli_data import FIXTURE_TASKS, build_fixture_root

    if name == "music":
        pytest.importorskip("scipy")
    build_fixture_root(tmp_path / "data")
    options = config.tomllib.loads("[task]\n" + FIXTURE_TASKS[name][0])["task"]
    return config.TaskConfig(options.pop("name"), options), str(tmp_path / "data")


SYNTHETIC = {
    "copy": {"K": 2, "L": 4},
    "copy_variable": {"K": 2, "L": 6},
    "adding": {"T": 8},
    "hs_adding": {"L": 20},
    "temporal_order": {"L": 20},
    "noisy_sequence": {"L": 20},
    "selective_copy": {"K": 2, "L": 4},
    "mqar": {"num_kv_pairs": 2, "T": 16, "vocab": 16},
    "induction": {"T": 8},
    "listops": {"min_length": 5, "max_length": 30, "max_depth": 4, "max_args": 4},
}


@pytest.mark.parametrize("name", sorted(rnnlab.tasks.TASKS))
def test_declared_metric_names_are_what_an_evaluation_reports(name, tmp_path):
    """``Task.metric_names`` (what select_metric / target_metric are checked against) equals the
    metrics a real evaluation of the task's model returns."""
    from rnnlab.model import build_model

    if name in SYNTHETIC:
        opts = {**SYNTHETIC[name], "val_size": 8, "test_size": 8}
        tcfg, data_dir = config.TaskConfig(name, opts), None
    elif name == "text_char":
        pytest.skip("text_char needs a text file; its metrics are ptb_char's (same class family)")
    elif name == "arrays":  # a small classification file
        import numpy as np

        g = np.random.default_rng(0)
        x, y = g.standard_normal((48, 5, 3)).astype("float32"), g.integers(0, 3, 48)
        np.savez(tmp_path / "a.npz", x_train=x[:32], y_train=y[:32], x_val=x[32:], y_val=y[32:])
        tcfg, data_dir = config.TaskConfig("arrays", {"path": str(tmp_path / "a.npz")}), None
    else:
        tcfg, data_dir = _fixture_task(name, tmp_path)
    task = rnnlab.tasks.build_task(tcfg, data_dir)
    model = build_model(config.ModelConfig(cell="gru", hidden_size=6), task)
    got = evaluate(model, task, "val", 8, 2)
    assert sorted(got) == sorted(f"val/{m}" for m in task.metric_names())
    assert task.primary_metric in task.metric_names()


# --- every value type-checked ---------------------------------------------------------------


@pytest.mark.parametrize(
    "item,needle",
    [
        ("task.L=abc", "task.L must be of type int for task 'copy' (CopyTask), got 'abc'"),
        ("task.L=2.5", "task.L must be of type int for task 'copy' (CopyTask), got 2.5"),
        ("task.encoding=3", "task.encoding must be of type str"),
        ("model.cell_options.bias=1", "model.cell_options.bias must be of type bool for cell 'lstm'"),
        ("train.steps=2.5", "train.steps must be of type int, got 2.5"),
        ("model.hidden_size=2.5", "model.hidden_size must be of type int | list, got 2.5"),
        ("optim.lr='fast'", "optim.lr must be of type float, got 'fast'"),
    ],
)
def test_every_config_value_is_checked_against_its_declared_type(item, needle, tmp_path, capsys):
    out = tmp_path / "run"
    rc, err = cli(["train", "demo/lstm", "--out", out, "--quiet", *set_flags(*TINY, "train.steps=2", item)], capsys)
    line = one_error(err)
    assert rc == 2 and needle in line, line
    assert not out.exists()


def test_every_option_of_every_cell_and_task_has_a_type_to_check_against():
    import inspect

    from rnnlab.cells import CELLS

    for registry in (CELLS, rnnlab.tasks.TASKS):
        for key, cls in registry.items():
            hints = config.option_types(cls)
            params = [
                n
                for n, p in inspect.signature(cls.__init__).parameters.items()
                if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
            ]
            assert params and all(n in hints for n in params), (key, [n for n in params if n not in hints])


def test_type_check_accepts_what_toml_gives_for_each_declared_type():
    m = config.matches
    assert m(3, int) and not m(True, int) and not m(2.5, int) and not m("3", int)
    assert m(3, float) and m(2.5, float) and not m(True, float)
    assert m(None, int | None) and m(4, int | None) and not m(4.5, int | None)
    assert m([1, 2], list[int]) and not m([1, 2.5], list[int]) and m([1, 2], tuple[int, ...])
    assert m((1, "a"), tuple[int, str]) and not m((1, 2), tuple[int, str])
    assert m("a", typing.Any) and m({"k": 1}, dict) and not m([1], dict)


# --- layer sizes as torch.nn checks them ---------------------------------------------------------


@pytest.mark.parametrize("layer", ["LSTM", "GRU", "RNN", "ExpRNN", "ASRNN", "NNRNN", "DMU", "LTRNN", "SCORNN"])
@pytest.mark.parametrize("args", [(4, 6.5), (4.0, 6), (4, 6, 2.0)])
def test_layers_refuse_non_integer_sizes_as_torch_nn_does(layer, args):
    with pytest.raises(TypeError) as ours:
        getattr(rnnlab, layer)(*args)
    with pytest.raises(TypeError):
        torch.nn.LSTM(*args)
    assert "should be of type int, got: float" in str(ours.value)


def test_cells_refuse_a_non_integer_width():
    with pytest.raises(TypeError, match="hidden_size should be of type int, got: float"):
        rnnlab.ExpRNNCell(4, 6.5)


# --- run names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a\nb", "a\tb", "run\x1b[31m"])
def test_a_control_character_in_a_run_name_is_refused(name, tmp_path, capsys):
    with pytest.raises(ConfigError, match="control character"):
        config.from_dict({**tiny().to_dict(), "name": name})
    rc, err = cli(
        [
            "train",
            "demo/lstm",
            "--runs-dir",
            tmp_path,
            "--quiet",
            *set_flags(*TINY, "train.steps=2", f"name={json.dumps(name)}"),
        ],
        capsys,
    )
    assert rc == 2 and "control character" in one_error(err)
    assert list(tmp_path.iterdir()) == []


# --- a finite loss with an infinite gradient norm ---------------------------------------------


def test_infinite_gradient_norm_under_clipping_stops_the_run_as_diverged(tmp_path):
    """An LT-RNN at a too-large learning rate: the loss stays finite (about 1e17) while the
    gradient norm overflows; clipping then scales every update to zero and the run went on for
    its whole budget without learning. It must stop, saying why."""
    cfg = config.load(
        "henaff/adding-ltornn",
        [
            "task.T=100",
            "task.val_size=32",
            "task.test_size=32",
            "model.hidden_size=32",
            "optim.lr=0.01",
            "train.batch_size=32",
            "train.steps=60",
            "train.eval_every=30",
            "train.log_every=1",
        ],
    )
    with pytest.raises(TrainingDiverged, match=r"gradient norm became inf at step (\d+) while the loss is finite"):
        train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert math.isinf(last["train/grad_norm"]) and math.isfinite(last["train/loss"])
    assert last["step"] < 60 and not (tmp_path / "run" / "result.json").exists()


def test_a_finite_gradient_norm_is_clipped_and_trains_on(tmp_path):
    cfg = tiny(10, "optim.clip=0.5")
    r = train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    norms = [x["train/grad_norm"] for x in rows if "train/grad_norm" in x]
    assert r["steps"] == 10 and len(norms) == 10 and all(math.isfinite(n) for n in norms)


# --- progress off a terminal ---------------------------------------------------------------


def test_off_a_terminal_progress_lines_come_between_evaluations(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(train_mod, "PROGRESS_EVERY_S", 0.0, raising=False)
    with caplog.at_level(logging.INFO, logger="rnnlab"):  # pytest has set up logging: INFO records
        train(tiny(10), tmp_path / "r")  # progress=None; pytest's stderr is not a terminal
    err = [r.getMessage() for r in caplog.records if r.name == "rnnlab.train"]
    progress = [ln for ln in err if " steps (" in ln]
    evals = [ln for ln in err if " step " in ln and "val/loss" in ln]
    assert len(evals) == 2
    # one line after each step that is not an evaluation (where the evaluation line is enough)
    assert [ln.split()[1] for ln in progress] == [f"{s}/10" for s in (1, 2, 3, 4, 6, 7, 8, 9)]
    assert all("train/loss " in ln and "of training left" in ln for ln in progress)
    monkeypatch.setattr(train_mod, "PROGRESS_EVERY_S", 3600.0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rnnlab"):
        train(tiny(10), tmp_path / "q")
    assert not [r for r in caplog.records if " steps (" in r.getMessage()]


def test_frozen_configuration_cannot_be_changed_in_place():
    cfg = tiny()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.steps = 5  # type: ignore[misc]
    assert dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=5)).train.steps == 5


def test_rundir_import_leaves_torch_out_and_reexports_stay(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys, rnnlab.rundir, rnnlab.results\nassert 'torch' not in sys.modules\n"
        "import rnnlab, rnnlab.train\nassert rnnlab.load_run is rnnlab.rundir.load_run is rnnlab.train.load_run\n"
        "print('OK')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "OK", r.stderr[-2000:]


@pytest.mark.parametrize("module", ["rnnlab.config", "rnnlab.rundir", "rnnlab.train", "rnnlab.evaluation"])
def test_runnable_examples_in_the_docstrings(module, tmp_path, monkeypatch):
    """The ``>>>`` examples of the configuration, run-directory and trainer modules run."""
    import doctest
    import importlib

    monkeypatch.chdir(tmp_path)
    mod = importlib.import_module(module)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0


def test_both_models_provide_what_the_trainer_needs():
    """The trainer calls the ``Model`` protocol's methods directly (no hasattr checks): both
    models must provide all of them."""
    from rnnlab.model import Model, Seq2Seq, SequenceModel
    from rnnlab.tasks.base import Task

    seq = SequenceModel("lstm", 3, 2, 4)
    s2s = Seq2Seq("gru", 7, 6, 4)
    for model in (seq, s2s):
        assert isinstance(model, Model)
        assert set(model.param_groups()) >= {"default"} and isinstance(model.group_scales(), dict)
        assert model.parameter_counts()["elements"] == sum(p.numel() for p in model.parameters())
    assert not isinstance(torch.nn.Linear(2, 2), Model)
    assert Task.model_kind == "sequence" and Task().model_metrics(seq, "val") == {}


def test_rnnlab_train_resolves_its_device_once(tmp_path, monkeypatch, capsys):
    from rnnlab import device as dev

    calls = []
    real = dev.resolve_device

    def counting(spec="auto", what="train.device"):
        calls.append(spec)
        return real(spec, what)

    monkeypatch.setattr(dev, "resolve_device", counting)
    rc, err = cli(
        [
            "train",
            "demo/lstm",
            "--out",
            tmp_path / "r",
            "--device",
            "cpu",
            "--quiet",
            *set_flags(*TINY, "train.steps=2"),
        ],
        capsys,
    )
    assert rc == 0, err
    assert calls == ["cpu"]


def test_gpus_requested_is_one_reading_of_train_device():
    from rnnlab.device import gpus_requested

    assert [gpus_requested(s) for s in ("cpu", "mps", "cuda", "cuda:1", "auto")] == [0, 0, 1, 1, 0]
    assert gpus_requested("auto", cluster_gpus=2) == 1 and gpus_requested("cpu", cluster_gpus=2) == 0
    with pytest.raises(ConfigError, match="train.device must be one of"):
        gpus_requested("gpu")
