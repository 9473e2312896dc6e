"""Mixed precision for the fast paths: what runs in which dtype under ``torch.autocast``.

``torch.autocast`` casts the inputs of listed operations (matrix products, ``F.linear``) to
bfloat16/float16. The library's own kernels do not leave that to chance:

* the recurrences (:func:`rnnlab.kernels.elementwise_rnn`, which also runs asRNN's transformed
  coordinates, the gated kernels, the LT-RNN scan) carry their state over hundreds or thousands
  of steps, where low-precision rounding compounds; under autocast they run with autocast switched off
  and in float32 (:func:`recurrence_dtype`, :func:`float32_region`);
* the orthogonal maps (matrix exponential, Cayley) and the matrices assembled from them
  (asRNN's ``W_f``, ``W_f^{-1}``, nnRNN's ``P (Lambda + T) P^T``) are computed in float32;
* the large products over all time steps (input projections, readouts) are left to autocast:
  that is where low precision pays.

Outside autocast nothing changes: every kernel computes in its input's dtype (float64 in the
tests).
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

LOW_PRECISION = (torch.float16, torch.bfloat16)


def autocasting(device_type: str) -> bool:
    """Whether ``torch.autocast`` is on for ``device_type`` ("cpu", "cuda", "mps", ...)."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4: no device argument
        return bool(torch.is_autocast_enabled() if device_type == "cuda" else torch.is_autocast_cpu_enabled())
    except (RuntimeError, ValueError):  # device types autocast does not know (meta)
        return False


def low_precision_autocast(x: Tensor) -> bool:
    """Whether ``x``'s device runs under a bfloat16/float16 autocast (``train.precision``)."""
    return autocasting(x.device.type) and torch.get_autocast_dtype(x.device.type) in LOW_PRECISION


def recurrence_dtype(x: Tensor) -> torch.dtype:
    """The dtype a recurrence kernel computes in for input ``x``: ``x.dtype``, except float32
    for a low-precision ``x`` under autocast (the result of an autocast input projection)."""
    if x.dtype in LOW_PRECISION and autocasting(x.device.type):
        return torch.float32
    return x.dtype


def float32_region(x: Tensor):
    """A context with autocast switched off on ``x``'s device (a no-op when it is off)."""
    if autocasting(x.device.type):
        return torch.autocast(device_type=x.device.type, enabled=False)
    return contextlib.nullcontext()


def full_precision(x: Tensor) -> torch.dtype:
    """float32 for low-precision ``x`` (float16, bfloat16), else ``x.dtype``."""
    return torch.float32 if x.dtype in LOW_PRECISION else x.dtype
