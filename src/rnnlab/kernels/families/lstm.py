"""The LSTM (torch's gate order i, f, g, o; ``gi`` = W_ih x + b_ih + b_hh the input terms of
all steps): its ensemble loop (:func:`ensemble_lstm`) and its compiled loops
(:func:`compiled_lstm`, with the PyTorch recurrence that gives their second order). A single
run above the compiled loops' widths runs ATen's ``torch.lstm``
(:func:`rnnlab.cells.classic.run_native`): the LSTM has no fused BPTT of its own. Which one
runs: :mod:`rnnlab.kernels.dispatch`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..ensemble import _advance, _Gates, _in_recurrence_dtype, _mask, ensemble_call
from ..small import _c, _Family, _keep, _kernel, _lens, _masked, _step_mask, _weight_from_dU

__all__ = ["compiled_lstm", "ensemble_lstm"]

# ---------------------------------------------------------------------------- ensemble loop


def _ensemble_steps(gi, w_hh, h0, c0, lengths):
    """torch's LSTM step (gates i, f, g, o) over ``gi`` = W_ih x + b_ih + b_hh."""
    T = gi.shape[1]
    mask = _mask(lengths, T, gi.device)
    gates = _Gates(gi, w_hh, 4)
    state, outs = (h0, c0), []
    for t in range(T):
        h, c = state
        i, f, g, o = gates(t, h)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        state, out = _advance((h_new, c_new), state, None if mask is None else mask[t])
        outs.append(out)
    return torch.stack(outs, 1), state[0], state[1]


def ensemble_lstm(gi: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, lengths: Tensor | None = None):
    """The LSTM over time for a caller inside ``vmap``: ``gi`` (T, B, 4H) the input terms with
    both biases, ``w_hh`` (4H, H); returns ``(outputs (T, B, H), h_n, c_n)``."""
    return _in_recurrence_dtype(_ensemble_steps, gi, w_hh, h0, c0, lengths)


# ---------------------------------------------------------------------------- compiled loops (small.c)


def _reference(u, W, h0, c0, lens):
    """The recurrence in PyTorch operations, members first: the compiled loops' second order."""
    h, c, S, C = h0, c0, [], []
    for t in range(u.shape[1]):
        i, f, g, o = torch.baddbmm(u[:, t], h, W.transpose(1, 2)).chunk(4, -1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        m = _step_mask(lens, t, h)
        h, c = _keep(h_new, h, m), _keep(c_new, c, m)
        S.append(h), C.append(c)
    return torch.stack(S, 1), torch.stack(C, 1)


_INPUTS = ("u", "W", "h0", "c0", "lens")

_LSTM = _kernel("_LSTM", _Family("lstm", _INPUTS, ("S", "C"), _reference, 4, ("h0",), _weight_from_dU))
_LSTMLanes = _kernel(
    "_LSTMLanes",
    _Family("lstm_lanes", _INPUTS, ("S", "hn", "cn"), _reference, 4),
    "The LSTM with its sequences side by side in vector lanes (``lstm_lanes_*`` of small.c): the forward "
    "keeps the states and cells, the backward recomputes the gates.",
)


def _compiled(u, W, h0, c0, lengths, lanes=False):
    lens = _lens(lengths)
    if lanes:  # (the outputs zero from each length on, h_n, c_n)
        return _LSTMLanes.apply(*_c(u, W, h0, c0), lens)
    S, C = _LSTM.apply(*_c(u, W, h0, c0), lens)
    return _masked(S, lens), S[:, -1], C[:, -1]


def compiled_lstm(gi: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, lengths: Tensor | None = None, lanes: bool = False):
    """The LSTM over ``gi`` = W_ih x + b_ih + b_hh (T, B, 4H) in the compiled loops of
    :mod:`rnnlab.kernels.small`: ``(outputs, h_n, c_n)``. ``lanes``: run the lane kernel
    (:func:`rnnlab.kernels.families.rnn.compiled_rnn`) instead of the scalar loop."""
    return ensemble_call(_compiled, gi, w_hh, h0, c0, lengths, lanes)
