"""One paper figure, small: Henaff et al. (2016), Fig. 2, the copy task with the linear-transition
RNN initialised to the identity (LT-IRNN) or to a random orthogonal matrix (LT-ORNN).

The paper's claim is that the orthogonal start solves the copy task where the identity start does
not. This reruns both presets at a delay of L=50 (the paper: 500 and more) for a few hundred
steps and plots their validation recall, the fraction of copied symbols recalled. At this small
budget the curves need not show the paper's ordering (at the defaults neither model solves the
task, and their order can be the reverse of the paper's); the reproduction ledger
(REPRODUCTION.md) has the full-budget runs. Run it:

    python examples/henaff_copy_small.py [--steps 600] [--L 50] [--out runs/henaff-small]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rnnlab.config import load
from rnnlab.plots import plot_curves
from rnnlab.train import train


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600, help="training steps per model, e.g. --steps 100")
    p.add_argument("--L", type=int, default=50, help="the copy delay, e.g. --L 20")
    p.add_argument("--out", default="runs/henaff-small", help="parent of the run directories, e.g. --out /tmp/h")
    args = p.parse_args(argv)
    sets = [f"task.L={args.L}", f"train.steps={args.steps}", f"train.eval_every={max(1, args.steps // 10)}"]
    dirs = []
    for preset in ("henaff/copy-ltirnn", "henaff/copy-ltornn"):
        cfg = load(preset, sets)
        run_dir = Path(args.out) / cfg.name
        result = train(cfg, run_dir, progress=False)
        recall = result["test"]["test/recall_accuracy"]
        print(
            f"{preset}: test recall {recall:.3f} after {args.steps} steps (chance {result['baseline']['recall_accuracy']:.3f})"
        )
        dirs.append(run_dir)
    png = plot_curves(dirs, Path(args.out) / "recall.png", "val/recall_accuracy", title=f"copy task, L={args.L}")
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
