"""Oscillator RNNs with a two-part state ``(y, z)``: coRNN (Rusch & Mishra, ICLR 2021) and LEM
(Rusch, Mishra, Erichson & Mahoney, ICLR 2022). The output is y; the state is ``(y, z)``, each
(B, H). ``sequence`` runs the fused kernels of :mod:`rnnlab.kernels.oscillator`
(``backend="reference"``: :func:`rnnlab.unroll`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..kernels.linear import tall_linear
from ..kernels.oscillator import cornn_recurrence, lem_recurrence
from .base import Cell, positive_option


class _TwoPartState(Cell):
    def init_state(self, batch_size: int, *, device=None, dtype=None):
        y = super().init_state(batch_size, device=device, dtype=dtype)
        return (y, torch.zeros_like(y))

    def recurrent_matrix(self) -> None:
        return None  # two coupled parts: no single (H, H) matrix


class CoRNNCell(_TwoPartState):
    """coRNN (Rusch & Mishra, ICLR 2021), the IMEX discretisation of the controlled oscillators
    ``y'' = tanh(W y + W_z y' + V u + b) - gamma y - epsilon y'`` with step ``dt``::

        z_n = z_{n-1} + dt (tanh(W y_{n-1} + W_z z_{n-1} + V x_n + b) - gamma y_{n-1} - epsilon z_{n-1})
        y_n = y_{n-1} + dt z_n

    (the damping and restoring terms explicit, the velocity update of y implicit in z_n).
    Parameters as the authors' code: one affine map of ``[x; z; y]`` (here ``weight_ih`` V,
    ``weight_hz`` W_z, ``weight_hy`` W, ``bias`` b) with torch's ``nn.Linear`` initialisation
    over its fan-in I + 2H. State ``(y, z)``; output y. Defaults: the authors' psMNIST setting.

    Example:
    >>> import torch
    >>> from rnnlab.cells import CoRNNCell
    >>> cell = CoRNNCell(3, 8, dt=0.05, gamma=1.0, epsilon=1.0)
    >>> y, (y_again, z) = cell(torch.randn(2, 3))   # state (y, z): position and velocity
    >>> torch.equal(y, y_again), torch.allclose(y, 0.05 * z)   # y_n = y_{n-1} + dt z_n from rest
    (True, True)
    """

    family = "oscillator"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        dt: float = 0.076,
        gamma: float = 0.4,
        epsilon: float = 8.0,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        self.dt, self.gamma, self.epsilon = (
            positive_option("dt", dt),
            positive_option("gamma", gamma),
            positive_option("epsilon", epsilon),
        )
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(H, input_size))
        self.weight_hy = nn.Parameter(torch.empty(H, H))
        self.weight_hz = nn.Parameter(torch.empty(H, H))
        self.bias = nn.Parameter(torch.empty(H))
        k = 1.0 / math.sqrt(input_size + 2 * H)
        for p in self.parameters():
            nn.init.uniform_(p, -k, k)

    def forward(self, x_t: Tensor, state: tuple[Tensor, Tensor]):
        y, z = state
        a = torch.tanh(
            nn.functional.linear(x_t, self.weight_ih, self.bias)
            + nn.functional.linear(y, self.weight_hy)
            + nn.functional.linear(z, self.weight_hz)
        )
        z = z + self.dt * (a - self.gamma * y - self.epsilon * z)
        y = y + self.dt * z
        return y, (y, z)

    def sequence(self, x: Tensor, state=None, lengths: Tensor | None = None):
        """Fast path: the input terms of all steps in one product, then the fused coRNN loop."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        y0, z0 = self.start_sequence(x, state)
        u = tall_linear(x, self.weight_ih, self.bias)
        W = torch.cat([self.weight_hy, self.weight_hz], 1)
        Y, y, z = cornn_recurrence(u, W, y0, z0, self.dt, self.gamma, self.epsilon, lengths)
        return Y, (y, z)

    def extra_repr(self) -> str:
        return f"dt={self.dt}, gamma={self.gamma}, epsilon={self.epsilon}"


class LEMCell(_TwoPartState):
    """LEM, Long Expressive Memory (Rusch, Mishra, Erichson & Mahoney, ICLR 2022), the
    multiscale discretisation of its ODE system with learned time steps::

        dt_n  = dt sigmoid(W_1 y_{n-1} + V_1 x_n + b_1)      dtb_n = dt sigmoid(W_2 y_{n-1} + V_2 x_n + b_2)
        z_n   = (1 - dt_n) z_{n-1} + dt_n tanh(W_z y_{n-1} + V_z x_n + b_z)
        y_n   = (1 - dtb_n) y_{n-1} + dtb_n tanh(W_y z_n + V_y x_n + b_y)

    Parameters: ``weight_ih`` (4H, I) = ``[V_1; V_2; V_z; V_y]`` with ``bias_ih`` (4H),
    ``weight_hh`` (3H, H) = ``[W_1; W_2; W_z]`` with ``bias_hh`` (3H), ``weight_zy`` (H, H) =
    W_y with ``bias_zy`` (H): the three affine maps of the authors' code, every entry
    ~ U(-1/sqrt(H), 1/sqrt(H)) as there (their blocks come in another order: names only).
    State ``(y, z)``; output y.

    Example:
    >>> import torch
    >>> from rnnlab.cells import LEMCell
    >>> cell = LEMCell(3, 8)
    >>> y, (y_again, z) = cell(torch.randn(2, 3))
    >>> bool(y.abs().max() < 1 and z.abs().max() < 1)   # convex combinations of tanh: bounded by 1
    True
    """

    family = "oscillator"

    def __init__(self, input_size: int, hidden_size: int, dt: float = 1.0, backend: str = "auto"):
        super().__init__(input_size, hidden_size, backend)
        self.dt = positive_option("dt", dt)
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * H, input_size))
        self.bias_ih = nn.Parameter(torch.empty(4 * H))
        self.weight_hh = nn.Parameter(torch.empty(3 * H, H))
        self.bias_hh = nn.Parameter(torch.empty(3 * H))
        self.weight_zy = nn.Parameter(torch.empty(H, H))
        self.bias_zy = nn.Parameter(torch.empty(H))
        k = 1.0 / math.sqrt(H)
        for p in self.parameters():
            nn.init.uniform_(p, -k, k)

    def _input_terms(self, x: Tensor) -> Tensor:
        """``[V_1 x + b_1; V_2 x + b_2; V_z x + b_z; V_y x + b_y]`` with every bias folded in."""
        bias = self.bias_ih + torch.cat([self.bias_hh, self.bias_zy])
        return tall_linear(x, self.weight_ih, bias) if x.dim() == 3 else nn.functional.linear(x, self.weight_ih, bias)

    def forward(self, x_t: Tensor, state: tuple[Tensor, Tensor]):
        y, z = state
        H = self.hidden_size
        u = self._input_terms(x_t)
        p = nn.functional.linear(y, self.weight_hh) + u[:, : 3 * H]
        dt_n = self.dt * torch.sigmoid(p[:, :H])
        dtb_n = self.dt * torch.sigmoid(p[:, H : 2 * H])
        z = (1 - dt_n) * z + dt_n * torch.tanh(p[:, 2 * H :])
        y = (1 - dtb_n) * y + dtb_n * torch.tanh(nn.functional.linear(z, self.weight_zy) + u[:, 3 * H :])
        return y, (y, z)

    def sequence(self, x: Tensor, state=None, lengths: Tensor | None = None):
        """Fast path: the four input terms of all steps in one product, then the fused LEM loop."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        y0, z0 = self.start_sequence(x, state)
        Y, y, z = lem_recurrence(self._input_terms(x), self.weight_hh, self.weight_zy, y0, z0, self.dt, lengths)
        return Y, (y, z)

    def extra_repr(self) -> str:
        return f"dt={self.dt}"
