"""nnRNN: the non-normal RNN in Schur form (Kerg, Goyette et al., NeurIPS 2019).

Column form, one step::

    h_t = modReLU(V h_{t-1} + U x_t),    V = P (Lambda + T) P^T,

* ``P`` (H, H) orthogonal, through :func:`rnnlab.parametrize.orthogonal_` (matrix exponential
  of a skew parameter; tagged ``"orthogonal"`` for its own, smaller learning rate);
* ``Lambda`` block diagonal with H/2 blocks ``gamma_k R(theta_k)``,
  ``R(theta) = [[cos theta, -sin theta], [sin theta, cos theta]]``, so the eigenvalues of V are
  ``gamma_k exp(+-i theta_k)`` and their moduli are exactly ``|gamma_k|``;
* ``T`` strictly lower triangular *outside* the 2x2 diagonal blocks (the paper's Schur form:
  the delay line of its Fig. 1 sits on the sub-diagonal); tagged ``"nonnormal"`` so that the
  paper's "Tdecay" is an optimizer weight decay on its own group
  (``[optim.group_weight_decay] nonnormal = ...``). ``t_mask="reference"`` also frees the
  in-block corner ``T[2k+1, 2k]``, as the reference code's mask does.

``regularization()`` returns ``delta * sum_k (gamma_k - 1)^2``, the paper's penalty that keeps
the eigenvalue moduli near 1.

Initialisation (gamma = 1, T = 0 in both modes; ``init`` is one of the orthogonal
initialisers of :mod:`rnnlab.parametrize`: "henaff", "cayley", "haar", "identity", "random"):

* ``theta_init="uniform"`` (default, the nnRNN code's design): P starts at the initialiser's
  orthogonal matrix and theta_k ~ U(-pi, pi), so the eigenvalue phases of V are spread
  uniformly over the circle (what copy needs: Henaff et al.'s explicit solution is such a
  "clock"). For the block-diagonal initialisers P0 commutes with Lambda0, so V0 = Lambda0.
* ``theta_init="init"``: V starts *equal* to the initialiser's matrix Q0. We take the real
  Schur form ``Q0 = Z S Z^T`` (S block diagonal, Q0 is normal): P starts at Z and theta at the
  block angles of S (Z = I for Henaff/Cayley/identity; "haar"/"random" are drawn with det +1,
  as a reflection has no gamma R(theta) form). Note that with the matrix exponential the
  Cayley initialiser's angles are tan(u/2), u ~ U(0, pi/2), i.e. all phases in (0, 1) rad:
  on copy T=200 this learns much more slowly than "uniform" (docs/nnrnn.md).

The reference code at HEAD exponentiated P from an uninitialised tensor, so its init flags
did nothing; here the tests check that P0 (resp. V0) is the initialiser's matrix.

Shapes: x_t (B, I), h (B, H), H even. ``sequence`` (the fast path) projects the inputs of all
steps in one matmul and assembles V once per sequence; it is tested equal to the reference
:func:`rnnlab.unroll` (outputs and all gradients, float64).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize as P

from .. import parametrize as par
from ..kernels.amp import float32_region
from ..kernels.families.rnn import elementwise_rnn, modrelu
from ..kernels.linear import tall_linear
from .base import Cell, nonnegative_option, real_option

T_MASKS = ("paper", "reference")


def rotation_blocks(gamma: Tensor, theta: Tensor) -> Tensor:
    """The block-diagonal ``Lambda`` with blocks ``gamma_k [[cos, -sin], [sin, cos]](theta_k)``,
    assembled with diagonal embeddings (no loop over blocks). gamma, theta: (H/2,) -> (H, H)."""
    c = gamma * torch.cos(theta)
    s = gamma * torch.sin(theta)
    zero = torch.zeros_like(s)
    # the off-diagonals hold -s_k at (2k, 2k+1) and s_k at (2k+1, 2k), zero between blocks
    upper = torch.stack([-s, zero], 1).reshape(-1)[:-1]
    lower = torch.stack([s, zero], 1).reshape(-1)[:-1]
    return torch.diag(c.repeat_interleave(2)) + torch.diag(upper, 1) + torch.diag(lower, -1)


def nonnormal_mask(n: int, kind: str = "paper") -> Tensor:
    """Boolean (n, n) mask of the free entries of T: strictly lower triangular, minus the
    in-block corners (2k+1, 2k) for ``kind="paper"``."""
    if kind not in T_MASKS:
        raise ValueError(f"t_mask must be one of {T_MASKS}, got {kind!r}")
    mask = torch.ones(n, n, dtype=torch.bool).tril(-1)
    if kind == "paper":
        k = torch.arange(n // 2)
        mask[2 * k + 1, 2 * k] = False
    return mask


def orthogonal_schur(Q: Tensor) -> tuple[Tensor, Tensor]:
    """Real Schur form of a special orthogonal matrix with no real eigenvalues:
    ``Q = Z blockdiag(R(theta_k)) Z^T``. Returns (Z (n, n), theta (n/2,)), in float64.

    Q is normal, so for an eigenpair ``Q u = e^{i phi} u`` with ``u = a + i b`` the real
    vectors ``sqrt(2) [a, b]`` are orthonormal and ``Q [a, b] = [a, b] R(-phi)``."""
    Qd = Q.double()
    n = Qd.shape[0]
    lam, vec = torch.linalg.eig(Qd)
    if (lam.imag.abs() < 1e-7).any():
        raise ValueError(
            "the initial orthogonal matrix has real eigenvalues (+-1), which have no "
            "gamma R(theta) block form; draw another one (e.g. a different seed)"
        )
    pos = lam.imag > 0
    u = vec[:, pos]
    phi = lam[pos].angle()
    a, b = u.real, u.imag
    Z = torch.stack([a, b], 2).reshape(n, n) * math.sqrt(2.0)
    # eig returns unit vectors; a re-orthonormalisation removes rounding (the signs are kept)
    Zq, R = torch.linalg.qr(Z)
    Z = Zq * torch.sign(torch.diagonal(R))
    return Z, -phi


def initial_orthogonal(init: str, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``(Q0, Z, theta)`` for an initialiser name: Q0 the orthogonal matrix of ``init`` (as
    the expRNN cell would start), ``Q0 = Z blockdiag(R(theta)) Z^T``."""
    if init in ("identity", "henaff", "cayley"):
        A, _ = par.initial_skew(init, n, "expm", generator)
        # block-diagonal skew blocks [[0, s], [-s, 0]] exponentiate to R(-s)
        s = A.double()[torch.arange(0, n, 2), torch.arange(1, n, 2)]
        theta = -s
        Z = torch.eye(n, dtype=torch.float64)
        Q0 = torch.linalg.matrix_exp(par.skew(A.double()))
        return Q0, Z, theta
    if init in ("haar", "random"):
        Q0 = par.random_orthogonal(n, generator, special=True).double()
        Z, theta = orthogonal_schur(Q0)
        return Q0, Z, theta
    raise ValueError(f"unknown nnRNN initialiser {init!r}; expected one of {par.INITS}")


class NNRNNCell(Cell):
    """nnRNN step ``h_t = modReLU(V h_{t-1} + U x_t)``, ``V = P (Lambda + T) P^T`` (see the
    module docstring for every factor, the initialisation and the regulariser).

    Parameters: ``weight_ih`` U (H, I); ``P`` (orthogonal, free parameter
    ``parametrizations.P.original``, tag "orthogonal"); ``gamma``, ``theta`` (H/2,);
    ``T`` (H, H) masked to its free entries (tag "nonnormal"); ``bias`` the modReLU bias
    (H,), ~ U(-0.01, 0.01).

    Options: ``init`` (orthogonal initialiser), ``theta_init`` ("uniform" | "init", see the
    module docstring), ``delta`` (weight of the gamma penalty),
    ``t_mask`` ("paper" | "reference"), ``K``/``M`` (dynamic trivialization of P),
    ``seed`` (an explicit generator seed for the orthogonal init; None uses torch's global
    generator), ``input_init`` ("xavier": Glorot normal, the nnRNN code's default;
    "kaiming": normal with relu gain, as expRNN's code; "linear": torch's ``nn.Linear`` init
    U(+-1/sqrt(I)), what the released cell runs with, as its ``reset_parameters`` never applies
    the input initialiser it is given, RNN_Cell.py:110-112, 157-164), ``fixed_gamma`` (None: the moduli
    gamma_k are trained; a number g > 0: every gamma_k is held at g, a buffer, not a parameter:
    the fixed-gamma variant of the paper's supplement, where the delta penalty is constant).

    Example:
    >>> import torch
    >>> from rnnlab.cells import NNRNNCell
    >>> cell = NNRNNCell(3, 8)
    >>> V = cell.recurrent_matrix()                  # P (Lambda + T) P^T
    >>> V.shape, cell.theta.shape                    # 4 rotation angles: 4 2x2 blocks of Lambda
    (torch.Size([8, 8]), torch.Size([4]))
    >>> h, _ = cell(torch.randn(2, 3))
    >>> h.shape
    torch.Size([2, 8])
    """

    family = "orthogonal"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        init: str = "cayley",
        delta: float = 1e-4,
        t_mask: str = "paper",
        K: int | None = None,
        M: int | None = None,
        seed: int | None = None,
        input_init: str = "xavier",
        theta_init: str = "uniform",
        backend: str = "auto",
        fixed_gamma: float | None = None,
    ):
        if fixed_gamma is not None:
            fixed_gamma = real_option("fixed_gamma", fixed_gamma, "None (trained) or a modulus > 0", lambda v: v > 0)
        if int(hidden_size) % 2 != 0:
            raise ValueError(
                f"nnRNN needs an even hidden_size (its Schur form has 2x2 rotation blocks), "
                f"got hidden_size={hidden_size}"
            )
        super().__init__(input_size, hidden_size, backend)
        delta = nonnegative_option("delta", delta)
        if theta_init not in ("uniform", "init"):
            raise ValueError(f"theta_init must be 'uniform' or 'init', got {theta_init!r}")
        if input_init not in ("xavier", "kaiming", "linear"):
            raise ValueError(f"input_init must be 'xavier', 'kaiming' or 'linear', got {input_init!r}")
        n = self.hidden_size
        self.init, self.delta, self.t_mask, self.theta_init = init, float(delta), t_mask, theta_init
        self.register_buffer("mask", nonnormal_mask(n, t_mask), persistent=False)
        self.weight_ih = nn.Parameter(torch.empty(n, input_size))
        # the nnRNN scripts pass a Glorot-normal input initialiser by default (expRNN's code:
        # Kaiming), which the released nnRNN cell never applies ("linear"); with modReLU and a
        # norm-preserving V the hidden norm grows with the input energy, so the input scale
        # matters on long inputs (psMNIST: 784 steps)
        if input_init == "xavier":
            nn.init.xavier_normal_(self.weight_ih)
        elif input_init == "kaiming":
            nn.init.kaiming_normal_(self.weight_ih, nonlinearity="relu")
        else:  # torch's nn.Linear init, U(+-1/sqrt(I)): what the released cell's U keeps
            bound = 1.0 / math.sqrt(input_size)
            nn.init.uniform_(self.weight_ih, -bound, bound)
        self.bias = nn.Parameter(torch.empty(n).uniform_(-0.01, 0.01))
        if fixed_gamma is None:
            self.gamma = nn.Parameter(torch.ones(n // 2))
        else:
            self.register_buffer("gamma", torch.full((n // 2,), float(fixed_gamma)))
        self.fixed_gamma = fixed_gamma
        self.T = nn.Parameter(torch.zeros(n, n))
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self.P = nn.Parameter(torch.empty(n, n))
        if theta_init == "uniform":
            if init not in par.INITS:
                raise ValueError(f"unknown nnRNN initialiser {init!r}; expected one of {par.INITS}")
            self.orthogonal = par.orthogonal_(self, "P", "expm", init, K, M, generator=generator)
            theta = torch.rand(n // 2, generator=generator, dtype=torch.float64) * (2 * math.pi) - math.pi
        else:
            _, Z, theta = initial_orthogonal(init, n, generator)
            self.orthogonal = par.orthogonal_(self, "P", "expm", "identity", K, M)
            self.orthogonal.base.copy_(Z.float())
        self.theta = nn.Parameter(theta.float())
        self.tag_parameters("parametrizations.P", "orthogonal")
        self.tag_parameters("T", "nonnormal")

    # --- the Schur factors ---------------------------------------------------------------
    def schur_form(self) -> Tensor:
        """``Theta = Lambda + T`` (H, H), lower quasi-triangular."""
        return rotation_blocks(self.gamma, self.theta) + self.T * self.mask

    def recurrent_matrix(self) -> Tensor:
        """``V = P (Lambda + T) P^T`` (H, H), applied as ``h @ V.T``."""
        with float32_region(self.theta):  # assembled in float32 even under autocast
            Pm = self.P
            return Pm @ self.schur_form() @ Pm.transpose(0, 1)

    def regularization(self) -> Tensor:
        """``delta * sum_k (gamma_k - 1)^2``."""
        return self.delta * (self.gamma - 1).pow(2).sum()

    def free_parameter_count(self) -> int:
        n = self.hidden_size
        return (
            self.weight_ih.numel()
            + self.bias.numel()
            + self.theta.numel()
            + (self.gamma.numel() if self.fixed_gamma is None else 0)
            + int(self.mask.sum())
            + n * (n - 1) // 2
        )

    # --- time ----------------------------------------------------------------------------
    def forward(self, x_t: Tensor, h: Tensor):
        z = nn.functional.linear(x_t, self.weight_ih) + nn.functional.linear(h, self.recurrent_matrix())
        h = modrelu(z, self.bias)
        return h, h

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """Fast path: V assembled once, all input projections in one matmul, and the recurrence
        ``h_t = modReLU(V h_{t-1} + U x_t)`` through the fused kernel
        :func:`rnnlab.kernels.elementwise_rnn` (forward without a graph, one product per step
        backward)."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        return self.batched_sequence(x, state, lengths)

    def batched_sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """The fast path of :meth:`sequence` (its recurrence runs batched), whatever the backend."""
        state = self.start_sequence(x, state)
        with P.cached():
            V = self.recurrent_matrix()
        xw = tall_linear(x, self.weight_ih)  # (T, B, H)
        return elementwise_rnn(xw, V, state, "modrelu", self.bias, lengths)
