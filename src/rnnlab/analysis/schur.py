"""Real Schur views of recurrent matrices (the nnRNN paper's Fig. 3 and Sec. 5.3).

Any real square W has a real Schur form ``W = Z Theta Z^T`` with Z orthogonal and Theta
quasi-triangular: 1x1 blocks (real eigenvalues) and 2x2 blocks (complex pairs) on the
diagonal, and the non-normal part T strictly on one side of the blocks. We present Theta
*lower* quasi-triangular, as the nnRNN paper does (signals feed forward down the Schur modes,
the delay line is the sub-diagonal): scipy returns the upper form, and reversing the order of
the Schur vectors turns one into the other.

The views: the heat map of |Theta|; the mean |entry| of T on each sub-diagonal (distance
from the diagonal; the delay-line motif shows as a peak at distance 1); the rotation angles
of the 2x2 blocks (eigenvalue arguments in [0, pi]); the eigenvalue moduli and their mean
(about 0.958 for the paper's PTB network and about 1 on copy); and the departure from
normality ``sqrt(||Theta||_F^2 - sum |lambda|^2) / ||Theta||_F`` (Henrici; equal to
``||T||_F / ||Theta||_F`` when the 2x2 blocks are scaled rotations, as nnRNN's are), which is 0
exactly for normal matrices.

For an nnRNN cell the learned factor ``Lambda + T`` *is* a real Schur form of its V (P is
orthogonal), so :func:`cell_schur_views` shows that one, as the paper's figure does; every
other cell with a square recurrent matrix (``Cell.recurrent_matrix()``: RNN, expRNN,
scoRNN, asRNN's W_hh) gets the form computed by scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


def as_float64(x) -> np.ndarray:
    """``x`` (a tensor, array or nested list) as a float64 numpy array (a tensor detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def real_schur(W) -> tuple[np.ndarray, np.ndarray]:
    """``(Theta, Z)`` with ``W = Z Theta Z^T``, Theta lower quasi-triangular."""
    try:
        import scipy.linalg
    except ImportError:  # pragma: no cover - scipy is an optional dependency
        raise ImportError("the real Schur form needs scipy: pip install 'rnnlab[science]'") from None

    W = as_float64(W)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"a Schur form needs a square matrix, got shape {W.shape}")
    U, Z = scipy.linalg.schur(W, output="real")
    rev = np.arange(W.shape[0])[::-1]
    return U[np.ix_(rev, rev)], Z[:, rev]


def diagonal_blocks(Theta, tol: float = 0.0) -> list[tuple[int, int]]:
    """The diagonal blocks of a lower quasi-triangular matrix as (start, size) pairs: a 2x2
    block wherever the super-diagonal entry is non-zero (beyond ``tol``)."""
    Theta = as_float64(Theta)
    n = Theta.shape[0]
    blocks, i = [], 0
    while i < n:
        if i + 1 < n and abs(Theta[i, i + 1]) > tol:
            blocks.append((i, 2))
            i += 2
        else:
            blocks.append((i, 1))
            i += 1
    return blocks


@dataclass
class SchurView:
    """Summary of a Schur form ``Theta`` (lower quasi-triangular, (n, n))."""

    Theta: np.ndarray
    blocks: list
    eigenvalues: np.ndarray
    mean_modulus: float
    block_angles: np.ndarray
    subdiagonal_mean_abs: np.ndarray  # index k-1 holds the mean |T| on the k-th sub-diagonal
    departure: float  # Henrici: sqrt(||Theta||_F^2 - sum |lambda|^2) / ||Theta||_F
    name: str = ""
    extra: dict = field(default_factory=dict)

    def summary(self) -> dict:
        prof = self.subdiagonal_mean_abs
        return {
            "name": self.name,
            "n": int(self.Theta.shape[0]),
            "mean_eigenvalue_modulus": float(self.mean_modulus),
            "min_eigenvalue_modulus": float(np.abs(self.eigenvalues).min()),
            "max_eigenvalue_modulus": float(np.abs(self.eigenvalues).max()),
            "complex_pairs": int(sum(1 for _, s in self.blocks if s == 2)),
            "departure_from_normality": float(self.departure),
            "mean_abs_T_subdiag_1": float(prof[0]) if len(prof) else 0.0,
            "mean_abs_T_subdiag_2_to_10": float(prof[1:10].mean()) if len(prof) > 1 else 0.0,
            "mean_abs_T_all": float(np.abs(self.block_free_part()).sum() / max(1, self._free_count())),
            **self.extra,
        }

    def block_mask(self) -> np.ndarray:
        n = self.Theta.shape[0]
        mask = np.zeros((n, n), dtype=bool)
        for s, size in self.blocks:
            mask[s : s + size, s : s + size] = True
        return mask

    def block_free_part(self) -> np.ndarray:
        """T: Theta with the diagonal blocks removed."""
        return np.where(self.block_mask(), 0.0, self.Theta)

    def _free_count(self) -> int:
        return int(np.tril(~self.block_mask(), -1).sum())


def schur_view(Theta, name: str = "", extra: dict | None = None) -> SchurView:
    """Statistics of a lower quasi-triangular ``Theta`` (from :func:`real_schur` or an
    nnRNN's ``schur_form()``)."""
    Theta = as_float64(Theta)
    n = Theta.shape[0]
    blocks = diagonal_blocks(Theta, tol=1e-12 * max(1.0, np.abs(Theta).max()))
    eig, angles = [], []
    for s, size in blocks:
        B = Theta[s : s + size, s : s + size]
        ev = np.linalg.eigvals(B)
        eig.extend(ev)
        if size == 2:
            angles.append(abs(np.angle(ev[0])))
    eig = np.asarray(eig)
    view = SchurView(
        Theta=Theta,
        blocks=blocks,
        eigenvalues=eig,
        mean_modulus=float(np.abs(eig).mean()),
        block_angles=np.asarray(angles),
        subdiagonal_mean_abs=np.zeros(0),
        departure=0.0,
        name=name,
        extra=dict(extra or {}),
    )
    T = view.block_free_part()
    free = np.tril(~view.block_mask(), -1)
    prof = []
    for k in range(1, n):
        m = np.diagonal(free, -k)
        vals = np.abs(np.diagonal(T, -k))[m]
        prof.append(vals.mean() if vals.size else 0.0)
    view.subdiagonal_mean_abs = np.asarray(prof)
    # Henrici's departure from normality, sqrt(||Theta||^2 - sum |lambda|^2) / ||Theta||: the
    # same for every Schur form (scipy's 2x2 blocks need not be normal, so it is not ||T||
    # in general; for nnRNN's scaled-rotation blocks it is)
    norm2 = float(np.sum(Theta**2))
    dep2 = max(0.0, norm2 - float(np.sum(np.abs(eig) ** 2)))
    view.departure = math.sqrt(dep2 / norm2) if norm2 > 0 else 0.0
    return view


def matrix_schur_view(W, name: str = "") -> SchurView:
    """:func:`schur_view` of the real Schur form of W (scipy), with the reconstruction error."""
    Theta, Z = real_schur(W)
    Wn = as_float64(W)
    err = float(np.abs(Z @ Theta @ Z.T - Wn).max())
    return schur_view(Theta, name, {"reconstruction_error": err})


def cell_schur_views(model) -> list[SchurView]:
    """Schur views of every cell in ``model`` that has a square recurrent matrix. nnRNN cells
    contribute their learned ``Lambda + T`` (a real Schur form of V up to the ordering)."""
    import torch

    from ..cells.base import iter_cells

    views = []
    with torch.no_grad():
        for i, cell in enumerate(iter_cells(model)):
            W = cell.recurrent_matrix()
            if W is None:
                continue
            name = f"{type(cell).__name__.removeprefix('Parametrized')}[{i}]"
            if hasattr(cell, "schur_form"):
                view = schur_view(cell.schur_form(), name)
                view.extra["gamma_mean"] = float(cell.gamma.abs().mean())
            else:
                view = matrix_schur_view(W, name)
            views.append(view)
    return views


def plot_schur_view(view: SchurView, path=None, title: str | None = None):
    """Four panels: |Theta| heat map, mean |T| per sub-diagonal, block rotation angles, and
    eigenvalue moduli."""
    from ..plots import pyplot, save_figure

    plt = pyplot()
    from matplotlib.colors import LogNorm

    fig, ax = plt.subplots(1, 4, figsize=(16, 3.8))
    A = np.abs(view.Theta)
    pos = A[A > 0]
    vmin = max(pos.min(), pos.max() * 1e-4) if pos.size else 1e-8
    im = ax[0].imshow(np.where(A > 0, A, vmin), cmap="viridis", norm=LogNorm(vmin=vmin, vmax=max(A.max(), vmin * 10)))
    ax[0].set_title("|Theta| (lower real Schur form)")
    fig.colorbar(im, ax=ax[0], fraction=0.046)
    prof = view.subdiagonal_mean_abs
    k = np.arange(1, len(prof) + 1)
    ax[1].semilogy(k, np.where(prof > 0, prof, np.nan), lw=1)
    ax[1].set_xlabel("distance below the diagonal")
    ax[1].set_title("mean |T| per sub-diagonal")
    ax[2].hist(view.block_angles, bins=24, range=(0, np.pi), color="tab:orange")
    ax[2].set_xlabel("rotation angle of 2x2 block (rad)")
    ax[2].set_title(f"{len(view.block_angles)} block angles")
    mod = np.abs(view.eigenvalues)
    ax[3].hist(mod, bins=30, color="tab:green")
    ax[3].axvline(view.mean_modulus, color="k", ls="--", lw=1)
    ax[3].set_xlabel("|eigenvalue|")
    ax[3].set_title(f"mean |lambda| = {view.mean_modulus:.4f}")
    fig.suptitle(
        title or f"{view.name}: departure from normality (Henrici, relative) = {view.departure:.3g}", fontsize=10
    )
    save_figure(fig, path, dpi=100)


def analyze_run(
    path, out_dir=None, which: str = "best", data_dir: str | None = None, device: str = "cpu"
) -> list[dict]:
    """Schur views of a trained run (a run directory or a checkpoint file inside one): one
    PNG per recurrent matrix plus ``schur.json`` with the summaries, in ``out_dir`` (default
    ``<run>/schur``). Returns the summaries."""
    import json

    from ..rundir import load_run

    path = Path(path)
    cfg, _task, model = load_run(path, which, data_dir, device=device)
    views = cell_schur_views(model)
    if not views:
        raise ValueError(
            f"the {cfg.model.cell!r} cells of {path} have no square recurrent matrix "
            f"(recurrent_matrix() is None, e.g. gated cells), so there is no Schur form to show"
        )
    run_dir = path if path.is_dir() else path.parent
    out = Path(out_dir) if out_dir is not None else run_dir / "schur"
    out.mkdir(parents=True, exist_ok=True)
    summaries = []
    for i, view in enumerate(views):
        png = out / f"schur_{i}.png"
        plot_schur_view(
            view,
            png,
            title=f"{cfg.name} ({cfg.model.cell}), layer {i}: mean |lambda| = "
            f"{view.mean_modulus:.4f}, departure from normality = {view.departure:.3g}",
        )
        s = view.summary()
        s["figure"] = str(png)
        summaries.append(s)
    (out / "schur.json").write_text(json.dumps(summaries, indent=2) + "\n")
    return summaries
