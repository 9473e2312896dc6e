"""Henaff et al.'s hand-built solutions and l2 pooling."""

import pytest
import torch

from rnnlab import config
from rnnlab.config import ConfigError
from rnnlab.constructions import CopyClock, adding_solution, copy_success_table
from rnnlab.model import L2Pool, SequenceModel
from rnnlab.tasks import AddingTask, CopyTask


def test_adding_solution_is_exact_on_the_task():
    cell = adding_solution().double()
    batch = AddingTask(T=200).make(50, torch.Generator().manual_seed(0))
    x = batch.x.double()
    _, h = cell.sequence(x.transpose(0, 1))
    torch.testing.assert_close(h[:, 0], (x[..., 0] * x[..., 1]).sum(1), rtol=0, atol=1e-12)


def test_clock_is_a_root_of_identity_and_closed_form_matches_the_recurrence():
    g = torch.Generator().manual_seed(1)
    clock = CopyClock(d=16, K=4, L=30, generator=g)
    P = torch.linalg.matrix_power(clock.W, clock.period)
    torch.testing.assert_close(P, torch.eye(16, dtype=torch.float64), atol=1e-10, rtol=0)
    torch.testing.assert_close(clock.W @ clock.W.T, torch.eye(16, dtype=torch.float64))
    x = CopyTask(K=4, L=30).make(6, g).x
    torch.testing.assert_close(clock.states(x)[34:], clock.recall_states(x))


def test_clock_recalls_when_d_is_large_and_fails_when_small():
    g = torch.Generator().manual_seed(2)
    big = CopyClock(d=512, K=5, L=100, generator=g).success_rate(200, g)
    small = CopyClock(d=8, K=10, L=100, generator=g).success_rate(200, g)
    assert big["sequences"] == 1.0
    assert small["sequences"] < 0.1 and small["symbols"] < 0.9
    rows = copy_success_table(d=64, L=100, Ks=(2, 30), alphabets=(8,), trials=20)
    assert rows[0]["success"] > rows[1]["success"]


def test_clock_needs_even_dimension():
    with pytest.raises(ValueError, match="even"):
        CopyClock(d=7, K=3, L=10)


def test_l2_pooling_values_and_readout_size():
    h = torch.tensor([[3.0, 4.0, 0.0, 2.0]])
    torch.testing.assert_close(L2Pool(2)(h), torch.tensor([[3.0, 4.0, 0.0, 2.0, 5.0, 2.0]]))
    m = SequenceModel("ltrnn", 2, 1, 8, readout="last", pool=4)
    assert m.readout.in_features == 10
    out, _ = m(torch.randn(3, 5, 2))
    assert out.shape == (3, 1)
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)
    with pytest.raises(ConfigError, match="divisor"):
        config.load("henaff/copy-ltornn-pool", ["model.pool=3"])
    with pytest.raises(ValueError, match="divide"):
        SequenceModel("ltrnn", 2, 1, 8, pool=3)
