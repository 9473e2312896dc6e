"""The diagonal state-space cells against their papers' equations computed another way: the LRU
step in complex numbers and its ring initialisation; S4D's recurrence against its FFT
convolution kernel, its zero-order hold against an RK4 integration of the ODE, its two
initialisations' closed forms; Mamba's block against a naive per-step implementation written
here (PyTorch's own causal conv1d, per-state-unit loops)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.nn import functional as F

from conftest import rk4
from rnnlab.cells import LRU, S4D, LRUCell, Mamba, MambaCell, S4DCell
from rnnlab.cells.ssm import s4d_imag, zoh

D = torch.float64


def _x(T, B, I, seed=1):
    return torch.randn(T, B, I, generator=torch.Generator().manual_seed(seed), dtype=D)


def _grads(cell, out, state, params=None):
    g = torch.Generator().manual_seed(7)
    loss = (out * torch.randn(out.shape, generator=g, dtype=D)).sum()
    loss = loss + sum((s * torch.randn(s.shape, generator=g, dtype=D)).sum() for s in state)
    return torch.autograd.grad(loss, params or list(cell.parameters()), allow_unused=True, materialize_grads=True)


def _maxabs(t):
    return float(t.detach().abs().max())


# --- LRU ----------------------------------------------------------------------------------------


def test_lru_ring_initialisation():
    torch.manual_seed(0)
    cell = LRUCell(4, 4000, r_min=0.4, r_max=0.9, max_phase=math.pi / 10)
    r = cell.eigenvalues().detach().abs().double()
    assert float(r.min()) >= 0.4 - 1e-6 and float(r.max()) <= 0.9 + 1e-6
    phase = torch.exp(cell.theta_log.detach().double())
    assert float(phase.min()) >= 0 and float(phase.max()) <= math.pi / 10 + 1e-6
    # uniform over the ring's area: |lambda|^2 uniform on [r_min^2, r_max^2]
    assert abs(float((r**2).mean()) - (0.4**2 + 0.9**2) / 2) < 0.01
    assert abs(float((r**2).var()) - (0.9**2 - 0.4**2) ** 2 / 12) < 0.005


def test_lru_step_is_the_papers_equation_in_complex_numbers():
    torch.manual_seed(0)
    cell = LRUCell(3, 5, r_min=0.5, r_max=0.95).double()
    x = _x(4, 2, 3)
    lam = torch.exp(torch.complex(-torch.exp(cell.nu_log), torch.exp(cell.theta_log)))
    gamma = torch.sqrt(1 - lam.abs() ** 2)
    Bc, Cc = torch.complex(cell.B_re, cell.B_im), torch.complex(cell.C_re, cell.C_im)
    z = torch.zeros(2, 5, dtype=torch.complex128)
    out, _ = cell.sequence(x)
    for t in range(4):
        z = lam * z + gamma * (x[t].to(Bc.dtype) @ Bc.T)
        y = (z @ Cc.T).real + x[t] @ cell.D.T
        assert torch.allclose(out[t], y, atol=1e-12)


@pytest.mark.parametrize("backend", ["reference", "step", "scan"])
def test_lru_without_gamma_norm_differs_by_gamma_on_the_input_branch(backend):
    """``gamma_norm=False`` (the LRU paper's ablation): the same parameters give the states of
    the recurrence fed ``B u`` instead of ``gamma * B u``; from a zero start each mode's state is
    its normalised state divided by its gamma = sqrt(1 - |lambda|^2) (computed here from
    |lambda|, not the cell's own exp(nu_log) form), and the output's ``D u`` term is the same.
    The default is ``gamma_norm=True``, the same draw and arithmetic bit for bit."""
    torch.manual_seed(0)
    on = LRUCell(3, 5, r_min=0.9, r_max=0.999, backend=backend).double()
    torch.manual_seed(0)
    explicit = LRUCell(3, 5, r_min=0.9, r_max=0.999, backend=backend, gamma_norm=True).double()
    off = LRUCell(3, 5, r_min=0.9, r_max=0.999, backend=backend, gamma_norm=False).double()
    off.load_state_dict(on.state_dict())
    x = _x(30, 2, 3)
    (y_on, s_on), (y_ex, s_ex), (y_off, s_off) = on.sequence(x), explicit.sequence(x), off.sequence(x)
    assert torch.equal(y_on, y_ex) and all(torch.equal(a, b) for a, b in zip(s_on, s_ex))
    gamma = torch.sqrt(1 - on.eigenvalues().detach().abs() ** 2)
    z_on, z_off = (torch.complex(*s) for s in (s_on, s_off))
    assert _maxabs(z_on - gamma * z_off) < 1e-12 * _maxabs(z_on)
    assert float(gamma.max()) < 0.5  # a ring near 1: the two differ by more than rounding
    Cc = torch.complex(on.C_re, on.C_im)
    Du = x @ on.D.T
    for t in (0, 9, 29):
        # the outputs' recurrent terms, one step at a time: Re(C z_on) = Re(C (gamma z_off))
        z_off_t = torch.complex(*off.sequence(x[: t + 1])[1])
        assert _maxabs((y_on[t] - Du[t]) - ((gamma * z_off_t) @ Cc.T).real) < 1e-10
        assert _maxabs((y_off[t] - Du[t]) - (z_off_t @ Cc.T).real) < 1e-10
    with pytest.raises(ValueError, match="LRU gamma_norm must be True or False, got 'no'"):
        LRUCell(3, 5, gamma_norm="no")


def test_lru_block_is_norm_lru_gelu_glu_residual():
    torch.manual_seed(0)
    cell = LRUCell(5, 5, block=True).double()
    plain = LRUCell(5, 5).double()
    plain.load_state_dict({k: v for k, v in cell.state_dict().items() if k in plain.state_dict()})
    x = _x(6, 2, 5)
    out, _ = cell.sequence(x)
    y, _ = plain.sequence(F.layer_norm(x, (5,), cell.norm.weight, cell.norm.bias))
    g = F.gelu(y)
    assert torch.allclose(out, x + cell.glu_1(g) * torch.sigmoid(cell.glu_2(g)), atol=1e-12)
    assert LRUCell(3, 5, block=True).skip is not None  # widths differ: a linear skip


# --- S4D ----------------------------------------------------------------------------------------


def test_s4d_initialisations_closed_forms():
    assert torch.allclose(s4d_imag("lin", 6), torch.tensor([0.0, math.pi, 2 * math.pi], dtype=D))
    assert torch.allclose(s4d_imag("inv", 4), torch.tensor([12 / math.pi, 4 / (3 * math.pi)], dtype=D))
    torch.manual_seed(0)
    cell = S4DCell(2, 500, state_size=4, dt_min=0.01, dt_max=0.2)
    dt = torch.exp(cell.log_dt.detach().double())
    assert float(dt.min()) >= 0.01 * (1 - 1e-6) and float(dt.max()) <= 0.2 * (1 + 1e-6)
    # log-uniform: log dt uniform, mean at the middle of [log dt_min, log dt_max]
    assert abs(float(dt.log().mean()) - (math.log(0.01) + math.log(0.2)) / 2) < 0.15
    assert torch.allclose(-torch.exp(cell.log_A_real.detach()), torch.full((500, 2), -0.5))
    with pytest.raises(ValueError, match="init must be 'lin'"):
        S4DCell(2, 3, init="legs")


@pytest.mark.parametrize("init", ["lin", "inv"])
def test_s4d_cells_start_at_the_papers_eigenvalues(init):
    """A built cell's A = -exp(log_A_real) + i A_imag, every channel, against the S4D paper's
    formulas written out per mode in plain Python: S4D-Lin A_n = -1/2 + i pi n, S4D-Inv
    A_n = -1/2 + i (N/pi) (N/(2n+1) - 1), n = 0 .. N/2 - 1, N = state_size."""
    N, H = 64, 3
    cell = S4DCell(2, H, state_size=N, init=init).double()
    A = torch.complex(-torch.exp(cell.log_A_real.detach()), cell.A_imag.detach())
    if init == "lin":
        want = [complex(-0.5, math.pi * n) for n in range(N // 2)]
    else:
        want = [complex(-0.5, N / math.pi * (N / (2 * n + 1) - 1)) for n in range(N // 2)]
    want = torch.tensor(want, dtype=torch.complex128)
    for h in range(H):
        assert _maxabs(A[h] - want) < 1e-6 * float(want.abs().max())  # stored in float32, then cast
    assert S4DCell(2, H).init == "lin"  # the default


def test_zoh_step_equals_an_rk4_integration_with_the_input_held():
    """``x(dt)`` of ``x' = A x + u`` from ``x0`` with u constant: exp(dt A) x0 + ((exp(dt A) - 1) / A) u."""
    A = torch.tensor([-0.5 + 3.0j, -0.5 + 0.0j, -2.0 + 40.0j], dtype=torch.complex128)
    dt, x0, u = 0.07, torch.tensor([1.0 - 2.0j, 0.3j, -1.5], dtype=torch.complex128), 0.8
    dA, dB = zoh(dt * A, A)
    x = rk4(lambda x: A * x + u, x0.clone(), dt, 2000)
    assert _maxabs(dA * x0 + dB * u - x) < 1e-11


@pytest.mark.parametrize("init", ["lin", "inv"])
def test_s4d_recurrence_equals_its_convolution_kernel(init):
    """The scan and the FFT convolution (with a start state's free response): outputs, final
    state and every gradient to 1e-10 in float64."""
    torch.manual_seed(0)
    conv = S4DCell(3, 4, state_size=6, init=init, backend="conv").double()
    with torch.no_grad():
        conv.log_dt.add_(1.0)  # longer steps: a kernel that has not decayed within T
    scan = S4DCell(3, 4, state_size=6, init=init, backend="scan").double()
    scan.load_state_dict(conv.state_dict())
    x = _x(40, 2, 3)
    g = torch.Generator().manual_seed(3)
    h0 = tuple(torch.randn(2, 4, generator=g, dtype=D) for _ in range(6))
    (a, sa), (b, sb) = conv.sequence(x, h0), scan.sequence(x, h0)
    assert _maxabs(a - b) <= 1e-10
    assert max(_maxabs(p - q) for p, q in zip(sa, sb)) <= 1e-10
    for p, q in zip(_grads(conv, a, sa), _grads(scan, b, sb)):
        assert _maxabs(p - q) <= 1e-10


def test_s4d_kernel_is_the_impulse_response():
    """K_l is the output of one channel to an impulse at step 0 (D and the output map aside)."""
    torch.manual_seed(0)
    cell = S4DCell(1, 2, state_size=4).double()
    _, dA, dB = cell.discrete()
    C = torch.complex(cell.C_re, cell.C_im)
    s, ys = dB.clone(), []
    for _ in range(10):
        ys.append(2 * (C * s).sum(-1).real)
        s = dA * s
    assert torch.allclose(cell.kernel(10), torch.stack(ys, -1), atol=1e-13)


# --- Mamba ---------------------------------------------------------------------------------------


def naive_mamba(cell: MambaCell, x):
    """The Mamba block written out step by step from the paper: conv1d with K - 1 zeros of left
    padding (as the authors' reference), then per state unit n, per step t."""
    T, Bsz, _ = x.shape
    d, N, R, K = cell.expand * cell.hidden_size, cell.state_size, cell.dt_rank, cell.conv_size
    xz = x @ cell.in_proj.T
    xs, z = xz[..., :d], xz[..., d:]
    conv = F.conv1d(xs.permute(1, 2, 0), cell.conv_weight.unsqueeze(1), cell.conv_bias, padding=K - 1, groups=d)
    c = F.silu(conv[..., :T].permute(2, 0, 1))  # (T, B, d)
    A = -torch.exp(cell.A_log)
    h = [torch.zeros(Bsz, d, dtype=x.dtype) for _ in range(N)]
    outs = []
    for t in range(T):
        p = c[t] @ cell.x_proj.T
        delta = F.softplus(p[:, :R] @ cell.dt_weight.T + cell.dt_bias)
        Bt, Ct = p[:, R : R + N], p[:, R + N :]
        y = cell.D * c[t]
        for n in range(N):
            h[n] = torch.exp(delta * A[:, n]) * h[n] + delta * Bt[:, n : n + 1] * c[t]
            y = y + Ct[:, n : n + 1] * h[n]
        outs.append((y * F.silu(z[t])) @ cell.out_proj.T)
    return torch.stack(outs), torch.stack(h, -1)


@pytest.mark.parametrize("backend", ["scan", "step", "reference"])
def test_mamba_equals_a_naive_per_step_implementation(backend):
    torch.manual_seed(0)
    cell = MambaCell(3, 4, state_size=3, expand=2, conv_size=3, dt_rank=2, backend=backend, chunk=2).double()
    x = _x(7, 2, 3)
    out, state = cell.sequence(x)
    ref, h = naive_mamba(cell, x)
    assert _maxabs(out - ref) <= 1e-12
    assert _maxabs(cell._split_state(state)[0] - h) <= 1e-12
    params = list(cell.parameters())
    for p, q in zip(_grads(cell, out, []), _grads(cell, ref, [], params)):
        assert _maxabs(p - q) <= 1e-10


def test_mamba_initialisation_is_the_authors():
    torch.manual_seed(0)
    cell = MambaCell(4, 32, state_size=16, dt_min=0.002, dt_max=0.05)
    assert cell.dt_rank == 2  # ceil(32 / 16)
    assert torch.equal(-torch.exp(cell.A_log.detach()).round(), -torch.arange(1.0, 17.0).expand(64, 16))
    assert torch.equal(cell.D.detach(), torch.ones(64))
    dt = F.softplus(cell.dt_bias.detach().double())
    assert float(dt.min()) >= 0.002 * (1 - 1e-5) and float(dt.max()) <= 0.05 * (1 + 1e-5)


def test_mamba_conv_state_carries_across_calls():
    """Two calls, the second from the first's state, equal one call over the whole sequence."""
    torch.manual_seed(0)
    cell = MambaCell(3, 4, state_size=2, conv_size=4).double()
    x = _x(9, 2, 3)
    whole, s = cell.sequence(x)
    first, s1 = cell.sequence(x[:5])
    second, s2 = cell.sequence(x[5:], s1)
    assert torch.allclose(torch.cat([first, second]), whole, atol=1e-13)
    assert all(torch.allclose(p, q, atol=1e-13) for p, q in zip(s2, s))


@pytest.mark.parametrize(
    "layer,options", [(LRU, {"block": True}), (S4D, {"state_size": 4}), (Mamba, {"state_size": 2})]
)
def test_layers_stack_and_take_batch_first(layer, options):
    torch.manual_seed(0)
    net = layer(3, 5, num_layers=2, batch_first=True, **options).double()
    x = _x(2, 6, 3)  # (B, T, I)
    out, h_n = net(x)
    assert out.shape == (2, 6, 5)
    ref = copy.deepcopy(net)
    for cell in ref.cells:
        cell.backend = "reference"
    out_ref, _ = ref(x)
    assert torch.allclose(out, out_ref, atol=1e-12)


# --- evaluation in windows of time ----------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: LRUCell(3, 5),
        lambda: S4DCell(3, 4, state_size=6, backend="scan"),
        lambda: S4DCell(3, 4, state_size=6, backend="conv"),
        lambda: MambaCell(3, 4, state_size=3, backend="scan"),
        lambda: MambaCell(3, 4, state_size=3, backend="step"),
    ],
)
def test_without_gradients_a_long_sequence_runs_in_windows_with_the_same_outputs(make, monkeypatch):
    """Evaluation of a scan too big for memory runs window by window (the state carried over); its
    outputs and last state are the whole run's, also where sequences end inside or before a window."""
    from rnnlab.cells import ssm

    torch.manual_seed(0)
    cell = make().double()
    x, lengths = _x(23, 4, 3), torch.tensor([23, 1, 9, 16])
    with torch.no_grad():
        whole, last = cell.sequence(x, None, lengths)
        monkeypatch.setattr(ssm, "EVAL_WINDOW_ELEMENTS", 5 * 4 * cell.dispatch_width())  # windows of 5 steps
        seen, path = [], cell.path
        cell.path = lambda x, lengths=None: seen.append(x.shape[0]) or path(x, lengths)
        parts, part_last = cell.sequence(x, None, lengths)
    assert seen == [5, 5, 5, 5, 3]
    assert parts.shape == whole.shape
    torch.testing.assert_close(parts, whole, rtol=1e-10, atol=1e-12)
    for a, b in zip(part_last, last, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    with torch.enable_grad():  # with gradients: one run of the whole sequence
        seen.clear()
        cell.sequence(x, None, lengths)
    assert seen == [23]
