"""The DMU paper's Table IV baselines and the modern long-memory cells (issue 23):
MomentumLSTM, the full-capacity uRNN, the soft-orthogonality RNN, KRU, AntisymmetricRNN, the
incremental RNN, NAIS-Net, the Lipschitz RNN, coRNN and LEM.

For each, in float64: a step-by-step reference written here from the paper's equations (built
from the raw parameters, not from the cell's own helpers) against the cell's step loop and its
fast path (outputs, final state and every gradient); and the structural property of its
parametrisation or discretisation. The second-order gradients of every new layer are right
(equal to the step loop's) or refused with an error naming the way out.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from conftest import rk4
from rnnlab.cells import (
    CELLS,
    AntisymmetricRNNCell,
    CoRNNCell,
    FCURNNCell,
    IncrementalRNNCell,
    KRUCell,
    LEMCell,
    LipschitzRNNCell,
    LSTMCell,
    MomentumLSTMCell,
    NAISNetCell,
    Recurrent,
    SoftOrthRNNCell,
    unroll,
)
from rnnlab.kernels.oscillator import cornn_recurrence, lem_recurrence
from rnnlab.kernels.residual import reference_residual_recurrence, residual_recurrence
from rnnlab.kernels.unitary import modrelu_recurrence, reference_modrelu_recurrence

D, C = torch.float64, torch.complex128
T, B, I = 6, 3, 2
NEW = ["momentumlstm", "fcurnn", "softorth", "kru", "antisymrnn", "incrnn", "naisnet", "lipschitz", "cornn", "lem"]


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest


def _perturbed(cell, scale=0.2, seed=1):
    """The cell in float64 with every parameter moved off its initialisation."""
    cell = cell.double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=D))
    return cell


def _leaves(s):
    return [s] if isinstance(s, torch.Tensor) else list(s)


def _compare(cell, reference, x, state=None, lengths=None):
    """The cell's step loop (backend 'reference') and its fast path both equal ``reference``
    (a function of the cell's raw parameters): outputs, final state, and the gradients of a
    loss through both with respect to the input and every parameter."""
    params = list(cell.parameters())
    x = x.clone().requires_grad_()
    results = []
    for run in ("reference", "fast", "paper"):
        if run == "paper":
            out, final = reference(cell, x, state, lengths)
        else:
            cell.backend = "reference" if run == "reference" else "auto"
            out, final = cell.sequence(x, state, lengths)
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=D)
        loss = (out * w).sum() + sum((s * (k + 1)).sin().sum() for k, s in enumerate(_leaves(final)))
        grads = torch.autograd.grad(loss, [x, *params], allow_unused=True)
        results.append((out.detach(), [s.detach() for s in _leaves(final)], grads))
    (o_p, f_p, g_p) = results[2]
    for o, f, gr in results[:2]:
        torch.testing.assert_close(o, o_p, rtol=1e-9, atol=1e-11)
        for a, b in zip(f, f_p):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
        for a, b in zip(gr, g_p):
            if b is None:
                assert a is None or a.abs().max() == 0
            else:
                torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def _masked(lengths, t, new, old):
    if lengths is None:
        return new
    keep = (lengths > t).view(-1, 1)
    return torch.where(keep, new, old)


def _out(lengths, t, h):
    return h if lengths is None else h * (lengths > t).view(-1, 1).to(h.dtype)


# --- references from the papers ------------------------------------------------------------


def ref_momentum(cell, x, state, lengths):
    H = cell.hidden_size
    h, c, v = torch.zeros(B, H, dtype=D), torch.zeros(B, H, dtype=D), torch.zeros(B, 4 * H, dtype=D)
    if state is not None:
        h, c, v = state[0], state[1], torch.cat(state[2:], 1)
    b_ih = cell.bias_ih if cell.bias_ih is not None else 0.0
    b_hh = cell.bias_hh if cell.bias_hh is not None else 0.0
    outs = []
    for t in range(x.shape[0]):
        v_n = cell.mu * v + cell.epsilon * (x[t] @ cell.weight_ih.T + b_ih)  # v_t = mu v + s (U x + b)
        gates = v_n + h @ cell.weight_hh.T + b_hh
        i, f, gg, o = (gates[:, k * H : (k + 1) * H] for k in range(4))
        c_n = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
        h_n = torch.sigmoid(o) * torch.tanh(c_n)
        h, c, v = (_masked(lengths, t, a, b) for a, b in ((h_n, h), (c_n, c), (v_n, v)))
        outs.append(_out(lengths, t, h_n))
    return torch.stack(outs), (h, c, *v.split(H, 1))


def modrelu_c(z, b):
    r = z.abs()
    return torch.where(r > 0, z / torch.where(r > 0, r, torch.ones_like(r)), torch.zeros_like(z)) * torch.relu(r + b)


def ref_complex(cell, x, state, lengths, W):
    """h_t = modReLU(W h_{t-1} + V x_t, b) on N complex units, outputs [Re h; Im h]."""
    N = cell.units
    h = torch.zeros(B, N, dtype=C) if state is None else torch.complex(state[:, :N], state[:, N:])
    V = cell.weight_ih
    outs = []
    for t in range(x.shape[0]):
        u = x[t] @ V.T
        new = modrelu_c(h @ W.T + torch.complex(u[:, :N], u[:, N:]), cell.bias)
        h = _masked(lengths, t, new, h)
        outs.append(_out(lengths, t, torch.cat([new.real, new.imag], 1)))
    return torch.stack(outs), torch.cat([h.real, h.imag], 1)


def skew_hermitian_from(A):
    """Re S: the strict upper triangle of A minus its transpose; Im S: the lower triangle
    (diagonal included) mirrored; written here with index loops."""
    n = A.shape[0]
    S = torch.zeros(n, n, dtype=C)
    for i in range(n):
        for j in range(n):
            if i < j:
                S[i, j] = torch.complex(A[i, j], A[j, i])
            elif i > j:
                S[i, j] = torch.complex(-A[j, i], A[i, j])
            else:
                S[i, i] = torch.complex(torch.zeros((), dtype=D), A[i, i])
    return S


def fcurnn_dense(cell):
    N = cell.units
    A = cell.parametrizations.weight_hh.original
    par = cell.parametrizations.weight_hh[0]
    S = skew_hermitian_from(A)
    eye = torch.eye(N, dtype=C)
    Q = torch.linalg.matrix_exp(S) if par.map == "expm" else torch.linalg.inv(eye + S) @ (eye - S)
    base = torch.complex(par.base[:N, :N], par.base[N:, :N])
    return base @ Q


def ref_fcurnn(cell, x, state, lengths):
    return ref_complex(cell, x, state, lengths, fcurnn_dense(cell))


def kru_dense(cell):
    W = torch.ones(1, 1, dtype=C)
    for f in range(len(cell.sizes)):
        p = getattr(cell, f"factor{f}")
        W = torch.kron(W, torch.complex(p[..., 0], p[..., 1]))
    return W


def ref_kru(cell, x, state, lengths):
    return ref_complex(cell, x, state, lengths, kru_dense(cell))


def ref_softorth(cell, x, state, lengths):
    U, V = cell.weight_u, cell.weight_v
    p = cell.singular
    s = p if cell.margin is None else 1 + 2 * cell.margin * (torch.sigmoid(p) - 0.5)
    W = U @ torch.diag(s) @ V.T
    phi = torch.tanh if cell.nonlinearity == "tanh" else torch.relu
    return _plain_loop(
        x, state, lengths, cell.hidden_size, lambda h, xt: phi(h @ W.T + xt @ cell.weight_ih.T + cell.bias)
    )


def _plain_loop(x, state, lengths, H, step):
    h = torch.zeros(B, H, dtype=D) if state is None else state
    outs = []
    for t in range(x.shape[0]):
        new = step(h, x[t])
        h = _masked(lengths, t, new, h)
        outs.append(_out(lengths, t, new))
    return torch.stack(outs), h


def ref_antisym(cell, x, state, lengths):
    M, H = cell.weight_m, cell.hidden_size
    A = M - M.T - cell.gamma * torch.eye(H, dtype=D)
    if not cell.gated:

        def step(h, xt):
            return h + cell.eps * torch.tanh(h @ A.T + xt @ cell.weight_ih.T + cell.bias)
    else:
        Vh, Vz = cell.weight_ih[:H], cell.weight_ih[H:]
        bh, bz = cell.bias[:H], cell.bias[H:]

        def step(h, xt):
            z = torch.sigmoid(h @ A.T + xt @ Vz.T + bz)
            return h + cell.eps * z * torch.tanh(h @ A.T + xt @ Vh.T + bh)

    return _plain_loop(x, state, lengths, H, step)


def ref_incremental(cell, x, state, lengths):
    U = cell.weight_hh if cell.rank is None else cell.weight_u1 @ cell.weight_u2.T
    phi = torch.tanh if cell.activation == "tanh" else torch.relu

    def step(h, xt):
        g = torch.zeros_like(h)  # the increment, K Euler steps of its ODE from 0
        for _ in range(cell.steps):
            g = g + cell.eta * (-cell.alpha * (g + h) + phi((g + h) @ U.T + xt @ cell.weight_ih.T + cell.bias))
        return h + g

    return _plain_loop(x, state, lengths, cell.hidden_size, step)


def ref_naisnet(cell, x, state, lengths):
    R, H = cell.weight_r, cell.hidden_size
    G = R.T @ R
    if cell.bound is not None:
        fro = torch.sqrt((G * G).sum())
        G = G * torch.minimum(torch.ones((), dtype=D), cell.bound / fro)
    A = -G - cell.delta * torch.eye(H, dtype=D)
    return _plain_loop(
        x, state, lengths, H, lambda h, xt: h + cell.step * torch.tanh(h @ A.T + xt @ cell.weight_ih.T + cell.bias)
    )


def ref_lipschitz(cell, x, state, lengths):
    H, beta = cell.hidden_size, cell.beta
    eye = torch.eye(H, dtype=D)

    def structured(M, gamma):
        return (1 - beta) * (M + M.T) + beta * (M - M.T) - gamma * eye

    A, W = structured(cell.weight_a, cell.gamma_a), structured(cell.weight_w, cell.gamma_w)
    return _plain_loop(
        x,
        state,
        lengths,
        H,
        lambda h, xt: h + cell.eps * h @ A.T + cell.eps * torch.tanh(h @ W.T + xt @ cell.weight_ih.T + cell.bias),
    )


def ref_cornn(cell, x, state, lengths):
    H = cell.hidden_size
    y, z = (torch.zeros(B, H, dtype=D), torch.zeros(B, H, dtype=D)) if state is None else state
    dt, gamma, eps = cell.dt, cell.gamma, cell.epsilon
    outs = []
    for t in range(x.shape[0]):
        force = torch.tanh(y @ cell.weight_hy.T + z @ cell.weight_hz.T + x[t] @ cell.weight_ih.T + cell.bias)
        z_n = z + dt * (force - gamma * y - eps * z)  # IMEX: explicit in y_{n-1}, z_{n-1}
        y_n = y + dt * z_n  # and y updated with the new velocity
        y, z = _masked(lengths, t, y_n, y), _masked(lengths, t, z_n, z)
        outs.append(_out(lengths, t, y_n))
    return torch.stack(outs), (y, z)


def ref_lem(cell, x, state, lengths):
    H = cell.hidden_size
    y, z = (torch.zeros(B, H, dtype=D), torch.zeros(B, H, dtype=D)) if state is None else state
    V = [cell.weight_ih[k * H : (k + 1) * H] for k in range(4)]
    bi = [cell.bias_ih[k * H : (k + 1) * H] for k in range(4)]
    W = [cell.weight_hh[k * H : (k + 1) * H] for k in range(3)]
    bh = [cell.bias_hh[k * H : (k + 1) * H] for k in range(3)]
    outs = []
    for t in range(x.shape[0]):
        xt = x[t]
        dt_n = cell.dt * torch.sigmoid(y @ W[0].T + bh[0] + xt @ V[0].T + bi[0])
        dtb_n = cell.dt * torch.sigmoid(y @ W[1].T + bh[1] + xt @ V[1].T + bi[1])
        z_n = (1 - dt_n) * z + dt_n * torch.tanh(y @ W[2].T + bh[2] + xt @ V[2].T + bi[2])
        y_n = (1 - dtb_n) * y + dtb_n * torch.tanh(z_n @ cell.weight_zy.T + cell.bias_zy + xt @ V[3].T + bi[3])
        y, z = _masked(lengths, t, y_n, y), _masked(lengths, t, z_n, z)
        outs.append(_out(lengths, t, y_n))
    return torch.stack(outs), (y, z)


CASES = [
    ("momentumlstm", MomentumLSTMCell, {}, ref_momentum),
    ("momentumlstm-default-init-nobias", MomentumLSTMCell, {"init": "default", "bias": False, "mu": 0.9}, ref_momentum),
    ("fcurnn-cayley", FCURNNCell, {}, ref_fcurnn),
    ("fcurnn-expm-identity", FCURNNCell, {"map": "expm", "init": "identity"}, ref_fcurnn),
    ("softorth-margin", SoftOrthRNNCell, {"margin": 0.3}, ref_softorth),
    ("softorth-free-relu-expm", SoftOrthRNNCell, {"margin": None, "nonlinearity": "relu", "map": "expm"}, ref_softorth),
    ("kru-2x2", KRUCell, {}, ref_kru),
    ("kru-2x3-real-input", KRUCell, {"factors": [2, 3], "complex_input": False}, ref_kru),
    ("antisymrnn", AntisymmetricRNNCell, {"eps": 0.3}, ref_antisym),
    ("antisymrnn-gated", AntisymmetricRNNCell, {"eps": 0.3, "gated": True}, ref_antisym),
    ("incrnn", IncrementalRNNCell, {"eta": 0.3}, ref_incremental),
    (
        "incrnn-rank-relu",
        IncrementalRNNCell,
        {"eta": 0.3, "rank": 2, "activation": "relu", "alpha": 0.5},
        ref_incremental,
    ),
    ("incrnn-3-steps", IncrementalRNNCell, {"eta": 0.2, "steps": 3}, ref_incremental),
    ("naisnet", NAISNetCell, {"step": 0.5}, ref_naisnet),
    ("naisnet-unbounded", NAISNetCell, {"step": 0.5, "bound": None}, ref_naisnet),
    ("lipschitz", LipschitzRNNCell, {"eps": 0.3, "beta": 0.6, "gamma_a": 0.1, "gamma_w": 0.2}, ref_lipschitz),
    ("cornn", CoRNNCell, {"dt": 0.3, "gamma": 1.5, "epsilon": 0.7}, ref_cornn),
    ("lem", LEMCell, {"dt": 0.6}, ref_lem),
]


@pytest.mark.parametrize("lengths", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "state"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_step_loop_and_fast_path_equal_the_papers_equations(case, with_state, lengths):
    _, cls, kw, reference = case
    torch.manual_seed(0)
    H = 12 if cls in (FCURNNCell, KRUCell) else 5
    cell = _perturbed(cls(I, H, **kw))
    g = torch.Generator().manual_seed(2)
    x = torch.randn(T, B, I, generator=g, dtype=D)
    state = None
    if with_state:
        proto = cell.init_state(B)
        state = (
            proto.normal_(generator=g)
            if isinstance(proto, torch.Tensor)
            else tuple(s.normal_(generator=g) for s in proto)
        )
    lens = torch.tensor([T, 2, 4]) if lengths else None
    _compare(cell, reference, x, state, lens)


def test_every_new_cell_is_registered_and_covered():
    assert set(NEW) <= set(CELLS)
    assert {CELLS[k] for k in NEW} == {c[1] for c in CASES}


# --- structural properties --------------------------------------------------------------------


def test_momentum_is_a_linear_filter_of_the_inputs_and_mu_zero_is_the_lstm():
    """v_t = W_ih m_t + b_ih c_t with m, c the momentum of epsilon [x; 1] (the closed form the
    fast path relies on), and mu = 0, epsilon = 1 is torch's LSTM."""
    torch.manual_seed(0)
    cell = _perturbed(MomentumLSTMCell(I, 4, mu=0.7, epsilon=0.9))
    x = torch.randn(T, B, I, dtype=D)
    _, state = unroll(cell, x)
    m = torch.zeros(B, I + 1, dtype=D)
    for t in range(T):
        m = 0.7 * m + 0.9 * torch.cat([x[t], torch.ones(B, 1, dtype=D)], 1)
    v = m[:, :I] @ cell.weight_ih.T + m[:, I:] * cell.bias_ih
    torch.testing.assert_close(torch.cat(state[2:], 1), v)
    plain = _perturbed(MomentumLSTMCell(I, 4, mu=0.0, epsilon=1.0))
    lstm = LSTMCell(I, 4).double()
    lstm.load_state_dict(plain.state_dict())
    torch.testing.assert_close(plain.sequence(x)[0], lstm.sequence(x)[0])
    nn_lstm = torch.nn.LSTM(I, 4).double()
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(nn_lstm, f"{name}_l0").data.copy_(getattr(plain, name))
    torch.testing.assert_close(plain.sequence(x)[0], nn_lstm(x)[0])


def test_momentum_lstm_paper_initialisation():
    cell = MomentumLSTMCell(3, 5)
    H = 5
    torch.testing.assert_close(cell.weight_hh[:H], torch.eye(H))
    assert cell.weight_hh[H:].abs().max() == 0
    Q = cell.weight_ih
    torch.testing.assert_close(Q.T @ Q, torch.eye(3), atol=1e-6, rtol=0)  # orthogonal columns
    for b in (cell.bias_ih, cell.bias_hh):
        assert (b[H : 2 * H] == 1.0).all() and b[:H].abs().max() == 0 and b[2 * H :].abs().max() == 0


@pytest.fixture
def float64_default():
    """Build in float64 (the Haar-random base and factors are drawn in the default dtype)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(D)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("map", ["cayley", "expm"])
def test_full_capacity_unitary_to_1e12_for_any_parameter(map, float64_default):
    torch.manual_seed(0)
    cell = FCURNNCell(2, 16, map=map)
    with torch.no_grad():
        cell.parametrizations.weight_hh.original.normal_(0, 1.5)
    W = fcurnn_dense(cell).detach()
    err = (W.conj().T @ W - torch.eye(8, dtype=C)).abs().max()
    assert err < 1e-12
    Wr = cell.weight_hh.detach()
    assert (Wr.T @ Wr - torch.eye(16, dtype=D)).abs().max() < 1e-12  # the real form is orthogonal
    torch.testing.assert_close(cell.unitary_matrix().detach(), W)


def test_full_capacity_spans_u_n_with_n_squared_reals():
    """S(A) is skew-Hermitian and A -> S(A) is one-to-one on N^2 reals (read A back from S)."""
    from rnnlab.cells.fullunitary import skew_hermitian

    A = torch.randn(5, 5, dtype=D)
    S = skew_hermitian(A)
    torch.testing.assert_close(S.conj().T, -S)
    back = torch.triu(S.real, 1) + torch.tril(S.imag)
    torch.testing.assert_close(back, A)
    assert FCURNNCell(1, 10).unitary_parameter_count() == 25


def test_full_capacity_cayley_k1_is_a_multiplicative_cayley_step(float64_default):
    """With the Cayley map and K = 1, one SGD step on S followed by the trainer's re-base
    leaves ``W_new = W_old (I + S)^{-1} (I - S)`` with ``S = S(-lr grad)`` and W unitary."""
    from rnnlab import parametrize as par

    torch.manual_seed(0)
    cell = FCURNNCell(2, 8, map="cayley", K=1)
    x = torch.randn(T, B, 2, dtype=D)
    W0 = fcurnn_dense(cell).detach()
    A = cell.parametrizations.weight_hh.original
    loss = cell.sequence(x)[0].pow(2).sum()
    (grad,) = torch.autograd.grad(loss, [A])
    lr = 0.05
    with torch.no_grad():
        A.sub_(lr * grad)
    S = skew_hermitian_from(-lr * grad)
    eye = torch.eye(4, dtype=C)
    expected = W0 @ torch.linalg.inv(eye + S) @ (eye - S)
    torch.testing.assert_close(fcurnn_dense(cell).detach(), expected)
    par.after_optimizer_step(cell)  # re-base: B <- W, A <- 0
    assert A.abs().max() == 0
    W1 = fcurnn_dense(cell).detach()
    torch.testing.assert_close(W1, expected)
    assert (W1.conj().T @ W1 - eye).abs().max() < 1e-12


def test_soft_orthogonality_spectral_bound_and_penalty():
    torch.manual_seed(0)
    m = 0.25
    cell = SoftOrthRNNCell(3, 10, margin=m, penalty=0.7).double()
    with torch.no_grad():
        cell.singular.normal_(0, 10.0)  # far out: the margin still bounds the spectrum
        for name in ("weight_u", "weight_v"):
            getattr(cell.parametrizations, name).original.normal_(0, 1.0)
    W = cell.weight_hh.detach()
    sv = torch.linalg.svdvals(W)
    assert sv.max() < 1 + m and sv.min() > 1 - m
    s = 1 + 2 * m * (torch.sigmoid(cell.singular.detach()) - 0.5)
    torch.testing.assert_close(sv, s.sort(descending=True).values)
    for name in ("weight_u", "weight_v"):
        Q = getattr(cell, name).detach()
        assert (Q.T @ Q - torch.eye(10, dtype=D)).abs().max() < 1e-12
    penalty = 0.7 * torch.linalg.matrix_norm(W.T @ W - torch.eye(10, dtype=D)).square()
    torch.testing.assert_close(cell.regularization().detach(), penalty)
    zero = SoftOrthRNNCell(3, 6, margin=0.0).double()
    Wz = zero.weight_hh.detach()
    assert (Wz.T @ Wz - torch.eye(6, dtype=D)).abs().max() < 1e-12  # margin 0: orthogonal
    assert zero.regularization() is None


def test_kru_kronecker_product_unitary_factors_and_soft_constraint(float64_default):
    torch.manual_seed(0)
    cell = KRUCell(2, 2 * 12, factors=[2, 3, 2], penalty=0.3)
    W = kru_dense(cell).detach()
    assert W.shape == (12, 12)
    assert (W.conj().T @ W - torch.eye(12, dtype=C)).abs().max() < 1e-12  # unitary factors at init
    torch.testing.assert_close(cell.unitary_matrix().detach(), W)  # the axis-wise application
    assert cell.regularization().abs() < 1e-24
    with torch.no_grad():
        cell.factor1.add_(0.1)
    factors = [
        torch.complex(getattr(cell, f"factor{f}")[..., 0], getattr(cell, f"factor{f}")[..., 1]).detach()
        for f in range(3)
    ]
    expected = 0.3 * sum(
        torch.linalg.matrix_norm(F.conj().T @ F - torch.eye(F.shape[0], dtype=C)).square() for F in factors
    )
    torch.testing.assert_close(cell.regularization().detach(), expected)
    assert KRUCell(1, 1024).sizes == [2] * 9 and KRUCell(1, 1024).unitary_parameter_count() == 72
    with pytest.raises(ValueError, match="product is the number of complex units"):
        KRUCell(1, 24, factors=[2, 2])


def test_antisymmetric_part_and_purely_imaginary_spectrum():
    torch.manual_seed(0)
    gamma = 0.3
    cell = _perturbed(AntisymmetricRNNCell(2, 9, gamma=gamma), scale=1.0)
    A = cell.recurrent_matrix().detach()
    torch.testing.assert_close(A + A.T, -2 * gamma * torch.eye(9, dtype=D), rtol=0, atol=1e-15)
    eig = torch.linalg.eigvals(A)
    torch.testing.assert_close(eig.real, torch.full((9,), -gamma, dtype=D), rtol=0, atol=1e-12)
    assert cell.free_parameter_count() == 9 * 8 // 2 + 9 * 2 + 9


def test_lipschitz_matrices_split_into_the_papers_parts():
    torch.manual_seed(0)
    cell = _perturbed(LipschitzRNNCell(2, 7, beta=0.65, gamma_a=0.2, gamma_w=0.1), scale=1.0)
    for M, gamma in ((cell.weight_a, 0.2), (cell.weight_w, 0.1)):
        M = M.detach()
        A = cell.structured(M, gamma).detach()
        torch.testing.assert_close((A + A.T) / 2, (1 - 0.65) * (M + M.T) - gamma * torch.eye(7, dtype=D))
        torch.testing.assert_close((A - A.T) / 2, 0.65 * (M - M.T))
    skew = LipschitzRNNCell(2, 7, beta=1.0, gamma_a=0.0).double()  # beta = 1: antisymmetric A
    A = skew.structured(skew.weight_a.detach(), 0.0)
    torch.testing.assert_close(A, -A.T)


def test_naisnet_matrix_is_stable_for_any_parameter():
    torch.manual_seed(0)
    for bound, delta in ((1.0, 0.01), (0.5, 0.2)):
        cell = NAISNetCell(2, 8, bound=bound, delta=delta).double()
        with torch.no_grad():
            cell.weight_r.normal_(0, 5.0)
        A = cell.stable_matrix().detach()
        torch.testing.assert_close(A, A.T)
        eig = torch.linalg.eigvalsh(A)
        assert eig.max() <= -delta + 1e-12 and eig.min() >= -(bound + delta) - 1e-12


def test_incremental_rnn_is_not_the_identity_irnn():
    assert CELLS["incrnn"] is IncrementalRNNCell and CELLS["irnn"].__name__ == "IRNNCell"
    cell = IncrementalRNNCell(2, 4, eta=0.1, alpha=2.0).double()
    h = torch.randn(3, 4, dtype=D)
    x = torch.zeros(3, 2, dtype=D)
    with torch.no_grad():
        cell.weight_hh.zero_()
    # with U = 0, b = 0 and no input the state decays by 1 - eta alpha per step
    torch.testing.assert_close(cell(x, h)[0], (1 - 0.2) * h)


def _dt_errors(base, f, u, t_end, H):
    """The largest error of ``base``'s first ``H`` state units at ``t_end`` against the ODE
    ``s' = f(s)`` (RK4 at 400 steps from 0), as ``base`` runs with 50, 100 and 200 steps of the
    constant input ``u``: each ratio near 2 is a first-order scheme."""
    exact = rk4(f, torch.zeros(1, 2 * H, dtype=D), t_end, 400)[:, :H]
    errors = []
    for n in (50, 100, 200):
        cell = copy.deepcopy(base)
        cell.dt = t_end / n
        out, _ = cell.sequence(u.expand(n, 1, 1).contiguous())
        errors.append(float((out[-1] - exact).detach().abs().max()))
    return errors


def test_cornn_converges_to_its_oscillator_ode_at_first_order():
    """With a constant input, coRNN's IMEX scheme approaches the solution of
    ``y'' = tanh(W y + W_z y' + V u + b) - gamma y - eps y'`` (RK4 with a fine step) as dt -> 0,
    the error halving with dt."""
    torch.manual_seed(0)
    H, t_end = 3, 1.0
    base = _perturbed(CoRNNCell(1, H, dt=0.1, gamma=2.0, epsilon=0.5), scale=0.5)
    u = torch.ones(1, 1, dtype=D)

    def f(s):
        y, z = s[:, :H], s[:, H:]
        acc = (
            torch.tanh(y @ base.weight_hy.T + z @ base.weight_hz.T + u @ base.weight_ih.T + base.bias)
            - 2.0 * y
            - 0.5 * z
        )
        return torch.cat([z, acc], 1)

    errors = _dt_errors(base, f, u, t_end, H)
    assert errors[0] < 0.1
    for a, b in zip(errors, errors[1:]):
        assert 1.7 < a / b < 2.3  # first order


def test_lem_converges_to_its_multiscale_ode_and_stays_bounded():
    """LEM's scheme with a small dt approaches the ODE system
    ``z' = s(W_1 y + ..)(tanh(W_z y + ..) - z)``, ``y' = s(W_2 y + ..)(tanh(W_y z + ..) - y)``
    (s the sigmoid; dt the time step) at first order; and its states stay in [-1, 1] (each is a
    convex combination of the old value and a tanh) even for large weights."""
    torch.manual_seed(0)
    H, t_end = 3, 1.0
    base = _perturbed(LEMCell(1, H, dt=0.1), scale=0.5)
    u = torch.ones(1, 1, dtype=D)

    def f(s):
        y, z = s[:, :H], s[:, H:]
        uu = base._input_terms(u)
        p = y @ base.weight_hh.T + uu[:, : 3 * H]
        dz = torch.sigmoid(p[:, :H]) * (torch.tanh(p[:, 2 * H :]) - z)
        dy = torch.sigmoid(p[:, H : 2 * H]) * (torch.tanh(z @ base.weight_zy.T + uu[:, 3 * H :]) - y)
        return torch.cat([dy, dz], 1)

    errors = _dt_errors(base, f, u, t_end, H)
    for a, b in zip(errors, errors[1:]):
        assert 1.7 < a / b < 2.3
    big = _perturbed(LEMCell(2, 6, dt=1.0), scale=20.0)
    out, (y, z) = big.sequence(torch.randn(50, 4, 2, dtype=D) * 10)
    assert out.abs().max() <= 1.0 and z.abs().max() <= 1.0


# --- the fused kernels against their twins --------------------------------------------------


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("linear", [False, True])
@pytest.mark.parametrize("lengths", [None, [6, 2, 0]])
def test_residual_kernel_equals_its_loop_and_gradchecks(activation, linear, lengths):
    g = torch.Generator().manual_seed(0)
    H = 4
    ins = [
        torch.randn(T, B, H, generator=g, dtype=D),
        0.5 * torch.randn(H, H, generator=g, dtype=D),
        torch.randn(B, H, generator=g, dtype=D),
        0.5 + 0.1 * torch.randn(H, generator=g, dtype=D),
        1 + 0.1 * torch.randn(H, generator=g, dtype=D),
    ]
    if linear:
        ins.append(0.3 * torch.randn(H, H, generator=g, dtype=D))
    ins = [t.requires_grad_() for t in ins]
    lens = None if lengths is None else torch.tensor(lengths)

    def f(u, W, h0, e, d, *c):
        return residual_recurrence(u, W, h0, e, d, c[0] if c else None, activation, lens)

    def r(u, W, h0, e, d, *c):
        return reference_residual_recurrence(u, W, h0, e, d, c[0] if c else None, activation, lens)

    a, b = f(*ins), r(*ins)
    for p, q in zip(a, b):
        torch.testing.assert_close(p, q)
    assert torch.autograd.gradcheck(f, tuple(ins))


@pytest.mark.parametrize("lengths", [None, [6, 2, 0]])
def test_oscillator_kernels_gradcheck(lengths):
    g = torch.Generator().manual_seed(0)
    H = 3
    lens = None if lengths is None else torch.tensor(lengths)
    y0, z0 = (torch.randn(B, H, generator=g, dtype=D, requires_grad=True) for _ in range(2))
    u = torch.randn(T, B, H, generator=g, dtype=D, requires_grad=True)
    W = (0.5 * torch.randn(H, 2 * H, generator=g, dtype=D)).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda u, W, y0, z0: cornn_recurrence(u, W, y0, z0, 0.3, 0.7, 1.2, lens), (u, W, y0, z0)
    )
    u4 = torch.randn(T, B, 4 * H, generator=g, dtype=D, requires_grad=True)
    Wy = (0.5 * torch.randn(3 * H, H, generator=g, dtype=D)).requires_grad_()
    Wz = (0.5 * torch.randn(H, H, generator=g, dtype=D)).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda u, a, b, y0, z0: lem_recurrence(u, a, b, y0, z0, 0.8, lens), (u4, Wy, Wz, y0, z0)
    )


@pytest.mark.parametrize("lengths", [None, [6, 2, 0]])
def test_modrelu_kernel_equals_complex_autograd_and_gradchecks(lengths):
    """The real-arithmetic modReLU recurrence against complex tensors through autograd, with W
    the real form of a complex matrix (gradients to its real and imaginary parts)."""
    from rnnlab.cells.fullunitary import haar_unitary, real_form

    g = torch.Generator().manual_seed(0)
    n = 3
    lens = None if lengths is None else torch.tensor(lengths)
    Q = haar_unitary(n, g)
    ins = (
        torch.randn(T, B, 2 * n, generator=g, dtype=D),
        Q.real + 0.1 * torch.randn(n, n, generator=g, dtype=D),
        Q.imag + 0.1 * torch.randn(n, n, generator=g, dtype=D),
        0.3 * torch.randn(n, generator=g, dtype=D),
        torch.randn(B, 2 * n, generator=g, dtype=D),
    )
    ins = tuple(t.requires_grad_() for t in ins)

    def f(u, a, c, b, h0):
        return modrelu_recurrence(u, real_form(torch.complex(a, c)), b, h0, lens)

    def r(u, a, c, b, h0):
        return reference_modrelu_recurrence(u, real_form(torch.complex(a, c)), b, h0, lens)

    a, b = f(*ins), r(*ins)
    for p, q in zip(a, b):
        torch.testing.assert_close(p, q)
    w = [torch.randn(p.shape, generator=g, dtype=D) for p in a]
    g1 = torch.autograd.grad(sum((p * v).sum() for p, v in zip(a, w)), ins)
    g2 = torch.autograd.grad(sum((p * v).sum() for p, v in zip(b, w)), ins)
    for p, q in zip(g1, g2):
        torch.testing.assert_close(p, q)
    assert torch.autograd.gradcheck(f, ins)


def test_kernels_refuse_bad_shapes_with_the_sizes():
    u = torch.randn(4, 2, 3)
    with pytest.raises(ValueError, match=r"weight must be \(3, 3\)"):
        residual_recurrence(u, torch.randn(3, 4))
    with pytest.raises(ValueError, match="activation"):
        residual_recurrence(u, torch.randn(3, 3), activation="sigmoid")
    with pytest.raises(ValueError, match="inconsistent coRNN shapes"):
        cornn_recurrence(u, torch.randn(3, 3), torch.zeros(2, 3), torch.zeros(2, 3), 0.1, 1.0, 1.0)
    with pytest.raises(ValueError, match="inconsistent LEM shapes"):
        lem_recurrence(u, torch.randn(9, 3), torch.randn(3, 3), torch.zeros(2, 3), torch.zeros(2, 3), 1.0)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"cls": AntisymmetricRNNCell, "eps": 0.0}, "eps must be a positive number"),
        ({"cls": LipschitzRNNCell, "beta": 1.5}, r"beta must be in \[0, 1\]"),
        ({"cls": IncrementalRNNCell, "rank": 9}, "rank must be None"),
        ({"cls": IncrementalRNNCell, "steps": 0}, "steps must be a positive integer"),
        ({"cls": SoftOrthRNNCell, "margin": 1.0}, r"margin must be None .* or in \[0, 1\)"),
        ({"cls": CoRNNCell, "dt": -1.0}, "dt must be a positive number"),
        ({"cls": MomentumLSTMCell, "init": "xavier"}, "init must be 'paper' or 'default'"),
        ({"cls": FCURNNCell, "init": "svd"}, "init must be 'haar' or 'identity'"),
    ],
)
def test_bad_options_are_one_line_errors(kw, match):
    kw = dict(kw)
    cls = kw.pop("cls")
    with pytest.raises(ValueError, match=match) as info:
        cls(2, 8, **kw)
    assert "\n" not in str(info.value)


# --- second-order gradients: right, or refused with the way out --------------------------------

SECOND = [
    ("momentumlstm", {}),
    ("fcurnn", {}),
    ("softorth", {"penalty": 0.1}),
    ("kru", {"factors": [2], "penalty": 0.1}),
    ("antisymrnn", {}),
    ("antisymrnn", {"gated": True}),
    ("incrnn", {}),
    ("incrnn", {"steps": 2}),
    ("naisnet", {}),
    ("lipschitz", {}),
    ("cornn", {}),
    ("lem", {}),
]


def _probe(layer, x):
    """The gradient over the parameters of ||dL/dx||^2 (a gradient penalty)."""
    x = x.clone().requires_grad_()
    out, h_n = layer(x)
    loss = out.pow(2).sum() + sum(h.sin().sum() for h in _leaves(h_n))
    (gx,) = torch.autograd.grad(loss, x, create_graph=True)
    return torch.autograd.grad(gx.pow(2).sum(), list(layer.parameters()), allow_unused=True)


@pytest.mark.parametrize("key,kw", SECOND, ids=[f"{k}-{'-'.join(kw) or 'default'}" for k, kw in SECOND])
def test_second_order_gradients_are_right_or_refused(key, kw):
    torch.manual_seed(0)
    layer = Recurrent(2, 4, cell=CELLS[key], **kw).double()
    x = torch.randn(4, 2, 2, dtype=D)
    ref = copy.deepcopy(layer)
    for c in ref.cells:
        c.backend = "reference"
    want = _probe(ref, x)
    try:
        got = _probe(layer, x)
    except RuntimeError as e:  # refused: the message names the way out
        assert "backend='reference'" in str(e), str(e)
        return
    for a, b in zip(got, want):
        if b is None:
            assert a is None or a.abs().max() < 1e-10
        else:
            torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("key", ["antisymrnn", "lipschitz", "cornn", "lem", "fcurnn", "momentumlstm"])
def test_reference_backend_passes_gradgradcheck(key):
    from torch.func import functional_call

    torch.manual_seed(0)
    layer = Recurrent(2, 4, cell=CELLS[key], backend="reference").double()
    names = [n for n, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())
    x = torch.randn(3, 2, 2, dtype=D, requires_grad=True)

    def f(x, *ps):
        out, h_n = functional_call(layer, dict(zip(names, ps)), (x,))
        return (out, *_leaves(h_n))

    assert torch.autograd.gradgradcheck(f, (x, *params), fast_mode=True)


# --- the analysis tools work for the new cells ------------------------------------------------


@pytest.mark.parametrize("key", NEW)
def test_jacobian_spectra_and_schur_views(key):
    """Step Jacobians (autograd, through the cell's step) equal central differences of the step;
    the lag spectrum of their products is finite; cells with a square recurrent matrix get a
    Schur view that reconstructs it (the full-capacity uRNN's real form: every eigenvalue on the
    unit circle; AntisymmetricRNN's: real parts -gamma)."""
    from rnnlab.analysis.jacobian import _flat, _unflat, analyze_model, step_jacobians
    from rnnlab.analysis.schur import cell_schur_views
    from rnnlab.model import SequenceModel

    torch.manual_seed(0)
    model = SequenceModel(key, 1, 10, 8, readout="last").double()
    x = torch.randn(10, 1, dtype=D)
    res = analyze_model(model, x, max_lag=9)
    spec = res["spectrum"]
    assert len(spec.lags) == 9 and np.isfinite(spec.sigma_max).all() and np.isfinite(spec.qr_min).all()
    cell = model.rnn.cells[0]
    states, J = step_jacobians(cell, x[:3])
    s1 = _flat(states[1])[0]
    eps = 1e-6
    for k in range(s1.shape[0]):
        e = torch.zeros_like(s1)
        e[k] = eps
        up = _flat(cell(x[1:2], _unflat((s1 + e)[None], states[1]))[1])[0]
        down = _flat(cell(x[1:2], _unflat((s1 - e)[None], states[1]))[1])[0]
        torch.testing.assert_close(J[1][:, k], ((up - down) / (2 * eps)).detach(), rtol=1e-6, atol=1e-8)
    views = cell_schur_views(model)
    if cell.recurrent_matrix() is None:
        assert views == []
        return
    (view,) = views
    assert view.extra["reconstruction_error"] < 1e-10
    if key == "fcurnn":  # built in float32 (its Haar base rounded there), then made float64
        assert abs(np.abs(view.eigenvalues) - 1).max() < 1e-6
    if key == "antisymrnn":
        assert abs(view.eigenvalues.real + cell.gamma).max() < 1e-10


@pytest.mark.parametrize("key", NEW)
def test_checkpointed_chunks_equal_the_whole_sequence(key):
    """Time-chunked recomputation (``checkpoint_chunk``) gives the same outputs and gradients,
    with lengths (chunks past a sequence's end) and, for MomentumLSTM, a carried momentum."""
    torch.manual_seed(0)
    chunked = Recurrent(2, 6, cell=CELLS[key], checkpoint_chunk=3).double()
    whole = copy.deepcopy(chunked)
    whole.checkpoint_chunk = None
    x = torch.randn(8, 3, 2, dtype=D)
    results = []
    for layer in (chunked, whole):
        xx = x.clone().requires_grad_()
        out, h_n = layer(xx, lengths=torch.tensor([8, 2, 5]))
        loss = out.pow(2).sum() + sum(h.sum() for h in _leaves(h_n))
        results.append((out, torch.autograd.grad(loss, [xx, *layer.parameters()])))
    torch.testing.assert_close(results[0][0], results[1][0])
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b)


def _graph_nodes(roots):
    seen, stack = set(), [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return seen


@pytest.mark.parametrize("key", sorted(CELLS))
def test_no_fast_path_selects_time_steps_out_of_a_graph(key):
    """A step loop that reads ``u[t]`` out of a (T, B, H) tensor in the autograd graph makes
    backward fill a zero (T, B, H) gradient per step: O(T^2) work and memory traffic (the uRNN
    at psMNIST's T = 784, N = 512 took 250 s for one step; 12 s with ``unbind``). In every
    registered layer's graph the selects out of a T-long dimension (the last state as h_n) do
    not grow with T."""

    def selects(Tn):
        torch.manual_seed(0)
        layer = Recurrent(2, 6, cell=CELLS[key])
        out, h_n = layer(torch.randn(Tn, 3, 2, requires_grad=True))
        return sum(
            1
            for n in _graph_nodes([out.grad_fn, *(h.grad_fn for h in _leaves(h_n))])
            if type(n).__name__ == "SelectBackward0" and n._saved_dim == 0 and n._saved_self_sym_sizes[0] == Tn
        )

    assert selects(9) == selects(5) <= 2, key


def test_momentumlstm_fast_path_gives_an_initial_momentum_its_gradient():
    """Before: a zero initial momentum that requires grad took the ATen fast path (exact only
    from a constant zero) and got no gradient; the step loop gives it one (up to 0.65 here)."""
    torch.manual_seed(0)
    cell = MomentumLSTMCell(3, 4).double()
    x = torch.randn(5, 2, 3, dtype=torch.float64)

    def grads(backend):
        cell.backend = backend
        state = [torch.zeros(2, 4, dtype=torch.float64, requires_grad=True) for _ in range(6)]
        out, _ = cell.sequence(x, tuple(state))
        out.sum().backward()
        return [s.grad for s in state]

    fast, ref = grads("auto"), grads("reference")
    assert all(g is not None for g in fast)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert max(g.abs().max().item() for g in ref[2:]) > 0.1  # the momentum's gradient is not trivially zero
