"""Jacobian analysis: the paper's closed-form J(t) against autograd, products over lags against
known answers, Theorem 2.1 quantities, permutation distances, the plot."""

import math

import numpy as np
import pytest
import torch

from conftest import set_flags
from rnnlab import ASRNNCell, ExpRNNCell, LSTMCell, RNNCell
from rnnlab import parametrize as par
from rnnlab.analysis.jacobian import (
    analyze_model,
    lag_spectrum,
    permutation_distance,
    plot_lag_spectra,
    step_jacobians,
    theorem21,
)

torch.set_num_threads(1)
D = torch.float64


def asrnn(H=10, I=3, seed=0, uf_scale=0.3):
    torch.manual_seed(seed)
    cell = ASRNNCell(I, H, a=0.2, b=1.5).double()
    with torch.no_grad():
        cell.parametrizations.weight_uf.original.normal_(0, uf_scale)
        cell.bias.normal_(0, 0.2)
    return cell


def test_asrnn_closed_form_equals_autograd():
    cell = asrnn()
    x = torch.randn(15, 3, dtype=D)
    _, J_closed = step_jacobians(cell, x, method="closed")
    _, J_auto = step_jacobians(cell, x, method="autograd")
    assert J_closed.shape == (15, 10, 10)
    torch.testing.assert_close(J_closed, J_auto, rtol=1e-10, atol=1e-12)


def test_product_of_step_jacobians_is_the_end_to_end_derivative():
    """J(T, 0) = J(T) ... J(1) equals d h_T / d h_0 computed by autograd through the loop."""
    cell = asrnn(H=6, uf_scale=0.5)
    x = torch.randn(8, 3, dtype=D)
    _, J = step_jacobians(cell, x)
    P = torch.eye(6, dtype=D)
    for Jt in J:
        P = Jt @ P

    def run(h0):
        h = h0[None]
        for x_t in x:
            h, _ = cell(x_t[None], h)
        return h[0]

    full = torch.autograd.functional.jacobian(run, torch.zeros(6, dtype=D))
    torch.testing.assert_close(P, full, rtol=1e-10, atol=1e-12)
    spec = lag_spectrum(J)
    sv = torch.linalg.svdvals(full)
    assert spec.sigma_max[-1] == pytest.approx(sv[0].item(), rel=1e-10)
    assert spec.sigma_min[-1] == pytest.approx(sv[-1].item(), rel=1e-8)


def test_generic_autograd_jacobians_for_other_cells():
    torch.manual_seed(1)
    x = torch.randn(5, 3, dtype=D)
    rnn = RNNCell(3, 7).double()
    states, J = step_jacobians(rnn, x)
    for t in range(5):  # tanh RNN: J(t) = diag(1 - h_t^2) W_hh
        h = states[t + 1][0]
        torch.testing.assert_close(J[t], (1 - h * h)[:, None] * rnn.weight_hh, rtol=1e-12, atol=1e-14)
    exp = ExpRNNCell(3, 8).double()
    _, J = step_jacobians(exp, x)
    assert J.shape == (5, 8, 8) and torch.isfinite(J).all()
    lstm = LSTMCell(3, 4).double()
    _, J = step_jacobians(lstm, x)  # state (h, c) flattened: 2H
    assert J.shape == (5, 8, 8)
    with pytest.raises(ValueError, match="closed-form"):
        step_jacobians(rnn, x, method="closed")


def known_product(lam, T, seed=0):
    """J_t = Q_t diag(lam) Q_{t-1}^T: the product over k steps is Q_k diag(lam^k) Q_0^T."""
    g = torch.Generator().manual_seed(seed)
    n = len(lam)
    Qs = [torch.linalg.qr(torch.randn(n, n, generator=g, dtype=D))[0] for _ in range(T + 1)]
    return torch.stack([Qs[t + 1] @ torch.diag(lam) @ Qs[t].T for t in range(T)])


def test_lag_spectrum_known_answer_and_resolution():
    lam = torch.linspace(0.5, 1.1, 8, dtype=D)
    spec = lag_spectrum(known_product(lam, 300))
    k = spec.lags
    np.testing.assert_allclose(spec.log10_sigma_max, k * math.log10(1.1), rtol=1e-9)
    ok = spec.resolved
    assert ok[:20].all() and not ok[-1]  # 0.5^k / 1.1^k falls below 1e-12 near k = 35
    np.testing.assert_allclose(spec.log10_sigma_min[ok], k[ok] * math.log10(0.5), rtol=1e-6)
    # beyond the resolution the explicit product is wrong, the QR bound still follows 0.5^k
    assert (spec.log10_sigma_min[~ok] > k[~ok] * math.log10(0.5) + 5).any()
    assert (spec.log10_qr_min >= k * math.log10(0.5) - 1e-9).all()  # an upper bound on sigma_min
    assert spec.log10_qr_min[-1] / 300 == pytest.approx(math.log10(0.5), abs=0.01)


def test_lag_spectrum_orthogonal_steps_stay_at_one():
    Js = known_product(torch.ones(6, dtype=D), 500)
    spec = lag_spectrum(Js)
    np.testing.assert_allclose(spec.sigma_max, 1.0, rtol=1e-10)
    np.testing.assert_allclose(spec.sigma_min, 1.0, rtol=1e-10)


def test_permutation_distances():
    g = torch.Generator().manual_seed(0)
    perm = torch.eye(6, dtype=D)[torch.randperm(6, generator=g)]
    signs = torch.tensor([1, -1, 1, 1, -1, -1], dtype=D)
    E = perm * signs
    assert permutation_distance(E, signed=True)[0] == pytest.approx(0.0, abs=1e-12)
    scaled = perm * torch.tensor([2.0, -0.5, 3.0, 1.0, 0.1, -7.0], dtype=D)
    assert permutation_distance(scaled, signed=False)[0] == pytest.approx(0.0, abs=1e-12)
    assert permutation_distance(scaled, signed=True)[0] == pytest.approx(6.0)  # |-7| - 1
    noise = 1e-3 * torch.randn(6, 6, generator=g, dtype=D)
    dist, found = permutation_distance(E + noise, signed=True)
    torch.testing.assert_close(found, E)
    assert dist == pytest.approx(torch.linalg.matrix_norm(noise, ord=2).item())
    # a dense orthogonal matrix is far from every signed permutation
    Q = par.random_orthogonal(6, g).double()
    assert permutation_distance(Q, signed=True)[0] > 0.5


def test_theorem21_quantities():
    torch.manual_seed(0)
    cell = ASRNNCell(10, 12, a=0.5, b=2.0).double()
    q = theorem21(cell, C_x=1.0, t=5)
    d = cell.diag_f
    assert q["D_f_norm"] == pytest.approx(d.max().item())
    assert q["D_f_cond"] == pytest.approx((d.max() / d.min()).item())
    # orthogonal W_hh: ||W^{-1}|| = 1, arctanh(0) = 0, so the bound is 0 and cannot hold
    assert q["W_hh_inv_norm"] == pytest.approx(1.0, abs=1e-6)
    assert q["D_f_bound"] == pytest.approx(0.0, abs=1e-3) and not q["D_f_condition_holds"]
    assert q["U_f_to_signed_permutation"] == pytest.approx(0.0, abs=1e-6)  # U_f = I at init
    m = q["W_hh_max_entry"]
    expected = math.log10(torch.linalg.matrix_norm(cell.weight_ih, ord=2).item() * (((m + 1) ** 5 - 1) / m))
    assert q["bound_log10_denominator"] == pytest.approx(expected, rel=1e-9)
    # a non-orthogonal W_hh with sigma_min > 1 gives a positive bound
    with torch.no_grad():
        cell.parametrizations.weight_hh.original.zero_()
        cell.parametrizations.weight_hh[0].base.copy_(torch.eye(12, dtype=D) * 1.2)
    q = theorem21(cell, t=1)
    num = math.atanh(math.sqrt(1 - 1 / 1.2))
    assert q["D_f_bound"] == pytest.approx(num / torch.linalg.matrix_norm(cell.weight_ih, ord=2).item())
    assert q["W_hh_to_generalized_permutation"] == pytest.approx(0.0, abs=1e-12)


def test_analyze_model_and_plot(tmp_path):
    from rnnlab import ASRNN
    from rnnlab.tasks import CopyTask

    torch.manual_seed(0)
    task = CopyTask(K=3, L=20)
    batch = task.make(1, torch.Generator().manual_seed(0))

    class Tiny(torch.nn.Module):  # the trainer's layout: encoder -> rnn
        def __init__(self, layer):
            super().__init__()
            self.encoder = lambda x: torch.nn.functional.one_hot(x, task.input_size).float()
            self.rnn = layer

    res = analyze_model(Tiny(ASRNN(task.input_size, 8)), batch.x[0])
    assert res["T"] == task.T and len(res["spectrum"].lags) == task.T
    assert set(res["theorem21"]) == {"t=1", "t=10", f"t={task.T}"}
    assert res["theorem21"]["t=1"]["C_x"] == 1.0  # one-hot inputs
    from rnnlab import RNN

    spec_rnn = analyze_model(Tiny(RNN(task.input_size, 8)), batch.x[0], max_lag=10)["spectrum"]
    assert len(spec_rnn.lags) == 10
    path = tmp_path / "jac.png"
    plot_lag_spectra({"asRNN": res["spectrum"], "RNN": spec_rnn}, path, title="test")
    assert path.stat().st_size > 1000


def test_cli_analyze_jacobian(tmp_path, capsys):
    import json

    from rnnlab.cli import main

    run = tmp_path / "run"
    small = [
        *set_flags("task.L=12", "task.val_size=4", "task.test_size=4", "train.eval_every=2", "train.steps=2"),
        "--quiet",
    ]
    assert main(["train", "asrnn/copy-L1000", "--out", str(run)] + small) == 0
    png, js = tmp_path / "j.png", tmp_path / "j.json"
    assert main(["analyze", "jacobian", str(run), "--compare", "exprnn,rnn", "-o", str(png), "--json", str(js)]) == 0
    digest = json.loads(js.read_text())
    assert list(digest) == ["asrnn (trained: asrnn-copy-L1000)", "exprnn (at init, n=138)", "rnn (at init, n=138)"]
    first = digest["asrnn (trained: asrnn-copy-L1000)"]
    assert first["cell"] == "ASRNNCell" and first["T"] == 32 and "theorem21" in first
    assert png.stat().st_size > 1000
    assert main(["analyze", "jacobian", str(tmp_path / "nope")]) == 2  # a clear usage error, not a traceback
    assert "nope does not exist; give a run directory" in capsys.readouterr().err
