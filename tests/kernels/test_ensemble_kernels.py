"""The batched model of an ensemble (rnnlab.stacked_model.StackedModel, rnnlab.kernels.ensemble)
against each member run alone through its cells' step loop, forward and backward, in float64,
over every registered cell and its structural options (widths below and above the gate-major
limit, layers, bidirectional, lengths, readouts)."""

import pytest
import torch
from torch.func import vmap

from rnnlab.cells import CELLS
from rnnlab.cells.base import batched_path, batched_paths
from rnnlab.kernels.ensemble import GATE_MAJOR_BELOW, batched_linear, ensemble_call
from rnnlab.kernels.families.dmu import _DMUSteps
from rnnlab.kernels.families.rnn import _ElementwiseSteps
from rnnlab.kernels.linear import MIN_ROWS, tall_linear
from rnnlab.model import SequenceModel
from rnnlab.stacked_model import StackedModel

D = torch.float64
OPTIONS = {
    "rnn": [{}, {"nonlinearity": "relu"}, {"nonlinearity": "modrelu"}],
    "dmu": [{}, {"layers": []}, {"layers": [4, 3]}, {"activation": "identity"}],
    "ltrnn": [{}, {"activation": "tanh"}, {"init": "orthogonal"}],
    "rhn": [{"depth": 1}, {"depth": 3}],
    "exprnn": [{"K": 3}],
}
SHAPES = [  # hidden size, layers, bidirectional, readout, lengths
    (4, 1, False, "all", False),
    (4, 2, False, "last", True),
    (6, 1, True, "all", True),
    (GATE_MAJOR_BELOW + 2, 1, False, "last", True),
]


def _models(cell, options, E, H, layers, bidirectional, readout, n_in=3, n_out=2):
    out = []
    for k in range(E):
        torch.manual_seed(10 + k)
        out.append(
            SequenceModel(
                cell,
                n_in,
                n_out,
                H,
                num_layers=layers,
                readout=readout,
                cell_options={**options, "bidirectional": bidirectional},
            ).to(D)
        )
    return out


@pytest.mark.parametrize("cell,options", [(c, o) for c in CELLS for o in OPTIONS.get(c, [{}])])
@pytest.mark.parametrize("H,layers,bidirectional,readout,lengths", SHAPES)
def test_batched_model_equals_each_member_alone(cell, options, H, layers, bidirectional, readout, lengths):
    if cell in ("urnn", "eurnn") and (H > GATE_MAJOR_BELOW or bidirectional):
        pytest.skip("the unitary cells run their step loop in vmap; one shape each covers them")
    if cell == "nnrnn" and H % 2:
        H += 1
    E, B, T = 3, 4, 7
    models = _models(cell, options, E, H, layers, bidirectional, readout)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(E, B, T, 3, generator=gen, dtype=D)
    L = torch.randint(1, T + 1, (E, B), generator=gen) if lengths else None
    out, state = StackedModel(models[0]).forward(models, x, None, L)
    w = torch.randn(out.shape, generator=gen, dtype=D)
    (out * w).sum().backward()
    batched = [[p.grad.clone() for p in m.parameters()] for m in models]
    for k, m in enumerate(models):
        m.zero_grad()
        for c in m.rnn.cells:
            c.backend = "reference"  # each member alone through its step loop (rnnlab.unroll)
        o, s = m(x[k], None, None if L is None else L[k])
        torch.testing.assert_close(out[k], o, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(torch.utils._pytree.tree_map(lambda t: t[k], state), s, rtol=1e-12, atol=1e-12)
        (o * w[k]).sum().backward()
        for p, g in zip(m.parameters(), batched[k]):
            torch.testing.assert_close(g, p.grad, rtol=1e-10, atol=1e-12)


def test_which_cells_leave_vmap_for_a_batched_loop():
    """Every registered cell is either routed to a batched recurrence or named as running its
    step loop under vmap (slower, still exact)."""
    paths = {name: batched_path(cls) for name, cls in CELLS.items()}
    assert {k for k, v in paths.items() if v == "reference"} == {
        "asrnn",
        "urnn",
        "eurnn",
        "fcurnn",
        "kru",
        "momentumlstm",
        "softorth",
        "antisymrnn",
        "incrnn",
        "naisnet",
        "lipschitz",
        "cornn",
        "lem",
        "lru",  # the diagonal family: its step loop under vmap (no batched fast path yet)
        "s4d",
        "mamba",
    }
    assert all(callable(v) or v in ("fused", "auto") for k, v in paths.items() if v != "reference")
    assert len(batched_paths(CELLS.values())) == 11  # + minGRU/minLSTM's base, sLSTM, mLSTM


def test_dmu_steps_gradcheck():
    """The fused DMU of an ensemble (hand-written backward), with lengths, against autograd's
    numerical gradients."""
    E, T, B, H, W = 2, 4, 3, 2, 3
    g = torch.Generator().manual_seed(1)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=D, requires_grad=True)  # noqa: E731
    mask = (torch.arange(T)[:, None, None] < torch.tensor([[4, 2, 1], [3, 4, 2]])[None]).unsqueeze(-1).to(D)
    for hidden in ([], [mk(E, 3, W), mk(E, 3)]):
        args = (mk(E, T, B, W), mk(E, B, H), mask, mk(E, W, H), mk(E, 2 * H, 3 if hidden else W), mk(E, 2 * H))
        torch.autograd.gradcheck(lambda *a: _DMUSteps.apply("tanh", 0.01, *a), (*args, *hidden))
    lin = (mk(E, T, B, 2 * H), mk(E, B, H), mask, mk(E, 2 * H, H), None, None)
    torch.autograd.gradcheck(lambda *a: _DMUSteps.apply("tanh", 0.01, *a), lin)


def test_ensemble_call_outside_vmap_is_one_member():
    def fn(a, b):
        return (torch.bmm(a, b) + 1,)

    a, b = torch.randn(4, 3, dtype=D), torch.randn(3, 2, dtype=D)
    torch.testing.assert_close(ensemble_call(fn, a, b)[0], a @ b + 1)
    stacked = vmap(lambda a, b: ensemble_call(fn, a, b)[0])(torch.stack([a, 2 * a]), torch.stack([b, b]))
    torch.testing.assert_close(stacked, torch.stack([a @ b + 1, 2 * a @ b + 1]))


def test_tall_linear_inside_vmap():
    """Past MIN_ROWS rows tall_linear is an autograd Function; inside vmap it is F.linear."""
    x = torch.randn(MIN_ROWS + 10, 3, dtype=D)
    W, b = torch.randn(2, 4, 3, dtype=D), torch.randn(2, 4, dtype=D)
    out = vmap(tall_linear, in_dims=(None, 0, 0))(x, W, b)
    torch.testing.assert_close(out, torch.stack([x @ W[k].T + b[k] for k in range(2)]))


LAYOUTS = ["time-major", "view of batch-first", "shared input", "shared view of batch-first", "2-d"]


@pytest.mark.parametrize("n_in,n_out", [(7, 3), (3, 7)])  # both orientations of the product
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("bias", [True, False])
def test_batched_linear_is_each_members_linear(n_in, n_out, layout, bias):
    """batched_linear inside vmap (one product over all of a member's rows, in the memory order
    of its input) against F.linear per member: values and the gradients of x, W and b, float64.
    A shared input (one for all members, an evaluation's) is read in place, not copied per member."""
    E, T, B = 3, 5, 4
    g = torch.Generator().manual_seed(0)
    shape = {
        "view of batch-first": (E, B, T),
        "shared input": (T, B),
        "shared view of batch-first": (B, T),
        "2-d": (E, T * B),
    }.get(layout, (E, T, B))
    xb = torch.randn(*shape, n_in, dtype=D, generator=g).requires_grad_(True)
    # the view of batch-first memory is what Recurrent hands a cell: transpose(0, 1) of (B, T, I)
    x = xb.transpose(-3, -2) if "view of batch-first" in layout else xb
    in_x = None if layout.startswith("shared") else 0
    W = torch.randn(E, n_out, n_in, dtype=D, generator=g, requires_grad=True)
    b = torch.randn(E, n_out, dtype=D, generator=g, requires_grad=True) if bias else None
    out = vmap(batched_linear, in_dims=(in_x, 0, 0 if bias else None))(x, W, b)
    grad = torch.randn(out.shape, dtype=D, generator=g)
    got = torch.autograd.grad(out, [t for t in (xb, W, b) if t is not None], grad)
    member = (lambda k: x[k]) if in_x == 0 else (lambda k: x)
    want_out = torch.stack([torch.nn.functional.linear(member(k), W[k], None if b is None else b[k]) for k in range(E)])
    want = torch.autograd.grad(want_out, [t for t in (xb, W, b) if t is not None], grad)
    torch.testing.assert_close(out, want_out)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w)


def test_batched_linear_outside_vmap_is_f_linear():
    x, W, b = torch.randn(5, 4, 3), torch.randn(2, 3), torch.randn(2)
    assert torch.equal(batched_linear(x, W, b), torch.nn.functional.linear(x, W, b))


@pytest.mark.parametrize("activation", ["tanh", "relu", "modrelu", "identity"])
def test_elementwise_steps_gradcheck(activation):
    """The fused element-wise recurrence of an ensemble (hand-written backward), with and
    without lengths, against autograd's numerical gradients."""
    E, T, B, H = 2, 4, 3, 3
    g = torch.Generator().manual_seed(2)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=D, requires_grad=True)  # noqa: E731
    mask = (torch.arange(T)[:, None, None] < torch.tensor([[4, 2, 1], [3, 4, 2]])[None]).unsqueeze(-1).to(D)
    bias = mk(E, H) if activation == "modrelu" else None
    for m in (None, mask):
        torch.autograd.gradcheck(
            lambda u, W, h0, b: _ElementwiseSteps.apply(activation, u, W, h0, b, m),
            (mk(E, T, B, H), mk(E, H, H) * 0.5, mk(E, B, H), bias),
        )
