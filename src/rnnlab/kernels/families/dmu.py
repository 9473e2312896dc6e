"""The Deep Memory Update recurrence (DMU, Kaminski et al.): its fused BPTT
(:func:`dmu_recurrence`), its ensemble loop (:func:`ensemble_dmu`) and its compiled loops
(:func:`compiled_dmu`, with the PyTorch recurrence that gives their second order). Which one
runs: :mod:`rnnlab.kernels.dispatch`.

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

import functools

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..amp import float32_region, recurrence_dtype
from ..ensemble import _bgram, _bsum, _in_recurrence_dtype, _mask, ensemble_call
from ..fused import _refuse_graph
from ..linear import column_sum, gram_t
from ..small import _ACT, _HIDDEN, _c, _Family, _keep, _kernel, _lens, _masked, _step_mask

__all__ = ["compiled_dmu", "dmu_recurrence", "ensemble_dmu"]

_aten = torch.ops.aten

# ---------------------------------------------------------------------------- fused BPTT (one model)


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


# ---------------------------------------------------------------------------- ensemble loop


def _leaky_backward(grad: Tensor, out: Tensor, slope: float, into: Tensor) -> Tensor:
    """``grad * LeakyReLU'`` written through the output (positive slope: the sign is kept)."""
    return torch.ops.aten.leaky_relu_backward.grad_input(grad, out, slope, True, grad_input=into)


class _DMUSteps(torch.autograd.Function):
    """The DMU over time for an ensemble, fused: the forward builds no graph and keeps, per
    step, the hidden activations, g, c and h (what the backward needs; each derivative is read
    from an output), with a frozen state past each sequence's length. The E-leading twin of
    :class:`_DMURecurrence`.

    ``u1`` (E, T, B, W1) the first layer's input terms; ``mask`` (T, E, B, 1) float or None;
    weights E-leading; the z and hh halves of the output layer are separate products (each
    contiguous: see :class:`rnnlab.kernels.ensemble._Gates`). Returns the states (E, T, B, H)."""

    @staticmethod
    def forward(ctx, activation, slope, u1, h0, mask, w1h, w_out, b_out, *hidden):
        Ws, bs = hidden[0::2], hidden[1::2]
        E, T, B, W1 = u1.shape
        H = h0.shape[2]
        linear = w_out is None  # no hidden layer: the first layer is the output layer
        if linear:
            uz, uh = (u1[..., :H].transpose(0, 1).contiguous(), u1[..., H:].transpose(0, 1).contiguous())
            wz, wh = w1h[:, :H].transpose(1, 2), w1h[:, H:].transpose(1, 2)
            A = []
        else:
            u = u1.transpose(0, 1).contiguous()
            A = [u.new_empty(T, E, B, W1)] + [u.new_empty(T, E, B, W.shape[1]) for W in Ws]
            w1t, Wts = w1h.transpose(1, 2), [W.transpose(1, 2) for W in Ws]
            # the biases spread over the batch once: baddbmm copies its input into out every step,
            # and a copy from a broadcast (E, 1, K) view is many times slower than a contiguous one
            bks = [b.unsqueeze(1).expand(E, B, -1).contiguous() for b in bs]
            wz, wh = w_out[:, :H].transpose(1, 2), w_out[:, H:].transpose(1, 2)
            bz, bh = (b_out[:, None, s].expand(E, B, H).contiguous() for s in (slice(None, H), slice(H, None)))
        Hs, Gs, Cs = (h0.new_empty(T, E, B, H) for _ in range(3))
        new = h0.new_empty(E, B, H) if mask is not None else None
        keep = None if mask is None else mask.bool().expand(T, E, B, H).contiguous()  # (same reason)
        h = h0
        for t in range(T):
            g, c = Gs[t], Cs[t]
            if linear:
                torch.baddbmm(uz[t], h, wz, out=g)
                torch.baddbmm(uh[t], h, wh, out=c)
            else:
                a = torch.baddbmm(u[t], h, w1t, out=A[0][t])
                torch.nn.functional.leaky_relu_(a, slope)
                for k, (Wt, b) in enumerate(zip(Wts, bks)):
                    a = torch.baddbmm(b, a, Wt, out=A[k + 1][t])
                    torch.nn.functional.leaky_relu_(a, slope)
                torch.baddbmm(bz, a, wz, out=g)
                torch.baddbmm(bh, a, wh, out=c)
            g.sigmoid_()
            if activation == "tanh":
                c.tanh_()
            hn = Hs[t] if mask is None else new
            torch.sub(h, c, out=hn).mul_(g).add_(c)  # c + g (h - c)
            if mask is not None:
                torch.where(keep[t], new, h, out=Hs[t])
            h = Hs[t]
        ctx.activation, ctx.slope, ctx.linear, ctx.n_hidden = activation, slope, linear, len(Ws)
        ctx.save_for_backward(h0, mask, w1h, w_out, Hs, Gs, Cs, *A, *Ws)
        return Hs.transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, dHs):
        h0, mask, w1h, w_out, Hs, Gs, Cs, *rest = ctx.saved_tensors
        slope, linear = ctx.slope, ctx.linear
        A, Ws = (rest[: ctx.n_hidden + 1], rest[ctx.n_hidden + 1 :]) if not linear else ([], [])
        T, E, B, H = Hs.shape
        dHs = dHs.transpose(0, 1).contiguous()  # (T, E, B, H)
        dZ, dC = torch.empty_like(Hs), torch.empty_like(Hs)  # dL/d(z), dL/d(hh) of every step
        dA = [torch.empty_like(a) for a in A]  # dL/d(pre-activation) of every hidden layer
        carry = Hs.new_zeros(E, B, H)  # dL/dh_t arriving from step t+1
        dh, t1 = Hs.new_empty(E, B, H), Hs.new_empty(E, B, H)
        w_o = w1h if linear else w_out
        wz, wh = w_o[:, :H], w_o[:, H:]  # (E, H, W)
        for t in range(T - 1, -1, -1):
            h_prev = Hs[t - 1] if t > 0 else h0
            g, c, dz, dc = Gs[t], Cs[t], dZ[t], dC[t]
            torch.add(dHs[t], carry, out=dh)
            if mask is not None:  # frozen rows took no step: their gradient passes straight to h_{t-1}
                m = mask[t]
                torch.mul(dh, 1 - m, out=carry)
                dh.mul_(m)
            else:
                carry.zero_()
            # h = c + g (h_prev - c): dg = dh (h_prev - c), dc = dh (1 - g), dh_prev = dh g
            torch.sub(h_prev, c, out=t1).mul_(dh)
            torch.ops.aten.sigmoid_backward.grad_input(t1, g, grad_input=dz)
            torch.addcmul(dh, dh, g, value=-1.0, out=t1)
            if ctx.activation == "tanh":
                torch.ops.aten.tanh_backward.grad_input(t1, c, grad_input=dc)
            else:
                dc.copy_(t1)
            carry.addcmul_(dh, g)
            if linear:
                carry.baddbmm_(dz, wz).baddbmm_(dc, wh)
                continue
            da = torch.bmm(dz, wz).baddbmm_(dc, wh)
            for k in range(len(A) - 1, -1, -1):
                dp = _leaky_backward(da, A[k][t], slope, dA[k][t])
                if k > 0:
                    da = torch.bmm(dp, Ws[k - 1])
            carry.baddbmm_(dA[0][t], w1h)
        Hprev = torch.cat([h0.unsqueeze(0), Hs[:-1]])
        dO = torch.cat([dZ, dC], -1)
        if linear:
            return None, None, dO.transpose(0, 1), carry, None, _bgram(dO, Hprev), None, None
        grads = []
        for k in range(1, len(A)):
            grads += [_bgram(dA[k], A[k - 1]), _bsum(dA[k])]
        return (
            None,
            None,
            dA[0].transpose(0, 1),
            carry,
            None,
            _bgram(dA[0], Hprev),
            _bgram(dO, A[-1]),
            _bsum(dO),
            *grads,
        )


def _ensemble_steps(u1, h0, w1h, w_out, b_out, lengths, activation, slope, *hidden):
    """The DMU (rnnlab.cells.dmu) through :class:`_DMUSteps`: outputs (zero past each length)
    and the final states."""
    mask = None if lengths is None else torch.stack(_mask(lengths, u1.shape[1], u1.device)).to(u1.dtype)
    Hs = _DMUSteps.apply(activation, float(slope), u1.contiguous(), h0.contiguous(), mask, w1h, w_out, b_out, *hidden)
    out = Hs if mask is None else Hs * mask.transpose(0, 1)
    return out, Hs[:, -1]


def ensemble_dmu(
    u1: Tensor,
    h0: Tensor,
    w1h: Tensor,
    hidden: list[tuple[Tensor, Tensor]],
    w_out: Tensor | None,
    b_out: Tensor | None,
    activation: str = "tanh",
    slope: float = 0.01,
    lengths: Tensor | None = None,
):
    """:func:`dmu_recurrence`'s arguments, for a caller inside ``vmap``,
    plus ``lengths``; returns ``(outputs (T, B, H), h_n)``."""
    flat = [t for pair in hidden for t in pair]
    return _in_recurrence_dtype(_ensemble_steps, u1, h0, w1h, w_out, b_out, lengths, activation, slope, *flat)


# ---------------------------------------------------------------------------- compiled loops (small.c)


def _reference(act, slope, u1, w1h, w_out, b_out, h0, lens, *hidden):
    """The recurrence in PyTorch operations, members first: the compiled loops' second order."""
    lrelu = functools.partial(torch.nn.functional.leaky_relu, negative_slope=slope)
    h, S = h0, []
    for t in range(u1.shape[1]):
        a = torch.baddbmm(u1[:, t], h, w1h.transpose(1, 2))
        if w_out is not None:
            a = lrelu(a)
            for W, b in zip(hidden[0::2], hidden[1::2]):
                a = lrelu(torch.baddbmm(b.unsqueeze(1), a, W.transpose(1, 2)))
            a = torch.baddbmm(b_out.unsqueeze(1), a, w_out.transpose(1, 2))
        z, hh = a.chunk(2, -1)
        c = torch.tanh(hh) if act == 0 else hh
        h = _keep(c + torch.sigmoid(z) * (h - c), h, _step_mask(lens, t, h))
        S.append(h)
    return torch.stack(S, 1)


_INPUTS = ("act", "slope", "u1", "w1h", "wout", "bout", "h0", "lens", _HIDDEN)

_DMU = _kernel("_DMU", _Family("dmu", _INPUTS, ("S",), _reference, 0))
_DMULanes = _kernel(
    "_DMULanes",
    _Family("dmu_lanes", _INPUTS, ("S", "hn"), _reference, 0),
    "The DMU with its sequences side by side in vector lanes (``dmu_lanes_*`` of small.c): the forward "
    "keeps the states only, the backward recomputes each step's update network.",
)


def _compiled(u1, h0, w1h, w_out, b_out, lengths, activation, slope, lanes, *hidden):
    lens = _lens(lengths)
    run = _DMULanes if lanes else _DMU
    out = run.apply(_ACT[activation], float(slope), *_c(u1, w1h, w_out, b_out, h0), lens, *_c(*hidden))
    return out if lanes else (_masked(out, lens), out[:, -1])


def compiled_dmu(
    u1: Tensor,
    h0: Tensor,
    w1h: Tensor,
    hidden: list[tuple[Tensor, Tensor]],
    w_out: Tensor | None,
    b_out: Tensor | None,
    activation: str = "tanh",
    slope: float = 0.01,
    lengths: Tensor | None = None,
    lanes: bool = False,
):
    """The DMU (:func:`ensemble_dmu`'s arguments) in the compiled loops of
    :mod:`rnnlab.kernels.small`: ``(outputs, h_n)``. ``lanes``: run the lane kernel
    (:func:`rnnlab.kernels.families.rnn.compiled_rnn`) instead of the scalar loop."""
    flat = [t for pair in hidden for t in pair]
    return ensemble_call(_compiled, u1, h0, w1h, w_out, b_out, lengths, activation, slope, lanes, *flat)
