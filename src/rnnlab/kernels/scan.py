"""Chunked scan for the linear recurrence ``h_t = W h_{t-1} + v_t`` (column form:
``h_t = h_{t-1} @ W.T + v_t``), the transition of the LT-RNN.

The reference is a loop of T dependent matrix products. The scan splits time into N chunks
of C steps (C ~ sqrt(T)) and needs only about ``2 C + N`` dependent steps:

1. local pass, all chunks at once from a zero state: ``s_{n,j} = s_{n,j-1} W^T + v_{n,j}``
   (C steps, each one (N B, H) x (H, H) product, through the fused kernel
   :func:`rnnlab.kernels.elementwise_rnn` with the identity activation);
2. carries across chunks: ``e_n = s_{n,C-1} + e_{n-1} (W^C)^T``, ``e_{-1} = h_0`` (N steps);
3. correction, one batched product: ``h_{n,j} = s_{n,j} + e_{n-1} (W^{j+1})^T`` with the
   powers W^1..W^C (C small H x H products).

It does about twice the arithmetic of the loop in far fewer, larger operations, so it wins
where the loop is bound by per-step overhead (small H or B, long T) and loses where the loop is
already bound by matrix-product throughput; `benchmarks/` measures both. Plain autograd
operations plus the fused kernel (itself gradchecked), so gradients are exact; tested against
the loop in float64.

Three ways to run the recurrence, measured side by side by ``benchmarks/scan.py``:
:func:`linear_recurrence_loop` (an autograd loop of T products, the reference twin),
:func:`linear_recurrence_fused` (the same loop inside the fused kernel: one product per step
forward and one backward, the weight gradient as one product at the end) and
:func:`linear_recurrence_scan`; :func:`linear_recurrence` picks the scan or the fused loop.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import dispatch
from .amp import float32_region, recurrence_dtype
from .recurrence import elementwise_rnn


def linear_recurrence_loop(v: Tensor, W: Tensor, h0: Tensor) -> Tensor:
    """Reference: ``h_t = h_{t-1} @ W.T + v_t`` for v (T, B, H); returns all h (T, B, H)."""
    h, out = h0, []
    Wt = W.transpose(0, 1)
    for v_t in v.unbind(0):
        h = torch.addmm(v_t, h, Wt)
        out.append(h)
    return torch.stack(out)


def linear_recurrence_fused(v: Tensor, W: Tensor, h0: Tensor, lengths: Tensor | None = None) -> Tensor:
    """The loop inside the fused kernel (:func:`rnnlab.kernels.elementwise_rnn`, identity
    activation); ``lengths`` as there (frozen state and zero outputs past each length)."""
    return elementwise_rnn(v, W, h0, "identity", lengths=lengths)[0]


def matrix_powers(W: Tensor, C: int) -> Tensor:
    """``[W^1, ..., W^C]`` stacked (C, H, H)."""
    P = [W]
    for _ in range(C - 1):
        P.append(P[-1] @ W)
    return torch.stack(P)


def linear_recurrence(v: Tensor, W: Tensor, h0: Tensor, chunk: int | None = None) -> Tensor:
    """Scan where it pays (the LT-RNN's rule in :mod:`rnnlab.kernels.dispatch`), else the fused loop."""
    B, H = v.shape[1:]
    if dispatch.choose("ltrnn", "auto", width=H, batch=B, chunk=chunk or 0) == "scan":
        return linear_recurrence_scan(v, W, h0, chunk)
    return linear_recurrence_fused(v, W, h0)


def _full(v: Tensor, W: Tensor, h0: Tensor):
    dt = recurrence_dtype(v)  # float32 under autocast (see rnnlab.kernels.amp)
    return v.to(dt), W.to(dt), h0.to(dt)


def linear_recurrence_scan(v: Tensor, W: Tensor, h0: Tensor, chunk: int | None = None) -> Tensor:
    """The chunked scan of the module docstring; same result as :func:`linear_recurrence_loop`.
    Under autocast it runs in float32 with autocast off (powers of W compound rounding)."""
    v, W, h0 = _full(v, W, h0)
    with float32_region(v):
        return _scan(v, W, h0, chunk)


def _scan(v: Tensor, W: Tensor, h0: Tensor, chunk: int | None) -> Tensor:
    T, B, H = v.shape
    C = int(chunk) if chunk else max(1, math.isqrt(T))
    if C >= T:
        return linear_recurrence_loop(v, W, h0)
    N = -(-T // C)
    pad = N * C - T
    if pad:
        v = torch.cat([v, v.new_zeros(pad, B, H)])
    # 1. local pass from zero states, all chunks together: one (N B, H) x (H, H) product a step
    cols = v.view(N, C, B, H).transpose(0, 1).reshape(C, N * B, H)  # step j of every chunk
    local = linear_recurrence_fused(cols, W, v.new_zeros(N * B, H)).view(C, N, B, H)
    # 2. carries: the true state at the end of each chunk
    P = matrix_powers(W, C)  # (C, H, H): P[j] = W^{j+1}
    WCt = P[-1].transpose(0, 1)
    e, starts = h0, []
    for last in local[-1].unbind(0):  # (B, H) per chunk
        starts.append(e)
        e = torch.addmm(last, e, WCt)
    E = torch.stack(starts)  # (N, B, H): state entering chunk n
    # 3. correction: h_{n,j} = s_{n,j} + e_{n-1} (W^{j+1})^T
    out = local + torch.einsum("nbk,cjk->cnbj", E, P)  # (C, N, B, H)
    return out.transpose(0, 1).reshape(N * C, B, H)[:T]
