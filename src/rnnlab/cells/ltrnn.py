"""Linear-transition RNN (Henaff, Szlam & LeCun 2016).

``h_t = W_hh h_{t-1} + sigma(W_ih x_t + b)``: the nonlinearity acts on the input path only, so
the transition is linear and the whole sequence is a linear recurrence over the precomputed
``v_t = sigma(W_ih x_t + b)``. ``init``: "identity" (LT-IRNN, suits adding), "orthogonal"
(random orthogonal, LT-ORNN, suits copy), "default" (uniform +-1/sqrt(H)).
``activation``: "relu" (the paper's), "tanh" or "identity". ``input_scale`` scales the input
weights' initial range (``W_ih ~ U(+-input_scale / sqrt(H))``, 1: the default) and ``bias_value``
is the bias's initial value (0: the default; Henaff's adding construction has b = -1): the paper
gives neither, and on the copy task ReLU inputs that pile up on an orthogonal W over hundreds of
steps make both decide whether training starts. Both only initialise, so members of one ensemble
may differ in them (``rnnlab.ensemble.MEMBER_KEYS``). Shapes: x_t (B, I), h (B, H).

Fast paths over the precomputed ``v`` (:mod:`rnnlab.kernels.scan`): ``backend="scan"`` (chunked
scan), ``"loop"`` (the loop inside the fused kernel: one product per step forward and one
backward), ``"auto"`` (the scan for small steps where it is faster, else the fused loop; a
given ``chunk`` forces the scan); ``"reference"`` is the step loop. With ``lengths`` the fused
loop runs (frozen state and zero outputs past each length, as the step loop).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .. import parametrize as par
from ..kernels import dispatch
from ..kernels.families.rnn import compiled_rnn, elementwise_rnn
from ..kernels.linear import tall_linear
from ..kernels.scan import linear_recurrence_fused, linear_recurrence_scan
from .base import Cell


class LTRNNCell(Cell):
    """The linear-transition cell (see the module docstring): ``h_t = W_hh h_{t-1} + sigma(W_ih x_t + b)``.

    Example:
    >>> import torch
    >>> from rnnlab.cells import LTRNNCell
    >>> cell = LTRNNCell(3, 8)
    >>> x, h0 = torch.randn(2, 3), torch.randn(2, 8)
    >>> h, _ = cell(x, h0)                            # linear in h: W_hh h + relu(W_ih x + b)
    >>> torch.allclose(h, h0 @ cell.weight_hh.T + torch.relu(x @ cell.weight_ih.T + cell.bias), atol=1e-6)
    True
    """

    #: the peak of a training step per unit (:meth:`rnnlab.cells.Cell.step_values`): three
    #: members of width 128 on ListOps (300-999 tokens, batch 16) grew by 438 MB against an LSTM's
    #: 1,002 MB at the same width; autograd saves 3.3 values per unit and step on Henaff's copy task
    TRAIN_VALUES_PER_UNIT = 24

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        activation: str = "relu",
        init: str = "identity",
        bias: bool = True,
        chunk: int = 0,
        backend: str = "auto",
        input_scale: float = 1.0,
        bias_value: float = 0.0,
    ):
        super().__init__(input_size, hidden_size, backend)
        if activation not in ("relu", "tanh", "identity"):
            raise ValueError(f"LT-RNN activation must be 'relu', 'tanh' or 'identity', got {activation!r}")
        if init not in ("identity", "orthogonal", "default"):
            raise ValueError(f"LT-RNN init must be 'identity', 'orthogonal' or 'default', got {init!r}")
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
            raise ValueError(f"LT-RNN chunk must be an integer >= 0 (0: chosen per sequence), got {chunk!r}")
        for name, v, low in (("input_scale", input_scale, "> 0"), ("bias_value", bias_value, "")):
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and (not low or v > 0)
            if not ok:
                raise ValueError(f"LT-RNN {name} must be a finite number{' ' + low if low else ''}, got {v!r}")
        self.activation, self.init, self.chunk = activation, init, chunk
        self.input_scale, self.bias_value = float(input_scale), float(bias_value)
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size)) if bias else None
        self.reset_parameters()

    family = "ltrnn"

    @classmethod
    def extra_backends(cls):
        return ("loop", "scan", "small")

    def reset_parameters(self) -> None:
        k = 1.0 / math.sqrt(self.hidden_size)
        k_in = self.input_scale / math.sqrt(self.hidden_size)  # equal to k at input_scale 1
        nn.init.uniform_(self.weight_ih, -k_in, k_in)
        with torch.no_grad():
            if self.init == "identity":
                self.weight_hh.copy_(torch.eye(self.hidden_size))
            elif self.init == "orthogonal":
                self.weight_hh.copy_(par.random_orthogonal(self.hidden_size))
            else:
                self.weight_hh.uniform_(-k, k)
            if self.bias is not None:
                self.bias.fill_(self.bias_value)

    def input_path(self, x: Tensor) -> Tensor:
        v = tall_linear(x, self.weight_ih, self.bias)  # F.linear itself for a single step
        if self.activation == "relu":
            return torch.relu(v)
        return torch.tanh(v) if self.activation == "tanh" else v

    def forward(self, x_t: Tensor, h: Tensor):
        h = nn.functional.linear(h, self.weight_hh) + self.input_path(x_t)
        return h, h

    def small_sequence(self, x, state=None, lengths=None):
        """The compiled loops of :mod:`rnnlab.kernels.small` (identity activation) where the
        backend chooses them (``"auto"`` at small widths, ``"small"``), else None."""
        path = self.path(x, lengths)
        if path not in dispatch.COMPILED:
            return None
        state = self.start_sequence(x, state)
        return compiled_rnn(self.input_path(x), self.weight_hh, state, "identity", lengths, lanes=path == "lanes")

    def batched_sequence(self, x, state=None, lengths=None):
        """The compiled loops where the backend chooses them, else the fused element-wise
        recurrence (which runs batched), whatever the backend."""
        done = self.batched_first(x, state, lengths)
        if done is not None:
            return done
        state = self.start_sequence(x, state)
        return elementwise_rnn(self.input_path(x), self.weight_hh, state, "identity", lengths=lengths)

    def sequence(self, x, state=None, lengths=None):
        """The path :meth:`path` picks: the step loop, the compiled loops, the fused element-wise
        loop (with lengths: it also returns each sequence's own final state), the loop or the scan."""
        path = self.path(x, lengths)
        if path == "step":
            return super().sequence(x, state, lengths)
        if path in dispatch.COMPILED:
            return self.small_sequence(x, state, lengths)
        state = self.start_sequence(x, state)
        v = self.input_path(x)
        if path in ("fused", "triton"):
            return elementwise_rnn(v, self.weight_hh, state, "identity", lengths=lengths)
        if path == "loop":
            out = linear_recurrence_fused(v, self.weight_hh, state)
        else:
            out = linear_recurrence_scan(v, self.weight_hh, state, self.chunk or None)
        return out, out[-1]
