"""The asRNN copy evidence figure for docs/asrnn.md: training and validation loss of one or more
committed copy runs against the memoryless baseline, from each record's metrics.jsonl, each
curve labelled with the run's own configuration name.

    python benchmarks/asrnn_evidence_figures.py docs/asrnn-copy-L1000-loss.png \\
        records/asrnn-copy-L1000/asrnn-copy-L1000/seed5544 \\
        records/asrnn-copy-L1000-code/asrnn-copy-L1000-code/seed5544 \\
        records/asrnn-copy-L1000/asrnn-copy-L1000-lstm/seed5544
"""

import json
import math
import sys
from pathlib import Path

from rnnlab.plots import pyplot, save_figure
from rnnlab.rundir import read_jsonl, read_stored


def _read(run_dir: str) -> tuple[dict, list[dict]]:
    d = Path(run_dir)
    rows = read_jsonl(d / "metrics.jsonl")[0]  # a record's stored form, or a run's plain file
    return json.loads(read_stored(d / "config.json")), rows


def main(out: str, *run_dirs: str) -> None:
    if not run_dirs:
        raise SystemExit("usage: asrnn_evidence_figures.py OUT.png RUN_DIR [RUN_DIR ...]")
    fig, ax = pyplot().subplots(figsize=(7, 4.2))
    shape = None
    for i, run_dir in enumerate(run_dirs):
        cfg, rows = _read(run_dir)
        K, L = cfg["task"]["options"]["K"], cfg["task"]["options"]["L"]
        if shape not in (None, (K, L)):
            raise SystemExit(f"{run_dir}: copy K={K}, L={L}, but the first run has K={shape[0]}, L={shape[1]}")
        shape = (K, L)
        tr = [(r["step"], r["train/loss"]) for r in rows if "train/loss" in r]
        va = [(r["step"], r["val/loss"]) for r in rows if "val/loss" in r]
        color = f"C{i}"
        name = f"{cfg['name']} ({tr[-1][0]} of {cfg['train']['steps']} steps)"
        ax.plot(*zip(*tr), lw=0.6, alpha=0.5, color=color)
        ax.plot(*zip(*va), "o-", ms=2, lw=1.2, color=color, label=f"{name}: validation (line: train)")
        print(f"{run_dir}: last validation loss {va[-1][1]:.3g} at step {va[-1][0]}")
    K, L = shape
    baseline = K * math.log(8) / (L + 2 * K)
    ax.axhline(baseline, color="k", ls="--", lw=1, label=f"memoryless baseline K ln 8 / (L + 2K) = {baseline:.4f}")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step (batch 128)")
    ax.set_ylabel("cross-entropy per position")
    ax.set_title(f"copy task K={K}, L={L} on CPU, one seed each")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, out, dpi=110)
    print(f"wrote {out}; baseline {baseline:.5f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
