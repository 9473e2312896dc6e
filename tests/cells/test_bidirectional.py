"""``bidirectional=True`` layers, as ``torch.nn.RNN``: output [forward; backward] (2H wide),
h_n with 2 * num_layers entries (layer 0 forward, layer 0 backward, layer 1 forward, ...)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from conftest import copy_weights_from_torch as copy_from_torch
from conftest import torch_twins
from rnnlab.cells import CELLS, Recurrent
from rnnlab.kernels import map_state


@pytest.mark.parametrize("ours,theirs,kw", torch_twins())
@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_bidirectional_equals_torch_with_copied_weights(ours, theirs, kw, backend):
    torch.manual_seed(1)
    ref = theirs(4, 5, num_layers=2, batch_first=True, bidirectional=True, **kw).double()
    layer = Recurrent(
        4, 5, num_layers=2, batch_first=True, bidirectional=True, cell=CELLS[ours], backend=backend, **kw
    ).double()
    copy_from_torch(layer, ref)
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    h0 = map_state(lambda s: torch.randn(4, 3, 5, dtype=torch.float64), layer.cells[0].init_state(3))
    for args in ((x,), (x, h0)):
        out_ref, h_ref = ref(*args)
        out, h = layer(*args)
        assert out.shape == (3, 6, 10)
        torch.testing.assert_close(out, out_ref)
        map_state(torch.testing.assert_close, h, h_ref)
    # variable lengths: torch runs a PackedSequence, each sequence reversed within its length
    lengths = torch.tensor([6, 2, 4])
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out_ref, h_ref = ref(packed, h0)
    out_ref, _ = pad_packed_sequence(out_ref, batch_first=True)
    out, h = layer(x, h0, lengths=lengths)
    torch.testing.assert_close(out, out_ref)
    map_state(torch.testing.assert_close, h, h_ref)
    pout, ph = layer(packed, h0)
    torch.testing.assert_close(pad_packed_sequence(pout, batch_first=True)[0], out_ref)
    map_state(torch.testing.assert_close, ph, h_ref)


@pytest.mark.parametrize("key", sorted(CELLS))
def test_backward_direction_is_the_reversed_sequence_run_alone(key):
    """The backward half of the output is the reverse cell run on each sequence reversed within
    its own length, one sequence at a time; zeros past each length."""
    torch.manual_seed(2)
    layer = Recurrent(3, 4, bidirectional=True, cell=CELLS[key]).double()
    fwd, bwd = layer.cells
    x = torch.randn(5, 3, 3, dtype=torch.float64)
    lengths = torch.tensor([5, 2, 4])
    out, h_n = layer(x, lengths=lengths)
    assert out.shape == (5, 3, 8)
    for b, n in enumerate(lengths.tolist()):
        xb = x[:n, b : b + 1]
        o_f, s_f = fwd.sequence(xb)
        o_b, s_b = bwd.sequence(xb.flip(0))
        torch.testing.assert_close(out[:n, b, :4], o_f[:, 0])
        torch.testing.assert_close(out[:n, b, 4:], o_b.flip(0)[:, 0])
        assert out[n:, b].abs().sum() == 0
        map_state(lambda h, s: torch.testing.assert_close(h[0, b], s[0]), h_n, s_f)
        map_state(lambda h, s: torch.testing.assert_close(h[1, b], s[0]), h_n, s_b)
    # without lengths: a plain flip of the whole sequence
    out, _ = layer(x)
    torch.testing.assert_close(out[..., 4:], bwd.sequence(x.flip(0))[0].flip(0))


def test_bidirectional_layer_shapes_and_second_layer_width():
    layer = Recurrent(3, 4, num_layers=3, bidirectional=True, cell=CELLS["dmu"], layers=[])
    assert len(layer.cells) == 6
    assert [c.input_size for c in layer.cells] == [3, 3, 8, 8, 8, 8]
    out, h = layer(torch.randn(5, 2, 3))
    assert out.shape == (5, 2, 8) and h.shape == (6, 2, 4)
    with pytest.raises(ValueError, match=r"Expected hidden size \(6, 2, 4\), got \[3, 2, 4\]"):
        layer(torch.randn(5, 2, 3), torch.zeros(3, 2, 4))


def test_sequence_model_with_a_bidirectional_layer_and_seq2seq_refusal():
    from rnnlab.model import Seq2Seq, SequenceModel

    torch.manual_seed(0)
    model = SequenceModel("gru", 3, 7, 4, num_layers=2, cell_options={"bidirectional": True}, pool=2)
    assert model.readout.in_features == 8 + 4
    out, h = model(torch.randn(2, 5, 3))
    assert out.shape == (2, 5, 7) and h.shape == (4, 2, 4)
    with pytest.raises(ValueError, match="bidirectional"):
        Seq2Seq("gru", 10, 10, 4, cell_options={"bidirectional": True})
