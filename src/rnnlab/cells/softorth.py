"""The factorised RNN of Vorontsov, Trabelsi, Kadoury & Pal (ICML 2017, "On orthogonality and
learning recurrent networks with long term dependencies"): a vanilla RNN whose recurrent
matrix is kept in its singular value decomposition, so that how far it may stray from
orthogonality is set directly.

``h_t = f(W h_{t-1} + W_ih x_t + b)``, ``W = U diag(s) V^T`` with U, V orthogonal (here through
:func:`rnnlab.parametrize.orthogonal_`) and the singular values

* with a spectral margin m: ``s = 1 + 2 m (sigmoid(p) - 1/2)``, so every singular value of W
  lies in (1 - m, 1 + m) (m = 0: W orthogonal); ``p = 0`` at init (W = U V^T);
* without a margin (``margin=None``, the default): ``s = p`` free, ones at init.

``penalty`` adds the paper's soft orthogonality constraint ``penalty * ||W^T W - I||_F^2``
to the loss (:meth:`regularization`); with W factorised it is ``penalty * sum_i (s_i^2 - 1)^2``.
The fast path computes W once per sequence and runs :func:`rnnlab.kernels.elementwise_rnn`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .. import parametrize as par
from ..kernels.families.rnn import elementwise_rnn
from ..kernels.linear import tall_linear
from .base import Cell


class SoftOrthRNNCell(Cell):
    """Vorontsov et al.'s factorised RNN with a spectral margin and a soft orthogonality
    penalty (see the module docstring). ``nonlinearity``: "tanh" or "relu". ``map``, ``init``:
    the orthogonal map and initialiser of U and V (:mod:`rnnlab.parametrize`); their free
    parameters are tagged ``"orthogonal"``. Free parameters: ``H (H - 1) / 2`` each for U and
    V, H singular values, plus ``W_ih`` and ``b`` (H^2 + H I + H in all).

    Example:
    >>> import torch
    >>> from rnnlab.cells import SoftOrthRNNCell
    >>> cell = SoftOrthRNNCell(3, 8, margin=0.1)
    >>> s = torch.linalg.svdvals(cell.recurrent_matrix())
    >>> bool(((s > 0.9 - 1e-5) & (s < 1.1 + 1e-5)).all())   # singular values within the margin
    True
    """

    family = "transformed"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        margin: float | None = None,
        penalty: float = 0.0,
        nonlinearity: str = "tanh",
        map: str = "cayley",
        init: str = "haar",
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        if margin is not None and not (isinstance(margin, (int, float)) and 0.0 <= margin < 1.0):
            raise ValueError(f"margin must be None (free singular values) or in [0, 1), got {margin!r}")
        if not (isinstance(penalty, (int, float)) and math.isfinite(penalty) and penalty >= 0):
            raise ValueError(f"penalty must be a number >= 0, got {penalty!r}")
        self.margin = None if margin is None else float(margin)
        self.penalty, self.nonlinearity = float(penalty), nonlinearity
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(H, input_size))
        nn.init.xavier_uniform_(self.weight_ih)
        self.bias = nn.Parameter(torch.zeros(H))
        self.weight_u = nn.Parameter(torch.empty(H, H))
        self.weight_v = nn.Parameter(torch.empty(H, H))
        par.orthogonal_(self, "weight_u", map, init)
        par.orthogonal_(self, "weight_v", map, init)
        self.singular = nn.Parameter(torch.zeros(H) if self.margin is not None else torch.ones(H))
        for name in ("parametrizations.weight_u", "parametrizations.weight_v"):
            self.tag_parameters(name, "orthogonal")

    def singular_values(self) -> Tensor:
        if self.margin is None:
            return self.singular
        return 1.0 + 2.0 * self.margin * (torch.sigmoid(self.singular) - 0.5)

    @property
    def weight_hh(self) -> Tensor:
        """``W = U diag(s) V^T`` (column form, applied as ``h @ W.T``)."""
        return (self.weight_u * self.singular_values()) @ self.weight_v.t()

    def recurrent_matrix(self) -> Tensor:
        return self.weight_hh

    def regularization(self) -> Tensor | None:
        if self.penalty == 0:
            return None
        return self.penalty * (self.singular_values().square() - 1).square().sum()

    def forward(self, x_t: Tensor, h: Tensor):
        z = nn.functional.linear(x_t, self.weight_ih, self.bias) + nn.functional.linear(h, self.weight_hh)
        h = torch.tanh(z) if self.nonlinearity == "tanh" else torch.relu(z)
        return h, h

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """Fast path: the input terms in one product, W once, then the fused recurrence."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        h = self.start_sequence(x, state)
        u = tall_linear(x, self.weight_ih, self.bias)
        return elementwise_rnn(u, self.weight_hh, h, self.nonlinearity, None, lengths)

    def free_parameter_count(self) -> int:
        H = self.hidden_size
        return self.weight_ih.numel() + self.bias.numel() + H * (H - 1) + H

    def extra_repr(self) -> str:
        return f"margin={self.margin}, penalty={self.penalty}, nonlinearity={self.nonlinearity}"
