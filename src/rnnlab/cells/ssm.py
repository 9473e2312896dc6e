"""Diagonal linear recurrences of the state-space family: the LRU, S4D and Mamba's selective
scan (S6), each as a cell (one step) with a whole-sequence fast path (docs/ssm.md).

* :class:`LRUCell`, the Linear Recurrent Unit (Orvieto, Smith, Gu, Fernando, Gulcehre,
  Pascanu & De, "Resurrecting Recurrent Neural Networks for Long Sequences", ICML 2023):
  ``x_k = diag(lambda) x_{k-1} + gamma * (B u_k)``, ``y_k = Re(C x_k) + D u_k``.
* :class:`S4DCell` (Gu, Gupta, Goel & Re, "On the Parameterization and Initialization of
  Diagonal State Space Models", NeurIPS 2022): H channels, each a diagonal SSM of N/2 complex
  modes (and their conjugates), zero-order hold.
* :class:`MambaCell` (Gu & Dao, "Mamba: Linear-Time Sequence Modeling with Selective State
  Spaces", 2023): the Mamba block around the selective scan S6, whose ``Delta``, ``B`` and
  ``C`` depend on the input.

The contract (docs/own-cell.md) asks for states of (B, H) leaves: a complex state of M modes
per unit is held as 2M real leaves (real parts, then imaginary parts). Backends: ``"reference"``
(the step loop over ``forward``), ``"step"`` (the fused loop of
:func:`rnnlab.kernels.scan.diagonal_recurrence_fused`: one autograd Function, hand-written adjoint),
``"scan"`` (the chunked scan :func:`rnnlab.kernels.scan.diagonal_recurrence`), ``"auto"`` (the
``diagonal`` rule of :mod:`rnnlab.kernels.dispatch`, which :meth:`Cell.path` asks) and, for
S4D, ``"conv"`` (the ZOH convolution kernel applied by FFT, :func:`causal_convolution`). Ensembles run the step loop
under ``torch.func.vmap`` (the default :meth:`Cell.batched_sequence`).
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..kernels.amp import autocasting, float32_region, full_precision
from ..kernels.checkpoint import in_windows
from ..kernels.scan import diagonal_recurrence, diagonal_recurrence_fused
from ..kernels.state import map_state
from .base import Cell, as_lengths, bool_option, nonnegative_option, positive_option, real_option


def pack_complex(z: Tensor) -> tuple[Tensor, ...]:
    """A complex state (B, H, M) as 2M real (B, H) leaves: real parts, then imaginary parts."""
    return torch.cat([z.real, z.imag], -1).unbind(-1)


def unpack_complex(leaves) -> Tensor:
    """The inverse of :func:`pack_complex`."""
    t = torch.stack(tuple(leaves), -1)
    M = t.shape[-1] // 2
    return torch.complex(t[..., :M], t[..., M:])


def _mask(out: Tensor, lengths: Tensor | None) -> Tensor:
    """Zero the outputs (T, B, H) at and past each sequence's length."""
    if lengths is None:
        return out
    keep = torch.arange(out.shape[0], device=out.device).unsqueeze(1) < lengths.to(out.device).unsqueeze(0)
    return out * keep.unsqueeze(-1).to(out.dtype)


def _in_float32(method):
    """Run a step or a sequence with autocast off and low-precision inputs and states in float32:
    the complex arithmetic and the products of many decays are not for bfloat16 (as the other
    recurrence kernels, rnnlab.kernels.amp)."""

    @functools.wraps(method)
    def run(self, x, state=None, *rest, **kwargs):
        if not autocasting(x.device.type):
            return method(self, x, state, *rest, **kwargs)
        with float32_region(x):
            if state is not None:
                state = map_state(lambda s: s.to(full_precision(s)), state)
            return method(self, x.to(full_precision(x)), state, *rest, **kwargs)

    return run


#: Without gradients (evaluation), a sequence whose scan would hold more state elements than this
#: (T x B x the cell's :meth:`dispatch_width`) runs in windows of time, the state carried from one
#: window to the next (:func:`_windowed_without_grad`): S4D's (T, B, H, N/2) complex states on
#: ListOps (T = 2,000, batch 64, H = 129) took 23 GB at once.
EVAL_WINDOW_ELEMENTS = 2**24


def _windowed_without_grad(method):
    """Run ``sequence(x, state, lengths)`` window by window in time when no gradient is recorded
    and the whole scan would exceed :data:`EVAL_WINDOW_ELEMENTS`: the recurrence is causal and the
    state carries over, so the outputs and the last state are the whole run's (the scan's chunks
    differ, so float rounding may); a sequence that ended before a window has length 0 there and
    keeps its state. With gradients the whole sequence runs at once, as before."""

    @functools.wraps(method)
    def run(self, x, state=None, lengths=None):
        T, B = x.shape[0], x.shape[1] if x.dim() > 2 else 1
        if torch.is_grad_enabled() or x.dim() < 3 or T * B * self.dispatch_width() <= EVAL_WINDOW_ELEMENTS:
            return method(self, x, state, lengths)
        W = max(1, EVAL_WINDOW_ELEMENTS // (B * self.dispatch_width()))
        lengths = None if lengths is None else as_lengths(lengths).to(x.device)
        return in_windows(functools.partial(method, self), x, state, lengths, W)

    return run


def _whole(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


class _Diagonal(Cell):
    """Shared plumbing: the backends and the chunk of the diagonal scan."""

    def __init__(self, input_size, hidden_size, chunk, backend):
        super().__init__(input_size, hidden_size, backend)
        self.chunk = _whole("chunk", chunk, 0)

    @classmethod
    def extra_backends(cls):
        return ("step", "scan")

    family = "diagonal"

    def dispatch_width(self) -> int:
        """The state elements of one sequence (one step of the scan holds batch x these)."""
        raise NotImplementedError

    #: values a step holds per state value (per unit: the state's (B, H) leaves), training and
    #: evaluating, where that exceeds the per-unit default (:meth:`Cell.step_values`): measured in
    #: real ensembles 5.6 and 0.8 (S4D, N = 64, T = 601), 7.4 and 0.6 (Mamba, N = 16), and three
    #: S4D members on ListOps of up to 999 tokens grew by 8.6 a state value and step of their
    #: training batch (or 2.2 of their evaluation batch) (docs/ensembles.md)
    STATE_VALUES = {True: 16, False: 4}

    def step_values(self, training: bool = True) -> int:
        leaves = len(self.init_state(1, device=torch.device("meta")))
        return max(super().step_values(training), self.STATE_VALUES[training] * leaves * self.hidden_size)

    def _scan(self, a, b, h0, lengths, path):
        """The recurrence on the path :meth:`path` chose: the fused step loop or the chunked scan."""
        if path == "loop":
            return diagonal_recurrence_fused(a, b, h0, lengths)
        return diagonal_recurrence(a, b, h0, self.chunk or None, lengths)

    def _lengths(self, lengths, x):
        return None if lengths is None else as_lengths(lengths).to(x.device)


class LRUCell(_Diagonal):
    """The Linear Recurrent Unit (Orvieto et al., ICML 2023), state N = ``hidden_size``:

    ``x_k = lambda * x_{k-1} + gamma * (B u_k)``, ``y_k = Re(C x_k) + D u_k`` with
    ``lambda = exp(-exp(nu_log) + i exp(theta_log))`` (|lambda| < 1 for any parameters) and
    ``gamma = sqrt(1 - |lambda|^2)`` (the paper's normalisation, a function of lambda here; the
    authors' code trains ``gamma_log`` from this value). ``gamma_norm=False`` leaves it out
    (``x_k = lambda * x_{k-1} + B u_k``), the paper's ablation of the normalisation (without it
    a state with |lambda| near 1 sums its inputs up to 1 / (1 - |lambda|^2) times in variance). Shapes: u (B, I), x (B, H) complex held
    as two (B, H) leaves (real, imaginary), B (H, I) and C (H, H) complex, D (H, I) real (the
    paper's D is diagonal where the input width equals the output's).

    Ring initialisation: ``|lambda|`` uniform on the ring [r_min, r_max] in the plane's area,
    phase uniform in [0, max_phase]; B ~ CN(0, 1/I), C ~ N(0, 1/H) in each part, D ~ N(0, 1/I).
    ``block=True``: the paper's residual block around it, ``h = u' + GLU(GELU(LRU(LayerNorm(u))))``
    with ``GLU(g) = (W_1 g + c_1) * sigmoid(W_2 g + c_2)`` and ``u' = u`` (or a linear map of u
    where ``input_size != hidden_size``).

    Example:
    >>> import torch
    >>> from rnnlab.cells import LRUCell
    >>> cell = LRUCell(3, 8, r_min=0.9, r_max=0.99)
    >>> bool(((cell.eigenvalues().abs() >= 0.9) & (cell.eigenvalues().abs() <= 0.99)).all())
    True
    >>> out, state = cell.sequence(torch.randn(20, 2, 3))
    >>> out.shape, len(state)
    (torch.Size([20, 2, 8]), 2)
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = 2 * math.pi,
        block: bool = False,
        chunk: int = 0,
        backend: str = "auto",
        gamma_norm: bool = True,
    ):
        super().__init__(input_size, hidden_size, chunk, backend)
        self.gamma_norm = bool_option("LRU gamma_norm", gamma_norm)
        self.r_min = real_option("LRU r_min", r_min, "in [0, 1)", lambda v: 0 <= v < 1)
        self.r_max = real_option("LRU r_max", r_max, f"in (r_min={r_min}, 1]", lambda v: self.r_min < v <= 1)
        self.max_phase = positive_option("LRU max_phase", max_phase)
        self.block = bool_option("LRU block", block)
        H, I = hidden_size, input_size
        self.nu_log = nn.Parameter(torch.empty(H))
        self.theta_log = nn.Parameter(torch.empty(H))
        self.B_re, self.B_im = nn.Parameter(torch.empty(H, I)), nn.Parameter(torch.empty(H, I))
        self.C_re, self.C_im = nn.Parameter(torch.empty(H, H)), nn.Parameter(torch.empty(H, H))
        self.D = nn.Parameter(torch.empty(H, I))
        if block:
            self.norm = nn.LayerNorm(I)
            self.glu_1, self.glu_2 = nn.Linear(H, H), nn.Linear(H, H)
            self.skip = None if I == H else nn.Linear(I, H, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        H, I = self.hidden_size, self.input_size
        with torch.no_grad():
            u1, u2 = torch.rand(H), torch.rand(H)
            # |lambda|^2 uniform in [r_min^2, r_max^2]: uniform over the ring's area
            r2 = u1 * (self.r_max**2 - self.r_min**2) + self.r_min**2
            self.nu_log.copy_(torch.log(-0.5 * torch.log(r2.clamp_min(torch.finfo(r2.dtype).tiny))))
            self.theta_log.copy_(torch.log((self.max_phase * u2).clamp_min(torch.finfo(u2.dtype).tiny)))
            for p in (self.B_re, self.B_im):
                p.normal_(0.0, 1.0 / math.sqrt(2 * I))
            for p in (self.C_re, self.C_im):
                p.normal_(0.0, 1.0 / math.sqrt(H))
            self.D.normal_(0.0, 1.0 / math.sqrt(I))
        if self.block:
            for m in (self.norm, self.glu_1, self.glu_2, self.skip):
                if m is not None:
                    m.reset_parameters()

    def eigenvalues(self) -> Tensor:
        """``lambda`` (H,), complex."""
        return torch.polar(torch.exp(-torch.exp(self.nu_log)), torch.exp(self.theta_log))

    def _gamma(self) -> Tensor:
        return torch.sqrt(-torch.expm1(-2 * torch.exp(self.nu_log)))  # sqrt(1 - |lambda|^2)

    def _input(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """The normalised input and ``gamma * B u`` (complex; ``B u`` with ``gamma_norm=False``)."""
        un = self.norm(u) if self.block else u
        if not self.gamma_norm:  # the paper's ablation: the input branch without its normalisation
            return un, torch.complex(F.linear(un, self.B_re), F.linear(un, self.B_im))
        g = self._gamma()
        return un, torch.complex(F.linear(un, self.B_re) * g, F.linear(un, self.B_im) * g)

    def _output(self, u: Tensor, un: Tensor, z: Tensor) -> Tensor:
        y = F.linear(z.real, self.C_re) - F.linear(z.imag, self.C_im) + F.linear(un, self.D)
        if not self.block:
            return y
        g = F.gelu(y)
        return self.glu_1(g) * torch.sigmoid(self.glu_2(g)) + (u if self.skip is None else self.skip(u))

    def init_state(self, batch_size, *, device=None, dtype=None):
        h = super().init_state(batch_size, device=device, dtype=dtype)
        return (h, h.clone())

    @_in_float32
    def forward(self, u: Tensor, state):
        z = unpack_complex(state)[..., 0]
        un, bu = self._input(u)
        z = self.eigenvalues() * z + bu
        return self._output(u, un, z), pack_complex(z.unsqueeze(-1))

    def dispatch_width(self) -> int:
        return self.hidden_size  # one complex mode per unit

    @_windowed_without_grad
    @_in_float32
    def sequence(self, x, state=None, lengths=None):
        path = self.path(x, lengths)
        if path == "step":
            return super().sequence(x, state, lengths)
        state = self.start_sequence(x, state)
        lengths = self._lengths(lengths, x)
        un, bu = self._input(x)
        z = self._scan(self.eigenvalues(), bu, unpack_complex(state)[..., 0], lengths, path)
        return _mask(self._output(x, un, z), lengths), pack_complex(z[-1].unsqueeze(-1))


def s4d_imag(init: str, N: int) -> Tensor:
    """The imaginary parts of S4D's N/2 modes: S4D-Lin ``pi n`` or S4D-Inv
    ``(N / pi) (N / (2n + 1) - 1)``, n = 0 .. N/2 - 1 (the real parts start at -1/2)."""
    n = torch.arange(N // 2, dtype=torch.float64)
    if init == "lin":
        return math.pi * n
    if init == "inv":
        return (N / math.pi) * (N / (2 * n + 1) - 1)
    raise ValueError(f"S4D init must be 'lin' (S4D-Lin) or 'inv' (S4D-Inv), got {init!r}")


def causal_convolution(u: Tensor, kernel: Tensor) -> Tensor:
    """``y_t = sum_{l <= t} kernel[:, l] * u_{t-l}`` per channel, by FFT (zero-padded to 2T: a
    linear, not circular, convolution): ``u`` (T, B, H), ``kernel`` (H, T) -> (T, B, H)."""
    T = u.shape[0]
    n = 2 * T
    uf = torch.fft.rfft(u.permute(1, 2, 0), n=n)  # (B, H, n/2+1)
    return torch.fft.irfft(uf * torch.fft.rfft(kernel, n=n), n=n)[..., :T].permute(2, 0, 1)


def zoh(dtA: Tensor, A: Tensor) -> tuple[Tensor, Tensor]:
    """Zero-order hold of ``x' = A x + B u`` (B = 1) over a step dt: ``(exp(dt A), (exp(dt A) - 1) / A)``."""
    dA = torch.exp(dtA)
    return dA, (dA - 1) / A


class S4DCell(_Diagonal):
    """S4D (Gu, Gupta, Goel & Re, NeurIPS 2022): ``hidden_size`` channels, each a diagonal SSM of
    N = ``state_size`` (N/2 complex modes and their conjugates, so ``y = 2 Re(C x)``):

    ``u_k = W_in x_k + b_in``; per channel ``s_k = exp(dt A) s_{k-1} + ((exp(dt A) - 1) / A) u_k``
    (zero-order hold, B = 1 folded into C as in the authors' code), ``y_k = 2 Re(C s_k) + D u_k``;
    ``h_k = W_out GELU(y_k) + b_out``. ``A = -exp(log_A_real) + i A_imag``, real parts -1/2 at the
    start, imaginary parts from ``init`` ("lin": S4D-Lin, "inv": S4D-Inv, :func:`s4d_imag`); dt
    per channel log-uniform in [dt_min, dt_max]; C ~ CN(0, 1). Shapes: x (B, I), state N leaves
    of (B, H) (real parts of the N/2 modes, then imaginary parts).

    ``backend="conv"``: the whole sequence as a causal convolution with the kernel
    ``K_l = 2 Re(C dB exp(dt A)^l)`` by FFT, the start state's free response added; with
    ``lengths`` it runs the scan (a convolution cannot freeze a state). ``"auto"`` takes the
    convolution too (4-13x faster than the scan and the fused loop on one CPU thread, T=60 to
    1,024, docs/ssm.md), and with ``lengths`` the diagonal scan's own rule.

    Example:
    >>> import torch
    >>> from rnnlab.cells import S4DCell
    >>> x = torch.randn(30, 2, 3, dtype=torch.float64)
    >>> conv = S4DCell(3, 4, state_size=8, backend="conv").double()
    >>> scan = S4DCell(3, 4, state_size=8, backend="scan").double()
    >>> _ = scan.load_state_dict(conv.state_dict())
    >>> torch.allclose(conv.sequence(x)[0], scan.sequence(x)[0], atol=1e-12)
    True
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        state_size: int = 64,
        init: str = "lin",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        chunk: int = 0,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, chunk, backend)
        if _whole("S4D state_size", state_size, 2) % 2:
            raise ValueError(f"S4D state_size must be even (N/2 complex modes and their conjugates), got {state_size}")
        s4d_imag(init, 2)
        self.state_size, self.init = state_size, init
        self.dt_min = positive_option("S4D dt_min", dt_min)
        self.dt_max = real_option("S4D dt_max", dt_max, f"a number >= dt_min={dt_min}", lambda v: v >= self.dt_min)
        H, M = hidden_size, state_size // 2
        self.weight_in, self.bias_in = nn.Parameter(torch.empty(H, input_size)), nn.Parameter(torch.empty(H))
        self.log_dt = nn.Parameter(torch.empty(H))
        self.log_A_real, self.A_imag = nn.Parameter(torch.empty(H, M)), nn.Parameter(torch.empty(H, M))
        self.C_re, self.C_im = nn.Parameter(torch.empty(H, M)), nn.Parameter(torch.empty(H, M))
        self.D = nn.Parameter(torch.empty(H))
        self.weight_out, self.bias_out = nn.Parameter(torch.empty(H, H)), nn.Parameter(torch.empty(H))
        self.reset_parameters()

    @classmethod
    def extra_backends(cls):
        return ("step", "scan", "conv")

    def reset_parameters(self) -> None:
        H, M = self.hidden_size, self.state_size // 2
        with torch.no_grad():
            for w, b, fan in ((self.weight_in, self.bias_in, self.input_size), (self.weight_out, self.bias_out, H)):
                k = 1.0 / math.sqrt(fan)
                w.uniform_(-k, k)
                b.uniform_(-k, k)
            lo, hi = math.log(self.dt_min), math.log(self.dt_max)
            self.log_dt.copy_(torch.rand(H) * (hi - lo) + lo)
            self.log_A_real.fill_(math.log(0.5))
            self.A_imag.copy_(s4d_imag(self.init, self.state_size).expand(H, M))
            for p in (self.C_re, self.C_im):
                p.normal_(0.0, math.sqrt(0.5))
            self.D.normal_()

    def discrete(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(dt A, exp(dt A), (exp(dt A) - 1) / A)``, each (H, N/2) complex."""
        A = torch.complex(-torch.exp(self.log_A_real), self.A_imag)
        dtA = torch.exp(self.log_dt).unsqueeze(-1) * A
        return (dtA, *zoh(dtA, A))

    def _C(self) -> Tensor:
        return torch.complex(self.C_re, self.C_im)

    def _output(self, u: Tensor, s: Tensor) -> Tensor:
        y = 2 * (s * self._C()).sum(-1).real + self.D * u
        return F.linear(F.gelu(y), self.weight_out, self.bias_out)

    @_in_float32
    def forward(self, x: Tensor, state):
        u = F.linear(x, self.weight_in, self.bias_in)
        _, dA, dB = self.discrete()
        s = dA * unpack_complex(state) + dB * u.unsqueeze(-1)
        return self._output(u, s), pack_complex(s)

    def init_state(self, batch_size, *, device=None, dtype=None):
        h = super().init_state(batch_size, device=device, dtype=dtype)
        return tuple(h.clone() for _ in range(self.state_size))

    def kernel(self, T: int) -> Tensor:
        """The convolution kernel ``K_l = 2 Re(C dB exp(dt A)^l)``, l = 0 .. T-1: (H, T)."""
        dtA, _, dB = self.discrete()
        powers = torch.exp(dtA.unsqueeze(-1) * torch.arange(T, device=dtA.device, dtype=dtA.real.dtype))
        return 2 * torch.einsum("hm,hml->hl", self._C() * dB, powers).real

    def _conv(self, u: Tensor, s0: Tensor) -> tuple[Tensor, Tensor]:
        """y without D and the last state: the FFT convolution plus s0's free response."""
        T = u.shape[0]
        dtA, _, dB = self.discrete()
        y = causal_convolution(u, self.kernel(T))
        t = torch.arange(T + 1, device=u.device, dtype=u.dtype)
        powers = torch.exp(dtA.unsqueeze(-1) * t)  # (H, M, T+1): exp(dt A)^t
        y = y + 2 * torch.einsum("hm,bhm,hmt->tbh", self._C(), s0, powers[..., 1:]).real
        # s_T = exp(dt A)^T s0 + sum_l exp(dt A)^(T-1-l) dB u_l
        sT = powers[..., T] * s0 + torch.einsum(
            "hmt,tbh->bhm", (dB.unsqueeze(-1) * powers[..., :T]).flip(-1), u.to(dtA.dtype)
        )
        return y, sT

    def dispatch_width(self) -> int:
        return self.hidden_size * (self.state_size // 2)  # N/2 complex modes per channel

    @_windowed_without_grad
    @_in_float32
    def sequence(self, x, state=None, lengths=None):
        path = self.path(x, lengths)
        if path == "step":
            return super().sequence(x, state, lengths)
        state = self.start_sequence(x, state)
        lengths = self._lengths(lengths, x)
        u = F.linear(x, self.weight_in, self.bias_in)  # (T, B, H)
        s0 = unpack_complex(state)
        if path == "conv":
            y, sT = self._conv(u, s0)
            out = F.linear(F.gelu(y + self.D * u), self.weight_out, self.bias_out)
            return out, pack_complex(sT)
        _, dA, dB = self.discrete()
        s = self._scan(dA, dB * u.unsqueeze(-1), s0, lengths, path)  # (T, B, H, M)
        return _mask(self._output(u, s), lengths), pack_complex(s[-1])


def _pack_wide(t: Tensor, H: int) -> tuple[Tensor, ...]:
    """A real state (B, E H, K) as E K leaves of (B, H)."""
    B, d, K = t.shape
    return t.reshape(B, d // H, H, K).transpose(1, 2).reshape(B, H, -1).unbind(-1)


def _unpack_wide(leaves, E: int) -> Tensor:
    t = torch.stack(tuple(leaves), -1)  # (B, H, E K)
    B, H, EK = t.shape
    return t.reshape(B, H, E, EK // E).transpose(1, 2).reshape(B, E * H, EK // E)


class MambaCell(_Diagonal):
    """The Mamba block (Gu & Dao 2023) around the selective scan S6, d = ``expand`` x H channels of
    N = ``state_size`` each:

    ``(x', z) = W_in u_k``; ``c = SiLU(causal depthwise conv(x'))`` (``conv_size`` taps);
    ``Delta = softplus(W_dt (W_x c)[:R] + b_dt)``, ``B_k = (W_x c)[R:R+N]``, ``C_k = (W_x c)[R+N:]``;
    per channel ``s_k = exp(Delta A) s_{k-1} + Delta B_k c`` with ``A = -exp(A_log)``;
    ``y = C_k s_k + D c``; ``h_k = W_out (y * SiLU(z))``. Initialisation as the authors' code:
    ``A_log = log(1 .. N)`` per channel (S4D-Real), D = 1, ``b_dt`` the inverse softplus of a
    log-uniform dt in [dt_min, dt_max] (floored at ``dt_init_floor``), ``W_dt`` uniform
    +-R^-1/2, R = ``dt_rank`` (0: ceil(H / 16)). Shapes: u (B, I); state: the scan's (B, d, N)
    and the conv's last ``conv_size - 1`` inputs (B, d, conv_size - 1), as (B, H) leaves.

    Example:
    >>> import torch
    >>> from rnnlab.cells import MambaCell
    >>> cell = MambaCell(3, 8, state_size=4)
    >>> out, state = cell.sequence(torch.randn(20, 2, 3))
    >>> out.shape, len(state)                          # 2 x 8 channels: 2 x 4 scan + 2 x 3 conv leaves
    (torch.Size([20, 2, 8]), 14)
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        state_size: int = 16,
        expand: int = 2,
        conv_size: int = 4,
        dt_rank: int = 0,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
        chunk: int = 0,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, chunk, backend)
        self.state_size = _whole("Mamba state_size", state_size, 1)
        self.expand = _whole("Mamba expand", expand, 1)
        self.conv_size = _whole("Mamba conv_size", conv_size, 2)
        self.dt_rank = _whole("Mamba dt_rank", dt_rank, 0) or math.ceil(hidden_size / 16)
        self.dt_min = positive_option("Mamba dt_min", dt_min)
        self.dt_max = real_option("Mamba dt_max", dt_max, f"a number >= dt_min={dt_min}", lambda v: v >= self.dt_min)
        self.dt_init_floor = nonnegative_option("Mamba dt_init_floor", dt_init_floor)
        d, N, R = self.expand * hidden_size, self.state_size, self.dt_rank
        self.in_proj = nn.Parameter(torch.empty(2 * d, input_size))
        self.conv_weight, self.conv_bias = nn.Parameter(torch.empty(d, self.conv_size)), nn.Parameter(torch.empty(d))
        self.x_proj = nn.Parameter(torch.empty(R + 2 * N, d))
        self.dt_weight, self.dt_bias = nn.Parameter(torch.empty(d, R)), nn.Parameter(torch.empty(d))
        self.A_log = nn.Parameter(torch.empty(d, N))
        self.D = nn.Parameter(torch.empty(d))
        self.out_proj = nn.Parameter(torch.empty(hidden_size, d))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        d, N = self.expand * self.hidden_size, self.state_size
        with torch.no_grad():
            for w in (self.in_proj, self.x_proj, self.out_proj):  # nn.Linear's default
                k = 1.0 / math.sqrt(w.shape[1])
                w.uniform_(-k, k)
            k = 1.0 / math.sqrt(self.conv_size)  # nn.Conv1d's default, one input per group
            self.conv_weight.uniform_(-k, k)
            self.conv_bias.uniform_(-k, k)
            k = self.dt_rank**-0.5
            self.dt_weight.uniform_(-k, k)
            lo, hi = math.log(self.dt_min), math.log(self.dt_max)
            dt = torch.exp(torch.rand(d) * (hi - lo) + lo).clamp_min(self.dt_init_floor)
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(b) = dt
            self.A_log.copy_(torch.log(torch.arange(1, N + 1, dtype=torch.float64)).expand(d, N))
            self.D.fill_(1.0)

    def init_state(self, batch_size, *, device=None, dtype=None):
        h = super().init_state(batch_size, device=device, dtype=dtype)
        return tuple(h.clone() for _ in range(self.expand * (self.state_size + self.conv_size - 1)))

    def _split_state(self, state):
        n = self.expand * self.state_size
        return _unpack_wide(state[:n], self.expand), _unpack_wide(state[n:], self.expand)

    def _join_state(self, s: Tensor, buf: Tensor):
        return _pack_wide(s, self.hidden_size) + _pack_wide(buf, self.hidden_size)

    def _selective(self, c: Tensor):
        """``(exp(Delta A), Delta B c, C)`` of the conv's output c (..., d): (..., d, N) twice, (..., N)."""
        R, N = self.dt_rank, self.state_size
        dbc = F.linear(c, self.x_proj)
        delta = F.softplus(F.linear(dbc[..., :R], self.dt_weight, self.dt_bias)).unsqueeze(-1)
        Bk, Ck = dbc[..., R : R + N], dbc[..., R + N :]
        return torch.exp(delta * -torch.exp(self.A_log)), delta * Bk.unsqueeze(-2) * c.unsqueeze(-1), Ck

    def _out(self, s: Tensor, Ck: Tensor, c: Tensor, z: Tensor) -> Tensor:
        y = (s * Ck.unsqueeze(-2)).sum(-1) + self.D * c
        return F.linear(y * F.silu(z), self.out_proj)

    @_in_float32
    def forward(self, u: Tensor, state):
        s, buf = self._split_state(state)
        xi, z = F.linear(u, self.in_proj).chunk(2, -1)
        window = torch.cat([buf, xi.unsqueeze(-1)], -1)  # (B, d, conv_size), oldest first
        c = F.silu((window * self.conv_weight).sum(-1) + self.conv_bias)
        a, b, Ck = self._selective(c)
        s = a * s + b
        return self._out(s, Ck, c, z), self._join_state(s, window[..., 1:])

    def dispatch_width(self) -> int:
        return self.expand * self.hidden_size * self.state_size  # d channels of N

    @_windowed_without_grad
    @_in_float32
    def sequence(self, x, state=None, lengths=None):
        path = self.path(x, lengths)
        if path == "step":
            return super().sequence(x, state, lengths)
        state = self.start_sequence(x, state)
        lengths = self._lengths(lengths, x)
        T, K = x.shape[0], self.conv_size
        s0, buf = self._split_state(state)
        xi, z = F.linear(x, self.in_proj).chunk(2, -1)  # (T, B, d)
        full = torch.cat([buf.permute(2, 0, 1), xi])  # (K - 1 + T, B, d)
        conv = sum(full[k : k + T] * self.conv_weight[:, k] for k in range(K))
        c = F.silu(conv + self.conv_bias)
        a, b, Ck = self._selective(c)
        s = self._scan(a, b, s0, lengths, path)  # (T, B, d, N)
        out = _mask(self._out(s, Ck, c, z), lengths)
        if lengths is None:
            last = full[T:]
        else:  # each sequence's own last K - 1 inputs
            idx = lengths.unsqueeze(0) + torch.arange(K - 1, device=x.device).unsqueeze(1)  # (K - 1, B)
            last = full[idx, torch.arange(x.shape[1], device=x.device)]
        return out, self._join_state(s[-1], last.permute(1, 2, 0))
