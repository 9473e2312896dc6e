"""Temporal Jacobians of recurrent cells along a trajectory, their products over growing lags,
and the quantities of the asRNN paper's Theorem 2.1.

Column form: the step Jacobian is ``J(t) = dh_t / dh_{t-1}`` (H, H) and the temporal Jacobian
``J(t2, t1) = J(t2) J(t2 - 1) ... J(t1 + 1) = dh_{t2} / dh_{t1}``.

For asRNN, ``h_t = W_f^{-1} tanh(a_t)`` with ``a_t = W_f (W_xh x_t + W_hh h_{t-1} + b)``, so
``dh_t/dh_{t-1} = W_f^{-1} diag(1 - tanh(a_t)^2) W_f W_hh``; because ``tanh(a_t) = W_f h_t``
this is exactly the paper's ``J(t) = W_f^{-1} diag(1 - (W_f h_t)^2) W_f W_hh``, evaluated at
the *new* state ``h_t`` (not ``h_{t-1}``). Any other cell gets its Jacobian from autograd.

Products of long runs of Jacobians lose their small singular values in floating point (an
explicit product resolves singular values only down to about ``1e-13 * sigma_max`` in
float64), so :func:`lag_spectrum` returns two things: the singular values of the explicit
float64 product (renormalised every step against overflow), with a ``resolved`` flag, and
the QR-accumulated stretching factors ``exp(sum_t log|diag R_t|)`` of the same product, which
stay accurate in the exponent at any lag and bracket the extreme singular values
(``sigma_min <= min_i r_i`` and ``max_i r_i <= sigma_max``: the r_i are the moduli of the
eigenvalues of the triangular factor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor
from torch.nn.utils import parametrize as P

from ..cells.asrnn import ASRNNCell
from ..cells.base import Cell

F64 = torch.float64


# --- trajectories and step Jacobians ---------------------------------------------------------


def _flat(state) -> Tensor:
    return state if isinstance(state, Tensor) else torch.cat(list(state), -1)


def _unflat(vec: Tensor, like):
    if isinstance(like, Tensor):
        return vec
    sizes = [s.shape[-1] for s in like]
    return tuple(vec.split(sizes, -1))


@torch.no_grad()
def trajectory(cell: Cell, x: Tensor, state=None) -> list:
    """States ``[s_0, s_1, ..., s_T]`` of one sequence ``x`` (T, I) by the reference step loop
    (``cell.forward``), each with batch dimension 1."""
    if x.dim() != 2 or x.shape[-1] != cell.input_size:
        raise ValueError(f"trajectory expects one sequence of shape (T, {cell.input_size}), got {tuple(x.shape)}")
    if state is None:
        state = cell.init_state(1, dtype=x.dtype, device=x.device)
    states = [state]
    with P.cached():  # parametrized weights (matrix exponentials) once, not once per step
        for x_t in x:
            _, state = cell(x_t[None], state)
            states.append(state)
    return states


def asrnn_step_jacobian(cell: ASRNNCell, h_t: Tensor) -> Tensor:
    """The paper's ``J(t) = W_f^{-1} diag(1 - (W_f h_t)^2) W_f W_hh`` for a new state ``h_t`` (H,)."""
    U, d, W = cell.weight_uf, cell.diag_f, cell.weight_hh
    W_f = U * d
    W_f_inv = U.T / d[:, None]
    y = W_f @ h_t
    return W_f_inv @ ((1 - y * y)[:, None] * (W_f @ W))


def step_jacobians(cell: Cell, x: Tensor, state=None, method: str = "auto") -> tuple[list, Tensor]:
    """``(states, J)`` along one sequence ``x`` (T, I): ``J[t-1] = d s_t / d s_{t-1}`` (T, S, S)
    for t = 1..T, S the flattened state size (H; 2H for an LSTM's (h, c)).

    ``method``: "auto" (closed form for asRNN, autograd otherwise), "closed" or "autograd".
    Computed in the dtype of ``x`` (use float64 with a float64 cell for long products).
    """
    if method not in ("auto", "closed", "autograd"):
        raise ValueError(f"method must be 'auto', 'closed' or 'autograd', got {method!r}")
    states = trajectory(cell, x, state)
    closed = method == "closed" or (method == "auto" and isinstance(cell, ASRNNCell))
    if closed and not isinstance(cell, ASRNNCell):
        raise ValueError(f"no closed-form Jacobian for {type(cell).__name__}; use method='autograd'")
    Js = []
    if closed:
        with torch.no_grad(), P.cached():
            for s in states[1:]:
                Js.append(asrnn_step_jacobian(cell, s[0]))
        return states, torch.stack(Js)
    with P.cached():
        for x_t, s_prev in zip(x, states[:-1]):
            like = s_prev

            def step(v, x_t=x_t, like=like):
                _, s = cell(x_t[None], _unflat(v[None], like))
                return _flat(s)[0]

            h_prev = _flat(s_prev)[0].detach()
            Js.append(torch.autograd.functional.jacobian(step, h_prev, vectorize=True).detach())
    return states, torch.stack(Js)


# --- singular values of products over growing lags -------------------------------------------


@dataclass
class LagSpectrum:
    """Singular values of ``J(t1 + k, t1)`` for lags k = 1..K (arrays of length K)."""

    lags: np.ndarray
    sigma_max: np.ndarray
    sigma_min: np.ndarray
    resolved: np.ndarray  # sigma_min is above the float64 resolution of the explicit product
    qr_max: np.ndarray  # exp of the largest accumulated log|diag R| (a lower bound on sigma_max)
    qr_min: np.ndarray  # exp of the smallest accumulated log|diag R| (an upper bound on sigma_min)
    log10_sigma_max: np.ndarray = field(default=None)
    log10_sigma_min: np.ndarray = field(default=None)
    log10_qr_min: np.ndarray = field(default=None)

    def to_dict(self) -> dict:
        return {k: np.asarray(v).tolist() for k, v in self.__dict__.items()}


def lag_spectrum(J: Tensor, start: int = 0, max_lag: int | None = None, rtol: float = 1e-12) -> LagSpectrum:
    """Extreme singular values of ``J(start + k, start) = J[start+k-1] ... J[start]`` for
    k = 1..max_lag, from the step Jacobians ``J`` (T, S, S) (see the module docstring).

    Accumulated in float64. The explicit product is divided by its largest entry every step
    (the scale is kept as a logarithm), so neither overflow nor underflow stops it; its
    smallest singular value counts as resolved while ``sigma_min / sigma_max > rtol``.
    Values that leave the float64 range come back as 0 or inf; the ``log10_*`` arrays hold
    them at any size.
    """
    T, S, _ = J.shape
    if not 0 <= start < T:
        raise ValueError(f"start must be in [0, {T - 1}], got {start}")
    K = T - start if max_lag is None else min(int(max_lag), T - start)
    J = J.detach().to(F64)
    prod = torch.eye(S, dtype=F64)
    Q = torch.eye(S, dtype=F64)
    log_scale = 0.0
    log_r = torch.zeros(S, dtype=F64)
    out = {k: np.empty(K) for k in ("smax", "smin", "res", "qmax", "qmin")}
    for k in range(K):
        Jt = J[start + k]
        prod = Jt @ prod
        m = prod.abs().max().item()
        if m == 0.0 or not math.isfinite(m):
            raise FloatingPointError(f"the product of Jacobians became {m} at lag {k + 1}")
        prod = prod / m
        log_scale += math.log(m)
        s = torch.linalg.svdvals(prod)
        out["smax"][k] = math.log10(s[0].item()) + log_scale / math.log(10)
        ratio = (s[-1] / s[0]).item()
        out["res"][k] = ratio > rtol
        out["smin"][k] = (math.log10(s[-1].item()) if s[-1] > 0 else -math.inf) + log_scale / math.log(10)
        Q, R = torch.linalg.qr(Jt @ Q)
        log_r = log_r + torch.log(torch.diagonal(R).abs())
        out["qmax"][k] = log_r.max().item() / math.log(10)
        out["qmin"][k] = log_r.min().item() / math.log(10)
    with np.errstate(over="ignore", under="ignore"):
        return LagSpectrum(
            lags=np.arange(1, K + 1),
            sigma_max=10.0 ** out["smax"],
            sigma_min=10.0 ** out["smin"],
            resolved=out["res"].astype(bool),
            qr_max=10.0 ** out["qmax"],
            qr_min=10.0 ** out["qmin"],
            log10_sigma_max=out["smax"],
            log10_sigma_min=out["smin"],
            log10_qr_min=out["qmin"],
        )


# --- Theorem 2.1 -----------------------------------------------------------------------------


def _assignment(score: np.ndarray) -> np.ndarray:
    """Column index per row maximising the total ``score`` (Hungarian algorithm via scipy when
    available, else a greedy matching, which only makes the distances below looser)."""
    try:
        from scipy.optimize import linear_sum_assignment

        rows, cols = linear_sum_assignment(-score)
        return cols[np.argsort(rows)]
    except ImportError:  # pragma: no cover - scipy is a test dependency
        n = score.shape[0]
        cols = -np.ones(n, dtype=int)
        used = set()
        for flat in np.argsort(-score, axis=None):
            i, j = divmod(int(flat), n)
            if cols[i] < 0 and j not in used:
                cols[i] = j
                used.add(j)
        return cols


def permutation_distance(W: Tensor, signed: bool) -> tuple[float, Tensor]:
    """An upper bound on ``min_E ||W - E||_2`` over the generalized permutation matrices
    (``signed=False``: one nonzero per row and column) or the signed permutation matrices
    (``signed=True``: entries +-1), and the E attaining it.

    E is the Frobenius-optimal member: for the signed group the assignment maximising
    ``sum |W_{i pi(i)}|`` with signs ``sign(W_{i pi(i)})``; for the generalized group the
    assignment maximising ``sum W_{i pi(i)}^2`` keeping those entries. The spectral-norm
    distance at this E bounds the true minimum from above.
    """
    A = W.detach().to(F64)
    n = A.shape[0]
    score = (A.abs() if signed else A * A).numpy()
    cols = torch.as_tensor(_assignment(score))
    rows = torch.arange(n)
    E = torch.zeros_like(A)
    vals = A[rows, cols]
    E[rows, cols] = torch.where(vals >= 0, 1.0, -1.0).to(F64) if signed else vals
    return torch.linalg.matrix_norm(A - E, ord=2).item(), E


@torch.no_grad()
def theorem21(cell: ASRNNCell, C_x: float = 1.0, t: int = 1) -> dict:
    """The quantities in the condition of Theorem 2.1 (asRNN paper) for one cell.

    ``bound(t) = arctanh(sqrt(1 - ||W_hh^{-1}||_2)) / ((||W_xh||_2 C_x + ||b||_inf)
    sum_{i<t} (||W_hh||_max + 1)^i)`` against ``||D_f||_2``; the distance of ``W_hh`` to the
    generalized permutations against ``sigma_min(D_f)/||D_f||_2``; the distance of ``U_f`` to
    the signed permutations (the epsilon of the theorem). ``||.||_max`` is the largest entry
    in absolute value. For an orthogonal ``W_hh``, ``||W_hh^{-1}||_2 = 1`` and the bound is 0,
    so the first condition can hold only in the limit ``D_f -> 0``.
    """
    if not isinstance(cell, ASRNNCell):
        raise TypeError(f"Theorem 2.1 is about asRNN cells, got {type(cell).__name__}")
    d = cell.diag_f.detach().to(F64)
    W = cell.weight_hh.detach().to(F64)
    sv = torch.linalg.svdvals(W)
    inv_norm = (1.0 / sv[-1]).item()
    w_max = W.abs().max().item()
    denom0 = torch.linalg.matrix_norm(cell.weight_ih.detach().to(F64), ord=2).item() * C_x
    denom0 += cell.bias.detach().abs().max().item()
    # sum_{i<t} (m + 1)^i = ((m + 1)^t - 1) / m, as a logarithm (it grows exponentially in t)
    log_sum = (
        math.log(t) if w_max == 0 else (t * math.log1p(w_max) + math.log1p(-((1 + w_max) ** (-t))) - math.log(w_max))
    )
    inner = 1.0 - inv_norm
    if -1e-5 < inner < 0:  # an orthogonal W_hh in float32 (drifting ~1e-6 over re-bases): ||W^{-1}|| = 1
        inner = 0.0
    num = math.atanh(math.sqrt(inner)) if inner >= 0 else float("nan")
    bound = num / denom0 * math.exp(-log_sum) if num == num and denom0 > 0 else float("nan")
    dist_hh, _ = permutation_distance(W, signed=False)
    dist_uf, _ = permutation_distance(cell.weight_uf, signed=True)
    D_norm, D_min = d.max().item(), d.min().item()
    return {
        "t": t,
        "C_x": C_x,
        "D_f_norm": D_norm,
        "D_f_sigma_min": D_min,
        "D_f_cond": D_norm / D_min,
        "W_hh_inv_norm": inv_norm,
        "W_hh_sigma_min": sv[-1].item(),
        "W_hh_max_entry": w_max,
        "assumption_A3_holds": inner >= 0,
        "bound_numerator": num,
        "bound_log10_denominator": (math.log(denom0) + log_sum) / math.log(10),
        "D_f_bound": bound,
        "D_f_condition_holds": bool(D_norm <= bound) if bound == bound else False,
        "W_hh_to_generalized_permutation": dist_hh,
        "W_hh_allowed_distance": D_min / D_norm,
        "W_hh_condition_holds": dist_hh <= D_min / D_norm,
        "U_f_to_signed_permutation": dist_uf,
    }


# --- whole models ----------------------------------------------------------------------------


def first_layer_input(model, x: Tensor) -> tuple[Cell, Tensor]:
    """The first recurrent cell of a model and the encoded input ``x`` (T, I) it sees.

    ``model`` is a :class:`rnnlab.cells.Recurrent`, or any module with ``.rnn`` (a
    ``Recurrent``) and optionally ``.encoder`` (the trainer's ``SequenceModel``); ``x`` is one
    sequence of token ids (T,) or features (T, I)."""
    rnn = getattr(model, "rnn", model)
    encoder = getattr(model, "encoder", None)
    with torch.no_grad():
        feats = encoder(x[None])[0] if encoder is not None else x
    return rnn.cells[0], feats


def analyze_model(model, x: Tensor, max_lag: int | None = None, method: str = "auto", C_x: float | None = None) -> dict:
    """Step Jacobians along one sequence, the spectrum of their products against the lag and,
    for asRNN, the Theorem 2.1 quantities. Runs on a float64 CPU copy of the first layer
    (the model itself may live on any device)."""
    import copy

    p = next(iter(model.parameters()), None)
    cell, feats = first_layer_input(model, x.to(p.device) if p is not None else x)
    cell = copy.deepcopy(cell).to("cpu", F64).eval()
    feats = feats.detach().to("cpu", F64)
    states, J = step_jacobians(cell, feats, method=method)
    spec = lag_spectrum(J, 0, max_lag)
    out = {"cell": type(cell).__name__.removeprefix("Parametrized"), "T": int(feats.shape[0]), "spectrum": spec}
    if isinstance(cell, ASRNNCell):
        cx = float(feats.abs().max()) if C_x is None else C_x
        out["theorem21"] = {f"t={t}": theorem21(cell, cx, t) for t in (1, 10, int(feats.shape[0]))}
    return out


def plot_lag_spectra(spectra: dict, path, title: str | None = None) -> None:
    """sigma_max and sigma_min of ``J(t1 + k, t1)`` against the lag k, one panel per model
    (``spectra``: label -> :class:`LagSpectrum`), log scale; where the explicit product no
    longer resolves sigma_min the QR estimate (an upper bound on it) is drawn dashed."""
    from ..plots import pyplot, save_figure

    plt = pyplot()

    n = len(spectra)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    for ax, (label, s) in zip(axes[0], spectra.items()):
        ax.plot(s.lags, s.log10_sigma_max, color="C3", label=r"$\sigma_{\max}$")
        smin = np.where(s.resolved, s.log10_sigma_min, np.nan)
        ax.plot(s.lags, smin, color="C0", label=r"$\sigma_{\min}$")
        if not s.resolved.all():
            q = np.where(~s.resolved, s.log10_qr_min, np.nan)
            ax.plot(s.lags, q, color="C0", ls="--", label=r"$\sigma_{\min}$ (QR bound)")
        zero = np.isneginf(s.log10_qr_min)
        if zero.any():  # a rank-deficient product (e.g. modReLU units switched off): sigma_min = 0
            k0 = int(s.lags[np.argmax(zero)])
            ax.text(
                0.98,
                0.04,
                rf"$\sigma_{{\min}} = 0$ from lag {k0}",
                transform=ax.transAxes,
                ha="right",
                va="bottom",
                fontsize=8,
                color="C0",
            )
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("lag $t_2 - t_1$")
        ax.grid(alpha=0.3)
    for ax in axes[0]:
        ax.set_ylabel(r"$\log_{10}\,\sigma(J(t_2, t_1))$")
    axes[0][0].legend(fontsize=8, loc="lower left")
    if title:
        fig.suptitle(title, fontsize=11)
    save_figure(fig, path, dpi=110)


# --- runs (the `rnnlab analyze jacobian` command) --------------------------------------------


def summarize(res: dict, lags=(1, 10, 100, 1000)) -> dict:
    """A JSON-ready digest of :func:`analyze_model`'s result: log10 sigma at a few lags."""
    s = res["spectrum"]
    pick = [k for k in lags if k <= len(s.lags)] + ([int(s.lags[-1])] if int(s.lags[-1]) not in lags else [])
    out = {"cell": res["cell"], "T": res["T"], "lags": {}}
    for k in pick:
        i = k - 1
        out["lags"][str(k)] = {
            "log10_sigma_max": float(s.log10_sigma_max[i]),
            "log10_sigma_min": float(s.log10_sigma_min[i]) if s.resolved[i] else None,
            "log10_sigma_min_qr_bound": float(s.log10_qr_min[i]),
        }
    if "theorem21" in res:
        out["theorem21"] = res["theorem21"]
    return out


def analyze_run(
    path,
    split: str = "val",
    index: int = 0,
    max_lag: int | None = None,
    which: str = "best",
    data_dir: str | None = None,
    init_cells: tuple[str, ...] = (),
    init_seed: int = 0,
    device: str = "cpu",
) -> dict:
    """Analyse a trained run (a run directory or a checkpoint file inside one) on sequence
    ``index`` of its task's ``split``; ``init_cells`` adds untrained models of other cells
    (same task and hidden size, initialised with ``init_seed``) for comparison.
    ``device``: where the trained model is loaded (:func:`rnnlab.rundir.load_run`); the float64
    Jacobian products run on the CPU. Returns ``{label: analyze_model result}``."""
    import dataclasses

    from ..model import build_model
    from ..rundir import load_run

    cfg, task, model = load_run(path, which=which, data_dir=data_dir, device=device)
    batch = next(iter(task.eval_batches(split, index + 1)))
    if index >= batch.size:
        raise ValueError(f"index {index} is past the first evaluation batch of {split!r} ({batch.size} sequences)")
    x = batch.x[index]
    if batch.lengths is not None:
        x = x[: int(batch.lengths[index])]
    results = {f"{cfg.model.cell} (trained: {cfg.name})": analyze_model(model, x, max_lag)}
    for cell in init_cells:
        torch.manual_seed(init_seed)
        mcfg = dataclasses.replace(cfg.model, cell=cell, cell_options={})
        other = build_model(mcfg, task)
        results[f"{cell} (at init, n={mcfg.hidden_size})"] = analyze_model(other, x, max_lag)
    return results
