"""``x @ W.T + b`` over very many rows (all time steps of a batch at once), faster on CPU.

Every cell's input projection and every readout is one product over ``T * B`` rows, tens to
hundreds of thousands of them. Two measured facts about this torch build (MKL, one thread;
``benchmarks/linear.py`` prints them side by side):

* a tall product with a wide output is 1.3-4x faster computed in blocks of about 1024 rows
  written into one preallocated output (130,560 rows: 10 -> 138 columns 49 ms as one
  ``F.linear``, 12 ms in blocks; 138 -> 138: 119 ms -> 86 ms); with a narrow output (a 9-way
  readout) the single product is faster, so blocks are used only for wide outputs;
* the weight gradient ``dY^T X`` (a sum over all rows) is 6-7x faster when computed in the
  orientation whose result has fewer rows: for a (138, 10) gradient, ``(X^T dY)^T`` takes 14 ms
  where autograd's ``dY^T X`` takes 93 ms.

:func:`tall_linear` applies both with a hand-written backward (gradients for x, W and b as torch's
``F.linear`` gives them; tested in float64 and with gradcheck) and falls back to ``F.linear``
for small inputs, other dtypes, non-CPU devices and under autocast. A backward asked for a
graph of itself (``create_graph=True``) computes the same three products as autograd
operations, so second derivatives are exact (``gradgradcheck`` in the tests).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .amp import autocasting
from .ensemble import batched, batched_linear

#: set to False to make :func:`tall_linear` plain ``F.linear`` everywhere (e.g. to compare)
ENABLED = True
#: rows per block of a blocked product (measured best between 512 and 2048 here).
BLOCK_ROWS = 1024
#: use the custom path from this many rows on (below, one ``F.linear`` costs little anyway).
MIN_ROWS = 8192
#: block an (n, k) x (k, m) product only when its output is at least this wide.
MIN_BLOCKED_COLS = 32


def blocked_mm(a: Tensor, b: Tensor, bias: Tensor | None = None, block: int | None = None) -> Tensor:
    """``a @ b (+ bias)`` for a tall ``a`` (n, k) and ``b`` (k, m), in blocks of ``block``
    (default :data:`BLOCK_ROWS`) rows when ``m`` is wide enough to gain from it (see the module
    docstring)."""
    block = block or BLOCK_ROWS
    n, m = a.shape[0], b.shape[1]
    if n < 2 * block or m < MIN_BLOCKED_COLS:
        return torch.mm(a, b) if bias is None else torch.addmm(bias, a, b)
    b = b.contiguous()
    out = a.new_empty(n, m)
    for i in range(0, n, block):
        if bias is None:
            torch.mm(a[i : i + block], b, out=out[i : i + block])
        else:
            torch.addmm(bias, a[i : i + block], b, out=out[i : i + block])
    return out


def gram_t(dy: Tensor, x: Tensor) -> Tensor:
    """``dy^T x`` (a sum over the rows of both), computed in the faster orientation."""
    if dy.shape[1] > x.shape[1]:
        return (x.t() @ dy).t()
    return dy.t() @ x


def column_sum(d: Tensor) -> Tensor:
    """``d.sum(0)`` for a tall (n, m) ``d``; a two-level sum (about 1.5x faster for wide m)."""
    n = d.shape[0]
    if n >= 4096 and n % 64 == 0:
        return d.view(n // 64, 64, -1).sum(0).sum(0)
    return d.sum(0)


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x2, weight)
        ctx.has_bias = bias is not None
        return blocked_mm(x2, weight.t(), bias)

    @staticmethod
    def backward(ctx, dy: Tensor):
        x2, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        if torch.is_grad_enabled():  # a graph of the backward is asked for: the same products in autograd
            return (
                dy @ weight if need_x else None,
                dy.t() @ x2 if need_w else None,
                dy.sum(0) if (need_b and ctx.has_bias) else None,
            )
        dy = dy.contiguous()
        dx = blocked_mm(dy, weight) if need_x else None
        dw = gram_t(dy, x2) if need_w else None
        db = column_sum(dy) if (need_b and ctx.has_bias) else None
        return dx, dw, db


def tall_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``torch.nn.functional.linear(x, weight, bias)`` (same values and gradients) with the
    blocked forward and fast weight gradient for inputs of many rows."""
    if ENABLED and batched(x, weight, bias):  # inside vmap (an ensemble): no autograd Function
        return batched_linear(x, weight, bias)
    rows = x.numel() // x.shape[-1] if x.numel() else 0
    if (
        not ENABLED
        or rows < MIN_ROWS
        or x.dtype not in (torch.float32, torch.float64)
        or x.device.type != "cpu"
        or autocasting(x.device.type)  # under autocast, F.linear runs in autocast's dtype
    ):
        return torch.nn.functional.linear(x, weight, bias)
    if x.dim() == 3 and not x.is_contiguous() and x.transpose(0, 1).is_contiguous():
        # a batch-first view of time-major memory: compute in that memory, hand back a view
        return tall_linear(x.transpose(0, 1), weight, bias).transpose(0, 1)
    lead = x.shape[:-1]
    x2 = x.reshape(rows, x.shape[-1])
    return _Linear.apply(x2, weight, bias).view(*lead, weight.shape[0])
