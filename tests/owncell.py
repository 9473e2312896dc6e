"""A cell of a user's own, written into a folder outside the package (tests of
docs/own-cell.md import these helpers: ``from owncell import ...``)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

#: a module ``mycells`` with a minimal gated cell (the one of examples/own_cell.py) and broken ones
SOURCE = textwrap.dedent(
    '''
    import torch
    from torch import nn

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


    class _BadTanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * (1 - y)  # wrong: d tanh = 1 - y**2


    class WrongGradient(MinGated):
        def forward(self, x, h):
            z, c = (x @ self.weight_ih.T + h @ self.weight_hh.T + self.bias).chunk(2, -1)
            z = torch.sigmoid(z)
            h = (1 - z) * h + z * _BadTanh.apply(c)
            return h, h


    class WrongStateShape(MinGated):
        def init_state(self, batch_size, *, device=None, dtype=None):
            p = self.weight_hh
            return torch.zeros(batch_size, self.hidden_size + 1, device=device or p.device, dtype=dtype or p.dtype)


    class Noisy(MinGated):
        def forward(self, x, h):
            h, _ = super().forward(x, h)
            h = h + 1e-3 * torch.randn_like(h)
            return h, h
    '''
)


def write_cells(folder: Path, name: str = "mycells") -> Path:
    """``folder/name.py`` holding :data:`SOURCE`; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(SOURCE)
    return path


def write_entry_point(folder: Path, cells: dict[str, str], dist: str = "mycells_dist") -> Path:
    """A distribution's metadata in ``folder`` (put it on sys.path): ``dist-0.1.dist-info`` with
    the entry points ``{name: "module:Class"}`` of group ``rnnlab.cells``; no pip install."""
    info = folder / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "".join(f"{k} = {v}\n" for k, v in cells.items())
    (info / "entry_points.txt").write_text(f"[rnnlab.cells]\n{lines}")
    return info


def forget(module: str = "mycells") -> None:
    """Drop an imported test module (tests write their own into their tmp_path)."""
    sys.modules.pop(module, None)
