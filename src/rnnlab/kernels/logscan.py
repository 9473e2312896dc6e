"""The log-space parallel scan of a positive diagonal linear recurrence (minGRU, minLSTM).

``h_t = a_t * h_{t-1} + b_t`` element-wise, with ``a_t = exp(log_a_t) > 0`` and
``b_t = exp(log_b_t) > 0`` given in log space (Feng, Tung, Ahmed, Bengio and Hajimirsadeghi,
"Were RNNs All We Needed?", 2024, their parallel mode; the scan is Heinsen's
log-cumulative-sum-of-exponentials). With ``A_t = log_a_1 + ... + log_a_t``::

    h_t = exp(A_t) h_0 + exp(A_t + logcumsumexp_s<=t(log_b_s - A_s))

The start ``h_0`` enters linearly (its own term), so it may have any sign; only the driving
terms ``b_t`` must be positive, which the cells guarantee (the paper's ``g`` activation for the
candidate, sigmoids for the gates). Two cumulative operations over time replace T dependent
steps; the gradients are autograd's through ``torch.cumsum`` and ``torch.logcumsumexp``. In
float32 the terms ``log_b_s - A_s`` grow with |A_t| (about T times the mean |log a|), so the
rounding of h is about that times float32's epsilon (relative); in float64 the scan equals the
step loop to 1e-10 (tests/kernels/test_logscan.py).

First-order only: torch's second derivative of ``logcumsumexp`` is NaN where the incoming
gradient is zero (outputs past a length, or outputs a loss does not read), so a backward asked
for a graph of itself (``create_graph=True``) raises a ``RuntimeError`` naming the step loop
(``backend="reference"``) as the way to second-order gradients.

The reference twin is :func:`log_linear_loop` (the same recurrence as T products) and, for the
cells, their step ``forward`` in plain (not log-space) arithmetic.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .fused import _refuse_graph

__all__ = ["diagonal_loop", "g", "log_g", "log_linear_loop", "log_linear_scan", "softplus"]


def softplus(x: Tensor) -> Tensor:
    """``log(1 + exp(x))`` to the last bit everywhere (``torch.nn.functional.softplus`` returns
    x itself above its threshold 20, 2e-9 off there: more than the scan's float64 tolerance)."""
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def g(x: Tensor) -> Tensor:
    """The paper's positive activation for the candidate state: ``x + 1/2`` for ``x >= 0``,
    ``sigmoid(x)`` below (continuous, with slope 1/4 and 1 at 0 from each side; always > 0)."""
    return torch.where(x >= 0, x.clamp(min=0) + 0.5, torch.sigmoid(x))


def log_g(x: Tensor) -> Tensor:
    """``log g(x)`` computed without forming ``g`` (``-softplus(-x)`` below 0)."""
    return torch.where(x >= 0, torch.log(x.clamp(min=0) + 0.5), -softplus(-x))


def _keep(T: int, lengths: Tensor, device) -> Tensor:
    """(T, B, 1): whether step t is before sequence b's length."""
    return (torch.arange(T, device=device).unsqueeze(1) < lengths.to(device).unsqueeze(0)).unsqueeze(2)


class _FirstOrderOnly(torch.autograd.Function):
    """The identity, whose backward refuses ``create_graph=True`` (module docstring)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        _refuse_graph(
            "log-space scan (torch.logcumsumexp's second derivative is NaN where a gradient is zero)",
            "backend='reference' (the step loop)",
        )
        return grad


def log_linear_scan(log_a: Tensor, log_b: Tensor, h0: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``h_t = exp(log_a_t) h_{t-1} + exp(log_b_t)`` over time-major (T, B, H) inputs from
    ``h0`` (B, H), in log space (see the module docstring). Returns ``(outputs (T, B, H),
    h_T (B, H))``; with ``lengths`` (B,) the state stops at each sequence's length (its
    ``h_T`` is the state there) and the outputs past it are zero, as :func:`rnnlab.unroll`."""
    if log_a.shape != log_b.shape or log_a.dim() != 3 or h0.shape != log_a.shape[1:]:
        raise ValueError(
            f"log_linear_scan expects log_a and log_b of one shape (T, B, H) and h0 (B, H), got "
            f"{tuple(log_a.shape)}, {tuple(log_b.shape)} and {tuple(h0.shape)}"
        )
    A = torch.cumsum(log_a, 0)
    h = _FirstOrderOnly.apply(torch.exp(A) * h0 + torch.exp(A + torch.logcumsumexp(log_b - A, 0)))
    if lengths is None:
        return h, h[-1]
    # the scan is causal: the steps past a length change nothing before it, so they run
    # unmasked (no -inf in log space) and each sequence's state is read at its last step
    last = (lengths.to(h.device) - 1).view(1, -1, 1).expand(1, *h.shape[1:])
    return h * _keep(h.shape[0], lengths, h.device).to(h.dtype), h.gather(0, last).squeeze(0)


def diagonal_loop(a: Tensor, b: Tensor, h0: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``h_t = a_t * h_{t-1} + b_t`` as T element-wise steps (any signs): the loop the cells
    run on the CPU, where one thread gains nothing from a scan (docs/models.md, "Speed"), and
    the reference twin of :func:`log_linear_scan` (:func:`log_linear_loop`). Same returns and
    ``lengths`` rule as :func:`log_linear_scan`."""
    h, out = h0, []
    keep = None if lengths is None else _keep(a.shape[0], lengths, a.device)
    for t, (a_t, b_t) in enumerate(zip(a.unbind(0), b.unbind(0))):
        new = torch.addcmul(b_t, a_t, h)
        h = new if keep is None else torch.where(keep[t], new, h)
        out.append(new if keep is None else new * keep[t].to(new.dtype))
    return torch.stack(out), h


def log_linear_loop(log_a: Tensor, log_b: Tensor, h0: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The reference twin of :func:`log_linear_scan`: T steps of ``h = a h + b``."""
    return diagonal_loop(torch.exp(log_a), torch.exp(log_b), h0, lengths)
