"""Copy and adding generators: layout, determinism, baselines."""

import math

import pytest
import torch

from rnnlab.tasks import TASKS, AddingTask, Batch, CopyTask


def gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("encoding", ["exprnn", "nnrnn"])
def test_copy_layout(encoding):
    t = CopyTask(K=4, L=7, alphabet=8, encoding=encoding)
    b = t.make(5, gen(0))
    assert b.x.shape == b.y.shape == (5, 7 + 8)
    sym = b.x[:, :4]
    assert sym.min() >= 1 and sym.max() <= 8
    marker = 4 + 7 if encoding == "exprnn" else 4 + 7 - 1
    assert torch.all(b.x[:, marker] == 9)
    rest = torch.cat([b.x[:, 4:marker], b.x[:, marker + 1 :]], 1)
    assert rest.abs().sum() == 0
    assert b.y[:, : 7 + 4].abs().sum() == 0 and torch.equal(b.y[:, 11:], sym)


def test_generators_are_deterministic_and_seeded():
    t = CopyTask(K=3, L=20)
    torch.testing.assert_close(t.make(4, gen(1)).x, t.make(4, gen(1)).x)
    assert not torch.equal(t.make(4, gen(1)).x, t.make(4, gen(2)).x)
    a = AddingTask(T=30)
    torch.testing.assert_close(a.make(4, gen(1)).x, a.make(4, gen(1)).x)
    # evaluation sets are fixed by the task's own seed, not by the training stream
    v1 = next(iter(CopyTask(K=3, L=20).eval_batches("val", 10)))
    v2 = next(iter(CopyTask(K=3, L=20).eval_batches("val", 10)))
    torch.testing.assert_close(v1.x, v2.x)
    test = next(iter(t.eval_batches("test", 10)))
    assert not torch.equal(v1.x, test.x)
    with pytest.raises(ValueError, match="split"):
        list(t.eval_batches("dev", 10))


@pytest.mark.parametrize("encoding", ["exprnn", "nnrnn"])
def test_copy_memoryless_predictor_scores_the_baseline(encoding):
    """Blank with certainty for the first L+K steps, uniform over the symbols afterwards:
    the loss is K ln(alphabet) / (L + 2K), computed by the task's own loss and metrics."""
    t = CopyTask(K=10, L=100, encoding=encoding, val_size=300)
    batch = t.eval_set("val")
    B, T = batch.y.shape
    logits = torch.full((B, T, t.output_size), -1e9)
    logits[:, : t.L + t.K, 0] = 0.0
    logits[:, t.L + t.K :, 1:] = 0.0
    loss = t.loss(logits, batch).item()
    assert loss == pytest.approx(10 * math.log(8) / 120, rel=1e-6)
    assert t.baseline()["loss"] == pytest.approx(0.1732867951)
    assert CopyTask(K=10, L=1000).baseline()["loss"] == pytest.approx(0.0204, abs=1e-4)
    assert CopyTask(K=10, L=200, encoding="nnrnn").baseline()["loss"] == pytest.approx(0.0945, abs=1e-4)
    sums = t.metric_sums(logits, batch)
    assert sums["recall_accuracy"][1] == B * 10


def test_copy_perfect_predictor_has_full_recall():
    t = CopyTask(K=5, L=10)
    b = t.make(8, gen(3))
    logits = torch.nn.functional.one_hot(b.y, t.output_size).float() * 50
    s = t.metric_sums(logits, b)
    assert s["recall_accuracy"][0] == s["recall_accuracy"][1] == 40
    assert s["loss"][0] / s["loss"][1] < 1e-6


def test_adding_targets_and_baseline():
    t = AddingTask(T=50)
    b = t.make(4000, gen(4))
    values, marks = b.x[..., 0], b.x[..., 1]
    assert torch.all(marks[:, :25].sum(1) == 1) and torch.all(marks[:, 25:].sum(1) == 1)
    torch.testing.assert_close(b.y[:, 0], (values * marks).sum(1))
    # predicting 1 (the mean of the sum) scores the variance of the sum of two U(0,1): 1/6
    mse = t.loss(torch.ones(4000, 1), b).item()
    assert abs(mse - 1 / 6) < 4 * math.sqrt(2 / 4000) * (1 / 6)  # within ~4 standard errors
    assert t.baseline()["loss"] == pytest.approx(1 / 6)


def test_bad_task_options():
    with pytest.raises(ValueError, match="encoding"):
        CopyTask(encoding="lstm")
    with pytest.raises(ValueError, match="K >= 1"):
        CopyTask(K=0)
    with pytest.raises(ValueError, match="T >= 2"):
        AddingTask(T=1)
    with pytest.raises(ValueError, match="val_size"):
        CopyTask(val_size=0)


def test_registry_keys_are_lowercase_names():
    assert all(k == k.lower() and TASKS[k].name == k for k in TASKS)
    assert isinstance(CopyTask(K=2, L=3).make(1, gen(0)), Batch)
