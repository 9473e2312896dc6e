"""A cell of a user's own, written into a folder outside the package (tests of
docs/own-cell.md import these helpers: ``from owncell import ...``)."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

#: the worked example's cell, read from its file (one home: the tests check the cell users copy)
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own_cell.py"


def _example_cell() -> str:
    text = EXAMPLE.read_text()
    (node,) = [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "MinGated"]
    return ast.get_source_segment(text, node)


#: a module ``mycells`` with the minimal gated cell of examples/own_cell.py and broken ones
SOURCE = (
    "import torch\nfrom torch import nn\n\nimport rnnlab.cells\nfrom rnnlab.cells import Cell\n\n\n"
    + _example_cell()
    + "\n\n"
    + textwrap.dedent(
        """
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


    class _BadRowsTanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            grad = g * (1 - y**2)
            grad[2:] = g[2:] * (1 - y[2:])  # wrong past the first block of two rows
            return grad


    class WrongGradientPastTwoRows(MinGated):
        def forward(self, x, h):
            z, c = (x @ self.weight_ih.T + h @ self.weight_hh.T + self.bias).chunk(2, -1)
            z = torch.sigmoid(z)
            h = (1 - z) * h + z * _BadRowsTanh.apply(c)
            return h, h


    class HalfGRU(rnnlab.cells.GRUCell):
        # a built-in cell's subclass with a step of its own: half the GRU's output

        def forward(self, x, h):
            h, _ = super().forward(x, h)
            return 0.5 * h, 0.5 * h


    class WrongStateShape(MinGated):
        def init_state(self, batch_size, *, device=None, dtype=None):
            p = self.weight_hh
            return torch.zeros(batch_size, self.hidden_size + 1, device=device or p.device, dtype=dtype or p.dtype)


    class Noisy(MinGated):
        def forward(self, x, h):
            h, _ = super().forward(x, h)
            h = h + 1e-3 * torch.randn_like(h)
            return h, h
    """
    )
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
