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
from .families.rnn import elementwise_rnn


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


# --- diagonal recurrences (LRU, S4D, Mamba's selective scan) --------------------------------
#
# ``h_t = a_t * h_{t-1} + b_t`` element-wise, real or complex, with ``a`` either one value per
# state element (LRU, S4D: a time-invariant ``lambda``) or one per step (S6: ``exp(Delta_t A)``).
# The same chunking as above, with products in place of matrix powers: a local pass of C steps
# over all chunks at once from zero states, N carries across chunks, then one correction
# ``h_{n,j} = s_{n,j} + (a_{n,0} ... a_{n,j}) e_{n-1}`` (a cumulative product, no division, so a
# decaying ``a`` never divides by a tiny number). The backward is the same scan run backwards
# in time: ``lam_t = g_t + conj(a_{t+1}) lam_{t+1}``, ``db_t = lam_t``,
# ``da_t = lam_t conj(h_{t-1})``, ``dh_0 = conj(a_1) lam_1`` (PyTorch's convention for complex
# gradients, the one of ``torch.mul``). With ``chunk >= T`` there is one chunk: the plain step
# loop inside one autograd Function (no graph of T steps, the adjoint above).


def diagonal_recurrence_loop(a: Tensor, b: Tensor, h0: Tensor) -> Tensor:
    """Reference twin: ``h_t = a_t * h_{t-1} + b_t`` step by step with autograd; ``b`` (T, B,
    *S), ``a`` (T, B, *S) or broadcastable to one step (*S); returns all h (T, B, *S)."""
    steps = a.unbind(0) if a.dim() == b.dim() else (a,) * b.shape[0]
    h, out = h0, []
    for a_t, b_t in zip(steps, b.unbind(0)):  # unbind: one backward stack, not T full-size zeros
        h = a_t * h + b_t
        out.append(h)
    return torch.stack(out)


def _diagonal_scan(a: Tensor, b: Tensor, h0: Tensor, C: int) -> Tensor:
    """The chunked scan without autograd (forward of :class:`_DiagonalScan` and its adjoint).
    Chunks lie in place, (N, C, B, *S): step j of every chunk is the strided slice ``[:, j]``,
    so neither the input nor the result is copied into another layout."""
    T, rest = b.shape[0], b.shape[1:]
    varying = a.dim() == b.dim()
    C = max(1, min(int(C), T))
    N = -(-T // C)
    pad = N * C - T
    if pad:
        b = torch.cat([b, b.new_zeros(pad, *rest)])
        if varying:
            a = torch.cat([a, a.new_ones(pad, *rest)])
    bc = b.reshape(N, C, *rest)
    ac = a.reshape(N, C, *rest) if varying else a
    s = torch.empty_like(bc)
    prev = h0.unsqueeze(0) if N == 1 else torch.zeros_like(bc[:, 0])
    for j in range(C):  # the local pass, all chunks at once
        prev = torch.addcmul(bc[:, j], ac[:, j] if varying else ac, prev, out=s[:, j])
    if N > 1:
        if varying:
            P = torch.cumprod(ac, 1)  # a_{n,0} ... a_{n,j}
            PC = P[:, -1]
        else:
            P = torch.cumprod(a.expand(C, *a.shape), 0)
            PC = P[-1].expand_as(bc[:, 0])
            P = P.reshape(1, C, *([1] * (len(rest) - a.dim())), *a.shape)
        E = torch.empty_like(bc[:, 0])  # (N, B, *S): the state entering chunk n
        e = h0
        for n in range(N):
            E[n] = e
            e = torch.addcmul(s[n, C - 1], PC[n], e)
        s.addcmul_(P, E.unsqueeze(1))
    return s.reshape(N * C, *rest)[:T]


class _DiagonalScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, h0, C):
        h = _diagonal_scan(a.detach(), b.detach(), h0.detach(), C)
        ctx.save_for_backward(a, h0, h)
        ctx.C = C
        return h

    @staticmethod
    def backward(ctx, g):
        # built of differentiable operations (the reverse scan is this Function again), so a
        # backward with create_graph=True gives exact second-order gradients
        a, h0, h = ctx.saved_tensors
        varying = a.dim() == h.dim()
        if varying:  # lam'_k = g'_k + conj(a_{T-k}) lam'_{k-1} in reversed time
            ar = torch.cat([a.new_ones(1, *a.shape[1:]), a[1:].flip(0)]).conj()
        else:
            ar = a.conj()
        lam = _DiagonalScan.apply(ar, g.flip(0), torch.zeros_like(h0), ctx.C).flip(0)
        da = dh0 = None
        if ctx.needs_input_grad[0]:
            hprev = torch.cat([h0.unsqueeze(0), h[:-1]])
            da = lam * hprev.conj()
            if not varying:
                da = da.sum_to_size(a.shape)
        if ctx.needs_input_grad[2]:
            dh0 = (a[0] if varying else a).conj() * lam[0]
            dh0 = dh0.sum_to_size(h0.shape)
        return da, lam, dh0, None


def diagonal_recurrence_fused(a: Tensor, b: Tensor, h0: Tensor, lengths: Tensor | None = None) -> Tensor:
    """The fused step loop: :func:`diagonal_recurrence` as one chunk (one autograd Function,
    the hand-written adjoint, no graph of T steps). Which of the two a cell runs is the
    ``diagonal`` rule of :mod:`rnnlab.kernels.dispatch`."""
    return diagonal_recurrence(a, b, h0, b.shape[0], lengths)


def diagonal_recurrence(
    a: Tensor, b: Tensor, h0: Tensor, chunk: int | None = None, lengths: Tensor | None = None
) -> Tensor:
    """``h_t = a_t * h_{t-1} + b_t`` (element-wise, real or complex) for all t: ``b`` (T, B, *S),
    ``h0`` (B, *S), ``a`` (T, B, *S) or one step broadcastable to (B, *S) (a time-invariant
    transition). The chunked scan above with chunks of ``chunk`` steps (default ~sqrt(T));
    ``chunk >= T`` is the fused step loop. With ``lengths`` (B,), steps at or past a sequence's
    length leave its state unchanged (``a = 1, b = 0`` there), so ``h[-1]`` is each sequence's
    state at its own last step. Exact against :func:`diagonal_recurrence_loop` (float64 tests,
    gradcheck and gradgradcheck)."""
    if b.dim() < 2 or h0.shape != b.shape[1:]:
        raise ValueError(
            f"diagonal_recurrence: b must be (T, B, ...) and h0 (B, ...) of one step, got {tuple(b.shape)} and {tuple(h0.shape)}"
        )
    if a.dim() == b.dim() and a.shape != b.shape:
        raise ValueError(
            f"diagonal_recurrence: a time-varying a must have b's shape {tuple(b.shape)}, got {tuple(a.shape)}"
        )
    T = b.shape[0]
    if lengths is not None:
        keep = torch.arange(T, device=b.device).unsqueeze(1) < lengths.to(b.device).unsqueeze(0)  # (T, B)
        keep = keep.reshape(T, -1, *([1] * (b.dim() - 2)))
        if a.dim() != b.dim():
            a = a.expand(b.shape)
        a = torch.where(keep, a, torch.ones((), dtype=a.dtype, device=a.device))
        b = torch.where(keep, b, torch.zeros((), dtype=b.dtype, device=b.device))
    C = int(chunk) if chunk else max(1, math.isqrt(T))
    return _DiagonalScan.apply(a, b, h0, C)
