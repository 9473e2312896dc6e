"""Members of one ensemble with their own clipping threshold and LT-RNN init scales
(rnnlab.ensemble.MEMBER_KEYS), beside their own learning rate: a grid over these keys x seeds
trained as one batched model.

The reference is the single run with that setting (``rnnlab.train.train`` with ``--set`` of it):
each member must follow it in float64 to 1e-9 and an interrupted grid must resume bit for bit. A
key that changes the forward pass or the shapes (the batch size) stays a separate configuration:
a suite's grid over it gives one ensemble per value.
"""

import json
import math

import pytest
import torch

from conftest import run_record
from rnnlab import config
from rnnlab import train as T
from rnnlab.cells import LTRNNCell
from rnnlab.ensemble import MEMBER_KEYS, member_configs, member_labels, train_ensemble
from rnnlab.suite import load_suite, run_suite
from rnnlab.tasks import build_task
from test_ensemble import COPY, F32_RTOL, F64_RTOL, TINY, Float64Task, StopAfter, _cfg, _same_run

IN, BIAS = "model.cell_options.input_scale", "model.cell_options.bias_value"
# the LT-ORNN of Henaff's copy task, small: relu inputs on a random orthogonal W
LT = ['model.cell="ltrnn"', 'model.cell_options={init="orthogonal"}', 'optim.name="rmsprop"', "optim.lr=0.01"]
SEEDS = [0, 1, 0, 1, 0]
SETTINGS = [
    {"optim.clip": 0.05, IN: 1.0, BIAS: 0.0},
    {"optim.clip": 0.05, IN: 1.0, BIAS: 0.0},
    {"optim.clip": 0.0, IN: 2.0, BIAS: -0.5},
    {"optim.clip": 1.0, IN: 0.5, BIAS: 0.2},
    {"optim.clip": 0.05, IN: 0.5, BIAS: 0.0},
]


def _over(setting: dict) -> list[str]:
    return [f"{k}={v}" for k, v in setting.items()]


def _folder(setting: dict) -> str:
    return "-".join(f"{k.rsplit('.', 1)[-1]}{v:g}" for k, v in setting.items())


@pytest.fixture
def float64(monkeypatch):
    build = T.build_model
    monkeypatch.setattr(T, "build_model", lambda m, t: build(m, t).double())


def test_the_init_options_only_initialise():
    """input_scale and bias_value change the initial weights (the input weights' range, the
    bias's value) and nothing else: cells built otherwise compute the same once they hold the
    same weights, so a member that differs in them is exact. The defaults draw what they did
    before the options existed (the same random stream, bit for bit)."""
    torch.manual_seed(0)
    ref = LTRNNCell(5, 64, init="orthogonal")
    torch.manual_seed(0)
    k = 1 / math.sqrt(64)
    a = LTRNNCell(5, 64, init="orthogonal", input_scale=3.0, bias_value=-0.7)
    assert 2 * k < a.weight_ih.abs().max() <= 3 * k  # U(+-3/sqrt(H)) over 320 draws
    assert torch.equal(a.bias, torch.full((64,), -0.7))
    assert torch.equal(a.weight_ih, 3 * ref.weight_ih) and torch.equal(a.weight_hh, ref.weight_hh)
    torch.manual_seed(0)
    assert all(torch.equal(p, q) for p, q in zip(LTRNNCell(5, 64, init="orthogonal").parameters(), ref.parameters()))
    b = LTRNNCell(5, 64, init="orthogonal")
    b.load_state_dict(a.state_dict())
    x, h = torch.randn(3, 5), torch.randn(3, 64)
    assert torch.equal(a(x, h)[0], b(x, h)[0])
    for bad in ({"input_scale": 0}, {"input_scale": float("nan")}, {"bias_value": "1"}, {"bias_value": True}):
        with pytest.raises(ValueError, match=f"LT-RNN {next(iter(bad))} must be a finite number"):
            LTRNNCell(2, 4, **bad)


def test_members_at_their_own_settings_follow_their_single_runs_in_float64(tmp_path, float64):
    """Members differing in clipping, input scale and bias value (two seeds at one setting, one
    seed at three) equal the single runs with that setting in float64; the settings act."""
    extra = [*LT, "train.steps=20"]
    cfg = _cfg(COPY, extra)
    task = Float64Task(build_task(cfg.task))
    for s, st in zip(SEEDS, SETTINGS):
        T.train(_cfg(COPY, [*extra, *_over(st)], s), tmp_path / "single" / _folder(st) / f"seed{s}", task=task)
    results = train_ensemble(cfg, SEEDS, tmp_path / "ens", progress=False, task=task, settings=SETTINGS)
    assert sorted(results) == sorted((*st.values(), s) for s, st in zip(SEEDS, SETTINGS))
    finals = set()
    for s, st in zip(SEEDS, SETTINGS):
        d = f"{_folder(st)}/seed{s}"
        saved = json.loads((tmp_path / "ens" / d / "config.json").read_text())
        assert saved["optim"]["clip"] == st["optim.clip"] and saved["model"]["cell_options"]["input_scale"] == st[IN]
        _same_run(tmp_path / "single" / d, tmp_path / "ens" / d, F64_RTOL)
        assert results[(*st.values(), s)]["conditions"]["ensemble"] == len(SEEDS)
        finals.add(round(results[(*st.values(), s)]["final"]["val/loss"], 9))
    assert len(finals) == len(SEEDS)  # every member ends elsewhere
    # the small threshold binds: the gradient norms logged before clipping exceed it
    text = (tmp_path / "ens" / _folder(SETTINGS[0]) / "seed0" / "metrics.jsonl").read_text()
    rows = [json.loads(ln) for ln in text.splitlines()]
    assert max(r.get("train/grad_norm", 0) for r in rows) > 0.05


def test_an_interrupted_grid_of_settings_resumes_bit_for_bit(tmp_path, float64):
    """Stopped at step 17 (checkpoints every 4 steps), resumed: every member equals the
    uninterrupted grid's bit for bit, and a member its single run."""
    extra = [*LT, "train.steps=30", "train.checkpoint_every=4"]
    cfg = _cfg(COPY, extra)
    task = Float64Task(build_task(cfg.task))
    train_ensemble(cfg, SEEDS, tmp_path / "ref", progress=False, task=task, settings=SETTINGS)
    with pytest.raises(KeyboardInterrupt):
        train_ensemble(cfg, SEEDS, tmp_path / "ens", progress=False, task=StopAfter(task, 17), settings=SETTINGS)
    ck = torch.load(tmp_path / "ens" / _folder(SETTINGS[2]) / "seed0" / "checkpoint.pt", weights_only=False)
    assert ck["progress"]["step"] == 16
    train_ensemble(cfg, SEEDS, tmp_path / "ens", resume=True, progress=False, task=task, settings=SETTINGS)
    for s, st in zip(SEEDS, SETTINGS):
        d = f"{_folder(st)}/seed{s}"
        assert run_record(tmp_path / "ref" / d) == run_record(tmp_path / "ens" / d), d
    T.train(_cfg(COPY, [*extra, *_over(SETTINGS[3])], seed=1), tmp_path / "single", progress=False, task=task)
    _same_run(tmp_path / "single", tmp_path / "ens" / _folder(SETTINGS[3]) / "seed1", F64_RTOL)


def test_bad_member_settings_are_one_line_errors():
    cfg = _cfg(COPY, LT)
    assert set(MEMBER_KEYS) >= {"optim.clip", IN, BIAS}
    with pytest.raises(
        config.ConfigError, match=r"cannot differ in \['train.batch_size'\].*train other settings apart"
    ):
        member_configs(cfg, [0, 1], settings=[{"train.batch_size": 4}, {"train.batch_size": 8}])
    with pytest.raises(config.ConfigError, match="1 member settings for 2 members"):
        member_configs(cfg, [0, 1], settings=[{"optim.clip": 1.0}])
    with pytest.raises(config.ConfigError, match="the member with seed 1 sets"):
        member_configs(cfg, [0, 1], settings=[{"optim.clip": 1.0}, {IN: 2.0}])
    with pytest.raises(config.ConfigError, match=r"the member with seed 1 at .*optim.clip"):
        member_configs(cfg, [0, 1], settings=[{"optim.clip": 1.0}, {"optim.clip": -1.0}])
    with pytest.raises(config.ConfigError, match="not both"):
        member_configs(cfg, [0], lrs=[1e-3], settings=[{"optim.clip": 1.0}])
    cfgs = member_configs(cfg, [0, 0], settings=[{"optim.clip": 1, IN: 0.5}, {"optim.clip": 2, IN: 0.5}])
    assert [c.optim.clip for c in cfgs] == [1.0, 2.0] and isinstance(cfgs[0].optim.clip, float)
    assert cfgs[0].model.cell_options == {"init": "orthogonal", "input_scale": 0.5}
    from rnnlab.ensemble import Member

    labels = member_labels([Member(0, c, f"d{i}") for i, c in enumerate(cfgs)])
    assert labels == ["seed 0 at clip 1", "seed 0 at clip 2"]  # what differs, not what is shared


def _suite(path, grid: str):
    over = [*TINY, "train.steps=6", 'model.cell="ltrnn"', 'model.cell_options={init="orthogonal"}', "optim.clip=1.0"]
    path.write_text(
        f'name = "g"\npresets = ["demo/lstm"]\nseeds = [0, 1]\nset = {json.dumps(over)}\nensemble = true\n[grid]\n{grid}\n'
    )
    return load_suite(str(path))


def _sizes(root) -> dict:
    return {
        str(p.parent.relative_to(root)): json.loads(p.read_text())["conditions"].get("ensemble")
        for p in sorted(root.rglob("result.json"))
    }


def test_a_suite_grid_of_clipping_and_init_scales_is_one_ensemble_and_batch_sizes_are_apart(tmp_path):
    """A [grid] over optim.clip x input_scale x bias_value (2 x 2 x 2 points, 2 seeds) trains as one
    ensemble of 16 members, each in its single run's directory and equal to that single run
    (--no-ensemble) to float32's rounding; a grid over train.batch_size gives one ensemble per size."""
    grid = f'"optim.clip" = [0.1, 1.0]\n"{IN}" = [0.5, 2.0]\n"{BIAS}" = [0.0, -0.5]'
    suite = _suite(tmp_path / "s.toml", grid)
    statuses: dict = {}
    run_suite(suite, tmp_path / "ens", statuses=statuses, log=lambda m: None)
    assert len(statuses) == 16 and set(statuses.values()) == {"trained"}
    run_suite(suite, tmp_path / "single", statuses={}, log=lambda m: None, ensemble=False)
    ens, single = _sizes(tmp_path / "ens"), _sizes(tmp_path / "single")
    assert sorted(ens) == sorted(single) and set(ens.values()) == {16} and set(single.values()) == {None}
    for d in ens:
        _same_run(tmp_path / "single" / d, tmp_path / "ens" / d, F32_RTOL)
    suite = _suite(tmp_path / "b.toml", f'"{IN}" = [0.5, 2.0]\n"train.batch_size" = [4, 8]')
    run_suite(suite, tmp_path / "batch", statuses={}, log=lambda m: None)
    assert sorted(_sizes(tmp_path / "batch").values()) == [4] * 8  # 2 batch sizes x (2 scales x 2 seeds)
