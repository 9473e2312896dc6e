"""Fused BPTT for the oscillator recurrences: coRNN (Rusch & Mishra 2021) and LEM (Rusch et
al. 2022), both with a state of two (B, H) parts ``(y, z)``.

coRNN, the IMEX discretisation of ``y'' = tanh(W y + W_z y' + V u + b) - gamma y - eps y'``
with time step ``dt`` (column form; the code computes ``y @ W.T``)::

    z_n = z_{n-1} + dt (tanh(W y_{n-1} + W_z z_{n-1} + u_n) - gamma y_{n-1} - eps z_{n-1})
    y_n = y_{n-1} + dt z_n

LEM, the multiscale discretisation of its ODE system (``u_n`` holds the four input terms
``V_. x_n + b_.``; ``dt`` the largest time step)::

    dt_n  = dt sigmoid(W_1 y_{n-1} + u1_n)        dtb_n = dt sigmoid(W_2 y_{n-1} + u2_n)
    z_n   = (1 - dt_n) z_{n-1} + dt_n tanh(W_z y_{n-1} + uz_n)
    y_n   = (1 - dtb_n) y_{n-1} + dtb_n tanh(W_y z_n + uy_n)

As the other fused kernels (:mod:`rnnlab.kernels.residual`, :mod:`rnnlab.kernels.families`):
the forward loop builds no graph and keeps what the backward reads; the backward does one
product per matrix per step and every weight gradient is one large product at the end.
With ``lengths`` a sequence's state is frozen from its last step on. Tested against the step
loops of :class:`rnnlab.cells.CoRNNCell` and :class:`rnnlab.cells.LEMCell` in float64 and with
gradcheck. Second-order gradients are refused (``backend="reference"`` has them).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .amp import float32_region, recurrence_dtype
from .fused import _refuse_graph
from .linear import gram_t
from .residual import lengths_mask

_aten = torch.ops.aten


class _CoRNN(torch.autograd.Function):
    """Returns the states S (T, B, 2H): S[t] = [y_t, z_t]."""

    @staticmethod
    def forward(ctx, u, s0, weight, dt, gamma, eps, mask):
        T, B, H = u.shape
        S, A = u.new_empty(T, B, 2 * H), u.new_empty(T, B, H)
        Wt = weight.t()  # weight (H, 2H) acts on [y; z]
        new = u.new_empty(B, 2 * H)
        s = s0
        for t in range(T):
            a = torch.addmm(u[t], s, Wt, out=A[t]).tanh_()
            y, z = s[:, :H], s[:, H:]
            yn, zn = new[:, :H], new[:, H:]
            # z_n = (1 - dt eps) z - dt gamma y + dt a;  y_n = y + dt z_n
            torch.mul(z, 1.0 - dt * eps, out=zn).add_(y, alpha=-dt * gamma).add_(a, alpha=dt)
            torch.add(y, zn, alpha=dt, out=yn)
            if mask is None:
                S[t].copy_(new)
            else:
                torch.where(mask[t], new, s, out=S[t])
            s = S[t]
        ctx.consts = (dt, gamma, eps)
        ctx.save_for_backward(s0, weight, mask, S, A)
        return S

    @staticmethod
    def backward(ctx, grad_S):
        _refuse_graph("coRNN", "backend='reference'")
        s0, weight, mask, S, A = ctx.saved_tensors
        dt, gamma, eps = ctx.consts
        T, B, H2 = S.shape
        H = H2 // 2
        grad_S = grad_S.contiguous()
        dP = S.new_empty(T, B, H)  # dL/d(pre-activation) of every step
        carry = S.new_zeros(B, H2)  # dL/d[y_t; z_t] arriving from step t+1
        g, dz = S.new_empty(B, H2), S.new_empty(B, H)
        for t in range(T - 1, -1, -1):
            torch.add(grad_S[t], carry, out=g)
            if mask is not None:
                frozen = g * ~mask[t]
                g.mul_(mask[t])
            gy, gz = g[:, :H], g[:, H:]
            torch.add(gz, gy, alpha=dt, out=dz)  # total dL/dz_n (y_n = y + dt z_n)
            torch.mul(dz, dt, out=dP[t])
            _aten.tanh_backward.grad_input(dP[t], A[t], grad_input=dP[t])
            torch.mm(dP[t], weight, out=carry)  # through the pre-activation
            carry[:, :H].add_(gy).add_(dz, alpha=-dt * gamma)
            carry[:, H:].add_(dz, alpha=1.0 - dt * eps)
            if mask is not None:
                carry.add_(frozen)
        need_u, need_s0, need_w = ctx.needs_input_grad[:3]
        prev = torch.cat([s0.unsqueeze(0), S[:-1]]).view(T * B, H2)
        grad_w = gram_t(dP.view(T * B, H), prev) if need_w else None
        return (dP if need_u else None), (carry if need_s0 else None), grad_w, None, None, None, None


def cornn_recurrence(
    u: Tensor,
    weight: Tensor,
    y0: Tensor,
    z0: Tensor,
    dt: float,
    gamma: float,
    eps: float,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """coRNN over time (see the module docstring).

    Args:
        u: (T, B, H) input terms ``V x_n + b`` of all steps.
        weight: (H, 2H) ``[W, W_z]``, acting on ``[y; z]``.
        y0, z0: (B, H) initial state.
        dt, gamma, eps: the discretisation step and the two control parameters.
        lengths: optional (B,) lengths (states frozen past them).

    Returns:
        ``(Y (T, B, H), y_n, z_n)``: every y (zero past a sequence's length) and the final state.
    """
    T, B, H = u.shape
    if T == 0:
        raise ValueError("cannot run a recurrence over an empty sequence (T = 0)")
    if weight.shape != (H, 2 * H) or y0.shape != (B, H) or z0.shape != (B, H):
        raise ValueError(
            f"inconsistent coRNN shapes: u {tuple(u.shape)}, weight {tuple(weight.shape)} (expected "
            f"({H}, {2 * H})), y0 {tuple(y0.shape)}, z0 {tuple(z0.shape)} (expected ({B}, {H}))"
        )
    mask = lengths_mask(lengths, T, B, u.device)
    dtype = recurrence_dtype(u)
    with float32_region(u):
        s0 = torch.cat([y0, z0], 1).to(dtype)
        S = _CoRNN.apply(
            u.to(dtype).contiguous(), s0, weight.to(dtype).contiguous(), float(dt), float(gamma), float(eps), mask
        )
    Y = S[:, :, :H]
    return (Y if mask is None else Y * mask.to(Y.dtype)), S[-1, :, :H], S[-1, :, H:]


class _LEM(torch.autograd.Function):
    """Returns the states S (T, B, 2H): S[t] = [y_t, z_t]."""

    @staticmethod
    def forward(ctx, u, s0, w_y, w_z, dt, mask):
        T, B, H4 = u.shape
        H = H4 // 4
        S = u.new_empty(T, B, 2 * H)
        G = u.new_empty(T, B, 4 * H)  # [dt_n, dtb_n, tanh(z candidate), tanh(y candidate)]
        p = u.new_empty(B, 3 * H)
        new = u.new_empty(B, 2 * H)
        wyt, wzt = w_y.t(), w_z.t()
        s = s0
        for t in range(T):
            y, z = s[:, :H], s[:, H:]
            torch.addmm(u[t, :, : 3 * H], y, wyt, out=p)
            g = G[t]
            torch.sigmoid(p[:, : 2 * H], out=g[:, : 2 * H]).mul_(dt)
            torch.tanh(p[:, 2 * H :], out=g[:, 2 * H : 3 * H])
            yn, zn = new[:, :H], new[:, H:]
            torch.sub(g[:, 2 * H : 3 * H], z, out=zn).mul_(g[:, :H]).add_(z)  # z + dt_n (c - z)
            torch.addmm(u[t, :, 3 * H :], zn, wzt, out=g[:, 3 * H :]).tanh_()
            torch.sub(g[:, 3 * H :], y, out=yn).mul_(g[:, H : 2 * H]).add_(y)  # y + dtb_n (d - y)
            if mask is None:
                S[t].copy_(new)
            else:
                torch.where(mask[t], new, s, out=S[t])
            s = S[t]
        ctx.dt = dt
        ctx.save_for_backward(s0, w_y, w_z, mask, S, G)
        return S

    @staticmethod
    def backward(ctx, grad_S):
        _refuse_graph("LEM", "backend='reference'")
        s0, w_y, w_z, mask, S, G = ctx.saved_tensors
        T, B, H2 = S.shape
        H, dt = H2 // 2, ctx.dt
        grad_S = grad_S.contiguous()
        dU = S.new_empty(T, B, 4 * H)  # dL/d(pre-activations) = dL/du of every step
        carry = S.new_zeros(B, H2)
        g, dzn, t1 = S.new_empty(B, H2), S.new_empty(B, H), S.new_empty(B, H)
        for t in range(T - 1, -1, -1):
            s_prev = S[t - 1] if t > 0 else s0
            y, z = s_prev[:, :H], s_prev[:, H:]
            gt, du = G[t], dU[t]
            torch.add(grad_S[t], carry, out=g)
            if mask is not None:
                frozen = g * ~mask[t]
                g.mul_(mask[t])
            _lem_step_backward(g, y, z, gt, du, dzn, t1, w_z, dt, H)
            torch.mm(du[:, : 3 * H], w_y, out=carry[:, :H])
            carry[:, :H].addcmul_(g[:, :H], 1.0 - gt[:, H : 2 * H])
            torch.mul(dzn, 1.0 - gt[:, :H], out=carry[:, H:])
            if mask is not None:
                carry.add_(frozen)
        return _lem_grads(ctx, dU, carry, s0, S, T, B, H)


def _lem_step_backward(g, y, z, gt, du, dzn, t1, w_z, dt, H) -> None:
    """One step of LEM's backward: write dL/d(pre-activations) into ``du`` (B, 4H) and the total
    dL/dz_n into ``dzn``, from ``g = dL/d[y_n; z_n]`` and the step's gates ``gt``."""
    gy, gz = g[:, :H], g[:, H:]
    dtn, dtb, c, d = gt[:, :H], gt[:, H : 2 * H], gt[:, 2 * H : 3 * H], gt[:, 3 * H :]
    # y_n = y + dtb (d - y): dd = gy dtb, ddtb = gy (d - y)
    torch.mul(gy, dtb, out=t1)
    _aten.tanh_backward.grad_input(t1, d, grad_input=du[:, 3 * H :])
    torch.sub(d, y, out=t1).mul_(gy)
    _sigmoid_scaled_backward(t1, dtb, dt, du[:, H : 2 * H])
    torch.addmm(gz, du[:, 3 * H :], w_z, out=dzn)  # total dL/dz_n
    # z_n = z + dtn (c - z): dc = dzn dtn, ddtn = dzn (c - z)
    torch.mul(dzn, dtn, out=t1)
    _aten.tanh_backward.grad_input(t1, c, grad_input=du[:, 2 * H : 3 * H])
    torch.sub(c, z, out=t1).mul_(dzn)
    _sigmoid_scaled_backward(t1, dtn, dt, du[:, :H])


def _sigmoid_scaled_backward(grad: Tensor, gate: Tensor, dt: float, out: Tensor) -> None:
    """``out = grad * d(dt sigmoid(p))/dp`` written through ``gate = dt sigmoid(p)``."""
    _aten.sigmoid_backward.grad_input(grad, gate / dt, grad_input=out)
    out.mul_(dt)


def _lem_grads(ctx, dU, carry, s0, S, T, B, H):
    need_u, need_s0, need_wy, need_wz = ctx.needs_input_grad[:4]
    n = T * B
    grad_wy = grad_wz = None
    if need_wy:
        prev_y = torch.cat([s0[:, :H].unsqueeze(0), S[:-1, :, :H]]).reshape(n, H)
        grad_wy = gram_t(dU[:, :, : 3 * H].reshape(n, 3 * H), prev_y)
    if need_wz:
        # the new z of every step (a frozen row stores its old z, but its dL/du is zero there)
        grad_wz = gram_t(dU[:, :, 3 * H :].reshape(n, H), S[:, :, H:].reshape(n, H))
    return (dU if need_u else None), (carry if need_s0 else None), grad_wy, grad_wz, None, None


def lem_recurrence(
    u: Tensor,
    w_y: Tensor,
    w_z: Tensor,
    y0: Tensor,
    z0: Tensor,
    dt: float,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """LEM over time (see the module docstring).

    Args:
        u: (T, B, 4H) input terms ``[u1; u2; uz; uy]`` of all steps (every bias folded in).
        w_y: (3H, H) ``[W_1; W_2; W_z]``, acting on y.
        w_z: (H, H) ``W_y``, acting on the new z.
        y0, z0: (B, H) initial state.
        dt: the largest time step.
        lengths: optional (B,) lengths (states frozen past them).

    Returns:
        ``(Y (T, B, H), y_n, z_n)``.
    """
    T, B, H4 = u.shape
    H = H4 // 4
    if T == 0:
        raise ValueError("cannot run a recurrence over an empty sequence (T = 0)")
    if H4 != 4 * H or w_y.shape != (3 * H, H) or w_z.shape != (H, H) or y0.shape != (B, H) or z0.shape != (B, H):
        raise ValueError(
            f"inconsistent LEM shapes: u {tuple(u.shape)}, w_y {tuple(w_y.shape)}, w_z {tuple(w_z.shape)}, "
            f"y0 {tuple(y0.shape)}, z0 {tuple(z0.shape)} (expected u (T, B, 4H), w_y (3H, H), "
            f"w_z (H, H), y0 and z0 (B, H))"
        )
    if not dt > 0:
        raise ValueError(f"LEM's dt must be positive, got {dt}")
    mask = lengths_mask(lengths, T, B, u.device)
    dtype = recurrence_dtype(u)
    with float32_region(u):
        s0 = torch.cat([y0, z0], 1).to(dtype)
        S = _LEM.apply(
            u.to(dtype).contiguous(), s0, w_y.to(dtype).contiguous(), w_z.to(dtype).contiguous(), float(dt), mask
        )
    Y = S[:, :, :H]
    return (Y if mask is None else Y * mask.to(Y.dtype)), S[-1, :, :H], S[-1, :, H:]
