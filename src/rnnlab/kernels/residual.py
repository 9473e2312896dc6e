"""Fused BPTT for the residual (forward-Euler) recurrence family

    h_t = d * h_{t-1} + C h_{t-1} + e * phi(W h_{t-1} + u_t)

(column form; the code computes ``h @ W.T``). ``d`` and ``e`` are (H,) vectors (a decay and a
step size per unit), ``C`` an optional (H, H) linear term, ``W`` (H, H) the matrix inside the
nonlinearity and ``u`` (T, B, H) the input terms ``W_ih x_t + b`` of every step, computed
outside by one large product. phi is tanh or relu. The ODE-derived cells are this recurrence:

* AntisymmetricRNN (Chang et al. 2019): ``d = 1``, no ``C``, ``e = eps``, ``W = M - M^T - gamma I``;
* Lipschitz RNN (Erichson et al. 2021): ``d = 1``, ``C = eps A_beta``, ``e = eps``, ``W = W_beta``;
* sequential NAIS-Net (Ciccone et al. 2018): ``d = 1``, no ``C``, ``e = h``, ``W = -R^T R - delta I``;
* incremental RNN (Kag et al. 2020, one step): ``d = 1 - eta alpha``, no ``C``, ``e = eta``, ``W = U``.

As :func:`rnnlab.kernels.elementwise_rnn`, the forward loop builds no autograd graph and keeps
only what the backward reads (every state and every ``phi`` output; phi' is a function of
phi's output); the backward does one (B, 2H) x (2H, H) product per step (``[W; C]`` stacked)
and every weight gradient is one large product at the end. With ``lengths`` a sequence's
state is frozen from its last step on and its outputs there are zero, as in
:func:`rnnlab.unroll`. Tested against :func:`reference_residual_recurrence` (a plain autograd
loop) in float64 and with gradcheck.

Second-order gradients do not pass through this kernel: a backward asked for a graph of
itself (``create_graph=True``) raises a ``RuntimeError`` naming the step loop
(``backend="reference"``), which has them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .amp import float32_region, recurrence_dtype
from .fused import _refuse_graph
from .linear import column_sum, gram_t
from .state import hold_past_length

ACTIVATIONS = ("tanh", "relu")
_aten = torch.ops.aten


def lengths_mask(lengths, T: int, B: int, device) -> Tensor | None:
    """The (T, B, 1) mask ``t < lengths[b]`` of the steps each sequence takes (None without
    lengths), after checking one length in [0, T] per batch element."""
    if lengths is None:
        return None
    lengths = torch.as_tensor(lengths)
    if lengths.shape != (B,) or int(lengths.min()) < 0 or int(lengths.max()) > T:
        raise ValueError(f"lengths must hold one length in [0, {T}] per batch element ({B}), got {lengths.tolist()}")
    return (torch.arange(T, device=device).unsqueeze(1) < lengths.to(device).unsqueeze(0)).unsqueeze(2)


def _activate_(z: Tensor, activation: str) -> Tensor:
    return z.tanh_() if activation == "tanh" else z.relu_()


def _times_derivative(g: Tensor, a: Tensor, activation: str, out: Tensor) -> Tensor:
    """``out = g * phi'(z)`` written through phi's output ``a``."""
    if activation == "tanh":
        return _aten.tanh_backward.grad_input(g, a, grad_input=out)
    return _aten.threshold_backward.grad_input(g, a, 0, grad_input=out)


class _Residual(torch.autograd.Function):
    """Returns the state sequence S (T, B, H); S[t] = h_t (frozen past a sequence's length)."""

    @staticmethod
    def forward(ctx, u, h0, weight, linear, decay, step, mask, activation):
        T, B, H = u.shape
        S, A = u.new_empty(T, B, H), u.new_empty(T, B, H)
        stacked = weight if linear is None else torch.cat([weight, linear])  # (H or 2H, H)
        St = stacked.t()
        buf = u.new_empty(B, stacked.shape[0])
        new = u.new_empty(B, H)
        h = h0
        for t in range(T):
            torch.mm(h, St, out=buf)
            a = torch.add(buf[:, :H], u[t], out=A[t])
            _activate_(a, activation)
            torch.mul(h, decay, out=new).addcmul_(a, step)
            if linear is not None:
                new.add_(buf[:, H:])
            if mask is None:
                S[t].copy_(new)
            else:
                torch.where(mask[t], new, h, out=S[t])
            h = S[t]
        ctx.activation = activation
        ctx.save_for_backward(h0, stacked, decay, step, mask, S, A)
        ctx.has_linear = linear is not None
        return S

    @staticmethod
    def backward(ctx, grad_S):
        _refuse_graph("residual recurrence", "backend='reference'")
        h0, stacked, decay, step, mask, S, A = ctx.saved_tensors
        T, B, H = S.shape
        grad_S = grad_S.contiguous()
        DG = S.new_empty(T, B, stacked.shape[0])  # per step [dL/dz_t, (dL/dh_t if C)]
        dZ = DG[:, :, :H]
        G = DG[:, :, H:] if ctx.has_linear else torch.empty_like(S)  # dL/dh_t of the steps taken
        carry = S.new_zeros(B, H)  # dL/dh_t arriving from step t+1
        for t in range(T - 1, -1, -1):
            g = G[t]
            torch.add(grad_S[t], carry, out=g)
            if mask is not None:
                frozen = g * ~mask[t]  # a frozen row passes dL/dh straight to h_{t-1}
                g.mul_(mask[t])
            torch.mul(g, step, out=dZ[t])
            _times_derivative(dZ[t], A[t], ctx.activation, dZ[t])
            torch.mm(DG[t], stacked, out=carry)  # dL/dz W (+ dL/dh C)
            carry.addcmul_(g, decay)
            if mask is not None:
                carry.add_(frozen)
        need_u, need_h0, need_w, need_c, need_d, need_e = ctx.needs_input_grad[:6]
        n = T * B
        prev = torch.cat([h0.unsqueeze(0), S[:-1]])  # h_{t-1} of every step
        grad_stacked = gram_t(DG.view(n, -1), prev.view(n, H)) if (need_w or need_c) else None
        grad_w = grad_stacked[:H] if need_w else None
        grad_c = grad_stacked[H:] if (need_c and ctx.has_linear) else None
        grad_d = column_sum((G * prev).reshape(n, H)) if need_d else None
        grad_e = column_sum((G * A).reshape(n, H)) if need_e else None
        return (dZ if need_u else None), (carry if need_h0 else None), grad_w, grad_c, grad_d, grad_e, None, None


def residual_recurrence(
    u: Tensor,
    weight: Tensor,
    h0: Tensor | None = None,
    step: Tensor | float = 1.0,
    decay: Tensor | float = 1.0,
    linear: Tensor | None = None,
    activation: str = "tanh",
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run ``h_t = d * h_{t-1} + C h_{t-1} + e * phi(W h_{t-1} + u_t)`` with a fused BPTT.

    Args:
        u: (T, B, H) input terms of all steps.
        weight: (H, H) the matrix W inside phi (column form, applied as ``h @ W.T``).
        h0: (B, H) initial state (zeros if None).
        step: e, a float or an (H,) tensor.
        decay: d, a float or an (H,) tensor.
        linear: C, an (H, H) matrix or None (no linear term).
        activation: "tanh" or "relu".
        lengths: optional (B,) lengths in [0, T] (states frozen and outputs zero past them).

    Returns:
        ``(outputs (T, B, H), h_n (B, H))``. Gradients flow to ``u``, ``weight``, ``h0``,
        ``step``, ``decay`` and ``linear``.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if u.dim() != 3 or u.shape[0] == 0:
        raise ValueError(f"u must be (T, B, H) with T >= 1, got shape {tuple(u.shape)}")
    T, B, H = u.shape
    for name, m in (("weight", weight), ("linear", linear)):
        if m is not None and m.shape != (H, H):
            raise ValueError(f"{name} must be ({H}, {H}) to match u's hidden size, got {tuple(m.shape)}")
    dtype = recurrence_dtype(u)
    h0 = u.new_zeros(B, H, dtype=dtype) if h0 is None else h0
    if h0.shape != (B, H):
        raise ValueError(f"h0 must be ({B}, {H}), got {tuple(h0.shape)}")
    vec = [torch.as_tensor(v, dtype=dtype, device=u.device).expand(H) for v in (step, decay)]
    mask = lengths_mask(lengths, T, B, u.device)
    with float32_region(u):
        S = _Residual.apply(
            u.to(dtype).contiguous(),
            h0.to(dtype).contiguous(),
            weight.to(dtype).contiguous(),
            None if linear is None else linear.to(dtype).contiguous(),
            vec[1].contiguous(),
            vec[0].contiguous(),
            mask,
            activation,
        )
    outputs = S if mask is None else S * mask.to(S.dtype)
    return outputs, S[-1]


def reference_residual_recurrence(
    u: Tensor,
    weight: Tensor,
    h0: Tensor | None = None,
    step: Tensor | float = 1.0,
    decay: Tensor | float = 1.0,
    linear: Tensor | None = None,
    activation: str = "tanh",
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The same recurrence as a plain autograd loop (the twin :func:`residual_recurrence` is
    tested against)."""
    T, B, H = u.shape
    h = u.new_zeros(B, H) if h0 is None else h0
    phi = torch.tanh if activation == "tanh" else torch.relu
    outs = []
    for t in range(T):
        new = decay * h + step * phi(h @ weight.t() + u[t])
        if linear is not None:
            new = new + h @ linear.t()
        if lengths is not None:
            new, out = hold_past_length(new, h, lengths, t)
            outs.append(out)
        else:
            outs.append(new)
        h = new
    return torch.stack(outs), h
