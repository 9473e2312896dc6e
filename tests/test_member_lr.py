"""Members of one ensemble at their own learning rates (rnnlab.ensemble.MEMBER_KEYS): a grid of
rates x seeds trained as one batched model.

The reference is the single run at that rate (``rnnlab.train.train`` with ``optim.lr`` set): each
member must follow it in float64 to 1e-9 for Adam, RMSprop and SGD, with a schedule, clipping and
per-group rates, and an interrupted grid must resume bit for bit. For Adam and RMSprop a rate
cannot be folded into the gradients (the update divides by the root of the second moment), so
the stacked step runs torch's update once per rate (rnnlab.stacked_optim); that it does so, and
not one member at a time, is checked too.
"""

import json
import math

import pytest
import torch

from conftest import run_record
from rnnlab import config
from rnnlab import train as T
from rnnlab.ensemble import EnsembleFailed, check_ensemble, member_configs, train_ensemble
from rnnlab.stacked_optim import StackedStep
from rnnlab.suite import load_suite, run_suite
from rnnlab.tasks import build_task
from test_ensemble import ADD, COPY, F32_RTOL, F64_RTOL, TINY, Float64Task, StopAfter, _cfg, _same_run

SEEDS = [0, 1, 2, 0, 1]
LRS = [1e-3, 1e-3, 1e-3, 3e-2, 3e-2]  # sets of members of two sizes, one seed at both rates

CASES = {
    "adam": (ADD, ['model.cell="rnn"', 'optim.name="adam"']),
    "rmsprop-clip": (COPY, ['model.cell="gru"', "model.hidden_size=3", 'optim.name="rmsprop"', "optim.clip=0.5"]),
    "sgd": (ADD, ['model.cell="rnn"', 'model.cell_options={nonlinearity="relu"}', 'optim.name="sgd"']),
    "adam-exponential": (
        ADD,
        ['model.cell="lstm"', 'train.schedule="exponential"', "train.lr_gamma=0.7", "train.lr_step_every=7"],
    ),
    "rmsprop-plateau": (
        COPY,
        ['model.cell="lstm"', 'optim.name="rmsprop"', 'train.schedule="plateau"', "train.plateau_patience=0"],
    ),
    # DMU's block at its own group rate while the readout's rate is the member's (the code protocol)
    "adam-group-lr": (ADD, ['model.cell="dmu"', "model.cell_options={layers=[4]}", "optim.group_lr={memory=1e-3}"]),
}


@pytest.fixture
def float64(monkeypatch):
    build = T.build_model
    monkeypatch.setattr(T, "build_model", lambda m, t: build(m, t).double())


@pytest.fixture
def stacked_rates(monkeypatch):
    """The rates each stacked optimizer update ran at, with how many members it stepped."""
    seen = []
    step = StackedStep._torch_step

    def spy(self, group, lr, count, P, G, S):
        seen.append((lr, P.shape[0]))
        return step(self, group, lr, count, P, G, S)

    monkeypatch.setattr(StackedStep, "_torch_step", spy)
    return seen


@pytest.mark.parametrize("case", list(CASES))
def test_members_at_their_own_rates_follow_their_single_runs_in_float64(case, tmp_path, float64, stacked_rates):
    base, extra = CASES[case]
    extra = [*extra, "train.steps=20"]
    cfg = _cfg(base, extra)
    task = Float64Task(build_task(cfg.task))
    for s, lr in zip(SEEDS, LRS):
        T.train(_cfg(base, [*extra, f"optim.lr={lr}"], s), tmp_path / "single" / f"lr{lr:g}" / f"seed{s}", task=task)
    results = train_ensemble(cfg, SEEDS, tmp_path / "ens", progress=False, task=task, lrs=LRS)
    assert sorted(results) == sorted(zip(LRS, SEEDS))
    for s, lr in zip(SEEDS, LRS):
        d = f"lr{lr:g}/seed{s}"
        assert json.loads((tmp_path / "ens" / d / "config.json").read_text())["optim"]["lr"] == lr
        _same_run(tmp_path / "single" / d, tmp_path / "ens" / d, F64_RTOL)
        assert results[(lr, s)]["conditions"]["ensemble"] == len(SEEDS)
    # the rate acts: seed 0 at the two rates ends elsewhere
    a, b = (json.loads((tmp_path / "ens" / f"lr{lr:g}" / "seed0" / "result.json").read_text()) for lr in (1e-3, 3e-2))
    assert not math.isclose(a["final"]["val/loss"], b["final"]["val/loss"], rel_tol=1e-6)
    # one stacked update per rate and group (never each member alone): 3 members at 1e-3, 2 at 3e-2
    # (all 5 in DMU's block at its own group rate; the plateau schedule may split a set)
    if case != "rmsprop-plateau":
        sizes = {2, 3, 5} if "group" in case else {2, 3}
        assert stacked_rates and {n for _, n in stacked_rates} == sizes
        assert {lr for lr, n in stacked_rates if n == 3} & {1e-3, 1e-3 * 0.7}


def test_an_interrupted_grid_resumes_bit_for_bit(tmp_path, float64):
    """Stopped at step 17 (checkpoints every 4 steps), resumed: every member equals the
    uninterrupted grid's bit for bit, and a member its single run."""
    extra = ['optim.name="adam"', "train.steps=30", "train.checkpoint_every=4"]
    cfg = _cfg(COPY, extra)
    task = Float64Task(build_task(cfg.task))
    train_ensemble(cfg, SEEDS, tmp_path / "ref", progress=False, task=task, lrs=LRS)
    with pytest.raises(KeyboardInterrupt):
        train_ensemble(cfg, SEEDS, tmp_path / "ens", progress=False, task=StopAfter(task, 17), lrs=LRS)
    ck = torch.load(tmp_path / "ens" / "lr0.03" / "seed1" / "checkpoint.pt", weights_only=False)
    assert ck["progress"]["step"] == 16
    train_ensemble(cfg, SEEDS, tmp_path / "ens", resume=True, progress=False, task=task, lrs=LRS)
    for s, lr in zip(SEEDS, LRS):
        d = f"lr{lr:g}/seed{s}"
        assert run_record(tmp_path / "ref" / d) == run_record(tmp_path / "ens" / d), d
    T.train(_cfg(COPY, [*extra, "optim.lr=0.03"], seed=1), tmp_path / "single", progress=False, task=task)
    _same_run(tmp_path / "single", tmp_path / "ens" / "lr0.03" / "seed1", F64_RTOL)


def test_bad_rates_are_one_line_errors(tmp_path):
    cfg = _cfg(COPY)
    with pytest.raises(config.ConfigError, match=r"2 learning rates for 3 members: give one learning rate per member"):
        member_configs(cfg, [0, 1, 2], [1e-3, 1e-2])
    for bad in (0, -1e-3, float("nan"), float("inf"), True, "1e-3"):
        with pytest.raises(config.ConfigError, match=r"member with seed 1 must be a finite number > 0"):
            member_configs(cfg, [0, 1], [1e-3, bad])
    with pytest.raises(config.ConfigError, match="2 learning rates for 3 members"):
        train_ensemble(cfg, [0, 1, 2], tmp_path, progress=False, lrs=[1e-3, 1e-2])
    assert not any(tmp_path.iterdir())  # refused before anything was written
    with pytest.raises(config.ConfigError, match="distinct runs"):
        check_ensemble(member_configs(cfg, [0, 0], [1e-3, 1e-3]))
    # the rates may differ, nothing else
    check_ensemble(member_configs(cfg, [0, 0, 1], [1e-3, 1e-2, 1e-3]))
    check_ensemble([_cfg(COPY, seed=0), _cfg(COPY, ["optim.group_lr={orthogonal=1e-4}"], seed=0)])
    with pytest.raises(config.ConfigError, match=r"differ only in train.seed, optim.lr, optim.group_lr.*batch_size"):
        check_ensemble([_cfg(COPY, seed=0), _cfg(COPY, ["optim.lr=0.1", "train.batch_size=8"], seed=1)])


def test_a_diverging_rate_fails_alone(tmp_path):
    """The member at a rate that blows up stops with its error; the members at the other rate
    finish, and the error names the member by seed and rate."""
    cfg = _cfg(ADD, ['model.cell="rnn"', 'optim.name="sgd"', "train.steps=20"])
    with pytest.raises(EnsembleFailed, match=r"seed 0 at lr 1e\+06: TrainingDiverged") as e:
        train_ensemble(cfg, [0, 0], tmp_path, progress=False, lrs=[1e-3, 1e6])
    assert set(e.value.results) == {(1e-3, 0)} and set(e.value.errors) == {(1e6, 0)}


def _grid_suite(path, grid: str, ensemble: str = "true"):
    path.write_text(
        f'name = "g"\npresets = ["demo/lstm"]\nseeds = [0, 1]\nset = {json.dumps([*TINY, "train.steps=6"])}\n'
        f"ensemble = {ensemble}\n[grid]\n{grid}\n"
    )
    return path


def _ensemble_sizes(root) -> dict:
    return {
        str(p.parent.relative_to(root)): json.loads(p.read_text())["conditions"].get("ensemble")
        for p in sorted(root.rglob("result.json"))
    }


def test_a_suite_grid_of_rates_trains_as_one_ensemble_into_the_single_runs_directories(tmp_path):
    """A suite's [grid] over optim.lr with ensemble = true: the grid points' seeds are the members
    of one ensemble (3 rates x 2 seeds = 6), each in the directory its single run uses, and each
    equal to that single run (--no-ensemble) to float32's rounding; a grid point that differs in
    anything else (a tied train.steps) is an ensemble of its own."""
    suite = load_suite(str(_grid_suite(tmp_path / "s.toml", '"optim.lr" = [1e-3, 1e-2, 1e-1]')))
    statuses: dict = {}
    run_suite(suite, tmp_path / "ens", statuses=statuses, log=lambda m: None)
    assert len(statuses) == 6 and set(statuses.values()) == {"trained"}
    run_suite(suite, tmp_path / "single", statuses={}, log=lambda m: None, ensemble=False)
    ens, single = _ensemble_sizes(tmp_path / "ens"), _ensemble_sizes(tmp_path / "single")
    assert sorted(ens) == sorted(single) and set(ens.values()) == {6} and set(single.values()) == {None}
    lrs = {json.loads((tmp_path / "ens" / d / "config.json").read_text())["optim"]["lr"] for d in ens}
    assert lrs == {1e-3, 1e-2, 1e-1}
    for d in ens:
        _same_run(tmp_path / "single" / d, tmp_path / "ens" / d, F32_RTOL)
    tied = (
        '[[grid.s]]\n"optim.lr" = 1e-3\n[[grid.s]]\n"optim.lr" = 1e-2\n[[grid.s]]\n"optim.lr" = 1e-2\n"train.steps" = 3'
    )
    suite = load_suite(str(_grid_suite(tmp_path / "t.toml", tied)))
    run_suite(suite, tmp_path / "tied", statuses={}, log=lambda m: None)
    assert sorted(_ensemble_sizes(tmp_path / "tied").values()) == [2, 2, 4, 4, 4, 4]


def test_a_stage_of_a_suite_runs_some_of_its_seeds_and_the_same_command_completes_it(tmp_path, capsys):
    """``rnnlab suite S --seeds 0``: only seed 0 of every grid point, as one ensemble; without
    ``--seeds`` the rest, seed 0 left as it is; a seed the suite does not have is refused."""
    from rnnlab.cli import main

    path = _grid_suite(tmp_path / "s.toml", '"optim.lr" = [1e-3, 1e-2]')
    argv = ["suite", str(path), "--runs-dir", str(tmp_path / "r")]
    assert main([*argv, "--seeds", "0"]) == 0
    first = _ensemble_sizes(tmp_path / "r")
    assert len(first) == 2 and all(d.endswith("/seed0") for d in first) and set(first.values()) == {2}
    assert main(argv) == 0
    sizes = _ensemble_sizes(tmp_path / "r")
    assert len(sizes) == 4 and {d: sizes[d] for d in first} == first  # seed 0 not retrained
    capsys.readouterr()
    assert main([*argv, "--seeds", "0,5"]) == 2
    err = capsys.readouterr().err
    assert "seed(s) [5] are not among suite g's seeds [0, 1]" in err and len(err.strip().splitlines()) == 1
