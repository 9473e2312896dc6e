"""What the fused kernels share: one autograd Function over a whole sequence with a
hand-written BPTT (:mod:`rnnlab.kernels.families`, :mod:`rnnlab.kernels.residual`,
:mod:`rnnlab.kernels.oscillator`, :mod:`rnnlab.kernels.unitary`, :mod:`rnnlab.kernels.logscan`)
builds no graph in its backward, and says so when one is asked for."""

from __future__ import annotations

import torch


def _refuse_graph(kernel: str, remedy: str) -> None:
    """Raise when autograd asks this fused backward for a graph of itself (``create_graph=True``):
    it has none, and gradients computed without one would be silently constant in the weights."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"second-order gradients (a backward with create_graph=True: gradient penalties, Hessian-vector "
            f"products) do not pass through the fused {kernel} kernel; build the layer with {remedy} for them"
        )
