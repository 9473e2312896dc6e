"""The log-space parallel scan of a positive diagonal linear recurrence (minGRU, minLSTM).

``h_t = a_t * h_{t-1} + b_t`` element-wise, with ``a_t = exp(log_a_t) > 0`` and
``b_t = exp(log_b_t) > 0`` given in log space (Feng, Tung, Ahmed, Bengio and Hajimirsadeghi,
"Were RNNs All We Needed?", 2024, section 3 and appendix; the scan is Heinsen's
log-cumulative-sum-of-exponentials). With ``A_t = log_a_1 + ... + log_a_t``::

    h_t = exp(A_t) h_0 + exp(A_t + logcumsumexp_s<=t(log_b_s - A_s))

The start ``h_0`` enters linearly (its own term), so it may have any sign; only the driving
terms ``b_t`` must be positive, which the cells guarantee (the paper's ``g`` activation for the
candidate, sigmoids for the gates). Two cumulative operations over time replace T dependent
steps; the gradients are autograd's through ``torch.cumsum`` and ``torch.logcumsumexp``. In
float32 the terms ``log_b_s - A_s`` grow with |A_t| (about T times the mean |log a|), so the
rounding of h is about that times float32's epsilon (relative); in float64 the scan equals the
step loop to 1e-10 (tests/kernels/test_logscan.py).

The reference twin is :func:`log_linear_loop` (the same recurrence as T products) and, for the
cells, their step ``forward`` in plain (not log-space) arithmetic.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["log_g", "g", "log_linear_loop", "log_linear_scan"]


def g(x: Tensor) -> Tensor:
    """The paper's positive activation for the candidate state: ``x + 1/2`` for ``x >= 0``,
    ``sigmoid(x)`` below (continuous, with slope 1/4 and 1 at 0 from each side; always > 0)."""
    return torch.where(x >= 0, x.clamp(min=0) + 0.5, torch.sigmoid(x))


def log_g(x: Tensor) -> Tensor:
    """``log g(x)`` computed without forming ``g`` (``-softplus(-x)`` below 0)."""
    return torch.where(x >= 0, torch.log(x.clamp(min=0) + 0.5), -torch.nn.functional.softplus(-x))


def _masked(log_a: Tensor, log_b: Tensor, lengths: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
    """Steps at or past a sequence's length leave its state unchanged: ``a = 1``, ``b = 0``."""
    if lengths is None:
        return log_a, log_b, None
    T = log_a.shape[0]
    keep = (torch.arange(T, device=log_a.device).unsqueeze(1) < lengths.to(log_a.device).unsqueeze(0)).unsqueeze(2)
    log_a = torch.where(keep, log_a, torch.zeros((), dtype=log_a.dtype, device=log_a.device))
    log_b = torch.where(keep, log_b, torch.full((), float("-inf"), dtype=log_b.dtype, device=log_b.device))
    return log_a, log_b, keep


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
    log_a, log_b, keep = _masked(log_a, log_b, lengths)
    A = torch.cumsum(log_a, 0)
    h = torch.exp(A) * h0 + torch.exp(A + torch.logcumsumexp(log_b - A, 0))
    # past a length a = 1 and b = 0, so the last row is each sequence's state at its length
    return (h if keep is None else h * keep.to(h.dtype)), h[-1]


def log_linear_loop(log_a: Tensor, log_b: Tensor, h0: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The reference twin of :func:`log_linear_scan`: T steps of ``h = a h + b``."""
    log_a, log_b, keep = _masked(log_a, log_b, lengths)
    h, out = h0, []
    for la, lb in zip(log_a.unbind(0), log_b.unbind(0)):
        h = torch.exp(la) * h + torch.exp(lb)
        out.append(h)
    out = torch.stack(out)
    if keep is not None:
        out = out * keep.to(out.dtype)
    return out, h
