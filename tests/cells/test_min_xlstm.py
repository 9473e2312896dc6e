"""minGRU, minLSTM (Feng et al. 2024) and xLSTM's sLSTM and mLSTM (Beck et al. 2024).

* the step ``forward`` against the papers' equations written out here (minGRU/minLSTM in
  plain arithmetic; sLSTM and mLSTM *unstabilised*, without m, in float64 at moderate values:
  the stabiliser must change nothing but the scale of c, n and C);
* the fast paths (the log-space scan, the mLSTM's chunkwise parallel form) against the step
  loop to 1e-10 in float64: outputs, every leaf of the final state and every gradient, over
  h0, lengths, heads, both forget gates and chunk sizes that do and do not divide T;
* layers (stacked, bidirectional, batch-first) with the fast path against the reference;
* option errors.
"""

from __future__ import annotations

import math

import pytest
import torch

from rnnlab.cells import MinGRU, MinGRUCell, MinLSTMCell, MLSTMCell, Recurrent, SLSTMCell, unroll

D = torch.float64
TOL = 1e-10


def _x(T, B, I, seed=0, scale=1.0):
    return scale * torch.randn(T, B, I, generator=torch.Generator().manual_seed(seed), dtype=D)


def _random_state(cell, B, seed=1, positive_n=False):
    g = torch.Generator().manual_seed(seed)
    leaves = [0.5 * torch.randn(s.shape, generator=g, dtype=D) for s in _leaves(cell.init_state(B, dtype=D))]
    return tuple(leaves) if len(leaves) > 1 else leaves[0]


def _perturb(cell, seed=3, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return cell


def _leaves(s):
    return [s] if isinstance(s, torch.Tensor) else list(s)


def _compare_paths(cell, x, h0, lengths=None):
    """Fast path vs the step loop: outputs, final state, gradients of x, h0 and parameters."""
    x = x.clone().requires_grad_()
    h0 = tuple(t.clone().requires_grad_() for t in _leaves(h0))
    h0 = h0 if len(h0) > 1 else h0[0]
    params = list(cell.parameters())
    r = torch.randn(x.shape[:2] + (cell.hidden_size,), generator=torch.Generator().manual_seed(9), dtype=D)
    results = []
    for run in (lambda: cell.sequence(x, h0, lengths), lambda: unroll(cell, x, h0, lengths)):
        out, st = run()
        loss = (out * r).sum() + sum(torch.tanh(s).sum() for s in _leaves(st))
        grads = torch.autograd.grad(loss, [x, *_leaves(h0), *params])
        results.append([out.detach(), *[s.detach() for s in _leaves(st)], *grads])
    worst = max(float((a - b).abs().max()) for a, b in zip(*results))
    assert worst <= TOL, f"fast path differs from the step loop by {worst:.3g}"
    return worst


# --- minGRU / minLSTM ------------------------------------------------------------------------


def test_mingru_step_is_the_papers_update():
    cell = _perturb(MinGRUCell(3, 5).double())
    x, h = _x(1, 4, 3)[0], _random_state(cell, 4)
    W, b = cell.weight_ih, cell.bias_ih
    z = torch.sigmoid(x @ W[:5].T + b[:5])
    pre = x @ W[5:].T + b[5:]
    cand = torch.where(pre >= 0, pre + 0.5, torch.sigmoid(pre))
    want = (1 - z) * h + z * cand
    got, state = cell(x, h)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
    assert got is state


def test_minlstm_step_is_the_papers_update_with_normalised_gates():
    cell = _perturb(MinLSTMCell(3, 5).double())
    x, h = _x(1, 4, 3)[0], _random_state(cell, 4)
    W, b = cell.weight_ih, cell.bias_ih
    f = torch.sigmoid(x @ W[:5].T + b[:5])
    i = torch.sigmoid(x @ W[5:10].T + b[5:10])
    pre = x @ W[10:].T + b[10:]
    cand = torch.where(pre >= 0, pre + 0.5, torch.sigmoid(pre))
    want = f / (f + i) * h + i / (f + i) * cand
    torch.testing.assert_close(cell(x, h)[0], want, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("backend", ["scan", "loop"])
@pytest.mark.parametrize("cls", [MinGRUCell, MinLSTMCell])
@pytest.mark.parametrize("lengths", [None, [60, 1, 33]])
def test_min_scan_and_loop_equal_the_step_loop(cls, lengths, backend):
    torch.manual_seed(0)
    cell = _perturb(cls(3, 5, backend=backend).double(), scale=1.0)
    x = _x(60, 3, 3, scale=2.0)
    _compare_paths(cell, x, _random_state(cell, 3), None if lengths is None else torch.tensor(lengths))


@pytest.mark.parametrize("cls", [MinGRUCell, MinLSTMCell])
def test_min_scan_is_exact_in_the_tails(cls):
    """Preactivations past +-20, where torch's softplus would switch to its linear branch:
    the scan still equals the loop, relative to the size of each compared tensor."""
    cell = _perturb(cls(3, 5, backend="scan").double(), scale=2.0)
    x = _x(40, 2, 3, scale=6.0)
    pre = x @ cell.weight_ih.detach().T + cell.bias_ih.detach()
    assert float(pre.abs().max()) > 25
    out, h = cell.sequence(x)
    ref, h_ref = unroll(cell, x)
    for a, b in ((out, ref), (h, h_ref)):
        a, b = a.detach(), b.detach()
        assert float((a - b).abs().max() / b.abs().max()) <= 1e-13


def test_auto_takes_the_loop_on_the_cpu_and_the_scan_elsewhere():
    x = torch.empty(3, 2, 2)
    assert not MinGRUCell(2, 3).uses_scan(x) and MinGRUCell(2, 3).uses_scan(x.to("meta"))
    assert MinLSTMCell(2, 3, backend="scan").uses_scan(x) and not MinLSTMCell(2, 3, backend="loop").uses_scan(
        x.to("meta")
    )
    ref = MinGRUCell(2, 3, backend="reference").double()
    x = _x(7, 2, 2)
    torch.testing.assert_close(ref.sequence(x)[0], unroll(ref, x)[0], rtol=0, atol=0)


def test_min_layer_stacked_bidirectional_equals_the_reference():
    torch.manual_seed(0)
    layer = MinGRU(3, 4, num_layers=2, bidirectional=True, batch_first=True, backend="scan").double()
    x = _x(9, 3, 3).transpose(0, 1).contiguous()  # (B, T, I)
    lengths = torch.tensor([9, 4, 1])
    out, h_n = layer(x, lengths=lengths)
    for c in layer.cells:
        c.backend = "reference"
    ref, h_ref = layer(x, lengths=lengths)
    assert float((out - ref).detach().abs().max()) <= TOL and float((h_n - h_ref).detach().abs().max()) <= TOL


# --- sLSTM ---------------------------------------------------------------------------------


def _slstm_unstabilised(cell: SLSTMCell, x, h, c, n):
    """The sLSTM without the stabiliser (Beck et al. 2024), R built as a full
    block-diagonal matrix: returns the outputs and the final (h, c, n)."""
    H, heads = cell.hidden_size, cell.heads
    R = torch.cat([torch.block_diag(*cell.weight_hh[gate].unbind(0)) for gate in range(4)])  # (4H, H)
    outs = []
    for x_t in x.unbind(0):
        pre = x_t @ cell.weight_ih.T + cell.bias + h @ R.T
        z, i, f, o = pre[:, :H], pre[:, H : 2 * H], pre[:, 2 * H : 3 * H], pre[:, 3 * H :]
        f_gate = torch.sigmoid(f) if cell.forget_gate == "sigmoid" else torch.exp(f)
        c = f_gate * c + torch.exp(i) * torch.tanh(z)
        n = f_gate * n + torch.exp(i)
        h = torch.sigmoid(o) * c / n
        outs.append(h)
    assert heads >= 1
    return torch.stack(outs), (h, c, n)


@pytest.mark.parametrize("forget_gate", ["sigmoid", "exp"])
@pytest.mark.parametrize("heads", [1, 2])
def test_slstm_stabilised_equals_unstabilised(forget_gate, heads):
    torch.manual_seed(0)
    cell = SLSTMCell(3, 4, heads=heads, forget_gate=forget_gate).double()
    _perturb(cell, scale=0.3)
    x = _x(12, 2, 3)
    out, (h, c, n, m) = unroll(cell, x)
    want, (h_u, c_u, n_u) = _slstm_unstabilised(cell, x, *(torch.zeros(2, 4, dtype=D) for _ in range(3)))
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    # the stabilised states are the unstabilised ones scaled by exp(-m)
    torch.testing.assert_close(c * m.exp(), c_u, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(n * m.exp(), n_u, rtol=1e-12, atol=1e-12)
    assert float(m.detach().abs().max()) > 0.1  # the stabiliser did move


def test_slstm_recurrence_is_block_diagonal():
    """A unit's gates see only the previous outputs of its own head."""
    cell = _perturb(SLSTMCell(2, 6, heads=3).double())
    x = _x(1, 1, 2)[0]
    state = _random_state(cell, 1)
    h1, _ = cell(x, state)
    moved = (state[0].clone(), *state[1:])
    moved[0][0, 0] += 1.0  # a unit of head 0
    h2, _ = cell(x, moved)
    changed = (h1 - h2).detach().abs()[0] > 0
    assert changed[:2].all() and not changed[2:].any()


@pytest.mark.parametrize("lengths", [None, [7, 2]])
def test_slstm_sequence_equals_the_step_loop(lengths):
    cell = _perturb(SLSTMCell(3, 4, heads=2, forget_gate="exp").double(), scale=0.3)
    _compare_paths(cell, _x(7, 2, 3), _random_state(cell, 2), None if lengths is None else torch.tensor(lengths))


# --- mLSTM ---------------------------------------------------------------------------------


def _mlstm_unstabilised(cell: MLSTMCell, x):
    """The mLSTM without the stabiliser (Beck et al. 2024), head by head, from zeros."""
    H, nh, d = cell.hidden_size, cell.heads, cell.head_size
    T, B, _ = x.shape
    C = torch.zeros(B, nh, d, d, dtype=D)
    n = torch.zeros(B, nh, d, dtype=D)
    outs = []
    for x_t in x.unbind(0):
        u = x_t @ cell.weight_ih.T + cell.bias_ih
        q, k, v, o = (u[:, j * H : (j + 1) * H].reshape(B, nh, d) for j in range(4))
        k = k / math.sqrt(d)
        i_gate = torch.exp(u[:, 4 * H : 4 * H + nh])
        f_pre = u[:, 4 * H + nh :]
        f_gate = torch.sigmoid(f_pre) if cell.forget_gate == "sigmoid" else torch.exp(f_pre)
        h = torch.zeros(B, nh, d, dtype=D)
        for b in range(B):
            for hd in range(nh):
                C[b, hd] = f_gate[b, hd] * C[b, hd] + i_gate[b, hd] * torch.outer(v[b, hd], k[b, hd])
                n[b, hd] = f_gate[b, hd] * n[b, hd] + i_gate[b, hd] * k[b, hd]
                h[b, hd] = C[b, hd] @ q[b, hd] / torch.clamp((n[b, hd] @ q[b, hd]).abs(), min=1.0)
        outs.append(torch.sigmoid(o).reshape(B, H) * h.reshape(B, H))
    return torch.stack(outs), C, n


@pytest.mark.parametrize("forget_gate", ["sigmoid", "exp"])
@pytest.mark.parametrize("heads", [1, 2])
def test_mlstm_stabilised_equals_unstabilised(forget_gate, heads):
    torch.manual_seed(0)
    cell = MLSTMCell(3, 4, heads=heads, forget_gate=forget_gate).double()
    _perturb(cell, scale=0.3)
    if forget_gate == "exp":
        with torch.no_grad():
            cell.bias_ih[-heads:] = -0.2  # moderate values: exp forget gates of about 1
    x = _x(10, 2, 3)
    for path in (lambda: unroll(cell, x), lambda: cell.sequence(x)):
        out, state = path()
        C, n, m = cell.unpack_state(state)
        want, C_u, n_u = _mlstm_unstabilised(cell, x)
        torch.testing.assert_close(out, want, rtol=1e-11, atol=1e-12)
        scale = m.exp()
        torch.testing.assert_close(C * scale[..., None, None], C_u, rtol=1e-11, atol=1e-12)
        torch.testing.assert_close(n * scale[..., None], n_u, rtol=1e-11, atol=1e-12)
        assert float(m.detach().abs().max()) > 0.1


@pytest.mark.parametrize(
    "heads,forget_gate,chunk,lengths",
    [
        (1, "sigmoid", 64, None),  # one chunk
        (2, "sigmoid", 3, None),  # chunks that do not divide T
        (2, "exp", 1, [11, 4, 1]),  # one step per chunk, lengths
        (4, "sigmoid", 4, [5, 11, 8]),  # lengths ending in and across chunks
    ],
)
def test_mlstm_parallel_equals_the_step_loop(heads, forget_gate, chunk, lengths):
    torch.manual_seed(0)
    cell = _perturb(MLSTMCell(3, 8, heads=heads, forget_gate=forget_gate, chunk=chunk).double(), scale=0.3)
    worst = _compare_paths(
        cell, _x(11, 3, 3), _random_state(cell, 3), None if lengths is None else torch.tensor(lengths)
    )
    assert worst <= TOL


def test_mlstm_state_round_trip_and_layout():
    cell = MLSTMCell(2, 6, heads=3)  # d = 2
    state = cell.init_state(4)
    assert len(state) == 2 + 2 and all(s.shape == (4, 6) for s in state)
    g = torch.Generator().manual_seed(0)
    C, n, m = torch.randn(4, 3, 2, 2, generator=g), torch.randn(4, 3, 2, generator=g), torch.randn(4, 3, generator=g)
    C2, n2, m2 = cell.unpack_state(cell.pack_state(C, n, m))
    assert torch.equal(C, C2) and torch.equal(n, n2) and torch.equal(m, m2)
    packed = cell.pack_state(C, n, m)
    assert torch.equal(packed[1].reshape(4, 3, 2), C[..., 1])  # column j of every head's C


class _Sequence(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, lengths):
        return self.cell.sequence(x, None, lengths)


def test_mlstm_gradcheck_through_chunks():
    from torch.func import functional_call

    cell = _perturb(MLSTMCell(1, 4, heads=2, chunk=2).double(), scale=0.3)
    wrapper = _Sequence(cell)
    names = [k for k, _ in wrapper.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in wrapper.parameters())
    x = _x(5, 2, 1).requires_grad_()
    lengths = torch.tensor([5, 3])

    def f(x, *ps):
        out, st = functional_call(wrapper, dict(zip(names, ps)), (x, lengths))
        return out, *st

    assert torch.autograd.gradcheck(f, (x, *params), fast_mode=True)


# --- options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: SLSTMCell(2, 6, heads=4), r"heads must be a positive integer that divides hidden_size \(6\), got 4"),
        (lambda: MLSTMCell(2, 6, heads=0), r"heads must be .* got 0"),
        (lambda: MLSTMCell(2, 6, forget_gate="tanh"), r"forget_gate must be one of \('sigmoid', 'exp'\)"),
        (lambda: MLSTMCell(2, 6, chunk=0), r"chunk must be a positive number of steps, got 0"),
        (lambda: MinGRUCell(2, 6, backend="parallel"), r"unknown backend 'parallel' for MinGRUCell"),
    ],
)
def test_bad_options_are_named(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_layers_take_the_cells_options():
    layer = Recurrent(3, 8, cell=MLSTMCell, heads=2, chunk=4)
    out, h_n = layer(torch.randn(6, 2, 3))
    assert out.shape == (6, 2, 8) and len(h_n) == 4 + 2 and h_n[0].shape == (1, 2, 8)
