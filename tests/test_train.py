"""The trainer, configs and presets."""

import dataclasses
import json

import pytest
import torch

from conftest import DATA_ROOT, tiny_copy
from rnnlab import config
from rnnlab import parametrize as par
from rnnlab.config import ConfigError
from rnnlab.stepper import build_optimizer
from rnnlab.tasks import CopyTask
from rnnlab.tasks.data import DataError
from rnnlab.train import RunExists, TrainingDiverged, build_task, load_run, train


def small(cell="exprnn", steps=40, **extra):
    over = tiny_copy(f'model.cell="{cell}"', steps=steps, eval_every=10) + [f"{k}={v}" for k, v in extra.items()]
    if cell != "exprnn":
        over.append("optim.group_lr={}")
    return config.load("demo/exprnn", over)


def test_loss_falls_on_a_small_copy_task(tmp_path):
    cfg = small(steps=200, **{"optim.lr": 3e-3})
    r = train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first = next(row["val/loss"] for row in rows if "val/loss" in row)
    assert r["final"]["val/loss"] < 0.5 * first
    assert r["final"]["val/loss"] < 0.5 * r["baseline"]["loss"]
    for name in ("config.json", "metrics.jsonl", "result.json", "checkpoint.pt", "best.pt"):
        assert (tmp_path / "run" / name).exists()
    assert r["params"]["free"] < r["params"]["elements"]
    assert r["conditions"]["threads"] == 1 and "torch" in r["versions"]
    assert set(r["test"]) == {"test/loss", "test/accuracy", "test/recall_accuracy"}


#: a one-layer expRNN, and a two-layer LSTM: its state is a list of two (h, c) tuples, which
#: a resume once failed to move to the run's device ("'tuple' object has no attribute 'to'")
RESUMED = [{}, {"cell": "lstm", "model.hidden_size": "[6, 5]"}]


@pytest.mark.parametrize("kind", RESUMED, ids=["exprnn", "lstm-2-layers"])
def test_resume_equals_uninterrupted(tmp_path, kind):
    def cfg(steps):
        return small(steps=steps, **kind)

    full = train(cfg(30), tmp_path / "full", progress=False)
    train(cfg(20), tmp_path / "part", progress=False)
    resumed = train(cfg(30), tmp_path / "part", resume=True, progress=False)
    assert resumed["final"] == full["final"] and resumed["test"] == full["test"]
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "part" / "checkpoint.pt", weights_only=False)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    lines_full = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    lines_part = [json.loads(x) for x in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "time"} for r in rows]  # noqa: E731
    assert strip(lines_full) == strip(lines_part)


class StopAfter(CopyTask):
    """A copy task whose training stream is interrupted (as by Ctrl-C) when batch ``n + 1`` is asked for."""

    def __init__(self, n, **kw):
        super().__init__(**kw)
        self.n = n

    def train_batches(self, batch_size, gen):
        for i, batch in enumerate(super().train_batches(batch_size, gen)):
            if i == self.n:
                raise KeyboardInterrupt(f"stopped before step {i + 1}")
            yield batch


def test_checkpoints_between_evaluations_resume_exactly(tmp_path):
    """train.checkpoint_every=4 with evaluations every 15 steps: a run stopped at step 22 keeps
    the checkpoint of step 20 (without the key it would be step 15), best.pt and the metrics
    rows are those of the evaluations, and the resume equals an uninterrupted run bit for bit."""

    def cfg(**kw):
        return small(steps=30, **{"train.eval_every": 15, **kw})

    full = train(cfg(), tmp_path / "full", progress=False)
    with pytest.raises(KeyboardInterrupt):
        train(
            cfg(**{"train.checkpoint_every": 4}),
            tmp_path / "part",
            progress=False,
            task=StopAfter(22, K=3, L=8, val_size=64, test_size=64),
        )
    ck = torch.load(tmp_path / "part" / "checkpoint.pt", weights_only=False)
    assert ck["progress"]["step"] == 20 and ck["progress"]["best_step"] == 15
    with pytest.raises(KeyboardInterrupt):  # the same without the key: the evaluation's checkpoint
        train(cfg(), tmp_path / "eval-only", progress=False, task=StopAfter(22, K=3, L=8, val_size=64, test_size=64))
    assert torch.load(tmp_path / "eval-only" / "checkpoint.pt", weights_only=False)["progress"]["step"] == 15
    resumed = train(cfg(**{"train.checkpoint_every": 4}), tmp_path / "part", resume=True, progress=False)
    assert resumed["final"] == full["final"] and resumed["test"] == full["test"] and resumed["best"] == full["best"]
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "part" / "checkpoint.pt", weights_only=False)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    strip = lambda d: [  # noqa: E731
        {k: v for k, v in json.loads(x).items() if k != "time"} for x in (d / "metrics.jsonl").read_text().splitlines()
    ]
    assert strip(tmp_path / "full") == strip(tmp_path / "part")
    with pytest.raises(ConfigError, match="checkpoint_every must be >= 0"):
        cfg(**{"train.checkpoint_every": -1})


def test_resume_refuses_a_changed_config_and_existing_runs_are_protected(tmp_path):
    train(small(steps=10), tmp_path / "r", progress=False)
    with pytest.raises(RunExists, match="--resume"):
        train(small(steps=10), tmp_path / "r", progress=False)
    with pytest.raises(ConfigError, match="optim.lr"):
        train(small(steps=20, **{"optim.lr": 0.5}), tmp_path / "r", resume=True, progress=False)
    with pytest.raises(FileNotFoundError, match="nothing was checkpointed"):
        train(small(steps=10), tmp_path / "new", resume=True, progress=False)


class NaNAfter(CopyTask):
    """A copy task whose loss turns NaN at a given step (counted in loss calls)."""

    def __init__(self, bad_step, **kw):
        super().__init__(**kw)
        self.bad_step, self.calls = bad_step, 0

    def loss(self, out, batch):
        self.calls += 1
        loss = super().loss(out, batch)
        return loss * float("nan") if self.calls >= self.bad_step else loss


def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    cfg = small(steps=40)
    task = NaNAfter(17, K=3, L=8, val_size=64, test_size=64)
    with pytest.raises(TrainingDiverged, match="step 17.*step 10"):
        train(cfg, tmp_path / "r", progress=False, task=task)
    ck = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)
    assert ck["progress"]["step"] == 10
    assert all(torch.isfinite(v).all() for v in ck["model"].values() if v.is_floating_point())
    # the record of the stop: where, why and where it was made; no result.json, no test scores
    d = json.loads((tmp_path / "r" / "diverged.json").read_text())
    assert not (tmp_path / "r" / "result.json").exists()
    assert d["stopped"] == "diverged" and d["steps"] == 16 and "step 17" in d["reason"] and "test" not in d
    assert d["seed"] == cfg.train.seed and d["git"] is not None and d["best"]["step"] == 10


def test_dynamic_trivialization_through_the_trainer(tmp_path):
    cfg = small(steps=30, **{"model.cell_options.K": 7, "model.cell_options.M": 2})
    train(cfg, tmp_path / "r", progress=False, task=None)
    _, _, model = load_run(tmp_path / "r", which="last")
    p, A = next(par.orthogonal_parametrizations(model))
    assert int(p.steps) == 30 and int(p.rebases) == 4
    assert par.orthogonality_error(model.rnn.cells[0].weight_hh.detach()) < 1e-5


def test_per_tag_learning_rates():
    cfg = small()
    task = build_task(cfg.task)
    from rnnlab.model import build_model

    opt, groups = build_optimizer(cfg.optim, build_model(cfg.model, task))
    assert groups["orthogonal"]["lr"] == 1e-4 and groups["default"]["lr"] == 1e-3
    assert {g["tag"] for g in opt.param_groups} == {"orthogonal", "default"}


def test_config_errors_name_the_problem():
    with pytest.raises(ConfigError, match="valid keys.*steps"):
        config.load("demo/lstm", ["train.stepz=3"])
    with pytest.raises(ConfigError, match="train.steps must be of type int"):
        config.load("demo/lstm", ["train.steps='many'"])
    with pytest.raises(ConfigError, match="unknown option.*'Lx'.*valid"):
        config.load("demo/lstm", ["task.Lx=3"])
    with pytest.raises(ConfigError, match="unknown option.*'skew_init'"):
        config.load("demo/lstm", ["model.cell_options.skew_init='henaff'"])
    with pytest.raises(ConfigError, match="registered cells"):
        config.load("demo/lstm", ["model.cell='transformer'"])
    with pytest.raises(ConfigError, match="no preset"):
        config.load("demo/nonexistent")
    with pytest.raises(ConfigError, match="section.key=value"):
        config.load("demo/lstm", ["steps"])
    cfg = config.load("demo/lstm", ["optim.lr=3", "task.L=12"])
    assert cfg.optim.lr == 3.0 and isinstance(cfg.optim.lr, float) and cfg.task.options["L"] == 12


def test_resolved_config_round_trips(tmp_path):
    cfg = config.load("exprnn/copy-L100")
    p = tmp_path / "c.json"
    p.write_text(cfg.to_json())
    assert config.load_json(p) == cfg


def _shared_data_env():
    return str(DATA_ROOT) if DATA_ROOT is not None and DATA_ROOT.is_dir() else None


BIG = 256  # presets with a wider model run one step at hidden size 64 by default, full size under -m slow


_TASKS: dict = {}


def _one_step(preset, tmp_path, extra=()):
    cfg = config.load(
        preset,
        [
            "train.steps=1",
            "train.eval_every=1",
            "train.eval_max_batches=1",
            "train.eval_batch_size=8",
            "train.batch_size=4",
            "train.test=false",
            *extra,
        ],
    )
    key = json.dumps(dataclasses.asdict(cfg.task), sort_keys=True)
    try:
        if key not in _TASKS:  # presets sharing a dataset and its options share one loaded task
            _TASKS[key] = build_task(cfg.task, _shared_data_env())
        task = _TASKS[key]
    except (FileNotFoundError, DataError) as e:  # a real-data preset without its files here
        pytest.skip(f"data for {preset} not available: {e}")
    r = train(cfg, tmp_path / "run", progress=False, task=task)
    assert r["steps"] == 1 and r["final"]
    assert all(v == v for v in r["final"].values())  # no NaN


def _widest(preset):
    h = config.load(preset).model.hidden_size
    return max(h) if isinstance(h, list) else h  # per-layer widths: the widest layer


def _default_or_slow(presets):
    """Every preset, but of the translation presets (one step costs 10-25 s each on 2 cores:
    decoding at evaluation) only the first per cell in the default suite; the rest under -m slow."""
    seen, out = set(), []
    for p in presets:
        cfg = config.load(p)
        key = (cfg.task.name, cfg.model.cell)
        slow = cfg.task.name == "translation" and key in seen
        seen.add(key)
        out.append(pytest.param(p, marks=pytest.mark.slow) if slow else p)
    return out


@pytest.mark.parametrize("preset", _default_or_slow(config.list_presets()))
def test_every_preset_loads_and_runs_one_step(preset, tmp_path):
    big = _widest(preset) > BIG
    extra = ["model.hidden_size=64"] if big else []
    negatives = config.load(preset).model.cell_options.get("negatives", 0)
    if big and negatives:  # scoRNN's -1 entries of D, kept in proportion to the narrower width
        extra.append(f"model.cell_options.negatives={negatives * 64 // _widest(preset)}")
    _one_step(preset, tmp_path, extra)


@pytest.mark.slow
@pytest.mark.parametrize("preset", [p for p in config.list_presets() if _widest(p) > BIG])
def test_every_large_preset_runs_one_step_at_full_size(preset, tmp_path):
    _one_step(preset, tmp_path)


def test_target_metric_stops_early(tmp_path):
    r = train(
        small(steps=100, **{"train.target_metric": '"val/loss"', "train.target_value": 100.0}),
        tmp_path / "r",
        progress=False,
    )
    assert r["stopped"] == "target" and r["steps"] == 10


def test_plateau_schedule_halves_the_learning_rate(tmp_path):
    # with a negligible lr the validation loss cannot improve (by the scheduler's 1e-4 relative
    # threshold), so with patience 0 every evaluation after the first halves the lr
    cfg = small(
        steps=40,
        **{
            "optim.name": '"sgd"',
            "optim.lr": 1e-7,
            "optim.group_lr": "{orthogonal = 1e-7}",
            "train.schedule": '"plateau"',
            "train.plateau_patience": 0,
        },
    )
    train(cfg, tmp_path / "r", progress=False)
    lrs = [
        json.loads(x)["lr"]
        for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
        if "lr" in json.loads(x)
    ]
    # evaluations at 10, 20, 30, 40: halved after 20 and 30 (the row at 40 is logged before its eval)
    assert lrs[0] == 1e-7 and lrs[-1] == pytest.approx(1e-7 / 4)
    assert all(b == pytest.approx(a) or b == pytest.approx(a / 2) for a, b in zip(lrs, lrs[1:]))


def test_resume_accepts_a_run_saved_before_a_config_key_was_added(tmp_path):
    train(small(steps=10), tmp_path / "r", progress=False)
    path = tmp_path / "r" / "config.json"
    saved = json.loads(path.read_text())
    del saved["model"]["pool"]  # as written by an older rnnlab
    path.write_text(json.dumps(saved))
    r = train(small(steps=20), tmp_path / "r", resume=True, progress=False)
    assert r["steps"] == 20


def test_training_leaves_the_callers_torch_thread_count_as_it_was(tmp_path):
    """train() (train.threads = 1) left the calling program at one torch thread, and its random
    state at the run's seed; so did train_ensemble() (and check_cell(), the random state). Run
    in a subprocess: both are process-wide."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import rnnlab

    code = f"""
import torch, rnnlab
from rnnlab import config
from rnnlab.train import train
from rnnlab.ensemble import train_ensemble
from rnnlab.cellcheck import check_cell
torch.set_num_threads(3)
torch.manual_seed(123)
want = torch.rand(4)
cfg = config.load("demo/lstm", {tiny_copy(steps=2, eval_every=2)!r})
assert cfg.train.threads == 1
for run in (
    lambda: train(cfg, {str(tmp_path / "one")!r}, progress=False),
    lambda: train_ensemble(cfg, [0, 1], {str(tmp_path / "two")!r}, progress=False),
    lambda: check_cell("lstm", runs=False, log=lambda _: None),
):
    torch.manual_seed(123)
    run()
    print(torch.get_num_threads(), bool(torch.equal(torch.rand(4), want)))
"""
    env = {**os.environ, "PYTHONPATH": str(Path(rnnlab.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "True"] * 3, done.stdout
