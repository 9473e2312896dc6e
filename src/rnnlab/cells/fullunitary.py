"""Full-capacity unitary RNN (Wisdom, Powers, Hershey, Le Roux & Atlas, NeurIPS 2016).

As the restricted-capacity uRNN (:mod:`rnnlab.cells.unitary`), N = ``hidden_size // 2`` complex
units, ``h_t = modReLU(W h_{t-1} + V x_t, b)`` and outputs ``[Re h; Im h]``; but W ranges over
the whole unitary group U(N) (N^2 real degrees of freedom) instead of a product of structured
factors.

Wisdom et al. keep W on U(N) by a multiplicative Cayley step after each gradient step,
``W <- (I + lr/2 A)^{-1} (I - lr/2 A) W`` with the skew-Hermitian ``A = G W^H - W G^H``. Here W
is a trivialization on top of ``torch.nn.utils.parametrize``: ``W = B phi(S)`` with S
skew-Hermitian built from an (N, N) real parameter (strict upper triangle: Re S; lower
triangle and diagonal: Im S), ``phi`` the Cayley map ``(I + S)^{-1}(I - S)`` or the matrix
exponential, and B a buffer (a Haar-random unitary at init). W is unitary to rounding for every
parameter value. ``K`` re-bases every K optimizer steps (``B <- W, S <- 0``: dynamic
trivialization, :func:`rnnlab.parametrize.after_optimizer_step`, called by the trainer); with
the Cayley map and K = 1 each optimizer step is a multiplicative Cayley step ``W <- W phi(S)``
as in Wisdom et al., its direction the optimizer's step on S rather than their projected
gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize as P

from .. import parametrize as par
from ..kernels.amp import float32_region, full_precision
from ..kernels.linear import tall_linear
from ..kernels.unitary import modrelu_recurrence
from .unitary import UnitaryCell


def complex_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def skew_hermitian(A: Tensor) -> Tensor:
    """The skew-Hermitian S of an (N, N) real ``A``: ``Re S = T - T^T`` with T the strict upper
    triangle of A, ``Im S = L + L^T - diag(L)`` with L the lower triangle (diagonal included);
    N^2 free reals, every skew-Hermitian matrix reached once."""
    upper = torch.triu(A, 1)
    lower = torch.tril(A)
    im = lower + lower.t() - torch.diag(torch.diagonal(A))
    return torch.complex(upper - upper.t(), im)


def real_form(W: Tensor) -> Tensor:
    """``[[Re W, -Im W], [Im W, Re W]]``: W acting on ``[Re h; Im h]``."""
    return torch.cat([torch.cat([W.real, -W.imag], 1), torch.cat([W.imag, W.real], 1)], 0)


def haar_unitary(n: int, generator: torch.Generator | None = None) -> Tensor:
    """A Haar-distributed unitary (QR of a complex Gaussian with the phase fix), complex128."""
    G = torch.complex(
        torch.randn(n, n, generator=generator, dtype=torch.float64),
        torch.randn(n, n, generator=generator, dtype=torch.float64),
    )
    Q, R = torch.linalg.qr(G)
    d = torch.diagonal(R)
    return Q * (d / d.abs()).unsqueeze(0)


class UnitaryMap(par.Orthogonal):
    """Parametrization ``A -> B phi(S(A))`` in real form (2N, 2N) (see the module docstring).
    A :class:`rnnlab.parametrize.Orthogonal` on the real form, so dynamic trivialization and
    the trainer's re-basing apply as to the orthogonal maps."""

    def __init__(self, units: int, map: str = "cayley", K: int | None = None, M: int | None = None):
        super().__init__(2 * units, map, K, M)
        self.units = units

    def forward(self, A: Tensor) -> Tensor:
        with float32_region(A):
            A = A.to(full_precision(A))
            S = skew_hermitian(A)
            if self.map == "expm":
                Q = torch.linalg.matrix_exp(S)
            else:
                eye = torch.eye(self.units, dtype=S.dtype, device=S.device)
                Q = torch.linalg.solve(eye + S, eye - S)
            R = real_form(Q)
            return (self.base.to(R.dtype) @ R) * self.d.to(R.dtype)

    def extra_repr(self) -> str:
        return f"units={self.units}, map={self.map!r}, K={self.K}, M={self.M}"


class FCURNNCell(UnitaryCell):
    """Full-capacity uRNN (Wisdom et al. 2016; see the module docstring): N = H/2 complex units,
    ``h = modReLU(W h + V x)`` with W on all of U(N). ``map``: "cayley" or "expm"; ``K``, ``M``:
    dynamic trivialization; ``init``: "haar" (W a Haar-random unitary, as the authors' SVD
    init of a complex Gaussian) or "identity". ``weight_hh`` is W's real form (2N, 2N); its free
    parameter (N^2 reals) is tagged ``"unitary"``. V ~ U(-sqrt(6/(I + 2N)), +sqrt(6/(I + 2N))),
    b ~ U(-0.01, 0.01) (both as the authors' code).

    Example:
    >>> import torch
    >>> from rnnlab.cells import FCURNNCell
    >>> cell = FCURNNCell(3, 16)             # 8 complex units, h = [Re h; Im h]
    >>> W = cell.recurrent_matrix()          # the real form of W, unitary for any parameter
    >>> torch.allclose(W.T @ W, torch.eye(16), atol=1e-5)
    True
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        map: str = "cayley",
        K: int | None = None,
        M: int | None = None,
        init: str = "haar",
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        if init not in ("haar", "identity"):
            raise ValueError(f"init must be 'haar' or 'identity', got {init!r}")
        n = self.units
        self.weight_hh = nn.Parameter(torch.zeros(n, n))
        unitary = UnitaryMap(n, map, K, M)
        if init == "haar":
            draw = real_form(haar_unitary(n))  # float64
            unitary.base.copy_(draw.to(torch.get_default_dtype()))
        P.register_parametrization(self, "weight_hh", unitary, unsafe=True)
        if init == "haar":
            self.keep_float64_start("parametrizations.weight_hh.0.base", draw)
        self.tag_parameters("parametrizations.weight_hh", "unitary")

    def unitary_parameter_count(self) -> int:
        return self.units**2

    def operator(self) -> Tensor:
        W, n = self.weight_hh, self.units
        return torch.complex(W[:n, :n], W[n:, :n])

    def apply(self, op: Tensor, z: Tensor) -> Tensor:
        return z @ op.t()

    def recurrent_matrix(self) -> Tensor:
        return self.weight_hh

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """Fast path: the input map of all steps in one product, W's real form once, then the
        fused modReLU recurrence in real arithmetic (:func:`rnnlab.kernels.unitary.modrelu_recurrence`)."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        h = self.start_sequence(x, state)
        return modrelu_recurrence(tall_linear(x, self.weight_ih), self.weight_hh, self.bias, h, lengths)

    def extra_repr(self) -> str:
        return f"units={self.units}"
