"""Fisher memory curves (against closed forms and exact rational arithmetic) and Schur views."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from rnnlab import ExpRNNCell, NNRNNCell, RNNCell
from rnnlab.analysis import (
    cell_schur_views,
    delay_line_fmc,
    feedforward_matrix,
    fisher_memory_curve,
    matrix_schur_view,
    noise_covariance,
    real_schur,
    schur_view,
)
from rnnlab.cells.layers import Recurrent

torch.set_num_threads(1)


def e1(n):
    v = np.zeros(n)
    v[0] = 1.0
    return v


@pytest.mark.parametrize("a", [0.9, 1.0, 1.05, 1.5])
def test_delay_line_closed_form(a):
    """Delay line with sqrt(a) on the sub-diagonal: J(k) = a^k (a-1)/(a^(k+1)-1) for k < N,
    then 0 (nilpotent)."""
    N = 30
    V = math.sqrt(a) * np.eye(N, k=-1)
    J = fisher_memory_curve(V, e1(N), steps=40)
    assert np.allclose(J, delay_line_fmc(a, 40, N), rtol=1e-10, atol=1e-14)
    assert np.all(J[N:] == 0)


def test_fig1_class_with_alpha_on_subdiagonal_is_the_closed_form_at_alpha_squared():
    N = 25
    J = fisher_memory_curve(feedforward_matrix(N, 1.05), e1(N), steps=N)
    assert np.allclose(J, delay_line_fmc(1.05**2, N, N), rtol=1e-10)


def test_normal_networks_have_unit_total_fisher_memory():
    """Ganguli et al.: for a normal V (rho < 1, Sigma = I) sum_k J(k) = |v|^2."""
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((12, 12)))
    V = 0.8 * Q
    v = rng.standard_normal(12)
    v /= np.linalg.norm(v)
    J = fisher_memory_curve(V, v, steps=400)
    assert J.sum() == pytest.approx(1.0, rel=1e-9)


def test_total_fisher_memory_is_at_most_N():
    rng = np.random.default_rng(1)
    N = 10
    for _ in range(5):
        V = rng.standard_normal((N, N)) * 0.9 / math.sqrt(N)
        V *= 0.95 / max(1.0, np.abs(np.linalg.eigvals(V)).max())
        v = rng.standard_normal(N)
        J = fisher_memory_curve(V, v / np.linalg.norm(v), steps=2000)
        # sum_k V^k v v^T V^kT <= |v|^2 C, so the total is tr(C^-1 C_signal) <= N |v|^2
        assert 1.0 - 1e-9 <= J.sum() <= N + 1e-8


def _exact_fmc(M, v, S, horizon, steps):
    """J(k) with Fractions: C = sum_{m<horizon} M^m S M^mT, Gauss-Jordan solve."""
    n = len(M)
    mul = lambda A, B: [[sum(A[i][k] * B[k][j] for k in range(n)) for j in range(n)] for i in range(n)]  # noqa: E731
    tr = lambda A: [list(r) for r in zip(*A)]  # noqa: E731
    C = [[Fraction(0)] * n for _ in range(n)]
    for _ in range(horizon):
        C = mul(mul(M, C), tr(M))
        C = [[C[i][j] + S[i][j] for j in range(n)] for i in range(n)]
    out, x = [], list(v)
    for _ in range(steps):
        aug = [C[i][:] + [x[i]] for i in range(n)]
        for c in range(n):
            p = next(r for r in range(c, n) if aug[r][c] != 0)
            aug[c], aug[p] = aug[p], aug[c]
            for r in range(n):
                if r != c and aug[r][c] != 0:
                    f = aug[r][c] / aug[c][c]
                    aug[r] = [a - f * b for a, b in zip(aug[r], aug[c])]
        y = [aug[i][n] / aug[i][i] for i in range(n)]
        out.append(sum(a * b for a, b in zip(x, y)))
        x = [sum(M[i][k] * x[k] for k in range(n)) for i in range(n)]
    return np.array([float(j) for j in out])


def test_fmc_matches_exact_rational_arithmetic():
    """A non-normal matrix of the Fig. 1 class with a diagonal (so not nilpotent), a finite
    noise horizon and a non-identity noise covariance, against exact arithmetic."""
    n = 6
    a, b, d = Fraction(3, 2), Fraction(1, 10), Fraction(1, 5)
    M = [[d if i == j else a if i == j + 1 else b if i >= j + 2 else Fraction(0) for j in range(n)] for i in range(n)]
    S = [
        [Fraction(2) if i == j else Fraction(1, 2) if abs(i - j) == 1 else Fraction(0) for j in range(n)]
        for i in range(n)
    ]
    v = [Fraction(1), Fraction(0), Fraction(-1, 2), Fraction(0), Fraction(0), Fraction(1, 3)]
    exact = _exact_fmc(M, v, S, horizon=9, steps=8)
    Mf = np.array([[float(x) for x in r] for r in M])
    Sf = np.array([[float(x) for x in r] for r in S])
    got = fisher_memory_curve(Mf, np.array([float(x) for x in v]), Sf, steps=8, noise_steps=9)
    assert np.allclose(got, exact, rtol=1e-10)
    C = noise_covariance(Mf, Sf, noise_steps=9)
    assert np.all(np.linalg.eigvalsh(C) > 0)


def test_stationary_noise_solves_the_lyapunov_equation():
    M = feedforward_matrix(8, 1.2, 0.05, 0.3)
    C = noise_covariance(M)
    assert np.allclose(M @ C @ M.T + np.eye(8), C, rtol=1e-10)


def test_fmc_errors():
    with pytest.raises(ValueError, match="spectral radius"):
        fisher_memory_curve(np.eye(3), e1(3))
    J = fisher_memory_curve(np.eye(3), e1(3), steps=3, noise_steps=10)
    assert np.allclose(J, 0.1)  # C = 10 I
    with pytest.raises(ValueError, match="square"):
        fisher_memory_curve(np.ones((2, 3)), e1(2))
    with pytest.raises(ValueError, match="fill"):
        feedforward_matrix(5, 1.0, fill="diag")


def test_feedforward_matrix_class():
    M = feedforward_matrix(5, 2.0, 0.5, 0.1)
    assert np.allclose(np.diag(M), 0.1) and np.allclose(np.diag(M, -1), 2.0)
    assert np.allclose(M[np.tril_indices(5, -2)], 0.5) and np.allclose(np.triu(M, 1), 0)
    band = feedforward_matrix(5, 2.0, 0.5, 0.1, fill="band")
    assert np.allclose(np.diag(band, -2), 0.5) and band[4, 0] == 0


def test_real_schur_is_lower_and_reconstructs():
    rng = np.random.default_rng(2)
    W = rng.standard_normal((9, 9))
    Theta, Z = real_schur(W)
    assert np.allclose(Z @ Theta @ Z.T, W, atol=1e-10)
    assert np.allclose(np.triu(Theta, 2), 0, atol=1e-12)
    view = schur_view(Theta)
    assert sum(s for _, s in view.blocks) == 9
    assert np.allclose(np.sort_complex(view.eigenvalues), np.sort_complex(np.linalg.eigvals(W)), atol=1e-9)
    # Henrici's departure from normality is basis-invariant: the same from W and from Theta
    dep = math.sqrt(np.sum(W**2) - np.sum(np.abs(np.linalg.eigvals(W)) ** 2)) / np.linalg.norm(W)
    assert view.departure == pytest.approx(dep, rel=1e-8)


def test_orthogonal_matrix_view_is_normal_rotation_blocks():
    W = ExpRNNCell(3, 16, init="henaff").recurrent_matrix().detach().double()
    view = matrix_schur_view(W)
    assert view.departure < 1e-6
    assert view.mean_modulus == pytest.approx(1.0, abs=1e-6)
    assert len(view.block_angles) == 8


def test_nnrnn_views_use_the_learned_schur_form():
    torch.manual_seed(0)
    layer = Recurrent(3, 8, cell=NNRNNCell)
    cell = layer.cells[0]
    with torch.no_grad():
        cell.gamma.copy_(torch.tensor([0.9, 1.0, 1.1, 1.2]))
        cell.theta.copy_(torch.tensor([0.3, 1.0, 2.0, 2.9]))
        cell.T.normal_(0, 0.2)
    (view,) = cell_schur_views(layer)
    assert view.mean_modulus == pytest.approx(1.05, rel=1e-6)
    assert np.allclose(np.sort(view.block_angles), [0.3, 1.0, 2.0, 2.9], atol=1e-6)
    assert view.extra["gamma_mean"] == pytest.approx(1.05, rel=1e-6)
    # the same statistics from V through scipy: eigenvalues and departure are basis-invariant
    other = matrix_schur_view(cell.recurrent_matrix().detach().double())
    assert other.mean_modulus == pytest.approx(view.mean_modulus, rel=1e-5)
    assert other.departure == pytest.approx(view.departure, rel=1e-4)
    # T = 0: normal
    with torch.no_grad():
        cell.T.zero_()
    assert cell_schur_views(layer)[0].departure == 0.0


def test_cells_without_a_square_recurrent_matrix_are_skipped():
    from rnnlab import LSTMCell

    model = torch.nn.ModuleList([LSTMCell(3, 4), RNNCell(3, 5)])
    views = cell_schur_views(model)
    assert len(views) == 1 and views[0].Theta.shape == (5, 5)
