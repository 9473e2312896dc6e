"""The log-space parallel scan (rnnlab.kernels.logscan) against its step loop, in float64."""

from __future__ import annotations

import pytest
import torch

from rnnlab.kernels.logscan import g, log_g, log_linear_loop, log_linear_scan

D = torch.float64


def _inputs(T=37, B=3, H=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    log_a = -torch.nn.functional.softplus(torch.randn(T, B, H, generator=gen, dtype=D))  # a in (0, 1)
    log_b = torch.randn(T, B, H, generator=gen, dtype=D)
    h0 = torch.randn(B, H, generator=gen, dtype=D)  # any sign: h0 enters linearly
    return log_a, log_b, h0


def test_g_is_positive_continuous_and_log_g_is_its_log():
    x = torch.linspace(-30, 30, 2001, dtype=D)
    assert bool((g(x) > 0).all())
    assert float(g(torch.tensor(0.0, dtype=D))) == 0.5  # both pieces meet at 1/2
    assert float((g(torch.tensor(-1e-12, dtype=D)) - 0.5).abs()) < 1e-12
    torch.testing.assert_close(log_g(x), torch.log(g(x)), rtol=1e-12, atol=1e-12)
    # the paper's pieces: x + 1/2 above 0, the sigmoid below
    torch.testing.assert_close(g(x[x >= 0]), x[x >= 0] + 0.5)
    torch.testing.assert_close(g(x[x < 0]), torch.sigmoid(x[x < 0]))


@pytest.mark.parametrize("lengths", [None, [37, 1, 20]])
def test_scan_equals_the_loop_outputs_final_state_and_gradients(lengths):
    log_a, log_b, h0 = (t.requires_grad_() for t in _inputs())
    lengths = None if lengths is None else torch.tensor(lengths)
    r = torch.randn(log_a.shape, generator=torch.Generator().manual_seed(5), dtype=D)
    results = []
    for fn in (log_linear_scan, log_linear_loop):
        out, h = fn(log_a, log_b, h0, lengths)
        grads = torch.autograd.grad((out * r).sum() + h.sin().sum(), (log_a, log_b, h0))
        results.append((out, h, *grads))
    for got, want in zip(*results):
        assert float((got - want).detach().abs().max()) <= 1e-10
    if lengths is not None:
        out, h = results[0][:2]
        assert float(out[1:, 1].detach().abs().max()) == 0  # zeros past a length
        torch.testing.assert_close(h[1], out[0, 1], rtol=0, atol=0)  # the state at the length


def test_loop_is_the_recurrence_written_out():
    """The reference twin against ``h_t = a_t h_{t-1} + b_t`` by hand for three steps."""
    log_a, log_b, h0 = _inputs(T=3)
    a, b = log_a.exp(), log_b.exp()
    h1 = a[0] * h0 + b[0]
    h2 = a[1] * h1 + b[1]
    h3 = a[2] * h2 + b[2]
    out, h = log_linear_scan(log_a, log_b, h0)
    torch.testing.assert_close(out, torch.stack([h1, h2, h3]), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(h, h3, rtol=1e-13, atol=1e-13)


def test_gradcheck_with_lengths():
    log_a, log_b, h0 = (t.requires_grad_() for t in _inputs(T=6, B=3, H=2))
    lengths = torch.tensor([6, 2, 4])
    assert torch.autograd.gradcheck(lambda a, b, h: log_linear_scan(a, b, h, lengths), (log_a, log_b, h0))


def test_second_order_is_refused_and_names_the_step_loop():
    """torch's logcumsumexp has NaN second derivatives where the incoming gradient is zero;
    the scan refuses create_graph=True instead of returning them."""
    log_a, log_b, h0 = (t.requires_grad_() for t in _inputs(T=4, B=2, H=2))
    out, _ = log_linear_scan(log_a, log_b, h0, torch.tensor([4, 2]))
    with pytest.raises(RuntimeError, match=r"second-order gradients .*create_graph=True.*backend='reference'"):
        torch.autograd.grad(out.sum(), log_b, create_graph=True)
    # first order still works on a fresh graph
    out, _ = log_linear_scan(log_a, log_b, h0)
    (gb,) = torch.autograd.grad(out.sum(), log_b)
    assert bool(torch.isfinite(gb).all())


def test_bad_shapes_are_named():
    log_a, log_b, h0 = _inputs(T=4)
    with pytest.raises(ValueError, match=r"log_a and log_b of one shape \(T, B, H\) and h0 \(B, H\)"):
        log_linear_scan(log_a, log_b[:, :2], h0)


def test_long_float32_scan_stays_close_to_float64():
    """T = 1,024 steps with |log a| ~ 0.7: the float32 scan's rounding stays small (module docstring)."""
    log_a, log_b, h0 = _inputs(T=1024, B=2, H=8, seed=3)
    want, _ = log_linear_loop(log_a, log_b, h0)
    got, _ = log_linear_scan(log_a.float(), log_b.float(), h0.float())
    rel = float(((got.double() - want).abs() / want.abs().clamp(min=1e-3)).max())
    assert rel < 1e-3, rel
