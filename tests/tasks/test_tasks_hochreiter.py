"""Hochreiter & Schmidhuber's problems as the DMU paper uses them."""

import math

import pytest
import torch

from rnnlab.model import SequenceModel
from rnnlab.tasks import HSAddingTask, NoisySequenceTask, TemporalOrderTask


def gen(s):
    return torch.Generator().manual_seed(s)


def test_hs_adding_layout_target_and_baseline():
    t = HSAddingTask(L=100)
    b = t.make(5000, gen(0))
    assert b.lengths.min() >= 100 and b.lengths.max() <= 110
    v, m = b.x[..., 0], b.x[..., 1]
    for i in range(20):
        n = int(b.lengths[i])
        assert (m[i, :n] == 1).sum() == 2 and m[i, n - 1] == -1 and m[i, n:].abs().sum() == 0
        first, second = (m[i] == 1).nonzero().flatten().tolist()
        assert first < 10 and second < n // 2 - 1
    marked = (v * (m == 1)).sum(1)
    torch.testing.assert_close(b.y[:, 0], 0.5 + marked / 4)
    assert torch.all(v[m[:, 0] == 1, 0] == 0)
    # predicting the mean 0.5 scores the stated baseline (the target's variance), about 0.039
    mse = ((b.y - 0.5) ** 2).mean().item()
    assert t.baseline()["loss"] == pytest.approx(0.0396, abs=5e-4)
    assert mse == pytest.approx(t.baseline()["loss"], rel=0.06)
    s = HSAddingTask(L=100, target="sum").make(10, gen(0))
    torch.testing.assert_close(s.y[:, 0], (s.x[..., 0] * (s.x[..., 1] == 1)).sum(1))


def test_temporal_order_layout_and_classes():
    t = TemporalOrderTask(L=100)
    b = t.make(300, gen(1))
    for i in range(300):
        n = int(b.lengths[i])
        seq = b.x[i, :n]
        assert seq[0] == t.E and seq[n - 1] == t.B
        pos = ((seq == t.X) | (seq == t.Y)).nonzero().flatten().tolist()
        assert len(pos) == 3 and 10 <= pos[0] < 20 and 33 <= pos[1] < 43 and 66 <= pos[2] < 76
        bits = [int(seq[p] == t.Y) for p in pos]
        assert b.y[i] == 4 * bits[0] + 2 * bits[1] + bits[2]
    assert set(b.y.tolist()) == set(range(8))
    uniform = torch.zeros(300, 8)
    assert t.loss(uniform, b).item() == pytest.approx(math.log(8)) == t.baseline()["loss"]


@pytest.mark.parametrize("fixed", [False, True])
def test_noisy_sequence(fixed):
    t = NoisySequenceTask(L=50, noise_symbols=20, fixed=fixed)
    b = t.make(64, gen(2))
    torch.testing.assert_close(b.x[:, 0], b.y)
    assert b.x[:, 1:].min() >= 2 and b.x.max() < 22
    if fixed:
        assert torch.equal(b.x[0, 1:], b.x[1, 1:])
    else:
        assert not torch.equal(b.x[0, 1:], b.x[1, 1:])
    assert t.loss(torch.zeros(64, 2), b).item() == pytest.approx(math.log(2))


@pytest.mark.parametrize(
    "task", [HSAddingTask(L=30), TemporalOrderTask(L=30), NoisySequenceTask(L=30, noise_symbols=5)]
)
def test_readout_at_each_sequence_end(task):
    """The model's answer depends on the steps up to each sequence's own length only."""
    torch.manual_seed(3)
    m = SequenceModel("gru", task.input_size, task.output_size, 6, readout="last", num_tokens=task.num_tokens)
    b = task.make(4, gen(4))
    out, _ = m(b.x, None, b.lengths)
    for i in range(4):
        n = int(b.lengths[i])
        alone, _ = m(b.x[i : i + 1, :n])
        torch.testing.assert_close(out[i], alone[0])
    batches = list(task.eval_batches("val", 256))
    assert all(bb.lengths is not None for bb in batches)
    assert sum(bb.size for bb in batches) == task.sizes["val"]
