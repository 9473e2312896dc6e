"""DMU, RHN and LT-RNN: equations computed a second way, inits, the DMU lr rule, Henaff's
exact adding solution and the chunked scan against its loop."""

import math

import pytest
import torch

from rnnlab import CELLS, DMUCell, LTRNNCell, RHNCell, config
from rnnlab.kernels.scan import linear_recurrence, linear_recurrence_loop, linear_recurrence_scan
from rnnlab.stepper import build_optimizer
from rnnlab.tasks import AddingTask


def test_dmu_update_equation():
    torch.manual_seed(0)
    cell = DMUCell(3, 4, layers=[5, 6]).double()
    x, h = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    W = [(l.weight, l.bias) for l in cell.fnn]
    a = torch.cat([x, h], 1)
    for Wk, bk in W[:-1]:
        pre = a @ Wk.T + bk
        a = torch.where(pre > 0, pre, 0.01 * pre)
    out = a @ W[-1][0].T + W[-1][1]
    z, hh = out[:, :4], out[:, 4:]
    s = 1 / (1 + torch.exp(-z))
    expected = s * h + (1 - s) * torch.tanh(hh)
    torch.testing.assert_close(cell(x, h)[0], expected)


def test_dmu_init_and_learning_rate_rule():
    torch.manual_seed(1)
    cell = DMUCell(3, 4, layers=[8])
    assert torch.all(cell.fnn[-1].bias[:4] == 3.0) and torch.all(cell.fnn[-1].bias[4:] == 0.0)
    assert torch.all(cell.fnn[0].bias == 0.0)
    gain = math.sqrt(2.0 / (1 + 0.01**2))
    bound = gain * math.sqrt(6.0 / (7 + 8))
    assert cell.fnn[0].weight.abs().max() <= bound
    assert cell.depth == 2 and cell.group_scales() == {"memory": 0.25}
    cfg = config.load(
        "demo/lstm",
        [
            'model.cell="dmu"',
            "model.hidden_size=4",
            "optim.lr=0.02",
            "optim.weight_decay=0.1",
            "model.cell_options.layers=[8, 8]",
        ],
    )
    from rnnlab.model import build_model
    from rnnlab.train import build_task

    model = build_model(cfg.model, build_task(cfg.task))
    _, groups = build_optimizer(cfg.optim, model)
    # three FNN layers: lr and weight decay of the module divided by 2 n = 6
    assert groups["memory"]["lr"] == pytest.approx(0.02 / 6)
    assert groups["memory"]["weight_decay"] == pytest.approx(0.1 / 6)
    assert groups["default"]["lr"] == 0.02


def test_rhn_coupled_carry_equation():
    torch.manual_seed(2)
    cell = RHNCell(3, 4, depth=2).double()
    assert torch.all(cell.bias[:, 4:] == -2.0)
    x, h = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    s = h
    for l in range(2):
        pre = s @ cell.weight_hh[l].T + cell.bias[l] + (x @ cell.weight_ih.T if l == 0 else 0)
        hh, t = torch.tanh(pre[:, :4]), torch.sigmoid(pre[:, 4:])
        s = hh * t + s * (1 - t)
    torch.testing.assert_close(cell(x, h)[0], s)


def test_henaff_adding_solution_is_exact():
    """A one-unit ReLU LT-RNN with U = [1, 1], b = -1, W = 1 (readout V = 1) adds the two
    marked values exactly (Henaff et al. 2016, section 3.2.1)."""
    cell = LTRNNCell(2, 1, activation="relu", init="identity").double()
    with torch.no_grad():
        cell.weight_ih.copy_(torch.tensor([[1.0, 1.0]]))
        cell.bias.fill_(-1.0)
    task = AddingTask(T=300)
    batch = task.make(64, torch.Generator().manual_seed(3))
    x = batch.x.double()
    out, h = cell.sequence(x.transpose(0, 1))
    torch.testing.assert_close(h[:, 0], (x[..., 0] * x[..., 1]).sum(1), rtol=0, atol=1e-12)
    assert task.loss(h.float(), batch).item() < 1e-12


@pytest.mark.parametrize("T,chunk", [(1, None), (7, None), (50, None), (50, 7), (64, 8), (30, 29)])
def test_scan_equals_loop_float64(T, chunk):
    torch.manual_seed(4)
    B, H = 3, 5
    v = torch.randn(T, B, H, dtype=torch.float64, requires_grad=True)
    W = (0.3 * torch.randn(H, H, dtype=torch.float64) + torch.eye(H, dtype=torch.float64)).requires_grad_()
    h0 = torch.randn(B, H, dtype=torch.float64, requires_grad=True)
    w = torch.randn(T, B, H, dtype=torch.float64)
    a = linear_recurrence_loop(v, W, h0)
    b = linear_recurrence_scan(v, W, h0, chunk)
    torch.testing.assert_close(a, b)
    ga = torch.autograd.grad((a * w).sum(), (v, W, h0))
    gb = torch.autograd.grad((b * w).sum(), (v, W, h0))
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y)


def test_scan_gradcheck():
    torch.manual_seed(5)
    v = torch.randn(9, 2, 3, dtype=torch.float64, requires_grad=True)
    W = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: linear_recurrence_scan(*a, chunk=3), (v, 0.5 * W, h0))


@pytest.mark.parametrize("backend", ["loop", "scan", "auto"])
def test_ltrnn_backends_equal_reference(backend):
    torch.manual_seed(6)
    ref = LTRNNCell(4, 6, activation="tanh", init="orthogonal", backend="reference").double()
    fast = LTRNNCell(4, 6, activation="tanh", init="orthogonal", backend=backend).double()
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(40, 3, 4, dtype=torch.float64)
    torch.testing.assert_close(fast.sequence(x)[0], ref.sequence(x)[0])
    W = ref.weight_hh.detach()
    torch.testing.assert_close(W.T @ W, torch.eye(6, dtype=torch.float64))
    assert linear_recurrence(torch.zeros(5, 2, 3), torch.eye(3), torch.ones(2, 3)).shape == (5, 2, 3)


def _ltrnn_grads(cell, x, h0, lengths=None):
    cell.zero_grad()
    x, h0 = x.clone().requires_grad_(), h0.clone().requires_grad_()
    out, h_n = cell.sequence(x, h0, lengths)
    g = torch.Generator().manual_seed(1)
    loss = (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum()
    loss = loss + (h_n * torch.randn(h_n.shape, generator=g, dtype=out.dtype)).sum()
    loss.backward()
    return [out, h_n, x.grad, h0.grad] + [p.grad for p in cell.parameters()]


@pytest.mark.parametrize("backend,lengths", [("loop", None), ("scan", None), ("auto", [40, 7, 23])])
def test_ltrnn_backends_gradients_equal_reference_float64(backend, lengths):
    """Outputs, final state and every gradient of the fused loop / scan against the step loop."""
    torch.manual_seed(7)
    ref = LTRNNCell(4, 6, activation="relu", init="orthogonal", backend="reference").double()
    fast = LTRNNCell(
        4, 6, activation="relu", init="orthogonal", backend=backend, chunk=6 if backend == "scan" else 0
    ).double()
    fast.load_state_dict(ref.state_dict())
    x, h0 = torch.randn(40, 3, 4, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    lengths = None if lengths is None else torch.tensor(lengths)
    for a, b in zip(_ltrnn_grads(fast, x, h0, lengths), _ltrnn_grads(ref, x, h0, lengths)):
        assert b.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_fused_linear_recurrence_gradcheck():
    from rnnlab.kernels import elementwise_rnn

    torch.manual_seed(8)
    v = torch.randn(7, 2, 3, dtype=torch.float64, requires_grad=True)
    W = (0.5 * torch.randn(3, 3, dtype=torch.float64)).requires_grad_()
    h0 = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: elementwise_rnn(*a, activation="identity")[0], (v, W, h0))
    lengths = torch.tensor([7, 3])
    assert torch.autograd.gradcheck(
        lambda *a: elementwise_rnn(*a, activation="identity", lengths=lengths)[0], (v, W, h0)
    )


def test_bad_options():
    with pytest.raises(ValueError, match="layer widths"):
        DMUCell(3, 4, layers=[0])
    with pytest.raises(ValueError, match="depth"):
        RHNCell(3, 4, depth=0)
    with pytest.raises(ValueError, match="activation"):
        LTRNNCell(3, 4, activation="sigmoid")


# --- DMU and RHN fused loops (rnnlab.kernels.families) against their step loops -----------------


def _cell_grads(cell, x, h0, backend):
    cell.backend = backend
    cell.zero_grad()
    x, h0 = x.clone().requires_grad_(), h0.clone().requires_grad_()
    out, h_n = cell.sequence(x, h0)
    r = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    ((out * r).sum() + (h_n * h_n).sum()).backward()
    return [out.detach(), x.grad, h0.grad] + [p.grad.clone() for p in cell.parameters()]


@pytest.mark.parametrize(
    "key,kw",
    [
        ("dmu", {"layers": [7]}),
        ("dmu", {"layers": [5, 6], "activation": "identity"}),
        ("dmu", {"layers": [4, 3, 5]}),
        ("rhn", {"depth": 1}),
        ("rhn", {"depth": 3}),
        ("gru", {}),
        ("gru", {"bias": False}),
    ],
)
def test_fused_gated_loops_equal_the_step_loop_float64(key, kw):
    torch.manual_seed(0)
    cell = CELLS[key](3, 4, **kw).double()
    with torch.no_grad():  # move away from the init (zero biases, +3 z bias) so every path matters
        for p in cell.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x, h0 = torch.randn(13, 2, 3, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    fast, ref = _cell_grads(cell, x, h0, "auto"), _cell_grads(cell, x, h0, "reference")
    for a, b in zip(fast, ref):
        assert b.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_fused_gated_loops_gradcheck():
    from rnnlab.kernels.families.dmu import dmu_recurrence
    from rnnlab.kernels.families.rhn import rhn_recurrence

    torch.manual_seed(9)
    D = torch.float64
    u1, h0 = torch.randn(5, 2, 4, dtype=D, requires_grad=True), torch.randn(2, 3, dtype=D, requires_grad=True)
    w1h, W2 = torch.randn(4, 3, dtype=D, requires_grad=True), torch.randn(5, 4, dtype=D, requires_grad=True)
    b2, wo = torch.randn(5, dtype=D, requires_grad=True), torch.randn(6, 5, dtype=D, requires_grad=True)
    bo = torch.randn(6, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda u1, h0, w1h, W2, b2, wo, bo: dmu_recurrence(u1, h0, w1h, [(W2, b2)], wo, bo),
        (u1, h0, w1h, W2, b2, wo, bo),
    )
    u = torch.randn(5, 2, 6, dtype=D, requires_grad=True)
    R, b = torch.randn(2, 6, 3, dtype=D, requires_grad=True), torch.randn(2, 6, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(rhn_recurrence, (u, h0, R, b))
    from rnnlab.kernels.families.gru import gru_recurrence

    gi = torch.randn(5, 2, 9, dtype=D, requires_grad=True)
    W, bh = torch.randn(9, 3, dtype=D, requires_grad=True), torch.randn(9, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(gru_recurrence, (gi, h0, W, bh))
    with pytest.raises(ValueError, match="inconsistent GRU shapes"):
        gru_recurrence(gi, h0, W[:6], bh)
    with pytest.raises(ValueError, match="inconsistent RHN shapes"):
        rhn_recurrence(u, h0, R[:, :4], b)
    with pytest.raises(ValueError, match="slope"):
        dmu_recurrence(u1, h0, w1h, [], wo[:, :4], bo, slope=0.0)
