"""One-hot inputs of an ensemble given to the first layer as their tokens
(rnnlab.kernels.ensemble.one_hot_stand_in): the batched model against each member run alone
(the one-hot vectors and F.linear, through the cells' step loop), forward and backward in
float64; the gather against the product it replaces, bit for bit forward; and the cases that
keep the one-hot vectors (a path that reads its input otherwise)."""

import pytest
import torch
from torch.func import vmap

from rnnlab.kernels import ensemble as K
from rnnlab.model import SequenceModel
from rnnlab.stacked_model import StackedModel

D = torch.float64
V = 9  # tokens


pytestmark = pytest.mark.usefixtures("float64_default")  # tests/conftest.py, as `gathers`


def _models(cell, E, H, layers, readout, options=None):
    out = []
    for k in range(E):
        torch.manual_seed(20 + k)
        out.append(SequenceModel(cell, V, 2, H, num_layers=layers, readout=readout, num_tokens=V, cell_options=options))
    return out


CASES = [  # cell, hidden size, layers, readout, lengths, B, T
    ("rnn", 4, 1, "all", False, 3, 6),
    ("irnn", 3, 2, "last", True, 4, 4),  # B == T: the strides tell the orientation
    ("lstm", 3, 1, "last", True, 5, 4),
    ("gru", 2, 2, "all", False, 4, 4),
    ("gru", 3, 1, "last", True, 2, 7),
    ("dmu", 4, 1, "all", True, 3, 5),
    ("rhn", 3, 1, "all", False, 5, 5),
]


@pytest.mark.parametrize("cell,H,layers,readout,lengths,B,T", CASES)
def test_token_inputs_equal_each_member_alone(cell, H, layers, readout, lengths, B, T, gathers):
    E = 3
    models = _models(cell, E, H, layers, readout)
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (E, B, T), generator=gen)
    L = torch.randint(1, T + 1, (E, B), generator=gen) if lengths else None
    out, state = StackedModel(models[0]).forward(models, x, None, L)
    assert gathers[0] >= 1, "the first layer did not read the tokens"
    w = torch.randn(out.shape, generator=gen)
    (out * w).sum().backward()
    batched = [[p.grad.clone() for p in m.parameters()] for m in models]
    for k, m in enumerate(models):
        m.zero_grad()
        for c in m.rnn.cells:
            c.backend = "reference"  # each member alone: one-hot vectors, F.linear, the step loop
        o, s = m(x[k], None, None if L is None else L[k])
        torch.testing.assert_close(out[k], o, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(torch.utils._pytree.tree_map(lambda t: t[k], state), s, rtol=1e-12, atol=1e-12)
        (o * w[k]).sum().backward()
        for p, g in zip(m.parameters(), batched[k]):
            torch.testing.assert_close(g, p.grad, rtol=1e-10, atol=1e-12)


def test_shared_input_and_the_path_before(gathers, monkeypatch):
    """An evaluation's one batch for all members reads the tokens too, and gives what the
    one-hot product (TOKEN_INPUTS off) gives: outputs equal, gradients to rounding."""
    models = _models("gru", 4, 3, 2, "all")
    x = torch.randint(0, V, (6, 8), generator=torch.Generator().manual_seed(2))
    stacked = StackedModel(models[0])

    def run():
        out, _ = stacked.forward(models, x, None, None, shared=True)
        grads = torch.autograd.grad(out.square().sum(), [p for m in models for p in m.parameters()])
        return out, grads

    out, grads = run()
    assert gathers[0] == 1
    monkeypatch.setattr(K, "TOKEN_INPUTS", False)
    out0, grads0 = run()
    assert gathers[0] == 1  # the path before: no gather
    assert torch.equal(out, out0)
    for a, b in zip(grads, grads0):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_gather_is_the_one_hot_product(time_major, bias):
    """_token_rows against _rows_product of the one-hot vectors: the same values bit for bit
    (b + W[:, k] rounds once either way), the gradients of W and b to rounding (float64)."""
    E, B, T, G = 3, 4, 4, 5
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, V, (E, B, T), generator=g)
    W = torch.randn(E, G, V, generator=g, requires_grad=True)
    b = torch.randn(E, G, generator=g, requires_grad=True) if bias else None
    stand_in = K.one_hot_stand_in(tokens[0], V, D).expand(E, B, T, V)
    one_hot = torch.nn.functional.one_hot(tokens, V).to(D)
    if time_major:
        stand_in, one_hot = stand_in.transpose(1, 2), one_hot.transpose(1, 2)
    (got,) = K._token_rows(tokens, stand_in, W, b)
    (want,) = K._rows_product(one_hot, W, b)
    assert got.shape == want.shape == ((E, T, B, G) if time_major else (E, B, T, G))
    assert torch.equal(got, want)
    dy = torch.randn(got.shape, generator=g)
    params = [t for t in (W, b) if t is not None]
    for a, w in zip(torch.autograd.grad(got, params, dy), torch.autograd.grad(want, params, dy)):
        torch.testing.assert_close(a, w, rtol=1e-12, atol=1e-13)


def test_stand_in_is_nan_and_kept_from_other_paths(gathers):
    """The stand-in holds NaN (a path reading it otherwise would show it); a cell whose batched
    path is not the compiled loops (here the fused backend) gets the one-hot vectors."""
    x = torch.randint(0, V, (2, 3))
    assert torch.isnan(K.one_hot_stand_in(x, V, D)).all()
    models = _models("gru", 2, 3, 1, "all", {"backend": "fused"})
    out, _ = StackedModel(models[0]).forward(models, torch.stack([x, x]), None, None)
    assert gathers[0] == 0 and torch.isfinite(out).all()
    models = _models("rnn", 2, 3, 1, "all", {"bidirectional": True})
    out, _ = StackedModel(models[0]).forward(models, torch.stack([x, x]), None, None)
    assert gathers[0] == 0 and torch.isfinite(out).all()


def test_stand_in_read_by_batched_linear_under_vmap():
    """batched_linear of the stand-in inside vmap is F.linear of the one-hot vectors per member."""
    E, B, T, G = 2, 3, 5, 4
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, V, (E, B, T), generator=g)
    W = torch.randn(E, G, V, generator=g)
    b = torch.randn(E, G, generator=g)

    def one(tok, w, bb):
        return K.batched_linear(K.one_hot_stand_in(tok, V, D).transpose(0, 1), w, bb)

    out = vmap(one)(tokens, W, b)
    want = torch.stack(
        [
            torch.nn.functional.linear(torch.nn.functional.one_hot(tokens[k], V).to(D).transpose(0, 1), W[k], b[k])
            for k in range(E)
        ]  # fmt: skip
    )
    assert torch.equal(out, want)


@pytest.mark.parametrize("cell,H,layers,readout,lengths,B,T", CASES[:3] + CASES[5:])
def test_a_single_run_reads_the_tokens_too(cell, H, layers, readout, lengths, B, T, gathers):
    """A single run (no ensemble) whose first layer runs the compiled loops gathers too: its
    outputs and gradients against the same model's step loop on the one-hot vectors."""
    (model,) = _models(cell, 1, H, layers, readout)
    gen = torch.Generator().manual_seed(5)
    x = torch.randint(0, V, (B, T), generator=gen)
    L = torch.randint(1, T + 1, (B,), generator=gen) if lengths else None
    out, state = model(x, None, L)
    assert gathers[0] == 1
    w = torch.randn(out.shape, generator=gen)
    got = torch.autograd.grad((out * w).sum(), list(model.parameters()))
    for c in model.rnn.cells:
        c.backend = "reference"
    o, s = model(x, None, L)
    assert gathers[0] == 1  # the step loop reads the one-hot vectors
    torch.testing.assert_close(out, o, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(state, s, rtol=1e-12, atol=1e-12)
    for g, want in zip(got, torch.autograd.grad((o * w).sum(), list(model.parameters()))):
        torch.testing.assert_close(g, want, rtol=1e-10, atol=1e-12)
