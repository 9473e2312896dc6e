"""Figures of the asRNN copy evidence run for docs/asrnn.md: the training and validation loss
against the memoryless baseline, from a run directory's metrics.jsonl.

    PYTHONPATH=src python benchmarks/asrnn_evidence_figures.py runs/asrnn-copy-L1000 docs/asrnn-copy-L1000-loss.png
"""

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(run_dir: str, out: str) -> None:
    rows = [json.loads(ln) for ln in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    cfg = json.loads((Path(run_dir) / "config.json").read_text())
    K, L = cfg["task"]["options"]["K"], cfg["task"]["options"]["L"]
    baseline = K * math.log(8) / (L + 2 * K)
    tr = [(r["step"], r["train/loss"]) for r in rows if "train/loss" in r]
    va = [(r["step"], r["val/loss"]) for r in rows if "val/loss" in r]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(*zip(*tr), lw=1.0, label="asRNN n=138: train loss (every 10 steps)")
    ax.plot(*zip(*va), "o-", ms=3, lw=1.2, label="asRNN n=138: validation loss")
    ax.axhline(baseline, color="k", ls="--", lw=1, label=f"memoryless baseline K ln 8 / (L + 2K) = {baseline:.4f}")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step (batch 128)")
    ax.set_ylabel("cross-entropy per position")
    ax.set_title(
        f"copy task K={K}, L={L}: asRNN preset asrnn/copy-L{L}, {tr[-1][0]} of {cfg['train']['steps']} steps on CPU"
    )
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}; last val loss {va[-1]} ; baseline {baseline:.5f}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
