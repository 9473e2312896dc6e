"""rnnlab.kernels.tall_linear: the blocked product and the reoriented weight gradient give exactly
what torch.nn.functional.linear gives (values and gradients, float64), whatever the shapes."""

import pytest
import torch

import rnnlab.kernels.linear as linear_mod
from rnnlab.kernels.linear import blocked_mm, column_sum, gram_t, tall_linear

torch.set_num_threads(1)
D = torch.float64


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 7 rows from 20 rows on, so that small tensors exercise every branch."""
    monkeypatch.setattr(linear_mod, "BLOCK_ROWS", 7)
    monkeypatch.setattr(linear_mod, "MIN_ROWS", 20)
    monkeypatch.setattr(linear_mod, "MIN_BLOCKED_COLS", 4)


def both(x, w, b):
    """Outputs and gradients of ``tall_linear`` and of F.linear for a fixed random functional."""
    res = []
    for fn in (tall_linear, torch.nn.functional.linear):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        bs = None if b is None else b.clone().requires_grad_()
        y = fn(xs, ws, bs)
        r = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=y.dtype)
        (y * r).sum().backward()
        res.append([y.detach(), xs.grad, ws.grad] + ([] if b is None else [bs.grad]))
    return res


@pytest.mark.parametrize("I,O", [(3, 9), (9, 3), (5, 5), (1, 6)])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_functional_linear(small_blocks, I, O, bias):
    x = torch.randn(6, 11, I, dtype=D)  # 66 rows: several blocks and a ragged last one
    w, b = torch.randn(O, I, dtype=D), (torch.randn(O, dtype=D) if bias else None)
    ours, ref = both(x, w, b)
    for a, c in zip(ours, ref):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


def test_batch_first_view_of_time_major_memory(small_blocks):
    x = torch.randn(11, 6, 5, dtype=D).transpose(0, 1)  # (B, T, I) view, not contiguous
    w, b = torch.randn(8, 5, dtype=D), torch.randn(8, dtype=D)
    ours, ref = both(x, w, b)
    assert ours[0].shape == (6, 11, 8)
    for a, c in zip(ours, ref):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


def test_gradcheck(small_blocks):
    x = torch.randn(30, 4, dtype=D, requires_grad=True)
    w = torch.randn(6, 4, dtype=D, requires_grad=True)
    b = torch.randn(6, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(tall_linear, (x, w, b))


def test_helpers_at_real_sizes():
    """At the sizes where the fast paths switch on (float32, default thresholds)."""
    g = torch.Generator().manual_seed(0)
    a, bm = torch.randn(10_000, 10, generator=g), torch.randn(10, 64, generator=g)
    torch.testing.assert_close(blocked_mm(a, bm), a @ bm)
    d, x = torch.randn(10_240, 64, generator=g), torch.randn(10_240, 10, generator=g)
    exact = d.double().t() @ x.double()  # float32 sums of 10,240 terms: compare errors
    for ours, plain in ((gram_t(d, x), d.t() @ x), (gram_t(x, d).t(), (x.t() @ d).t())):
        assert (ours.double() - exact).abs().max() <= 2 * (plain.double() - exact).abs().max() + 1e-6
        torch.testing.assert_close(ours.double(), exact, rtol=0, atol=1e-5 * exact.abs().max().item())
    torch.testing.assert_close(column_sum(d).double(), d.double().sum(0), rtol=0, atol=1e-4)
    assert tall_linear(torch.randn(3, 2), torch.randn(4, 2)).shape == (3, 4)  # small: F.linear


def test_gradgradcheck(small_blocks):
    """The blocked path's backward asked for a graph of itself (create_graph=True) gives exact
    second derivatives (x * w terms), with and without a bias."""
    x = torch.randn(21, 3, dtype=D, requires_grad=True)
    w = torch.randn(4, 3, dtype=D, requires_grad=True)
    b = torch.randn(4, dtype=D, requires_grad=True)
    assert tall_linear(x, w, b).grad_fn.next_functions[0][0].name() == "_LinearBackward"  # the custom path
    assert torch.autograd.gradgradcheck(tall_linear, (x, w, b))
    assert torch.autograd.gradgradcheck(lambda x, w: tall_linear(x, w), (x, w))
