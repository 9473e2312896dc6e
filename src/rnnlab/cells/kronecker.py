"""Kronecker recurrent units (KRU; Jose, Cisse & Fleuret, ICML 2018).

N = ``hidden_size // 2`` complex units as the other unitary-family cells
(:mod:`rnnlab.cells.unitary`): ``h_t = modReLU(W h_{t-1} + U x_t, b)``, outputs ``[Re h; Im h]``,
with the recurrent matrix a Kronecker product of small complex factors,

    W = W_0 (x) W_1 (x) ... (x) W_{F-1},   W_f of size n_f x n_f,  prod n_f = N,

applied in the step without forming W: the state is reshaped to (B, n_0, ..., n_{F-1}) and
each factor multiplies its own axis, ``sum_f n_f`` multiply-adds per unit instead of N (the
fused ``sequence`` path forms W once per sequence instead, see :meth:`KRUCell.sequence`). The
factors are
initialised unitary (Haar) and kept near the unitary group by the paper's soft constraint,
the loss term ``penalty * sum_f ||W_f^H W_f - I||_F^2`` (:meth:`regularization`); a product of
unitary factors is unitary. ``factors``: the sizes n_f (default: the prime factors of N, so 2 x 2
factors for N a power of two, 8 log2 N real parameters in W).

``complex_input``: U maps the input to the real and imaginary parts of the units (2N x I reals,
as the uRNN) or, when False, to the real parts only (N x I), the layout whose parameter count
matches the ~11K of the DMU paper's Table IV at N = 512 (11,346 against 11,858 with a complex
U); the KRU paper's text was not at hand to settle which it used.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize as P

from ..kernels.linear import tall_linear
from ..kernels.unitary import modrelu_recurrence
from .base import bool_option
from .fullunitary import haar_unitary, real_form
from .unitary import UnitaryCell


def prime_factors(n: int) -> list[int]:
    """The prime factors of n in increasing order (``[1]`` for n = 1)."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1 or not out:
        out.append(n)
    return out


class RealPart(nn.Module):
    """Parametrization ``U (N, I) -> [U; 0] (2N, I)``: an input map into the real parts."""

    def forward(self, U: Tensor) -> Tensor:
        return torch.cat([U, torch.zeros_like(U)], 0)

    def right_inverse(self, W: Tensor) -> Tensor:
        return W[: W.shape[0] // 2]


class KRUCell(UnitaryCell):
    """Kronecker recurrent unit (see the module docstring). The factors are parameters
    ``factor{f}`` of shape (n_f, n_f, 2) (real and imaginary parts), tagged ``"unitary"``.

    Example:
    >>> import torch
    >>> from rnnlab.cells import KRUCell
    >>> cell = KRUCell(3, 16)                # 8 complex units: W = W_0 (x) W_1 (x) W_2, 2 x 2 factors
    >>> [tuple(F.shape) for F in cell.factors()]
    [(2, 2), (2, 2), (2, 2)]
    >>> W = cell.kronecker_matrix()          # unitary at initialisation (Haar factors)
    >>> torch.allclose(W.conj().T @ W, torch.eye(8, dtype=W.dtype), atol=1e-5)
    True
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        factors: list[int] | None = None,
        penalty: float = 0.0,
        complex_input: bool = True,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        n = self.units
        sizes = prime_factors(n) if factors is None else [int(f) for f in factors]
        if not sizes or any(f < 1 for f in sizes) or math.prod(sizes) != n:
            raise ValueError(
                f"KRU factors must be positive sizes whose product is the number of complex units "
                f"hidden_size // 2 = {n}, got {factors}"
            )
        if not (isinstance(penalty, (int, float)) and math.isfinite(penalty) and penalty >= 0):
            raise ValueError(f"penalty must be a number >= 0, got {penalty!r}")
        self.sizes, self.penalty, self.complex_input = (
            sizes,
            float(penalty),
            bool_option("KRU complex_input", complex_input),
        )
        for f, size in enumerate(sizes):
            Q = haar_unitary(size)
            draw = torch.stack([Q.real, Q.imag], -1)  # float64
            self.register_parameter(f"factor{f}", nn.Parameter(draw.to(torch.get_default_dtype())))
            self.keep_float64_start(f"factor{f}", draw)
            self.tag_parameters(f"factor{f}", "unitary")
        if not self.complex_input:
            P.register_parametrization(self, "weight_ih", RealPart(), unsafe=True)

    def factors(self) -> list[Tensor]:
        """The complex factors W_0, ..., W_{F-1}."""
        return [torch.view_as_complex(getattr(self, f"factor{f}").contiguous()) for f in range(len(self.sizes))]

    def operator(self) -> list[Tensor]:
        return self.factors()

    def apply(self, op: list[Tensor], z: Tensor) -> Tensor:
        lead = z.shape[:-1]
        k = len(lead)
        z = z.reshape(*lead, *self.sizes)
        for f, W in enumerate(op):
            z = torch.movedim(torch.tensordot(z, W.to(z.dtype), dims=([k + f], [1])), -1, k + f)
        return z.reshape(*lead, self.units)

    def kronecker_matrix(self) -> Tensor:
        """The dense W = W_0 (x) ... (x) W_{F-1} (N, N), complex."""
        W = None
        for F in self.factors():
            W = F if W is None else torch.kron(W, F)
        return W

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """Fast path: the input map of all steps in one product, W formed once (its real form),
        then the fused modReLU recurrence in real arithmetic. Forming W costs N^2 per step instead
        of the axis-wise N sum_f n_f, but one BLAS product per step beats F small ones at these
        sizes on the CPU (``rnnlab bench speed --configs mnist-table4`` times it at N = 512)."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        h = self.start_sequence(x, state)
        W = real_form(self.kronecker_matrix()).to(self.bias.dtype)
        return modrelu_recurrence(tall_linear(x, self.weight_ih), W, self.bias, h, lengths)

    def unitary_parameter_count(self) -> int:
        return sum(2 * s * s for s in self.sizes)

    def free_parameter_count(self) -> int:
        inputs = self.units * self.input_size * (2 if self.complex_input else 1)
        return inputs + self.bias.numel() + self.unitary_parameter_count()

    def regularization(self) -> Tensor | None:
        if self.penalty == 0:
            return None
        total = 0.0
        for W in self.factors():
            eye = torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
            total = total + (W.conj().t() @ W - eye).abs().square().sum()
        return self.penalty * total

    def extra_repr(self) -> str:
        return f"units={self.units}, factors={self.sizes}, penalty={self.penalty}, complex_input={self.complex_input}"
