"""Henaff et al.'s variable-length copy: the generator, its metrics, and the memoryless
baseline checked against an empirical memoryless predictor."""

import math

import pytest
import torch

from rnnlab import config
from rnnlab.tasks import TASKS, CopyTask, VariableCopyTask


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_sequences_are_copy_with_a_random_marker_time():
    t = VariableCopyTask(K=4, L=12, alphabet=5, L_min=3)
    b = t.make(500, gen(0))
    assert b.x.shape == b.y.shape == (500, t.T) and t.T == 12 + 8
    marker = (b.x == 6).int().argmax(1)
    assert ((b.x == 6).sum(1) == 1).all()
    assert set(marker.tolist()) == set(range(4 + 3, 4 + 12 + 1))  # every delay in [L_min, L] occurs
    for i in range(500):
        m = int(marker[i])
        sym = b.x[i, :4]
        assert ((sym >= 1) & (sym <= 5)).all()
        assert (b.x[i, 4:m] == 0).all() and (b.x[i, m + 1 :] == 0).all()
        assert torch.equal(b.y[i, m : m + 4], sym)
        assert b.y[i].count_nonzero() == 4
    again = t.make(500, gen(0))
    assert torch.equal(again.x, b.x) and torch.equal(again.y, b.y)


def test_fixed_delay_is_the_copy_task_with_its_baseline():
    v, c = VariableCopyTask(K=5, L=30, alphabet=8, L_min=30), CopyTask(K=5, L=30, alphabet=8)
    bv, bc = v.make(64, gen(1)), c.make(64, gen(1))
    assert torch.equal(bv.x[:, :5], bc.x[:, :5])  # the symbols come first from the same stream
    assert (bv.x == 9).int().argmax(1).eq(35).all() and torch.equal(bv.y[:, 35:], bv.x[:, :5])
    for key, value in c.baseline().items():
        assert v.baseline()[key] == pytest.approx(value, rel=1e-12)


def memoryless_predictor(task, n, seed):
    """Log-probabilities p(y_t | x_t, t) counted from ``n`` sequences: a table, no memory."""
    b = task.make(n, gen(seed))
    V, C = task.num_tokens, task.output_size
    counts = torch.zeros(task.T, V, C, dtype=torch.float64)
    t = torch.arange(task.T).expand_as(b.x)
    counts.index_put_(
        (t.reshape(-1), b.x.reshape(-1), b.y.reshape(-1)), torch.ones(b.x.numel(), dtype=torch.float64), accumulate=True
    )
    return (counts + 1e-3).log() - (counts + 1e-3).sum(-1, keepdim=True).log()


@pytest.mark.parametrize("K,L,L_min,a", [(3, 20, 1, 4), (5, 16, 8, 8)])
def test_baseline_equals_the_best_memoryless_predictor(K, L, L_min, a):
    task = VariableCopyTask(K=K, L=L, alphabet=a, L_min=L_min, val_size=20000)
    table = memoryless_predictor(task, 60000, seed=5)
    val = task.eval_set("val")
    out = table[torch.arange(task.T), val.x]  # (B, T, C) log-probabilities, from x_t and t only
    sums = task.metric_sums(out, val)
    got = {k: s / n for k, (s, n) in sums.items()}
    base = task.baseline()
    assert got["loss"] == pytest.approx(base["loss"], rel=0.02)
    assert got["accuracy"] == pytest.approx(base["accuracy"], abs=0.005)
    assert got["recall_accuracy"] == pytest.approx(base["recall_accuracy"], abs=0.02)
    # it is above the fixed task's K ln(a) / T: not knowing when the marker came costs
    assert base["loss"] > K * math.log(a) / task.T


def test_recall_accuracy_counts_each_sequences_own_window():
    task = VariableCopyTask(K=3, L=10, alphabet=4)
    b = task.make(32, gen(2))
    perfect = torch.nn.functional.one_hot(b.y, task.output_size).double()
    sums = task.metric_sums(perfect, b)
    assert sums["recall_accuracy"] == (96.0, 96.0) and sums["accuracy"][0] == sums["accuracy"][1]
    blanks = torch.zeros_like(perfect)
    blanks[..., 0] = 1
    assert task.metric_sums(blanks, b)["recall_accuracy"][0] == 0


def test_registered_options_and_presets():
    assert TASKS["copy_variable"] is VariableCopyTask
    with pytest.raises(ValueError, match=r"1 <= L_min <= L=10, got L_min=11"):
        VariableCopyTask(L=10, L_min=11)
    presets = [p for p in config.list_presets() if p.startswith("henaff/copy_variable-")]
    assert {"henaff/copy_variable-lstm", "henaff/copy_variable-ltornn", "henaff/copy_variable-ltirnn"} <= set(presets)
    for name in presets:
        cfg = config.load(name)
        assert cfg.task.name == "copy_variable" and cfg.task.options["L"] == 100


def test_a_preset_trains_one_step(tmp_path):
    from rnnlab.train import train

    cfg = config.load(
        "henaff/copy_variable-lstm",
        ["task.L=10", "task.val_size=4", "task.test_size=4", "train.steps=1", "train.eval_every=1"],
    )
    r = train(cfg, tmp_path / "run", progress=False)
    assert r["steps"] == 1 and "val/recall_accuracy" in r["final"]
