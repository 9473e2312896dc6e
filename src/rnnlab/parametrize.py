"""Orthogonal and positive-diagonal parametrizations, and the initialisers of the papers.

An orthogonal weight is ``W = base @ phi(A - A^T) @ diag(d)`` where ``A``'s strict upper
triangle is the free parameter (its lower triangle gets zero gradient), ``phi`` is the
matrix exponential (expRNN) or the Cayley map ``(I + X)^{-1} (I - X)`` (scoRNN), ``base`` is
a buffer (identity unless re-based) and ``d`` a fixed +-1 vector (scoRNN's scaling D, all
ones otherwise). Everything is built on ``torch.nn.utils.parametrize``, so inside
``torch.nn.utils.parametrize.cached()`` (which :func:`rnnlab.unroll` enters) the map is
evaluated once per sequence, not once per time step.

Dynamic trivialization (Lezcano-Casado 2019; "dtriv" with K, M): every K optimizer steps
``base <- W`` and ``A <- 0``; every M such re-bases ``base`` is projected back onto O(n) by
its polar factor ``U V^T`` (SVD). K = None is the static map. The trainer calls
:func:`after_optimizer_step` after each step; call it yourself in a custom loop.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize as P

from .kernels.amp import float32_region, full_precision

MAPS = ("expm", "cayley")
INITS = ("identity", "henaff", "cayley", "haar", "random")


def skew(A: Tensor) -> Tensor:
    """The skew-symmetric matrix ``triu(A, 1) - triu(A, 1)^T`` built from A's upper triangle."""
    U = A.triu(1)
    return U - U.transpose(-2, -1)


#: ``expm_skew``'s "auto" takes the eigendecomposition backward from this size on, below
#: :data:`TAYLOR_MIN_N` (below it the block-matrix backward of ``torch.linalg.matrix_exp`` is
#: cheap anyway)
EIG_BACKWARD_MIN_N = 64


class _ExpmSkew(torch.autograd.Function):
    """``matrix_exp(X)`` for a skew-symmetric X with a cheaper backward.

    torch's backward of ``matrix_exp`` exponentiates a 2n x 2n block matrix (3.5 s of CPU at
    n = 1024 against 0.24 s for the forward). For a skew-symmetric (hence normal) X, ``iX`` is
    Hermitian: ``X = V diag(i theta) V^H`` with V unitary (``torch.linalg.eigh``), and the
    gradient of ``<G, exp(X)>`` is ``Re(V [(V^H G V) * conj(Phi)] V^H)`` with the divided
    differences ``Phi_jk = (e^{i theta_j} - e^{i theta_k}) / (i theta_j - i theta_k)``
    (``e^{i theta_k}`` when they coincide), written as
    ``e^{i theta_k} (sinc(delta) + i sin(delta / 2) sinc(delta / 2))``, ``delta = theta_j - theta_k``,
    which is stable for close eigenvalues. The forward is ``torch.linalg.matrix_exp`` itself.
    Tested against torch's backward in float64 and with gradcheck. A backward asked for a graph
    of itself (``create_graph=True``) takes torch's differentiable backward instead."""

    @staticmethod
    def forward(ctx, X: Tensor) -> Tensor:
        Q = torch.linalg.matrix_exp(X)
        ctx.save_for_backward(X)
        return Q

    @staticmethod
    def backward(ctx, G: Tensor) -> Tensor:
        (X,) = ctx.saved_tensors
        if torch.is_grad_enabled():
            # a graph of the backward is asked for (create_graph=True): torch's own backward of
            # matrix_exp, which is differentiable (so second derivatives are exact)
            Q = torch.linalg.matrix_exp(X)
            return torch.autograd.grad(Q, X, G, create_graph=True)[0]
        cdtype = torch.complex128 if X.dtype == torch.float64 else torch.complex64
        theta, V = torch.linalg.eigh(1j * X.to(cdtype))  # iX = V diag(theta) V^H: X = V diag(-i theta) V^H
        theta = -theta
        delta = theta[:, None] - theta[None, :]
        half = 0.5 * delta
        phi = torch.polar(torch.ones_like(theta), theta)[None, :] * torch.complex(
            torch.sinc(delta / math.pi), torch.sin(half) * torch.sinc(half / math.pi)
        )
        Vh = V.mH
        inner = (Vh @ G.to(cdtype) @ V) * phi.conj()
        return (V @ inner @ Vh).real.to(X.dtype)


# --- the matrix exponential of a skew matrix by Taylor series, scaling and squaring --------
#
# For skew-symmetric X (normal, eigenvalues i theta with |theta| <= rho = ||X||_2) every
# polynomial f(X) acts on the eigenvalues, and the gradient of <G, f(X)> is
# V [(V^H G V) * conj(F)] V^H with the divided differences F_jk = f[i theta_j, i theta_k]. The
# evaluation below is f(z) = T_m(z / N)^N, N = 2^s, with T_m the degree-m Taylor polynomial of
# exp, and its backward is autograd's exact adjoint of that evaluation. So the values differ
# from exp(X) by at most max |f(it) - e^{it}| and the gradient from the true gradient by at
# most max |f'(it) - e^{it}| * ||G||_F (|t| <= rho; a divided difference is an average of
# f' - exp over the segment between two eigenvalues, which lies on [-i rho, i rho]).
# With tau = rho / N and delta_k = tau^{k+1} / (k+1)! (|e^{iw} - T_k(iw)| <= delta_k for
# |w| <= tau, Taylor's remainder):
#   value:    |T_m^N - e^{Nw}|  <= N delta_m (1 + delta_m)^{N-1}
#   gradient: |T_m^{N-1} T_{m-1} - e^{Nw}|
#                              <= (N-1) delta_m (1 + delta_m)^{N-2} (1 + delta_{m-1}) + delta_{m-1}
# (f'(z) = T_m(w)^{N-1} T_{m-1}(w) because T_m' = T_{m-1}). (m, s) is the cheapest pair (matrix
# products) with both bounds <= the unit roundoff of X's dtype, for rho bounded from above by
# min(||X||_1, ||X^2||_1^{1/2}) (X^2 is needed anyway). The polynomial is evaluated by
# Paterson-Stockmeyer: degree m in the fewest products.

#: ``expm_skew``'s method when none is given: "auto" (the Taylor evaluation where it is
#: cheaper, see :func:`expm_skew`), "taylor", "eig" (``matrix_exp`` forward, eigendecomposition
#: backward) or "torch" (``torch.linalg.matrix_exp`` and its autograd).
EXPM_METHOD = "auto"
EXPM_METHODS = ("auto", "taylor", "eig", "torch")
#: "auto" takes the Taylor evaluation from this n on. One thread, float32, forward + backward at
#: ||X|| = pi (Henaff's init): n=64 eig 1.15 ms, Taylor 1.45 ms; n=80 2.19 / 2.01 ms; n=128
#: 4.5 / 3.1 ms; n=512 158 / 86 ms; n=1024 1.23 / 0.61 s
TAYLOR_MIN_N = 80

_UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24}
#: above this 1-norm (or for NaN/inf entries) expm_skew_taylor hands X to torch.linalg.matrix_exp
_TAYLOR_MAX_NORM = 2.0**40


def _ps_products(m: int, q: int) -> int:
    """Matrix products of Paterson-Stockmeyer for a degree-m polynomial with powers up to q."""
    if m <= 1:
        return 0
    r = m // q
    return (q - 1) + r - (1 if m % q == 0 else 0)


def _ps_best(m: int) -> tuple[int, int]:
    """(products, q) of the cheapest Paterson-Stockmeyer split of degree m (q >= 2)."""
    if m <= 1:
        return 0, 1
    return min((_ps_products(m, q), q) for q in range(2, m + 1))


def taylor_error_bounds(m: int, s: int, rho: float) -> tuple[float, float]:
    """Bounds on ``max |f(it) - e^{it}|`` and ``max |f'(it) - e^{it}|`` over ``|t| <= rho`` for
    ``f(z) = T_m(z / 2^s)^(2^s)`` (see the comment above): the value and the relative gradient
    error of :func:`expm_skew_taylor` in exact arithmetic."""
    N = 2.0**s
    tau = rho / N
    try:
        dm = tau ** (m + 1) / math.factorial(m + 1)
        dm1 = tau**m / math.factorial(m)
        value = N * dm * (1 + dm) ** (N - 1)
        grad = (N - 1) * dm * (1 + dm) ** max(N - 2, 0) * (1 + dm1) + dm1
    except OverflowError:  # far too few squarings: no useful bound
        return math.inf, math.inf
    return value, grad


def taylor_plan(rho: float, u: float, max_degree: int = 30) -> tuple[int, int, int, int]:
    """``(m, s, q, products)``: the Taylor degree, squarings and Paterson-Stockmeyer split with
    the fewest matrix products (degree products + s squarings) whose value and gradient error
    bounds (:func:`taylor_error_bounds`) are both <= u for eigenvalues within ``[-i rho, i rho]``;
    ties go to fewer squarings."""
    if not math.isfinite(rho):
        raise ValueError(f"the norm bound of the skew matrix must be finite, got {rho}")
    best = None
    for m in range(1, max_degree + 1):
        prods, q = _ps_best(m)
        # the smallest s meeting both bounds (they fall monotonically in s beyond tau < 1)
        s = max(0, math.ceil(math.log2(rho)) - 8) if rho > 1 else 0
        while max(taylor_error_bounds(m, s, rho)) > u:
            s += 1
        key = (prods + s, s)
        if best is None or key < best[0]:
            best = (key, (m, s, q, prods + s))
    return best[1]


def _taylor_poly(W: Tensor, W2: Tensor, m: int, q: int) -> Tensor:
    """``T_m(W) = sum_{k<=m} W^k / k!`` by Paterson-Stockmeyer with powers W^0..W^q (W2 = W^2
    given); every product goes through autograd (the backward is the exact adjoint)."""
    eye = torch.eye(W.shape[-1], dtype=W.dtype, device=W.device)
    if m == 0:
        return eye
    if m == 1:
        return eye + W
    powers = [eye, W, W2]
    for _ in range(3, q + 1):
        powers.append(powers[-1] @ W)
    c = [1.0 / math.factorial(k) for k in range(m + 1)]

    def block(j: int) -> Tensor:  # sum_{i<q} c_{jq+i} W^i (the top block may be shorter)
        terms = [c[j * q + i] * powers[i] for i in range(q) if j * q + i <= m]
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return out

    r = m // q
    Wq = powers[q]
    if m % q == 0:  # the top block is the scalar c_m: c_m W^q costs no product
        out = c[m] * Wq + block(r - 1)
        top = r - 2
    else:
        out = block(r)
        top = r - 1
    for j in range(top, -1, -1):
        out = out @ Wq + block(j)
    return out


def expm_skew_taylor(X: Tensor) -> Tensor:
    """``exp(X)`` for skew-symmetric X (float32/float64, (n, n)) by the Taylor polynomial with
    scaling and squaring chosen by :func:`taylor_plan` for X's dtype: values and gradients within
    one unit roundoff (relative) of the exact ones before rounding; the backward is autograd's
    adjoint of the same evaluation (about two products per forward product, no
    eigendecomposition). X must be skew-symmetric (the bounds rest on its imaginary spectrum).

    Measured at n=1024 in float32 against the float64 eigendecomposition result (relative
    Frobenius error; dense skew X with spectral radius 3.2 and 1-norm 45): gradient 3.5e-7
    (the "eig" path: 2.3e-6), value 4.6e-7 (5.3e-6), ``max |Q^T Q - I|`` 1.3e-6 (2.8e-5);
    Henaff's init (radius pi): gradient 2.0e-7 (1.2e-7), value 1.2e-7 (3.7e-7). One thread,
    forward + backward 0.61 s at Henaff's init, 0.81 s for the dense X, 0.22 s at radius 0.006
    (the "eig" path: 1.23 / 1.42 / 1.18 s)."""
    if X.dim() != 2 or X.shape[0] != X.shape[1]:
        raise ValueError(f"expm_skew_taylor needs one square matrix, got shape {tuple(X.shape)}")
    u = _UNIT_ROUNDOFF.get(X.dtype)
    if u is None:
        raise ValueError(f"expm_skew_taylor needs float32 or float64, got {X.dtype}")
    X2 = X @ X
    with torch.no_grad():
        n1 = torch.linalg.matrix_norm(X, 1).item()
        n2 = torch.linalg.matrix_norm(X2, 1).item()
    if not n1 <= _TAYLOR_MAX_NORM:  # NaN, inf or meaningless: torch's result (NaN/inf propagates
        return torch.linalg.matrix_exp(X)  # to the loss, where the trainer reports divergence)
    rho = min(n1, math.sqrt(n2))  # n2 <= n1^2 is finite below the cap, in float32 too
    m, s, q, _ = taylor_plan(rho, u)
    scale = 2.0**-s  # exact in floating point
    W, W2 = X * scale, X2 * (scale * scale)
    Q = _taylor_poly(W, W2, m, q)
    for _ in range(s):
        Q = Q @ Q
    return Q


def expm_skew(X: Tensor, method: str | None = None) -> Tensor:
    """``exp(X)`` for skew-symmetric X (what :func:`skew` returns).

    ``method`` (default :data:`EXPM_METHOD`): "taylor" is :func:`expm_skew_taylor` (Taylor
    polynomial, scaling and squaring from a norm bound, autograd's adjoint as backward); "eig"
    is :class:`_ExpmSkew` (``torch.linalg.matrix_exp`` forward, eigendecomposition backward);
    "torch" is ``torch.linalg.matrix_exp`` with its own backward. "auto", when a gradient is
    needed, takes "taylor" for n >= :data:`TAYLOR_MIN_N` (n=1024, float32, ||X|| = pi: 0.61 s
    forward + backward against 1.23 s for "eig"), "eig" for n >= :data:`EIG_BACKWARD_MIN_N`,
    "torch" below; without a gradient it is ``torch.linalg.matrix_exp``. All agree to rounding
    (tested in float64 against torch's values and gradients)."""
    method = EXPM_METHOD if method is None else method
    if method not in EXPM_METHODS:
        raise ValueError(f"unknown expm method {method!r}; expected one of {EXPM_METHODS}")
    plain = X.dim() != 2 or X.dtype not in _UNIT_ROUNDOFF
    if method == "auto":
        n = X.shape[-1]
        if plain or not X.requires_grad or n < EIG_BACKWARD_MIN_N:
            return torch.linalg.matrix_exp(X)
        method = "taylor" if n >= TAYLOR_MIN_N else "eig"
    if method == "taylor" and not plain:
        return expm_skew_taylor(X)
    if method == "eig" and not plain and X.requires_grad:
        return _ExpmSkew.apply(X)
    return torch.linalg.matrix_exp(X)


def cayley_map(X: Tensor) -> Tensor:
    """``(I + X)^{-1} (I - X)``: orthogonal for skew-symmetric X."""
    eye = torch.eye(X.shape[-1], dtype=X.dtype, device=X.device)
    return torch.linalg.solve(eye + X, eye - X)


class Orthogonal(nn.Module):
    """Parametrization ``A -> base @ phi(skew(A)) @ diag(d)`` (see the module docstring)."""

    def __init__(self, n: int, map: str = "expm", K: int | None = None, M: int | None = None):
        super().__init__()
        if map not in MAPS:
            raise ValueError(f"unknown orthogonal map {map!r}; expected one of {MAPS}")
        for name, v in (("K", K), ("M", M)):  # NaN, inf or 2.5 would pass a plain v < 1
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"dynamic trivialization {name} must be an integer >= 1 or None, got {v!r}")
        self.n, self.map, self.K, self.M = n, map, K, M
        self.register_buffer("base", torch.eye(n))
        self.register_buffer("d", torch.ones(n))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("rebases", torch.zeros((), dtype=torch.long))

    def forward(self, A: Tensor) -> Tensor:
        # never in low precision: orthogonality degrades fast (autocast off, float32 at least)
        with float32_region(A):
            X = skew(A.to(full_precision(A)))
            Q = expm_skew(X) if self.map == "expm" else cayley_map(X)
            return (self.base.to(Q.dtype) @ Q) * self.d.to(Q.dtype)

    @torch.no_grad()
    def rebase(self, A: Tensor) -> None:
        """Move the current point into ``base`` and reset ``A`` to 0 (same W before and after)."""
        W = self.forward(A)
        self.base.copy_(W * self.d)
        A.zero_()
        self.rebases += 1
        if self.M is not None and int(self.rebases) % self.M == 0:
            U, _, Vh = torch.linalg.svd(self.base.double())
            self.base.copy_((U @ Vh).to(self.base.dtype))

    def extra_repr(self) -> str:
        return f"n={self.n}, map={self.map!r}, K={self.K}, M={self.M}"


class PositiveDiagonal(nn.Module):
    """Parametrization ``s -> |s| + eps`` of a vector (asRNN's ``D_f = diag(|s| + eps)``)."""

    def __init__(self, eps: float = 0.0):
        super().__init__()
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        self.eps = float(eps)

    def forward(self, s: Tensor) -> Tensor:
        return s.abs() + self.eps

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


# --- initialisers ------------------------------------------------------------------------


def _uniform(n: int, lo: float, hi: float, generator, dtype=torch.float32) -> Tensor:
    return torch.rand(n, generator=generator, dtype=torch.float64).mul(hi - lo).add(lo).to(dtype)


def block_skew(values: Tensor, n: int) -> Tensor:
    """A skew matrix with 2x2 blocks ``[[0, s_k], [-s_k, 0]]`` on the diagonal (n // 2 blocks)."""
    A = torch.zeros(n, n, dtype=values.dtype)
    k = torch.arange(n // 2)
    A[2 * k, 2 * k + 1] = values
    A[2 * k + 1, 2 * k] = -values
    return A


def henaff_skew(n: int, generator: torch.Generator | None = None, high: float = math.pi) -> Tensor:
    """Henaff et al. (2016) init of the skew parameter: blocks ``s_k ~ U(-pi, high)``.

    The papers use ``high = pi``; one older copy of the expRNN code draws from U(-pi, 0)
    (``high = 0``).
    """
    return block_skew(_uniform(n // 2, -math.pi, high, generator), n)


def cayley_skew(n: int, generator: torch.Generator | None = None) -> Tensor:
    """Helfrich et al. (2018) init: ``u_k ~ U(0, pi/2)``, ``s_k = -sqrt((1-cos u)/(1+cos u))``."""
    u = _uniform(n // 2, 0.0, math.pi / 2, generator, torch.float64)
    s = -torch.sqrt((1 - torch.cos(u)) / (1 + torch.cos(u)))
    return block_skew(s.float(), n)


def random_orthogonal(n: int, generator: torch.Generator | None = None, special: bool = False) -> Tensor:
    """A Haar-distributed orthogonal matrix (QR of a Gaussian with the sign fix); det +1 if
    ``special``."""
    G = torch.randn(n, n, generator=generator, dtype=torch.float64)
    Q, R = torch.linalg.qr(G)
    Q = Q * torch.sign(torch.diagonal(R)).where(torch.diagonal(R) != 0, torch.ones(()))
    if special and torch.linalg.det(Q) < 0:
        Q[:, 0] = -Q[:, 0]
    return Q.float()


def semi_orthogonal(rows: int, cols: int, generator: torch.Generator | None = None) -> Tensor:
    """A random (rows, cols) matrix with orthonormal rows or columns, whichever are fewer."""
    m = max(rows, cols)
    Q = random_orthogonal(m, generator)
    return Q[:rows, :cols].clone()


def orthogonal_log(Q: Tensor) -> Tensor:
    """The real skew-symmetric logarithm of a special orthogonal matrix (eigen-decomposition;
    Q is normal, so ``log Q = V diag(i theta) V^{-1}``)."""
    Qd = Q.double()
    lam, V = torch.linalg.eig(Qd)
    L = (V @ torch.diag(torch.log(lam)) @ torch.linalg.inv(V)).real
    return ((L - L.T) / 2).to(Q.dtype)


def initial_skew(init: str, n: int, map: str, generator: torch.Generator | None = None):
    """Return ``(A, base)`` for an initialiser name (see ``INITS``)."""
    eye = torch.eye(n)
    if init == "identity":
        return torch.zeros(n, n), eye
    if init == "henaff":
        return henaff_skew(n, generator), eye
    if init == "cayley":
        return cayley_skew(n, generator), eye
    if init == "haar":
        Q = random_orthogonal(n, generator, special=True)
        if map == "expm":
            return orthogonal_log(Q), eye
        # the Cayley map is its own inverse: A = (I + Q)^{-1} (I - Q) is skew for orthogonal Q
        return cayley_map(Q.double()).float(), eye
    if init == "random":
        return torch.zeros(n, n), random_orthogonal(n, generator)
    raise ValueError(f"unknown orthogonal initialiser {init!r}; expected one of {INITS}")


def orthogonal_(
    module: nn.Module,
    name: str,
    map: str = "expm",
    init: str = "henaff",
    K: int | None = None,
    M: int | None = None,
    generator: torch.Generator | None = None,
    scaling: Tensor | None = None,
) -> Orthogonal:
    """Make ``module.<name>`` (a square parameter) orthogonal through ``map`` with ``init``.

    ``scaling`` is a +-1 vector d (scoRNN's D): W = base @ phi(skew(A)) @ diag(d).
    Returns the parametrization module; the free parameter is
    ``module.parametrizations.<name>.original``.
    """
    W = getattr(module, name)
    if W.dim() != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"{name} must be a square matrix to be orthogonal, got {tuple(W.shape)}")
    n = W.shape[0]
    A, base = initial_skew(init, n, map, generator)
    par = Orthogonal(n, map, K, M)
    par.base.copy_(base)
    if scaling is not None:
        par.d.copy_(scaling)
    with torch.no_grad():
        W.copy_(A)
    P.register_parametrization(module, name, par)
    return par


def positive_diagonal_(module: nn.Module, name: str, eps: float = 0.0) -> PositiveDiagonal:
    par = PositiveDiagonal(eps)
    P.register_parametrization(module, name, par)
    return par


def orthogonal_parametrizations(model: nn.Module):
    """Yield ``(parametrization, free_parameter)`` for every orthogonal weight in ``model``."""
    for m in model.modules():
        if P.is_parametrized(m):
            for plist in m.parametrizations.values():
                for par in plist:
                    if isinstance(par, Orthogonal):
                        yield par, plist.original


def _dynamic_maps(model: nn.Module):
    """``(parametrization, free_parameter)`` of every map of ``model`` with dynamic
    trivialization (``K`` steps between re-bases)."""
    return ((par, A) for par, A in orthogonal_parametrizations(model) if par.K is not None)


def _hooked_modules(model: nn.Module):
    """The submodules of ``model`` whose class defines a post-step hook ``after_optimizer_step()``."""
    return (m for m in model.modules() if callable(getattr(type(m), "after_optimizer_step", None)))


def has_post_step_work(model: nn.Module) -> bool:
    """Whether :func:`after_optimizer_step` has anything to do for ``model``: a map with
    dynamic trivialization (``K``) or a submodule with a post-step hook."""
    return any(True for _ in _dynamic_maps(model)) or any(True for _ in _hooked_modules(model))


def after_optimizer_step(model: nn.Module) -> None:
    """Advance dynamic trivialization: re-base every map whose K optimizer steps are up; then
    call the post-step hook ``after_optimizer_step()`` of every submodule that defines one (a
    cell of your own that projects its weights back after each step, docs/own-cell.md), under
    ``torch.no_grad()``."""
    for par, A in _dynamic_maps(model):
        par.steps += 1
        if int(par.steps) % par.K == 0:
            par.rebase(A)
    for m in _hooked_modules(model):
        with torch.no_grad():
            m.after_optimizer_step()


def orthogonality_error(W: Tensor) -> float:
    """``max |W^T W - I|``."""
    eye = torch.eye(W.shape[-1], dtype=W.dtype, device=W.device)
    return (W.transpose(-2, -1) @ W - eye).abs().max().item()
