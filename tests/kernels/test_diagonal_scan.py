"""The diagonal-recurrence scan of rnnlab.kernels.scan (LRU, S4D, Mamba's S6) against its
reference twin, the autograd step loop, in float64: outputs, final states and every gradient,
real and complex, time-invariant and per-step transitions, every chunking; gradcheck and
gradgradcheck of the hand-written adjoint."""

from __future__ import annotations

import pytest
import torch

from rnnlab.kernels.dispatch import DIAGONAL_SCAN_MAX_STEP, choose
from rnnlab.kernels.scan import diagonal_recurrence, diagonal_recurrence_fused, diagonal_recurrence_loop

B, S = 3, (2, 3)


def _inputs(T, dtype, varying, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        if dtype.is_complex:
            return torch.complex(
                torch.randn(*shape, generator=g, dtype=torch.float64),
                torch.randn(*shape, generator=g, dtype=torch.float64),
            )
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    shape = (T, B, *S) if varying else S
    # |a| < 1 as in the models (decays), but some close to 1 (long memory)
    mod = 0.3 + 0.69 * torch.rand(shape, generator=g, dtype=torch.float64)
    if dtype.is_complex:
        a = torch.polar(mod, 6.0 * torch.rand(shape, generator=g, dtype=torch.float64))
    else:
        a = mod * torch.where(torch.rand(shape, generator=g, dtype=torch.float64) < 0.3, -1.0, 1.0)
    return a.requires_grad_(), rnd(T, B, *S).requires_grad_(), rnd(B, *S).requires_grad_()


def _run(fn, a, b, h0, w):
    h = fn(a, b, h0)
    loss = (h * w).real.sum() + (h[-1] * w[0]).real.sum()
    return h.detach(), torch.autograd.grad(loss, (a, b, h0))


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=["real", "complex"])
@pytest.mark.parametrize("varying", [False, True], ids=["invariant", "per-step"])
@pytest.mark.parametrize(
    "T,chunk", [(1, None), (7, None), (7, 1), (7, 2), (7, 3), (7, 7), (16, None), (16, 5), (16, 100)]
)
def test_scan_equals_the_step_loop_in_float64(dtype, varying, T, chunk):
    a, b, h0 = _inputs(T, dtype, varying)
    w = _inputs(T, dtype, True, seed=1)[1].detach()
    h_ref, g_ref = _run(diagonal_recurrence_loop, a, b, h0, w)
    h, g = _run(lambda a, b, h0: diagonal_recurrence(a, b, h0, chunk), a, b, h0, w)
    assert float((h - h_ref).abs().max()) <= 1e-10
    for name, x, y in zip(("a", "b", "h0"), g, g_ref):
        assert x.shape == y.shape, name
        assert float((x - y).abs().max()) <= 1e-10, name


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=["real", "complex"])
@pytest.mark.parametrize("varying", [False, True], ids=["invariant", "per-step"])
def test_gradcheck_and_gradgradcheck(dtype, varying):
    a, b, h0 = _inputs(5, dtype, varying)
    for chunk in (2, 5):
        f = lambda a, b, h0, chunk=chunk: diagonal_recurrence(a, b, h0, chunk)  # noqa: E731
        assert torch.autograd.gradcheck(f, (a, b, h0))
        assert torch.autograd.gradgradcheck(f, (a, b, h0))


def test_a_broadcast_transition_gets_its_summed_gradient():
    """One lambda per state unit (N,), broadcast over the batch and the channels: its gradient
    is the loop's, of the same shape."""
    g = torch.Generator().manual_seed(4)
    a = (0.9 * torch.rand(3, generator=g, dtype=torch.float64)).requires_grad_()
    b = torch.randn(6, 2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 2, 4, 3, generator=g, dtype=torch.float64)
    _, g_ref = _run(diagonal_recurrence_loop, a, b, h0, w)
    _, got = _run(lambda a, b, h0: diagonal_recurrence(a, b, h0, 2), a, b, h0, w)
    for x, y in zip(got, g_ref):
        assert x.shape == y.shape and float((x - y).abs().max()) <= 1e-12


def test_lengths_freeze_each_state_at_its_own_last_step():
    a, b, h0 = _inputs(9, torch.complex128, False)
    lengths = torch.tensor([9, 1, 4])
    h = diagonal_recurrence(a, b, h0, 3, lengths)
    for i, L in enumerate(lengths.tolist()):
        alone = diagonal_recurrence_loop(a, b[:L, i : i + 1], h0[i : i + 1])
        assert torch.allclose(h[:L, i], alone[:, 0], atol=1e-12, rtol=0)
        assert torch.equal(h[L - 1 :, i], h[L - 1, i].expand_as(h[L - 1 :, i]))  # frozen after


def test_bad_shapes_are_one_line_errors():
    a, b, h0 = _inputs(4, torch.float64, True)
    with pytest.raises(ValueError, match=r"h0 \(B, ...\)"):
        diagonal_recurrence(a, b, h0[:1])
    with pytest.raises(ValueError, match="time-varying a must have b's shape"):
        diagonal_recurrence(a[:2], b, h0)


def test_the_backends_rule():
    """The diagonal cells' backends through the dispatch rule (width: a sequence's state elements)."""
    rule = lambda backend, width, chunk=0, **kw: choose("diagonal", backend, width=width, batch=1, chunk=chunk, **kw)  # noqa: E731
    assert rule("step", 8) == "loop" and rule("scan", 10**6) == "scan" and rule("reference", 8) == "step"
    assert rule("auto", DIAGONAL_SCAN_MAX_STEP) == "scan"  # small steps: the scan
    assert rule("auto", DIAGONAL_SCAN_MAX_STEP + 1) == "loop"  # large: the fused step loop
    assert rule("auto", 10**6, 8) == "scan"  # a given chunk: the scan
    assert rule("auto", 8, convolution=True) == "conv" == rule("conv", 10**6, convolution=True)
    assert rule("conv", 8, convolution=True, lengths=True) == "scan"  # lengths: no convolution


def test_the_fused_loop_is_one_chunk():
    torch.manual_seed(0)
    a, b, h0 = (
        torch.rand(3, 2, dtype=torch.float64),
        torch.randn(7, 3, 2, dtype=torch.float64),
        torch.randn(3, 2, dtype=torch.float64),
    )
    torch.testing.assert_close(
        diagonal_recurrence_fused(a, b, h0), diagonal_recurrence_loop(a, b, h0), rtol=0, atol=1e-12
    )
