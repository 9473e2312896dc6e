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

import contextlib
import copy
import io
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


def _export_failure(e: BaseException) -> str:
    """One line for an exporter failure: the innermost error (the exporter wraps it in a
    message that ends in "Next steps:"), where in the model's code it arose, and the fix."""
    import re
    import traceback

    inner = e
    while inner.__cause__ is not None:
        inner = inner.__cause__
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(inner).splitlines()]
    first = next((line for line in lines if "No ONNX function" in line), next((x for x in lines if x), ""))
    frames = [
        f
        for f in traceback.extract_tb(inner.__traceback__)
        if not re.search(r"[/\\](torch|onnx\w*|onnxscript|sympy|contextlib|functools)[/\\]", f.filename)
    ]
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    data = "data-dependent" in first or "DataDependent" in type(inner).__name__
    fix = (
        "the model's Python code branches on a tensor's value, which a graph cannot hold; compute both "
        "branches with torch.where instead"
        if data
        else "the exporter cannot capture this model; capture it with torch.export instead (docs/layers.md, 'Capture')"
    )
    return f"{type(inner).__name__}: {first[:240]}{where}; {fix}"


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
        batch = torch.export.Dim("batch", min=1, max=1 << 20)
        # a layer's call is (input, h0, lengths): h0's leaves (D L, B, H) and lengths (B,) share
        # the input's batch
        rest = []
        for i, a in enumerate(example[1:], 1):
            if i == 1 and isinstance(a, torch.Tensor) and a.dim() == 3:
                rest.append({1: batch})
            elif i == 1 and isinstance(a, tuple) and all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in a):
                rest.append(tuple({1: batch} for _ in a))
            elif i == 2 and isinstance(a, torch.Tensor) and a.dim() == 1:
                rest.append({0: batch})
            else:
                rest.append(None)
        dynamic_shapes = ({axis: batch}, *rest)
    # the exporter's loggers (torch.fx and torch.export print the whole graph on a failure)
    quiet = [
        logging.getLogger(n)
        for n in ("torch.onnx", "onnxscript", "onnx_ir", "torch.fx", "torch.export", "torch._export")
    ]
    levels = [lg.level for lg in quiet]
    try:
        for lg in quiet:
            lg.setLevel(logging.ERROR)
        # torch.export prints the whole graph to stderr when it fails (about 125 lines for a
        # small layer): the one-line error below says what matters
        with warnings.catch_warnings(), torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")  # the exporter's own notes (deprecations, fallbacks)
            program = torch.onnx.export(
                frozen, example, dynamo=True, dynamic_shapes=dynamic_shapes, verbose=False, report=False
            )
    except Exception as e:  # noqa: BLE001 - the exporter raises many kinds; name it in one line
        raise RuntimeError(f"{what} could not be exported to ONNX: {_export_failure(e)}") from e
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)
    proto = program.model_proto
    if path is not None:
        Path(path).write_bytes(proto.SerializeToString())
    return proto
