"""What the recurrences of an ensemble (E models of one architecture run as one,
:mod:`rnnlab.ensemble`) share: the way out of ``vmap``, the batched input products and the
pieces each family's loop is built from.

An ensemble runs its model under ``torch.func.vmap`` over the members' stacked parameters.
Inside ``vmap`` every operation pays a batching rule, a tensor's values cannot steer Python
control flow, and an autograd Function without a vmap rule cannot run at all: the fused
single-model kernels (:mod:`rnnlab.kernels.families`) are such Functions. So the recurrences
step out of ``vmap`` here (:func:`ensemble_call`): the loop
over time runs on the physical tensors, with the ensemble dimension first and every per-step
product a batched product (``torch.baddbmm``), and plain autograd records it, so the gradients
flow back into each member's own parameters.

Each family's loop (``ensemble_<family>`` in its module of :mod:`rnnlab.kernels.families`) is
the step of its cell written with a leading ensemble dimension (E) and a time dimension after
it, built from :class:`_Gates`, :func:`_mask`, :func:`_advance`, :func:`_in_recurrence_dtype`
and :func:`_bgram` here; with ``lengths`` a sequence's state is frozen from its length on and
its outputs there are zero, as :func:`rnnlab.unroll` does. They are tested against the cells'
step loop under ``vmap`` in float64 (tests/test_ensemble.py).

Shapes: ``u`` (E, T, B, G) input terms of all steps, ``h0`` (E, B, H), weights (E, G, H),
``lengths`` (E, B) or None.

:func:`batched` tells a kernel whether it is being called inside ``vmap``, so it can route
there or skip a check that reads values (the caller checked them per member).
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor
from torch.utils._pytree import tree_map

from .amp import autocasting, float32_region, recurrence_dtype


def batched(*tensors) -> bool:
    """Whether any of ``tensors`` (None allowed) is a vmap-batched tensor."""
    return any(isinstance(t, Tensor) and torch._C._functorch.is_batchedtensor(t) for t in tensors)


class _StepOut(torch.autograd.Function):
    """The way out of ``vmap`` for a recurrence: its vmap rule calls ``fn`` on the physical
    tensors, the ensemble dimension first (arguments not batched are expanded to it). Plain
    autograd records what ``fn`` does; this Function's own forward and backward only run
    outside ``vmap``, where :func:`ensemble_call` does not use it."""

    @staticmethod
    def forward(fn, *args):
        raise RuntimeError("ensemble recurrences run inside torch.func.vmap only (rnnlab.ensemble)")

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("ensemble recurrences are differentiated by the autograd of their vmap rule")

    @staticmethod
    def vmap(info, in_dims, fn, *args):
        E = info.batch_size
        full = []
        for a, d in zip(args, in_dims[1:]):
            if isinstance(a, Tensor):
                a = a.movedim(d, 0) if d is not None else a.expand(E, *a.shape)
            full.append(a)
        out = fn(*full)
        return out, tree_map(lambda _: 0, out)


#: set by :func:`members_first`: the callers of :func:`ensemble_call` hand it tensors that
#: already have the ensemble dimension first (the direct forward of
#: :class:`rnnlab.stacked_model.StackedModel`, outside ``vmap``)
_MEMBERS_FIRST = False


@contextlib.contextmanager
def members_first():
    """Within it, :func:`ensemble_call` runs ``fn`` on its arguments as they are: the caller
    (a direct forward outside ``vmap``, :meth:`rnnlab.stacked_model.StackedModel.direct`) gives
    every tensor its ensemble dimension first, as the vmap rule would have."""
    global _MEMBERS_FIRST
    was, _MEMBERS_FIRST = _MEMBERS_FIRST, True
    try:
        yield
    finally:
        _MEMBERS_FIRST = was


def ensemble_call(fn, *args):
    """``fn(*args)`` with every tensor argument given a leading ensemble dimension: inside
    ``vmap`` the members' tensors, outside it one member (E = 1), within :func:`members_first`
    the arguments as given (their first dimension is the ensemble's). ``fn`` returns a tuple of
    tensors with the ensemble dimension first; the result drops it again (vmap's view)."""
    if batched(*args):
        return _StepOut.apply(fn, *args)
    if _MEMBERS_FIRST:
        return fn(*args)
    out = fn(*[a.unsqueeze(0) if isinstance(a, Tensor) else a for a in args])
    return tree_map(lambda t: t.squeeze(0), out)


def _rows_product(x: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Tensor]:
    """``x @ W^T + b`` per member as one batched product over all of a member's rows: ``x``
    (E, ..., I) in any memory order, ``weight`` (E, G, I), ``bias`` (E, G) or None."""
    E, I, G = x.shape[0], x.shape[-1], weight.shape[1]
    # one input for every member (an evaluation: the task's fixed data), which the vmap rule
    # expanded: its one copy is put in the memory order the products read, instead of the E
    # copies x.contiguous() made (51 members of the noisy-sequence GRU: 4 s of a 6 s evaluation)
    one = x[0] if E > 1 and x.stride(0) == 0 else None
    member = x if one is None else one.unsqueeze(0)  # the memory order of one member's input
    if x.dim() == 4 and not member.is_contiguous() and member.transpose(1, 2).is_contiguous():
        # a time-major view of batch-first memory (what Recurrent hands a cell): one of input
        # and output is reordered to time-major, the narrower one (measured: for 2 -> 9 the
        # output's reordering cost more than the vmap rule saved, for 100 -> 6 it pays)
        if I > G:  # compute in that memory, hand back a view
            return (_rows_product(x.transpose(1, 2), weight, bias)[0].transpose(1, 2),)
        x = x.contiguous() if one is None else one.contiguous().expand(E, *one.shape)
    elif one is not None and not one.is_contiguous():
        x = one.contiguous().expand(E, *one.shape)
    rows = x.reshape(E, -1, I)
    folded = _folded_rows_product(rows, weight, bias)
    if folded is not None:
        return (folded.view(*x.shape[:-1], G),)
    # G <= I: (W rows^T)^T, so that autograd's weight gradient is dY^T rows, the orientation
    # whose result has fewer rows (rnnlab.kernels.linear.gram_t): 1.5-2x faster forward and
    # backward for (100 -> 6) and (9 -> 2), measured here
    flip = G <= I
    a, b = (weight, rows.transpose(1, 2)) if flip else (rows, weight.transpose(1, 2))
    y = torch.bmm(a, b) if bias is None else torch.baddbmm(bias.unsqueeze(2 if flip else 1), a, b)
    y = y.transpose(1, 2) if flip else y
    return (y.view(*x.shape[:-1], G),)


#: without autograd (an evaluation), a product of few inputs (I) into few outputs (G) runs
#: over FOLD_ROWS rows at once (:func:`_folded_rows_product`), where I and G are at most these
FOLD_ROWS, FOLD_MAX_INPUTS, FOLD_MAX_OUTPUTS = 4, 8, 10


def _folded_rows_product(rows: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor | None:
    """``rows @ W^T + b`` per member (``rows`` (E, N, I), ``weight`` (E, G, I)) as a product of
    :data:`FOLD_ROWS` rows at once, ``[rows of k, 1] @ [blockdiag(W^T, ..., W^T); b, ..., b]``
    ((N / k, k I + 1) @ (k I + 1, k G)): the output's memory as it is (a view), the block's
    zeros adding exact zeros, the bias a row of the weight (no pass over the output).

    MKL's batched product of few inputs into few outputs is slow for its size, and erratic in
    G. Measured here (one thread, 51 members, 28,160 rows; ``baddbmm`` against folded by 4, ms):
    I = 2 into G = 8, one input shared (an evaluation's first layer): 18.4 against 4.7; per
    member: 18.6 against 6.8; 3 into 9: 24.1 against 9.6; 5 into 10: 30.9 against 13.6; 1 into
    4: 11.2 against 1.9; but 2 into 12: 8.0 against 6.9, 2 into 16: 7.8 against 9.0, 8 into 16:
    12.1 against 27.0 (so G up to 10); folded by 8 or 16 was slower than by 4 for 2 into 8.

    Only without autograd (the evaluation; training keeps its products and their gradients),
    for a product in that range, with each member's rows one block of memory and finite; None
    otherwise.
    The sums run in another order than ``baddbmm``'s: a few float32 ulps apart, as any batched
    product is from the single run's ``F.linear``."""
    E, N, I = rows.shape
    G, k = weight.shape[1], FOLD_ROWS
    if torch.is_grad_enabled() or I > FOLD_MAX_INPUTS or G > FOLD_MAX_OUTPUTS or G <= I or N % k:
        return None
    if rows.stride(2) != 1 or rows.stride(1) != I:
        return None
    if not torch.isfinite(rows[:1] if rows.stride(0) == 0 else rows).all():
        return None  # (0 x inf would put a NaN into the rows folded with an infinite one)
    block = weight.new_zeros(E, k, I, k, G)
    for j in range(k):
        block[:, j, :, j, :] = weight.transpose(1, 2)
    block = block.view(E, k * I, k * G)
    folded = rows.view(E, N // k, k * I)
    if bias is not None:
        block = torch.cat([block, bias.repeat(1, k).unsqueeze(1)], 1)
        if rows.stride(0) == 0:  # one input for every member: its one copy gets the ones
            one = folded[0]
            folded = torch.cat([one, one.new_ones(N // k, 1)], 1).expand(E, N // k, k * I + 1)
        else:
            folded = torch.cat([folded, folded.new_ones(E, N // k, 1)], 2)
    return torch.bmm(folded, block).view(E, N, G)


#: whether an ensemble's one-hot inputs reach the first layer as their token ids
#: (:func:`one_hot_stand_in`); False: as one-hot vectors, multiplied (the path before)
TOKEN_INPUTS = True


def one_hot_stand_in(tokens: Tensor, num_tokens: int, dtype: torch.dtype) -> Tensor:
    """A stand-in for the one-hot vectors of ``tokens`` (B, T), shape (B, T, ``num_tokens``),
    that :func:`batched_linear` reads as the tokens: it gathers the weight's columns
    (``W[:, k] + b``, the product's value exactly) in place of a product over one-hot rows, and
    its backward adds the rows' gradients into the columns of the tokens they read. For 51
    members of the noisy-sequence GRU (100 symbols, T = 110, batch 32) the one-hot vectors and
    their product were about two thirds of a training step.

    Its values are NaN (it holds no one-hot vectors): a caller hands it only to a layer that
    reads its input through :func:`batched_linear` alone
    (:meth:`rnnlab.cells.Recurrent.reads_tokens`), so anything else reading it shows as NaN,
    not as a plausible wrong number. One element per sequence, broadcast over time and tokens,
    so that its strides tell a time-major view from a batch-first one."""
    base = torch.full((tokens.shape[0],), float("nan"), dtype=dtype, device=tokens.device)
    base.rnnlab_tokens = tokens  # read back by batched_linear, through any view of ``base``
    return base[:, None, None].expand(tokens.shape[0], tokens.shape[1], num_tokens)


def _stand_in_tokens(x: Tensor) -> Tensor | None:
    base = x._base if x._base is not None else x
    return getattr(base, "rnnlab_tokens", None)


def _token_rows(tokens: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Tensor]:
    """:func:`_rows_product` of one-hot rows given as ``tokens`` (E, B, T): the stand-in ``x``
    (E, T, B, I) time-major or (E, B, T, I) (:func:`one_hot_stand_in`; its strides say which)
    and the result in its order, ``weight`` (E, G, I), ``bias`` (E, G) or None."""
    E, G, I = weight.shape
    table = weight.transpose(1, 2)  # (E, I, G): row k is W[:, k]
    if bias is not None:  # b + W[:, k] rounds once, as the product's b + (0 + ... + W[:, k])
        table = table + bias.unsqueeze(1)
    rows = table.reshape(E * I, G)
    index = tokens + I * torch.arange(E, device=tokens.device).view(E, 1, 1)
    if x.shape[1:3] != tokens.shape[1:3] or x.stride(2) != 0:  # time-major: gathered in that order
        index = index.transpose(1, 2)  # (the recurrences read it so: no copy of the result)
    return (rows.index_select(0, index.reshape(-1)).view(*x.shape[:-1], G),)


def batched_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``torch.nn.functional.linear(x, weight, bias)``; inside ``vmap`` (an ensemble), one
    batched product over all rows of all members.

    vmap's own rule for ``linear`` over a sequence ``x`` (T, B, I) broadcasts the weight over
    the time steps: E * T small products, the weight copied T times, and a time-major view of
    batch-first inputs (the encoders' output) copied whole. For 51 members of the
    noisy-sequence GRU (one-hot inputs of 100 symbols, T = 110) that was about half of a
    training step. Outside vmap, and under autocast (which casts ``F.linear``'s operands), it
    is ``F.linear`` itself."""
    tokens = _stand_in_tokens(x)
    if tokens is not None:
        if autocasting(x.device.type):
            raise RuntimeError("a one-hot stand-in reached batched_linear under autocast (see one_hot_stand_in)")
        return ensemble_call(_token_rows, tokens, x, weight, bias)[0]
    if not batched(x, weight, bias) or autocasting(x.device.type):
        return torch.nn.functional.linear(x, weight, bias)
    return ensemble_call(_rows_product, x, weight, bias)[0]


def _mask(lengths: Tensor | None, T: int, device) -> Tensor | None:
    """Per step t, (E, B, 1) booleans: the step counts for a sequence (t < its length)."""
    if lengths is None:
        return None
    lengths = lengths.to(device)
    return (torch.arange(T, device=device)[None, :, None] < lengths[:, None, :]).unsqueeze(-1).unbind(1)


def _advance(new, old, mask_t):
    """The state after a step (frozen where the sequence has ended) and the step's output."""
    h = new if not isinstance(new, tuple) else new[0]
    if mask_t is None:
        return new, h
    state = tree_map(lambda n, o: torch.where(mask_t, n, o), new, old)
    return state, h * mask_t.to(h.dtype)


# ---------------------------------------------------------------------------- the gated loops (kernels/families)


#: below this hidden size, gated products are computed gate-major (see :class:`_Gates`)
GATE_MAJOR_BELOW = 16


class _Gates:
    """The per-step product of a gated cell, ``u_t + b + h W^T`` with G gates side by side
    ((B, G H): the LSTM's i, f, g, o), returned as G (E, B, H) tensors.

    Sliced as views, each gate is a strided block, and element-wise kernels on such views run
    several times slower for small H (measured: tanh on a (51, 20, 5) half of a (51, 20, 10)
    product 4x slower than on a contiguous one). Below :data:`GATE_MAJOR_BELOW` the product is
    computed gate-major instead: the weights viewed as (E, G, K, H), the input terms rearranged
    once to (E, G, B, H) per step, every gate contiguous. For wider gates that layout costs a
    copy of ``h`` per gate per step and the views are cheap, so the plain batched product runs."""

    def __init__(self, u: Tensor | None, W: Tensor, G: int, bias: Tensor | None = None):
        E, GH, K = W.shape
        self.G, self.H = G, GH // G
        self.major = self.H < GATE_MAJOR_BELOW
        if self.major:
            self.W = W.view(E, G, self.H, K).transpose(-1, -2)
            self.b = None if bias is None else bias.view(E, G, 1, self.H)
            self.u = (
                None
                if u is None
                else u.view(E, u.shape[1], u.shape[2], G, self.H).permute(1, 0, 3, 2, 4).contiguous().unbind(0)
            )
        else:
            self.W = W.transpose(1, 2)
            self.b = None if bias is None else bias.unsqueeze(1)
            self.u = None if u is None else u.unbind(1)

    def __call__(self, t: int | None, h: Tensor) -> tuple[Tensor, ...]:
        """The G gates of step ``t`` (``t=None``: without an input term) from ``h`` (E, B, K)."""
        if self.major:
            p = torch.matmul(h.unsqueeze(1), self.W)
            add = [x for x in (None if t is None else self.u[t], self.b) if x is not None]
            for x in add:
                p = p + x
            return p.unbind(1)
        first = self.b if t is None else self.u[t] if self.b is None else self.u[t] + self.b
        p = torch.bmm(h, self.W) if first is None else torch.baddbmm(first, h, self.W)
        return p.chunk(self.G, -1)


def _in_recurrence_dtype(fn, u: Tensor, *args):
    """``ensemble_call(fn, u, *args)`` with every floating tensor in the recurrence's dtype
    (float32 for a low-precision ``u`` under autocast) and autocast off, as the single-run
    kernels compute (rnnlab.kernels.amp)."""
    dt = recurrence_dtype(u)
    cast = [a.to(dt) if isinstance(a, Tensor) and a.is_floating_point() else a for a in (u, *args)]
    with float32_region(u):
        return ensemble_call(fn, *cast)


def _bsum(x: Tensor) -> Tensor:
    """(T, E, B, K) -> (E, K): the sum over steps and batch."""
    return x.sum((0, 2))


def _bgram(d: Tensor, a: Tensor) -> Tensor:
    """(T, E, B, N), (T, E, B, K) -> (E, N, K): ``sum_{t, b} d^T a`` per member."""
    E = d.shape[1]
    d2 = d.transpose(0, 1).reshape(E, -1, d.shape[-1])
    a2 = a.transpose(0, 1).reshape(E, -1, a.shape[-1])
    return torch.bmm(d2.transpose(1, 2), a2)
