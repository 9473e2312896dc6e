"""Ensembles of a one-hot task whose first layer reads the tokens (rnnlab.kernels.ensemble.
one_hot_stand_in): each member is its single run in float64 to
1e-9, a member stepped alone equals it stepped among others bit for bit, and an interrupted
ensemble resumes to the uninterrupted one bit for bit."""

import pytest

from conftest import run_record
from rnnlab import config
from rnnlab import train as T
from rnnlab.ensemble import train_ensemble
from rnnlab.tasks import build_task
from test_ensemble import F64_RTOL, StopAfter, _same_run

# noisy sequence: 10 one-hot symbols, a GRU of layers (2, 3) as the DMU preset; lengths vary
NOISY = [
    "task.L=20",
    "task.noise_symbols=8",
    "task.val_size=16",
    "task.test_size=16",
    "train.batch_size=4",
    "train.eval_every=4",
    "train.log_every=1",
]


pytestmark = pytest.mark.usefixtures("float64_default")  # tests/conftest.py, as `gathers`


def _cfg(cell: str, *extra: str):
    return config.load(f"dmu/short/noisy_sequence-{cell}", [*NOISY, *extra])


@pytest.mark.parametrize("cell", ["gru", "dmu"])
def test_members_are_their_single_runs(tmp_path, cell, gathers):
    cfg = _cfg(cell, "train.steps=8")
    train_ensemble(cfg, [0, 1], tmp_path / "ens", progress=False)
    assert gathers[0] > 0, "the ensemble's first layer did not read the tokens"
    for seed in (0, 1):
        T.train(_cfg(cell, "train.steps=8", f"train.seed={seed}"), tmp_path / f"single{seed}", progress=False)
        _same_run(tmp_path / f"single{seed}", tmp_path / "ens" / f"seed{seed}", F64_RTOL)


def test_a_member_stepped_alone_equals_it_stepped_among_others(tmp_path, gathers):
    cfg = _cfg("gru", "train.steps=6")
    train_ensemble(cfg, [0, 1, 2], tmp_path / "three", progress=False)
    train_ensemble(cfg, [2], tmp_path / "alone", progress=False)
    assert gathers[0] > 0
    assert run_record(tmp_path / "three" / "seed2") == run_record(tmp_path / "alone" / "seed2")


def test_an_interrupted_ensemble_resumes_bit_identically(tmp_path, gathers):
    cfg = _cfg("lstm", "train.steps=12", "train.checkpoint_every=3")
    train_ensemble(cfg, [0, 1], tmp_path / "ref", progress=False)
    with pytest.raises(KeyboardInterrupt):
        train_ensemble(cfg, [0, 1], tmp_path / "ens", progress=False, task=StopAfter(build_task(cfg.task), 7))
    train_ensemble(cfg, [0, 1], tmp_path / "ens", resume=True, progress=False)
    assert gathers[0] > 0
    for seed in (0, 1):
        assert run_record(tmp_path / "ref" / f"seed{seed}") == run_record(tmp_path / "ens" / f"seed{seed}")
