"""Recurrent cells (one time step each) and their ``torch.nn.RNN``-style layers."""

from .asrnn import ASRNNCell, saturating
from .base import Cell, Recurrent, State, ThreadsWarning, unroll
from .classic import GRUCell, IRNNCell, LSTMCell, RNNCell
from .dmu import DMUCell, RHNCell
from .euler import AntisymmetricRNNCell, IncrementalRNNCell, LipschitzRNNCell, NAISNetCell
from .fullunitary import FCURNNCell
from .kronecker import KRUCell
from .ltrnn import LTRNNCell
from .momentum import MomentumLSTMCell
from .nnrnn import NNRNNCell
from .orthogonal import ExpRNNCell, OrthogonalRNNCell, SCORNNCell
from .oscillator import CoRNNCell, LEMCell
from .softorth import SoftOrthRNNCell
from .torch_nn import from_torch, to_torch
from .unitary import EURNNCell, URNNCell

#: registry: lowercase key -> cell class (used by configs, the CLI and run directories)
CELLS: dict[str, type[Cell]] = {
    "rnn": RNNCell,
    "irnn": IRNNCell,
    "lstm": LSTMCell,
    "gru": GRUCell,
    "exprnn": ExpRNNCell,
    "scornn": SCORNNCell,
    "asrnn": ASRNNCell,
    "nnrnn": NNRNNCell,
    "dmu": DMUCell,
    "rhn": RHNCell,
    "ltrnn": LTRNNCell,
    "urnn": URNNCell,
    "eurnn": EURNNCell,
    "momentumlstm": MomentumLSTMCell,
    "fcurnn": FCURNNCell,
    "softorth": SoftOrthRNNCell,
    "kru": KRUCell,
    "antisymrnn": AntisymmetricRNNCell,
    "incrnn": IncrementalRNNCell,
    "naisnet": NAISNetCell,
    "lipschitz": LipschitzRNNCell,
    "cornn": CoRNNCell,
    "lem": LEMCell,
}


_LAYER_DOC = """``Recurrent`` layer of {cell}: ``torch.nn.RNN``'s interface (positional order input_size,
    hidden_size, num_layers, bias, batch_first, dropout, bidirectional; time-major input unless
    batch_first; packed sequences or ``lengths``), the cell's keyword options passed on.

    Example:
    >>> import torch
    >>> from rnnlab.cells import {name}
    >>> layer = {name}(3, 8, num_layers=2)
    >>> out, h_n = layer(torch.randn(5, 2, 3))       # (T, B, I) -> outputs (T, B, H)
    >>> out.shape
    torch.Size([5, 2, 8])
    >>> out2, _ = layer(torch.randn(5, 2, 3), lengths=torch.tensor([5, 3]))
    >>> bool((out2[3:, 1] == 0).all())                # zero outputs past a sequence's length
    True
    """


def _layer(cls: type[Cell], name: str) -> type[Recurrent]:
    return type(name, (Recurrent,), {"cell_class": cls, "__doc__": _LAYER_DOC.format(cell=cls.__name__, name=name)})


class RNN(Recurrent):
    """``Recurrent`` layer of RNNCell, with ``torch.nn.RNN``'s positional order: ``nonlinearity``
    ("tanh", "relu"; also rnnlab's "modrelu") comes fourth, after ``num_layers``.

    Example (the same numbers as ``torch.nn.RNN`` given the same weights):
    >>> import torch
    >>> from rnnlab.cells import RNN, from_torch
    >>> ref = torch.nn.RNN(3, 8, 1, "relu")
    >>> layer = from_torch(ref)
    >>> type(layer).__name__, layer.cells[0].nonlinearity
    ('RNN', 'relu')
    >>> x = torch.randn(5, 2, 3)
    >>> torch.allclose(layer(x)[0], ref(x)[0], atol=1e-6)
    True
    """

    cell_class = RNNCell

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers=1,
        nonlinearity="tanh",
        bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        device=None,
        dtype=None,
        **kwargs,
    ):
        if not isinstance(nonlinearity, str):
            raise TypeError(
                f"RNN takes nonlinearity fourth, as torch.nn.RNN does: RNN(input_size, hidden_size, "
                f"num_layers, nonlinearity, bias, batch_first, ...); got nonlinearity={nonlinearity!r}"
            )
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            0,
            device,
            dtype,
            nonlinearity=nonlinearity,
            **kwargs,
        )


IRNN = _layer(IRNNCell, "IRNN")
LSTM = _layer(LSTMCell, "LSTM")
GRU = _layer(GRUCell, "GRU")
ExpRNN = _layer(ExpRNNCell, "ExpRNN")
SCORNN = _layer(SCORNNCell, "SCORNN")
ASRNN = _layer(ASRNNCell, "ASRNN")
NNRNN = _layer(NNRNNCell, "NNRNN")
DMU = _layer(DMUCell, "DMU")
RHN = _layer(RHNCell, "RHN")
LTRNN = _layer(LTRNNCell, "LTRNN")
URNN = _layer(URNNCell, "URNN")
EURNN = _layer(EURNNCell, "EURNN")
MomentumLSTM = _layer(MomentumLSTMCell, "MomentumLSTM")
FCURNN = _layer(FCURNNCell, "FCURNN")
SoftOrthRNN = _layer(SoftOrthRNNCell, "SoftOrthRNN")
KRU = _layer(KRUCell, "KRU")
AntisymmetricRNN = _layer(AntisymmetricRNNCell, "AntisymmetricRNN")
IncrementalRNN = _layer(IncrementalRNNCell, "IncrementalRNN")
NAISNet = _layer(NAISNetCell, "NAISNet")
LipschitzRNN = _layer(LipschitzRNNCell, "LipschitzRNN")
CoRNN = _layer(CoRNNCell, "CoRNN")
LEM = _layer(LEMCell, "LEM")

__all__ = [
    "CELLS",
    "Cell",
    "Recurrent",
    "State",
    "unroll",
    "saturating",
    "from_torch",
    "to_torch",
    "ThreadsWarning",
    "RNNCell",
    "IRNNCell",
    "LSTMCell",
    "GRUCell",
    "ExpRNNCell",
    "SCORNNCell",
    "OrthogonalRNNCell",
    "ASRNNCell",
    "NNRNNCell",
    "DMUCell",
    "RHNCell",
    "LTRNNCell",
    "URNNCell",
    "EURNNCell",
    "RNN",
    "IRNN",
    "LSTM",
    "GRU",
    "ExpRNN",
    "SCORNN",
    "ASRNN",
    "NNRNN",
    "DMU",
    "RHN",
    "LTRNN",
    "URNN",
    "EURNN",
    "MomentumLSTMCell",
    "FCURNNCell",
    "SoftOrthRNNCell",
    "KRUCell",
    "AntisymmetricRNNCell",
    "IncrementalRNNCell",
    "NAISNetCell",
    "LipschitzRNNCell",
    "CoRNNCell",
    "LEMCell",
    "MomentumLSTM",
    "FCURNN",
    "SoftOrthRNN",
    "KRU",
    "AntisymmetricRNN",
    "IncrementalRNN",
    "NAISNet",
    "LipschitzRNN",
    "CoRNN",
    "LEM",
]
