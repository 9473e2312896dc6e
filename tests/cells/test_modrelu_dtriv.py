"""Two behaviours no other test pinned down (issue "tests that bite"):

* the fused modReLU (:func:`rnnlab.kernels.elementwise_rnn`) at an exact zero pre-activation:
  ``modReLU(z) = sign(z) relu(|z| + b)`` with sign(0) = 0, so the value is 0 whatever b, and its
  gradients (to z, b, W, h0) are those of that definition under autograd, and finite;
* dynamic trivialization's projection of a drifted base back onto O(n) at every M-th re-base.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

import rnnlab
from rnnlab import parametrize as par
from rnnlab.kernels import elementwise_rnn


def modrelu_definition(z, b):
    return torch.sign(z) * torch.relu(z.abs() + b)


def reference_loop(u, W, h0, b):
    h, outs = h0, []
    for u_t in u.unbind(0):
        h = modrelu_definition(u_t + h @ W.T, b)
        outs.append(h)
    return torch.stack(outs)


def test_fused_modrelu_at_exact_zero_matches_the_definition():
    g = torch.Generator().manual_seed(0)
    T, B, H = 4, 3, 6
    u = torch.randn(T, B, H, generator=g, dtype=torch.float64)
    u[:2] = 0.0  # with h0 = 0: z_0 = z_1 = 0 exactly (h_0 = modReLU(0) = 0)
    u[2:, :, :2] = 0.0
    b = torch.tensor([0.3, -0.2, 0.0, 0.5, -0.4, 0.1], dtype=torch.float64)  # b > 0, < 0 and = 0
    W = 0.5 * torch.randn(H, H, generator=g, dtype=torch.float64)
    h0 = torch.zeros(B, H, dtype=torch.float64)
    leaves = [t.clone().requires_grad_(True) for t in (u, W, h0, b)]
    out, _ = elementwise_rnn(leaves[0], leaves[1], leaves[2], "modrelu", leaves[3])
    assert torch.equal(out[:2], torch.zeros_like(out[:2]))  # sign(0) = 0, even where b > 0
    ref_leaves = [t.clone().requires_grad_(True) for t in (u, W, h0, b)]
    ref = reference_loop(ref_leaves[0], ref_leaves[1], ref_leaves[2], ref_leaves[3])
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-14)
    weights = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((out * weights).sum(), leaves)
    ref_grads = torch.autograd.grad((ref * weights).sum(), ref_leaves)
    for name, a, r in zip(("u", "W", "h0", "b"), grads, ref_grads):
        assert torch.isfinite(a).all(), name
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-14, msg=lambda m, n=name: f"grad {n}: {m}")
    # at the zeros the gradient to z is exactly 0 (the definition's, not a one-sided limit)
    assert torch.equal(grads[0][:2], torch.zeros_like(grads[0][:2]))


@pytest.mark.parametrize("key", ["exprnn", "scornn", "nnrnn", "rnn"])
def test_modrelu_cells_at_zero_input_match_their_step_loop(key):
    torch.manual_seed(0)
    kw = {"nonlinearity": "modrelu"} if key == "rnn" else {}
    cell = rnnlab.CELLS[key](3, 6, **kw).double()
    if key == "rnn":
        with torch.no_grad():
            cell.bias_ih.zero_(), cell.bias_hh.zero_()
    bias = cell.modrelu_bias if key == "rnn" else cell.bias
    with torch.no_grad():
        bias.copy_(torch.tensor([0.3, -0.2, 0.0, 0.5, -0.4, 0.1]))
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    x[:2] = 0.0  # zero pre-activation for two steps from the zero state
    results = []
    for backend in ("auto", "reference"):
        cell.backend = backend
        out, h_n = cell.sequence(x)
        grads = torch.autograd.grad(out.sum() + h_n.sum(), list(cell.parameters()), allow_unused=True)
        results.append((out, grads))
    (o1, g1), (o2, g2) = results
    assert torch.equal(o1[:2], torch.zeros_like(o1[:2]))
    torch.testing.assert_close(o1, o2)
    for a, b in zip(g1, g2):
        if a is None or b is None:
            assert a is None and b is None
            continue
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b)


def test_dynamic_trivialization_projects_a_drifted_base_every_M_rebases():
    """Drift the base off O(n) before every optimizer step (as rounding does, only larger);
    with K = 2, M = 3 the base must be re-based (same W) at every 2nd step and projected onto
    its polar factor, the nearest orthogonal matrix, at every 3rd re-base, and only then."""
    torch.manual_seed(0)
    K, M, n = 2, 3, 6
    cell = rnnlab.ExpRNNCell(3, n, K=K, M=M).double()
    p = cell.orthogonal
    opt = torch.optim.SGD([cell.parametrizations.weight_hh.original], lr=0.05)
    g = torch.Generator().manual_seed(1)
    projected_at = []
    for step in range(1, 4 * K * M + 1):
        with torch.no_grad():
            p.base.add_(0.05 * torch.randn(n, n, generator=g, dtype=torch.float64))
        assert par.orthogonality_error(p.base) > 1e-3
        # an optimizer step on the free parameter (a random gradient: this test is about the
        # parametrization, not about the cell's kernels)
        A = cell.parametrizations.weight_hh.original
        A.grad = torch.randn(n, n, generator=g, dtype=torch.float64)
        opt.step()
        W_before = cell.weight_hh.detach().clone()
        par.after_optimizer_step(cell)
        assert int(p.steps) == step
        if step % K:
            continue  # no re-base
        rebases = step // K
        assert int(p.rebases) == rebases
        A = cell.parametrizations.weight_hh.original
        assert torch.equal(A, torch.zeros_like(A))
        if rebases % M == 0:
            projected_at.append(rebases)
            polar, _ = scipy.linalg.polar(W_before.numpy())
            np.testing.assert_allclose(p.base.numpy(), polar, atol=1e-12)
            assert par.orthogonality_error(p.base) < 1e-12
            assert par.orthogonality_error(cell.weight_hh) < 1e-12
        else:
            torch.testing.assert_close(cell.weight_hh, W_before, rtol=0, atol=1e-12)  # same W
            assert par.orthogonality_error(p.base) > 1e-3  # the drift is kept until the M-th
    assert projected_at == [M, 2 * M, 3 * M, 4 * M]
