"""The RHN with coupled carry gate (Zilly et al.; :class:`rnnlab.cells.dmu.RHNCell`): its fused
BPTT (:func:`rhn_recurrence`), its ensemble loop (:func:`ensemble_rhn`) and its compiled loops
(:func:`compiled_rhn`, with the PyTorch recurrence that gives their second order). Which one
runs: :mod:`rnnlab.kernels.dispatch`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..amp import float32_region, recurrence_dtype
from ..ensemble import _advance, _Gates, _in_recurrence_dtype, _mask, ensemble_call
from ..fused import _refuse_graph
from ..linear import column_sum, gram_t
from ..small import _c, _Family, _keep, _kernel, _lens, _masked, _step_mask

__all__ = ["compiled_rhn", "ensemble_rhn", "rhn_recurrence"]

_aten = torch.ops.aten

# ---------------------------------------------------------------------------- fused BPTT (one model)


class _RHNRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u: Tensor, h0: Tensor, R: Tensor, bias: Tensor):
        T, B, _ = u.shape
        L, _, H = R.shape
        S = u.new_empty(L, T, B, H)  # micro-layer states; S[L-1] = h
        HH, TG = u.new_empty(L, T, B, H), u.new_empty(L, T, B, H)
        pre = u.new_empty(B, 2 * H)
        Rt = [R[l].t() for l in range(L)]
        s = h0
        for t in range(T):
            for l in range(L):
                torch.addmm(u[t] if l == 0 else bias[l], s, Rt[l], out=pre)
                hh, tg, sn = HH[l, t], TG[l, t], S[l, t]
                torch.tanh(pre[:, :H], out=hh)
                torch.sigmoid(pre[:, H:], out=tg)
                torch.sub(hh, s, out=sn).mul_(tg).add_(s)  # s + t (hh - s)
                s = sn
        ctx.save_for_backward(h0, R, S, HH, TG)
        return S[L - 1]

    @staticmethod
    def backward(ctx, dHs: Tensor):
        _refuse_graph("RHN", "backend='reference'")
        h0, R, S, HH, TG = ctx.saved_tensors
        L, T, B, H = S.shape
        dHs = dHs.contiguous()
        dPre = S.new_empty(L, T, B, 2 * H)
        ds = S.new_zeros(B, H)  # dL/d(state) flowing down the micro-layers and back in time
        t1 = S.new_empty(B, H)
        for t in range(T - 1, -1, -1):
            ds.add_(dHs[t])
            for l in range(L - 1, -1, -1):
                s_prev = S[l - 1, t] if l > 0 else (S[L - 1, t - 1] if t > 0 else h0)
                hh, tg, dp = HH[l, t], TG[l, t], dPre[l, t]
                # s = s_prev + tg (hh - s_prev)
                torch.sub(hh, s_prev, out=t1).mul_(ds)  # dL/dtg
                _aten.sigmoid_backward.grad_input(t1, tg, grad_input=dp[:, H:])
                torch.mul(ds, tg, out=t1)  # dL/dhh
                _aten.tanh_backward.grad_input(t1, hh, grad_input=dp[:, :H])
                ds.addcmul_(ds, tg, value=-1.0).addmm_(dp, R[l])  # ds (1 - tg) + dp R_l
        n = T * B
        dR = torch.empty_like(R)
        for l in range(L):
            dp = dPre[l].view(n, 2 * H)
            if l > 0:
                dR[l] = gram_t(dp, S[l - 1].view(n, H))
            else:
                dR[0] = dPre[0, 0].t() @ h0
                if T > 1:
                    dR[0] += gram_t(dPre[0, 1:].reshape(-1, 2 * H), S[L - 1, :-1].reshape(-1, H))
        db = torch.stack([column_sum(dPre[l].view(n, 2 * H)) for l in range(L)])
        db[0].zero_()  # the first micro-layer's bias lives in u (its gradient is du's sum)
        return dPre[0], ds, dR, db


def rhn_recurrence(u: Tensor, h0: Tensor, R: Tensor, bias: Tensor) -> Tensor:
    """The RHN with coupled carry gate over time; returns all states (T, B, H).

    ``u`` (T, B, 2H): the first micro-layer's input terms ``x_t @ W.T + b_1`` of all steps;
    ``R`` (L, 2H, H) and ``bias`` (L, 2H) the micro-layers' weights and biases (``bias[0]`` is
    unused here: it belongs in ``u``). Per micro-layer ``[a; b] = R_l s + (u_t | b_l)``,
    ``s <- s + sigmoid(b) (tanh(a) - s)``. Hand-written BPTT as
    :func:`rnnlab.kernels.families.dmu.dmu_recurrence`.
    """
    T, B, H2 = u.shape
    L, _, H = R.shape
    if T == 0:
        raise ValueError("cannot run a recurrence over an empty sequence (T = 0)")
    if H2 != 2 * H or h0.shape != (B, H) or R.shape != (L, 2 * H, H) or bias.shape != (L, 2 * H):
        raise ValueError(
            f"inconsistent RHN shapes: u {tuple(u.shape)}, h0 {tuple(h0.shape)}, R {tuple(R.shape)}, "
            f"bias {tuple(bias.shape)} (expected u (T, B, 2H), h0 (B, H), R (L, 2H, H), bias (L, 2H))"
        )
    dt = recurrence_dtype(u)  # float32 under autocast (see rnnlab.kernels.amp)
    with float32_region(u):
        return _RHNRecurrence.apply(u.to(dt).contiguous(), h0.to(dt).contiguous(), R.to(dt).contiguous(), bias.to(dt))


# ---------------------------------------------------------------------------- ensemble loop


def _ensemble_steps(u, w_hh, bias, h0, lengths):
    """The RHN step with coupled carry gate (rnnlab.cells.dmu.RHNCell), ``u`` = W x."""
    T, depth = u.shape[1], w_hh.shape[1]
    mask = _mask(lengths, T, u.device)
    layers = [_Gates(u if k == 0 else None, w_hh[:, k], 2, bias[:, k]) for k in range(depth)]
    h, outs = h0, []
    for t in range(T):
        s = h
        for k, gates in enumerate(layers):
            a, b = gates(t if k == 0 else None, s)
            g = torch.sigmoid(b)
            s = torch.tanh(a) * g + s * (1 - g)
        h, out = _advance(s, h, None if mask is None else mask[t])
        outs.append(out)
    return torch.stack(outs, 1), h


def ensemble_rhn(u: Tensor, w_hh: Tensor, bias: Tensor, h0: Tensor, lengths: Tensor | None = None):
    """The RHN over time for a caller inside ``vmap``: ``u`` (T, B, 2H) = ``W x``, ``w_hh``
    (depth, 2H, H), ``bias`` (depth, 2H); returns ``(outputs (T, B, H), h_n)``."""
    return _in_recurrence_dtype(_ensemble_steps, u, w_hh, bias, h0, lengths)


# ---------------------------------------------------------------------------- compiled loops (small.c)


def _reference(u, W, bias, h0, lens):
    """The recurrence in PyTorch operations, members first: the compiled loops' second order."""
    h, S = h0, []
    for t in range(u.shape[1]):
        s = h
        for k in range(W.shape[1]):
            pre = torch.baddbmm(bias[:, k].unsqueeze(1), s, W[:, k].transpose(1, 2))
            a, b = (pre + u[:, t] if k == 0 else pre).chunk(2, -1)
            g = torch.sigmoid(b)
            s = torch.tanh(a) * g + s * (1 - g)
        h = _keep(s, h, _step_mask(lens, t, h))
        S.append(h)
    return torch.stack(S, 1)


_INPUTS = ("u", "W", "bias", "h0", "lens")

_RHN = _kernel("_RHN", _Family("rhn", _INPUTS, ("S",), _reference, 2))
_RHNLanes = _kernel(
    "_RHNLanes",
    _Family("rhn_lanes", _INPUTS, ("S", "hn"), _reference, 2),
    "The RHN with its sequences side by side in vector lanes (``rhn_lanes_*`` of small.c): the forward "
    "keeps the states only, the backward recomputes each step's micro-layers.",
)


def _compiled(u, W, bias, h0, lengths, lanes=False):
    lens = _lens(lengths)
    if lanes:
        return _RHNLanes.apply(*_c(u, W, bias, h0), lens)
    S = _RHN.apply(*_c(u, W, bias, h0), lens)
    return _masked(S, lens), S[:, -1]


def compiled_rhn(u: Tensor, w_hh: Tensor, bias: Tensor, h0: Tensor, lengths: Tensor | None = None, lanes: bool = False):
    """The RHN (coupled carry gate) over ``u`` = W_ih x (T, B, 2H), ``w_hh`` (depth, 2H, H),
    ``bias`` (depth, 2H) in the compiled loops of :mod:`rnnlab.kernels.small`: ``(outputs,
    h_n)``. ``lanes``: run the lane kernel (:func:`rnnlab.kernels.families.rnn.compiled_rnn`)
    instead of the scalar loop."""
    return ensemble_call(_compiled, u, w_hh, bias, h0, lengths, lanes)
