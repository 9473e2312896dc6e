"""Recurrent cells (one time step each) and their ``torch.nn.RNN``-style layers."""

from .asrnn import ASRNNCell, saturating
from .base import Cell, Recurrent, State, unroll
from .classic import GRUCell, IRNNCell, LSTMCell, RNNCell
from .orthogonal import ExpRNNCell, OrthogonalRNNCell, SCORNNCell

#: registry: lowercase key -> cell class (used by configs, the CLI and run directories)
CELLS: dict[str, type[Cell]] = {
    "rnn": RNNCell,
    "irnn": IRNNCell,
    "lstm": LSTMCell,
    "gru": GRUCell,
    "exprnn": ExpRNNCell,
    "scornn": SCORNNCell,
    "asrnn": ASRNNCell,
}


def _layer(cls: type[Cell], name: str) -> type[Recurrent]:
    return type(name, (Recurrent,), {"cell_class": cls, "__doc__": f"``Recurrent`` layer of {cls.__name__}."})


RNN = _layer(RNNCell, "RNN")
IRNN = _layer(IRNNCell, "IRNN")
LSTM = _layer(LSTMCell, "LSTM")
GRU = _layer(GRUCell, "GRU")
ExpRNN = _layer(ExpRNNCell, "ExpRNN")
SCORNN = _layer(SCORNNCell, "SCORNN")
ASRNN = _layer(ASRNNCell, "ASRNN")

__all__ = [
    "CELLS", "Cell", "Recurrent", "State", "unroll",
    "RNNCell", "IRNNCell", "LSTMCell", "GRUCell", "ExpRNNCell", "SCORNNCell", "OrthogonalRNNCell",
    "ASRNNCell", "ASRNN", "saturating",
    "RNN", "IRNN", "LSTM", "GRU", "ExpRNN", "SCORNN",
]
