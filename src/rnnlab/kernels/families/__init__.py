"""One module per recurrence family, each holding every path of its own that is not shared:

* :mod:`.rnn`: ``h_t = phi(W h_{t-1} + u_t)`` (tanh, relu, modReLU, identity: the RNN, the
  IRNN, the orthogonal cells, the LT-RNN's transition);
* :mod:`.lstm`, :mod:`.gru`, :mod:`.rhn`, :mod:`.dmu`.

A family's module holds its fused single-model BPTT (an autograd Function with a hand-written
backward, where it has one), its ensemble loop (members first, run out of ``vmap`` by
:func:`rnnlab.kernels.ensemble.ensemble_call`), its compiled loops (the ``_Family``
declaration of its C pair in ``small.c`` made into an autograd Function by
:func:`rnnlab.kernels.small._kernel`) and the recurrence in PyTorch operations that gives their
second-order gradients. What the families share stays where it was: the C build and call
machinery (:mod:`rnnlab.kernels.small`, :mod:`rnnlab.kernels.small_abi`, ``small.c``), the
way out of ``vmap`` and the batched products (:mod:`rnnlab.kernels.ensemble`), and the one
dispatch table (:mod:`rnnlab.kernels.dispatch`) that says which path runs.
"""
