"""The fused element-wise recurrence (rnnlab.kernels.elementwise_rnn) against float64
finite differences and against the reference loops it replaces."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

from rnnlab import CELLS, Recurrent, unroll
from rnnlab.kernels import elementwise_rnn, reference_elementwise_rnn
from rnnlab.kernels.families import rnn as rec

LENGTHS = [None, torch.tensor([6, 2, 1])]


def _inputs(act, T=6, B=3, H=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(T, B, H, generator=g, dtype=torch.float64).requires_grad_()
    W = (torch.randn(H, H, generator=g, dtype=torch.float64) / H**0.5).requires_grad_()
    h0 = torch.randn(B, H, generator=g, dtype=torch.float64).requires_grad_()
    b = (0.3 * torch.randn(H, generator=g, dtype=torch.float64)).requires_grad_() if act == "modrelu" else None
    return u, W, h0, b


def _flat(fn, act, lengths):
    def f(u, W, h0, *b):
        out, h_n = fn(u, W, h0, act, b[0] if b else None, lengths)
        return out, h_n

    return f


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("act", rec.ACTIVATIONS)
def test_gradcheck_float64(act, lengths):
    u, W, h0, b = _inputs(act)
    ins = (u, W, h0) if b is None else (u, W, h0, b)
    assert torch.autograd.gradcheck(_flat(elementwise_rnn, act, lengths), ins)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("act", rec.ACTIVATIONS)
def test_matches_reference_loop_outputs_and_gradients(act, lengths):
    u, W, h0, b = _inputs(act, T=9, B=3, H=5, seed=1)
    ins = [t for t in (u, W, h0, b) if t is not None]
    g = torch.Generator().manual_seed(7)
    wo, wh = torch.randn(9, 3, 5, generator=g, dtype=torch.float64), torch.randn(3, 5, generator=g, dtype=torch.float64)
    results = []
    for fn in (elementwise_rnn, reference_elementwise_rnn):
        out, h_n = fn(u, W, h0, act, b, lengths)
        loss = (out * wo).sum() + (h_n * wh).sum()
        results.append((out.detach(), h_n.detach(), torch.autograd.grad(loss, ins)))
    (o1, h1, g1), (o2, h2, g2) = results
    torch.testing.assert_close(o1, o2, rtol=0, atol=1e-12)
    torch.testing.assert_close(h1, h2, rtol=0, atol=1e-12)
    for a, c in zip(g1, g2):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-12)


def _projected(act, lengths, with_bias):
    """elementwise_rnn with the fused input projection, as a function of (x, W_ih, [b_in,] W, h0, [b])."""

    def f(x, w_in, *rest):
        b_in, rest = (rest[0], rest[1:]) if with_bias else (None, rest)
        W, h0, *b = rest
        return elementwise_rnn(x, W, h0, act, b[0] if b else None, lengths, input_weight=w_in, input_bias=b_in)

    return f


def _projection_inputs(act, with_bias, T=6, B=3, I=2, H=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, B, I, generator=g, dtype=torch.float64).requires_grad_()
    w_in = torch.randn(H, I, generator=g, dtype=torch.float64).requires_grad_()
    b_in = torch.randn(H, generator=g, dtype=torch.float64).requires_grad_() if with_bias else None
    _, W, h0, b = _inputs(act, T, B, H, seed)
    return [t for t in (x, w_in, b_in, W, h0, b) if t is not None]


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("act", rec.ACTIVATIONS)
def test_fused_projection_gradcheck_and_reference(act, lengths, with_bias):
    """``input_weight``: the projection computed inside the kernel has the gradients of x, W_ih
    and b_in (gradcheck), and the values and gradients of the projection done outside by
    ``F.linear`` then the reference loop."""
    ins = _projection_inputs(act, with_bias)
    fn = _projected(act, lengths, with_bias)
    assert torch.autograd.gradcheck(fn, ins)
    x, w_in, *rest = ins
    b_in = rest.pop(0) if with_bias else None
    W, h0, *b = rest
    got = fn(*ins)
    want = reference_elementwise_rnn(
        torch.nn.functional.linear(x, w_in, b_in), W, h0, act, b[0] if b else None, lengths
    )
    r = torch.randn_like(got[0])
    grads = [torch.autograd.grad((o[0] * r).sum() + o[1].sum(), ins) for o in (got, want)]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, c in zip(*grads):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-12)
    x.requires_grad_(False)  # the path that skips dx (one-hot inputs)
    assert torch.autograd.gradcheck(fn, ins)


@pytest.mark.parametrize("lengths", [None, torch.tensor([4, 2, 1])])
@pytest.mark.parametrize("act", rec.ACTIVATIONS)
def test_gradgradcheck_float64(act, lengths):
    """Second derivatives (a backward asked for a graph of itself) are exact, with the input
    terms given and with the projection fused in."""
    u, W, h0, b = _inputs(act, T=4, B=3, H=3)
    ins = (u, W, h0) if b is None else (u, W, h0, b)
    assert torch.autograd.gradgradcheck(_flat(elementwise_rnn, act, lengths), ins)
    ins = _projection_inputs(act, True, T=4, H=2)
    assert torch.autograd.gradgradcheck(_projected(act, lengths, True), ins)


def test_fused_projection_checks_its_shapes():
    x = torch.randn(3, 2, 5)
    with pytest.raises(ValueError, match=r"input_weight must be \(H, I\) with I = 5"):
        elementwise_rnn(x, torch.eye(4), input_weight=torch.randn(4, 3))
    with pytest.raises(ValueError, match=r"input_bias must have shape \(4,\)"):
        elementwise_rnn(x, torch.eye(4), input_weight=torch.randn(4, 5), input_bias=torch.zeros(5))
    with pytest.raises(ValueError, match="pass input_weight with it"):
        elementwise_rnn(torch.randn(3, 2, 4), torch.eye(4), input_bias=torch.zeros(4))
    with pytest.raises(ValueError, match=r"weight must be \(4, 4\)"):
        elementwise_rnn(x, torch.eye(5), input_weight=torch.randn(4, 5))


def test_lengths_freeze_state_and_zero_outputs():
    u, W, h0, _ = _inputs("tanh", T=5, B=2, H=3)
    out, h_n = elementwise_rnn(u, W, h0, "tanh", lengths=torch.tensor([5, 2]))
    assert torch.all(out[2:, 1] == 0)
    full, _ = elementwise_rnn(u, W, h0, "tanh")
    torch.testing.assert_close(h_n[1], full[1, 1])  # state at its own last step
    torch.testing.assert_close(h_n[0], full[4, 0])


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-15), (torch.float32, 1e-6)])
def test_tanh_through_sigmoid_has_tanh_values(dtype, atol, monkeypatch):
    z = torch.linspace(-20, 20, 4001, dtype=dtype).reshape(1, 1, -1)
    W = torch.zeros(z.shape[-1], z.shape[-1], dtype=dtype)
    for flag in (True, False):
        monkeypatch.setattr(rec, "TANH_VIA_SIGMOID", flag)
        out, _ = elementwise_rnn(z, W, None, "tanh")
        torch.testing.assert_close(out, torch.tanh(z), rtol=0, atol=atol)


def test_default_tanh_keeps_relative_accuracy_near_zero():
    """The default fused tanh is torch.tanh: exact to the ulp for tiny pre-activations, where
    2 sigmoid(2z) - 1 loses relative accuracy (1e-3 at 1e-5 in float32)."""
    assert rec.TANH_VIA_SIGMOID is False
    z = torch.logspace(-8, -1, 50).reshape(1, 1, -1)
    W = torch.zeros(50, 50)
    out, _ = elementwise_rnn(z, W, None, "tanh")
    exact = torch.tanh(z.double())
    assert ((out.double() - exact).abs() / exact).max() < 1e-6


def test_errors_name_the_offending_value():
    u = torch.zeros(3, 2, 4)
    with pytest.raises(ValueError, match="'gelu'"):
        elementwise_rnn(u, torch.eye(4), activation="gelu")
    with pytest.raises(ValueError, match=r"\(5, 5\)"):
        elementwise_rnn(u, torch.eye(5))
    with pytest.raises(ValueError, match="modrelu"):
        elementwise_rnn(u, torch.eye(4), activation="modrelu")
    with pytest.raises(ValueError, match=r"\[0, 3\]"):
        elementwise_rnn(u, torch.eye(4), lengths=torch.tensor([4, 1]))


# --- the cells' fast paths against backend="reference" --------------------------------

CELL_CASES = [
    ("exprnn", {}),
    ("exprnn", {"K": 3}),
    ("scornn", {"negatives": 2}),
    ("rnn", {"nonlinearity": "modrelu"}),
    ("rnn", {"backend": "fused"}),
    ("rnn", {"nonlinearity": "relu", "backend": "fused"}),
    ("irnn", {"backend": "fused"}),
    ("rnn", {}),  # auto: the fused recurrence
    ("rnn", {"backend": "native"}),  # ATen's rnn_tanh
    ("irnn", {"backend": "native"}),
    ("gru", {"backend": "native"}),
]


def _cell_pair(key, kw, I=3, H=6):
    torch.manual_seed(3)
    fast = CELLS[key](I, H, **kw).double()
    ref = CELLS[key](I, H, **{**kw, "backend": "reference"}).double()
    ref.load_state_dict(fast.state_dict())
    with torch.no_grad():  # make modReLU's bias matter (some units inactive)
        for c in (fast, ref):
            b = c.bias if key in ("exprnn", "scornn") else getattr(c, "modrelu_bias", None)
            if b is not None:
                b.copy_(torch.linspace(-0.8, 0.4, H, dtype=torch.float64))
        if key == "irnn":  # move IRNN off its identity init so relu cuts some units
            for c in (fast, ref):
                c.weight_hh.add_(
                    0.3 * torch.randn(H, H, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
                )
    return fast, ref


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("key,kw", CELL_CASES)
def test_cell_fast_path_equals_reference(key, kw, lengths):
    fast, ref = _cell_pair(key, kw)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(6, 3, 3, generator=g, dtype=torch.float64)
    h0 = torch.randn(3, 6, generator=g, dtype=torch.float64)
    wo = torch.randn(6, 3, 6, generator=g, dtype=torch.float64)
    res = []
    for cell in (fast, ref):
        xx, hh = x.clone().requires_grad_(), h0.clone().requires_grad_()
        out, h_n = cell.sequence(xx, hh, lengths)
        loss = (out * wo).sum() + (h_n**2).sum()
        grads = torch.autograd.grad(loss, [xx, hh, *cell.parameters()])
        res.append((out.detach(), h_n.detach(), grads))
    torch.testing.assert_close(res[0][0], res[1][0], rtol=0, atol=1e-12)
    torch.testing.assert_close(res[0][1], res[1][1], rtol=0, atol=1e-12)
    names = ["x", "h0"] + [n for n, _ in fast.named_parameters()]
    for name, a, c in zip(names, res[0][2], res[1][2]):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-12, msg=lambda m: f"{key} grad {name}: {m}")


def test_fast_path_is_used_and_reference_switch_bypasses_it(monkeypatch):
    calls = []
    real = rec._ElementwiseRNN.apply
    monkeypatch.setattr(rec._ElementwiseRNN, "apply", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(4, 2, 3)
    CELLS["exprnn"](3, 5).sequence(x)
    assert calls == [1]
    CELLS["exprnn"](3, 5, backend="reference").sequence(x)
    assert calls == [1]


def test_layer_with_packed_sequence_matches_reference():
    torch.manual_seed(0)
    fast = Recurrent(3, 5, num_layers=2, cell=CELLS["scornn"]).double()
    ref = Recurrent(3, 5, num_layers=2, cell=CELLS["scornn"], backend="reference").double()
    ref.load_state_dict(fast.state_dict())
    x = torch.randn(7, 4, 3, dtype=torch.float64)
    lengths = torch.tensor([7, 3, 5, 1])
    outs = [m(pack_padded_sequence(x, lengths, enforce_sorted=False))[1] for m in (fast, ref)]
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=1e-12)


def test_float32_fast_path_close_to_reference():
    torch.manual_seed(0)
    cell = CELLS["exprnn"](10, 32)
    x = torch.randn(60, 8, 10)
    a, _ = cell.sequence(x)
    b, _ = unroll(cell, x)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# --- time-chunked recomputation ----------------------------------------------------------


@pytest.mark.parametrize("backend", ["auto", "reference"])
@pytest.mark.parametrize("key", ["exprnn", "lstm"])
def test_checkpointed_sequence_equals_plain(key, backend):
    from rnnlab.kernels import checkpointed_sequence

    torch.manual_seed(0)
    cell = CELLS[key](3, 5, backend=backend).double()
    x = torch.randn(11, 4, 3, dtype=torch.float64)
    lengths = torch.tensor([11, 4, 7, 1])
    res = []
    for chunked in (False, True):
        xx = x.clone().requires_grad_()
        if chunked:
            out, st = checkpointed_sequence(cell, xx, None, lengths, chunk=3)
        else:
            out, st = cell.sequence(xx, None, lengths)
        h = st if isinstance(st, torch.Tensor) else st[0]
        loss = (out**2).sum() + h.sum()
        res.append((out.detach(), torch.autograd.grad(loss, [xx, *cell.parameters()])))
    torch.testing.assert_close(res[0][0], res[1][0], rtol=0, atol=1e-12)
    for a, c in zip(res[0][1], res[1][1]):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-12)


def test_layer_checkpoint_chunk_option():
    torch.manual_seed(0)
    a = Recurrent(3, 5, cell=CELLS["scornn"], checkpoint_chunk=4).double()
    b = Recurrent(3, 5, cell=CELLS["scornn"]).double()
    b.load_state_dict(a.state_dict())
    x = torch.randn(10, 2, 3, dtype=torch.float64)
    ga = torch.autograd.grad(a(x)[0].square().sum(), list(a.parameters()))
    gb = torch.autograd.grad(b(x)[0].square().sum(), list(b.parameters()))
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="checkpoint_chunk"):
        Recurrent(3, 5, cell=CELLS["rnn"], checkpoint_chunk=0)
