"""ONNX export of rnnlab's layers and cells for inference (``rnnlab.export_onnx``).

torch's ONNX exporter (``torch.onnx.export(..., dynamo=True)``, which needs the ``onnx`` and
``onnxscript`` packages: ``pip install "rnnlab[onnx]"``) captures a layer through
``torch.export``, where it runs each cell's step loop, so the time loop is unrolled to the length of
the example input; the batch size stays free. Two things stand in the exporter's way, and this
module handles them:

- The orthogonal and Schur-form weights are parametrizations (a matrix exponential, a Cayley
  transform, ...), ops ONNX does not have. For inference they are constants: the export works on
  a copy whose parametrized weights are replaced by their current values (the model itself is
  left untouched), so the exported graph computes exactly the eager forward.
- Cells that compute in complex numbers (the unitary EURNN, uRNN, KRU) cannot be exported: ONNX
  has no complex tensor type. They get a one-line error that says so.
"""

from __future__ import annotations

import copy
import logging
import warnings
from pathlib import Path

from torch import nn

#: cells whose forward computes in complex arithmetic, which ONNX has no type for
COMPLEX_CELLS = ("EURNNCell", "URNNCell", "KRUCell")


def frozen_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` in eval mode whose parametrized tensors (``torch.nn.utils.parametrize``)
    are plain parameters holding their current values: the same forward, no parametrization."""
    from torch.nn.utils import parametrize

    out = copy.deepcopy(module).eval()
    for m in list(out.modules()):
        if parametrize.is_parametrized(m):
            # a deep copy shares the parametrized class torch made for the original, and removing
            # a parametrization deletes its property from that class: give the copy its own class
            cls = type(m)
            own = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
            m.__class__ = type(cls.__name__, cls.__bases__, own)
            for name in list(m.parametrizations.keys()):
                parametrize.remove_parametrizations(m, name, leave_parametrized=True)
    return out


def _complex_cell(module: nn.Module) -> str | None:
    for m in module.modules():
        if type(m).__name__ in COMPLEX_CELLS:
            return type(m).__name__
    return None


def export_onnx(module: nn.Module, example: tuple, path: str | Path | None = None, *, dynamic_batch: bool = True):
    """Export an rnnlab layer or cell (or a model built of them) to ONNX for inference and return
    the ``onnx.ModelProto`` (also written to ``path`` when given).

    ``example`` is the tuple of positional inputs of one call, e.g. ``(x,)`` or ``(x, h0)``; the
    graph is fixed to its sequence length (the time loop is unrolled) and, with ``dynamic_batch``,
    takes any batch size (of a layer's input ``x``, batch on axis 0 with ``batch_first``, else 1).
    Needs the ``onnx`` and ``onnxscript`` packages (``pip install "rnnlab[onnx]"``);
    ``onnxruntime`` runs the result.

    >>> import torch, rnnlab
    >>> layer = rnnlab.ASRNN(3, 8)
    >>> model = rnnlab.export_onnx(layer, (torch.randn(5, 2, 3),))  # doctest: +SKIP
    """
    import torch

    try:
        import onnxscript  # noqa: F401 - torch's exporter needs it; say so before it does
    except ImportError:
        raise ImportError(
            'rnnlab.export_onnx needs the onnx and onnxscript packages: pip install "rnnlab[onnx]"'
        ) from None
    what = type(module).__name__
    complex_cell = _complex_cell(module)
    if complex_cell is not None:
        raise TypeError(
            f"{what} cannot be exported to ONNX: its cell {complex_cell} computes in complex numbers and ONNX "
            f"has no complex tensor type; capture it with torch.export instead (docs/layers.md, 'Capture')"
        )
    if not isinstance(example, tuple):
        raise TypeError(
            f"example must be a tuple of the call's positional inputs, e.g. (x,), got {type(example).__name__}"
        )
    frozen = frozen_copy(module)
    dynamic_shapes = None
    x = example[0] if example else None
    if dynamic_batch and isinstance(x, torch.Tensor) and x.dim() == 3:
        axis = 0 if getattr(module, "batch_first", False) else 1
        dynamic_shapes = ({axis: torch.export.Dim("batch", min=1, max=1 << 20)},) + (None,) * (len(example) - 1)
    quiet = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [lg.level for lg in quiet]
    try:
        for lg in quiet:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the exporter's own notes (deprecations, fallbacks)
            program = torch.onnx.export(
                frozen, example, dynamo=True, dynamic_shapes=dynamic_shapes, verbose=False, report=False
            )
    except Exception as e:  # noqa: BLE001 - the exporter raises many kinds; name it in one line
        first = next((line for line in str(e).splitlines() if "No ONNX function" in line), str(e).splitlines()[0])
        raise RuntimeError(f"{what} could not be exported to ONNX: {first.strip()[:300]}") from e
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)
    proto = program.model_proto
    if path is not None:
        Path(path).write_bytes(proto.SerializeToString())
    return proto
