"""Copy T=200 comparison figure from run directories: validation loss, mean over seeds with
the min-max band, and the memoryless baseline.

    PYTHONPATH=src python benchmarks/nnrnn_copy_figure.py OUT.png RUNS_DIR [RUNS_DIR ...]
"""

import sys
from pathlib import Path

import numpy as np

from rnnlab.plots import pyplot, read_metrics, save_figure
from rnnlab.rundir import RunFiles

MODELS = [
    ("nnrnn-copy-T200", "nnRNN, n=128 (theta_init=uniform)"),
    ("nnrnn-copy-T200-theta-init", "nnRNN, n=128 (theta_init=init)"),
    ("nnrnn-copy-T200-exprnn", "expRNN, n=176"),
    ("nnrnn-copy-T200-lstm", "LSTM, n=62"),
    ("nnrnn-copy-T200-rnn-orth", "RNN-orth, n=128"),
    ("nnrnn-copy-T200-rnn", "RNN, n=128"),
]


def main(out: str, runs_dirs: list[str], metric: str = "val/loss") -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    baseline = None
    for key, label in MODELS:
        dirs = sorted(d for r in runs_dirs for d in Path(r, key).glob("seed*"))
        curves = []
        for d in dirs:
            if not RunFiles(d).has(RunFiles.RESULT):  # a run's result.json or a record's stored form
                continue
            steps, values = read_metrics(d, metric)
            curves.append(values)
            baseline = RunFiles(d).read_result()["baseline"]["loss"]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        arr = np.array([c[:n] for c in curves])
        (line,) = ax.plot(
            steps[:n], arr.mean(0), lw=1.4, label=f"{label} ({len(curves)} seed{'s' if len(curves) > 1 else ''})"
        )
        if len(curves) > 1:
            ax.fill_between(steps[:n], arr.min(0), arr.max(0), color=line.get_color(), alpha=0.15)
    if baseline is not None:
        ax.axhline(baseline, color="k", ls="--", lw=1, label=f"memoryless baseline {baseline:.4f}")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step (batch 10)")
    ax.set_ylabel(metric)
    ax.set_title("copy, delay 200, ~18.9K parameters (mean, min-max band)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
