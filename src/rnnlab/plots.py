"""Figures from run directories (``metrics.jsonl`` + ``result.json``); no models needed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .rundir import RunFiles

log = logging.getLogger(__name__)


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (figures are written to files, never shown),
    imported at the first figure, not at import."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path | None, dpi: int) -> Path | None:
    """The end of every figure: lay ``fig`` out, write it to ``path`` (its folder made; None:
    nowhere) at ``dpi`` and close it; the path written, or None."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def read_metrics(run_dir: str | Path, key: str) -> tuple[list[int], list[float]]:
    """Steps and values of ``key`` in ``run_dir/metrics.jsonl`` (or a record's
    ``metrics.jsonl.xz``); unreadable lines (a partial last line from an interrupted write,
    garbage) are skipped with a note on stderr."""

    from .rundir import read_jsonl

    steps, values = [], []
    path = RunFiles(run_dir).stored(RunFiles.METRICS)
    if path is None:
        from .rundir import NoSuchPath

        raise NoSuchPath(f"{run_dir} has no metrics.jsonl (is it a run directory?)")
    try:
        rows, bad = read_jsonl(path)
    except OSError as e:  # unreadable (permissions): this run is left out, the others are drawn
        log.warning(f"skipped {path}: {e.strerror or e}")
        return steps, values
    if bad:
        log.warning(f"{path}: skipped unreadable line(s) {bad}")
    for row in rows:
        if isinstance(row.get(key), (int, float)):
            steps.append(row["step"])
            values.append(row[key])
    return steps, values


def metric_names(run_dir: str | Path) -> set[str]:
    from .rundir import read_jsonl

    try:
        rows, _ = read_jsonl(RunFiles(run_dir).metrics)
    except OSError:
        return set()
    return {k for row in rows for k in row if "/" in k}


def _result(run_dir) -> dict | None:
    """A run's result.json, or None when it is missing or broken (a broken one costs the legend
    its name, not the plot)."""
    from .rundir import read_stored

    path = RunFiles(run_dir).stored(RunFiles.RESULT)
    try:
        r = json.loads(read_stored(path)) if path is not None else None
    except (OSError, ValueError):
        return None
    return r if isinstance(r, dict) and "name" in r else None


def legend_labels(run_dirs: list, results: list[dict | None]) -> list[str]:
    """One legend entry per run: its name, with its seed where several runs share the name, and
    with its directory where name and seed still repeat (two configurations of one preset)."""
    base = [r["name"] if r is not None else Path(rd).name for rd, r in zip(run_dirs, results)]
    out = []
    for r, name in zip(results, base):
        label = name
        if base.count(name) > 1 and r is not None and "seed" in r:
            label = f"{name} (seed {r['seed']})"
        out.append(label)
    return [
        f"{label} [{Path(rd).parent.name}/{Path(rd).name}]" if out.count(label) > 1 else label
        for rd, label in zip(run_dirs, out)
    ]


def plot_curves(
    run_dirs: list[str | Path],
    out: str | Path,
    metric: str = "train/loss",
    logy: bool = True,
    title: str | None = None,
    labels: list[str] | None = None,
) -> Path:
    """One curve of ``metric`` per run, with each task's memoryless baseline as a dashed line."""
    from .results import UnknownMetric

    curves = [read_metrics(rd, metric) for rd in run_dirs]
    if not any(steps for steps, _ in curves):
        have = sorted(set().union(*(metric_names(rd) for rd in run_dirs)))
        raise UnknownMetric(
            f"no run logged metric {metric!r}; the runs have: {', '.join(have) or 'none'} (choose one with --metric)"
        )
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.2))
    baselines = {}
    results = [_result(rd) for rd in run_dirs]
    names = labels or legend_labels(run_dirs, results)
    for i, r in enumerate(results):
        steps, values = curves[i]
        if r is not None:
            b = r.get("baseline", {}).get(metric.split("/")[-1])
            if b is not None:
                baselines[round(b, 6)] = b
        ax.plot(steps, values, label=names[i], lw=1.2)
    for b in baselines.values():
        ax.axhline(b, color="k", ls="--", lw=1, label=f"memoryless baseline {b:.4g}")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(metric)
    ax.set_title(title or metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, out, dpi=110)
