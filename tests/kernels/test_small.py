"""The compiled loops of tiny recurrences (rnnlab.kernels.small) against the cells' step loop
(rnnlab.unroll), in float64: outputs, final states and the gradient of every parameter and of
the initial state, over the cells and options they serve, stacked layers with per-layer widths,
lengths, a given initial state and bias off; and the same for E members at once."""

import pytest
import torch

from rnnlab.cells import CELLS
from rnnlab.cells.layers import Recurrent
from rnnlab.kernels import small

pytestmark = pytest.mark.skipif(not small.available(), reason="no C compiler for rnnlab.kernels.small")

D = torch.float64
CASES = [  # cell, options
    ("rnn", {}),
    ("rnn", {"nonlinearity": "relu"}),
    ("rnn", {"bias": False}),
    ("irnn", {}),
    ("lstm", {}),
    ("lstm", {"bias": False}),
    ("gru", {}),
    ("gru", {"bias": False}),
    ("rhn", {"depth": 1}),
    ("rhn", {"depth": 3}),
    ("dmu", {}),
    ("dmu", {"layers": []}),
    ("dmu", {"layers": [4, 3]}),
    ("dmu", {"activation": "identity"}),
]
SHAPES = [  # hidden size(s), layers, lengths, h0 given
    (5, 1, False, False),
    ([3, 2], 1, True, True),
    (4, 2, True, False),
    (2, 2, False, True),
]


def _layer(cell, options, H, layers, backend):
    torch.manual_seed(0)
    return Recurrent(3, H, layers, cell=CELLS[cell], backend=backend, **options).to(D)


def _h0(layer, B, gen):
    def one(width):
        s = layer.cells[0].init_state(B, dtype=D)
        return torch.randn(B, width, generator=gen, dtype=D) if isinstance(s, torch.Tensor) else s

    widths = layer.hidden_sizes
    if isinstance(layer.cells[0].init_state(1, dtype=D), tuple):
        states = [tuple(torch.randn(B, w, generator=gen, dtype=D) for _ in range(2)) for w in widths]
    else:
        states = [torch.randn(B, w, generator=gen, dtype=D) for w in widths]
    if len(set(widths)) > 1:
        return [s if isinstance(s, torch.Tensor) else s for s in states]
    if isinstance(states[0], tuple):
        return tuple(torch.stack(part) for part in zip(*states))
    return torch.stack(states)


def _leaves(tree):
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("cell,options", CASES)
@pytest.mark.parametrize("H,layers,lengths,h0", SHAPES)
def test_compiled_loops_equal_the_step_loop(cell, options, H, layers, lengths, h0):
    T, B = 9, 5
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(T, B, 3, generator=gen, dtype=D)
    L = torch.randint(1, T + 1, (B,), generator=gen) if lengths else None
    fast, ref = _layer(cell, options, H, layers, "small"), _layer(cell, options, H, layers, "reference")
    state = _h0(fast, B, gen) if h0 else None
    results = []
    for layer in (fast, ref):
        s0 = None if state is None else torch.utils._pytree.tree_map(lambda t: t.clone().requires_grad_(), state)
        out, h_n = layer(x, s0, L)
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=D)
        wh = [torch.randn(t.shape, generator=torch.Generator().manual_seed(3), dtype=D) for t in _leaves(h_n)]
        loss = (out * w).sum() + sum((t * v).sum() for t, v in zip(_leaves(h_n), wh))
        inputs = list(layer.parameters()) + ([] if s0 is None else _leaves(s0))
        results.append((out, _leaves(h_n), torch.autograd.grad(loss, inputs)))
    (o1, h1, g1), (o2, h2, g2) = results
    torch.testing.assert_close(o1, o2, rtol=1e-10, atol=1e-12)
    for a, b in zip(h1, h2):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert len(g1) == len(g2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
