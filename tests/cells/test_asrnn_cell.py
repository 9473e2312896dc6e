"""asRNN cell: the paper's limits, the transformed-coordinate fast path against the step loop
(float64, outputs and every gradient), the precision fallback, initialisation, groups, counts."""

import math

import pytest
import torch

from rnnlab import ASRNN, CELLS, ASRNNCell, RNNCell
from rnnlab import parametrize as par
from rnnlab.cells.asrnn import FAST_PATH_MAX_KAPPA, saturating
from rnnlab.kernels import elementwise_rnn

torch.set_num_threads(1)
D = torch.float64


def make_cell(H=16, I=5, seed=0, d=None, uf_scale=0.0, **kw):
    """A float64 cell with a chosen diagonal ``d`` and ``U_f = expm(skew(uf_scale * N(0,1)))``."""
    torch.manual_seed(seed)
    cell = ASRNNCell(I, H, **kw).double()
    with torch.no_grad():
        cell.parametrizations.weight_uf.original.copy_(uf_scale * torch.randn(H, H, dtype=D))
        if d is not None:
            cell.parametrizations.diag_f.original.copy_(d - cell.eps)
        cell.bias.normal_(0, 0.1)
    return cell


def run(cell, x, h0, backend, lengths=None, seed=1):
    """Outputs, final state and the gradient of every parameter and of x, h0 for a fixed
    random linear functional of the outputs and the final state."""
    cell.backend = backend
    cell.zero_grad()
    x = x.clone().requires_grad_()
    h0 = h0.clone().requires_grad_()
    out, h_n = cell.sequence(x, h0, lengths)
    g = torch.Generator().manual_seed(seed)
    loss = (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum()
    loss = loss + (h_n * torch.randn(h_n.shape, generator=g, dtype=out.dtype)).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in cell.named_parameters()}
    grads["x"], grads["h0"] = x.grad, h0.grad
    return out.detach(), h_n.detach(), grads


def assert_same(a, b, rtol):
    out_a, h_a, g_a = a
    out_b, h_b, g_b = b
    torch.testing.assert_close(out_a, out_b, rtol=rtol, atol=rtol * out_b.abs().max().item())
    torch.testing.assert_close(h_a, h_b, rtol=rtol, atol=rtol * h_b.abs().max().item())
    assert g_a.keys() == g_b.keys()
    for name in g_b:
        scale = g_b[name].abs().max().item()
        assert scale > 0, f"gradient of {name} is identically zero: the test would be vacuous"
        torch.testing.assert_close(g_a[name], g_b[name], rtol=rtol, atol=rtol * scale, msg=name)


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


# --- the activation of Eq. (1) --------------------------------------------------------------


def test_saturating_limits():
    x = torch.linspace(-4, 4, 101, dtype=D)
    assert torch.equal(saturating(x, 0.0), x)  # a = 0 is the identity exactly
    errs = [(saturating(x, a) - x).abs().max().item() for a in (1e-1, 1e-2, 1e-3)]
    # tanh(a x)/a = x - a^2 x^3 / 3 + ...: the error shrinks like a^2
    assert errs[0] > 0 and errs[1] < errs[0] / 50 and errs[2] < errs[1] / 50
    assert errs[1] == pytest.approx(1e-4 * 4**3 / 3, rel=1e-2)
    torch.testing.assert_close(saturating(x, 1.0), torch.tanh(x))
    for a in (2.0, 10.0, 1000.0):
        y = saturating(x, a)
        assert (y.abs() <= 1 / a).all()  # bounded by 1/a
    nz = x[x.abs() > 0.05]
    torch.testing.assert_close(1000.0 * saturating(nz, 1000.0), torch.sign(nz))  # a f -> sign
    # a per-unit a, as D_f gives it; a = 0 entries are the identity
    a = torch.tensor([0.0, 0.5, 2.0], dtype=D)
    z = torch.tensor([[1.5, 1.5, 1.5]], dtype=D)
    expected = torch.tensor([[1.5, math.tanh(0.75) / 0.5, math.tanh(3.0) / 2]], dtype=D)
    torch.testing.assert_close(saturating(z, a), expected)


def test_unit_diagonal_form_is_the_saturating_activation():
    """With U_f = I the update is elementwise: h_t = f(z_t; d) with d = |s| + eps."""
    d = torch.tensor([1e-3, 0.3, 1.0, 2.5] * 2, dtype=D)
    cell = make_cell(H=8, I=3, d=d)
    x, h = torch.randn(5, 3, dtype=D), torch.randn(5, 8, dtype=D)
    z = x @ cell.weight_ih.T + h @ cell.weight_hh.T + cell.bias
    torch.testing.assert_close(cell(x, h)[0], saturating(z, d))


# --- the two limits of the paper ------------------------------------------------------------


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_identity_W_f_is_a_vanilla_tanh_rnn(backend):
    cell = make_cell(H=12, I=4, eps=1.0, backend=backend)  # s = 0, eps = 1: D_f = I; U_f = I
    with torch.no_grad():
        cell.parametrizations.diag_f.original.zero_()
    rnn = RNNCell(4, 12).double()
    with torch.no_grad():
        rnn.weight_ih.copy_(cell.weight_ih)
        rnn.weight_hh.copy_(cell.weight_hh)
        rnn.bias_ih.copy_(cell.bias)
        rnn.bias_hh.zero_()
    x, h0 = torch.randn(30, 3, 4, dtype=D), torch.randn(3, 12, dtype=D)
    out, h_n = cell.sequence(x, h0)
    ref_out, ref_h = rnn.sequence(x, h0)
    torch.testing.assert_close(out, ref_out, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(h_n, ref_h, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_vanishing_D_f_approaches_the_linear_rnn(backend):
    """D_f = eps I (any orthogonal U_f): h_t -> W_xh x_t + W_hh h_{t-1} + b as eps -> 0."""
    errs = []
    for eps in (1e-2, 1e-3, 1e-4):
        cell = make_cell(H=12, I=4, eps=eps, uf_scale=0.5, backend=backend)
        with torch.no_grad():
            cell.parametrizations.diag_f.original.zero_()
        x, h = torch.randn(20, 3, 4, dtype=D), torch.zeros(3, 12, dtype=D)
        out, _ = cell.sequence(x, h)
        lin = []
        for x_t in x:
            h = x_t @ cell.weight_ih.T + h @ cell.weight_hh.T + cell.bias
            lin.append(h)
        errs.append(rel_err(out.detach(), torch.stack(lin).detach()))
    assert errs[0] < 0.01
    # the first correction is cubic in eps * h: error O(eps^2)
    assert errs[1] < errs[0] / 30 and errs[2] < errs[1] / 30, errs


# --- fast path against the step loop ---------------------------------------------------------


def test_tanh_recurrence_gradcheck():
    """The kernel of the fast path: the tanh recurrence with its input projection fused in
    (tests/kernels/test_speed_kernels.py checks it over every activation and lengths)."""
    torch.manual_seed(0)
    x = torch.randn(6, 3, 4, dtype=D, requires_grad=True)
    w_ih = torch.randn(5, 4, dtype=D, requires_grad=True)
    b = torch.randn(5, dtype=D, requires_grad=True)
    g0 = torch.randn(3, 5, dtype=D, requires_grad=True)
    W = torch.randn(5, 5, dtype=D, requires_grad=True)

    def run(x, w_ih, b, g0, W):
        return elementwise_rnn(x, W, g0, "tanh", input_weight=w_ih, input_bias=b)[0]

    assert torch.autograd.gradcheck(run, (x, w_ih, b, g0, W))
    x.requires_grad_(False)  # the path that skips dx (one-hot inputs)
    assert torch.autograd.gradcheck(run, (x, w_ih, b, g0, W))


@pytest.mark.parametrize("a,b,uf_scale", [(0.0, 0.0, 0.0), (0.5, 1.5, 0.3), (0.02, 0.02, 1.0)])
def test_fast_path_equals_step_loop_float64(a, b, uf_scale):
    cell = make_cell(H=16, I=5, a=a, b=b, uf_scale=uf_scale)
    with torch.no_grad():
        cell.parametrizations.diag_f.original.uniform_(a, b + 0.1)
    assert cell.uses_fast_path(D)
    x, h0 = torch.randn(40, 4, 5, dtype=D), 0.5 * torch.randn(4, 16, dtype=D)
    assert_same(run(cell, x, h0, "auto"), run(cell, x, h0, "reference"), rtol=1e-10)


def test_fast_path_with_lengths_equals_step_loop():
    cell = make_cell(H=10, I=3, uf_scale=0.5)
    with torch.no_grad():
        cell.parametrizations.diag_f.original.uniform_(0.2, 2.0)
    x, h0 = torch.randn(12, 4, 3, dtype=D), torch.randn(4, 10, dtype=D)
    lengths = torch.tensor([12, 3, 7, 1])
    assert_same(run(cell, x, h0, "auto", lengths), run(cell, x, h0, "reference", lengths), rtol=1e-10)


def spread(H, lo=1e-5, hi=3.0, seed=0):
    d = torch.exp(torch.linspace(math.log(lo), math.log(hi), H, dtype=D))
    return d[torch.randperm(H, generator=torch.Generator().manual_seed(seed))]


def test_ill_conditioned_D_f_near_identity_U_f_takes_the_fast_path_and_matches():
    """D_f spanning 1e-5..3 (cond 3e5): with U_f near the identity the change of basis does
    not magnify rounding (kappa small), so the fast path runs and matches the step loop."""
    cell = make_cell(H=16, I=5, d=spread(16), uf_scale=1e-5)
    assert cell.condition_number() == pytest.approx(3e5, rel=1e-3)
    assert cell.amplification() < FAST_PATH_MAX_KAPPA[D]
    assert cell.uses_fast_path(D)
    x, h0 = torch.randn(40, 4, 5, dtype=D), torch.randn(4, 16, dtype=D)
    assert_same(run(cell, x, h0, "auto"), run(cell, x, h0, "reference"), rtol=1e-8)


def test_ill_conditioned_D_f_dense_U_f_falls_back_to_the_step_loop():
    """Dense U_f and D_f spanning 1e-5..3: kappa ~ cond(D_f) > threshold, so ``auto`` runs the
    step loop (identical results); forcing the fast path shows the precision it would lose."""
    cell = make_cell(H=16, I=5, d=spread(16), uf_scale=1.0)
    assert cell.amplification() > FAST_PATH_MAX_KAPPA[D]
    assert not cell.uses_fast_path(D)
    x, h0 = torch.randn(20, 4, 5, dtype=D), torch.randn(4, 16, dtype=D)
    ref = run(cell, x, h0, "reference")
    assert_same(run(cell, x, h0, "auto"), ref, rtol=0.0)
    fast = run(cell, x, h0, "fast")
    worst = max(rel_err(fast[2][n], ref[2][n]) for n in ref[2])
    # measured ~1e-5..1e-4 against ~1e-15 for well-conditioned weights
    assert worst > 1e-9, worst


def test_fallback_threshold_is_per_dtype():
    cell = make_cell(H=16, I=5, d=spread(16, 1e-3, 3.0), uf_scale=1.0)
    kappa = cell.amplification()
    assert FAST_PATH_MAX_KAPPA[torch.float32] < kappa < FAST_PATH_MAX_KAPPA[D], kappa
    assert cell.uses_fast_path(D) and not cell.float().uses_fast_path(torch.float32)


def test_amplification_is_one_for_scalar_D_f_and_the_fast_path_matches():
    """D_f = c I: W_f W_hh W_f^{-1} = U_f W_hh U_f^T is an orthogonal similarity, no loss."""
    cell = make_cell(H=16, I=5, d=torch.full((16,), 0.7, dtype=D), uf_scale=1.0)
    assert cell.amplification() == pytest.approx(1.0)
    x, h0 = torch.randn(30, 4, 5, dtype=D), torch.randn(4, 16, dtype=D)
    assert_same(run(cell, x, h0, "auto"), run(cell, x, h0, "reference"), rtol=1e-10)


def test_amplification_is_one_for_signed_permutation_U_f():
    cell = make_cell(H=8, I=2, d=spread(8))
    assert cell.amplification() == pytest.approx(1.0)
    perm = torch.eye(8, dtype=D)[torch.randperm(8)] * torch.tensor([1, -1] * 4, dtype=D)
    with torch.no_grad():  # put the signed permutation in the base: U_f = base @ expm(0)
        cell.parametrizations.weight_uf[0].base.copy_(perm)
    torch.testing.assert_close(cell.weight_uf, perm)
    assert cell.amplification() == pytest.approx(1.0)


# --- construction, groups, counts, layer ----------------------------------------------------


def test_initialisation_follows_the_paper():
    torch.manual_seed(3)
    cell = ASRNNCell(10, 138, init="henaff", a=0.8, b=3.0, eps=1e-5)
    eye = torch.eye(138)
    torch.testing.assert_close(cell.weight_uf, eye)  # U_f = I
    assert par.orthogonality_error(cell.weight_hh) < 1e-5
    assert not torch.allclose(cell.weight_hh, eye)  # Henaff is not the identity
    W = cell.weight_ih  # (138, 10): orthonormal columns
    torch.testing.assert_close(W.T @ W, torch.eye(10), atol=1e-5, rtol=0)
    assert torch.equal(cell.bias, torch.zeros(138))
    s = cell.parametrizations.diag_f.original
    assert s.min() >= 0.8 and s.max() <= 3.0 and s.std() > 0.3  # s ~ U(a, b)
    torch.testing.assert_close(cell.diag_f, s.abs() + 1e-5)


def test_free_parameter_count_matches_the_paper():
    """n = 138 on copy (10 inputs, 9-way readout over all steps) has 21,813 free parameters:
    two orthogonal matrices at n(n-1)/2, W_xh, b, s, and the readout."""
    cell = CELLS["asrnn"](10, 138)
    readout = torch.nn.Linear(138, 9)
    assert cell.free_parameter_count() + sum(p.numel() for p in readout.parameters()) == 21813


@pytest.mark.parametrize("uf_group", ["orthogonal", "default"])
def test_parameter_groups(uf_group):
    cell = ASRNNCell(3, 6, uf_group=uf_group)
    groups = {tag: {id(p) for p in ps} for tag, ps in cell.param_groups().items()}
    P = cell.parametrizations
    assert id(P.weight_hh.original) in groups["orthogonal"]
    assert id(P.weight_uf.original) in groups[uf_group]
    assert id(P.diag_f.original) in groups[uf_group]
    assert {id(cell.weight_ih), id(cell.bias)} <= groups["default"]
    assert sum(len(v) for v in groups.values()) == len(list(cell.parameters()))


def test_bad_options_fail_loudly():
    with pytest.raises(ValueError, match="a <= b"):
        ASRNNCell(3, 4, a=1.0, b=0.5)
    with pytest.raises(ValueError, match="backend"):
        ASRNNCell(3, 4, backend="cuda")
    with pytest.raises(ValueError, match="orthogonal map"):
        ASRNNCell(3, 4, uf_map="qr")


def test_constraints_survive_optimizer_steps_with_dynamic_trivialization():
    torch.manual_seed(0)
    cell = ASRNNCell(4, 8, K=2, a=0.1, b=0.5)
    opt = torch.optim.RMSprop(cell.parameters(), lr=1e-2)
    x = torch.randn(10, 3, 4)
    for _ in range(5):
        opt.zero_grad()
        before = None
        cell.sequence(x)[0].pow(2).mean().backward()
        opt.step()
        with torch.no_grad():
            before = (cell.weight_hh.clone(), cell.weight_uf.clone())
        par.after_optimizer_step(cell)
        torch.testing.assert_close(cell.weight_hh, before[0], atol=1e-5, rtol=0)  # rebase keeps W
        torch.testing.assert_close(cell.weight_uf, before[1], atol=1e-5, rtol=0)
        assert par.orthogonality_error(cell.weight_hh) < 1e-5
        assert par.orthogonality_error(cell.weight_uf) < 1e-5
        assert (cell.diag_f > 0).all()
    assert int(cell.orthogonal.rebases) == 2 and int(cell.orthogonal_f.rebases) == 2


def test_layer_has_the_nn_rnn_interface():
    torch.manual_seed(0)
    layer = ASRNN(5, 7, num_layers=2, batch_first=True).double()
    x = torch.randn(3, 11, 5, dtype=D)
    out, h_n = layer(x)
    assert out.shape == (3, 11, 7) and h_n.shape == (2, 3, 7)
    torch.testing.assert_close(out[:, -1], h_n[-1])
    for c in layer.cells:
        c.backend = "reference"
    out_ref, _ = layer(x)
    torch.testing.assert_close(out, out_ref, rtol=1e-10, atol=1e-12)


def test_s_initialised_at_zero_gets_no_gradient():
    """The copy setting a = b = 0 starts s at exactly 0, where d|s|/ds = 0 in PyTorch, so s
    (and D_f = eps I) never moves; with a > 0 it trains. Recorded in docs/asrnn.md."""
    x = torch.randn(6, 2, 3)
    for a, moves in ((0.0, False), (1e-3, True)):
        torch.manual_seed(0)
        cell = ASRNNCell(3, 5, a=a, b=a)
        cell.sequence(x)[0].pow(2).sum().backward()
        g = cell.parametrizations.diag_f.original.grad
        assert bool(g.abs().max() > 0) is moves


def test_cayley_maps_fast_path_equals_step_loop():
    cell = make_cell(H=12, I=4, map="cayley", init="cayley", uf_map="cayley", uf_scale=0.3, a=0.3, b=1.0)
    assert par.orthogonality_error(cell.weight_uf) < 1e-12 and par.orthogonality_error(cell.weight_hh) < 1e-6
    x, h0 = torch.randn(25, 3, 4, dtype=D), torch.randn(3, 12, dtype=D)
    assert_same(run(cell, x, h0, "auto"), run(cell, x, h0, "reference"), rtol=1e-10)
