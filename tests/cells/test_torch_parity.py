"""The layers are a drop-in for torch.nn: torch's positional order, device/dtype factory
arguments, unbatched input, converters from and to torch.nn.LSTM/GRU/RNN (outputs equal to
1e-6), and capture by torch.jit.trace, torch.export and torch.compile of every layer."""

import warnings

import pytest
import torch
from torch import nn

import rnnlab
from rnnlab.cells import CELLS, Recurrent
from rnnlab.cells import layers as cell_layers

torch.set_num_threads(1)

#: every family layer rnnlab exports, by its cell class
LAYERS = {
    cls.cell_class: cls
    for cls in (getattr(rnnlab, n) for n in rnnlab._CELLS)
    if isinstance(cls, type) and issubclass(cls, Recurrent) and cls.cell_class is not None
}
FAMILY = {key: LAYERS[cls] for key, cls in CELLS.items()}
PAPERS = ["asrnn", "nnrnn", "dmu", "ltrnn"]
TORCH = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}


def _close(a, b, atol=1e-6, rtol=0.0):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    assert len(a) == len(b)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=rtol, atol=atol)


def _close_float32(a, b):
    """Two float32 evaluations of the same layer by different kernels (a traced step loop or a
    fused path against eager): each sum is rounded in its own order, so an element may differ by
    a few units of float32 rounding *of the largest values in play*, not of itself (an
    unbounded cell such as scoRNN's modReLU reaches |h| ~ 30, where 1e-6 absolute is under one
    ulp; seen on an Intel Xeon, MKL's own summation order). Tolerance: 1e-5 relative plus 1e-6
    absolute per unit of the output's largest magnitude; a real defect (a wrong weight, a lost
    step) moves elements by far more."""

    def leaves(t):
        return [x for v in t for x in leaves(v)] if isinstance(t, (tuple, list)) else [t]

    a, b = leaves(a), leaves(b)
    scale = max(1.0, *(float(v.detach().abs().max()) for v in b))
    _close(a, b, atol=1e-6 * scale, rtol=1e-5)


def test_every_family_has_a_layer():
    assert set(FAMILY) == set(CELLS)


# --- positional order -------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["lstm", "gru"])
def test_torch_positional_order(key):
    # input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional
    args = (5, 8, 2, False, True, 0.25, True)
    ours, ref = FAMILY[key](*args), TORCH[key](*args)
    for attr in ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional"):
        assert getattr(ours, attr) == getattr(ref, attr), attr
    assert not any("bias" in n for n, _ in ours.named_parameters())
    # the weights of torch's module give torch's outputs on batch-first input
    ours.load_state_dict(rnnlab.from_torch(ref).state_dict())
    ours.eval(), ref.eval()
    x = torch.randn(3, 6, 5)
    _close(ours(x), ref(x))


def test_rnn_takes_nonlinearity_fourth_as_torch():
    args = (5, 8, 2, "relu", True, True)
    ours, ref = rnnlab.RNN(*args), nn.RNN(*args)
    assert ours.cells[0].nonlinearity == ref.nonlinearity == "relu"
    assert ours.batch_first and ref.batch_first
    with pytest.raises(TypeError, match="nonlinearity fourth"):
        rnnlab.RNN(5, 8, 2, True, True)
    ours.load_state_dict(rnnlab.from_torch(ref).state_dict())
    x = torch.randn(3, 6, 5)
    _close(ours(x), ref(x))


@pytest.mark.parametrize("key", sorted(CELLS))
def test_every_layer_takes_the_torch_order(key):
    args = (6, 8, 2, "tanh", True, True, 0.0, True) if key == "rnn" else (6, 8, 2, True, True, 0.0, True)
    layer = FAMILY[key](*args)
    assert (layer.num_layers, layer.batch_first, layer.bidirectional) == (2, True, True)
    out, _ = layer(torch.randn(3, 5, 6))
    assert out.shape == (3, 5, 16)


def test_bias_false_is_refused_where_the_cell_has_no_option():
    with pytest.raises(ValueError, match="bias=False is not an option of ASRNNCell"):
        rnnlab.ASRNN(5, 8, 1, False)
    with pytest.raises(ValueError, match="proj_size"):
        rnnlab.LSTM(5, 8, proj_size=4)
    with pytest.raises(TypeError, match="batch_first must be True or False"):
        rnnlab.LSTM(5, 8, 1, True, 0.5)  # the pre-0.3 order (batch_first, dropout) is caught
    assert rnnlab.LTRNN(5, 8, 1, False).cells[0].bias is None


@pytest.mark.parametrize("key", sorted(CELLS))
def test_device_and_dtype_factory_arguments(key):
    layer = FAMILY[key](5, 8, dtype=torch.float64)
    assert {p.dtype for p in layer.parameters()} == {torch.float64}
    out, _ = layer(torch.randn(4, 2, 5, dtype=torch.float64))
    assert out.dtype == torch.float64
    meta = FAMILY[key](5, 8, device="meta")
    assert {p.device.type for p in meta.parameters()} == {"meta"}
    with pytest.raises(TypeError, match="floating-point"):
        FAMILY[key](5, 8, dtype=torch.int64)


# --- unbatched input --------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(CELLS))
@pytest.mark.parametrize("batch_first", [False, True])
def test_unbatched_input_is_a_batch_of_one(key, batch_first):
    torch.manual_seed(0)
    layer = FAMILY[key](5, 8, num_layers=2, batch_first=batch_first).double()
    x = torch.randn(7, 5, dtype=torch.float64)
    h0 = layer.cells[0].init_state(2, dtype=torch.float64)
    h0 = h0.normal_() if isinstance(h0, torch.Tensor) else tuple(s.normal_() for s in h0)  # (D L, H) leaves
    out, h_n = layer(x, h0)
    batched = x.unsqueeze(0 if batch_first else 1)
    h0b = h0.unsqueeze(1) if isinstance(h0, torch.Tensor) else tuple(s.unsqueeze(1) for s in h0)
    ref_out, ref_h = layer(batched, h0b)
    assert out.shape == (7, 8)
    _close(out, ref_out.squeeze(0 if batch_first else 1), atol=0)
    _close(h_n, ref_h.squeeze(1) if isinstance(ref_h, torch.Tensor) else tuple(s.squeeze(1) for s in ref_h), atol=0)


@pytest.mark.parametrize("key", sorted(TORCH))
def test_unbatched_input_matches_torch(key):
    ref = TORCH[key](5, 8, 2, bidirectional=True)
    layer = rnnlab.from_torch(ref)
    x = torch.randn(7, 5)
    _close(layer(x), ref(x))
    h0 = torch.randn(4, 8)
    h0 = (h0, torch.randn(4, 8)) if key == "lstm" else h0
    _close(layer(x, h0), ref(x, h0))


def test_unbatched_input_needs_an_unbatched_h0():
    layer = rnnlab.GRU(5, 8)
    with pytest.raises(ValueError, match=r"unbatched too, \(D \* num_layers, H\); got a leaf of shape \(1, 1, 8\)"):
        layer(torch.randn(7, 5), torch.zeros(1, 1, 8))
    with pytest.raises(ValueError, match="3-D input"):
        layer(torch.randn(5))


# --- converters -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key,opts",
    [
        ("lstm", {}),
        ("lstm", {"bidirectional": True, "num_layers": 2, "batch_first": True}),
        ("lstm", {"bias": False}),
        ("gru", {}),
        ("gru", {"bidirectional": True, "num_layers": 2}),
        ("gru", {"bias": False, "batch_first": True}),
        ("rnn", {}),
        ("rnn", {"nonlinearity": "relu", "num_layers": 3}),
        ("rnn", {"bidirectional": True, "bias": False}),
    ],
)
def test_from_torch_and_back_give_torch_outputs(key, opts):
    torch.manual_seed(1)
    ref = TORCH[key](5, 8, **opts).eval()
    layer = rnnlab.from_torch(ref)
    assert isinstance(layer, FAMILY[key]) and not layer.training
    x = torch.randn(4, 9, 5) if ref.batch_first else torch.randn(9, 4, 5)
    h0 = torch.randn(ref.num_layers * (2 if ref.bidirectional else 1), 4, 8)
    h0 = (h0, torch.randn_like(h0)) if key == "lstm" else h0
    with torch.no_grad():
        _close(layer(x, h0), ref(x, h0))
        back = layer.to_torch()
        assert type(back) is type(ref)
        assert back.state_dict().keys() == ref.state_dict().keys()
        for k, v in ref.state_dict().items():
            assert torch.equal(back.state_dict()[k], v), k
        _close(back(x, h0), ref(x, h0), atol=0)


@pytest.mark.parametrize("key", sorted(TORCH))
def test_layer_to_torch_keeps_what_was_trained(key):
    torch.manual_seed(2)
    layer = FAMILY[key](5, 8, num_layers=2, batch_first=True)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))  # away from any init
    ref = layer.to_torch()
    assert ref.batch_first and ref.num_layers == 2
    x = torch.randn(3, 6, 5)
    with torch.no_grad():
        _close(layer(x), ref(x))
    assert rnnlab.LSTM.from_torch(nn.LSTM(5, 8)).hidden_size == 8
    with pytest.raises(TypeError, match="converts to rnnlab"):
        rnnlab.GRU.from_torch(nn.LSTM(5, 8))


@pytest.mark.parametrize("torch_cls", [nn.LSTMCell, nn.GRUCell, nn.RNNCell])
def test_cells_convert_too(torch_cls):
    ref = torch_cls(5, 8, dtype=torch.float64)
    cell = rnnlab.from_torch(ref)
    x = torch.randn(3, 5, dtype=torch.float64)
    h = torch.randn(3, 8, dtype=torch.float64)
    state = (h, torch.randn_like(h)) if torch_cls is nn.LSTMCell else h
    want = ref(x, state)
    got_h, got_state = cell(x, state)
    _close(got_state if torch_cls is nn.LSTMCell else got_h, want, atol=1e-12)
    assert type(rnnlab.to_torch(cell)) is torch_cls


def test_families_without_a_torch_counterpart_say_so():
    with pytest.raises(TypeError, match="no torch.nn counterpart"):
        rnnlab.ASRNN(5, 8).to_torch()
    with pytest.raises(TypeError, match="modReLU"):
        rnnlab.RNN(5, 8, nonlinearity="modrelu").to_torch()
    with pytest.raises(ValueError, match="proj_size=3"):
        rnnlab.from_torch(nn.LSTM(5, 8, proj_size=3))
    with pytest.raises(TypeError, match="Linear"):
        rnnlab.from_torch(nn.Linear(3, 4))


# --- capture ----------------------------------------------------------------------------------
def _eager(layer, x):
    with torch.no_grad():
        return layer(x)


@pytest.mark.parametrize("key", sorted(CELLS))
def test_jit_trace_of_every_layer(key):
    torch.manual_seed(0)
    layer = FAMILY[key](5, 8, num_layers=2, batch_first=True).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings about Python-side size checks
        traced = torch.jit.trace(layer, (torch.randn(3, 7, 5),))
    x = torch.randn(3, 7, 5)  # new values: the trace is not a constant
    with torch.no_grad():
        _close_float32(traced(x), _eager(layer, x))  # step loop vs fast path


@pytest.mark.parametrize("key", sorted(CELLS))
def test_torch_export_of_every_layer(key):
    torch.manual_seed(0)
    layer = FAMILY[key](5, 8, batch_first=True).eval()
    batch = torch.export.Dim("batch", min=2, max=1024)  # some steps choose their product by size
    program = torch.export.export(layer, (torch.randn(3, 4, 5),), dynamic_shapes={"input": {0: batch}})
    x = torch.randn(6, 4, 5)  # another batch size, new values
    with torch.no_grad():
        _close_float32(program.module()(x), _eager(layer, x))


# torch's compiler warns about its own internals while tracing autograd Functions (not our code)
@pytest.mark.filterwarnings("ignore:.*should not be instantiated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
@pytest.mark.parametrize("key", ["asrnn", "nnrnn"])
def test_torch_compile_trains_like_eager(key):
    # backend="eager" checks dynamo's capture of the layer (fast paths included) quickly; the
    # slow test below runs inductor, torch.compile's default, on the four papers' layers
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = FAMILY[key](5, 8, batch_first=True).double()
    x = torch.randn(3, 7, 5, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(layer, backend="eager")
    want = layer(x)[0]
    got = compiled(x)[0]
    _close(got, want, atol=1e-12)
    gw = torch.autograd.grad(want.square().sum(), [x, *layer.parameters()])
    gg = torch.autograd.grad(got.square().sum(), [x, *layer.parameters()])
    _close(gg, gw, atol=1e-10)


@pytest.mark.slow
# warnings that torch's dynamo and inductor raise from their own internals while compiling (its
# deprecated torch.jit.script_method, and its introspection of autograd Functions and non-leaf
# tensors): not ours, and under filterwarnings = error they would fail the compile itself
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:.*should not be instantiated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
# inductor's lowering of diagonal calls a deprecated torch helper
@pytest.mark.filterwarnings("ignore:`torch._prims_common.check` is deprecated:FutureWarning")
@pytest.mark.parametrize("key", PAPERS + ["lstm"])
def test_torch_compile_inductor_of_the_papers_layers(key):
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = FAMILY[key](5, 8, batch_first=True)
    x = torch.randn(3, 7, 5, requires_grad=True)
    compiled = torch.compile(layer)
    want, got = layer(x)[0], compiled(x)[0]
    _close_float32(got, want)  # inductor fuses and reorders the sums
    gw = torch.autograd.grad(want.square().sum(), [x, *layer.parameters()])
    gg = torch.autograd.grad(got.square().sum(), [x, *layer.parameters()])
    # normwise over all gradients: float32 sums in another order (some of asRNN's gradients are
    # rounding noise around 0 at its default D_f = 1e-5 I, so no entrywise relative bound holds)
    scale = max(float(b.abs().max()) for b in gw)
    for a, b in zip(gg, gw):
        assert float((a - b).abs().max()) <= 1e-5 * scale


# --- threads ----------------------------------------------------------------------------------
def test_small_multithreaded_cpu_run_warns_once(monkeypatch):
    monkeypatch.setattr(cell_layers, "_threads_warned", False)
    before = torch.get_num_threads()
    layer = rnnlab.LSTM(5, 16)
    x = torch.randn(6, 4, 5)  # B * H * H = 1,024: tiny
    try:
        torch.set_num_threads(2)
        with pytest.warns(rnnlab.ThreadsWarning, match=r"torch.set_num_threads\(1\)"):
            layer(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            layer(x)  # once per process
        monkeypatch.setattr(cell_layers, "_threads_warned", False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            rnnlab.LSTM(5, 128)(torch.randn(6, 32, 5))  # B * H * H = 524,288: not small
            torch.set_num_threads(1)
            layer(x)  # one thread: nothing to say
    finally:
        torch.set_num_threads(before)
    assert cell_layers.SMALL_STEP_MACS == 1 << 18


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layers,bidirectional,bias", [(1, False, True), (2, True, True), (2, False, False)])
def test_a_torch_state_dict_loads_into_the_rnnlab_layer(kind, layers, bidirectional, bias):
    """Before: ``rnnlab.LSTM(4, 6).load_state_dict(torch.nn.LSTM(4, 6).state_dict())`` failed
    with torch's missing/unexpected keys. Now the keys are mapped as from_torch maps them and
    the layer computes what the torch layer computes."""
    import rnnlab

    torch.manual_seed(0)
    ref = getattr(torch.nn, kind)(4, 6, layers, bias=bias, bidirectional=bidirectional)
    layer = getattr(rnnlab, kind)(4, 6, layers, bias=bias, bidirectional=bidirectional)
    layer.load_state_dict(ref.state_dict())
    x = torch.randn(7, 3, 4)
    out, h = layer(x)
    ref_out, ref_h = ref(x)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    assert layer.state_dict().keys() != ref.state_dict().keys()  # rnnlab's own names, mapped


def test_a_torch_state_dict_into_a_family_without_a_counterpart_says_so():
    import rnnlab

    with pytest.raises(TypeError, match="no torch.nn counterpart"):
        rnnlab.DMU(4, 6).load_state_dict(torch.nn.LSTM(4, 6).state_dict())
