"""Fused BPTT for the complex modReLU recurrence of the unitary RNNs, in real arithmetic
(the cells' real-valued modReLU is :func:`rnnlab.kernels.elementwise_rnn`'s):

    h_t = modReLU(W h_{t-1} + u_t, b),   modReLU(z, b) = z / |z| * relu(|z| + b)  (0 at z = 0)

on N complex units packed as real vectors ``[Re h; Im h]`` (B, 2N), with W given in its real
form ``[[Re W, -Im W], [Im W, Re W]]`` (2N, 2N) (column form: the code computes ``h @ W.T``)
and b (N,) real. One real (B, 2N) x (2N, 2N) product per step, forward and backward: on the CPU
much faster than complex tensors stepped through autograd (whose per-step complex products and
temporaries dominate at N = 512), and used by the full-capacity uRNN and KRU once their W is
formed.

As :func:`rnnlab.kernels.elementwise_rnn`, the forward builds no graph and keeps only the states:
where a unit is active, ``|h| = |z| + b`` gives back ``|z|`` and ``z = h |z| / |h|``, so the
derivative ``dz = (|h| / |z|) g - (b / (|z| |h|^2)) h (h . g)`` (the dot product over the real
and imaginary parts of a unit) needs nothing else; inactive units pass no gradient. Lengths
freeze a sequence's state past its end, as :func:`rnnlab.unroll`. Tested against
:func:`reference_modrelu_recurrence` (complex tensors through autograd) in float64 and with
gradcheck. Second-order gradients are refused (``backend="reference"`` has them).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .amp import float32_region, recurrence_dtype
from .fused import _refuse_graph
from .linear import gram_t
from .residual import lengths_mask


def _modrelu_(z: Tensor, bias: Tensor, n: int, m: Tensor) -> None:
    """Apply modReLU in place to packed ``z`` (B, 2N); ``m`` (B, N) is scratch for |z|."""
    re, im = z[:, :n], z[:, n:]
    torch.hypot(re, im, out=m)
    scale = torch.relu(m + bias) / torch.where(m > 0, m, torch.ones_like(m))
    re.mul_(scale)
    im.mul_(scale)


class _ModReLURecurrence(torch.autograd.Function):
    """Returns the states S (T, B, 2N)."""

    @staticmethod
    def forward(ctx, u, h0, weight, bias, mask):
        T, B, H2 = u.shape
        n = H2 // 2
        S = u.new_empty(T, B, H2)
        z, m = u.new_empty(B, H2), u.new_empty(B, n)
        Wt = weight.t()
        h = h0
        for t in range(T):
            torch.addmm(u[t], h, Wt, out=z)
            _modrelu_(z, bias, n, m)
            if mask is None:
                S[t].copy_(z)
            else:
                torch.where(mask[t], z, h, out=S[t])
            h = S[t]
        ctx.save_for_backward(h0, weight, bias, mask, S)
        return S

    @staticmethod
    def backward(ctx, grad_S):
        _refuse_graph("complex modReLU recurrence", "backend='reference'")
        h0, weight, bias, mask, S = ctx.saved_tensors
        T, B, H2 = S.shape
        n = H2 // 2
        grad_S = grad_S.contiguous()
        dZ = torch.empty_like(S)  # dL/d(pre-activation) of every step
        carry = S.new_zeros(B, H2)
        grad_b = S.new_zeros(n)
        g = S.new_empty(B, H2)
        for t in range(T - 1, -1, -1):
            torch.add(grad_S[t], carry, out=g)
            if mask is not None:
                frozen = g * ~mask[t]
                g.mul_(mask[t])
            grad_b.add_(_modrelu_backward(S[t], g, bias, n, dZ[t]))
            torch.mm(dZ[t], weight, out=carry)
            if mask is not None:
                carry.add_(frozen)
        need_u, need_h0, need_w, need_b = ctx.needs_input_grad[:4]
        grad_w = None
        if need_w:
            prev = torch.cat([h0.unsqueeze(0), S[:-1]]).view(T * B, H2)
            grad_w = gram_t(dZ.view(T * B, H2), prev)
        return (dZ if need_u else None), (carry if need_h0 else None), grad_w, (grad_b if need_b else None), None


def _modrelu_backward(h: Tensor, g: Tensor, bias: Tensor, n: int, out: Tensor) -> Tensor:
    """Write dL/dz into ``out`` from the step's output ``h`` and ``g = dL/dh`` (both (B, 2N));
    return this step's dL/db (N,)."""
    hr, hi, gr, gi = h[:, :n], h[:, n:], g[:, :n], g[:, n:]
    m = torch.hypot(hr, hi)  # |h| = |z| + b where active
    active = m > 0
    safe_m = torch.where(active, m, torch.ones_like(m))
    r = torch.where(active, m - bias, torch.ones_like(m))  # |z|
    dot = hr * gr + hi * gi  # h . g per unit
    s = torch.where(active, m / r, torch.zeros_like(m))
    c = torch.where(active, bias / (r * safe_m * safe_m), torch.zeros_like(m)) * dot
    torch.mul(gr, s, out=out[:, :n]).sub_(c * hr)
    torch.mul(gi, s, out=out[:, n:]).sub_(c * hi)
    return torch.where(active, dot / safe_m, torch.zeros_like(m)).sum(0)


def modrelu_recurrence(
    u: Tensor,
    weight: Tensor,
    bias: Tensor,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run ``h_t = modReLU(W h_{t-1} + u_t, b)`` on packed complex units (see the module docstring).

    Args:
        u: (T, B, 2N) input terms ``[Re; Im]`` of all steps.
        weight: (2N, 2N) the real form of W.
        bias: (N,) modReLU bias.
        h0: (B, 2N) initial state (zeros if None).
        lengths: optional (B,) lengths in [0, T].

    Returns:
        ``(outputs (T, B, 2N), h_n (B, 2N))``.
    """
    if u.dim() != 3 or u.shape[0] == 0 or u.shape[2] % 2:
        raise ValueError(f"u must be (T, B, 2N) with T >= 1, got shape {tuple(u.shape)}")
    T, B, H2 = u.shape
    if weight.shape != (H2, H2) or bias.shape != (H2 // 2,):
        raise ValueError(
            f"weight must be ({H2}, {H2}) and bias ({H2 // 2},), got {tuple(weight.shape)} and {tuple(bias.shape)}"
        )
    dtype = recurrence_dtype(u)
    h0 = u.new_zeros(B, H2, dtype=dtype) if h0 is None else h0
    if h0.shape != (B, H2):
        raise ValueError(f"h0 must be ({B}, {H2}), got {tuple(h0.shape)}")
    mask = lengths_mask(lengths, T, B, u.device)
    with float32_region(u):
        S = _ModReLURecurrence.apply(
            u.to(dtype).contiguous(), h0.to(dtype).contiguous(), weight.to(dtype).contiguous(), bias.to(dtype), mask
        )
    outputs = S if mask is None else S * mask.to(S.dtype)
    return outputs, S[-1]


def reference_modrelu_recurrence(
    u: Tensor,
    weight: Tensor,
    bias: Tensor,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The same recurrence with complex tensors through autograd (the twin the kernel is tested
    against)."""
    T, B, H2 = u.shape
    n = H2 // 2
    W = torch.complex(weight[:n, :n], weight[n:, :n])
    h = torch.zeros(B, n, dtype=W.dtype) if h0 is None else torch.complex(h0[:, :n], h0[:, n:])
    outs = []
    for t in range(T):
        z = h @ W.t() + torch.complex(u[t, :, :n], u[t, :, n:])
        mod = z.abs()
        new = z * torch.where(
            mod > 0, torch.relu(mod + bias) / torch.where(mod > 0, mod, torch.ones_like(mod)), torch.zeros_like(mod)
        )
        if lengths is not None:
            keep = (torch.as_tensor(lengths) > t).unsqueeze(1)
            new = torch.where(keep, new, h)
            outs.append(torch.cat([new.real, new.imag], 1) * keep.to(u.dtype))
        else:
            outs.append(torch.cat([new.real, new.imag], 1))
        h = new
    return torch.stack(outs), torch.cat([h.real, h.imag], 1)
