"""Fast path == reference step loop, over every registered cell x its structural options.

For each cell of ``rnnlab.CELLS`` and each of its structural options (DMU depths 0-3, RHN
depth 1-3, RNN activations and inits, LT-RNN loop/scan, the orthogonal maps and inits, the
GRU/LSTM/RNN backends, ...), a ``Recurrent`` layer is run with and without ``lengths``, with
1 and 2 layers, time-major and batch-first, in float64 (every pair of those three layer options, :data:`LAYER_OPTIONS`), once as built (its fast path) and once
with every cell switched to ``backend="reference"`` (:func:`rnnlab.unroll`). Outputs, the final
state and the gradients of every parameter, of the input and of ``h0`` must agree.

The parameters are perturbed away from their initialisation first (identity and zero inits
would hide terms that vanish at init, e.g. nnRNN's T or a dense U_f in the asRNN).
"""

from __future__ import annotations

import copy

import pytest
import torch

import rnnlab
from rnnlab.bench.doctor import perturbed_pair
from rnnlab.cells import CELLS
from rnnlab.kernels import map_state

I, H, T, B = 3, 4, 5, 3

#: (registry key, constructor options); every key of CELLS appears (checked below)
CONFIGS = [
    ("rnn", dict(nonlinearity="tanh", init="default")),
    ("rnn", dict(nonlinearity="tanh", init="glorot", backend="native")),
    ("rnn", dict(nonlinearity="relu", init="identity")),
    ("rnn", dict(nonlinearity="relu", init="orthogonal", backend="native")),
    ("rnn", dict(nonlinearity="modrelu", init="orthogonal")),
    ("rnn", dict(nonlinearity="tanh", bias=False)),
    ("irnn", dict()),
    ("lstm", dict()),
    ("lstm", dict(forget_bias=1.0, bias=False)),
    ("gru", dict()),
    ("gru", dict(backend="native")),
    ("gru", dict(bias=False)),
    ("exprnn", dict(init="henaff")),
    ("exprnn", dict(init="random", K=5, M=2)),
    ("scornn", dict(init="cayley", negatives=2)),
    ("asrnn", dict(a=0.5, b=1.5, backend="fast")),
    ("asrnn", dict(map="cayley", uf_map="cayley", init="cayley", a=0.5, b=1.5, backend="fast")),
    ("nnrnn", dict(init="cayley")),
    ("nnrnn", dict(init="henaff", theta_init="init", t_mask="reference")),
    ("dmu", dict(layers=[])),
    ("dmu", dict(layers=[5])),
    ("dmu", dict(layers=[5, 6])),
    ("dmu", dict(layers=[2, 5, 3], activation="identity")),
    ("dmu", dict(layers=[], activation="identity")),
    ("rhn", dict(depth=1)),
    ("rhn", dict(depth=2)),
    ("rhn", dict(depth=3)),
    ("ltrnn", dict(backend="loop", activation="relu", init="identity")),
    ("ltrnn", dict(backend="scan", chunk=2, activation="tanh", init="orthogonal")),
    ("ltrnn", dict(backend="auto", activation="identity", init="default")),
    ("urnn", dict()),
    ("eurnn", dict(capacity=3)),
    ("eurnn", dict(variant="fft")),
    ("momentumlstm", dict()),
    ("momentumlstm", dict(mu=0.9, epsilon=1.0, init="default", bias=False)),
    ("fcurnn", dict()),
    ("fcurnn", dict(map="expm", init="identity", K=3)),
    ("softorth", dict(margin=0.2)),
    ("softorth", dict(margin=None, nonlinearity="relu", map="expm", init="henaff", penalty=0.1)),
    ("kru", dict()),
    ("kru", dict(factors=[2], complex_input=False, penalty=0.1)),
    ("antisymrnn", dict()),
    ("antisymrnn", dict(gated=True, eps=0.5, gamma=0.0)),
    ("incrnn", dict()),
    ("incrnn", dict(rank=2, activation="relu", eta=0.3, alpha=0.5)),
    ("incrnn", dict(steps=3, eta=0.2)),
    ("naisnet", dict()),
    ("naisnet", dict(bound=None, step=0.5, delta=0.0)),
    ("lipschitz", dict()),
    ("lipschitz", dict(beta=0.3, eps=0.2, gamma_a=0.0)),
    ("cornn", dict()),
    ("cornn", dict(dt=0.3, gamma=1.5, epsilon=0.5)),
    ("lem", dict()),
    ("lem", dict(dt=0.3)),
    ("mingru", dict()),
    ("mingru", dict(backend="scan")),
    ("minlstm", dict()),
    ("minlstm", dict(backend="scan")),
    ("slstm", dict(heads=2)),
    ("slstm", dict(forget_gate="exp")),
    ("mlstm", dict(heads=2, chunk=2)),
    ("mlstm", dict(forget_gate="exp", chunk=3)),
    ("lru", dict()),
    ("lru", dict(backend="step", r_min=0.5, r_max=0.9, max_phase=0.5)),
    ("lru", dict(backend="scan", chunk=2, block=True)),
    ("s4d", dict(state_size=4)),
    ("s4d", dict(state_size=6, init="inv", backend="conv")),
    ("s4d", dict(state_size=4, backend="scan", chunk=2)),
    ("mamba", dict()),
    ("mamba", dict(state_size=3, expand=1, conv_size=2, dt_rank=2, backend="step")),
    ("mamba", dict(state_size=2, conv_size=3, backend="scan", chunk=2)),
]


def _id(cfg):
    key, kw = cfg
    return key + "-" + "-".join(f"{k}={v}" for k, v in kw.items()) if kw else key


def test_every_registered_cell_is_in_the_matrix():
    assert {key for key, _ in CONFIGS} == set(CELLS)


def build(key, kw, num_layers, batch_first, bidirectional=False, seed=0):
    return perturbed_pair(
        key,
        kw,
        seed,
        input_size=I,
        hidden_size=H,
        num_layers=num_layers,
        batch_first=batch_first,
        bidirectional=bidirectional,
    )


def inputs(layer, lengths: bool, seed=0):
    g = torch.Generator().manual_seed(seed + 2)
    D = layer.num_directions
    x = torch.randn(T, B, I, generator=g, dtype=torch.float64)
    if layer.batch_first:
        x = x.transpose(0, 1).contiguous()
    proto = layer.cells[0].init_state(B, dtype=torch.float64)
    h0 = map_state(lambda s: 0.5 * torch.randn(D * layer.num_layers, B, H, generator=g, dtype=torch.float64), proto)
    lens = torch.tensor([T, 2, 4][:B]) if lengths else None
    return x, h0, lens


def run(layer, x, h0, lens, seed=0):
    """Outputs, final states and the gradients of (input, h0 leaves, every parameter)."""
    x = x.clone().requires_grad_(True)
    h0 = map_state(lambda s: s.clone().requires_grad_(True), h0)
    out, h_n = layer(x, h0, lens)
    g = torch.Generator().manual_seed(seed + 3)
    loss = (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum()
    leaves = [h_n] if isinstance(h_n, torch.Tensor) else list(h_n)
    for s in leaves:
        loss = loss + (s * torch.randn(s.shape, generator=g, dtype=s.dtype)).sum()
    h0_leaves = [h0] if isinstance(h0, torch.Tensor) else list(h0)
    names, params = zip(*layer.named_parameters())
    grads = torch.autograd.grad(loss, [x, *h0_leaves, *params], allow_unused=True)
    named = dict(zip(["input"] + [f"h0[{i}]" for i in range(len(h0_leaves))] + list(names), grads))
    return out.detach(), [s.detach() for s in leaves], named


def assert_same(fast, ref):
    out_f, h_f, g_f = fast
    out_r, h_r, g_r = ref
    torch.testing.assert_close(out_f, out_r, rtol=1e-7, atol=1e-9, msg=lambda m: "outputs: " + m)
    for a, b in zip(h_f, h_r):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9, msg=lambda m: "h_n: " + m)
    assert g_f.keys() == g_r.keys()
    for name in g_f:
        a, b = g_f[name], g_r[name]
        if a is None or b is None:
            # a parameter the loss does not reach must be unreached on both paths
            assert a is None and b is None or (a if b is None else b).abs().max() == 0, name
            continue
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9, msg=lambda m, n=name: f"grad {n}: " + m)


#: (lengths, num_layers, batch_first): an orthogonal array covering every pair of the three
#: layer options in 4 runs instead of 8 (batch_first is a transpose in the layer, not in a cell)
LAYER_OPTIONS = [(False, 1, False), (True, 1, True), (False, 2, True), (True, 2, False)]


@pytest.mark.parametrize(
    "lengths,num_layers,batch_first",
    LAYER_OPTIONS,
    ids=[f"{'lengths' if l else 'full'}-L{n}-{'bfirst' if b else 'tmajor'}" for l, n, b in LAYER_OPTIONS],
)
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_fast_path_equals_reference(cfg, lengths, num_layers, batch_first):
    key, kw = cfg
    layer, ref = build(key, kw, num_layers, batch_first)
    x, h0, lens = inputs(layer, lengths)
    assert_same(run(layer, x, h0, lens), run(ref, x, h0, lens))


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c[0] in ("dmu", "rhn", "lstm", "ltrnn", "asrnn")], ids=_id)
def test_bidirectional_fast_path_equals_reference(cfg):
    key, kw = cfg
    layer, ref = build(key, kw, 2, False, bidirectional=True)
    x, h0, lens = inputs(layer, True)
    assert_same(run(layer, x, h0, lens), run(ref, x, h0, lens))


@pytest.mark.parametrize("depth", [0, 1, 2, 3])
@pytest.mark.parametrize("I_", [3, 4, 9])
def test_dmu_every_depth_equals_the_step_loop(depth, I_):
    """The DMU of the issue: one linear layer (depth 0) was run as hidden + output layer."""
    torch.manual_seed(depth)
    cell = rnnlab.DMUCell(I_, 4, layers=[5] * depth).double()
    ref = copy.deepcopy(cell)
    ref.backend = "reference"
    assert cell.depth == depth + 1
    x = torch.randn(6, 2, I_, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    results = []
    for c in (cell, ref):
        out, h_n = c.sequence(x, h0)
        loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum() + h_n.square().sum()
        results.append((out, h_n, torch.autograd.grad(loss, [x, h0, *c.parameters()])))
    (o1, h1, g1), (o2, h2, g2) = results
    torch.testing.assert_close(o1, o2, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(h1, h2, rtol=1e-9, atol=1e-12)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_dmu_single_linear_layer_gradcheck():
    from rnnlab.kernels.families.dmu import dmu_recurrence

    torch.manual_seed(0)
    u = torch.randn(4, 2, 6, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    for act in ("tanh", "identity"):
        assert torch.autograd.gradcheck(lambda u, h0, w: dmu_recurrence(u, h0, w, [], None, None, act), (u, h0, w))
