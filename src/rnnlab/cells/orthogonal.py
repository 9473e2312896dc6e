"""Orthogonal RNNs: expRNN (Lezcano-Casado & Martinez-Rubio 2019) and scoRNN (Helfrich et
al. 2018).

``h_t = modReLU(W_hh h_{t-1} + W_ih x_t)``, modReLU(z) = sign(z) relu(|z| + b), with
``W_hh`` orthogonal: ``W_hh = exp(A - A^T)`` (expRNN; with K set, dynamic trivialization)
or ``W_hh = (I + A - A^T)^{-1} (I - A + A^T) D`` (scoRNN, D = diag of +-1 with ``negatives``
entries -1). The orthogonal free parameter is tagged ``"orthogonal"`` for its own learning
rate. Shapes: x_t (B, I), h (B, H).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .. import parametrize as par
from ..kernels.families.rnn import elementwise_rnn, modrelu
from ..kernels.linear import tall_linear
from .base import Cell


class OrthogonalRNNCell(Cell):
    family = "orthogonal"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        map: str = "expm",
        init: str = "henaff",
        K: int | None = None,
        M: int | None = None,
        negatives: int = 0,
        backend: str = "auto",
        input_init: str = "kaiming",
    ):
        super().__init__(input_size, hidden_size, backend)
        if not 0 <= negatives <= hidden_size:
            raise ValueError(f"negatives must be in [0, hidden_size={hidden_size}], got {negatives}")
        if input_init not in ("kaiming", "xavier"):
            raise ValueError(f"input_init must be 'kaiming' or 'xavier', got {input_init!r}")
        self.input_init = input_init
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size))
        if input_init == "kaiming":  # expRNN's code
            nn.init.kaiming_normal_(self.weight_ih, nonlinearity="relu")
        else:  # Glorot normal: the nnRNN authors' copy and MNIST scripts (--iinit xavier, their default)
            nn.init.xavier_normal_(self.weight_ih)
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))
        scaling = torch.ones(hidden_size)
        scaling[hidden_size - negatives :] = -1.0
        self.orthogonal = par.orthogonal_(self, "weight_hh", map, init, K, M, scaling=scaling)
        self.bias = nn.Parameter(torch.empty(hidden_size).uniform_(-0.01, 0.01))
        self.tag_parameters("parametrizations.weight_hh", "orthogonal")

    def forward(self, x_t: Tensor, h: Tensor):
        z = nn.functional.linear(x_t, self.weight_ih) + nn.functional.linear(h, self.weight_hh)
        h = modrelu(z, self.bias)
        return h, h

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """Fast path: one product for all input terms ``x @ W_ih.T``, the orthogonal map
        evaluated once, then the fused modReLU recurrence (:func:`rnnlab.kernels.elementwise_rnn`).
        ``backend="reference"`` runs :func:`rnnlab.unroll` instead."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        return self.batched_sequence(x, state, lengths)

    def batched_sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """The fast path of :meth:`sequence` (its recurrence runs batched), whatever the backend."""
        state = self.start_sequence(x, state)
        u = tall_linear(x, self.weight_ih)
        return elementwise_rnn(u, self.weight_hh, state, "modrelu", self.bias, lengths)

    def free_parameter_count(self) -> int:
        n = self.hidden_size
        return self.weight_ih.numel() + self.bias.numel() + n * (n - 1) // 2


class ExpRNNCell(OrthogonalRNNCell):
    """expRNN: orthogonal W_hh through the matrix exponential; ``K``/``M`` turn on dynamic
    trivialization. ``init`` in {"henaff", "cayley", "haar", "identity", "random"}.
    ``input_init``: "kaiming" (normal, std sqrt(2 / I): expRNN's code) or "xavier" (Glorot
    normal: the nnRNN authors' copy and MNIST scripts run their expRNN so).

    Example:
    >>> import torch
    >>> from rnnlab.cells import ExpRNNCell
    >>> cell = ExpRNNCell(3, 8)
    >>> W = cell.recurrent_matrix()                  # expm of a skew-symmetric matrix
    >>> torch.allclose(W @ W.T, torch.eye(8), atol=1e-5)
    True
    >>> h, _ = cell(torch.randn(2, 3))
    >>> h.shape
    torch.Size([2, 8])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        init: str = "henaff",
        K: int | None = None,
        M: int | None = None,
        backend: str = "auto",
        input_init: str = "kaiming",
    ):
        super().__init__(input_size, hidden_size, "expm", init, K, M, 0, backend, input_init)


class SCORNNCell(OrthogonalRNNCell):
    """scoRNN: W_hh = (I + X)^{-1} (I - X) D with X skew, D = diag(+-1) with ``negatives``
    entries -1 (default: none).

    Example:
    >>> import torch
    >>> from rnnlab.cells import SCORNNCell
    >>> cell = SCORNNCell(3, 8)
    >>> W = cell.recurrent_matrix()                  # scaled Cayley transform: orthogonal
    >>> torch.allclose(W @ W.T, torch.eye(8), atol=1e-5)
    True
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        init: str = "cayley",
        negatives: int = 0,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, "cayley", init, None, None, negatives, backend)
