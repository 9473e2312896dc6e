"""Train rnnlab's models on arrays of your own, from Python.

Three classes of noisy sine waves (frequency 1, 2 or 3 cycles per sequence) become an rnnlab task
with rnnlab.tasks.from_arrays; asRNN and an LSTM train on it with the one trainer, each into its
own run directory, and rnnlab.results.table prints them side by side (at the defaults, on one
CPU, the LSTM learns the task and asRNN with these rates stays near chance: one configuration,
an observation, not a verdict; see docs/own-data.md on choosing rates). Run it:

    python examples/own_data.py [--steps 300] [--out runs/own-data]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import rnnlab
from rnnlab.config import from_dict
from rnnlab.results import table
from rnnlab.train import train


def noisy_sines(n: int, T: int, rng: np.random.Generator):
    """(n, T, 1) noisy sines and their class: the frequency (1, 2 or 3 cycles), random phase."""
    y = rng.integers(0, 3, size=n)
    t = np.linspace(0, 1, T)
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1))
    x = np.sin(2 * np.pi * (y[:, None] + 1) * t + phase) + 0.3 * rng.normal(size=(n, T))
    return x[..., None].astype("float32"), y.astype("int64")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="training steps per model, e.g. --steps 50")
    p.add_argument("--out", default="runs/own-data", help="parent of the run directories, e.g. --out /tmp/runs")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    x, y = noisy_sines(1200, 50, rng)
    task = rnnlab.tasks.from_arrays(x[:800], y[:800], x[800:1000], y[800:1000], x[1000:], y[1000:])
    print(task.describe())
    dirs = []
    for cell, lr in [("asrnn", 3e-3), ("lstm", 3e-3)]:
        cfg = from_dict(
            {
                "name": f"sines-{cell}",
                "task": {"name": "arrays"},
                "model": {"cell": cell, "hidden_size": 32},
                "optim": {"lr": lr},
                "train": {"steps": args.steps, "batch_size": 32, "eval_every": max(1, args.steps // 4), "threads": 1},
            }
        )
        run_dir = Path(args.out) / cfg.name
        result = train(cfg, run_dir, task=task, progress=False)
        print(f"{cfg.name}: test accuracy {result['test']['test/accuracy']:.3f} (chance about 0.33)")
        dirs.append(run_dir)
    print(table(dirs, ["test/loss", "test/accuracy"], timing=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
