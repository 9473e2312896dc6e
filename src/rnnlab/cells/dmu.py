"""Deep Memory Update (DMU) and the Recurrent Highway Network (RHN) it is compared with.

DMU (Kamiński et al., "Deep Memory Update"): with ``u = [x_t; h_{t-1}]``,
``[z_t; hhat_t] = FNN(u)`` where the FNN has hidden layers ``a <- LeakyReLU_0.01(W a + b)``
and a linear output layer with 2H outputs, and
``h_t = sigmoid(z_t) * h_{t-1} + (1 - sigmoid(z_t)) * f(hhat_t)`` (f = tanh by default).
Init: Xavier uniform (gain for leaky ReLU on hidden layers, 1 on the output layer), zero
biases, then ``z_bias`` (the paper's "positive scalar", 3) added to the z half of the output
bias. The learning-rate rule of the paper, ``beta_DMU = beta / (2 n)`` with n the number of
FNN layers (hidden layers + the linear output layer), and weight decay divided by the same
factor, is exposed through ``group_scales()``: every DMU parameter is tagged ``"memory"`` and
the trainer scales that group's lr and weight decay by ``1 / (2 n)`` (an explicit
``[optim.group_lr] memory = ...`` overrides it).

RHN (Zilly et al. 2017), coupled carry gate, ``depth`` micro-layers per time step:
``s_0 = h_{t-1}``; for l = 1..depth: ``[a; b] = R_l s_{l-1} + b_l (+ W x_t if l == 1)``,
``hh = tanh(a)``, ``t = sigmoid(b)``, ``s_l = hh * t + s_{l-1} * (1 - t)``; ``h_t = s_depth``.
Shapes: x_t (B, I), h (B, H).

Fast paths (``backend="auto"``): both cells compute the input terms of all steps in one
product and run the recurrence through a hand-written BPTT (:mod:`rnnlab.kernels.families.dmu`,
:mod:`rnnlab.kernels.families.rhn`), tested equal to the step loop in float64;
``backend="reference"`` (and input with ``lengths``) runs the step loop.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..kernels import dispatch
from ..kernels.ensemble import batched_linear
from ..kernels.families.dmu import compiled_dmu, dmu_recurrence, ensemble_dmu
from ..kernels.families.rhn import compiled_rhn, ensemble_rhn, rhn_recurrence
from ..kernels.linear import tall_linear
from .base import Cell, real_option


class DMUCell(Cell):
    """DMU with FNN hidden layer widths ``layers`` (default one layer of ``hidden_size``;
    ``layers=[]`` is the paper's single linear layer ``[z; hh] = W [x; h] + b``). Every depth
    takes the fused fast path, tested equal to the step loop in float64.

    Example:
    >>> import torch
    >>> from rnnlab.cells import DMUCell
    >>> cell = DMUCell(3, 8)
    >>> h, _ = cell(torch.randn(2, 3))               # gated memory, updated by a small deep net
    >>> h.shape
    torch.Size([2, 8])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        layers: list[int] | tuple[int, ...] | None = None,
        z_bias: float = 3.0,
        activation: str = "tanh",
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        layers = [hidden_size] if layers is None else [int(w) for w in layers]
        if any(w < 1 for w in layers):
            raise ValueError(f"DMU hidden layer widths must be positive, got {layers}")
        if activation not in ("tanh", "identity"):
            raise ValueError(f"DMU activation must be 'tanh' or 'identity', got {activation!r}")
        self.layers, self.z_bias, self.activation = layers, real_option("z_bias", z_bias), activation
        sizes = [input_size + hidden_size] + layers + [2 * hidden_size]
        self.fnn = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.depth = len(self.fnn)
        self.reset_parameters()
        self.tag_parameters("fnn", "memory")

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("leaky_relu", 0.01)
        for i, lin in enumerate(self.fnn):
            nn.init.xavier_uniform_(lin.weight, gain=gain if i < len(self.fnn) - 1 else 1.0)
            nn.init.zeros_(lin.bias)
        with torch.no_grad():
            self.fnn[-1].bias[: self.hidden_size] += self.z_bias

    def group_scales(self) -> dict[str, float]:
        return {"memory": 1.0 / (2 * self.depth)}

    def forward(self, x_t: Tensor, h: Tensor):
        a = torch.cat([x_t, h], dim=1)
        for lin in self.fnn[:-1]:
            a = nn.functional.leaky_relu(lin(a), 0.01)
        z, hh = self.fnn[-1](a).chunk(2, dim=1)
        if self.activation == "tanh":
            hh = torch.tanh(hh)
        g = torch.sigmoid(z)
        h = g * h + (1 - g) * hh
        return h, h

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """Fast path: the first layer's input terms of all steps in one product, then the
        fused loop :func:`rnnlab.kernels.families.dmu.dmu_recurrence` (hand-written BPTT). With
        ``lengths``, or ``backend="reference"``, the step loop :func:`rnnlab.unroll` runs; the
        compiled loops where the rule (:meth:`path`) picks them."""
        path = self.path(x, lengths)
        if path == "step":
            return super().sequence(x, state, lengths)
        if path in dispatch.COMPILED:
            return self.small_sequence(x, state, lengths)
        state = self.start_sequence(x, state)
        I = self.input_size
        first, out = self.fnn[0], self.fnn[-1]
        u1 = tall_linear(x, first.weight[:, :I], first.bias)
        w1h = first.weight[:, I:].contiguous()
        if self.depth == 1:  # layers=[]: the single linear layer is the output layer itself
            hs = dmu_recurrence(u1, state, w1h, [], None, None, self.activation, 0.01)
            return hs, hs[-1]
        hidden = [(lin.weight, lin.bias) for lin in self.fnn[1:-1]]
        hs = dmu_recurrence(u1, state, w1h, hidden, out.weight, out.bias, self.activation, 0.01)
        return hs, hs[-1]

    family = "dmu"
    linear_input = True

    def dispatch_width(self) -> int:
        return max([self.hidden_size, *self.layers])  # the update network's width counts

    def dispatch_weight(self) -> Tensor:
        return self.fnn[0].weight

    @classmethod
    def extra_backends(cls) -> tuple[str, ...]:
        return ("fused", "small")

    def small_sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """The compiled loops of :mod:`rnnlab.kernels.small` where the backend chooses them
        (``"auto"`` at small widths, ``"small"``), else None."""
        first, last = self.fnn[0], self.fnn[-1]
        path = self.path(x, lengths)
        if path not in dispatch.COMPILED:
            return None
        state = self.start_sequence(x, state)
        I = self.input_size
        u1 = batched_linear(x, first.weight[:, :I], first.bias)
        lanes = path == "lanes"
        if self.depth == 1:  # layers=[]: the one linear layer is the output layer
            return compiled_dmu(
                u1, state, first.weight[:, I:], [], None, None, self.activation, 0.01, lengths, lanes=lanes
            )
        hidden = [(lin.weight, lin.bias) for lin in self.fnn[1:-1]]
        w1h = first.weight[:, I:]
        return compiled_dmu(u1, state, w1h, hidden, last.weight, last.bias, self.activation, 0.01, lengths, lanes=lanes)

    def batched_sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """The compiled loops where the backend chooses them, else the batched loop
        :func:`rnnlab.kernels.families.dmu.ensemble_dmu`; with lengths under a bf16/fp16 autocast,
        the single run's path: its step loop."""
        done = self.batched_first(x, state, lengths)
        if done is not None:
            return done
        state = self.start_sequence(x, state)
        n_in, first, last = self.input_size, self.fnn[0], self.fnn[-1]
        u1 = batched_linear(x, first.weight[:, :n_in], first.bias)
        if self.depth == 1:  # layers=[]: the one linear layer is the output layer
            return ensemble_dmu(u1, state, first.weight[:, n_in:], [], None, None, self.activation, 0.01, lengths)
        hidden = [(lin.weight, lin.bias) for lin in self.fnn[1:-1]]
        return ensemble_dmu(
            u1, state, first.weight[:, n_in:], hidden, last.weight, last.bias, self.activation, 0.01, lengths
        )


class RHNCell(Cell):
    """Recurrent Highway Network with coupled carry gate (see the module docstring).
    ``transform_bias`` initialises the transform-gate biases (negative: carry by default).
    ``init="linear"`` starts every map as a default ``torch.nn.Linear`` would, as the DMU
    authors' released RHN does: input weights U(+-1/sqrt(input_size)), recurrent weights and
    both biases U(+-1/sqrt(hidden_size)), the transform gate near 0.5 (``transform_bias`` is then
    not used); ``init="rnnlab"`` (default): every weight U(+-1/sqrt(hidden_size)), the
    candidate biases 0 and the transform biases ``transform_bias``.

    Example:
    >>> import torch
    >>> from rnnlab.cells import RHNCell
    >>> cell = RHNCell(3, 8)
    >>> h, _ = cell(torch.randn(2, 3))
    >>> h.shape
    torch.Size([2, 8])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        depth: int = 2,
        transform_bias: float = -2.0,
        backend: str = "auto",
        init: str = "rnnlab",
    ):
        super().__init__(input_size, hidden_size, backend)
        if depth < 1:
            raise ValueError(f"RHN depth must be >= 1, got {depth}")
        if init not in ("rnnlab", "linear"):
            raise ValueError(f"RHN init must be 'rnnlab' or 'linear' (torch.nn.Linear's default), got {init!r}")
        self.init = init
        self.depth, self.transform_bias = int(depth), real_option("transform_bias", transform_bias)
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(2 * H, input_size))
        self.weight_hh = nn.Parameter(torch.empty(self.depth, 2 * H, H))
        self.bias = nn.Parameter(torch.empty(self.depth, 2 * H))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        k = 1.0 / math.sqrt(self.hidden_size)
        if self.init == "linear":
            k_in = 1.0 / math.sqrt(self.input_size)
            nn.init.uniform_(self.weight_ih, -k_in, k_in)
            nn.init.uniform_(self.weight_hh, -k, k)
            nn.init.uniform_(self.bias, -k, k)
            return
        for p in (self.weight_ih, self.weight_hh):
            nn.init.uniform_(p, -k, k)
        with torch.no_grad():
            self.bias.zero_()
            self.bias[:, self.hidden_size :] = self.transform_bias

    def forward(self, x_t: Tensor, h: Tensor):
        s = h
        inp = nn.functional.linear(x_t, self.weight_ih)
        for l in range(self.depth):
            pre = nn.functional.linear(s, self.weight_hh[l], self.bias[l])
            if l == 0:
                pre = pre + inp
            a, b = pre.chunk(2, dim=1)
            t = torch.sigmoid(b)
            s = torch.tanh(a) * t + s * (1 - t)
        return s, s

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """Fast path: the input terms of all steps in one product, then the fused loop
        :func:`rnnlab.kernels.families.rhn.rhn_recurrence`. With ``lengths``, or
        ``backend="reference"``, the step loop :func:`rnnlab.unroll` runs; the compiled loops
        where the rule (:meth:`path`) picks them."""
        path = self.path(x, lengths)
        if path == "step":
            return super().sequence(x, state, lengths)
        if path in dispatch.COMPILED:
            return self.small_sequence(x, state, lengths)
        state = self.start_sequence(x, state)
        u = tall_linear(x, self.weight_ih, self.bias[0])
        hs = rhn_recurrence(u, state, self.weight_hh, self.bias)
        return hs, hs[-1]

    family = "rhn"
    linear_input = True

    @classmethod
    def extra_backends(cls) -> tuple[str, ...]:
        return ("fused", "small")

    def small_sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """The compiled loops of :mod:`rnnlab.kernels.small` where the backend chooses them
        (``"auto"`` at small widths, ``"small"``), else None."""
        path = self.path(x, lengths)
        if path not in dispatch.COMPILED:
            return None
        state = self.start_sequence(x, state)
        u = batched_linear(x, self.weight_ih)
        return compiled_rhn(u, self.weight_hh, self.bias, state, lengths, lanes=path == "lanes")

    def batched_sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """The compiled loops where the backend chooses them, else the batched loop
        :func:`rnnlab.kernels.families.rhn.ensemble_rhn`; with lengths under a bf16/fp16 autocast,
        the single run's path: its step loop."""
        done = self.batched_first(x, state, lengths)
        if done is not None:
            return done
        state = self.start_sequence(x, state)
        # the first micro-layer's bias enters the input terms, as in the single run's fast path
        # (under autocast they round together)
        bias = torch.cat([torch.zeros_like(self.bias[:1]), self.bias[1:]])
        return ensemble_rhn(batched_linear(x, self.weight_ih, self.bias[0]), self.weight_hh, bias, state, lengths)
