"""Orthogonal maps, dynamic trivialization, positive diagonal and the initialisers."""

import math

import pytest
import torch
from torch.nn.utils import parametrize as P

from rnnlab import parametrize as par


class Holder(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.W = torch.nn.Parameter(torch.empty(n, n))


def expm_skew_numpy(A):
    """Second route to exp(A - A^T): scipy's Pade approximant."""
    import numpy as np
    from scipy.linalg import expm

    U = np.triu(A, 1)
    return expm(U - U.T)


@pytest.mark.parametrize("map,K,M", [("expm", None, None), ("cayley", None, None), ("expm", 10, 3)])
def test_orthogonal_after_1000_optimizer_steps(map, K, M):
    torch.manual_seed(0)
    m = Holder(16)
    par.orthogonal_(m, "W", map=map, init="henaff", K=K, M=M)
    opt = torch.optim.RMSprop(m.parameters(), lr=1e-2)
    target = torch.randn(16, 16)
    x = torch.randn(32, 16)
    for _ in range(1000):
        loss = ((x @ m.W.T - x @ target.T) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        par.after_optimizer_step(m)
    assert par.orthogonality_error(m.W.detach()) < 1e-5
    if K:
        p = m.parametrizations.W[0]
        assert int(p.steps) == 1000 and int(p.rebases) == 100


def test_expm_map_matches_an_independent_matrix_exponential():
    torch.manual_seed(1)
    A = torch.randn(7, 7, dtype=torch.float64)
    ours = par.Orthogonal(7, "expm").double()(A)
    torch.testing.assert_close(ours, torch.from_numpy(expm_skew_numpy(A.numpy())))


def test_cayley_map_definition():
    torch.manual_seed(2)
    A = torch.randn(6, 6, dtype=torch.float64)
    X = par.skew(A)
    eye = torch.eye(6, dtype=torch.float64)
    ours = par.Orthogonal(6, "cayley").double()(A)
    torch.testing.assert_close(ours, torch.inverse(eye + X) @ (eye - X))


@pytest.mark.parametrize("map", ["expm", "cayley"])
def test_gradcheck_orthogonal_maps_float64(map):
    torch.manual_seed(3)
    p = par.Orthogonal(5, map).double()
    p.base.copy_(par.random_orthogonal(5).double())
    p.d.copy_(torch.tensor([1.0, 1, -1, 1, -1]))
    A = torch.randn(5, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(p, (A,))


def test_gradcheck_positive_diagonal():
    s = torch.tensor([0.3, -0.7, 1.2], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(par.PositiveDiagonal(1e-3), (s,))
    assert torch.all(par.PositiveDiagonal(0.1)(torch.tensor([0.0, -2.0])) == torch.tensor([0.1, 2.1]))


def test_rebase_keeps_the_matrix_and_resets_the_parameter():
    torch.manual_seed(4)
    m = Holder(8)
    p = par.orthogonal_(m, "W", init="haar", K=1, M=1)
    with torch.no_grad():
        m.parametrizations.W.original.add_(0.1 * torch.randn(8, 8))
    before = m.W.detach().clone()
    par.after_optimizer_step(m)
    torch.testing.assert_close(m.W.detach(), before, atol=1e-5, rtol=0)
    assert m.parametrizations.W.original.abs().max() == 0
    assert int(p.rebases) == 1 and par.orthogonality_error(p.base) < 1e-6


def _blocks(A):
    n = A.shape[0]
    k = torch.arange(n // 2)
    return A[2 * k, 2 * k + 1], A[2 * k + 1, 2 * k]


def _off_block_zero(A):
    mask = torch.ones_like(A, dtype=torch.bool)
    k = torch.arange(A.shape[0] // 2)
    mask[2 * k, 2 * k + 1] = mask[2 * k + 1, 2 * k] = False
    return A[mask].abs().max().item() == 0


def test_henaff_init_blocks_and_range():
    g = torch.Generator().manual_seed(5)
    A = par.henaff_skew(400, g)
    upper, lower = _blocks(A)
    assert _off_block_zero(A) and torch.equal(upper, -lower)
    assert upper.min() >= -math.pi and upper.max() <= math.pi
    assert upper.min() < -2.5 and upper.max() > 2.5  # spans the range
    assert par.henaff_skew(400, g, high=0.0)[0::2, 1::2].max() <= 0


def test_cayley_init_blocks_and_range():
    g = torch.Generator().manual_seed(6)
    A = par.cayley_skew(400, g)
    upper, lower = _blocks(A)
    assert _off_block_zero(A) and torch.equal(upper, -lower)
    # s = -sqrt((1 - cos u)/(1 + cos u)) = -tan(u/2) with u in (0, pi/2): s in (-1, 0)
    assert upper.max() <= 0 and upper.min() >= -1.0 and upper.min() < -0.9


def test_haar_init_is_special_orthogonal_through_the_log():
    g = torch.Generator().manual_seed(7)
    for map in ("expm", "cayley"):
        A, base = par.initial_skew("haar", 12, map, g)
        torch.testing.assert_close(A, -A.T)
        W = par.Orthogonal(12, map)(A)
        assert par.orthogonality_error(W) < 1e-5
        assert abs(torch.linalg.det(W.double()).item() - 1) < 1e-5
        torch.testing.assert_close(base, torch.eye(12))
    Q = par.random_orthogonal(12, g, special=True)
    torch.testing.assert_close(torch.linalg.matrix_exp(par.orthogonal_log(Q).double()), Q.double(), atol=1e-5, rtol=0)


def test_random_and_identity_inits():
    g = torch.Generator().manual_seed(8)
    A, base = par.initial_skew("random", 9, "expm", g)
    assert A.abs().max() == 0 and par.orthogonality_error(base) < 1e-5
    A, base = par.initial_skew("identity", 9, "expm", g)
    assert A.abs().max() == 0 and torch.equal(base, torch.eye(9))
    with pytest.raises(ValueError, match="initialiser"):
        par.initial_skew("glorot", 9, "expm")
    S = par.semi_orthogonal(4, 10, g)
    torch.testing.assert_close(S @ S.T, torch.eye(4), atol=1e-5, rtol=0)


def test_map_is_evaluated_once_per_sequence(monkeypatch):
    from rnnlab import ExpRNNCell, unroll

    calls = []
    real = torch.linalg.matrix_exp
    monkeypatch.setattr(torch.linalg, "matrix_exp", lambda X: calls.append(1) or real(X))
    cell = ExpRNNCell(3, 6, backend="reference")
    calls.clear()  # registering the parametrization evaluates it once
    unroll(cell, torch.randn(50, 2, 3))
    assert len(calls) == 1


def test_orthogonal_needs_square_matrix():
    m = torch.nn.Linear(3, 4)
    with pytest.raises(ValueError, match="square"):
        par.orthogonal_(m, "weight")
    assert not P.is_parametrized(m)


# --- the matrix exponential's eigendecomposition backward (expm_skew) ------------------------


@pytest.mark.parametrize("case", ["random", "zero", "repeated"])
def test_expm_skew_backward_equals_torch_float64(case):
    """Gradients of <G, exp(X)> for skew X through the eigendecomposition equal torch's
    matrix_exp backward, also for repeated (Henaff-style blocks) and zero eigenvalues."""
    from rnnlab.parametrize import _ExpmSkew, skew

    n = 70
    torch.manual_seed(0)
    if case == "random":
        X = skew(torch.randn(n, n, dtype=torch.float64))
    elif case == "zero":
        X = torch.zeros(n, n, dtype=torch.float64)
    else:
        X = skew(torch.diag(torch.ones(n - 1, dtype=torch.float64), 1))
    X.requires_grad_()
    G = torch.randn(n, n, dtype=torch.float64)
    (ref,) = torch.autograd.grad((torch.linalg.matrix_exp(X) * G).sum(), X)
    (ours,) = torch.autograd.grad((_ExpmSkew.apply(X) * G).sum(), X)
    torch.testing.assert_close(ours, ref, rtol=1e-11, atol=1e-11 * ref.abs().max().item())


def test_expm_skew_gradcheck_and_use():
    from rnnlab.parametrize import EIG_BACKWARD_MIN_N, _ExpmSkew, expm_skew, skew

    A = torch.randn(6, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda A: _ExpmSkew.apply(skew(A)), (A,))
    big = skew(torch.randn(EIG_BACKWARD_MIN_N, EIG_BACKWARD_MIN_N)).requires_grad_()
    assert expm_skew(big).grad_fn.name().endswith("ExpmSkewBackward")
    torch.testing.assert_close(expm_skew(big), torch.linalg.matrix_exp(big))


@pytest.mark.parametrize("method", ["eig", "taylor", "torch"])
def test_expm_skew_second_derivatives_float64(method):
    """Every method of the matrix exponential is twice differentiable (gradgradcheck); the
    eigendecomposition backward, which builds no graph, hands a backward asked for one to
    torch's. A second-order quantity that depends on X only through the backward (the loss is
    linear in exp(X)) is also right: equal to torch's own."""
    torch.manual_seed(4)
    A = torch.randn(5, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda A: par.expm_skew(par.skew(A), method), (A,))
    C = torch.randn(5, 5, dtype=torch.float64)
    hv = []
    for m in (method, "torch"):
        (g,) = torch.autograd.grad((par.expm_skew(par.skew(A), m) * C).sum(), A, create_graph=True)
        hv.append(torch.autograd.grad(g.pow(2).sum(), A)[0])
    torch.testing.assert_close(hv[0], hv[1], rtol=1e-9, atol=1e-10)


# --- the matrix exponential by Taylor series, scaling and squaring (expm_skew "taylor") -------


def test_taylor_error_bounds_hold_and_are_not_vacuous():
    """The bounds of taylor_error_bounds against the scalar function they bound, evaluated
    directly on the imaginary axis in complex128 at loose settings (bounds far above rounding)."""
    import numpy as np

    for m, s, rho in ((3, 0, 1.0), (4, 0, 1.0), (6, 1, 3.0), (8, 2, 10.0), (5, 3, 6.0)):
        N = 2**s
        t = np.linspace(-rho, rho, 4001)
        w = 1j * t / N
        Tm = sum(w**k / math.factorial(k) for k in range(m + 1))
        Tm1 = sum(w**k / math.factorial(k) for k in range(m))
        value_err = np.abs(Tm**N - np.exp(1j * t)).max()
        grad_err = np.abs(Tm ** (N - 1) * Tm1 - np.exp(1j * t)).max()  # f'(it) - e^{it}
        bv, bg = par.taylor_error_bounds(m, s, rho)
        assert value_err <= bv and grad_err <= bg, (m, s, rho)
        assert bv < 10 * value_err and bg < 10 * grad_err, (m, s, rho)  # and close to sharp


@pytest.mark.parametrize("u", [2.0**-53, 2.0**-24])
def test_taylor_plan_meets_the_bound_in_the_fewest_products(u):
    for rho in (0.0, 1e-9, 1e-4, 0.03, 0.7, 1.0, math.pi, 10.0, 77.0, 1e3, 1e5):
        m, s, q, cost = par.taylor_plan(rho, u)
        assert max(par.taylor_error_bounds(m, s, rho)) <= u
        assert cost == par._ps_products(m, q) + s
        # no cheaper (degree, squarings) pair meets both bounds (brute force)
        for m2 in range(1, 31):
            for s2 in range(0, 60):
                if max(par.taylor_error_bounds(m2, s2, rho)) <= u:
                    assert par._ps_best(m2)[0] + s2 >= cost, (rho, m2, s2)
                    break
    with pytest.raises(ValueError, match="finite"):
        par.taylor_plan(math.inf, u)


def _skew_case(case, n, dtype=torch.float64):
    g = torch.Generator().manual_seed(n)
    if case == "zero":
        return torch.zeros(n, n, dtype=dtype)
    if case == "henaff":  # repeated eigenvalue pairs +-i s_k, ||X|| <= pi
        return par.skew(par.henaff_skew(n, g).to(dtype))
    scale = {"tiny": 1e-7, "small": 1e-3, "unit": 1.0, "pi": math.pi, "large": 40.0, "huge": 900.0}[case]
    X = par.skew(torch.randn(n, n, generator=g, dtype=torch.float64))
    return (X * (scale / torch.linalg.matrix_norm(X, 2))).to(dtype)  # spectral radius = scale


@pytest.mark.parametrize("case", ["zero", "tiny", "small", "unit", "henaff", "pi", "large", "huge"])
@pytest.mark.parametrize("n", [9, 100])
def test_expm_taylor_equals_matrix_exp_and_its_gradient_float64(case, n):
    """Values and gradients of the Taylor evaluation against torch.linalg.matrix_exp (values,
    autograd) and the eigendecomposition backward, float64. Tolerance: both methods' truncation
    errors are <= u = 2^-53 by construction; rounding adds about n u per product of norm-1
    matrices and doubles at each of the s squarings, so 4 (products + 2^(s+1)) n u relative
    (Frobenius) covers both methods' rounding."""
    X = _skew_case(case, n).requires_grad_()
    G = torch.randn(n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    Q = par.expm_skew(X, "taylor")
    ref = torch.linalg.matrix_exp(X)
    (g_ours,) = torch.autograd.grad((Q * G).sum(), X)
    (g_torch,) = torch.autograd.grad((ref * G).sum(), X)
    (g_eig,) = torch.autograd.grad((par._ExpmSkew.apply(X) * G).sum(), X)
    with torch.no_grad():
        X2 = X @ X
        rho = min(torch.linalg.matrix_norm(X, 1).item(), math.sqrt(torch.linalg.matrix_norm(X2, 1).item()))
    m, s, q, cost = par.taylor_plan(rho, 2.0**-53)
    tol = 4 * (cost + 2 ** (s + 1)) * n * 2.0**-53

    def rel(a, b):
        return ((a - b).norm() / b.norm()).item()

    assert rel(Q, ref) <= tol
    assert rel(g_ours, g_torch) <= tol and rel(g_ours, g_eig) <= tol
    assert par.orthogonality_error(Q.detach()) <= tol


@pytest.mark.parametrize("scale", [1e-3, 1.0, 6.0, 50.0])
def test_expm_taylor_gradcheck(scale):
    """gradcheck at n=6 (with squarings at the larger norms): the backward is the adjoint of
    the evaluation that produces the values."""
    g = torch.Generator().manual_seed(3)
    A = (torch.randn(6, 6, dtype=torch.float64, generator=g) * scale).requires_grad_()
    assert torch.autograd.gradcheck(lambda A: par.expm_skew(par.skew(A), "taylor"), (A,))


def test_expm_taylor_float32_no_less_accurate_than_the_eig_path():
    """float32 values and gradients against the float64 eigendecomposition result, n=128,
    dense skew X (spectral radius pi, 1-norm much larger) and Henaff's blocks: the Taylor
    evaluation's relative error is at most the eig path's or 1e-6 (at n=1024 it measured 3.5e-7
    against 2.3e-6 for the gradient of a dense X)."""
    n = 128
    G = torch.randn(n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for case in ("pi", "henaff"):
        X64 = _skew_case(case, n).requires_grad_()
        Q64 = par._ExpmSkew.apply(X64)
        (g64,) = torch.autograd.grad((Q64 * G).sum(), X64)
        errs = {}
        for method in ("eig", "taylor"):
            X = X64.detach().float().requires_grad_()
            Q = par.expm_skew(X, method)
            (g,) = torch.autograd.grad((Q * G.float()).sum(), X)
            errs[method] = (
                ((Q.double() - Q64).norm() / Q64.norm()).item(),
                ((g.double() - g64).norm() / g64.norm()).item(),
                par.orthogonality_error(Q.detach().double()),
            )
        assert all(t <= max(e, 1e-6) for t, e in zip(errs["taylor"], errs["eig"])), (case, errs)


def test_expm_skew_dispatch(monkeypatch):
    """'auto' takes the Taylor evaluation from TAYLOR_MIN_N on when a gradient is needed, the
    eigendecomposition backward from EIG_BACKWARD_MIN_N, torch below and without a gradient;
    EXPM_METHOD switches the default; the old paths stay reachable."""
    calls = []
    real = par.expm_skew_taylor
    monkeypatch.setattr(par, "expm_skew_taylor", lambda X: calls.append(X.shape[0]) or real(X))

    def grad_fn(n, **kw):
        X = _skew_case("unit", n, torch.float32).requires_grad_()
        return par.expm_skew(X, **kw).grad_fn.name()

    calls.clear()
    grad_fn(par.TAYLOR_MIN_N)
    assert calls == [par.TAYLOR_MIN_N]
    assert grad_fn(par.TAYLOR_MIN_N - 1).endswith("ExpmSkewBackward")
    assert "MatrixExp" in grad_fn(par.EIG_BACKWARD_MIN_N - 1)
    assert "MatrixExp" in grad_fn(par.TAYLOR_MIN_N, method="torch")
    assert grad_fn(par.TAYLOR_MIN_N, method="eig").endswith("ExpmSkewBackward")
    calls.clear()
    par.expm_skew(_skew_case("unit", par.TAYLOR_MIN_N, torch.float32))  # no gradient: torch's
    assert calls == []
    monkeypatch.setattr(par, "EXPM_METHOD", "eig")
    assert grad_fn(par.TAYLOR_MIN_N).endswith("ExpmSkewBackward")
    # through the parametrization: an expm Orthogonal at n >= TAYLOR_MIN_N uses the Taylor path
    monkeypatch.setattr(par, "EXPM_METHOD", "auto")
    m = Holder(par.TAYLOR_MIN_N)
    par.orthogonal_(m, "W", "expm", "henaff")
    calls.clear()
    m.W.sum().backward()
    assert calls == [par.TAYLOR_MIN_N]
    with pytest.raises(ValueError, match="'pade'"):
        par.expm_skew(_skew_case("unit", 4), "pade")


def test_expm_taylor_non_finite_and_huge_arguments():
    """A diverged parameter (NaN or inf in X) gives a non-finite W as torch's matrix_exp does,
    never an exception (the trainer reports the non-finite loss as divergence); a finite X
    whose square overflows float32 still gives an orthogonal result."""
    n = par.TAYLOR_MIN_N
    for bad in (float("nan"), float("inf")):
        X = _skew_case("unit", n, torch.float32)
        X[0, 1], X[1, 0] = bad, -bad
        X.requires_grad_()
        Q = par.expm_skew(X, "taylor")
        assert not torch.isfinite(Q).all()
        Q.sum().backward()  # no exception on the way back either
    # large norms in float32: 1e3 (17 squarings) stays orthogonal to 1e-4 (torch's matrix_exp:
    # 1.5e-4 here); at 1e20 (past the cap) it is torch's result, whatever that is
    X = (_skew_case("unit", n) * 1e3).float()
    Q = par.expm_skew(X.requires_grad_(), "taylor")
    assert par.orthogonality_error(Q.detach().double()) < 1e-4
    X = (_skew_case("unit", n) * 1e20).float()
    torch.testing.assert_close(par.expm_skew(X.requires_grad_(), "taylor"), torch.linalg.matrix_exp(X), equal_nan=True)
