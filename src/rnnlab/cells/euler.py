"""RNNs from the forward-Euler discretisation of an ODE, one time step per input:
AntisymmetricRNN (Chang et al., ICLR 2019), the Lipschitz RNN (Erichson et al., ICLR 2021),
the sequential NAIS-Net (Ciccone et al., NeurIPS 2018) and the incremental RNN (Kag, Zhang &
Saligrama, ICLR 2020).

Each step is (column form; the code computes ``h @ W.T``)::

    h_t = d * h_{t-1} + C h_{t-1} + e * phi(W h_{t-1} + W_ih x_t + b)

with the structure of ``W``, ``C``, ``d`` and ``e`` of each paper (the classes' docstrings).
The step ``forward`` is the reference; ``sequence`` computes ``W``, ``C``, ``d``, ``e`` once and
runs the fused kernel :func:`rnnlab.kernels.residual.residual_recurrence` (``backend="reference"``:
:func:`rnnlab.unroll`). ``recurrent_matrix()`` returns ``W``, the matrix inside the
nonlinearity, for the Schur views; the step Jacobian ``d + C + e phi' W`` is what
:mod:`rnnlab.analysis.jacobian` differentiates. Shapes: x_t (B, I), h (B, H).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..kernels.linear import tall_linear
from ..kernels.residual import ACTIVATIONS, residual_recurrence
from .base import Cell, bool_option, nonnegative_option, positive_option


class EulerCell(Cell):
    """Shared part of the forward-Euler cells: the input map ``W_ih x + b``, the step and the
    fused sequence path. Subclasses build ``self.weight_ih``, ``self.bias`` and implement
    :meth:`terms` -> ``(W, C or None, d, e)``."""

    family = "residual"

    activation = "tanh"

    def terms(self) -> tuple[Tensor, Tensor | None, Tensor | float, Tensor | float]:
        raise NotImplementedError

    def recurrent_matrix(self) -> Tensor:
        return self.terms()[0]

    def _phi(self, z: Tensor) -> Tensor:
        return torch.tanh(z) if self.activation == "tanh" else torch.relu(z)

    def forward(self, x_t: Tensor, h: Tensor):
        W, C, d, e = self.terms()
        new = d * h + e * self._phi(nn.functional.linear(h, W) + nn.functional.linear(x_t, self.weight_ih, self.bias))
        if C is not None:
            new = new + nn.functional.linear(h, C)
        return new, new

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """Fast path: the input terms of all steps in one product, ``W``, ``C``, ``d``, ``e``
        once, then the fused residual recurrence."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        h = self.start_sequence(x, state)
        W, C, d, e = self.terms()
        u = tall_linear(x, self.weight_ih, self.bias)
        return residual_recurrence(u, W, h, e, d, C, self.activation, lengths)

    def _input_map(self, rows: int, input_size: int, bias: bool = True) -> None:
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        self.bias = nn.Parameter(torch.zeros(rows)) if bias else None


class AntisymmetricRNNCell(EulerCell):
    """AntisymmetricRNN (Chang, Chen, Haber & Chi, ICLR 2019):
    ``h_t = h_{t-1} + eps tanh((M - M^T - gamma I) h_{t-1} + V x_t + b)``.

    ``gated=True``: the gated variant, ``z = sigmoid(A h + V_z x + b_z)``,
    ``h_t = h + eps z * tanh(A h + V_h x + b_h)`` with the same ``A = M - M^T - gamma I`` in
    both (``weight_ih`` stacks ``[V_h; V_z]``); it runs the step loop (no fused kernel).
    Initialisation as the paper: ``M ~ N(0, init_std^2 / H)``, ``V ~ N(0, 1 / I)``, ``b = 0``.
    Free parameters: ``H (H - 1) / 2`` for ``A`` (only ``M - M^T`` enters), plus ``V`` and ``b``.

    Example:
    >>> import torch
    >>> from rnnlab.cells import AntisymmetricRNNCell
    >>> cell = AntisymmetricRNNCell(3, 8, eps=0.01, gamma=0.01)
    >>> A = cell.recurrent_matrix()          # M - M^T - gamma I
    >>> torch.allclose(A + A.T, -0.02 * torch.eye(8))
    True
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        eps: float = 0.01,
        gamma: float = 0.01,
        gated: bool = False,
        init_std: float = 1.0,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        self.eps, self.gamma = positive_option("eps", eps), nonnegative_option("gamma", gamma)
        self.gated = bool_option("AntisymmetricRNN gated", gated)
        H = hidden_size
        self.weight_m = nn.Parameter(torch.randn(H, H) * (nonnegative_option("init_std", init_std) / math.sqrt(H)))
        self._input_map((2 if self.gated else 1) * H, input_size)
        with torch.no_grad():
            self.weight_ih.normal_(0.0, 1.0 / math.sqrt(input_size))

    def antisymmetric(self) -> Tensor:
        """``M - M^T``, the antisymmetric part (its eigenvalues are purely imaginary)."""
        return self.weight_m - self.weight_m.t()

    def terms(self):
        eye = torch.eye(self.hidden_size, dtype=self.weight_m.dtype, device=self.weight_m.device)
        return self.antisymmetric() - self.gamma * eye, None, 1.0, self.eps

    def forward(self, x_t: Tensor, h: Tensor):
        if not self.gated:
            return super().forward(x_t, h)
        A = self.terms()[0]
        ah = nn.functional.linear(h, A)
        pre_h, pre_z = nn.functional.linear(x_t, self.weight_ih, self.bias).chunk(2, 1)
        h = h + self.eps * torch.sigmoid(ah + pre_z) * torch.tanh(ah + pre_h)
        return h, h

    def sequence(self, x, state=None, lengths=None):
        if self.gated:
            return Cell.sequence(self, x, state, lengths)
        return super().sequence(x, state, lengths)

    def free_parameter_count(self) -> int:
        H = self.hidden_size
        return H * (H - 1) // 2 + self.weight_ih.numel() + self.bias.numel()

    def extra_repr(self) -> str:
        return f"eps={self.eps}, gamma={self.gamma}, gated={self.gated}"


class LipschitzRNNCell(EulerCell):
    """Lipschitz RNN (Erichson, Azencot, Queiruga, Hodgkinson & Mahoney, ICLR 2021), the
    Euler scheme of ``h' = A_beta h + tanh(W_beta h + U x + b)``:
    ``h_t = h_{t-1} + eps A h_{t-1} + eps tanh(W h_{t-1} + U x_t + b)`` with
    ``A = (1 - beta)(M_A + M_A^T) + beta (M_A - M_A^T) - gamma_a I`` and ``W`` the same in
    ``M_W`` and ``gamma_w``. Initialisation as the authors' code: ``M_A, M_W ~ N(0,
    (init_std / H)^2)``, ``U`` Glorot normal, ``b = 0``. ``beta`` in [0, 1] weighs the
    symmetric against the antisymmetric part.

    Example:
    >>> import torch
    >>> from rnnlab.cells import LipschitzRNNCell
    >>> cell = LipschitzRNNCell(3, 8, eps=0.01)
    >>> h = torch.zeros(2, 8)
    >>> h1, _ = cell(torch.randn(2, 3), h)   # h + eps A h + eps tanh(W h + U x + b)
    >>> bool(h1.abs().max() <= 0.01)         # from h = 0 one step moves at most eps
    True
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        eps: float = 0.01,
        beta: float = 0.8,
        gamma_a: float = 0.001,
        gamma_w: float = 0.001,
        init_std: float = 1.0,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        if not (isinstance(beta, (int, float)) and 0.0 <= beta <= 1.0):
            raise ValueError(f"beta must be in [0, 1], got {beta!r}")
        self.eps, self.beta = positive_option("eps", eps), float(beta)
        self.gamma_a, self.gamma_w = nonnegative_option("gamma_a", gamma_a), nonnegative_option("gamma_w", gamma_w)
        H, std = hidden_size, nonnegative_option("init_std", init_std) / hidden_size
        self.weight_a = nn.Parameter(torch.randn(H, H) * std)
        self.weight_w = nn.Parameter(torch.randn(H, H) * std)
        self._input_map(H, input_size)
        nn.init.xavier_normal_(self.weight_ih)

    def structured(self, M: Tensor, gamma: float) -> Tensor:
        """``(1 - beta)(M + M^T) + beta (M - M^T) - gamma I``."""
        eye = torch.eye(self.hidden_size, dtype=M.dtype, device=M.device)
        return (1 - self.beta) * (M + M.t()) + self.beta * (M - M.t()) - gamma * eye

    def terms(self):
        A = self.structured(self.weight_a, self.gamma_a)
        return self.structured(self.weight_w, self.gamma_w), self.eps * A, 1.0, self.eps

    def extra_repr(self) -> str:
        return f"eps={self.eps}, beta={self.beta}, gamma_a={self.gamma_a}, gamma_w={self.gamma_w}"


class NAISNetCell(EulerCell):
    """Sequential NAIS-Net (Ciccone, Gallieri, Masci, Osendorfer & Gomez, NeurIPS 2018): the
    non-autonomous stable block with its input as the sequence,
    ``h_t = h_{t-1} + step tanh(A h_{t-1} + B x_t + b)``, ``A = -R^T R - delta I`` (symmetric,
    eigenvalues <= -delta). NAIS-Net keeps the block stable by projecting R after each update;
    here R is rescaled inside the map instead, ``R <- R min(1, sqrt(bound / ||R^T R||_F))``, so
    the eigenvalues of ``A`` always lie in ``[-(bound + delta), -delta]`` (``bound=None``: no
    rescaling). Initialisation: ``R ~ N(0, init_std^2 / H)``, ``B`` Glorot uniform, ``b = 0``.

    Example:
    >>> import torch
    >>> from rnnlab.cells import NAISNetCell
    >>> cell = NAISNetCell(3, 8, delta=0.01, bound=1.0)
    >>> ev = torch.linalg.eigvalsh(cell.stable_matrix())   # -R^T R - delta I, symmetric
    >>> bool((ev <= -0.01 + 1e-6).all() and (ev >= -1.01 - 1e-6).all())
    True
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        step: float = 0.1,
        delta: float = 0.01,
        bound: float | None = 1.0,
        init_std: float = 1.0,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        self.step, self.delta = positive_option("step", step), nonnegative_option("delta", delta)
        self.bound = None if bound is None else positive_option("bound", bound)
        H = hidden_size
        self.weight_r = nn.Parameter(torch.randn(H, H) * (nonnegative_option("init_std", init_std) / math.sqrt(H)))
        self._input_map(H, input_size)
        nn.init.xavier_uniform_(self.weight_ih)

    def stable_matrix(self) -> Tensor:
        """``A = -R^T R - delta I`` with R rescaled to ``||R^T R||_F <= bound``."""
        R = self.weight_r
        G = R.t() @ R
        if self.bound is not None:
            G = G * torch.clamp(self.bound / torch.linalg.matrix_norm(G).clamp_min(1e-30), max=1.0)
        eye = torch.eye(self.hidden_size, dtype=R.dtype, device=R.device)
        return -G - self.delta * eye

    def terms(self):
        return self.stable_matrix(), None, 1.0, self.step

    def extra_repr(self) -> str:
        return f"step={self.step}, delta={self.delta}, bound={self.bound}"


class IncrementalRNNCell(EulerCell):
    """Incremental RNN (Kag, Zhang & Saligrama, ICLR 2020; not Le et al.'s identity-initialised
    IRNN, registry key "irnn"). The hidden state moves by an increment g that solves
    ``g' = -alpha (g + h_{t-1}) + phi(U (g + h_{t-1}) + W x_t + b)`` with ``steps`` Euler
    steps of size ``eta`` from ``g = 0``; ``h_t = h_{t-1} + g``. With one step (the default)
    ``h_t = (1 - eta alpha) h_{t-1} + eta phi(U h_{t-1} + W x_t + b)``.

    ``eta`` is learned per unit (initialised to ``eta``), ``alpha`` fixed. ``rank``: a
    factored ``U = U_1 U_2^T`` of that rank (None: dense U). Initialisation: ``U`` (or its
    factors) random orthogonal columns scaled by ``init_std``, ``W`` Glorot uniform, ``b = 0``.
    ``steps > 1`` runs the step loop (the fused kernel takes one step per input).

    Example:
    >>> import torch
    >>> from rnnlab.cells import IncrementalRNNCell
    >>> cell = IncrementalRNNCell(3, 8, eta=0.01, rank=2)   # U = U_1 U_2^T of rank 2
    >>> int(torch.linalg.matrix_rank(cell.recurrent_matrix()))
    2
    >>> h, _ = cell(torch.randn(2, 3))
    >>> h.shape
    torch.Size([2, 8])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        eta: float = 0.01,
        alpha: float = 1.0,
        steps: int = 1,
        activation: str = "tanh",
        rank: int | None = None,
        init_std: float = 1.0,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if int(steps) != steps or steps < 1:
            raise ValueError(f"steps must be a positive integer, got {steps!r}")
        if rank is not None and not (int(rank) == rank and 1 <= rank <= hidden_size):
            raise ValueError(
                f"rank must be None (dense U) or an integer in [1, hidden_size={hidden_size}], got {rank!r}"
            )
        self.activation, self.steps, self.rank = activation, int(steps), None if rank is None else int(rank)
        self.alpha = nonnegative_option("alpha", alpha)
        H = hidden_size
        self.eta = nn.Parameter(torch.full((H,), positive_option("eta", eta)))
        std = nonnegative_option("init_std", init_std)
        if self.rank is None:
            self.weight_hh = nn.Parameter(nn.init.orthogonal_(torch.empty(H, H)) * std)
        else:
            self.weight_u1 = nn.Parameter(nn.init.orthogonal_(torch.empty(H, self.rank)) * math.sqrt(std))
            self.weight_u2 = nn.Parameter(nn.init.orthogonal_(torch.empty(H, self.rank)) * math.sqrt(std))
        self._input_map(H, input_size)
        nn.init.xavier_uniform_(self.weight_ih)

    def recurrent_matrix(self) -> Tensor:
        return self.weight_hh if self.rank is None else self.weight_u1 @ self.weight_u2.t()

    def terms(self):
        return self.recurrent_matrix(), None, 1.0 - self.alpha * self.eta, self.eta

    def forward(self, x_t: Tensor, h: Tensor):
        if self.steps == 1:
            return super().forward(x_t, h)
        U, u = self.recurrent_matrix(), nn.functional.linear(x_t, self.weight_ih, self.bias)
        g = torch.zeros_like(h)
        for _ in range(self.steps):
            s = g + h
            g = g + self.eta * (self._phi(nn.functional.linear(s, U) + u) - self.alpha * s)
        h = h + g
        return h, h

    def sequence(self, x, state=None, lengths=None):
        if self.steps > 1:
            return Cell.sequence(self, x, state, lengths)
        return super().sequence(x, state, lengths)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, steps={self.steps}, activation={self.activation}, rank={self.rank}"
