"""A cell of your own against the papers' baselines: write it, register it, check it, compare it.

The cell below is a minimal gated RNN (one update gate, no reset gate). The script registers
it, runs the contract check (`rnnlab check-cell`), and compares it with the strongest
baselines of the papers on the long-memory tasks at matched parameter counts
(`rnnlab compare`). Run it:

    python examples/own_cell.py                          # a tiny budget: adding, 2 seeds
    python examples/own_cell.py --steps 0 --seeds 3 --tasks all   # the quick budget, every task

The same from the command line, naming the cell by its file:

    rnnlab check-cell examples/own_cell.py:MinGated
    rnnlab compare examples/own_cell.py:MinGated --budget quick
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import rnnlab
from rnnlab.cells import Cell


class MinGated(Cell):
    """h_t = (1 - z) * h + z * tanh(c), [z; c] = W x_t + U h_{t-1} + b, z through a sigmoid."""

    def __init__(self, input_size: int, hidden_size: int, backend: str = "auto"):
        super().__init__(input_size, hidden_size, backend)
        self.weight_ih = nn.Parameter(torch.randn(2 * hidden_size, input_size) / input_size**0.5)
        self.weight_hh = nn.Parameter(torch.randn(2 * hidden_size, hidden_size) / hidden_size**0.5)
        self.bias = nn.Parameter(torch.zeros(2 * hidden_size))

    def forward(self, x, h):
        z, c = (x @ self.weight_ih.T + h @ self.weight_hh.T + self.bias).chunk(2, -1)
        z = torch.sigmoid(z)
        h = (1 - z) * h + z * torch.tanh(c)
        return h, h


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40, help="training steps per run (0: the quick budget's)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--tasks", default="adding", help="comma-separated tasks of rnnlab compare, or all")
    p.add_argument("--out", default="runs/own-cell")
    args = p.parse_args()

    rnnlab.register_cell("mingated", MinGated)  # model.cell = "mingated" in this process
    from rnnlab.cellcheck import check_cell

    failed = [item.name for item in check_cell("mingated", runs=False) if not item.ok]
    assert not failed, f"the cell fails {failed}"

    from rnnlab.compare import compare

    tiny = [f"train.steps={args.steps}", f"train.eval_every={max(args.steps // 4, 1)}"] if args.steps else []
    out = compare(
        f"{__file__}:MinGated",  # worker processes import the cell from this file
        tasks=None if args.tasks == "all" else args.tasks.split(","),
        budget="quick",
        seeds=args.seeds,
        out=args.out,
        overrides=tiny,
        log=lambda m: None,
    )
    print((out / "table.md").read_text(), end="")
    print(f"figures: {', '.join(str(f) for f in sorted(out.glob('*.png')))}")


if __name__ == "__main__":
    main()
