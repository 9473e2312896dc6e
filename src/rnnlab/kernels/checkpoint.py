"""Time-chunked recomputation: trade compute for memory on long sequences.

:func:`checkpointed_sequence` runs ``cell.sequence`` over consecutive chunks of ``chunk``
time steps, each under :func:`torch.utils.checkpoint.checkpoint` (non-reentrant). For
backward it keeps only each chunk's input slice and first state; the chunk's forward (and
so its activations) is recomputed when its gradient is needed. The result is the same
function with the same gradients (tested against the unchunked sequence in float64); the
cost is one extra forward pass over the sequence.

What it saves depends on the cell's path: the reference loop keeps several (B, H) tensors
per step for backward, the fused recurrence (:func:`rnnlab.kernels.elementwise_rnn`) keeps
one, and with a readout over all steps the (T, B, H) outputs are kept by the readout anyway.
So the gain is largest with a readout at the last step (sequential MNIST, adding) or with
the reference loop; BENCHMARKS.md records measured peaks at T=10,000.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .state import map_state


def checkpointed_sequence(cell, x: Tensor, state=None, lengths: Tensor | None = None, chunk: int = 256):
    """``cell.sequence(x, state, lengths)`` computed chunk by chunk with recomputation.

    Args:
        cell: a :class:`rnnlab.cells.Cell`.
        x: (T, B, I) time-major input.
        state: initial state (None: the cell's zero state).
        lengths: optional (B,) lengths; steps at or past a sequence's length leave its state
            unchanged and give zero outputs (as in :func:`rnnlab.unroll`).
        chunk: time steps per recomputed chunk (memory ~ T/chunk states + one chunk's
            activations; chunk ~ sqrt(T) balances the two).

    Returns:
        ``(outputs (T, B, H), state)`` as ``cell.sequence`` does.
    """
    chunk = int(chunk)
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of time steps, got {chunk}")
    state = cell.start_sequence(x, state)
    T = x.shape[0]
    if not torch.is_grad_enabled() or T <= chunk:
        return cell.sequence(x, state, lengths)
    if lengths is not None:
        # on the CPU, as the layers keep them: reading them per chunk costs no device sync
        lengths = torch.as_tensor(lengths, dtype=torch.long).cpu()

    def run(xs, state, ls):
        if ls is None or int(ls.min()) > 0:
            return cell.sequence(xs, state, ls)
        # sequences that ended before this chunk: native kernels reject length 0, so run
        # them one step and then put back their frozen state and zero outputs
        done = (ls == 0).unsqueeze(1).to(xs.device)
        out, new = cell.sequence(xs, state, ls.clamp(min=1))
        out = out.masked_fill(done.unsqueeze(0), 0.0)
        new = map_state(lambda n, o: torch.where(done, o, n), new, state)
        return out, new

    return in_windows(
        lambda xs, state, ls: checkpoint(run, xs, state, ls, use_reentrant=False), x, state, lengths, chunk
    )


def in_windows(run, x: Tensor, state, lengths: Tensor | None, window: int):
    """``run(xs, state, ls) -> (outputs, state)`` over consecutive windows of ``window`` time
    steps of ``x`` (T, B, ...), the state carried from each window to the next and each
    sequence's length counted from the window's start (``ls = (lengths - start)`` clamped to
    ``[0, window]``: 0 for a sequence that ended before it). Returns the windows' outputs joined
    in time and the last state; for a causal recurrence, the whole sequence's run. The one
    home of windowing in time: recomputation in backward (:func:`checkpointed_sequence`) and
    the diagonal cells' evaluation of long sequences (:mod:`rnnlab.cells.ssm`)."""
    outs = []
    for s in range(0, x.shape[0], window):
        xs = x[s : s + window]
        ls = None if lengths is None else (lengths - s).clamp(0, xs.shape[0])
        out, state = run(xs, state, ls)
        outs.append(out)
    return torch.cat(outs), state
