"""MomentumLSTM (Nguyen, Baraniuk, Bertozzi, Osher & Wang, NeurIPS 2020, "MomentumRNN").

The input term of the LSTM's gates is accumulated with heavy-ball momentum (column form; gate
order i, f, g, o as in torch)::

    v_t = mu v_{t-1} + epsilon (W_ih x_t + b_ih)                (4H)
    [i; f; g; o] = v_t + W_hh h_{t-1} + b_hh
    c_t = sigma(f) c_{t-1} + sigma(i) tanh(g),   h_t = sigma(o) tanh(c_t)

The state is ``(h, c, v_i, v_f, v_g, v_o)``: the momentum v (4H) travels as four (B, H)
leaves, so every state leaf has the hidden width like the other cells' (the layers' h0 and
h_n then keep torch's (layers, B, H) layout).

Fast path. v does not depend on h, and it is linear in ``[x; 1]``: from a zero v_0,
``v_t = W_ih m_t + b_ih c_t`` with ``m_t = mu m_{t-1} + epsilon x_t`` and the scalar
``c_t = mu c_{t-1} + epsilon``. ``sequence`` therefore runs that momentum on the (T, B, I + 1)
inputs ``[x; 1]`` (a loop of element-wise steps) and then ATen's LSTM (``torch.lstm``) with the
input weight ``[W_ih, b_ih]``: exact, and the recurrence is ATen's LSTM kernel. A non-zero initial v_0
adds ``mu^t v_0`` to every step, which the ATen kernel cannot take; the step loop runs then
(a given state is read once to tell), and for a v_0 that requires a gradient (zero or not).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import Cell
from .classic import run_native


class MomentumLSTMCell(Cell):
    """MomentumLSTM (see the module docstring). ``mu`` (momentum, in [0, 1)) and ``epsilon``
    (step size, > 0) are fixed hyperparameters, as in the paper. ``init="paper"``: the authors' initialisation
    (``W_ih`` orthogonal, ``W_hh`` the identity on its first H rows and zero elsewhere, biases
    zero except the forget gate's, ``forget_bias`` in both); ``"default"``: torch's uniform
    U(-1/sqrt(H), 1/sqrt(H)) for every weight. Weights have ``torch.nn.LSTM``'s names and
    shapes. State ``(h, c, v_i, v_f, v_g, v_o)``; output h.

    Example:
    >>> import torch
    >>> from rnnlab.cells import MomentumLSTMCell
    >>> cell = MomentumLSTMCell(3, 8, mu=0.6, epsilon=0.6)
    >>> h, state = cell(torch.randn(2, 3))   # state: (h, c) and the momentum v in four (B, H) parts
    >>> h.shape, len(state)
    (torch.Size([2, 8]), 6)
    """

    family = "momentumlstm"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        mu: float = 0.6,
        epsilon: float = 0.6,
        bias: bool = True,
        forget_bias: float = 1.0,
        init: str = "paper",
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        for name, value in (("mu", mu), ("epsilon", epsilon), ("forget_bias", forget_bias)):
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if not 0 <= mu < 1:  # |mu| >= 1: the momentum grows without bound (mu = 5 gives NaN)
            raise ValueError(f"MomentumLSTM mu (the momentum) must be in [0, 1), got {mu!r}; the paper uses 0.6")
        if not epsilon > 0:
            raise ValueError(f"MomentumLSTM epsilon (the step size) must be > 0, got {epsilon!r}; the paper uses 0.6")
        if init not in ("paper", "default"):
            raise ValueError(f"init must be 'paper' or 'default', got {init!r}")
        self.mu, self.epsilon, self.forget_bias, self.init = float(mu), float(epsilon), float(forget_bias), init
        G = 4 * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(G, input_size))
        self.weight_hh = nn.Parameter(torch.empty(G, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(G)) if bias else None
        self.bias_hh = nn.Parameter(torch.empty(G)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        H = self.hidden_size
        with torch.no_grad():
            if self.init == "default":
                for p in self.parameters():
                    nn.init.uniform_(p, -1.0 / math.sqrt(H), 1.0 / math.sqrt(H))
                return
            nn.init.orthogonal_(self.weight_ih)
            nn.init.eye_(self.weight_hh)
            for b in (self.bias_ih, self.bias_hh):
                if b is not None:
                    b.zero_()
                    b[H : 2 * H].fill_(self.forget_bias)

    def init_state(self, batch_size: int, *, device=None, dtype=None):
        h = super().init_state(batch_size, device=device, dtype=dtype)
        return tuple(torch.zeros_like(h) for _ in range(6))

    def recurrent_matrix(self) -> None:
        return None  # four gates stacked in weight_hh

    def forward(self, x_t: Tensor, state: tuple[Tensor, ...]):
        h, c, *v = state
        v = self.mu * torch.cat(v, 1) + self.epsilon * nn.functional.linear(x_t, self.weight_ih, self.bias_ih)
        gates = v + nn.functional.linear(h, self.weight_hh, self.bias_hh)
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, (h, c, *v.chunk(4, 1))

    def momentum_inputs(self, x: Tensor) -> Tensor:
        """``[m_t; c_t]`` (T, B, I + 1): the momentum of ``epsilon [x_t; 1]`` from zero, so that
        ``v_t = [W_ih, b_ih] [m_t; c_t]`` (see the module docstring)."""
        ones = x.new_ones(x.shape[:-1] + (1,))
        drive = self.epsilon * torch.cat([x, ones], -1)
        m, out = torch.zeros_like(drive[0]), []
        for d_t in drive.unbind(0):
            m = torch.add(d_t, m, alpha=self.mu)
            out.append(m)
        return torch.stack(out)

    def sequence(self, x: Tensor, state=None, lengths: Tensor | None = None):
        """Fast path (see the module docstring); the step loop for ``backend="reference"``, a
        non-zero initial momentum, or one that requires a gradient (the fast path starts from
        a constant zero and would give it none)."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        given = state is not None
        state = self.start_sequence(x, state)
        h0, c0, *v0 = state
        # a given momentum must be read to know it is zero (on the meta device it cannot be)
        if given and (x.device.type == "meta" or any(v.requires_grad or bool(v.any()) for v in v0)):
            return super().sequence(x, state, lengths)
        M = self.momentum_inputs(x)
        b_ih = self.bias_ih if self.bias_ih is not None else x.new_zeros(self.weight_ih.shape[0])
        w_in = torch.cat([self.weight_ih, b_ih.unsqueeze(1)], 1)
        b_hh = self.bias_hh if self.bias_hh is not None else x.new_zeros(self.weight_hh.shape[0])
        zeros = b_hh.new_zeros(b_hh.shape)
        out, (h, c) = run_native(torch.lstm, M, (h0, c0), [w_in, self.weight_hh, zeros, b_hh], lengths, self.training)
        if lengths is None:
            last = M[-1]
        else:
            idx = (torch.as_tensor(lengths, device=x.device) - 1).clamp_min(0)
            last = M[idx, torch.arange(x.shape[1], device=x.device)]
        v = nn.functional.linear(last, w_in)
        return out, (h, c, *v.chunk(4, 1))

    def extra_repr(self) -> str:
        return f"mu={self.mu}, epsilon={self.epsilon}, init={self.init}"
