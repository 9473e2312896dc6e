"""nnRNN cell: V = P (Lambda + T) P^T against the paper's formula built a second way, its
spectral and Schur structure, the regulariser, the initialisation, and the fast path."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from rnnlab import CELLS, NNRNN, NNRNNCell, unroll
from rnnlab import parametrize as par
from rnnlab.cells.nnrnn import initial_orthogonal, nonnormal_mask

torch.set_num_threads(1)


def randomized(n=8, input_size=3, seed=0, t_mask="paper", **kw):
    """A float64 cell with every factor moved away from its initial value."""
    torch.manual_seed(seed)
    cell = NNRNNCell(input_size, n, t_mask=t_mask, **kw).double()
    with torch.no_grad():
        cell.parametrizations.P.original.normal_(0, 0.5)
        cell.gamma.uniform_(0.7, 1.3)
        cell.theta.uniform_(-math.pi, math.pi)
        cell.T.normal_(0, 0.3)
        cell.bias.uniform_(-0.1, 0.1)
    return cell


def dense_V(cell):
    """The paper's V from the raw parameters, written independently: P from the matrix
    exponential of the skew part, Lambda from a Python loop over the 2x2 blocks, T masked
    entry by entry."""
    n = cell.hidden_size
    A = cell.parametrizations.P.original.detach()
    S = torch.triu(A, 1) - torch.triu(A, 1).T
    Pm = cell.orthogonal.base @ torch.linalg.matrix_exp(S)
    blocks = []
    for g, t in zip(cell.gamma.detach(), cell.theta.detach()):
        blocks.append(g * torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=torch.float64))
    Lam = torch.block_diag(*blocks)
    T = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i):
            in_block = i // 2 == j // 2
            if not in_block or cell.t_mask == "reference":
                T[i, j] = cell.T[i, j]
    return Pm @ (Lam + T) @ Pm.T


@pytest.mark.parametrize("t_mask", ["paper", "reference"])
def test_V_equals_dense_formula(t_mask):
    cell = randomized(t_mask=t_mask)
    V = cell.recurrent_matrix().detach()
    assert torch.allclose(V, dense_V(cell), atol=1e-12)


def test_normal_part_is_orthogonal():
    cell = randomized()
    with torch.no_grad():
        cell.T.zero_()
        cell.gamma.fill_(1.0)
    V = cell.recurrent_matrix().detach()
    assert par.orthogonality_error(V) < 1e-12
    # and with T != 0 it is not: the non-normal part breaks orthogonality
    cell2 = randomized()
    with torch.no_grad():
        cell2.gamma.fill_(1.0)
    assert par.orthogonality_error(cell2.recurrent_matrix().detach()) > 1e-2


def test_eigenvalue_moduli_are_the_gammas():
    cell = randomized(n=10)
    V = cell.recurrent_matrix().detach().numpy()
    moduli = np.sort(np.abs(np.linalg.eigvals(V)))
    expected = np.sort(np.repeat(cell.gamma.detach().numpy(), 2))
    assert np.allclose(moduli, expected, atol=1e-9)


def test_real_schur_form_structure():
    """scipy's real Schur form of V: all eigenvalues come in complex pairs, so the
    quasi-triangular factor has n/2 2x2 blocks on its diagonal; its departure from normality
    (Henrici: ||V||_F^2 - sum |lambda|^2) is exactly ||T||_F^2; with T = 0 it is block
    diagonal (V normal)."""
    n = 10
    cell = randomized(n=n, seed=3)
    V = cell.recurrent_matrix().detach().numpy()
    U, Z = scipy.linalg.schur(V, output="real")
    assert np.allclose(Z @ U @ Z.T, V, atol=1e-10)
    sub = np.diag(U, -1)
    assert np.all(np.abs(sub[0::2]) > 1e-8)  # a 2x2 block at every (2k, 2k+1)
    assert np.allclose(sub[1::2], 0.0, atol=1e-10)  # nothing between blocks
    assert np.allclose(np.tril(U, -2), 0.0, atol=1e-10)
    block_moduli = sorted(math.sqrt(abs(np.linalg.det(U[k : k + 2, k : k + 2]))) for k in range(0, n, 2))
    assert np.allclose(block_moduli, np.sort(cell.gamma.detach().numpy()), atol=1e-9)
    eig = np.linalg.eigvals(V)
    departure = np.sum(V**2) - np.sum(np.abs(eig) ** 2)
    T_free = (cell.T * cell.mask).detach().numpy()
    assert departure == pytest.approx(np.sum(T_free**2), rel=1e-8)

    with torch.no_grad():
        cell.T.zero_()
    V0 = cell.recurrent_matrix().detach().numpy()
    U0, _ = scipy.linalg.schur(V0, output="real")
    off_block = U0.copy()
    for k in range(0, n, 2):
        off_block[k : k + 2, k : k + 2] = 0
    assert np.abs(off_block).max() < 1e-10


def test_regulariser_value():
    cell = randomized(delta=0.25)
    expected = 0.25 * sum((float(g) - 1.0) ** 2 for g in cell.gamma.detach())
    assert cell.regularization().item() == pytest.approx(expected, rel=1e-12)
    layer = NNRNN(3, 8, num_layers=2, delta=0.5)
    with torch.no_grad():
        layer.cells[0].gamma.fill_(2.0)  # 4 blocks * (2 - 1)^2
    assert layer.regularization().item() == pytest.approx(0.5 * 4.0)


def test_odd_hidden_size_is_an_error():
    with pytest.raises(ValueError, match="even hidden_size.*hidden_size=7"):
        NNRNNCell(3, 7)


def test_unknown_options_fail_loudly():
    with pytest.raises(ValueError, match="t_mask"):
        NNRNNCell(3, 8, t_mask="upper")
    with pytest.raises(ValueError, match="initialiser"):
        NNRNNCell(3, 8, init="glorot")


def test_masks_and_free_parameter_count():
    n = 128
    assert int(nonnormal_mask(n, "paper").sum()) == n * (n - 1) // 2 - n // 2
    assert int(nonnormal_mask(n, "reference").sum()) == n * (n - 1) // 2
    cell = NNRNNCell(10, n)  # copy task: 10 one-hot inputs
    # P: n(n-1)/2, T: n(n-1)/2 - n/2, gamma and theta: n/2 each, U: 10 n, modReLU bias: n
    assert cell.free_parameter_count() == 8128 + 8064 + 64 + 64 + 1280 + 128 == 17728
    # with the copy readout (9 classes: blank + 8 symbols): the paper's "about 18.9K"
    assert cell.free_parameter_count() + n * 9 + 9 == 18889


def test_masked_entries_get_no_gradient():
    cell = randomized()
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    out, _ = unroll(cell, x)
    out.sum().backward()
    assert torch.all(cell.T.grad[~cell.mask] == 0)
    assert cell.T.grad[cell.mask].abs().sum() > 0


@pytest.mark.parametrize("init", ["henaff", "cayley", "haar", "random", "identity"])
def test_initial_V_is_the_orthogonal_initialiser(init):
    """The init takes effect: V starts equal to the initialiser's orthogonal matrix, computed
    here through rnnlab.parametrize as the expRNN cell would (not through the nnRNN code)."""
    n = 16
    cell = NNRNNCell(4, n, init=init, seed=11, theta_init="init")
    V = cell.recurrent_matrix().detach().double()
    g = torch.Generator().manual_seed(11)
    if init in ("haar", "random"):
        Q0 = par.random_orthogonal(n, g, special=True).double()
    else:
        A, _ = par.initial_skew(init, n, "expm", g)
        Q0 = torch.linalg.matrix_exp(par.skew(A.double()))
    assert torch.allclose(V, Q0, atol=2e-6)
    assert torch.all(cell.gamma == 1) and torch.all(cell.T == 0)
    if init != "identity":
        assert (Q0 - torch.eye(n, dtype=torch.float64)).abs().max() > 0.1
    # seeds are honoured
    V2 = NNRNNCell(4, n, init=init, seed=12, theta_init="init").recurrent_matrix().detach().double()
    assert init == "identity" or not torch.allclose(V, V2)


@pytest.mark.parametrize("init", ["henaff", "cayley", "haar", "random"])
def test_uniform_theta_init_puts_the_initialiser_into_P(init):
    """The default (the nnRNN code's design): P0 is the initialiser's orthogonal matrix and the
    block angles are uniform on (-pi, pi); V0 = P0 Lambda0 P0^T is orthogonal."""
    n = 64
    cell = NNRNNCell(4, n, init=init, seed=3)
    g = torch.Generator().manual_seed(3)
    A, base = par.initial_skew(init, n, "expm", g)
    P0 = base.double() @ torch.linalg.matrix_exp(par.skew(A.double()))
    assert torch.allclose(cell.P.detach().double(), P0, atol=1e-5)
    assert (P0 - torch.eye(n, dtype=torch.float64)).abs().max() > 0.1
    theta = cell.theta.detach()
    assert theta.min() > -math.pi and theta.max() < math.pi and theta.min() < -2 and theta.max() > 2
    V = cell.recurrent_matrix().detach().double()
    assert par.orthogonality_error(V) < 1e-5
    phases = np.sort(np.abs(np.angle(np.linalg.eigvals(V.numpy()))))
    assert np.allclose(phases[::2], np.sort(np.abs(theta.double().numpy())), atol=1e-5)
    with pytest.raises(ValueError, match="theta_init"):
        NNRNNCell(4, 8, theta_init="zeros")


def test_orthogonal_schur_of_haar_matrix():
    Q0, Z, theta = initial_orthogonal("haar", 12, torch.Generator().manual_seed(5))
    assert par.orthogonality_error(Z) < 1e-12
    blocks = torch.block_diag(
        *[torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=torch.float64) for t in theta]
    )
    assert torch.allclose(Z @ blocks @ Z.T, Q0, atol=1e-10)


@pytest.mark.parametrize("with_lengths", [False, True])
def test_fast_path_matches_reference_float64(with_lengths):
    cell = randomized(n=8, input_size=3, seed=4)
    x = torch.randn(7, 3, 3, dtype=torch.float64)
    h0 = torch.randn(3, 8, dtype=torch.float64) * 0.3
    lengths = torch.tensor([7, 4, 2]) if with_lengths else None
    names = [n for n, _ in cell.named_parameters()]

    def run(fast):
        cell.zero_grad()
        cell.backend = "auto" if fast else "reference"
        out, hT = cell.sequence(x, h0, lengths)
        (out.pow(2).sum() + (hT * torch.arange(8.0, dtype=torch.float64)).sum()).backward()
        return out.detach(), hT.detach(), [p.grad.clone() for p in cell.parameters()]

    o1, h1, g1 = run(True)
    o2, h2, g2 = run(False)
    assert torch.allclose(o1, o2, atol=1e-12) and torch.allclose(h1, h2, atol=1e-12)
    for name, a, b in zip(names, g1, g2):
        assert torch.allclose(a, b, atol=1e-10), name


def test_gradcheck_fast_path():
    cell = randomized(n=4, input_size=2, seed=7)
    x = torch.randn(4, 2, 2, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda x: cell.sequence(x)[0], (x,))


def test_layer_registry_groups_and_dtriv():
    assert CELLS["nnrnn"] is NNRNNCell
    layer = NNRNN(3, 8, batch_first=True, K=2)
    groups = layer.param_groups()
    assert set(groups) == {"default", "orthogonal", "nonnormal"}
    assert groups["nonnormal"][0] is layer.cells[0].T
    assert groups["orthogonal"][0] is layer.cells[0].parametrizations.P.original
    out, h_n = layer(torch.randn(2, 5, 3))
    assert out.shape == (2, 5, 8) and h_n.shape == (1, 2, 8)
    # dynamic trivialization re-bases P without changing V
    cell = layer.cells[0]
    with torch.no_grad():
        cell.parametrizations.P.original.normal_(0, 0.3)
    V = cell.recurrent_matrix().detach().clone()
    par.after_optimizer_step(layer)
    par.after_optimizer_step(layer)
    assert int(cell.orthogonal.rebases) == 1
    assert torch.all(cell.parametrizations.P.original == 0)
    assert torch.allclose(cell.recurrent_matrix().detach(), V, atol=1e-5)


def test_recurrent_matrix_of_other_cells():
    from rnnlab import ExpRNNCell, LSTMCell, RNNCell

    assert RNNCell(3, 5).recurrent_matrix().shape == (5, 5)
    W = ExpRNNCell(3, 6).recurrent_matrix()
    assert par.orthogonality_error(W.detach()) < 1e-5
    assert LSTMCell(3, 5).recurrent_matrix() is None


def test_structure_survives_optimizer_steps():
    """After RMSprop steps with weight decay on T: P stays orthogonal, the eigenvalue moduli of V
    stay exactly the gammas, and the masked entries of T stay out of V."""
    torch.manual_seed(1)
    cell = NNRNNCell(3, 8, init="henaff").double()
    groups = cell.param_groups()
    opt = torch.optim.RMSprop(
        [
            {"params": groups["default"]},
            {"params": groups["orthogonal"], "lr": 1e-2},
            {"params": groups["nonnormal"], "weight_decay": 1e-2},
        ],
        lr=1e-2,
    )
    for _ in range(5):
        out, _ = cell.sequence(torch.randn(6, 4, 3, dtype=torch.float64))
        loss = out.pow(2).mean() + cell.regularization()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert par.orthogonality_error(cell.P.detach()) < 1e-12
    assert cell.T.detach().abs().sum() > 0 and not torch.allclose(
        cell.gamma.detach(), torch.ones(4, dtype=torch.float64)
    )
    moduli = np.sort(np.abs(np.linalg.eigvals(cell.recurrent_matrix().detach().numpy())))
    assert np.allclose(moduli, np.sort(np.repeat(np.abs(cell.gamma.detach().numpy()), 2)), atol=1e-10)
    assert torch.allclose(cell.recurrent_matrix().detach(), dense_V(cell), atol=1e-12)
