"""The readout fold: a SequenceModel whose cell computes in other coordinates (asRNN: g = W_f h)
applies ``W_o W_f^{-1}`` to g instead of mapping every step back to h. Checked in float64
against the step loop (logits, final state and every gradient) and against the unfolded path."""

import pytest
import torch

from rnnlab import Recurrent
from rnnlab.cells import CELLS
from rnnlab.model import SequenceModel

torch.set_num_threads(1)
D = torch.float64


def make_model(readout="all", seed=0, **kw):
    torch.manual_seed(seed)
    m = SequenceModel("asrnn", 5, 7, 12, readout=readout, cell_options={"a": 0.3, "b": 1.2}, **kw).double()
    cell = m.rnn.cells[-1]
    with torch.no_grad():  # a dense U_f and a spread D_f, well within the fast path's range
        cell.parametrizations.weight_uf.original.normal_(0, 0.3)
        cell.bias.normal_(0, 0.1)
    return m


def set_backend(m, backend):
    for c in m.rnn.cells:
        c.backend = backend


def grads(m, x, lengths=None, h0=None):
    m.zero_grad()
    out, state = m(x, h0, lengths)
    g = torch.Generator().manual_seed(3)
    loss = (out * torch.randn(out.shape, generator=g, dtype=D)).sum()
    loss = loss + (state * torch.randn(state.shape, generator=g, dtype=D)).sum()
    loss.backward()
    return out.detach(), state.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}


def assert_same(a, b, rtol=1e-10):
    for u, v in zip(a[:2], b[:2]):
        torch.testing.assert_close(u, v, rtol=rtol, atol=rtol * v.abs().max().item())
    for n in b[2]:
        scale = b[2][n].abs().max().item()
        assert scale > 0, n
        torch.testing.assert_close(a[2][n], b[2][n], rtol=rtol, atol=rtol * scale, msg=n)


@pytest.mark.parametrize("readout", ["all", "last"])
def test_folded_readout_equals_the_step_loop(readout):
    m = make_model(readout)
    x = torch.randn(4, 30, 5, dtype=D)
    h0 = 0.3 * torch.randn(1, 4, 12, dtype=D)
    z, _, M = m.rnn.forward_mapped(x)
    assert M is not None, "the asRNN fast path should hand its map to the readout"
    folded = grads(m, x, h0=h0)
    set_backend(m, "reference")
    assert m.rnn.forward_mapped(x)[2] is None
    assert_same(folded, grads(m, x, h0=h0))


def test_folded_readout_with_lengths_equals_the_step_loop():
    m = make_model("last")
    x = torch.randn(4, 15, 5, dtype=D)
    lengths = torch.tensor([15, 4, 9, 1])
    folded = grads(m, x, lengths)
    set_backend(m, "reference")
    assert_same(folded, grads(m, x, lengths))


def test_mapped_outputs_map_back_to_the_layer_outputs():
    layer = Recurrent(5, 12, num_layers=2, cell=CELLS["asrnn"], a=0.5, b=1.0).double()
    x = torch.randn(9, 3, 5, dtype=D)
    out, h_n = layer(x)
    z, h_n2, M = layer.forward_mapped(x)
    assert M is not None and not torch.allclose(z, out)  # really other coordinates
    torch.testing.assert_close(z @ M.T, out)
    torch.testing.assert_close(h_n2, h_n)


def test_no_fold_through_dropout_or_pooling():
    """Dropout (while training) and l2 pooling sit between the layer and the readout and are
    not linear maps that commute with W_f^{-1}: the model must not fold there."""
    x = torch.randn(2, 8, 5, dtype=D)
    for kw in ({"pool": 3}, {"dropout": 0.5}):
        m = make_model(**kw)
        m.train()
        calls = []
        orig = m.rnn.forward_mapped
        m.rnn.forward_mapped = lambda *a, **k: calls.append(1) or orig(*a, **k)
        torch.manual_seed(0)
        out = m(x)[0]
        assert not calls, kw
        set_backend(m, "reference")
        torch.manual_seed(0)
        torch.testing.assert_close(out, m(x)[0])
    m = make_model(dropout=0.5).eval()  # dropout is the identity in eval: folding is exact
    folded = m(x)[0]
    set_backend(m, "reference")
    torch.testing.assert_close(folded, m(x)[0])


def test_cells_without_a_map_return_none():
    for key in ("rnn", "lstm", "exprnn"):
        layer = Recurrent(3, 4, cell=CELLS[key])
        x = torch.randn(5, 2, 3)
        z, h_n, M = layer.forward_mapped(x)
        assert M is None
        out, h_ref = layer(x)
        torch.testing.assert_close(z, out)
        torch.testing.assert_close(h_n, h_ref)
