"""Fast paths for recurrences; each is tested against its reference twin in float64.

* :func:`elementwise_rnn`: fused BPTT for ``h_t = phi(W h_{t-1} + u_t)`` with phi in
  {tanh, relu, modReLU, identity}; used by expRNN, scoRNN, nnRNN, the modReLU RNN and the
  LT-RNN, and open to any cell whose step is (or can be rewritten as) this recurrence.
* :func:`tall_linear`: ``F.linear`` over all time steps at once (input projections, readouts),
  in row blocks and with the weight gradient in its faster orientation.
* :mod:`rnnlab.kernels.families`: one module per recurrence family (``rnn``, ``lstm``, ``gru``,
  ``rhn``, ``dmu``) with every path of its own: fused BPTT (``gru_recurrence``,
  ``rhn_recurrence``, ``dmu_recurrence``), ensemble loop and compiled loops.
* :func:`checkpointed_sequence`: time-chunked recomputation around any cell's ``sequence``,
  trading compute for memory on long sequences.
* ``scan``: the chunked linear-recurrence scan (LT-RNN).
"""

from .checkpoint import checkpointed_sequence
from .families.rnn import ACTIVATIONS, elementwise_rnn, modrelu, reference_elementwise_rnn
from .linear import tall_linear
from .state import State, map_state

__all__ = [
    "ACTIVATIONS",
    "State",
    "checkpointed_sequence",
    "elementwise_rnn",
    "map_state",
    "modrelu",
    "reference_elementwise_rnn",
    "tall_linear",
]
