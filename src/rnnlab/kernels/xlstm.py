"""The parallel (chunkwise) form of the mLSTM's stabilised recurrence (Beck et al., "xLSTM:
Extended Long Short-Term Memory", NeurIPS 2024).

Per head, with scalar gates in log space (``log i_t``, ``log f_t``), keys ``k_t``, values
``v_t`` and queries ``q_t`` (d each), the recurrent form is::

    m_t = max(log f_t + m_{t-1}, log i_t)
    C_t = exp(log f_t + m_{t-1} - m_t) C_{t-1} + exp(log i_t - m_t) v_t k_t^T
    n_t = exp(log f_t + m_{t-1} - m_t) n_{t-1} + exp(log i_t - m_t) k_t
    h~_t = C_t q_t / max(|n_t^T q_t|, exp(-m_t))

Unrolled from the start (C_0, n_0, m_0), with ``F_t = log f_1 + ... + log f_t``,
``D_ts = F_t - F_s + log i_s`` (s <= t) and ``D_t0 = F_t + m_0``, it is
``m_t = max(D_t0, max_s D_ts)``, ``C_t = exp(D_t0 - m_t) C_0 + sum_s exp(D_ts - m_t) v_s k_s^T``
(n_t alike), so ``h~_t`` is an attention-like sum over s <= t. :func:`mlstm_parallel` computes
it in chunks of ``chunk`` steps: the quadratic form inside a chunk, the chunk's final
``(C, n, m)`` (the same formula at its last step) carried into the next, so memory grows as
``chunk^2`` not ``T^2``. Plain autograd operations; the reference twin is the mLSTM cell's step
``forward`` (tests/cells/test_xlstm.py, float64, outputs, final states and gradients).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["mlstm_chunk", "mlstm_parallel"]


def mlstm_chunk(
    q: Tensor, k: Tensor, v: Tensor, log_i: Tensor, log_f: Tensor, C0: Tensor, n0: Tensor, m0: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One chunk of L steps in the quadratic form: q, k, v (L, B, heads, d), log_i and log_f
    (L, B, heads), the start C0 (B, heads, d, d), n0 (B, heads, d), m0 (B, heads). Returns
    ``(h~ (L, B, heads, d), C_L, n_L, m_L)``."""
    L = q.shape[0]
    F = torch.cumsum(log_f, 0)
    D = F.unsqueeze(1) - F.unsqueeze(0) + log_i.unsqueeze(0)  # (t, s, B, heads)
    causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril().view(L, L, 1, 1)
    D = torch.where(causal, D, torch.full((), float("-inf"), dtype=D.dtype, device=D.device))
    D0 = F + m0
    m = torch.maximum(D0, D.amax(1))  # (t, B, heads)
    S = torch.exp(D - m.unsqueeze(1))
    w0 = torch.exp(D0 - m)
    A = S * torch.einsum("tbhd,sbhd->tsbh", q, k)
    num = torch.einsum("tsbh,sbhd->tbhd", A, v) + w0.unsqueeze(-1) * torch.einsum("bhij,tbhj->tbhi", C0, q)
    den = A.sum(1) + w0 * torch.einsum("bhj,tbhj->tbh", n0, q)
    h = num / torch.maximum(den.abs(), torch.exp(-m)).unsqueeze(-1)
    # the last step's weights, read once per chunk (slices: one backward each, whatever T)
    wL, w0L, mL = S[L - 1 :].squeeze(0), w0[L - 1 :].squeeze(0), m[L - 1 :].squeeze(0)
    C = w0L.unsqueeze(-1).unsqueeze(-1) * C0 + torch.einsum("sbh,sbhi,sbhj->bhij", wL, v, k)
    n = w0L.unsqueeze(-1) * n0 + torch.einsum("sbh,sbhj->bhj", wL, k)
    return h, C, n, mL


def mlstm_parallel(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_i: Tensor,
    log_f: Tensor,
    state: tuple[Tensor, Tensor, Tensor],
    lengths: Tensor | None = None,
    chunk: int = 64,
) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """The mLSTM over time-major q, k, v (T, B, heads, d) and log gates (T, B, heads) from
    ``state = (C0, n0, m0)``, chunk by chunk (module docstring). Returns ``(h~ (T, B, heads, d),
    (C_T, n_T, m_T))``. With ``lengths`` (B,) a sequence's steps at or past its length leave its
    state unchanged (``log f = 0``, ``log i = -inf``) and its outputs there are zero."""
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError(f"chunk must be a positive number of steps, got {chunk!r}")
    keep = None
    if lengths is not None:
        T = q.shape[0]
        keep = torch.arange(T, device=q.device).unsqueeze(1) < lengths.to(q.device).unsqueeze(0)  # (T, B)
        keep = keep.unsqueeze(2)
        log_f = torch.where(keep, log_f, torch.zeros((), dtype=log_f.dtype, device=log_f.device))
        log_i = torch.where(keep, log_i, torch.full((), float("-inf"), dtype=log_i.dtype, device=log_i.device))
    C, n, m = state
    outs = []
    for s in range(0, q.shape[0], chunk):
        e = s + chunk
        h, C, n, m = mlstm_chunk(q[s:e], k[s:e], v[s:e], log_i[s:e], log_f[s:e], C, n, m)
        outs.append(h)
    h = torch.cat(outs) if len(outs) > 1 else outs[0]
    if keep is not None:
        h = h * keep.unsqueeze(-1).to(h.dtype)
    return h, (C, n, m)
