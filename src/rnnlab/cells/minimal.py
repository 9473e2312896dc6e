"""minGRU and minLSTM (Feng, Tung, Ahmed, Bengio and Hajimirsadeghi, "Were RNNs All We
Needed?", 2024): GRU and LSTM whose gates and candidate depend on the input alone, so the
recurrence is diagonal and linear in the state and runs as a parallel scan.

Both cells use the paper's positive candidate ``h~_t = g(W_h x_t + b_h)`` (``g(x) = x + 1/2``
for ``x >= 0``, ``sigmoid(x)`` below), which the log-space scan needs, in both modes: the step
``forward`` is the paper's sequential mode in plain arithmetic, ``sequence`` runs its parallel
mode in log space (:func:`rnnlab.kernels.logscan.log_linear_scan`, ``backend="scan"``, the
default off the CPU) or the sequential mode's element-wise loop over precomputed input terms
(``backend="loop"``, the default on the CPU, where it is faster); all are tested equal to 1e-10
in float64, outputs, final state and every gradient. ``backend="reference"``: the step loop
(:func:`rnnlab.unroll`). The output is the state h (the paper's blocks add their own
projections around the layer). The start h0 may have any sign (it enters the scan linearly).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..kernels.ensemble import batched_linear
from ..kernels.linear import tall_linear
from ..kernels.logscan import diagonal_loop, g, log_g, log_linear_scan, softplus
from .base import Cell


class _InputGated(Cell):
    """Shared parts: ``gates`` affine maps of the input, ``weight_ih`` (gates * H, I) and
    ``bias_ih`` (gates * H), initialised as ``torch.nn.Linear`` (U(-1/sqrt(I), 1/sqrt(I)));
    no recurrent weights."""

    gates = 2

    def __init__(self, input_size: int, hidden_size: int, backend: str = "auto"):
        super().__init__(input_size, hidden_size, backend)
        self.weight_ih = nn.Parameter(torch.empty(self.gates * hidden_size, input_size))
        self.bias_ih = nn.Parameter(torch.empty(self.gates * hidden_size))
        self.reset_parameters()

    @classmethod
    def extra_backends(cls) -> tuple[str, ...]:
        return ("scan", "loop")

    def reset_parameters(self) -> None:
        k = 1.0 / math.sqrt(self.input_size)
        for p in (self.weight_ih, self.bias_ih):
            nn.init.uniform_(p, -k, k)

    def recurrent_matrix(self) -> None:
        return None  # diagonal, input-dependent transition: no (H, H) matrix

    def _coefficients(self, k: Tensor) -> tuple[Tensor, Tensor]:
        """``(a_t, b_t)`` of ``h_t = a_t h_{t-1} + b_t`` from the input terms ``k``, in plain
        arithmetic (the sequential mode)."""
        raise NotImplementedError

    def _log_coefficients(self, k: Tensor) -> tuple[Tensor, Tensor]:
        """``(log a_t, log b_t)`` of the same, computed in log space (the parallel mode)."""
        raise NotImplementedError

    def forward(self, x_t: Tensor, h: Tensor):
        a, b = self._coefficients(nn.functional.linear(x_t, self.weight_ih, self.bias_ih))
        h = a * h + b
        return h, h

    family = "mingated"

    def uses_scan(self, x: Tensor) -> bool:
        """Whether ``sequence`` runs the log-space scan (:meth:`path` is ``"scan"``): the
        dispatch rule of the ``mingated`` family takes it for ``backend="scan"``, or ``"auto"``
        off the CPU. On the CPU ``"auto"`` runs the loop: one thread gains nothing from a scan's
        parallelism, and the scan's transcendental functions and ``logcumsumexp``'s backward
        made it 3.4 times slower than the loop there (docs/models.md, "Speed")."""
        return self.path(x) == "scan"

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """The path :meth:`path` picks: the step loop, or every step's input terms in one
        product, then the log-space scan (parallel mode) or the element-wise loop (sequential
        mode), see :meth:`uses_scan`."""
        path = self.path(x, lengths)
        if path == "step":
            return super().sequence(x, state, lengths)
        h0 = self.start_sequence(x, state)
        k = tall_linear(x, self.weight_ih, self.bias_ih)
        if path == "scan":
            return log_linear_scan(*self._log_coefficients(k), h0, lengths)
        return diagonal_loop(*self._coefficients(k), h0, lengths)

    def batched_sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """An ensemble's batched model (under ``torch.func.vmap``): the element-wise loop over
        input terms of all members in one product, whatever the backend (the scan's guard
        against second-order gradients is an autograd Function without a vmap rule): the
        ``mingated`` rule's ensemble path."""
        done = self.batched_first(x, state, lengths)
        if done is not None:
            return done
        h0 = self.start_sequence(x, state)
        return diagonal_loop(*self._coefficients(batched_linear(x, self.weight_ih, self.bias_ih)), h0, lengths)


class MinGRUCell(_InputGated):
    """minGRU (Feng et al. 2024, its minimal GRU), column form::

        z_t  = sigmoid(W_z x_t + b_z)              (update gate, input only)
        h~_t = g(W_h x_t + b_h)                    (candidate, positive)
        h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t

    ``weight_ih`` (2H, I) = ``[W_z; W_h]``, ``bias_ih`` (2H). State h (B, H); output h.
    ``sequence`` computes the same in log space: ``log(1 - z) = -softplus(k_z)``,
    ``log z = -softplus(-k_z)``, ``log h~ = log g(k_h)``.

    Example:
    >>> import torch
    >>> from rnnlab.cells import MinGRUCell, unroll
    >>> cell = MinGRUCell(3, 8).double()
    >>> x = torch.randn(20, 2, 3, dtype=torch.float64)
    >>> scan = MinGRUCell(3, 8, backend="scan").double()
    >>> _ = scan.load_state_dict(cell.state_dict())
    >>> out, h = scan.sequence(x)                       # the log-space scan
    >>> ref, h_ref = unroll(cell, x)                    # the step loop
    >>> bool(torch.allclose(out, ref, atol=1e-12, rtol=0))
    True
    """

    gates = 2

    def _coefficients(self, k: Tensor) -> tuple[Tensor, Tensor]:
        kz, kh = k.chunk(2, dim=-1)
        z = torch.sigmoid(kz)
        return 1 - z, z * g(kh)

    def _log_coefficients(self, k: Tensor) -> tuple[Tensor, Tensor]:
        kz, kh = k.chunk(2, dim=-1)
        sp = softplus
        return -sp(kz), -sp(-kz) + log_g(kh)


class MinLSTMCell(_InputGated):
    """minLSTM (Feng et al. 2024, its minimal LSTM with the normalised gates of its
    length-independent form), column form::

        f_t  = sigmoid(W_f x_t + b_f)      i_t = sigmoid(W_i x_t + b_i)
        f'_t = f_t / (f_t + i_t)           i'_t = i_t / (f_t + i_t)
        h~_t = g(W_h x_t + b_h)
        h_t  = f'_t * h_{t-1} + i'_t * h~_t

    ``weight_ih`` (3H, I) = ``[W_f; W_i; W_h]``, ``bias_ih`` (3H). State h (B, H); output h.
    In log space, with ``d = softplus(-k_f) - softplus(-k_i)`` (= log i - log f):
    ``log f' = -softplus(d)``, ``log i' = -softplus(-d)``.

    Example:
    >>> import torch
    >>> from rnnlab.cells import MinLSTMCell
    >>> cell = MinLSTMCell(3, 8)
    >>> h, _ = cell(torch.randn(2, 3))
    >>> bool((h > 0).all())          # from h0 = 0 a convex mix of positive candidates
    True
    """

    gates = 3

    def _coefficients(self, k: Tensor) -> tuple[Tensor, Tensor]:
        kf, ki, kh = k.chunk(3, dim=-1)
        f, i = torch.sigmoid(kf), torch.sigmoid(ki)
        return f / (f + i), i / (f + i) * g(kh)

    def _log_coefficients(self, k: Tensor) -> tuple[Tensor, Tensor]:
        kf, ki, kh = k.chunk(3, dim=-1)
        sp = softplus
        d = sp(-kf) - sp(-ki)
        return -sp(d), -sp(-d) + log_g(kh)
