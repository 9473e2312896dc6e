"""One recurrent layer of an ensemble run directly on the members' stacked parameters, outside
``torch.func.vmap`` (:meth:`rnnlab.stacked_model.StackedModel.direct`).

Per recurrence family, what the cell's batched path (:meth:`rnnlab.cells.Cell.batched_sequence`,
its ``small_sequence`` first) computes under ``vmap``, written on the stacks ((E, ...), the
ensemble dimension first): the same input terms, the same loops (the compiled loops or the
``ensemble_<family>`` loop of :mod:`rnnlab.kernels.families`, entered through
:func:`rnnlab.kernels.ensemble.ensemble_call` inside
:func:`rnnlab.kernels.ensemble.members_first`), so the values are the vmap path's.

A runner is ``run(cell, p, inputs, h0, lengths, path) -> (outputs (E, T, B, H), state)``:
``cell`` the template's cell (its options), ``p(name)`` the (E, ...) stack of the cell's
parameter ``name``, ``inputs(weight, bias)`` the input terms (E, T, B, G) of ``x W^T + b``,
``h0`` the stacked initial state (E, B, H) (a tuple for the LSTM), ``lengths`` (E, B) or None,
``path`` the dispatch rule's path (:meth:`rnnlab.cells.Cell.path` with ``ensemble=True``).
The runners read the cells' attributes by name; this module imports no cell (the kernels sit
below the cells).
"""

from __future__ import annotations

import torch

from . import dispatch
from .families.dmu import compiled_dmu, ensemble_dmu
from .families.gru import compiled_gru, ensemble_gru
from .families.lstm import compiled_lstm, ensemble_lstm
from .families.rhn import compiled_rhn, ensemble_rhn
from .families.rnn import compiled_rnn


def _rnn(cell, p, inputs, h0, lengths, path):
    bias = None if cell.bias_ih is None else p("bias_ih") + p("bias_hh")
    u = inputs(p("weight_ih"), bias)
    return compiled_rnn(u, p("weight_hh"), h0, cell.nonlinearity, lengths, lanes=path == "lanes")


def _lstm(cell, p, inputs, h0, lengths, path):
    bias = None if cell.bias_ih is None else p("bias_ih") + p("bias_hh")
    u = inputs(p("weight_ih"), bias)
    if path in dispatch.COMPILED:
        out, h, c = compiled_lstm(u, p("weight_hh"), h0[0], h0[1], lengths, lanes=path == "lanes")
    else:
        out, h, c = ensemble_lstm(u, p("weight_hh"), h0[0], h0[1], lengths)
    return out, (h, c)


def _gru(cell, p, inputs, h0, lengths, path):
    W = p("weight_hh")
    b_hh = p("bias_hh") if cell.bias_hh is not None else W.new_zeros(W.shape[:2])
    u = inputs(p("weight_ih"), None if cell.bias_ih is None else p("bias_ih"))
    if path in dispatch.COMPILED:
        return compiled_gru(u, W, b_hh, h0, lengths, lanes=path == "lanes")
    return ensemble_gru(u, W, b_hh, h0, lengths)


def _rhn(cell, p, inputs, h0, lengths, path):
    bias = p("bias")
    if path in dispatch.COMPILED:
        return compiled_rhn(inputs(p("weight_ih"), None), p("weight_hh"), bias, h0, lengths, lanes=path == "lanes")
    # the first micro-layer's bias enters the input terms (RHNCell.batched_sequence)
    rest = torch.cat([torch.zeros_like(bias[:, :1]), bias[:, 1:]], 1)
    return ensemble_rhn(inputs(p("weight_ih"), bias[:, 0]), p("weight_hh"), rest, h0, lengths)


def _dmu(cell, p, inputs, h0, lengths, path):
    n_in, last = cell.input_size, cell.depth - 1
    first = p("fnn.0.weight")
    u1 = inputs(first[:, :, :n_in], p("fnn.0.bias"))
    if cell.depth == 1:  # layers=[]: the one linear layer is the output layer
        args = (u1, h0, first[:, :, n_in:], [], None, None)
    else:
        hidden = [(p(f"fnn.{i}.weight"), p(f"fnn.{i}.bias")) for i in range(1, last)]
        args = (u1, h0, first[:, :, n_in:], hidden, p(f"fnn.{last}.weight"), p(f"fnn.{last}.bias"))
    if path in dispatch.COMPILED:
        return compiled_dmu(*args, cell.activation, 0.01, lengths, lanes=path == "lanes")
    return ensemble_dmu(*args, cell.activation, 0.01, lengths)


#: per recurrence family (a cell's ``family``): its runner and the paths it covers (None: every
#: path but the step loop). Which cell classes run on these is the caller's to say
#: (:meth:`rnnlab.stacked_model.StackedModel.direct_plan`: the classes whose batched path is the
#: family's own).
RUNNERS = {
    "rnn": (_rnn, dispatch.COMPILED),  # (its other batched path is the fused recurrence)
    "lstm": (_lstm, None),
    "gru": (_gru, None),
    "rhn": (_rhn, None),
    "dmu": (_dmu, None),
}


def runner(family: str | None, path: str | None = None):
    """The direct runner of ``family`` on ``path`` (None: on some path), or None: not covered
    (the vmap path runs it)."""
    run, paths = RUNNERS.get(family, (None, ()))
    if run is None or (path is not None and (path == "step" or (paths is not None and path not in paths))):
        return None
    return run
