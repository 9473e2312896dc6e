"""The element-wise recurrence family ``h_t = phi(W h_{t-1} + u_t)`` (the RNN and IRNN, expRNN,
scoRNN, nnRNN, the modReLU RNN, asRNN's transformed coordinates, the LT-RNN's transition): its
fused BPTT (:func:`elementwise_rnn`, with the Triton kernel's hook), its ensemble loop
(:func:`ensemble_elementwise_rnn`) and its compiled loops (:func:`compiled_rnn`, with the
PyTorch recurrence that gives their second order). Which one runs: :mod:`rnnlab.kernels.dispatch`.

The fused BPTT:

Column form (docs/models.md): ``W`` is (H, H) and applied as ``h @ W.T``; ``u`` (T, B, H) is the
input term ``W_ih x_t + b`` of every step, computed by one large matrix product (outside, or
fused in with ``input_weight``, see below);
``h0`` is (B, H). ``phi`` is one of

* ``"tanh"``: ``torch.tanh``; optionally as ``2 sigmoid(2 z) - 1`` (:data:`TANH_VIA_SIGMOID`),
* ``"relu"``,
* ``"modrelu"``: ``sign(z) * relu(|z| + b)`` with a per-unit bias b (H,) (Arjovsky et al.
  2016; the expRNN/scoRNN/nnRNN activation), sign(0) = 0,
* ``"identity"``: the linear recurrence ``h_t = W h_{t-1} + u_t`` (the LT-RNN's transition).

Why a custom ``torch.autograd.Function``: the reference loop (:func:`rnnlab.unroll`) builds an
autograd graph of several nodes per step and frees/reallocates every intermediate. Here the
forward loop runs without a graph and writes each state into one preallocated (T, B, H)
buffer, which is all the backward needs (phi' is a function of phi's output for all four
activations: ``1 - h^2``, ``h > 0``, ``h != 0``, 1). The backward loop does one (B, H) x (H, H)
matrix product per step; the weight gradient ``sum_t delta_t^T h_{t-1}`` and the bias gradient
are single large products/reductions at the end. With ``input_weight`` the input projection
``u = x W_ih^T + b`` is fused in as well: computed straight into the state buffer, its
backward (``dx``, ``dW_ih``, ``db``) done from the same ``dL/du`` (asRNN's transformed
coordinates run this way).

Lengths: with ``lengths`` (B,), a sequence's state is frozen from its last step on (steps at
or past its length leave it unchanged) and its outputs there are zero, exactly as
:func:`rnnlab.unroll` does.

On CUDA, with Triton installed and ``H <= 256``, the same recurrence runs as one persistent
Triton kernel instead (:mod:`rnnlab.kernels.triton_recurrence`; ``RNNLAB_TRITON`` forces or
disables it); CPU tensors always take the loop here.

Second-order gradients: when autograd asks for a graph of the backward (``create_graph=True``:
gradient penalties, Hessian-vector products, meta-learning), the backward runs as autograd
operations instead (:func:`backward_graph`), written through the saved state sequence S, so
that differentiating it leads back through the recurrence: second and higher derivatives are
exact (tested with ``gradgradcheck`` in float64, also on the Triton path). A plain
``backward()`` keeps the fused loop.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .. import dispatch
from ..amp import float32_region, recurrence_dtype
from ..ensemble import _bgram, _mask, batched, ensemble_call
from ..linear import blocked_mm, column_sum, gram_t, tall_linear
from ..small import _ACT, _c, _Family, _keep, _kernel, _lens, _masked, _step_mask, _weight_from_dU
from ..state import hold_past_length
from ..triton_setting import mode as triton_mode

__all__ = [
    "ACTIVATIONS",
    "compiled_rnn",
    "elementwise_rnn",
    "ensemble_elementwise_rnn",
    "modrelu",
    "reference_elementwise_rnn",
]

# ---------------------------------------------------------------------------- fused BPTT (one model)

ACTIVATIONS = ("tanh", "relu", "modrelu", "identity")

#: compute tanh as 2 sigmoid(2z) - 1 in the fused loop: measured ~2x faster than ``tanh_`` on
#: (128, 138) float32 with one thread in torch 2.13 CPU (32 us against 58 us), but accurate only
#: in absolute terms (a few 1e-8): near 0 its relative error in float32 is 1e-3 at |z| = 1e-5
#: and 7e-2 at 1e-6, where torch.tanh is exact to the ulp. Off by default (long-memory models
#: can carry information in small states); set it to True to trade that accuracy for speed.
TANH_VIA_SIGMOID = False


def modrelu(z: Tensor, bias: Tensor) -> Tensor:
    """modReLU for real inputs: ``sign(z) * relu(|z| + b)``, with sign(0) = 0 (Arjovsky et al.
    2016; the step of the expRNN, scoRNN, nnRNN and modReLU RNN cells)."""
    return torch.sign(z) * torch.relu(z.abs() + bias)


def _activate(z: Tensor, out: Tensor, activation: str, bias: Tensor | None, scratch: Tensor) -> None:
    """Write phi(z) into ``out`` (which may be ``z`` itself); ``scratch`` is a (B, H) buffer for
    modReLU's sign."""
    if activation == "tanh":
        if TANH_VIA_SIGMOID:
            torch.mul(z, 2, out=out).sigmoid_().mul_(2).sub_(1)
        else:
            torch.tanh(z, out=out)
    elif activation == "relu":
        torch.clamp_min(z, 0, out=out)
    elif activation == "identity":
        if out is not z:
            out.copy_(z)
    else:
        torch.sign(z, out=scratch)
        torch.abs(z, out=out).add_(bias).relu_().mul_(scratch)


def _times_derivative_(g: Tensor, h: Tensor, activation: str, scratch: Tensor, grad_b: Tensor | None) -> None:
    """``g *= phi'(z)`` in place, written through phi's output ``h`` ((B, H), or (E, B, H) with
    ``grad_b`` (E, H) in an ensemble); for modReLU also ``grad_b += sum_batch g * sign(h)``. (Boolean masks cost ~5x more than these float
    passes on CPU, hence sign() instead of ``h != 0``; tanh and relu use ATen's fused
    ``tanh_backward`` / ``threshold_backward``.)"""
    if activation == "tanh":
        torch.ops.aten.tanh_backward.grad_input(g, h, grad_input=g)  # g (1 - h^2), one pass
    elif activation == "relu":
        torch.ops.aten.threshold_backward.grad_input(g, h, 0, grad_input=g)  # g [h > 0]
    elif activation == "identity":
        pass
    else:
        # modReLU: dh/dz = [|z| + b > 0] = [h != 0] = sign(h)^2 and dh/db = sign(z) [h != 0]
        # = sign(h) (sign(0) = 0 on both sides)
        torch.sign(h, out=scratch)
        g.mul_(scratch)
        grad_b.add_(g.sum(-2))
        g.mul_(scratch)


class _ElementwiseRNN(torch.autograd.Function):
    """Returns the state sequence S (T, B, H); S[t] = h_t (frozen past a sequence's length).

    With ``w_in`` the first input is x (T, B, I) and the input terms ``x @ w_in.T + b_in`` are
    computed here, straight into S (no separate (T, B, H) buffer for them); the backward then
    also returns the gradients of x, ``w_in`` and ``b_in``."""

    @staticmethod
    def forward(ctx, u, weight, h0, bias, mask, activation, w_in=None, b_in=None):
        T, B = u.shape[:2]
        H = weight.shape[0]
        if w_in is None:
            S = u.new_empty(T, B, H)
        else:
            S = blocked_mm(u.reshape(T * B, -1), w_in.t(), b_in).view(T, B, H)
        scratch = u.new_empty(B, H)
        pre = None if w_in is None else u.new_empty(B, H)
        Wt = weight.t()
        h = h0
        for t in range(T):
            z = S[t]
            if w_in is None:
                torch.addmm(u[t], h, Wt, out=z)
                _activate(z, z, activation, bias, scratch)
            else:
                # S[t] holds the input term: the sum goes to a scratch and phi back into S[t]
                # (measured ~8% faster than an in-place addmm_ followed by phi in place)
                _activate(torch.addmm(z, h, Wt, out=pre), z, activation, bias, scratch)
            if mask is not None:
                z.copy_(torch.where(mask[t], z, h))
            h = z
        ctx.activation = activation
        # (S, weight, h0, bias, mask) first: code outside this Function (the Triton kernel's
        # fallback) may call this backward with a context holding just those; x and the
        # projection's weight follow only when there is a projection
        ctx.save_for_backward(S, weight, h0, bias, mask, *(() if w_in is None else (u, w_in)))
        return S

    @staticmethod
    def backward(ctx, grad_S):
        S, weight, h0, _, mask, *projection = ctx.saved_tensors
        x, w_in = projection or (None, None)
        if torch.is_grad_enabled():  # a graph of the backward is asked for (create_graph=True)
            G, grad_w, grad_h0, grad_b = backward_graph(grad_S, S, weight, h0, mask, ctx.activation)
        else:
            G, grad_w, grad_h0, grad_b = _fused_backward(ctx, grad_S.contiguous(), S, weight, h0, mask)
        need = ctx.needs_input_grad
        grads = [
            G if need[0] else None,
            grad_w if need[1] else None,
            grad_h0 if need[2] else None,
            grad_b if need[3] else None,
            None,
            None,
            None,
            None,
        ]
        if w_in is not None:
            grads[0], grads[6], grads[7] = _projection_grads(G, x, w_in, need[0], need[6], need[7])
        return tuple(grads)


def _fused_backward(ctx, grad_S: Tensor, S: Tensor, weight: Tensor, h0: Tensor, mask: Tensor | None):
    """The backward loop without a graph: ``(G, grad_w, grad_h0, grad_b)`` with G[t] = dL/dz_t."""
    activation = ctx.activation
    T, B, H = S.shape
    G = torch.empty_like(S)  # G[t] = dL/dz_t = dL/du_t
    carry = S.new_zeros(B, H)  # dL/dh_t arriving from step t+1
    scratch = S.new_empty(B, H)
    gh = S.new_empty(B, H) if mask is not None else None
    grad_b = S.new_zeros(H) if activation == "modrelu" else None
    for t in range(T - 1, -1, -1):
        g = G[t]
        if mask is None:
            torch.add(grad_S[t], carry, out=g)
            _times_derivative_(g, S[t], activation, scratch, grad_b)
            torch.mm(g, weight, out=carry)
        else:
            torch.add(grad_S[t], carry, out=gh)
            m = mask[t]
            torch.mul(gh, m, out=g)  # frozen rows: no step was taken, so no dL/dz
            _times_derivative_(g, S[t], activation, scratch, grad_b)
            # a frozen row passes its gradient straight through to h_{t-1}
            torch.where(m, g @ weight, gh, out=carry)
    grad_w = None
    if ctx.needs_input_grad[1]:
        grad_w = G[0].t() @ h0
        if T > 1:
            grad_w += G[1:].reshape(-1, H).t() @ S[:-1].reshape(-1, H)
    return G, grad_w, carry, grad_b


def backward_graph(
    grad_S: Tensor, S: Tensor, weight: Tensor, h0: Tensor, mask: Tensor | None, activation: str
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """The backward of the recurrence written in autograd operations, for a backward pass that
    must itself be differentiable (``create_graph=True``: gradient penalties, Hessian-vector
    products). ``S`` is the recurrence's own output as saved by its autograd Function, so the
    graph built here leads back through that Function: second (and higher) derivatives are
    exact. Returns ``(dL/du (T, B, H), dL/dW, dL/dh0, dL/dbias or None)``."""
    T, H = S.shape[0], S.shape[2]
    carry = torch.zeros_like(h0)
    G: list[Tensor] = []  # dL/dz_t, last step first
    grad_b = None
    for t in range(T - 1, -1, -1):
        gh = grad_S[t] + carry
        g = gh if mask is None else gh * mask[t]
        h = S[t]
        if activation == "tanh":
            g = g * (1 - h * h)
        elif activation == "relu":
            g = g * (h > 0).to(g.dtype)
        elif activation == "modrelu":  # dh/dz = sign(h)^2, dh/db = sign(h), as in the fused loop
            sign = torch.sign(h)
            g = g * sign
            grad_b = g.sum(0) if grad_b is None else grad_b + g.sum(0)
            g = g * sign
        back = g @ weight
        carry = back if mask is None else torch.where(mask[t], back, gh)
        G.append(g)
    G_all = torch.stack(G[::-1])
    h_prev = torch.cat([h0.unsqueeze(0), S[:-1]])
    grad_w = G_all.reshape(-1, H).t() @ h_prev.reshape(-1, H)
    return G_all, grad_w, carry, grad_b


def _projection_grads(G: Tensor, x: Tensor, w_in: Tensor, need_x: bool, need_w: bool, need_b: bool):
    """Gradients of x, ``w_in`` and ``b_in`` from G = dL/du for ``u = x @ w_in.T + b_in``; in
    autograd operations when a graph of the backward is asked for."""
    T, B, H = G.shape
    G2, x2 = G.reshape(T * B, H), x.reshape(T * B, -1)
    if torch.is_grad_enabled():
        return (
            (G2 @ w_in).view_as(x) if need_x else None,
            G2.t() @ x2 if need_w else None,
            G2.sum(0) if need_b else None,
        )
    return (
        blocked_mm(G2, w_in).view_as(x) if need_x else None,
        gram_t(G2, x2) if need_w else None,
        column_sum(G2) if need_b else None,
    )


class _SecondOrderThroughGraph(torch.autograd.Function):
    """The identity on S, the output of another recurrence kernel (the Triton one), adding
    exact higher derivatives: a first-order backward passes S's gradient on to that kernel's
    own backward; a backward asked for a graph (``create_graph=True``) returns the gradients of
    u, W, h0 and the bias from :func:`backward_graph` instead (and nothing to S)."""

    @staticmethod
    def forward(ctx, S, _u, weight, h0, _bias, mask, activation):  # u, bias: inputs only to receive gradients
        ctx.activation = activation
        out = S.view_as(S)
        ctx.save_for_backward(out, weight, h0, mask)
        return out

    @staticmethod
    def backward(ctx, grad_S):
        if not torch.is_grad_enabled():
            return grad_S, None, None, None, None, None, None
        S, weight, h0, mask = ctx.saved_tensors
        G, grad_w, grad_h0, grad_b = backward_graph(grad_S, S, weight, h0, mask, ctx.activation)
        return None, G, grad_w, grad_h0, grad_b, None, None


#: the dispatch rule's Triton decision (a module name of its own so that tests can stand in for it)
_triton_dispatch = dispatch.triton


def _triton_forward(u, weight, h0, activation, bias, lengths):
    """The Triton kernel's state sequence, or None after a failed launch in automatic mode
    (a GPU or Triton build the kernel does not compile for): one warning, and the process
    keeps the loop below from then on. Under ``RNNLAB_TRITON=force`` the error is raised."""
    from .. import triton_recurrence

    try:
        return triton_recurrence.triton_elementwise_rnn(
            u, weight, h0, activation, bias, lengths, fallback=_ElementwiseRNN
        )
    except Exception as e:
        if triton_mode() == "force":
            raise
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        triton_recurrence.disable(reason)
        warnings.warn(
            f"the Triton recurrence failed on {u.device} ({reason}); using the fused loop for the rest "
            "of this process (set RNNLAB_TRITON=0 to skip it)",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def elementwise_rnn(
    u: Tensor,
    weight: Tensor,
    h0: Tensor | None = None,
    activation: str = "tanh",
    bias: Tensor | None = None,
    lengths: Tensor | None = None,
    *,
    input_weight: Tensor | None = None,
    input_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run ``h_t = phi(W h_{t-1} + u_t)`` over time with a fused BPTT; see the module docstring.

    Args:
        u: (T, B, H) input terms of all steps (``x @ W_ih.T + biases``); with
            ``input_weight``, the inputs x (T, B, I) themselves.
        weight: (H, H) recurrent matrix W in column form (applied as ``h @ W.T``).
        h0: (B, H) initial state (zeros if None).
        activation: "tanh", "relu", "modrelu" or "identity".
        bias: (H,) modReLU bias (required for, and only for, "modrelu").
        lengths: optional (B,) sequence lengths in [0, T]; steps at or past a sequence's
            length leave its state unchanged and give zero outputs (0: the whole chunk is
            past the end, as happens inside :func:`checkpointed_sequence`).
        input_weight: (H, I) input projection fused into the kernel: the input terms are
            ``u_t = x_t @ input_weight.T + input_bias``, computed in the kernel's dtype (float32
            under autocast) straight into its state buffer, and their backward is the kernel's.
        input_bias: (H,) bias of the fused projection (None: no bias).

    Returns:
        ``(outputs (T, B, H), h_n (B, H))``; ``h_n`` is each sequence's state at its own last
        step. Gradients flow to ``u`` (or x, ``input_weight``, ``input_bias``), ``weight``,
        ``h0`` and ``bias``, and are themselves differentiable (second order).
    """
    H = _check_arguments(u, weight, activation, bias, input_weight, input_bias)
    if batched(u, weight, h0, bias, lengths, input_weight, input_bias):  # inside vmap: an ensemble (rnnlab.ensemble)
        if input_weight is not None:
            u = torch.nn.functional.linear(u, input_weight, input_bias)
        return ensemble_elementwise_rnn(u, weight, h0, activation, bias, lengths)
    T, B = u.shape[:2]
    dtype = recurrence_dtype(u)  # float32 under autocast (see rnnlab.kernels.amp)
    if h0 is None:
        h0 = u.new_zeros(B, H, dtype=dtype)
    elif h0.shape != (B, H):
        raise ValueError(f"h0 must be ({B}, {H}), got {tuple(h0.shape)}")
    u, weight, h0 = u.to(dtype), weight.to(dtype), h0.to(dtype)
    bias, w_in, b_in = (None if t is None else t.to(dtype) for t in (bias, input_weight, input_bias))
    mask = None
    if lengths is not None:
        lengths = torch.as_tensor(lengths)  # checked where it lives (the CPU for the layers)
        if lengths.shape != (B,) or int(lengths.min()) < 0 or int(lengths.max()) > T:
            raise ValueError(
                f"lengths must hold one length in [0, {T}] per batch element ({B}), got {lengths.tolist()}"
            )
        lengths = lengths.to(u.device)
        mask = (torch.arange(T, device=u.device).unsqueeze(1) < lengths.unsqueeze(0)).unsqueeze(2)  # (T, B, 1)
    with float32_region(u):
        S = None
        if _triton_dispatch(u, H):
            if w_in is not None:  # the Triton kernel takes the input terms
                u, w_in, b_in = tall_linear(u, w_in, b_in), None, None
            S = _triton_forward(u, weight, h0, activation, bias, lengths)
            if S is not None:
                S = _SecondOrderThroughGraph.apply(S, u, weight, h0, bias, mask, activation)
        if S is None:
            S = _ElementwiseRNN.apply(
                u.contiguous(), weight.contiguous(), h0.contiguous(), bias, mask, activation, w_in, b_in
            )
    h_n = S[-1]
    outputs = S if mask is None else S * mask.to(dtype)
    return outputs, h_n


def _check_arguments(
    u: Tensor,
    weight: Tensor,
    activation: str,
    bias: Tensor | None,
    input_weight: Tensor | None,
    input_bias: Tensor | None,
) -> int:
    """Check :func:`elementwise_rnn`'s shapes and options; return the hidden size H."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if u.dim() != 3:
        raise ValueError(f"u must be (T, B, H) (or x (T, B, I) with input_weight), got shape {tuple(u.shape)}")
    if u.shape[0] == 0:
        raise ValueError("cannot run a recurrence over an empty sequence (T = 0)")
    if input_weight is None:
        if input_bias is not None:
            raise ValueError("input_bias is the bias of the fused input projection; pass input_weight with it")
        H = u.shape[2]
    else:
        H = input_weight.shape[0]
        if input_weight.dim() != 2 or input_weight.shape[1] != u.shape[2]:
            raise ValueError(
                f"input_weight must be (H, I) with I = {u.shape[2]} (x's last dimension), "
                f"got {tuple(input_weight.shape)}"
            )
        if input_bias is not None and input_bias.shape != (H,):
            raise ValueError(f"input_bias must have shape ({H},), got {tuple(input_bias.shape)}")
    if weight.shape != (H, H):
        raise ValueError(f"weight must be ({H}, {H}) to match u's hidden size, got {tuple(weight.shape)}")
    if (activation == "modrelu") != (bias is not None):
        raise ValueError(
            f"a bias (H,) is required for activation='modrelu' and not accepted otherwise; got "
            f"activation={activation!r} with bias={'None' if bias is None else tuple(bias.shape)}"
        )
    if bias is not None and bias.shape != (H,):
        raise ValueError(f"modReLU bias must have shape ({H},), got {tuple(bias.shape)}")
    return H


def reference_elementwise_rnn(
    u: Tensor,
    weight: Tensor,
    h0: Tensor | None = None,
    activation: str = "tanh",
    bias: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The same recurrence as a plain autograd loop (the twin :func:`elementwise_rnn` is
    tested against; uses ``torch.tanh`` and :func:`modrelu`)."""
    h = u.new_zeros(u.shape[1:]) if h0 is None else h0
    outs = []
    for t, u_t in enumerate(u.unbind(0)):
        z = u_t + h @ weight.t()
        if activation == "tanh":
            new = torch.tanh(z)
        elif activation == "relu":
            new = torch.relu(z)
        elif activation == "identity":
            new = z
        else:
            new = modrelu(z, bias)
        if lengths is not None:
            new, out = hold_past_length(new, h, lengths, t)
            outs.append(out)
        else:
            outs.append(new)
        h = new
    return torch.stack(outs), h


# ---------------------------------------------------------------------------- ensemble loop


def _activate_(z: Tensor, activation: str, bias: Tensor | None, scratch: Tensor) -> None:
    """phi in place on ``z`` (E, B, H); modReLU ``sign(z) relu(|z| + b)`` with ``bias`` (E, 1, H)."""
    if activation == "tanh":
        z.tanh_()
    elif activation == "relu":
        z.relu_()
    elif activation == "modrelu":
        torch.sign(z, out=scratch)
        z.abs_().add_(bias).relu_().mul_(scratch)


class _ElementwiseSteps(torch.autograd.Function):
    """``h_t = phi(W h_{t-1} + u_t)`` over time for an ensemble, fused: the forward builds no
    graph and keeps the states (phi' is read from them), with a frozen state past each
    sequence's length; the backward does one batched product per step. The E-leading twin of
    :class:`_ElementwiseRNN`.

    ``u`` (E, T, B, H), ``W`` (E, H, H), ``h0`` (E, B, H), ``bias`` (E, H) (modReLU) or None,
    ``mask`` (T, E, B, 1) float or None. Returns the states (E, T, B, H)."""

    @staticmethod
    def forward(ctx, activation, u, W, h0, bias, mask):
        E, T, B, H = u.shape
        us = u.transpose(0, 1).contiguous()
        S = u.new_empty(T, E, B, H)
        scratch, kept = u.new_empty(E, B, H), u.new_empty(E, B, H) if mask is not None else None
        Wt, b = W.transpose(1, 2), None if bias is None else bias.unsqueeze(1)
        keep = (
            None if mask is None else mask.bool().expand(T, E, B, H).contiguous()
        )  # (see rnnlab.kernels.families.dmu._DMUSteps)
        h = h0
        for t in range(T):
            z = S[t]
            torch.baddbmm(us[t], h, Wt, out=z)
            _activate_(z, activation, b, scratch)
            if mask is not None:  # an ended sequence keeps its state
                torch.where(keep[t], z, h, out=kept)
                z.copy_(kept)
            h = z
        ctx.activation = activation
        ctx.save_for_backward(S, W, h0, bias, mask)
        return S.transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, dS):
        S, W, h0, _bias, mask = ctx.saved_tensors
        T, E, B, H = S.shape
        dS = dS.transpose(0, 1).contiguous()
        G = torch.empty_like(S)  # dL/dz_t = dL/du_t
        carry = S.new_zeros(E, B, H)  # dL/dh_t arriving from step t+1
        scratch, gh = S.new_empty(E, B, H), S.new_empty(E, B, H)
        grad_b = S.new_zeros(E, H) if ctx.activation == "modrelu" else None
        for t in range(T - 1, -1, -1):
            g = G[t]
            if mask is None:
                torch.add(dS[t], carry, out=g)
                _times_derivative_(g, S[t], ctx.activation, scratch, grad_b)
                torch.bmm(g, W, out=carry)
            else:
                m = mask[t]
                torch.add(dS[t], carry, out=gh)
                torch.mul(gh, m, out=g)  # an ended sequence took no step: no dL/dz
                _times_derivative_(g, S[t], ctx.activation, scratch, grad_b)
                # ... and passes its gradient straight to h_{t-1}
                torch.bmm(g, W, out=carry).add_(gh * (1 - m))
        Hprev = torch.cat([h0.unsqueeze(0), S[:-1]])
        return None, G.transpose(0, 1), _bgram(G, Hprev), carry, grad_b, None


def _ensemble_steps(u, W, h0, bias, lengths, activation: str):
    mask = None if lengths is None else torch.stack(_mask(lengths, u.shape[1], u.device)).to(u.dtype)
    S = _ElementwiseSteps.apply(activation, u.contiguous(), W, h0.contiguous(), bias, mask)
    out = S if mask is None else S * mask.transpose(0, 1)
    return out, S[:, -1]


def ensemble_elementwise_rnn(
    u: Tensor,
    weight: Tensor,
    h0: Tensor | None = None,
    activation: str = "tanh",
    bias: Tensor | None = None,
    lengths: Tensor | None = None,
):
    """:func:`rnnlab.kernels.elementwise_rnn` (``h_t = phi(W h_{t-1} + u_t)``) for a caller
    inside ``vmap``: the same arguments and result, per member."""
    dtype = recurrence_dtype(u)
    if h0 is None:
        h0 = u.new_zeros(u.shape[1], u.shape[2], dtype=dtype)
    u, weight, h0 = u.to(dtype), weight.to(dtype), h0.to(dtype)
    bias = None if bias is None else bias.to(dtype)
    with float32_region(u):
        return ensemble_call(lambda *a: _ensemble_steps(*a, activation), u, weight, h0, bias, lengths)


# ---------------------------------------------------------------------------- compiled loops (small.c)


def _reference(act, u, W, h0, lens):
    """The recurrence in PyTorch operations, members first: the compiled loops' second order."""
    f = (torch.tanh, torch.relu, lambda z: z)[act]
    h, S = h0, []
    for t in range(u.shape[1]):
        h = _keep(f(torch.baddbmm(u[:, t], h, W.transpose(1, 2))), h, _step_mask(lens, t, h))
        S.append(h)
    return torch.stack(S, 1)


_INPUTS = ("act", "u", "W", "h0", "lens")

_RNN = _kernel("_RNN", _Family("rnn", _INPUTS, ("S",), _reference, 1, ("h0",), _weight_from_dU))
_RNNLanes = _kernel(
    "_RNNLanes",
    _Family("rnn_lanes", _INPUTS, ("S", "hn"), _reference, 1),
    "The RNN with its sequences side by side in vector lanes (``rnn_lanes_*`` of small.c); the weight's "
    "gradient is summed in the C code.",
)


def _compiled(u, W, h0, lengths, act):
    lens = _lens(lengths)
    S = _RNN.apply(act, *_c(u, W, h0), lens)
    return _masked(S, lens), S[:, -1]


def _compiled_lanes(u, W, h0, lengths, act):
    lens = _lens(lengths)
    return _RNNLanes.apply(act, *_c(u, W, h0), lens)  # (the outputs zero from each length on, h_n)


def compiled_rnn(
    u: Tensor,
    weight: Tensor,
    h0: Tensor,
    nonlinearity: str = "tanh",
    lengths: Tensor | None = None,
    lanes: bool = False,
):
    """``h_t = phi(W h_{t-1} + u_t)``, phi tanh, relu or identity, in the compiled loops of
    :mod:`rnnlab.kernels.small`: ``(outputs (T, B, H), h_n)``.
    ``lanes``: run the lane kernel (the sequences of all members side by side in vector
    lanes; :func:`rnnlab.kernels.dispatch.choose` says when) instead of the scalar loop."""
    act = _ACT[nonlinearity]
    run = _compiled_lanes if lanes else _compiled
    return ensemble_call(lambda *a: run(*a, act), u, weight, h0, lengths)
