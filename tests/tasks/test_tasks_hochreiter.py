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


# the second training batch of a stream seeded 5 (batch 32), hashed: what make() drew before it
# was split into draw() and build() (recorded runs depend on these streams staying as they are)
STREAMS = {
    HSAddingTask: "56e1d1d54bc76901",
    TemporalOrderTask: "860dac6374e15d0e",
    NoisySequenceTask: "5fb43f44aeea6200",
}


def _digest(b) -> str:
    import hashlib

    return hashlib.sha256(b.x.numpy().tobytes() + b.y.numpy().tobytes() + b.lengths.numpy().tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("cls", list(STREAMS))
def test_streams_are_the_recorded_ones_and_an_ensemble_assembles_each_members(cls):
    """A stream's batches are the recorded ones, whether made one by one, read through the
    trainer's stream (train_stream + assemble) alone, or assembled for 5 members at once."""
    from rnnlab.tasks.base import train_stream

    t = cls(L=100)
    g = gen(5)
    t.make(32, g)
    assert _digest(t.make(32, g)) == STREAMS[cls]
    seeds = [5, 0, 1, 2, 3]
    streams = [train_stream(t, 32, gen(s)) for s in seeds]
    made = [t.train_batches(32, gen(s)) for s in seeds]
    for step in range(3):
        together = t.assemble([next(s) for s in streams])
        for k, b in enumerate(together):
            want = next(made[k])
            assert torch.equal(b.x, want.x) and torch.equal(b.y, want.y) and torch.equal(b.lengths, want.lengths)
            assert b.y.shape == want.y.shape and b.x.dtype == want.x.dtype
            if step == 1 and k == 0:
                assert _digest(b) == STREAMS[cls]
    alone = train_stream(t, 32, gen(5))
    next(alone)
    assert _digest(t.assemble([next(alone)])[0]) == STREAMS[cls]


def test_a_subclass_or_wrapper_with_its_own_batches_keeps_them():
    """The draws are skipped where a task's batches are not make()'s: a subclass overriding
    make or train_batches, and a wrapper that delegates to a task but yields its own batches."""
    from rnnlab.tasks.base import train_stream

    class Doubled(HSAddingTask):
        def make(self, batch_size, generator):
            b = super().make(batch_size, generator)
            b.y = 2 * b.y
            return b

    class Wrapper:
        def __init__(self, task):
            self.task = task

        def __getattr__(self, name):
            return getattr(self.task, name)

        def train_batches(self, batch_size, generator):
            for b in self.task.train_batches(batch_size, generator):
                b.y = -b.y
                yield b

    plain = HSAddingTask(L=100).make(8, gen(3))
    for task, sign in ((Doubled(L=100), 2), (Wrapper(HSAddingTask(L=100)), -1)):
        b = task.assemble([next(train_stream(task, 8, gen(3)))])[0]
        torch.testing.assert_close(b.y, sign * plain.y)
