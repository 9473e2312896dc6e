"""Fused BPTT for the Deep Memory Update recurrence (DMU, Kaminski et al.).

One step (column form; row form in the code, ``a @ W.T``)::

    a_1 = LeakyReLU(W_1x x_t + b_1 + W_1h h_{t-1})          first hidden layer
    a_k = LeakyReLU(W_k a_{k-1} + b_k)                      further hidden layers
    [z; hh] = W_o a_L + b_o                                 linear output layer (2H)
    g = sigmoid(z),  c = f(hh)  (f = tanh or the identity)
    h_t = g * h_{t-1} + (1 - g) * c  =  c + g * (h_{t-1} - c)

The first layer's input term ``u1_t = W_1x x_t + b_1`` is computed for all steps outside, by
one large product. With no hidden layer (``DMUCell(layers=[])``, the paper's single linear
layer) the FNN is the output layer alone, ``[z; hh] = W_ox x_t + b_o + W_oh h_{t-1}``:
:func:`dmu_recurrence` is then called with ``hidden=[]`` and ``w_out = b_out = None``, ``u1``
holds the output layer's input terms (T, B, 2H) and ``w1h`` is ``W_oh`` (2H, H). :func:`dmu_recurrence` then runs the loop as a ``torch.autograd.Function``:
the forward builds no graph and keeps, per step, the hidden activations, g, c and h (all its
backward needs: each derivative is a function of an output, ``LeakyReLU'`` of its output's
sign, ``sigmoid' = g (1 - g)``, ``tanh' = 1 - c^2``, through ATen's fused ``*_backward``
kernels); the backward loop does one product per layer per step, and every weight gradient
is one large product at the end. Tested against the step loop (DMUCell's ``forward``) in
float64 and with gradcheck. Not twice differentiable: a backward asked for a graph of itself
(``create_graph=True``) raises a ``RuntimeError`` that names the step loop
(``backend="reference"``) as the way to second-order gradients.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .amp import float32_region, recurrence_dtype
from .linear import column_sum, gram_t

_aten = torch.ops.aten


def _refuse_graph(kernel: str, remedy: str) -> None:
    """Raise when autograd asks this fused backward for a graph of itself (``create_graph=True``):
    it has none, and gradients computed without one would be silently constant in the weights."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"second-order gradients (a backward with create_graph=True: gradient penalties, Hessian-vector "
            f"products) do not pass through the fused {kernel} kernel; build the layer with {remedy} for them"
        )


def _gate_step(activation: str, o: Tensor, h: Tensor, g: Tensor, c: Tensor, hn: Tensor) -> Tensor:
    """The gated update of one step, in place: from the FNN's output ``o = [z; hh]`` (B, 2H)
    write ``g = sigmoid(z)``, ``c = f(hh)`` and ``hn = c + g (h - c)``; return ``hn``."""
    H = g.shape[1]
    torch.sigmoid(o[:, :H], out=g)
    if activation == "tanh":
        torch.tanh(o[:, H:], out=c)
    else:
        c.copy_(o[:, H:])
    torch.sub(h, c, out=hn)
    return hn.mul_(g).add_(c)


def _gate_step_backward(
    activation: str, dh: Tensor, h_prev: Tensor, g: Tensor, c: Tensor, o: Tensor, carry: Tensor, t1: Tensor, t2: Tensor
) -> None:
    """Backward of :func:`_gate_step` for ``dh = dL/dh_t``: write ``dL/d[z; hh]`` into ``o``
    (B, 2H) and the gate's share of ``dL/dh_{t-1}`` (``dh * g``) into ``carry``; ``t1``, ``t2``
    are (B, H) scratch. ``h = c + g (h_prev - c)``: ``dg = dh (h_prev - c)``,
    ``dc = dh (1 - g)``, ``dh_prev = dh g``."""
    H = g.shape[1]
    torch.sub(h_prev, c, out=t1).mul_(dh)
    _aten.sigmoid_backward.grad_input(t1, g, grad_input=o[:, :H])
    torch.addcmul(dh, dh, g, value=-1.0, out=t2)
    if activation == "tanh":
        _aten.tanh_backward.grad_input(t2, c, grad_input=o[:, H:])
    else:
        o[:, H:].copy_(t2)
    torch.mul(dh, g, out=carry)


class _DMURecurrence(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        activation: str,
        slope: float,
        u1: Tensor,
        h0: Tensor,
        w1h: Tensor,
        w_out: Tensor,
        b_out: Tensor,
        *hidden: Tensor,
    ):
        Ws, bs = hidden[0::2], hidden[1::2]
        T, B, _ = u1.shape
        H = h0.shape[1]
        A = [u1.new_empty(T, B, u1.shape[2])] + [u1.new_empty(T, B, W.shape[0]) for W in Ws]
        Hs, Gs, Cs = (u1.new_empty(T, B, H) for _ in range(3))
        o = u1.new_empty(B, 2 * H)
        w1ht, wot, Wts = w1h.t(), w_out.t(), [W.t() for W in Ws]
        h = h0
        for t in range(T):
            a = torch.addmm(u1[t], h, w1ht, out=A[0][t])
            torch.nn.functional.leaky_relu_(a, slope)
            for k, (Wt, b) in enumerate(zip(Wts, bs)):
                a = torch.addmm(b, a, Wt, out=A[k + 1][t])
                torch.nn.functional.leaky_relu_(a, slope)
            torch.addmm(b_out, a, wot, out=o)
            h = _gate_step(activation, o, h, Gs[t], Cs[t], Hs[t])
        ctx.activation, ctx.slope, ctx.n_hidden = activation, slope, len(A)
        ctx.save_for_backward(h0, w1h, w_out, Hs, Gs, Cs, *A, *Ws)
        return Hs

    @staticmethod
    def backward(ctx, dHs: Tensor):
        _refuse_graph("DMU", "backend='reference'")
        h0, w1h, w_out, Hs, Gs, Cs, *rest = ctx.saved_tensors
        A, Ws = rest[: ctx.n_hidden], rest[ctx.n_hidden :]
        slope = ctx.slope
        T, B, H = Hs.shape
        dHs = dHs.contiguous()
        dO = Hs.new_empty(T, B, 2 * H)  # dL/d[z; hh] of every step
        dP = [torch.empty_like(a) for a in A]  # dL/d(pre-activation) of every hidden layer
        carry = Hs.new_zeros(B, H)  # dL/dh_t arriving from step t+1
        dh, t1, t2 = (Hs.new_empty(B, H) for _ in range(3))
        for t in range(T - 1, -1, -1):
            h_prev = Hs[t - 1] if t > 0 else h0
            o = dO[t]
            torch.add(dHs[t], carry, out=dh)
            _gate_step_backward(ctx.activation, dh, h_prev, Gs[t], Cs[t], o, carry, t1, t2)
            da = o @ w_out
            for k in range(len(A) - 1, -1, -1):
                dp = dP[k][t]
                _aten.leaky_relu_backward.grad_input(da, A[k][t], slope, True, grad_input=dp)
                if k > 0:
                    da = dp @ Ws[k - 1]
            carry.addmm_(dP[0][t], w1h)
        n = T * B
        grads = []
        for k in range(1, len(A)):
            dp2 = dP[k].view(n, -1)
            grads += [gram_t(dp2, A[k - 1].view(n, -1)), column_sum(dp2)]
        dO2 = dO.view(n, 2 * H)
        dw_out = gram_t(dO2, A[-1].view(n, -1))
        db_out = column_sum(dO2)
        dP0 = dP[0]
        dw1h = dP0[0].t() @ h0
        if T > 1:
            dw1h += gram_t(dP0[1:].reshape(-1, dP0.shape[2]), Hs[:-1].reshape(-1, H))
        return (None, None, dP0, carry, dw1h, dw_out, db_out, *grads)


class _DMULinearRecurrence(torch.autograd.Function):
    """The DMU whose FNN is a single linear layer: ``[z; hh] = u_t + W_h h_{t-1}``."""

    @staticmethod
    def forward(ctx, activation: str, u: Tensor, h0: Tensor, w_h: Tensor):
        T, B, H2 = u.shape
        H = H2 // 2
        Hs, Gs, Cs = (u.new_empty(T, B, H) for _ in range(3))
        o = u.new_empty(B, H2)
        wt = w_h.t()
        h = h0
        for t in range(T):
            torch.addmm(u[t], h, wt, out=o)
            h = _gate_step(activation, o, h, Gs[t], Cs[t], Hs[t])
        ctx.activation = activation
        ctx.save_for_backward(h0, w_h, Hs, Gs, Cs)
        return Hs

    @staticmethod
    def backward(ctx, dHs: Tensor):
        _refuse_graph("DMU", "backend='reference'")
        h0, w_h, Hs, Gs, Cs = ctx.saved_tensors
        T, B, H = Hs.shape
        dHs = dHs.contiguous()
        dO = Hs.new_empty(T, B, 2 * H)  # dL/d[z; hh] = dL/du of every step
        carry = Hs.new_zeros(B, H)
        dh, t1, t2 = (Hs.new_empty(B, H) for _ in range(3))
        for t in range(T - 1, -1, -1):
            h_prev = Hs[t - 1] if t > 0 else h0
            o = dO[t]
            torch.add(dHs[t], carry, out=dh)
            _gate_step_backward(ctx.activation, dh, h_prev, Gs[t], Cs[t], o, carry, t1, t2)
            carry.addmm_(o, w_h)
        dw_h = dO[0].t() @ h0
        if T > 1:
            dw_h += gram_t(dO[1:].reshape(-1, 2 * H), Hs[:-1].reshape(-1, H))
        return None, dO, carry, dw_h


def dmu_recurrence(
    u1: Tensor,
    h0: Tensor,
    w1h: Tensor,
    hidden: list[tuple[Tensor, Tensor]],
    w_out: Tensor | None,
    b_out: Tensor | None,
    activation: str = "tanh",
    slope: float = 0.01,
) -> Tensor:
    """Run the DMU over time (see the module docstring) and return all states (T, B, H).

    Args:
        u1: (T, B, W1) first-layer input terms ``x_t @ W_1x.T + b_1`` of all steps.
        h0: (B, H) initial state.
        w1h: (W1, H) the first layer's weight on h.
        hidden: ``[(W_k, b_k), ...]`` of the further hidden layers (W_k: (W_k, W_{k-1})).
        w_out, b_out: (2H, W_L), (2H,) the linear output layer (z first, then hh); both None
            when the FNN has no hidden layer: ``u1`` (T, B, 2H) is then the output layer's input
            terms, ``w1h`` (2H, H) its weight on h, and ``hidden`` must be empty.
        activation: "tanh" or "identity" (f of the candidate).
        slope: the hidden layers' LeakyReLU slope (positive).
    """
    if activation not in ("tanh", "identity"):
        raise ValueError(f"activation must be 'tanh' or 'identity', got {activation!r}")
    if not slope > 0:
        raise ValueError(f"the LeakyReLU slope must be positive (derivatives are read from outputs), got {slope}")
    T, B, W1 = u1.shape
    H = h0.shape[1]
    if T == 0:
        raise ValueError("cannot run a recurrence over an empty sequence (T = 0)")
    if h0.shape != (B, H) or w1h.shape != (W1, H) or (w_out is not None and w_out.shape[0] != 2 * H):
        raise ValueError(
            f"inconsistent DMU shapes: u1 {tuple(u1.shape)}, h0 {tuple(h0.shape)}, w1h {tuple(w1h.shape)} "
            f"(expected ({W1}, {H})), w_out {tuple(w_out.shape)} (expected ({2 * H}, ...))"
        )
    dt = recurrence_dtype(u1)  # float32 under autocast (see rnnlab.kernels.amp)
    if w_out is None or b_out is None:
        if hidden or w_out is not None or b_out is not None:
            raise ValueError("a DMU without hidden layers takes hidden=[] and w_out = b_out = None")
        if W1 != 2 * H:
            raise ValueError(f"without hidden layers u1 must be (T, B, 2H) = (T, {B}, {2 * H}), got {tuple(u1.shape)}")
        with float32_region(u1):
            return _DMULinearRecurrence.apply(activation, u1.to(dt).contiguous(), h0.to(dt).contiguous(), w1h.to(dt))
    flat = [t.to(dt) for pair in hidden for t in pair]
    with float32_region(u1):
        return _DMURecurrence.apply(
            activation,
            float(slope),
            u1.to(dt).contiguous(),
            h0.to(dt).contiguous(),
            w1h.to(dt),
            w_out.to(dt),
            b_out.to(dt),
            *flat,
        )


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
    ``s <- s + sigmoid(b) (tanh(a) - s)``. Hand-written BPTT as :func:`dmu_recurrence`.
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
