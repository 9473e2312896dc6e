"""Second-order gradients of every layer: exact, or refused with a clear error.

A backward asked for a graph of itself (``torch.autograd.grad(..., create_graph=True)``:
gradient penalties, Hessian-vector products, meta-learning) must give the same second
derivatives as the reference loop (:func:`rnnlab.unroll`), or raise. For every registered
cell family's layer, over its structural options and the layer's own (stacking, direction,
lengths, batch-first, checkpointing):

* ``gradgradcheck`` in float64 over the input and every parameter (the fused kernels'
  backward passes differentiated against finite differences of themselves);
* the gradient-penalty probe (the gradient over the parameters of ``||dL/dx||^2``) and a
  Hessian-vector product over the parameters, equal to the reference loop's;
* the fused kernels without a second-order backward (DMU, RHN, the fused GRU) raise a
  ``RuntimeError`` that names the way out, and that way out (``backend="reference"``, for the
  GRU also ``"native"``) passes the same checks.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.func import functional_call

from rnnlab.cells import CELLS, Recurrent

D = torch.float64
T, B, I, H = 3, 2, 2, 4

#: (case id, registry key, cell options, layer options); every family with its structural options
CASES = [
    ("rnn-tanh", "rnn", {}, {}),
    ("rnn-relu", "rnn", {"nonlinearity": "relu"}, {}),
    ("rnn-modrelu", "rnn", {"nonlinearity": "modrelu"}, {}),
    ("rnn-nobias", "rnn", {"bias": False}, {}),
    ("rnn-native", "rnn", {"backend": "native"}, {}),
    ("rnn-2layers-bidirectional", "rnn", {}, {"num_layers": 2, "bidirectional": True}),
    ("rnn-batch-first-lengths", "rnn", {}, {"batch_first": True, "lengths": [3, 1]}),
    ("rnn-checkpointed", "rnn", {}, {"checkpoint_chunk": 2}),
    ("irnn", "irnn", {}, {}),
    ("lstm", "lstm", {}, {}),
    ("lstm-nobias-lengths", "lstm", {"bias": False}, {"lengths": [2, 3]}),
    ("gru-native", "gru", {"backend": "native"}, {}),
    ("gru-lengths", "gru", {}, {"lengths": [3, 2]}),  # lengths take ATen's GRU
    ("exprnn", "exprnn", {}, {}),
    ("exprnn-dtriv", "exprnn", {"K": 2, "init": "cayley"}, {}),
    ("scornn-negatives", "scornn", {"negatives": 1}, {}),
    ("asrnn", "asrnn", {"a": 0.5, "b": 1.5}, {}),
    ("asrnn-cayley-fast", "asrnn", {"map": "cayley", "uf_map": "cayley", "backend": "fast", "a": 0.5, "b": 1.0}, {}),
    ("asrnn-eps0-lengths", "asrnn", {"a": 0.5, "b": 1.5, "eps": 0.0}, {"lengths": [1, 3]}),
    ("nnrnn", "nnrnn", {}, {}),
    ("nnrnn-reference-mask-fixed-gamma", "nnrnn", {"t_mask": "reference", "fixed_gamma": 0.9}, {}),
    ("nnrnn-theta-init", "nnrnn", {"theta_init": "init", "init": "henaff"}, {"lengths": [3, 2]}),
    # the compiled loops of rnnlab.kernels.small (the default at these widths): exact through
    # their PyTorch twin when a graph of the backward is asked for
    ("dmu-small", "dmu", {}, {}),
    ("dmu-deep-identity-small-lengths", "dmu", {"layers": [3, 2], "activation": "identity"}, {"lengths": [3, 1]}),
    ("dmu-linear-small", "dmu", {"layers": [], "backend": "small"}, {}),
    ("rhn-small-lengths", "rhn", {"depth": 2}, {"lengths": [2, 3]}),
    ("gru-small", "gru", {"backend": "small"}, {}),
    ("lstm-small-lengths", "lstm", {"backend": "small"}, {"lengths": [3, 2], "num_layers": 2}),
    ("dmu-reference", "dmu", {"backend": "reference"}, {}),
    ("dmu-linear-reference", "dmu", {"layers": [], "activation": "identity", "backend": "reference"}, {}),
    ("rhn-reference", "rhn", {"depth": 2, "backend": "reference"}, {}),
    ("gru-reference", "gru", {"backend": "reference"}, {}),
    ("ltrnn", "ltrnn", {}, {}),
    ("ltrnn-scan-tanh", "ltrnn", {"backend": "scan", "activation": "tanh", "chunk": 2}, {}),
    ("ltrnn-loop-identity-nobias", "ltrnn", {"backend": "loop", "activation": "identity", "bias": False}, {}),
    ("ltrnn-lengths", "ltrnn", {"init": "orthogonal"}, {"lengths": [2, 3]}),
    ("urnn", "urnn", {}, {}),
    ("eurnn-tunable", "eurnn", {"capacity": 3}, {}),
    ("eurnn-fft", "eurnn", {"variant": "fft"}, {"lengths": [3, 1]}),
    # issue 23's cells: fast paths with second-order gradients, and the step loop of the others
    ("momentumlstm", "momentumlstm", {}, {}),
    ("momentumlstm-default-init-lengths", "momentumlstm", {"init": "default"}, {"lengths": [3, 1]}),
    ("softorth-penalty", "softorth", {"penalty": 0.1}, {}),
    ("softorth-margin-relu-lengths", "softorth", {"margin": 0.3, "nonlinearity": "relu"}, {"lengths": [2, 3]}),
    ("fcurnn-reference", "fcurnn", {"backend": "reference"}, {}),
    ("kru-reference", "kru", {"penalty": 0.1, "backend": "reference"}, {}),
    ("antisymrnn-reference", "antisymrnn", {"backend": "reference"}, {}),
    ("antisymrnn-gated", "antisymrnn", {"gated": True}, {"lengths": [3, 2]}),
    ("incrnn-reference", "incrnn", {"rank": 2, "backend": "reference"}, {}),
    ("incrnn-two-steps", "incrnn", {"steps": 2}, {}),
    ("naisnet-reference", "naisnet", {"backend": "reference"}, {}),
    ("lipschitz-reference", "lipschitz", {"backend": "reference"}, {}),
    ("cornn-reference", "cornn", {"backend": "reference"}, {"lengths": [3, 1]}),
    ("lem-reference", "lem", {"backend": "reference"}, {}),
    # issue 59's gated cells: the mLSTM's parallel form is plain autograd; the minGRU/minLSTM
    # scan refuses (below), their loops are exact
    ("mingru-reference-lengths", "mingru", {"backend": "reference"}, {"lengths": [3, 1], "bidirectional": True}),
    ("minlstm-reference", "minlstm", {"backend": "reference"}, {"num_layers": 2}),
    ("mingru-loop", "mingru", {"backend": "loop"}, {"lengths": [2, 3]}),
    ("minlstm-loop", "minlstm", {"backend": "loop"}, {}),
    ("slstm-heads-exp", "slstm", {"heads": 2, "forget_gate": "exp"}, {"lengths": [3, 1]}),
    ("mlstm-heads-chunk", "mlstm", {"heads": 2, "chunk": 2}, {"lengths": [3, 1]}),
    ("lru-scan", "lru", {"backend": "scan", "chunk": 2}, {}),
    ("lru-block-step-lengths", "lru", {"block": True, "backend": "step"}, {"lengths": [3, 1]}),
    ("s4d-conv", "s4d", {"state_size": 4, "backend": "conv"}, {}),
    ("s4d-scan-lengths", "s4d", {"state_size": 4, "backend": "scan", "chunk": 2}, {"lengths": [2, 3]}),
    ("mamba-scan", "mamba", {"state_size": 3, "backend": "scan", "chunk": 2}, {}),
]

#: cases checked by the probe only (gradgradcheck of a stack is rnn-2layers-bidirectional's)
PROBE_ONLY = [("asrnn-2layers", "asrnn", {"a": 0.5, "b": 1.5}, {"num_layers": 2})]

#: fused kernels with no second-order backward: (case id, key, options, way out named in the error)
REFUSED = [
    ("dmu", "dmu", {"backend": "fused"}, "backend='reference'"),
    ("dmu-linear", "dmu", {"layers": [], "backend": "fused"}, "backend='reference'"),
    (
        "dmu-deep-identity",
        "dmu",
        {"layers": [3, 2], "activation": "identity", "backend": "fused"},
        "backend='reference'",
    ),
    ("rhn", "rhn", {"backend": "fused"}, "backend='reference'"),
    ("rhn-depth1", "rhn", {"depth": 1, "backend": "fused"}, "backend='reference'"),
    ("gru", "gru", {"backend": "fused"}, "backend='native'"),
    ("gru-nobias", "gru", {"bias": False, "backend": "fused"}, "backend='native'"),
    ("fcurnn", "fcurnn", {}, "backend='reference'"),
    ("kru", "kru", {"complex_input": False}, "backend='reference'"),
    ("antisymrnn", "antisymrnn", {}, "backend='reference'"),
    ("incrnn", "incrnn", {"rank": 2}, "backend='reference'"),
    ("naisnet", "naisnet", {}, "backend='reference'"),
    ("lipschitz", "lipschitz", {}, "backend='reference'"),
    ("cornn", "cornn", {}, "backend='reference'"),
    ("lem", "lem", {}, "backend='reference'"),
    ("mingru-scan", "mingru", {"backend": "scan"}, "backend='reference'"),
    ("minlstm-scan", "minlstm", {"backend": "scan"}, "backend='reference'"),
]

FAMILIES_COVERED = {key for _, key, _, _ in CASES} | {key for _, key, _, _ in REFUSED}


def _layer(key: str, cell_options: dict, layer_options: dict, seed: int = 0) -> tuple[Recurrent, dict]:
    """A float64 layer and the forward's keyword arguments (lengths)."""
    options = dict(layer_options)
    lengths = options.pop("lengths", None)
    torch.manual_seed(seed)
    layer = Recurrent(I, H, cell=CELLS[key], **options, **cell_options).double()
    layer.train()
    return layer, {} if lengths is None else {"lengths": torch.tensor(lengths)}


def _reference_twin(layer: Recurrent) -> Recurrent:
    """The same layer computing with the step loop, without checkpointing."""
    twin = copy.deepcopy(layer)
    twin.checkpoint_chunk = None
    for cell in twin.cells:
        cell.backend = "reference"
    return twin


def _inputs(layer: Recurrent, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    shape = (B, T, I) if layer.batch_first else (T, B, I)
    x = torch.randn(shape, generator=g, dtype=D)
    width = layer.num_directions * layer.hidden_size
    r = torch.randn(shape[:2] + (width,), generator=g, dtype=D)
    return x, r


def _loss(layer: Recurrent, x, r, kwargs, params=None):
    """A loss through the outputs and the final state (all of its leaves)."""
    if params is None:
        out, h_n = layer(x, **kwargs)
    else:
        out, h_n = functional_call(layer, params, (x,), kwargs)
    leaves = [h_n] if isinstance(h_n, torch.Tensor) else list(h_n)
    return (out * r).sum() + sum(torch.tanh(h).sum() for h in leaves)


def _second_order(layer: Recurrent, x, r, kwargs):
    """The gradient-penalty probe and a Hessian-vector product, both over the parameters."""
    params = [p for p in layer.parameters()]
    x = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(_loss(layer, x, r, kwargs), x, create_graph=True)
    penalty = torch.autograd.grad(gx.pow(2).sum(), params, allow_unused=True)
    grads = torch.autograd.grad(_loss(layer, x, r, kwargs), params, create_graph=True)
    v = [torch.randn(p.shape, generator=torch.Generator().manual_seed(i), dtype=D) for i, p in enumerate(params)]
    hv = torch.autograd.grad(sum((g * w).sum() for g, w in zip(grads, v)), params, allow_unused=True)
    return penalty, hv


def _gradgradcheck(layer: Recurrent, x, kwargs) -> bool:
    """gradgradcheck over the input and every parameter (over the input alone with
    checkpointing: its recomputation in backward runs after ``functional_call`` has put the
    module's own parameters back)."""
    names = [n for n, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())
    if layer.checkpoint_chunk is not None:

        def fx(x):
            out, h_n = layer(x, **kwargs)
            return out, h_n

        return torch.autograd.gradgradcheck(fx, (x.clone().requires_grad_(),), fast_mode=True)

    def f(x, *ps):
        out, h_n = functional_call(layer, dict(zip(names, ps)), (x,), kwargs)
        return (out, *([h_n] if isinstance(h_n, torch.Tensor) else h_n))

    return torch.autograd.gradgradcheck(f, (x.clone().requires_grad_(), *params), fast_mode=True)


def test_every_family_is_covered():
    assert FAMILIES_COVERED == set(CELLS)


@pytest.mark.parametrize("case", CASES + PROBE_ONLY, ids=[c[0] for c in CASES + PROBE_ONLY])
def test_second_order_gradients_equal_the_reference_loop(case):
    _, key, cell_options, layer_options = case
    layer, kwargs = _layer(key, cell_options, layer_options)
    x, r = _inputs(layer)
    got = _second_order(layer, x, r, kwargs)
    want = _second_order(_reference_twin(layer), x, r, kwargs)
    for a_list, b_list in zip(got, want):
        for a, b in zip(a_list, b_list):
            if b is None:  # a parameter the reference's result does not depend on
                assert a is None or float(a.abs().max()) < 1e-10
                continue
            assert a is not None, "a parameter lost its second-order gradient"
            torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradgradcheck_float64(case):
    _, key, cell_options, layer_options = case
    layer, kwargs = _layer(key, cell_options, layer_options)
    x, _ = _inputs(layer)
    assert _gradgradcheck(layer, x, kwargs)


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_fused_kernels_without_second_order_refuse_and_name_the_way_out(case):
    _, key, cell_options, way_out = case
    layer, kwargs = _layer(key, cell_options, {})
    x, r = _inputs(layer)
    loss = _loss(layer, x, r, kwargs)
    loss.backward()  # first order: the fused kernel as always
    x = x.clone().requires_grad_()
    with pytest.raises(RuntimeError, match=rf"second-order gradients .*create_graph=True.*{way_out}"):
        torch.autograd.grad(_loss(layer, x, r, kwargs), x, create_graph=True)
    for cell in layer.cells:  # the way out the message names
        cell.backend = way_out.split("'")[1]
    ref = _reference_twin(layer)
    got, want = _second_order(layer, x.detach(), r, kwargs), _second_order(ref, x.detach(), r, kwargs)
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9)


_TRITON_SCRIPT = r"""
import torch
from rnnlab.kernels import elementwise_rnn, triton_recurrence as tr
from rnnlab.cells import ASRNN
calls = []
real = tr.triton_elementwise_rnn
tr.triton_elementwise_rnn = lambda *a, **k: calls.append(1) or real(*a, **k)
D = torch.float64
g = torch.Generator().manual_seed(0)
u = torch.randn(3, 2, 3, generator=g, dtype=D, requires_grad=True)
W = (0.5 * torch.randn(3, 3, generator=g, dtype=D)).requires_grad_()
h0 = torch.randn(2, 3, generator=g, dtype=D, requires_grad=True)
b = (0.3 * torch.randn(3, generator=g, dtype=D)).requires_grad_()
lengths = torch.tensor([3, 1])
for act, bias in (("tanh", None), ("modrelu", b)):
    ins = [t for t in (u, W, h0, bias) if t is not None]
    f = lambda u, W, h0, *bb: elementwise_rnn(u, W, h0, act, bb[0] if bb else None, lengths)
    assert torch.autograd.gradgradcheck(f, ins, fast_mode=True), act
assert calls, "the Triton kernel never ran"
torch.manual_seed(0)
layer = ASRNN(2, 3, a=0.5, b=1.5).double()
x = torch.randn(3, 2, 2, dtype=D, requires_grad=True)
results = []
for backend in ("auto", "reference"):
    for cell in layer.cells:
        cell.backend = backend
    n = len(calls)
    (gx,) = torch.autograd.grad(layer(x)[0].sum(), x, create_graph=True)
    results.append(torch.autograd.grad(gx.pow(2).sum(), list(layer.parameters())))
    assert (len(calls) > n) == (backend == "auto")
for a, c in zip(*results):
    torch.testing.assert_close(a, c, rtol=1e-7, atol=1e-9)
print("ok")
"""


def test_triton_path_second_order_through_the_interpreter():
    """The Triton kernel (under Triton's CPU interpreter, forced) keeps exact second
    derivatives: gradgradcheck of the recurrence, and asRNN's gradient penalty equal to the
    step loop's. A subprocess: the interpreter must be set before Triton is imported."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'rnnlab[triton]')")
    env = dict(os.environ, TRITON_INTERPRET="1", RNNLAB_TRITON="force")
    src = Path(__file__).resolve().parents[2] / "src"
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _TRITON_SCRIPT], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
