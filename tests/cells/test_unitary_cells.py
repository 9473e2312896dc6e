"""The complex unitary cells (uRNN, EURNN): unitarity, the fast factor application against
independently built dense matrices, float64 gradients, parameter counts and the copy task."""

import copy
import math

import pytest
import torch

from rnnlab.cells import EURNN, URNN, EURNNCell, URNNCell, unroll
from rnnlab.cells.unitary import complex_modrelu
from rnnlab.model import SequenceModel
from rnnlab.tasks import CopyTask

C = torch.complex128


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest


def cells():
    torch.manual_seed(0)
    return {
        "urnn N=6": URNNCell(3, 12),
        "urnn N=8": URNNCell(3, 16),
        "eurnn tunable L=1": EURNNCell(3, 12, capacity=1),
        "eurnn tunable L=3 N=6": EURNNCell(3, 12, capacity=3),
        "eurnn tunable L=N=5 (odd)": EURNNCell(3, 10, capacity=5),
        "eurnn tunable L=8 N=8": EURNNCell(3, 16, capacity=8),
        "eurnn fft N=8": EURNNCell(3, 16, variant="fft"),
    }


def dense_urnn(cell: URNNCell) -> torch.Tensor:
    """W = D3 R2 F^{-1} D2 Pi R1 F D1 from the parameters, with the DFT and permutation written
    out as matrices (no FFT, no gather)."""
    n = cell.units
    k = torch.arange(n, dtype=torch.float64)
    F = torch.exp(-2j * math.pi * torch.outer(k, k) / n).to(C) / math.sqrt(n)
    D = [torch.diag(torch.exp(1j * t.detach().to(torch.float64)).to(C)) for t in cell.theta]
    R = []
    for re, im in cell.reflection.detach().double():
        v = torch.complex(re, im).unsqueeze(1)
        R.append(torch.eye(n, dtype=C) - 2 * (v @ v.conj().T) / (v.conj().T @ v))
    Pi = torch.zeros(n, n, dtype=C)
    Pi[torch.arange(n), cell.permutation] = 1  # (Pi z)_k = z_perm[k]
    return D[2] @ R[1] @ F.conj().T @ D[1] @ Pi @ R[0] @ F @ D[0]


def dense_eurnn(cell: EURNNCell) -> torch.Tensor:
    """W = D F^(1) ... F^(L), each layer a dense matrix filled pair by pair."""
    from rnnlab.cells.unitary import eurnn_layers

    n = cell.units
    layers = eurnn_layers(n, cell.variant, cell.capacity)
    angle, phase = cell.angle.detach().double().tolist(), cell.phase.detach().double().tolist()
    W, r = torch.eye(n, dtype=C), 0
    for pairs in layers:
        F = torch.eye(n, dtype=C)
        for i, j in pairs:
            t, p = angle[r], phase[r]
            e = complex(math.cos(p), math.sin(p))
            F[i, i], F[i, j] = e * math.cos(t), -math.sin(t)
            F[j, i], F[j, j] = e * math.sin(t), math.cos(t)
            r += 1
        W = W @ F
    assert r == cell.angle.numel()
    return torch.diag(torch.exp(1j * cell.omega.detach().double()).to(C)) @ W


def dense(cell):
    return dense_urnn(cell) if isinstance(cell, URNNCell) else dense_eurnn(cell)


@pytest.mark.parametrize("name", list(cells()))
def test_unitary_to_float64_precision(name):
    cell = cells()[name].double()
    W = cell.unitary_matrix()
    n = cell.units
    assert W.shape == (n, n) and W.dtype == C
    eye = torch.eye(n, dtype=C)
    assert (W.conj().T @ W - eye).abs().max() < 1e-13
    assert (W @ W.conj().T - eye).abs().max() < 1e-13
    Q = cell.recurrent_matrix()  # the real form acting on [Re h; Im h] is orthogonal
    assert Q.shape == (2 * n, 2 * n)
    assert (Q.T @ Q - torch.eye(2 * n, dtype=torch.float64)).abs().max() < 1e-13


@pytest.mark.parametrize("name", list(cells()))
def test_fast_application_equals_the_dense_product(name):
    cell = cells()[name].double()
    Wd = dense(cell)
    torch.testing.assert_close(cell.unitary_matrix(), Wd, rtol=0, atol=1e-12)
    z = torch.randn(5, cell.units, dtype=C)
    torch.testing.assert_close(cell.apply(cell.operator(), z), z @ Wd.T, rtol=0, atol=1e-12)
    # one step of the cell: h' = modReLU(W h + V x) in [Re; Im] packing
    n = cell.units
    x, h = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 2 * n, dtype=torch.float64)
    V = torch.complex(cell.weight_ih[:n], cell.weight_ih[n:]).detach()
    z = torch.complex(h[:, :n], h[:, n:]) @ Wd.T + x.to(C) @ V.T
    mod = z.abs()
    want = z / mod * torch.relu(mod + cell.bias.detach())
    got, _ = cell(x, h)
    torch.testing.assert_close(got, torch.cat([want.real, want.imag], 1))


def test_modrelu_is_zero_at_zero_and_keeps_the_phase():
    z = torch.tensor([0j, 3 + 4j, -1j], dtype=C)
    out = complex_modrelu(z, torch.tensor([0.5, -1.0, -2.0], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([0j, (3 + 4j) * 4 / 5, 0j], dtype=C))


@pytest.mark.parametrize("cls,kw", [(URNNCell, {}), (EURNNCell, {"capacity": 3}), (EURNNCell, {"variant": "fft"})])
def test_gradcheck_float64(cls, kw):
    torch.manual_seed(1)
    cell = cls(3, 8, **kw).double()
    names = [n for n, _ in cell.named_parameters()]
    params = [p.detach().clone().requires_grad_() for _, p in cell.named_parameters()]
    x = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 8, dtype=torch.float64, requires_grad=True)

    def f(x, h0, *ps):
        return _seq(cell, dict(zip(names, ps)), x, h0)

    assert torch.autograd.gradcheck(f, (x, h0, *params), fast_mode=True)


def _seq(cell, params, x, h0):
    return torch.func.functional_call(_Seq(cell), {f"cell.{k}": v for k, v in params.items()}, (x, h0))


class _Seq(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, h0):
        return self.cell.sequence(x, h0)


def test_parameter_counts_as_the_papers_state():
    # uRNN: 3N phases + two complex reflection vectors = 7N real parameters in W
    for n in (4, 64, 512):
        assert URNNCell(1, 2 * n).unitary_parameter_count() == 7 * n
    # EURNN tunable: L = N layers span U(N), whose dimension is N^2; FFT style: N log2 N + N
    for n in (4, 5, 8, 16):
        assert EURNNCell(1, 2 * n, capacity=n).unitary_parameter_count() == n * n
    for n in (4, 8, 64):
        assert EURNNCell(1, 2 * n, variant="fft").unitary_parameter_count() == n * int(math.log2(n)) + n
    # capacity L (N even): ceil(L/2) N + floor(L/2) (N - 2) + N
    assert EURNNCell(1, 2 * 64, capacity=2).unitary_parameter_count() == 64 + 62 + 64
    # input map (complex N x I = 2 N I reals) + N modReLU biases + W
    cell = URNNCell(7, 2 * 10)
    assert cell.free_parameter_count() == 2 * 10 * 7 + 10 + 70 == sum(p.numel() for p in cell.parameters())


def test_full_capacity_eurnn_reaches_every_direction_of_u_n():
    """At a generic point the derivative of the map (angles, phases, omega) -> W has rank N^2:
    the L = N tunable EURNN covers a neighbourhood in U(N), not a thinner subset."""
    torch.manual_seed(2)
    n = 4
    cell = EURNNCell(1, 2 * n, capacity=n).double()
    names = ["angle", "phase", "omega"]

    def W(*ps):
        op = torch.func.functional_call(_Op(cell), dict(zip([f"cell.{k}" for k in names], ps)), ())
        return torch.view_as_real(op).reshape(-1)

    J = torch.autograd.functional.jacobian(W, tuple(getattr(cell, k).detach() for k in names))
    J = torch.cat([j.reshape(j.shape[0], -1) for j in J], 1)
    assert torch.linalg.matrix_rank(J).item() == n * n
    # restricted capacity (L = 2) reaches fewer directions
    small = EURNNCell(1, 2 * n, capacity=2).double()
    assert small.unitary_parameter_count() < n * n


class _Op(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self):
        return self.cell.unitary_matrix()


def test_param_groups_put_the_unitary_factors_in_their_own_group():
    for cell, names in ((URNNCell(2, 8), {"theta", "reflection"}), (EURNNCell(2, 8), {"angle", "phase", "omega"})):
        groups = cell.param_groups()
        assert {id(p) for p in groups["unitary"]} == {id(getattr(cell, n)) for n in names}
        assert {id(p) for p in groups["default"]} == {id(cell.weight_ih), id(cell.bias)}


def test_options_fail_with_one_clear_line():
    with pytest.raises(ValueError, match="hidden_size must be even, got 7"):
        URNNCell(2, 7)
    with pytest.raises(ValueError, match="power of two complex units"):
        EURNNCell(2, 12, variant="fft")
    with pytest.raises(ValueError, match="variant must be 'tunable' or 'fft'"):
        EURNNCell(2, 8, variant="fast")
    with pytest.raises(ValueError, match="capacity >= 1"):
        EURNNCell(2, 8, capacity=0)


def test_layers_stack_and_float32_runs():
    torch.manual_seed(3)
    for layer in (URNN(3, [8, 4]), EURNN(3, 8, num_layers=2, capacity=3)):
        out, h = layer(torch.randn(5, 2, 3))
        assert out.shape[-1] == layer.hidden_size and out.dtype == torch.float32
        ref, _ = unroll(layer.cells[0], torch.randn(5, 2, 3))
        assert torch.isfinite(ref).all()


def _train_copy(cell, steps, L, K, alphabet, batch=32, lr=1e-2, **opts):
    torch.manual_seed(0)
    task = CopyTask(K=K, L=L, alphabet=alphabet, val_size=256)
    model = SequenceModel(cell, task.input_size, task.output_size, 32, num_tokens=task.num_tokens, cell_options=opts)
    opt = torch.optim.RMSprop(model.parameters(), lr=lr, alpha=0.9)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        b = task.make(batch, g)
        out, _ = model(b.x)
        loss = task.loss(out, b)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        val = task.eval_set("val")
        return task.loss(model(val.x)[0], val).item(), task.baseline()["loss"]


@pytest.mark.parametrize("cell,opts", [("urnn", {}), ("eurnn", {"capacity": 4})])
def test_copy_task_beats_the_memoryless_baseline(cell, opts):
    loss, baseline = _train_copy(cell, 30, L=10, K=5, alphabet=4, **opts)
    assert loss < 0.5 * baseline


@pytest.mark.slow
@pytest.mark.parametrize("cell,opts", [("urnn", {}), ("eurnn", {"capacity": 4}), ("eurnn", {"variant": "fft"})])
def test_copy_task_longer_delay(cell, opts):
    """Delay 50, K = 10 symbols from 8 (T = 70): about 5 minutes per cell on one busy core; the
    training loss was at about half the baseline after 225 of the 300 steps for each cell."""
    loss, baseline = _train_copy(cell, 300, L=50, K=10, alphabet=8, lr=3e-3, **opts)
    assert loss < 0.7 * baseline


UNITARY_PRESETS = {
    # preset: (task input size, output size, tokens, the paper's parameter budget)
    "asrnn/ptb_char-bptt150-eurnn": (50, 50, 50, 1_320_000),
    "asrnn/ptb_char-bptt300-eurnn": (50, 50, 50, 1_320_000),
    "nnrnn/ptb-bptt150-eurnn": (50, 50, 50, 1_320_000),
    "nnrnn/ptb-bptt300-eurnn": (50, 50, 50, 1_320_000),
    "asrnn/smnist-n122-urnn": (1, 10, None, 16_000),
    "asrnn/psmnist-n122-urnn": (1, 10, None, 16_000),
}


@pytest.mark.parametrize("name", sorted(UNITARY_PRESETS))
def test_unitary_presets_load_and_meet_the_papers_budgets(name):
    from rnnlab import config

    cfg = config.load(name)
    assert cfg.model.cell in ("eurnn", "urnn")
    I, O, tokens, budget = UNITARY_PRESETS[name]
    model = SequenceModel(
        cfg.model.cell,
        I,
        O,
        cfg.model.hidden_size,
        num_tokens=tokens,
        embedding=cfg.model.embedding,
        cell_options=cfg.model.cell_options,
    )
    free = model.parameter_counts()["free"]
    assert abs(free - budget) / budget < 0.001, free


@pytest.mark.parametrize("key", ["fcurnn", "kru"])
def test_random_unitary_starts_are_float64_draws_in_a_float64_model(key):
    """The Haar start is drawn in float64 and cast to the default dtype; a cell then cast to
    float64 gets the draw itself (before: the float32 rounding of it, unitary only to about
    5e-8 (fcuRNN) / 1.2e-7 (KRU)). A cell whose start was trained or loaded keeps its values."""
    from rnnlab.cells import CELLS

    torch.manual_seed(0)
    cell = CELLS[key](3, 16)
    W32 = cell.unitary_matrix()
    wide = copy.deepcopy(cell).double()
    W = wide.unitary_matrix()
    eye = torch.eye(W.shape[0], dtype=W.dtype)
    assert (W.conj().T @ W - eye).abs().max().item() < 1e-14
    assert (W.to(W32.dtype) - W32).abs().max().item() < 1e-6  # the same start, at float64 precision
    if key == "kru":  # a factor changed since (as by training) keeps its own values
        with torch.no_grad():
            cell.factor0.add_(1e-3)
        before = cell.factor0.detach().clone()
        assert torch.equal(cell.double().factor0, before.double())
