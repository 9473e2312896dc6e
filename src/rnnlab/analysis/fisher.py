"""Fisher memory curves of linear recurrent dynamics (Ganguli, Huh & Sompolinsky 2008), as
used in the nnRNN paper (Kerg, Goyette et al. 2019, Sec. 3 and Fig. 1).

Dynamics, column form: ``h_t = V h_{t-1} + v s_t + xi_t`` with Gaussian noise xi_t of
covariance ``Sigma`` (identity by default). A signal pulse s_0 at time 0 is seen at time k
through ``V^k v``, buried in the accumulated noise of covariance

    C = sum_{m >= 0} V^m Sigma V^{m T}      (the stationary covariance; it solves
                                             C = V C V^T + Sigma when rho(V) < 1),

so the Fisher information that h_k holds about s_0, the Fisher memory curve, is

    J(k) = (V^k v)^T C^{-1} (V^k v),   k = 0, 1, 2, ...

For the delay line ``V = sqrt(a) * (sub-diagonal ones)``, v = e_1, Sigma = I:
``J(k) = a^k (a - 1) / (a^(k+1) - 1)`` for k < N and 0 after (the paper's closed form, Ganguli
et al.'s optimum for k <= N). Note the square root: the paper's closed form is written for the
squared gain, while its Fig. 1 puts alpha itself on the sub-diagonal (so that curve is the
closed form at a = alpha^2); :func:`feedforward_matrix` follows the figure.

Arrays are numpy float64; torch tensors are accepted. Plot helpers import matplotlib when
called, never at import.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .schur import as_float64


def _check(V, noise_cov):
    V = as_float64(V)
    n = V.shape[0]
    if V.ndim != 2 or V.shape != (n, n):
        raise ValueError(f"V must be a square matrix, got shape {V.shape}")
    S = np.eye(n) if noise_cov is None else as_float64(noise_cov)
    if S.shape != (n, n):
        raise ValueError(f"noise_cov must be ({n}, {n}) like V, got {S.shape}")
    return V, S


def noise_factor(
    V, noise_cov=None, noise_steps: int | None = None, block: int = 32, max_steps: int = 1_000_000
) -> np.ndarray:
    """An upper-triangular U with ``U^T U = C = sum_{m=0}^{M-1} V^m Sigma V^{m T}``.

    ``noise_steps`` = M; ``None`` sums to convergence (the stationary covariance, which needs
    spectral radius rho(V) < 1). C itself can be far too ill-conditioned to invert in float64
    (the Fig. 1 matrices with beta > 0 reach cond(C) ~ 1e24), so it is never formed: U comes
    from QR factorisations of the stacked factors ``(V^m L)^T`` (Sigma = L L^T), updated a
    block of terms at a time, which squares the conditioning away.
    """
    V, S = _check(V, noise_cov)
    n = V.shape[0]
    if noise_steps is None:
        rho = np.abs(np.linalg.eigvals(V)).max()
        if rho >= 1.0:
            raise ValueError(
                f"the stationary noise covariance diverges for spectral radius {rho:.4g} >= 1; "
                f"pass noise_steps (a finite horizon) instead"
            )
        total = max_steps
    else:
        if int(noise_steps) < 1:
            raise ValueError(f"noise_steps must be >= 1 or None, got {noise_steps}")
        total = int(noise_steps)
    F = np.linalg.cholesky(S)
    U = F.T.copy()
    m = 1
    while m < total:
        rows = [U]
        small = False
        for _ in range(min(block, total - m)):
            F = V @ F
            rows.append(F.T)
            m += 1
        U = np.linalg.qr(np.vstack(rows), mode="r")
        if noise_steps is None and m >= 2 * n:
            small = np.linalg.norm(F) <= 1e-9 * np.linalg.norm(U)
        if small:
            break
    else:
        if noise_steps is None:
            raise RuntimeError(f"the noise covariance did not converge in {max_steps} terms")
    return U


def noise_covariance(V, noise_cov=None, noise_steps: int | None = None) -> np.ndarray:
    """``C = sum_{m=0}^{M-1} V^m Sigma V^{m T}`` (see :func:`noise_factor`)."""
    U = noise_factor(V, noise_cov, noise_steps)
    return U.T @ U


def fisher_memory_curve(V, v, noise_cov=None, steps: int = 100, noise_steps: int | None = None) -> np.ndarray:
    """The Fisher memory curve ``J(k) = (V^k v)^T C^{-1} (V^k v)`` for k = 0..steps-1.

    V: (N, N) recurrent matrix (column form); v: (N,) input vector; noise_cov: (N, N) noise
    covariance Sigma (default identity); C = sum_m V^m Sigma V^{m T}, stationary when
    ``noise_steps`` is None, else summed over ``noise_steps`` terms. Returns (steps,).
    """
    V, _ = _check(V, noise_cov)
    v = as_float64(v).reshape(-1)
    if v.shape[0] != V.shape[0]:
        raise ValueError(f"v must have {V.shape[0]} entries like V, got {v.shape[0]}")
    if int(steps) < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    U = noise_factor(V, noise_cov, noise_steps)
    X = np.empty((V.shape[0], int(steps)))
    x = v.copy()
    for k in range(int(steps)):
        X[:, k] = x
        x = V @ x
    try:
        from scipy.linalg import solve_triangular

        Y = solve_triangular(U, X, trans="T")  # x^T C^{-1} x = |U^{-T} x|^2
    except ImportError:  # scipy is optional; numpy's LU solve is backward stable as well
        Y = np.linalg.solve(U.T, X)
    return np.sum(Y**2, axis=0)


def delay_line_fmc(a: float, steps: int, N: int) -> np.ndarray:
    """The closed form ``J(k) = a^k (a - 1) / (a^(k+1) - 1)`` (k < N; 1/(k+1) at a = 1; 0 for
    k >= N) of the delay line with sqrt(a) on its sub-diagonal."""
    k = np.arange(int(steps), dtype=np.float64)
    if a == 1.0:
        J = 1.0 / (k + 1)
    else:
        J = a**k * (a - 1) / (a ** (k + 1) - 1)
    return np.where(k < N, J, 0.0)


def feedforward_matrix(N: int, alpha: float, beta: float = 0.0, d: float = 0.0, fill: str = "triangle") -> np.ndarray:
    """The matrix class of the paper's Fig. 1(a), column form (signals move down the chain):
    ``d`` on the diagonal, ``alpha`` on the sub-diagonal (the delay line), ``beta`` below it:
    every entry with i - j >= 2 for ``fill="triangle"`` (as the paper's figure code does), or
    only the second sub-diagonal for ``fill="band"``."""
    if fill not in ("triangle", "band"):
        raise ValueError(f"fill must be 'triangle' or 'band', got {fill!r}")
    if int(N) < 2:
        raise ValueError(f"N must be >= 2, got {N}")
    M = d * np.eye(N) + alpha * np.eye(N, k=-1)
    if fill == "triangle":
        M += beta * np.tril(np.ones((N, N)), -2)
    else:
        M += beta * np.eye(N, k=-2)
    return M


# --- the paper's Fig. 1 ---------------------------------------------------------------------

FIG1_ALPHAS = (0.95, 1.0, 1.05)
FIG1_BETAS = (0.0, 0.005)
FIG1_DS = (0.0, 0.2)


def fig1_curves(N: int = 100, steps: int = 150, alphas=FIG1_ALPHAS, betas=FIG1_BETAS, ds=FIG1_DS) -> dict:
    """FMCs of the Fig. 1 class, input into the first mode (v = e_1), Sigma = I, stationary
    noise. Returns {(alpha, beta, d): J (steps,)}."""
    e1 = np.zeros(N)
    e1[0] = 1.0
    return {
        (a, b, d): fisher_memory_curve(feedforward_matrix(N, a, b, d), e1, steps=steps)
        for a in alphas
        for b in betas
        for d in ds
    }


def plot_fmc(curves: dict, path=None, ax=None, title: str = "Fisher memory curves (nnRNN Fig. 1c)"):
    """Semilog plot of the curves of :func:`fig1_curves` (line style: alpha, colour: beta,
    marker: d)."""
    import matplotlib

    if ax is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(6, 4.5))
    alphas = sorted({k[0] for k in curves})
    betas = sorted({k[1] for k in curves})
    ds = sorted({k[2] for k in curves})
    styles = [":", "--", "-", "-."]
    colors = ["tab:blue", "tab:red", "tab:green"]
    markers = ["^", "s", "o"]
    for (a, b, d), J in curves.items():
        t = np.arange(len(J))
        ax.semilogy(
            t,
            np.where(J > 0, J, np.nan),
            linestyle=styles[alphas.index(a) % 4],
            color=colors[betas.index(b) % 3],
            marker=markers[ds.index(d) % 3],
            markevery=(5 * ds.index(d) + 3 * betas.index(b), 25),
            markersize=4,
            label=f"alpha={a}, beta={b}, d={d}",
        )
    ax.set_ylim(5e-3, 1.2)
    ax.set_xlabel("k (steps since the pulse)")
    ax.set_ylabel("J(k)")
    ax.set_title(title)
    ax.legend(fontsize=6, ncol=2)
    if own:
        from ..plots import save_figure

        save_figure(fig, path, dpi=120)
    return ax


def transient_trajectories(
    N: int = 100,
    steps: int = 150,
    alpha: float = 1.0,
    beta: float = 0.0,
    d: float = 0.0,
    samples: int = 200,
    seed: int = 0,
) -> np.ndarray:
    """Free evolution ``h_t = Theta h_{t-1}`` of an ensemble of initial conditions uniform on
    the unit sphere (the paper's Fig. 1b setting, d = 0). Returns (samples, steps, N)."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((samples, N))
    h /= np.linalg.norm(h, axis=1, keepdims=True)
    M = feedforward_matrix(N, alpha, beta, d)
    out = np.empty((samples, steps, N))
    for t in range(steps):
        out[:, t] = h
        h = h @ M.T
    return out


def plot_transients(
    path=None, N: int = 100, steps: int = 150, alphas=FIG1_ALPHAS, betas=FIG1_BETAS, units=(20, 50, 80), seed: int = 0
):
    """Fig. 1(b): single-unit trajectories h^i_t (one initial condition) for each alpha, beta
    (d = 0), and the ensemble norm ||h_t||. The transients end abruptly at t = N: the strictly
    triangular matrix is nilpotent."""
    from ..plots import pyplot, save_figure

    plt = pyplot()

    fig, axes = plt.subplots(
        len(betas) + 1, len(alphas), figsize=(3.2 * len(alphas), 2.4 * (len(betas) + 1)), sharex=True
    )
    colors = ["tab:blue", "tab:red"]
    for j, a in enumerate(alphas):
        for i, b in enumerate(betas):
            traj = transient_trajectories(N, steps, a, b, 0.0, samples=64, seed=seed)
            ax = axes[i, j]
            for u in units:
                ax.plot(traj[0, :, u], lw=1, label=f"unit {u}")
            ax.axvline(N, color="gray", lw=0.6, ls=":")
            ax.set_title(f"alpha={a}, beta={b}", fontsize=9)
            if j == 0:
                ax.set_ylabel("h^i_t")
            norm = np.linalg.norm(traj, axis=2)
            axes[-1, j].semilogy(norm.mean(0), color=colors[i % 2], label=f"beta={b}")
        axes[-1, j].set_xlabel("t")
        axes[-1, j].axvline(N, color="gray", lw=0.6, ls=":")
    axes[-1, 0].set_ylabel("mean ||h_t||")
    axes[-1, 0].legend(fontsize=7)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"Transient dynamics of the Fig. 1 class (d = 0, N = {N})", fontsize=10)
    save_figure(fig, path, dpi=110)


def write_fig1(out_dir, N: int = 100, steps: int = 150) -> str:
    """Write ``fmc.png`` (Fig. 1c), ``transients.png`` (Fig. 1b) and return a Markdown table
    of the area under each FMC (sum of J(k) over the plotted k, and over all k)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    curves = fig1_curves(N, steps)
    plot_fmc(curves, out / "fmc.png")
    plot_transients(out / "transients.png", N=N, steps=steps)
    long = fig1_curves(N, 40 * N)
    rows = [
        f"| area under the FMC, k < {steps} | area, all k | alpha | beta | d |",
        "|---:|---:|---:|---:|---:|",
    ]
    for key in sorted(curves, key=lambda k: (-k[0], -k[1], -k[2])):
        a, b, d = key
        rows.append(f"| {curves[key].sum():.4f} | {long[key].sum():.4f} | {a} | {b} | {d} |")
    return "\n".join(rows)
