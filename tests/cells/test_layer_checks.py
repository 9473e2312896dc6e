"""Every layer and cell checks its input and state before any kernel runs.

Each case used to give a wrong-width output, garbage, a heap corruption (``rnnlab.LSTM`` with
a wrong-sized ``h0``) or a torch-internal error in some layers; now every layer of
``rnnlab.CELLS`` raises the same one-line ``ValueError`` (or, for a batch of size 0, returns
an empty result as ``torch.nn.LSTM`` does).
"""

from __future__ import annotations

import pytest
import torch

import rnnlab
from rnnlab.cells import CELLS, Recurrent
from rnnlab.kernels import map_state

KEYS = sorted(CELLS)
I, H, L, T, B = 3, 4, 2, 5, 3


def layer_of(key, **kw):
    torch.manual_seed(0)
    return Recurrent(I, H, num_layers=L, cell=CELLS[key], **kw)


def good_h0(layer, batch=B, n=None):
    n = n or layer.num_directions * layer.num_layers
    proto = layer.cells[0].init_state(batch)
    return map_state(lambda s: torch.randn(n, batch, H), proto)


def is_tuple_state(layer):
    return not isinstance(layer.cells[0].init_state(1), torch.Tensor)


@pytest.mark.parametrize("key", KEYS)
def test_h0_of_the_wrong_size_is_refused_before_any_kernel(key):
    layer = layer_of(key)
    x = torch.randn(T, B, I)
    out, h_n = layer(x, good_h0(layer))  # the right one runs
    assert out.shape == (T, B, H)
    wrong = {
        "fewer layers": good_h0(layer, n=1),
        "more layers": good_h0(layer, n=3),
        "batch": good_h0(layer, batch=B + 1),
        "width": map_state(lambda s: torch.randn(L, B, H + 1), good_h0(layer)),
        "2-D": map_state(lambda s: s[0], good_h0(layer)),
        "dtype": map_state(lambda s: s.double(), good_h0(layer)),
        "device": map_state(lambda s: torch.empty(s.shape, device="meta"), good_h0(layer)),
    }
    if is_tuple_state(layer):
        wrong["tensor for a tuple"] = good_h0(layer)[0]
        wrong["tuple of one"] = (good_h0(layer)[0],)
    else:
        wrong["tuple for a tensor"] = (good_h0(layer), good_h0(layer))
    for what, h0 in wrong.items():
        with pytest.raises(ValueError, match=r"h0|hidden") as info:
            layer(x, h0)
        assert "\n" not in str(info.value), what


def test_h0_messages_read_like_torch():
    layer = rnnlab.LSTM(4, 20, num_layers=2)
    x = torch.randn(5, 3, 4)
    with pytest.raises(ValueError, match=r"Expected hidden\[0\] size \(2, 3, 20\), got \[1, 3, 20\]"):
        layer(x, (torch.zeros(1, 3, 20), torch.zeros(2, 3, 20)))
    with pytest.raises(ValueError, match=r"Expected hidden\[1\] size \(2, 3, 20\), got \[2, 3, 19\]"):
        layer(x, (torch.zeros(2, 3, 20), torch.zeros(2, 3, 19)))
    with pytest.raises(ValueError, match=r"tuple of 2 tensors"):
        layer(x, torch.zeros(2, 3, 20))
    gru = rnnlab.GRU(4, 20)
    with pytest.raises(ValueError, match=r"Expected hidden size \(1, 3, 20\), got \[2, 3, 20\]"):
        gru(x, torch.zeros(2, 3, 20))


@pytest.mark.parametrize("key", KEYS)
def test_bad_inputs_give_the_same_clear_error_in_every_layer(key):
    layer = layer_of(key)
    cases = {
        "dtype": (torch.randn(T, B, I, dtype=torch.float64), "dtype"),
        "T = 0": (torch.randn(0, B, I), r"empty sequence \(T = 0"),
        "width": (torch.randn(T, B, I + 1), "input_size=3"),
        "1-D": (torch.randn(I), "3-D input"),
        "device": (torch.empty(T, B, I, device="meta"), "device"),
    }
    for what, (x, match) in cases.items():
        with pytest.raises(ValueError, match=match) as info:
            layer(x)
        assert "\n" not in str(info.value) and "Parametrized" not in str(info.value), what


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_batch_of_size_zero_gives_an_empty_result(key, bidirectional):
    layer = layer_of(key, bidirectional=bidirectional, batch_first=True)
    D = 2 if bidirectional else 1
    out, h_n = layer(torch.randn(0, T, I))
    assert out.shape == (0, T, D * H)
    for s in [h_n] if isinstance(h_n, torch.Tensor) else h_n:
        assert s.shape == (D * L, 0, H)
    # torch.nn.LSTM agrees on the shapes
    ref_out, (ref_h, _) = torch.nn.LSTM(I, H, L, batch_first=True, bidirectional=bidirectional)(torch.randn(0, T, I))
    assert ref_out.shape == out.shape and ref_h.shape == (D * L, 0, H)


@pytest.mark.parametrize("key", KEYS)
def test_cell_sequence_checks_state_too(key):
    torch.manual_seed(0)
    cell = CELLS[key](I, H)
    x = torch.randn(T, B, I)
    state = cell.init_state(B)
    cell.sequence(x, state)
    bad = map_state(lambda s: torch.zeros(B, H + 1), state)
    for c in (cell,):
        with pytest.raises(ValueError, match="expected state"):
            c.sequence(x, bad)
        with pytest.raises(ValueError, match="expected state"):
            c(x[0], bad)
        with pytest.raises(ValueError, match="dtype"):
            c.sequence(x.double(), state)
        with pytest.raises(ValueError, match="T = 0"):
            c.sequence(x[:0], state)


@pytest.mark.parametrize("key", KEYS)
def test_cells_accept_a_missing_state_like_torch(key):
    torch.manual_seed(0)
    cell = CELLS[key](I, H).double()
    x = torch.randn(B, I, dtype=torch.float64)
    h, state = cell(x)
    h_ref, state_ref = cell(x, cell.init_state(B))
    torch.testing.assert_close(h, h_ref)
    map_state(torch.testing.assert_close, state, state_ref)
    # unbatched, as torch.nn.RNNCell: (I,) -> (H,)
    h1, s1 = cell(x[0])
    assert h1.shape == (H,)
    torch.testing.assert_close(h1, h_ref[0])
    h2, _ = cell(x[0], s1)
    torch.testing.assert_close(h2, cell(x[:1], map_state(lambda s: s[:1], state_ref))[0][0])


def test_rnncell_without_state_equals_torch_rnncell():
    torch.manual_seed(0)
    ours = rnnlab.RNNCell(5, 8)
    theirs = torch.nn.RNNCell(5, 8)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 5)
    torch.testing.assert_close(ours(x)[0], theirs(x))
    torch.testing.assert_close(ours(x[0])[0], theirs(x[0]))


def test_checks_leave_tracing_and_export_working():
    """The step checks are skipped while torch.jit.trace / torch.export trace (symbolic shapes);
    the traced step still computes the cell's step."""
    import warnings

    torch.manual_seed(0)
    cell = rnnlab.LSTMCell(3, 4)
    x, state = torch.randn(2, 3), (torch.randn(2, 4), torch.randn(2, 4))
    expected = cell(x, state)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(cell, (x, state))
    torch.testing.assert_close(traced(x, state)[0], expected)
    exported = torch.export.export(cell, (x, state))
    torch.testing.assert_close(exported.module()(x, state)[0], expected)


@pytest.mark.parametrize("key", KEYS)
def test_dtype_checks_stand_aside_under_autocast(key):
    """Under torch.autocast the trainer's bf16 runs mix dtypes on purpose (bf16 projections,
    float32 parameters, bf16 states from a step): every layer still runs, fast path and
    reference loop, with an h0 from a previous call; outside autocast the same input is refused."""
    for backend in ("auto", "reference"):
        torch.manual_seed(0)
        layer = Recurrent(I, H, num_layers=L, cell=CELLS[key], backend=backend)
        x = torch.randn(T, B, I)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, h_n = layer(x)
            out2, _ = layer(x, h_n, lengths=torch.tensor([T, 2, 4]))
        assert out.shape == out2.shape == (T, B, H)
        assert torch.isfinite(out2.float()).all()
    with pytest.raises(ValueError, match="dtype"):
        layer(x.bfloat16())


@pytest.mark.parametrize("key", KEYS)
def test_lengths_that_are_not_whole_numbers_are_refused_not_truncated(key):
    """Float lengths were cut down by a cast ([2.7, 3] ran as [2, 3]; True ran as 1)."""
    layer = layer_of(key).double()
    x = torch.randn(T, B, I, dtype=torch.float64)
    for bad in (torch.tensor([2.7, 3.0, 5.0]), [2.7, 3, 5], torch.tensor([float("nan"), 3.0, 5.0])):
        with pytest.raises(ValueError, match=r"lengths must be whole numbers.*got \[(2\.7|nan), 3, 5\]"):
            layer(x, lengths=bad)
    with pytest.raises(ValueError, match="whole numbers"):
        layer(x, lengths=torch.tensor([True, True, True]))
    with pytest.raises(ValueError, match="whole numbers"):
        unroll_lengths = torch.tensor([2.5, 3.0, 5.0])
        rnnlab.cells.unroll(layer.cells[0], x, None, unroll_lengths)
    # whole numbers in a float tensor mean what they say
    a, _ = layer(x, lengths=torch.tensor([2.0, 3.0, 5.0]))
    b, _ = layer(x, lengths=torch.tensor([2, 3, 5]))
    assert torch.equal(a, b)
