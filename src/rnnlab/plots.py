"""Figures from run directories (``metrics.jsonl`` + ``result.json``); no models needed."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(run_dir: str | Path, key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl (is it a run directory?)")
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if key in row:
            steps.append(row["step"])
            values.append(row[key])
    return steps, values


def plot_curves(
    run_dirs: list[str | Path], out: str | Path, metric: str = "train/loss", logy: bool = True,
    title: str | None = None, labels: list[str] | None = None,
) -> Path:
    """One curve of ``metric`` per run, with each task's memoryless baseline as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    baselines = {}
    for i, rd in enumerate(run_dirs):
        steps, values = read_metrics(rd, metric)
        label = labels[i] if labels else Path(rd).name
        result = Path(rd) / "result.json"
        if result.exists():
            r = json.loads(result.read_text())
            label = labels[i] if labels else r["name"]
            b = r.get("baseline", {}).get(metric.split("/")[-1])
            if b is not None:
                baselines[round(b, 6)] = b
        ax.plot(steps, values, label=label, lw=1.2)
    for b in baselines.values():
        ax.axhline(b, color="k", ls="--", lw=1, label=f"memoryless baseline {b:.4g}")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(metric)
    ax.set_title(title or metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
