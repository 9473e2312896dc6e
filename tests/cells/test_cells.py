"""Cell contract, the reference loop, and the nn.RNN-style layer."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import rnnlab
from conftest import copy_weights_from_torch, torch_twins
from rnnlab.cells import CELLS, Recurrent, unroll
from rnnlab.kernels import map_state


def make(key, I=5, H=8, **kw):
    torch.manual_seed(0)
    return CELLS[key](I, H, **kw)


@pytest.mark.parametrize("key", sorted(CELLS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_step_shapes_and_dtypes(key, dtype):
    cell = make(key).to(dtype)
    state = cell.init_state(3)
    h, state2 = cell(torch.randn(3, 5, dtype=dtype), state)
    assert h.shape == (3, 8) and h.dtype == dtype
    leaves = [state2] if isinstance(state2, torch.Tensor) else list(state2)
    assert all(s.shape == (3, 8) and s.dtype == dtype for s in leaves)


@pytest.mark.parametrize("key", sorted(CELLS))
def test_unroll_equals_explicit_step_loop(key):
    cell = make(key).double()
    x = torch.randn(6, 3, 5, dtype=torch.float64)
    out, final = unroll(cell, x)
    state = cell.init_state(3)
    for t in range(6):
        h, state = cell(x[t], state)
        torch.testing.assert_close(out[t], h)
    map_state(torch.testing.assert_close, final, state)


@pytest.mark.parametrize("key", sorted(CELLS))
def test_fast_path_equals_reference_forward_and_backward(key):
    """Whatever ``sequence`` does for backend="auto", it equals the reference loop in float64."""
    fast = make(key).double()
    ref = make(key, backend="reference").double()
    ref.load_state_dict(fast.state_dict())
    x = torch.randn(7, 4, 5, dtype=torch.float64, requires_grad=True)
    h0 = map_state(lambda s: s.normal_(), fast.init_state(4))
    outs = []
    for cell in (fast, ref):
        out, final = cell.sequence(x, h0)
        loss = out.pow(2).sum() + sum(s.sum() for s in ([final] if isinstance(final, torch.Tensor) else final))
        grads = torch.autograd.grad(loss, [x] + list(cell.parameters()))
        outs.append((out, grads))
    torch.testing.assert_close(outs[0][0], outs[1][0])
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("ours,theirs,kw", torch_twins())
@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_layers_equal_torch_native_with_copied_weights(ours, theirs, kw, backend):
    torch.manual_seed(1)
    ref = theirs(5, 8, num_layers=2, batch_first=True, **kw).double()
    layer = Recurrent(5, 8, num_layers=2, batch_first=True, cell=CELLS[ours], backend=backend, **kw).double()
    copy_weights_from_torch(layer, ref)
    x = torch.randn(3, 9, 5, dtype=torch.float64)
    out_ref, h_ref = ref(x)
    out, h = layer(x)
    torch.testing.assert_close(out, out_ref)
    map_state(torch.testing.assert_close, h, h_ref)
    # gradients of the native and ours agree too
    g1 = torch.autograd.grad(out.sum(), list(layer.parameters()))
    g2 = torch.autograd.grad(out_ref.sum(), list(ref.parameters()))
    torch.testing.assert_close(sorted(g.sum().item() for g in g1), sorted(g.sum().item() for g in g2))


@pytest.mark.parametrize("key", sorted(CELLS))
def test_lengths_and_packed_sequence(key):
    """Each sequence's final state is the state after its own last step; padded outputs are 0;
    a PackedSequence gives the same result as the lengths path."""
    torch.manual_seed(2)
    layer = Recurrent(5, 8, batch_first=True, cell=CELLS[key]).double()
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    lengths = torch.tensor([6, 2, 4])
    out, h = layer(x, lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        out_b, h_b = layer(x[b : b + 1, :n])
        torch.testing.assert_close(out[b, :n], out_b[0])
        assert out[b, n:].abs().max().item() == 0 if n < 6 else True
        map_state(lambda s, r: torch.testing.assert_close(s[:, b], r[:, 0]), h, h_b)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    pout, ph = layer(packed)
    pout, plen = pad_packed_sequence(pout, batch_first=True)
    torch.testing.assert_close(pout, out)
    map_state(torch.testing.assert_close, ph, h)


def test_h0_is_used_and_layout_matches_torch():
    torch.manual_seed(3)
    layer = rnnlab.LSTM(4, 6, num_layers=2)
    h0 = (torch.randn(2, 3, 6), torch.randn(2, 3, 6))
    x = torch.randn(5, 3, 4)
    out0, _ = layer(x)
    out1, (h, c) = layer(x, h0)
    assert not torch.allclose(out0, out1)
    assert h.shape == c.shape == (2, 3, 6)
    torch.testing.assert_close(out1[-1], h[-1])


def test_bad_inputs_give_clear_errors():
    layer = rnnlab.GRU(4, 6, batch_first=True)
    with pytest.raises(ValueError, match="input_size=4"):
        layer(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="3-D input"):
        layer(torch.randn(4))
    with pytest.raises(ValueError, match="lengths"):
        layer(torch.randn(2, 3, 4), lengths=torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="backend"):
        rnnlab.RNNCell(4, 6, backend="fast")
    with pytest.raises(ValueError, match="nonlinearity"):
        rnnlab.RNNCell(4, 6, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="positive"):
        rnnlab.LSTMCell(0, 6)


def test_irnn_init_and_lstm_forget_bias():
    irnn = CELLS["irnn"](3, 5)
    torch.testing.assert_close(irnn.weight_hh, torch.eye(5))
    assert irnn.bias_hh.abs().sum() == 0 and irnn.nonlinearity == "relu"
    lstm = rnnlab.LSTMCell(3, 5, forget_bias=1.0)
    assert torch.all(lstm.bias_ih[5:10] == 1.0) and torch.all(lstm.bias_hh[5:10] == 0.0)


def test_orthogonal_cells_tag_their_free_parameter():
    for key in ("exprnn", "scornn"):
        cell = make(key, H=10)
        groups = cell.param_groups()
        assert [p.shape for p in groups["orthogonal"]] == [(10, 10)]
        assert cell.free_parameter_count() == 10 * 5 + 10 + 45
        W = cell.weight_hh.detach()
        torch.testing.assert_close(W.T @ W, torch.eye(10), atol=1e-5, rtol=0)


def test_scornn_scaling_has_requested_negatives():
    cell = rnnlab.SCORNNCell(3, 8, init="identity", negatives=3)
    torch.testing.assert_close(cell.weight_hh.detach(), torch.diag(torch.tensor([1.0] * 5 + [-1.0] * 3)))


def test_lstm_forget_bias_in_both_biases_as_the_dmu_authors_code():
    """forget_bias=2, forget_bias_hh=2: 2 in the f slice of b_ih and of b_hh (4 in effect), the
    other slices torch's uniform init; forget_bias_hh without forget_bias is refused."""
    lstm = rnnlab.LSTMCell(3, 5, forget_bias=2.0, forget_bias_hh=2.0)
    assert torch.all(lstm.bias_ih[5:10] == 2.0) and torch.all(lstm.bias_hh[5:10] == 2.0)
    assert not torch.any(lstm.bias_ih[:5] == 2.0) and not torch.any(lstm.bias_hh[10:] == 2.0)
    with pytest.raises(ValueError, match="forget_bias_hh=2.0 needs forget_bias"):
        rnnlab.LSTMCell(3, 5, forget_bias_hh=2.0)


def test_rhn_linear_init_is_torch_linears_default():
    """init="linear": the input weights within 1/sqrt(I), the recurrent weights and biases within
    1/sqrt(H) and spread over that range (no transform bias), as a default nn.Linear."""
    torch.manual_seed(0)
    I, H = 2, 400
    cell = CELLS["rhn"](I, H, depth=3, init="linear")
    for p, k in ((cell.weight_ih, I**-0.5), (cell.weight_hh, H**-0.5), (cell.bias, H**-0.5)):
        assert p.abs().max() <= k and p.abs().max() > 0.95 * k
    assert abs(cell.bias[:, H:].mean().item()) < 0.01  # the transform gate starts near 0.5
    default = CELLS["rhn"](I, H, depth=3)
    assert torch.all(default.bias[:, H:] == -2.0) and default.weight_ih.abs().max() <= H**-0.5
    with pytest.raises(ValueError, match="RHN init must be"):
        CELLS["rhn"](I, H, init="xavier")
