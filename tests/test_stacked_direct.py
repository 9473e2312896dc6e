"""The direct forward of an ensemble's batched model (StackedModel.direct_plan): a covered model
(one recurrent layer of RNN/IRNN, LSTM, GRU, RHN or DMU between a linear or one-hot input and a
linear readout) runs on the stacked parameters without vmap. Its outputs, final states and the
members' parameter gradients equal the vmap path's (stacked_model.DIRECT = False) in float64,
with and without lengths, with token (one-hot) inputs, a carried state and the last-step
readout; a model of another shape falls back to the vmap path."""

import pytest
import torch

from rnnlab import stacked_model
from rnnlab.kernels import dispatch
from rnnlab.model import SequenceModel
from rnnlab.stacked_model import StackedModel

E, B, T = 3, 4, 6
CELLS = [
    ("rnn", {}),
    ("irnn", {}),
    ("lstm", {}),
    ("gru", {}),
    ("rhn", {}),
    ("dmu", {}),
    ("dmu", {"layers": []}),
]


def _models(cell, opts, tokens=0, readout="all", hidden=5, **kw):
    out = []
    for k in range(E):
        torch.manual_seed(10 + k)
        out.append(
            SequenceModel(cell, 3, 2, hidden, readout=readout, num_tokens=tokens or None, cell_options=opts, **kw)
        )
    return [m.double() for m in out]


def _run(models, x, lengths, state, direct, shared=False):
    old = stacked_model.DIRECT
    stacked_model.DIRECT = direct
    try:
        for m in models:
            m.zero_grad(set_to_none=True)
        stacked = StackedModel(models[0])
        stacked.keep_stacked(models)
        out, new = stacked.forward(models, x, state, lengths, shared=shared)
        leaves = torch.utils._pytree.tree_leaves(new)
        w = torch.linspace(0.5, 2, out.numel(), dtype=out.dtype).view(out.shape)
        loss = (out * w).sum() + sum((s * s).sum() for s in leaves)
        loss.backward()
        grads = [[p.grad.clone() for p in m.parameters()] for m in models]
        return stacked.last_path, out.detach(), [s.detach() for s in leaves], grads
    finally:
        stacked_model.DIRECT = old


def _same(a, b):
    path_a, out_a, st_a, g_a = a
    path_b, out_b, st_b, g_b = b
    assert (path_a, path_b) == ("direct", "vmap")
    torch.testing.assert_close(out_a, out_b, rtol=0, atol=1e-12)
    for s, t in zip(st_a, st_b, strict=True):
        torch.testing.assert_close(s, t, rtol=0, atol=1e-12)
    for ga, gb in zip(g_a, g_b, strict=True):
        for u, v in zip(ga, gb, strict=True):
            torch.testing.assert_close(u, v, rtol=0, atol=1e-12)


@pytest.fixture(autouse=True)
def _float64():
    """(one-hot inputs come in the default dtype)"""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _lengths():
    return torch.tensor([[6, 3, 1, 5], [2, 6, 6, 4], [1, 1, 3, 6]])


@pytest.mark.parametrize("cell,opts", CELLS, ids=[f"{c}{'-' + str(o) if o else ''}" for c, o in CELLS])
@pytest.mark.parametrize("lengths", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("tokens", [False, True], ids=["features", "tokens"])
def test_direct_forward_equals_the_vmap_path(cell, opts, lengths, tokens):
    g = torch.Generator().manual_seed(1)
    models = _models(cell, opts, tokens=7 if tokens else 0)
    x = torch.randint(0, 7, (E, B, T), generator=g) if tokens else torch.randn(E, B, T, 3, generator=g).double()
    lens = _lengths() if lengths else None
    _same(_run(models, x, lens, None, True), _run(models, x, lens, None, False))


@pytest.mark.parametrize("cell,opts", [("lstm", {}), ("dmu", {})])
def test_direct_forward_with_a_state_a_last_readout_and_a_shared_batch(cell, opts):
    g = torch.Generator().manual_seed(2)
    models = _models(cell, opts, readout="last")
    x = torch.randn(E, B, T, 3, generator=g).double()
    h = torch.randn(E, 1, B, 5, generator=g).double()
    state = (h, torch.randn(E, 1, B, 5, generator=g).double()) if cell == "lstm" else h
    _same(_run(models, x, _lengths(), state, True), _run(models, x, _lengths(), state, False))
    # one batch for all members (an evaluation's call)
    _same(_run(models, x[0], _lengths()[0], None, True, True), _run(models, x[0], _lengths()[0], None, False, True))


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru", "dmu"])
@pytest.mark.parametrize("hidden", [5, [5, 4]], ids=["same-widths", "mixed-widths"])
def test_direct_forward_of_two_layers(cell, hidden):
    """Two layers (the DMU presets' RNN, LSTM and GRU), with a carried state and the last-step
    readout: per layer the cell's own call, the states stacked (a list for mixed widths) as Recurrent's."""
    g = torch.Generator().manual_seed(6)
    models = _models(cell, {}, tokens=7, readout="last", hidden=hidden, num_layers=2)
    x = torch.randint(0, 7, (E, B, T), generator=g)
    widths = hidden if isinstance(hidden, list) else [hidden, hidden]

    def draw(H, layers):
        return torch.randn(E, *layers, B, H, generator=g).double()

    if isinstance(hidden, list):
        state = [(draw(H, ()), draw(H, ())) if cell == "lstm" else draw(H, ()) for H in widths]
    else:
        state = (draw(hidden, (2,)), draw(hidden, (2,))) if cell == "lstm" else draw(hidden, (2,))
    for s in (None, state):
        _same(_run(models, x, _lengths(), s, True), _run(models, x, _lengths(), s, False))


def test_direct_forward_on_the_ensemble_loops_above_the_compiled_widths():
    """Wider than the compiled loops take: the ensemble_<family> loops (LSTM, GRU, RHN, DMU)."""
    width = max(dispatch.AUTO_MAX_WIDTH.values()) + 2
    g = torch.Generator().manual_seed(3)
    for cell in ("lstm", "gru", "rhn", "dmu"):
        models = _models(cell, {}, hidden=width)
        x = torch.randn(E, B, T, 3, generator=g).double()
        assert StackedModel(models[0]).direct_plan(x)[1] not in dispatch.COMPILED
        for lens in (None, _lengths()):
            _same(_run(models, x, lens, None, True), _run(models, x, lens, None, False))


@pytest.mark.parametrize(
    "kw",
    [{"num_layers": 2, "dropout": 0.25}, {"pool": 5}, {"dense": 3}, {"cell_options": {"bidirectional": True}}],
    ids=["dropout", "pool", "dense", "bidirectional"],
)
def test_other_models_fall_back_to_vmap(kw):
    opts = kw.pop("cell_options", {})
    models = _models("gru", opts, **kw)
    x = torch.randn(E, B, T, 3, generator=torch.Generator().manual_seed(4)).double()
    assert StackedModel(models[0]).direct_plan(x) is None
    if "dropout" not in kw:  # (dropout while training cannot run under vmap at all)
        assert _run(models, x, None, None, True)[0] == "vmap"


def test_modrelu_rnn_and_the_reference_template_fall_back():
    models = _models("rnn", {"nonlinearity": "modrelu"})
    x = torch.randn(E, B, T, 3, generator=torch.Generator().manual_seed(5)).double()
    assert _run(models, x, None, None, True)[0] == "vmap"
    stacked = StackedModel(_models("gru", {})[0], fast=False)
    assert stacked.direct_plan(x) is None
