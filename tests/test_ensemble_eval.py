"""An ensemble's evaluation: the folded input products (rnnlab.kernels.ensemble._folded_rows_product)
against each member's own ``F.linear``, and the members' metrics against their single runs'
evaluation (rnnlab.evaluation.evaluate), computed apart."""

import pytest
import torch
from torch.nn import functional as F

from rnnlab import config
from rnnlab.evaluation import evaluate
from rnnlab.kernels import ensemble as KE
from rnnlab.model import build_model
from rnnlab.stacked_model import StackedModel
from rnnlab.tasks import build_task


def _members_linear(rows, weight, bias):
    return torch.stack([F.linear(rows[e], weight[e], None if bias is None else bias[e]) for e in range(len(weight))])


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-13), (torch.float32, 1e-5)])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("I, G", [(1, 4), (2, 8), (3, 9), (8, 10)])
def test_folded_product_is_each_members_linear(dtype, rtol, shared, with_bias, I, G):
    g = torch.Generator().manual_seed(I * 100 + G)
    E, N = 5, 4 * 37
    rows = (
        torch.randn(N, I, generator=g, dtype=dtype).expand(E, N, I)
        if shared
        else torch.randn(E, N, I, generator=g, dtype=dtype)
    )
    weight = torch.randn(E, G, I, generator=g, dtype=dtype)
    bias = torch.randn(E, G, generator=g, dtype=dtype) if with_bias else None
    with torch.no_grad():
        got = KE._folded_rows_product(rows, weight, bias)
    assert got is not None and got.shape == (E, N, G)
    torch.testing.assert_close(got, _members_linear(rows, weight, bias), rtol=rtol, atol=rtol)


def test_folded_product_declines_what_it_does_not_serve():
    E, N, I, G = 3, 40, 2, 8
    rows, weight, bias = torch.randn(E, N, I), torch.randn(E, G, I), torch.randn(E, G)
    assert KE._folded_rows_product(rows, weight, bias) is None  # autograd on: training keeps its product
    with torch.no_grad():
        assert KE._folded_rows_product(rows[:, :-1], weight, bias) is None  # rows not a multiple of 4
        assert KE._folded_rows_product(torch.randn(E, N, 9), torch.randn(E, 10, 9), None) is None  # too many inputs
        assert KE._folded_rows_product(torch.randn(E, N, 2), torch.randn(E, 11, 2), None) is None  # too many outputs
        assert KE._folded_rows_product(rows.transpose(1, 2).contiguous().transpose(1, 2), weight, bias) is None
        bad = rows.clone()
        bad[1, 5, 0] = float("inf")  # folded with its neighbours, 0 x inf would be NaN there
        assert KE._folded_rows_product(bad, weight, bias) is None
        assert KE._folded_rows_product(rows, weight, bias) is not None


@pytest.mark.parametrize("preset", ["dmu/adding-lstm", "dmu/adding-rhn", "dmu/adding-gru"])
def test_members_evaluate_as_their_single_runs(preset, monkeypatch):
    """Three members (different seeds) evaluated at once by the stacked model, with the folded
    products on the path (counted), equal each member's single-run evaluation."""
    cfg = config.load(preset, ["task.L=20", "task.val_size=40"])
    task = build_task(cfg.task)
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(build_model(cfg.model, task))
    calls = []
    real = KE._folded_rows_product

    def spy(*args):
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(KE, "_folded_rows_product", spy)
    got = StackedModel(models[0]).evaluate(models, task, "val", 16, 0, "fp32", torch.device("cpu"))
    assert any(calls), "the evaluation did not reach the folded product"
    for model, metrics in zip(models, got):
        single = evaluate(model, task, "val", 16)
        assert metrics.keys() == single.keys()
        for k in single:
            assert metrics[k] == pytest.approx(single[k], rel=1e-5, abs=1e-7), k
