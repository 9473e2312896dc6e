"""The GRU (torch's gate order r, z, n; ``gi`` = W_ih x + b_ih the input terms of all steps):
its fused BPTT (:func:`gru_recurrence`), its ensemble loop (:func:`ensemble_gru`) and its
compiled loops (:func:`compiled_gru`, with the PyTorch recurrence that gives their second
order). Which one runs: :mod:`rnnlab.kernels.dispatch`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..amp import float32_region, recurrence_dtype
from ..ensemble import _advance, _Gates, _in_recurrence_dtype, _mask, ensemble_call
from ..fused import _refuse_graph
from ..linear import column_sum, gram_t
from ..small import _c, _Family, _gram, _keep, _kernel, _lens, _masked, _step_mask

__all__ = ["compiled_gru", "ensemble_gru", "gru_recurrence"]

_aten = torch.ops.aten

# ---------------------------------------------------------------------------- fused BPTT (one model)


class _GRURecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gi: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor):
        T, B, H3 = gi.shape
        H = H3 // 3
        Hs, R, Z, N, HN = (gi.new_empty(T, B, H) for _ in range(5))
        gh = gi.new_empty(B, H3)
        a = gi.new_empty(B, H)
        w_t = w_hh.t()
        h = h0
        for t in range(T):
            torch.addmm(b_hh, h, w_t, out=gh)
            g = gi[t]
            r, z, n, hn, hnew = R[t], Z[t], N[t], HN[t], Hs[t]
            hn.copy_(gh[:, 2 * H :])
            torch.add(g[:, :H], gh[:, :H], out=r).sigmoid_()
            torch.add(g[:, H : 2 * H], gh[:, H : 2 * H], out=z).sigmoid_()
            torch.addcmul(g[:, 2 * H :], r, hn, out=n).tanh_()
            torch.sub(h, n, out=a)
            torch.addcmul(n, z, a, out=hnew)  # n + z (h - n) = (1 - z) n + z h
            h = hnew
        ctx.save_for_backward(h0, w_hh, Hs, R, Z, N, HN)
        return Hs

    @staticmethod
    def backward(ctx, dHs: Tensor):
        _refuse_graph("GRU", "backend='native' (ATen's GRU) or backend='reference'")
        h0, w_hh, Hs, R, Z, N, HN = ctx.saved_tensors
        T, B, H = Hs.shape
        dHs = dHs.contiguous()
        dGI = Hs.new_empty(T, B, 3 * H)  # dL/d(input terms) = dL/d(gate pre-activations)
        dGH = Hs.new_empty(T, B, 3 * H)  # dL/d(W_hh h + b_hh)
        carry = Hs.new_zeros(B, H)
        dh, t1 = Hs.new_empty(B, H), Hs.new_empty(B, H)
        for t in range(T - 1, -1, -1):
            h_prev = Hs[t - 1] if t > 0 else h0
            r, z, n, hn = R[t], Z[t], N[t], HN[t]
            gi, gh = dGI[t], dGH[t]
            torch.add(dHs[t], carry, out=dh)
            # h = n + z (h_prev - n): dn = dh (1 - z), dz = dh (h_prev - n), dh_prev = dh z
            torch.addcmul(dh, dh, z, value=-1.0, out=t1)
            _aten.tanh_backward.grad_input(t1, n, grad_input=gi[:, 2 * H :])  # d pre_n
            torch.mul(gi[:, 2 * H :], r, out=gh[:, 2 * H :])  # d(W_hn h + b_hn) = d pre_n * r
            torch.mul(gi[:, 2 * H :], hn, out=t1)  # dr
            _aten.sigmoid_backward.grad_input(t1, r, grad_input=gi[:, :H])
            torch.sub(h_prev, n, out=t1).mul_(dh)  # dz
            _aten.sigmoid_backward.grad_input(t1, z, grad_input=gi[:, H : 2 * H])
            gh[:, : 2 * H].copy_(gi[:, : 2 * H])
            torch.mul(dh, z, out=carry)
            carry.addmm_(gh, w_hh)
        n_rows = T * B
        dGH2 = dGH.view(n_rows, 3 * H)
        dw = dGH[0].t() @ h0
        if T > 1:
            dw += gram_t(dGH[1:].reshape(-1, 3 * H), Hs[:-1].reshape(-1, H))
        return dGI, carry, dw, column_sum(dGH2)


def gru_recurrence(gi: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor) -> Tensor:
    """torch's GRU (gate order r, z, n) over time with a hand-written BPTT; returns all states
    (T, B, H). ``gi`` (T, B, 3H): the input terms ``x_t @ W_ih.T + b_ih`` of all steps;
    ``w_hh`` (3H, H), ``b_hh`` (3H,)."""
    T, B, H3 = gi.shape
    if T == 0:
        raise ValueError("cannot run a recurrence over an empty sequence (T = 0)")
    H = H3 // 3
    if H3 != 3 * H or h0.shape != (B, H) or w_hh.shape != (3 * H, H) or b_hh.shape != (3 * H,):
        raise ValueError(
            f"inconsistent GRU shapes: gi {tuple(gi.shape)}, h0 {tuple(h0.shape)}, w_hh {tuple(w_hh.shape)}, "
            f"b_hh {tuple(b_hh.shape)} (expected gi (T, B, 3H), h0 (B, H), w_hh (3H, H), b_hh (3H,))"
        )
    dt = recurrence_dtype(gi)  # float32 under autocast (see rnnlab.kernels.amp)
    with float32_region(gi):
        return _GRURecurrence.apply(
            gi.to(dt).contiguous(), h0.to(dt).contiguous(), w_hh.to(dt).contiguous(), b_hh.to(dt)
        )


# ---------------------------------------------------------------------------- ensemble loop


def _ensemble_steps(gi, w_hh, b_hh, h0, lengths):
    """torch's GRU step (gates r, z, n) over ``gi`` = W_ih x + b_ih."""
    T = gi.shape[1]
    mask = _mask(lengths, T, gi.device)
    inputs, hidden = _Gates(gi, w_hh, 3), _Gates(None, w_hh, 3, b_hh)
    h, outs = h0, []
    for t in range(T):
        ir, iz, in_ = inputs.u[t].unbind(1) if inputs.major else inputs.u[t].chunk(3, -1)
        hr, hz, hn = hidden(None, h)
        r = torch.sigmoid(ir + hr)
        z = torch.sigmoid(iz + hz)
        n = torch.tanh(in_ + r * hn)
        new = (1 - z) * n + z * h
        h, out = _advance(new, h, None if mask is None else mask[t])
        outs.append(out)
    return torch.stack(outs, 1), h


def ensemble_gru(gi: Tensor, w_hh: Tensor, b_hh: Tensor, h0: Tensor, lengths: Tensor | None = None):
    """The GRU over time for a caller inside ``vmap``: ``gi`` (T, B, 3H) = ``W_ih x + b_ih``,
    ``w_hh`` (3H, H), ``b_hh`` (3H,); returns ``(outputs (T, B, H), h_n)``."""
    return _in_recurrence_dtype(_ensemble_steps, gi, w_hh, b_hh, h0, lengths)


# ---------------------------------------------------------------------------- compiled loops (small.c)


def _reference(u, W, bhh, h0, lens):
    """The recurrence in PyTorch operations, members first: the compiled loops' second order."""
    h, S = h0, []
    for t in range(u.shape[1]):
        ir, iz, in_ = u[:, t].chunk(3, -1)
        hr, hz, hn = torch.baddbmm(bhh.unsqueeze(1), h, W.transpose(1, 2)).chunk(3, -1)
        r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
        new = (1 - z) * torch.tanh(in_ + r * hn) + z * h
        h = _keep(new, h, _step_mask(lens, t, h))
        S.append(h)
    return torch.stack(S, 1)


def _weights(env: dict) -> None:
    env["dW"], env["dbhh"] = _gram(env["dGH"], env["S"], env["h0"]), env["dGH"].sum((1, 2))


_INPUTS = ("u", "W", "bhh", "h0", "lens")

_GRU = _kernel("_GRU", _Family("gru", _INPUTS, ("S",), _reference, 3, ("h0",), _weights))
_GRULanes = _kernel(
    "_GRULanes",
    _Family("gru_lanes", _INPUTS, ("S", "hn"), _reference, 3),
    "The GRU with its sequences side by side in vector lanes (``gru_lanes_*`` of small.c): the forward "
    "keeps the states only, the backward recomputes the gates.",
)


def _compiled(u, W, bhh, h0, lengths, lanes=False):
    lens = _lens(lengths)
    if lanes:
        return _GRULanes.apply(*_c(u, W, bhh, h0), lens)
    S = _GRU.apply(*_c(u, W, bhh, h0), lens)
    return _masked(S, lens), S[:, -1]


def compiled_gru(
    gi: Tensor, w_hh: Tensor, b_hh: Tensor, h0: Tensor, lengths: Tensor | None = None, lanes: bool = False
):
    """The GRU over ``gi`` = W_ih x + b_ih (T, B, 3H) in the compiled loops of
    :mod:`rnnlab.kernels.small`: ``(outputs, h_n)``. ``lanes``: run the lane kernel
    (:func:`rnnlab.kernels.families.rnn.compiled_rnn`) instead of the scalar loop."""
    return ensemble_call(_compiled, gi, w_hh, b_hh, h0, lengths, lanes)
