"""Classic cells: vanilla RNN (tanh / relu / modReLU; IRNN), LSTM and GRU.

Weights use ``torch.nn.RNN``'s names and shapes, so a state dict moves between these cells
and ``torch.nn.RNN``/``LSTM``/``GRU`` layers. The ``sequence`` fast path runs ATen's native
kernel for the LSTM (``torch.lstm``), the fused recurrence :func:`rnnlab.kernels.elementwise_rnn`
for the vanilla RNN (tanh, relu, modReLU) and :func:`rnnlab.kernels.families.gru.gru_recurrence` for
the GRU (both measured faster here than ATen's ``torch.rnn_tanh``/``rnn_relu``/``gru``, which
remain available as ``backend="native"``); the step ``forward`` is the reference and the
paths are tested equal.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .. import parametrize as par
from ..kernels import dispatch
from ..kernels.amp import autocasting, float32_region, full_precision, low_precision_autocast
from ..kernels.ensemble import batched_linear
from ..kernels.families.gru import compiled_gru, ensemble_gru, gru_recurrence
from ..kernels.families.lstm import compiled_lstm, ensemble_lstm
from ..kernels.families.rnn import compiled_rnn, elementwise_rnn, modrelu
from ..kernels.linear import tall_linear
from ..kernels.state import State, map_state
from .base import Cell, real_option


def run_native(fn, x: Tensor, state: State, weights: list[Tensor], lengths: Tensor | None, training: bool):
    """Run one layer of an ATen RNN kernel (``torch.lstm`` etc.) over time-major ``x``.

    Under CPU autocast the kernel runs in float32 with autocast off (oneDNN's RNN primitives
    reject bfloat16 on CPUs without native support); on CUDA autocast runs cuDNN in its dtype."""
    if x.device.type == "cpu" and autocasting("cpu"):
        with torch.autocast("cpu", enabled=False):
            dt = full_precision(x)
            return run_native(
                fn, x.to(dt), map_state(lambda s: s.to(dt), state), [w.to(dt) for w in weights], lengths, training
            )
    tuple_state = not isinstance(state, Tensor)
    hx = map_state(lambda s: s.unsqueeze(0).contiguous(), state)
    if lengths is None:
        out, *h = fn(x, hx, weights, True, 1, 0.0, training, False, False)
    else:
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        hx = map_state(lambda s: s.index_select(1, packed.sorted_indices), hx)
        out, *h = fn(packed.data, packed.batch_sizes, hx, weights, True, 1, 0.0, training, False)
        out, _ = pad_packed_sequence(packed._replace(data=out), total_length=x.shape[0])
        h = [s.index_select(1, packed.unsorted_indices) for s in h]
    h = [s.squeeze(0) for s in h]
    return out, (tuple(h) if tuple_state else h[0])


class _Affine(Cell):
    """Shared parameters of the classic cells: ``gates * H`` rows of input/hidden weights."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, backend: str = "auto"):
        super().__init__(input_size, hidden_size, backend)
        G = self.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(G, input_size))
        self.weight_hh = nn.Parameter(torch.empty(G, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(G)) if bias else None
        self.bias_hh = nn.Parameter(torch.empty(G)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's default: every weight ~ U(-1/sqrt(H), 1/sqrt(H))."""
        k = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -k, k)

    def _weights(self) -> list[Tensor]:
        if self.bias_ih is None:
            # ATen's kernels take has_biases as a flag; zero biases are the same function
            z = self.weight_ih.new_zeros(self.weight_ih.shape[0])
            return [self.weight_ih, self.weight_hh, z, z]
        return [self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh]

    #: the ATen kernel of this cell's whole-sequence fast path (``torch.lstm``, ...), if any
    native = None

    def sequence(self, x, state=None, lengths=None):
        """The path :meth:`path` picks: the step loop, the compiled loops, or ATen's kernel."""
        path = "step" if self.native is None else self.path(x, lengths)
        if path == "step":
            return super().sequence(x, state, lengths)
        if path in dispatch.COMPILED:
            return self.small_sequence(x, state, lengths)
        return self._native(x, state, lengths)

    def _native(self, x, state, lengths):
        state = self.start_sequence(x, state)
        return run_native(self.native, x, state, self._weights(), lengths, self.training)

    def small_sequence(self, x, state=None, lengths=None):
        """The compiled loops of :mod:`rnnlab.kernels.small` where the backend chooses them
        (``"auto"`` at small widths, ``"small"``), else None."""
        return None

    def _affine(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        gi = nn.functional.linear(x, self.weight_ih, self.bias_ih)
        gh = nn.functional.linear(h, self.weight_hh, self.bias_hh)
        return gi, gh


#: the W_hh initialisations of :class:`RNNCell`
RNN_INITS = ("default", "identity", "orthogonal", "glorot", "expm_skew")


class RNNCell(_Affine):
    """Vanilla RNN: ``h_t = f(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)``.

    ``nonlinearity``: "tanh", "relu" or "modrelu" (bias ~ U(-0.01, 0.01), as in expRNN).
    ``backend``: "auto" or "fused" (the fused recurrence :func:`rnnlab.kernels.elementwise_rnn`),
    "native" (ATen's ``torch.rnn_tanh``/``rnn_relu``; not for modReLU) or "reference"
    (:func:`rnnlab.unroll`).
    ``init``: "default" (torch's uniform), "identity" (IRNN, Le et al. 2015: W_hh = I,
    zero biases), "orthogonal" (random orthogonal W_hh, "RNN-orth"), "glorot" (Xavier
    normal W_hh), "expm_skew" (W_hh = expm(A - A^T), A the strict upper triangle of torch's
    uniform init: an orthogonal matrix near the identity, what the nnRNN authors' released
    RNN cell starts from whichever orthogonal init it is given, RNN_Cell.py:57-76).
    ``input_init``: "default" (torch's uniform), "xavier" (Glorot normal W_ih) or "kaiming"
    (normal, std sqrt(2 / I)). ``bias_init``: "default" (b_ih, b_hh ~ torch's uniform) or
    "linear" (b_ih ~ U(+-1/sqrt(I)), b_hh = 0: one ``nn.Linear`` bias on the input map, as
    the nnRNN code's RNN). Shapes: x_t (B, I), h (B, H). The registry key "irnn" is this
    cell with relu and the identity init.

    Example:
    >>> import torch
    >>> from rnnlab.cells import RNNCell
    >>> cell = RNNCell(3, 8)
    >>> h, state = cell(torch.randn(2, 3))   # one step from the zero state
    >>> h.shape, torch.equal(h, state)
    (torch.Size([2, 8]), True)
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        nonlinearity: str = "tanh",
        init: str = "default",
        bias: bool = True,
        backend: str = "auto",
        input_init: str = "default",
        bias_init: str = "default",
    ):
        if nonlinearity not in ("tanh", "relu", "modrelu"):
            raise ValueError(f"nonlinearity must be 'tanh', 'relu' or 'modrelu', got {nonlinearity!r}")
        if init not in RNN_INITS:
            raise ValueError(f"init must be one of {RNN_INITS}, got {init!r}")
        if input_init not in ("default", "xavier", "kaiming"):
            raise ValueError(f"input_init must be 'default', 'xavier' or 'kaiming', got {input_init!r}")
        if bias_init not in ("default", "linear"):
            raise ValueError(f"bias_init must be 'default' or 'linear', got {bias_init!r}")
        if nonlinearity == "modrelu" and backend == "native":
            raise ValueError("backend='native' (ATen's rnn_tanh/rnn_relu) has no modReLU; use 'auto' or 'reference'")
        self.nonlinearity, self.init = nonlinearity, init
        self.input_init, self.bias_init = input_init, bias_init
        self.modrelu_bias = None
        super().__init__(input_size, hidden_size, bias, backend)
        if nonlinearity == "modrelu":
            self.modrelu_bias = nn.Parameter(torch.empty(hidden_size).uniform_(-0.01, 0.01))

    @classmethod
    def extra_backends(cls) -> tuple[str, ...]:
        return ("fused", "native", "small")

    def reset_parameters(self) -> None:
        super().reset_parameters()
        with torch.no_grad():
            if self.init == "identity":
                self.weight_hh.copy_(torch.eye(self.hidden_size))
                if self.bias_ih is not None:
                    self.bias_ih.zero_(), self.bias_hh.zero_()
            elif self.init == "orthogonal":
                self.weight_hh.copy_(par.random_orthogonal(self.hidden_size))
            elif self.init == "glorot":
                nn.init.xavier_normal_(self.weight_hh)
            elif self.init == "expm_skew":
                A = self.weight_hh.double().triu(1)
                self.weight_hh.copy_(torch.linalg.matrix_exp(A - A.T))
            if self.input_init == "xavier":
                nn.init.xavier_normal_(self.weight_ih)
            elif self.input_init == "kaiming":
                nn.init.kaiming_normal_(self.weight_ih, nonlinearity="relu")
            if self.bias_init == "linear" and self.bias_ih is not None:
                k = 1.0 / math.sqrt(self.input_size)
                self.bias_ih.uniform_(-k, k), self.bias_hh.zero_()

    def forward(self, x_t: Tensor, h: Tensor):
        gi, gh = self._affine(x_t, h)
        z = gi + gh
        if self.nonlinearity == "tanh":
            h = torch.tanh(z)
        elif self.nonlinearity == "relu":
            h = torch.relu(z)
        else:
            h = modrelu(z, self.modrelu_bias)
        return h, h

    family = "rnn"
    linear_input = True

    def sequence(self, x, state=None, lengths=None):
        """The path :meth:`path` picks: the step loop, the compiled loops, ATen's kernel or the
        fused recurrence (which runs the Triton kernel where the rule says so)."""
        path = self.path(x, lengths)
        if path == "step":
            return Cell.sequence(self, x, state, lengths)
        if path in dispatch.COMPILED:
            return self.small_sequence(x, state, lengths)
        if path == "native":
            return self._native(x, state, lengths)
        return self._fused(x, self.start_sequence(x, state), lengths)

    def batched_sequence(self, x, state=None, lengths=None):
        """The compiled loops where the rule chooses them, else the fused recurrence (which
        runs batched), whatever the backend."""
        done = self.batched_first(x, state, lengths)
        if done is not None:
            return done
        return self._fused(x, self.start_sequence(x, state), lengths)

    def _fused(self, x, state, lengths):
        # fused recurrence; both biases fold into the input term's bias (no extra pass)
        bias = None if self.bias_ih is None else self.bias_ih + self.bias_hh
        u = tall_linear(x, self.weight_ih, bias)
        return elementwise_rnn(u, self.weight_hh, state, self.nonlinearity, self.modrelu_bias, lengths)

    def small_sequence(self, x, state=None, lengths=None):
        path = self.path(x, lengths)
        if path not in dispatch.COMPILED:
            return None
        state = self.start_sequence(x, state)
        bias = None if self.bias_ih is None else self.bias_ih + self.bias_hh
        u = batched_linear(x, self.weight_ih, bias)
        return compiled_rnn(u, self.weight_hh, state, self.nonlinearity, lengths, lanes=path == "lanes")

    @property
    def native(self):
        return torch.rnn_tanh if self.nonlinearity == "tanh" else torch.rnn_relu


class IRNNCell(RNNCell):
    """IRNN (Le et al. 2015): a relu RNN with W_hh = I and zero biases at init.

    Example:
    >>> import torch
    >>> from rnnlab.cells import IRNNCell
    >>> cell = IRNNCell(3, 8)
    >>> torch.equal(cell.weight_hh, torch.eye(8))   # identity recurrent matrix at initialisation
    True
    >>> h, _ = cell(torch.randn(2, 3))
    >>> bool((h >= 0).all())                         # ReLU units
    True
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, backend: str = "auto"):
        super().__init__(input_size, hidden_size, "relu", "identity", bias, backend)


class LSTMCell(_Affine):
    """LSTM (gate order i, f, g, o as in torch):
    ``[i; f; g; o] = W_ih x_t + b_ih + W_hh h_{t-1} + b_hh``,
    ``c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(g)``, ``h_t = sigma(o) * tanh(c_t)``.
    State ``(h, c)``, each (B, H); the output is h (the asRNN reference code read out c, a
    bug we do not copy). ``forget_bias`` sets the forget-gate bias at init (b_ih's f slice;
    b_hh's f slice is set to ``forget_bias_hh``, 0 by default), None keeps torch's uniform init.
    The DMU authors' released LSTM writes 2 into the f slice of both biases
    (``forget_bias=2, forget_bias_hh=2``: an effective forget bias of 4 at the start).
    ``init``: "default" (torch's uniform) or "glorot": each gate's map of ``[h; x]`` Glorot
    normal (fan in I + H, fan out H, so every weight ~ N(0, 2 / (I + 2H))), one bias
    b_ih ~ U(+-1/sqrt(I + H)) and b_hh = 0, as the nnRNN authors' released LSTM (four
    ``nn.Linear(I + H, H)`` with ``xavier_normal_`` weights, LSTM.py:9-19); ``forget_bias``
    applies after it.

    Example:
    >>> import torch
    >>> from rnnlab.cells import LSTMCell
    >>> cell = LSTMCell(3, 8)
    >>> h, (h_again, c) = cell(torch.randn(2, 3))   # the state is (h, c)
    >>> h.shape, c.shape, torch.equal(h, h_again)
    (torch.Size([2, 8]), torch.Size([2, 8]), True)
    """

    gates = 4

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        forget_bias: float | None = None,
        backend: str = "auto",
        forget_bias_hh: float = 0.0,
        init: str = "default",
    ):
        if init not in ("default", "glorot"):
            raise ValueError(f"LSTM init must be 'default' or 'glorot', got {init!r}")
        self.init = init
        self.forget_bias = (
            None if forget_bias is None else real_option("forget_bias", forget_bias, "None or a finite number")
        )
        self.forget_bias_hh = real_option("forget_bias_hh", forget_bias_hh)
        if self.forget_bias_hh != 0.0 and self.forget_bias is None:
            raise ValueError(
                f"LSTM forget_bias_hh={forget_bias_hh} needs forget_bias set too (None keeps torch's "
                "uniform init of both biases): give forget_bias, e.g. forget_bias=2, forget_bias_hh=2"
            )
        super().__init__(input_size, hidden_size, bias, backend)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.init == "glorot":
            H, fan_in = self.hidden_size, self.input_size + self.hidden_size
            std = math.sqrt(2.0 / (fan_in + H))
            with torch.no_grad():
                self.weight_ih.normal_(0.0, std), self.weight_hh.normal_(0.0, std)
                if self.bias_ih is not None:
                    k = 1.0 / math.sqrt(fan_in)
                    self.bias_ih.uniform_(-k, k), self.bias_hh.zero_()
        if self.forget_bias is not None and self.bias_ih is not None:
            H = self.hidden_size
            with torch.no_grad():
                self.bias_ih[H : 2 * H].fill_(self.forget_bias)
                self.bias_hh[H : 2 * H].fill_(self.forget_bias_hh)

    def init_state(self, batch_size, *, device=None, dtype=None):
        h = super().init_state(batch_size, device=device, dtype=dtype)
        return (h, torch.zeros_like(h))

    def forward(self, x_t: Tensor, state: tuple[Tensor, Tensor]):
        h, c = state
        gi, gh = self._affine(x_t, h)
        i, f, g, o = (gi + gh).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, (h, c)

    native = staticmethod(torch.lstm)
    family = "lstm"
    linear_input = True

    @classmethod
    def extra_backends(cls) -> tuple[str, ...]:
        return ("fused", "small")  # fused: ATen's kernel (what "auto" runs above the small widths)

    def small_sequence(self, x, state=None, lengths=None):
        path = self.path(x, lengths)
        if path not in dispatch.COMPILED:
            return None
        h0, c0 = self.start_sequence(x, state)
        bias = None if self.bias_ih is None else self.bias_ih + self.bias_hh
        u = batched_linear(x, self.weight_ih, bias)
        out, h, c = compiled_lstm(u, self.weight_hh, h0, c0, lengths, lanes=path == "lanes")
        return out, (h, c)

    def batched_sequence(self, x, state=None, lengths=None):
        """The compiled loops where the backend chooses them, else the batched loop
        :func:`rnnlab.kernels.families.lstm.ensemble_lstm` (ATen's LSTM cannot run in vmap). Under a
        bf16/fp16 autocast the input terms are computed as the single run's ATen kernel computes
        them on the CPU: in float32, autocast off (:func:`run_native`)."""
        done = self.batched_first(x, state, lengths)
        if done is not None:
            return done
        state = self.start_sequence(x, state)
        bias = None if self.bias_ih is None else self.bias_ih + self.bias_hh
        if low_precision_autocast(x):
            with float32_region(x):
                dt = full_precision(x)
                gi = nn.functional.linear(x.to(dt), self.weight_ih.to(dt), None if bias is None else bias.to(dt))
        else:
            gi = batched_linear(x, self.weight_ih, bias)
        out, h, c = ensemble_lstm(gi, self.weight_hh, state[0], state[1], lengths)
        return out, (h, c)


class GRUCell(_Affine):
    """GRU (torch's form, gate order r, z, n):
    ``r = sigma(W_ir x + b_ir + W_hr h + b_hr)``, ``z = sigma(W_iz x + b_iz + W_hz h + b_hz)``,
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h_t = (1 - z) * n + z * h_{t-1}``.

    Example:
    >>> import torch
    >>> from rnnlab.cells import GRUCell
    >>> cell = GRUCell(3, 8)
    >>> x = torch.randn(2, 3)
    >>> h1, _ = cell(x)
    >>> h2, _ = cell(x, h1)                          # a second step from h1
    >>> h2.shape
    torch.Size([2, 8])
    """

    gates = 3

    def forward(self, x_t: Tensor, h: Tensor):
        gi, gh = self._affine(x_t, h)
        ir, iz, in_ = gi.chunk(3, 1)
        hr, hz, hn = gh.chunk(3, 1)
        r = torch.sigmoid(ir + hr)
        z = torch.sigmoid(iz + hz)
        n = torch.tanh(in_ + r * hn)
        h = (1 - z) * n + z * h
        return h, h

    native = staticmethod(torch.gru)
    family = "gru"
    linear_input = True

    @classmethod
    def extra_backends(cls) -> tuple[str, ...]:
        return ("fused", "native", "small")

    def small_sequence(self, x, state=None, lengths=None):
        path = self.path(x, lengths)
        if path not in dispatch.COMPILED:
            return None
        state = self.start_sequence(x, state)
        b_hh = self.bias_hh if self.bias_hh is not None else x.new_zeros(self.weight_hh.shape[0])
        u = batched_linear(x, self.weight_ih, self.bias_ih)
        return compiled_gru(u, self.weight_hh, b_hh, state, lengths, lanes=path == "lanes")

    def batched_sequence(self, x, state=None, lengths=None):
        """The compiled loops where the backend chooses them, else the batched loop
        :func:`rnnlab.kernels.families.gru.ensemble_gru`; with lengths under a bf16/fp16 autocast,
        the single run's path: its step loop."""
        done = self.batched_first(x, state, lengths)
        if done is not None:
            return done
        state = self.start_sequence(x, state)
        b_hh = self.bias_hh if self.bias_hh is not None else x.new_zeros(self.weight_hh.shape[0])
        return ensemble_gru(batched_linear(x, self.weight_ih, self.bias_ih), self.weight_hh, b_hh, state, lengths)

    def sequence(self, x, state=None, lengths=None):
        """``backend="small"`` (and "auto" at small widths): the compiled loops of
        :mod:`rnnlab.kernels.small`; "fused" (and "auto" otherwise): input terms of all steps in
        one product, then :func:`rnnlab.kernels.families.gru.gru_recurrence` (hand-written BPTT);
        "native": ATen's ``torch.gru`` (also used for ``lengths``); "reference": the step loop
        (the rule: :meth:`path`)."""
        path = self.path(x, lengths)
        if path != "fused":
            return super().sequence(x, state, lengths)
        state = self.start_sequence(x, state)
        gi = tall_linear(x, self.weight_ih, self.bias_ih)
        b_hh = self.bias_hh if self.bias_hh is not None else x.new_zeros(self.weight_hh.shape[0])
        hs = gru_recurrence(gi, state, self.weight_hh, b_hh)
        return hs, hs[-1]
