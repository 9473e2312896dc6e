"""Recurrent cells (one time step each) and their ``torch.nn.RNN``-style layers."""

from .asrnn import ASRNNCell, saturating
from .base import Cell, Recurrent, State, ThreadsWarning, unroll
from .classic import GRUCell, IRNNCell, LSTMCell, RNNCell
from .dmu import DMUCell, RHNCell
from .ltrnn import LTRNNCell
from .nnrnn import NNRNNCell
from .orthogonal import ExpRNNCell, OrthogonalRNNCell, SCORNNCell
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
}


def _layer(cls: type[Cell], name: str) -> type[Recurrent]:
    return type(name, (Recurrent,), {"cell_class": cls, "__doc__": f"``Recurrent`` layer of {cls.__name__}."})


class RNN(Recurrent):
    """``Recurrent`` layer of RNNCell, with ``torch.nn.RNN``'s positional order: ``nonlinearity``
    ("tanh", "relu"; also rnnlab's "modrelu") comes fourth, after ``num_layers``."""

    cell_class = RNNCell

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None, **kwargs):
        if not isinstance(nonlinearity, str):
            raise TypeError(f"RNN takes nonlinearity fourth, as torch.nn.RNN does: RNN(input_size, hidden_size, "
                            f"num_layers, nonlinearity, bias, batch_first, ...); got nonlinearity={nonlinearity!r}")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         device, dtype, nonlinearity=nonlinearity, **kwargs)


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

__all__ = [
    "CELLS", "Cell", "Recurrent", "State", "unroll", "saturating", "from_torch", "to_torch", "ThreadsWarning",
    "RNNCell", "IRNNCell", "LSTMCell", "GRUCell", "ExpRNNCell", "SCORNNCell", "OrthogonalRNNCell",
    "ASRNNCell", "NNRNNCell", "DMUCell", "RHNCell", "LTRNNCell", "URNNCell", "EURNNCell",
    "RNN", "IRNN", "LSTM", "GRU", "ExpRNN", "SCORNN", "ASRNN", "NNRNN", "DMU", "RHN", "LTRNN", "URNN", "EURNN",
]
