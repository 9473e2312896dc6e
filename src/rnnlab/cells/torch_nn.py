"""Conversions between ``torch.nn``'s recurrent modules and rnnlab's classic layers and cells.

``from_torch(module)`` turns a ``torch.nn.LSTM``/``GRU``/``RNN`` into ``rnnlab.LSTM``/``GRU``/
``RNN`` (and ``torch.nn.LSTMCell``/``GRUCell``/``RNNCell`` into the rnnlab cell) with the same
sizes, options, weights, device, dtype and train/eval mode; ``to_torch(module)`` goes back.
Weight names follow torch: a layer's ``weight_ih_l{k}`` (``_reverse`` for the backward
direction) is ``cells[D * k + d].weight_ih``; a cell's names are torch's own. The converted
module computes what the original computes (tested to 1e-6 in float32, tests/cells/test_torch_parity.py).
"""

from __future__ import annotations

import torch
from torch import nn

from .base import Cell, Recurrent
from .classic import GRUCell, LSTMCell, RNNCell

_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def _place(module: nn.Module) -> dict:
    p = next(module.parameters(), None)
    return {} if p is None else {"device": p.device, "dtype": p.dtype}


def _copy(dst: nn.Module, dst_suffix: str, src: nn.Module, src_suffix: str, bias: bool) -> None:
    with torch.no_grad():
        for name in _NAMES if bias else _NAMES[:2]:
            getattr(dst, name + dst_suffix).copy_(getattr(src, name + src_suffix))


def _layer_class(module: nn.RNNBase) -> type[Recurrent]:
    from . import GRU, LSTM, RNN

    if isinstance(module, nn.LSTM):
        if module.proj_size:
            raise ValueError(
                f"torch.nn.LSTM with proj_size={module.proj_size} has no rnnlab counterpart "
                f"(rnnlab's LSTM has no output projection)"
            )
        return LSTM
    if isinstance(module, nn.GRU):
        return GRU
    if isinstance(module, nn.RNN):
        return RNN
    raise TypeError(f"from_torch converts torch.nn.LSTM, GRU and RNN (and their cells), got {type(module).__name__}")


def from_torch(module: nn.Module) -> nn.Module:
    """The rnnlab layer or cell equal to ``module`` (``torch.nn.LSTM``/``GRU``/``RNN`` or
    ``LSTMCell``/``GRUCell``/``RNNCell``): same sizes and options, a copy of the weights, the
    same device, dtype and train/eval mode.

    >>> import torch, rnnlab
    >>> ref = torch.nn.LSTM(5, 8, 2, batch_first=True)
    >>> layer = rnnlab.from_torch(ref)
    >>> x = torch.randn(3, 7, 5)
    >>> bool(torch.allclose(layer(x)[0], ref(x)[0], atol=1e-6))
    True
    """
    if isinstance(module, (nn.LSTMCell, nn.GRUCell, nn.RNNCell)):
        bias = module.bias
        if isinstance(module, nn.LSTMCell):
            cell = LSTMCell(module.input_size, module.hidden_size, bias=bias)
        elif isinstance(module, nn.GRUCell):
            cell = GRUCell(module.input_size, module.hidden_size, bias=bias)
        else:
            cell = RNNCell(module.input_size, module.hidden_size, nonlinearity=module.nonlinearity, bias=bias)
        cell.to(**_place(module))
        _copy(cell, "", module, "", bias)
        return cell.train(module.training)
    if not isinstance(module, nn.RNNBase):
        raise TypeError(
            f"from_torch converts torch.nn.LSTM, GRU and RNN (and their cells), got {type(module).__name__}"
        )
    cls = _layer_class(module)
    kwargs = dict(
        num_layers=module.num_layers,
        bias=module.bias,
        batch_first=module.batch_first,
        dropout=float(module.dropout),
        bidirectional=module.bidirectional,
        **_place(module),
    )
    if isinstance(module, nn.RNN):
        kwargs["nonlinearity"] = module.nonlinearity
    layer = cls(module.input_size, module.hidden_size, **kwargs)
    D = 2 if module.bidirectional else 1
    for k in range(module.num_layers):
        for d in range(D):
            _copy(layer.cells[D * k + d], "", module, f"_l{k}" + ("_reverse" if d else ""), module.bias)
    return layer.train(module.training)


def _torch_class(cell: Cell, what: str):
    if isinstance(cell, LSTMCell):
        return nn.LSTM, nn.LSTMCell, {}
    if isinstance(cell, GRUCell):
        return nn.GRU, nn.GRUCell, {}
    if isinstance(cell, RNNCell):
        if cell.nonlinearity == "modrelu":
            raise TypeError(f"{what} uses modReLU, which torch.nn.RNN does not have (tanh or relu only)")
        return nn.RNN, nn.RNNCell, {"nonlinearity": cell.nonlinearity}
    raise TypeError(
        f"{what} has no torch.nn counterpart: to_torch converts rnnlab's LSTM, GRU, RNN and IRNN layers and "
        f"cells (the other families' updates are not in torch.nn); capture it with torch.export instead "
        f"(docs/layers.md, 'Capture')"
    )


def to_torch(module: nn.Module) -> nn.Module:
    """The ``torch.nn.LSTM``/``GRU``/``RNN`` (or cell) equal to an rnnlab LSTM, GRU, RNN or IRNN
    layer (or cell): same sizes and options, a copy of the weights, device, dtype and mode.
    Other families (asRNN, nnRNN, DMU, ...) have no torch.nn counterpart: ``TypeError``."""
    if isinstance(module, Cell):
        layer_cls, cell_cls, extra = _torch_class(module, type(module).__name__)
        bias = module.bias_ih is not None
        out = cell_cls(module.input_size, module.hidden_size, bias=bias, **extra, **_place(module))
        _copy(out, "", module, "", bias)
        return out.train(module.training)
    if not isinstance(module, Recurrent):
        raise TypeError(f"to_torch converts rnnlab layers and cells, got {type(module).__name__}")
    name = type(module).__name__
    first = module.cells[0]
    layer_cls, _, extra = _torch_class(first, name)
    if module._mixed:
        raise ValueError(f"{name} has layers of different widths {module.hidden_sizes}; torch.nn layers have one width")
    bias = first.bias_ih is not None
    out = layer_cls(
        module.input_size,
        module.hidden_size,
        module.num_layers,
        bias=bias,
        batch_first=module.batch_first,
        dropout=module.dropout,
        bidirectional=module.bidirectional,
        **extra,
        **_place(module),
    )
    D = module.num_directions
    for k in range(module.num_layers):
        for d in range(D):
            _copy(out, f"_l{k}" + ("_reverse" if d else ""), module.cells[D * k + d], "", bias)
    return out.train(module.training)
