"""xLSTM's two cells (Beck, Poeppel, Spanring, Auer, Prudnikova, Kopp, Klambauer, Brandstetter
and Hochreiter, "xLSTM: Extended Long Short-Term Memory", NeurIPS 2024): the sLSTM (scalar
memory, exponential gating, a normaliser state n and a stabiliser state m, head-wise
block-diagonal recurrent weights) and the mLSTM (a matrix memory per head, no recurrent
weights, so parallelisable). Both run the paper's stabilised equations;
tests/cells/test_min_xlstm.py checks them against the unstabilised equations.

The library's state contract is a tuple of (B, H) tensors, so the mLSTM's matrix memory (per
head a d x d matrix, d = H / heads) travels as d tensors of (B, H), column j holding
``C[:, head, :, j]`` of every head side by side, followed by n (B, H) and m (B, H) with each
head's stabiliser repeated over its d units (the cell reads the head's first unit).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..kernels.ensemble import batched_linear
from ..kernels.linear import tall_linear
from ..kernels.xlstm import mlstm_parallel
from .base import Cell

FORGET_GATES = ("sigmoid", "exp")


def _heads(hidden_size: int, heads) -> int:
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or hidden_size % heads:
        raise ValueError(f"heads must be a positive integer that divides hidden_size ({hidden_size}), got {heads!r}")
    return heads


def _forget_gate(value) -> str:
    if value not in FORGET_GATES:
        raise ValueError(f"forget_gate must be one of {FORGET_GATES} (the paper's two choices), got {value!r}")
    return value


def _log_forget(f: Tensor, kind: str) -> Tensor:
    """``log f_t`` of the forget gate's preactivation: ``log sigmoid`` or ``exp``'s identity."""
    return nn.functional.logsigmoid(f) if kind == "sigmoid" else f


class SLSTMCell(Cell):
    """sLSTM (Beck et al. 2024, with its stabiliser state m), column form::

        [z~; i~; f~; o~] = W x_t + R h_{t-1} + b          (R block-diagonal: ``heads`` blocks)
        m_t  = max(log f_t + m_{t-1}, i~_t)               (log f_t = log sigmoid(f~) or f~)
        i'_t = exp(i~_t - m_t)       f'_t = exp(log f_t + m_{t-1} - m_t)
        c_t  = f'_t c_{t-1} + i'_t tanh(z~_t)
        n_t  = f'_t n_{t-1} + i'_t
        h_t  = sigmoid(o~_t) * c_t / n_t

    which equals the unstabilised ``c_t = f_t c_{t-1} + exp(i~_t) z_t``, ``n_t = f_t n_{t-1} +
    exp(i~_t)``, ``h_t = o_t c_t / n_t`` with c and n scaled by ``exp(-m_t)``. Parameters:
    ``weight_ih`` (4H, I) = ``[W_z; W_i; W_f; W_o]``, ``bias`` (4H), ``weight_hh`` (4, heads, d, d)
    the diagonal blocks of R (applied per head as ``h_head @ R_block.T``), all
    U(-1/sqrt(H), 1/sqrt(H)) as ``torch.nn.LSTM``. State ``(h, c, n, m)``, each (B, H), from
    zeros; output h. ``sequence`` computes all input terms in one product, then steps.

    Example:
    >>> import torch
    >>> from rnnlab.cells import SLSTMCell
    >>> cell = SLSTMCell(3, 8, heads=2)
    >>> h, (h_again, c, n, m) = cell(torch.randn(2, 3))
    >>> bool((n > 0).all()), torch.equal(h, h_again)   # the normaliser is positive from zeros
    (True, True)
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        heads: int = 1,
        forget_gate: str = "sigmoid",
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        self.heads = _heads(hidden_size, heads)
        self.forget_gate = _forget_gate(forget_gate)
        H, d = hidden_size, hidden_size // self.heads
        self.weight_ih = nn.Parameter(torch.empty(4 * H, input_size))
        self.bias = nn.Parameter(torch.empty(4 * H))
        self.weight_hh = nn.Parameter(torch.empty(4, self.heads, d, d))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        k = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -k, k)

    def init_state(self, batch_size: int, *, device=None, dtype=None):
        h = super().init_state(batch_size, device=device, dtype=dtype)
        return (h, torch.zeros_like(h), torch.zeros_like(h), torch.zeros_like(h))

    def recurrent_matrix(self) -> None:
        return None  # four gates' blocks, no single (H, H) matrix

    def _recurrent(self, h: Tensor) -> Tensor:
        """``R h`` for the four gates, (B, 4H): each head's block applied to its units."""
        B = h.shape[0]
        r = torch.einsum("bkj,gkij->bgki", h.reshape(B, self.heads, -1), self.weight_hh)
        return r.reshape(B, 4 * self.hidden_size)

    def _step(self, u: Tensor, state) -> tuple[Tensor, tuple]:
        """One step from the input terms ``u = W x_t + b`` (B, 4H)."""
        h, c, n, m = state
        z, i, f, o = (u + self._recurrent(h)).chunk(4, dim=-1)
        log_f = _log_forget(f, self.forget_gate)
        m_new = torch.maximum(log_f + m, i)
        i_s = torch.exp(i - m_new)
        f_s = torch.exp(log_f + m - m_new)
        c = f_s * c + i_s * torch.tanh(z)
        n = f_s * n + i_s
        h = torch.sigmoid(o) * c / n
        return h, (h, c, n, m_new)

    def forward(self, x_t: Tensor, state):
        return self._step(nn.functional.linear(x_t, self.weight_ih, self.bias), state)

    family = "slstm"

    def sequence(self, x: Tensor, state=None, lengths: Tensor | None = None):
        """The path :meth:`path` picks: the step loop, or (``fused``) the input terms of all
        steps in one product, then the step loop over them."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        state = self.start_sequence(x, state)
        return self._loop(tall_linear(x, self.weight_ih, self.bias), state, lengths)

    def batched_sequence(self, x: Tensor, state=None, lengths: Tensor | None = None):
        """:meth:`sequence` in an ensemble's batched model (under ``torch.func.vmap``), whatever
        the backend: the ``slstm`` rule's ensemble path."""
        done = self.batched_first(x, state, lengths)
        if done is not None:
            return done
        state = self.start_sequence(x, state)
        return self._loop(batched_linear(x, self.weight_ih, self.bias), state, lengths)

    def _loop(self, u: Tensor, state, lengths: Tensor | None):
        out = []
        keep_all = None
        if lengths is not None:
            T = u.shape[0]
            keep_all = (torch.arange(T, device=u.device).unsqueeze(1) < lengths.to(u.device).unsqueeze(0)).unsqueeze(2)
        for t, u_t in enumerate(u.unbind(0)):
            h, new = self._step(u_t, state)
            if keep_all is not None:
                keep = keep_all[t]
                new = tuple(torch.where(keep, a, b) for a, b in zip(new, state))
                h = h * keep.to(h.dtype)
            state = new
            out.append(h)
        return torch.stack(out), state

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, heads={self.heads}, forget_gate={self.forget_gate!r}"


class MLSTMCell(Cell):
    """mLSTM (Beck et al. 2024, with its stabiliser state m), per head (d = H / heads),
    column form::

        q_t = W_q x_t + b_q     k_t = (W_k x_t + b_k) / sqrt(d)     v_t = W_v x_t + b_v
        i~_t = w_i^T x_t + b_i     f~_t = w_f^T x_t + b_f     (scalars per head)
        o_t = sigmoid(W_o x_t + b_o)
        m_t  = max(log f_t + m_{t-1}, i~_t)               (log f_t = log sigmoid(f~) or f~)
        C_t  = f'_t C_{t-1} + i'_t v_t k_t^T     n_t = f'_t n_{t-1} + i'_t k_t
        h_t  = o_t * C_t q_t / max(|n_t^T q_t|, exp(-m_t))

    with ``i'_t = exp(i~_t - m_t)``, ``f'_t = exp(log f_t + m_{t-1} - m_t)``: the unstabilised
    ``C_t = f_t C_{t-1} + exp(i~_t) v_t k_t^T``, ``h~_t = C_t q_t / max(|n_t^T q_t|, 1)`` with
    C and n scaled by ``exp(-m_t)``. The gates see the input only (no recurrent weights), so
    ``sequence`` runs the parallel form, chunk by chunk (:func:`rnnlab.kernels.xlstm.mlstm_parallel`,
    ``chunk`` steps each); the step ``forward`` is its reference twin.

    Parameters: ``weight_ih`` (4H + 2 heads, I) = ``[W_q; W_k; W_v; W_o; w_i (heads rows);
    w_f (heads rows)]`` and ``bias_ih``, U(-1/sqrt(I), 1/sqrt(I)) as ``torch.nn.Linear``, except
    the forget-gate biases, spread linearly over [3, 6] across the heads (the authors'
    mLSTM initialisation, NX-AI/xlstm xlstm/blocks/mlstm/cell.py:137@032a6fb: long memory at
    the start). State: the d columns of C, n
    and m, each (B, H) (module docstring), from zeros; output h.

    Example (the parallel form equals the step loop):
    >>> import torch
    >>> from rnnlab.cells import MLSTMCell, unroll
    >>> cell = MLSTMCell(3, 8, heads=2, chunk=4).double()
    >>> x = torch.randn(10, 2, 3, dtype=torch.float64)
    >>> out, state = cell.sequence(x)
    >>> ref, ref_state = unroll(cell, x)
    >>> len(state), bool(torch.allclose(out, ref, atol=1e-12, rtol=0))   # 4 columns of C, n, m
    (6, True)
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        heads: int = 1,
        forget_gate: str = "sigmoid",
        chunk: int = 64,
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        self.heads = _heads(hidden_size, heads)
        self.forget_gate = _forget_gate(forget_gate)
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk must be a positive number of steps, got {chunk!r}")
        self.chunk = chunk
        self.head_size = hidden_size // self.heads
        rows = 4 * hidden_size + 2 * self.heads
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        self.bias_ih = nn.Parameter(torch.empty(rows))
        self.reset_parameters()

    @classmethod
    def extra_backends(cls) -> tuple[str, ...]:
        return ("parallel",)

    def reset_parameters(self) -> None:
        k = 1.0 / math.sqrt(self.input_size)
        for p in (self.weight_ih, self.bias_ih):
            nn.init.uniform_(p, -k, k)
        with torch.no_grad():
            self.bias_ih[-self.heads :] = torch.linspace(3.0, 6.0, self.heads)

    def init_state(self, batch_size: int, *, device=None, dtype=None):
        z = super().init_state(batch_size, device=device, dtype=dtype)
        return tuple(torch.zeros_like(z) for _ in range(self.head_size + 2))

    def recurrent_matrix(self) -> None:
        return None

    # --- the state as (B, H) tensors and as (C, n, m) --------------------------------------
    def unpack_state(self, state) -> tuple[Tensor, Tensor, Tensor]:
        """``(C (B, heads, d, d), n (B, heads, d), m (B, heads))`` of the tuple state."""
        *cols, n, m = state
        B, nh, d = n.shape[0], self.heads, self.head_size
        C = torch.stack([c.reshape(B, nh, d) for c in cols], dim=-1)
        return C, n.reshape(B, nh, d), m.reshape(B, nh, d)[..., 0]

    def pack_state(self, C: Tensor, n: Tensor, m: Tensor) -> tuple[Tensor, ...]:
        B = C.shape[0]
        cols = tuple(c.reshape(B, self.hidden_size) for c in C.unbind(-1))
        m = m.unsqueeze(-1).expand(B, self.heads, self.head_size).reshape(B, self.hidden_size)
        return (*cols, n.reshape(B, self.hidden_size), m)

    def _project(self, x: Tensor, linear=None):
        """q, k, v, o (..., heads, d) and log i, log f (..., heads) of an input (..., I)."""
        linear = linear or (tall_linear if x.dim() == 3 else nn.functional.linear)
        u = linear(x, self.weight_ih, self.bias_ih)
        H, nh, d = self.hidden_size, self.heads, self.head_size
        q, k, v, o = (u[..., j * H : (j + 1) * H].reshape(*u.shape[:-1], nh, d) for j in range(4))
        log_i = u[..., 4 * H : 4 * H + nh]
        log_f = _log_forget(u[..., 4 * H + nh :], self.forget_gate)
        return q, k / math.sqrt(d), v, torch.sigmoid(o), log_i, log_f

    def forward(self, x_t: Tensor, state):
        C, n, m = self.unpack_state(state)
        q, k, v, o, log_i, log_f = self._project(x_t)
        m_new = torch.maximum(log_f + m, log_i)
        i_s = torch.exp(log_i - m_new).unsqueeze(-1)
        f_s = torch.exp(log_f + m - m_new).unsqueeze(-1)
        C = f_s.unsqueeze(-1) * C + i_s.unsqueeze(-1) * v.unsqueeze(-1) * k.unsqueeze(-2)
        n = f_s * n + i_s * k
        num = torch.einsum("bhij,bhj->bhi", C, q)
        den = torch.maximum((n * q).sum(-1).abs(), torch.exp(-m_new)).unsqueeze(-1)
        h = (o * num / den).reshape(x_t.shape[0], self.hidden_size)
        return h, self.pack_state(C, n, m_new)

    family = "mlstm"

    def sequence(self, x: Tensor, state=None, lengths: Tensor | None = None):
        """The path :meth:`path` picks: the parallel form, ``chunk`` steps at a time, or
        (``backend="reference"``) the step loop."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        return self._parallel(x, self.start_sequence(x, state), lengths, tall_linear)

    def batched_sequence(self, x: Tensor, state=None, lengths: Tensor | None = None):
        """The parallel form in an ensemble's batched model (under ``torch.func.vmap``),
        whatever the backend: the ``mlstm`` rule's ensemble path."""
        done = self.batched_first(x, state, lengths)
        if done is not None:
            return done
        return self._parallel(x, self.start_sequence(x, state), lengths, batched_linear)

    def _parallel(self, x: Tensor, state, lengths: Tensor | None, linear):
        q, k, v, o, log_i, log_f = self._project(x, linear)
        h, (C, n, m) = mlstm_parallel(q, k, v, log_i, log_f, self.unpack_state(state), lengths, self.chunk)
        T, B = x.shape[:2]
        return (o * h).reshape(T, B, self.hidden_size), self.pack_state(C, n, m)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, heads={self.heads}, forget_gate={self.forget_gate!r}, "
            f"chunk={self.chunk}"
        )
