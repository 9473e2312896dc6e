"""Recurrent cells (one time step each) and their ``torch.nn.RNN``-style layers."""

from .asrnn import ASRNNCell, saturating
from .base import Cell, State, unroll
from .classic import GRUCell, IRNNCell, LSTMCell, RNNCell
from .dmu import DMUCell, RHNCell
from .euler import AntisymmetricRNNCell, IncrementalRNNCell, LipschitzRNNCell, NAISNetCell
from .fullunitary import FCURNNCell
from .kronecker import KRUCell
from .layers import (
    ASRNN,
    DMU,
    EURNN,
    FCURNN,
    GRU,
    IRNN,
    KRU,
    LEM,
    LRU,
    LSTM,
    LTRNN,
    MLSTM,
    NNRNN,
    RHN,
    RNN,
    S4D,
    SCORNN,
    SLSTM,
    URNN,
    AntisymmetricRNN,
    CoRNN,
    ExpRNN,
    IncrementalRNN,
    LipschitzRNN,
    Mamba,
    MinGRU,
    MinLSTM,
    MomentumLSTM,
    NAISNet,
    Recurrent,
    SoftOrthRNN,
    ThreadsWarning,
    from_torch,
    to_torch,
)
from .ltrnn import LTRNNCell
from .minimal import MinGRUCell, MinLSTMCell
from .momentum import MomentumLSTMCell
from .nnrnn import NNRNNCell
from .onnx import export_onnx
from .orthogonal import ExpRNNCell, OrthogonalRNNCell, SCORNNCell
from .oscillator import CoRNNCell, LEMCell
from .registry import CellRegistry, UnknownCell
from .softorth import SoftOrthRNNCell
from .ssm import LRUCell, MambaCell, S4DCell
from .unitary import EURNNCell, URNNCell
from .xlstm import MLSTMCell, SLSTMCell

#: registry: lowercase key -> cell class (used by configs, the CLI and run directories); a lookup
#: also resolves "package.module:Class" and installed entry points (rnnlab.cells.registry)
CELLS: dict[str, type[Cell]] = CellRegistry(
    {
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
        "mingru": MinGRUCell,
        "minlstm": MinLSTMCell,
        "slstm": SLSTMCell,
        "mlstm": MLSTMCell,
        "lru": LRUCell,
        "s4d": S4DCell,
        "mamba": MambaCell,
    }
)
#: ``rnnlab.register_cell(name, cls)``: add a cell of your own (docs/own-cell.md)
register_cell = CELLS.register


__all__ = [
    "CELLS",
    "register_cell",
    "UnknownCell",
    "Cell",
    "Recurrent",
    "State",
    "unroll",
    "saturating",
    "from_torch",
    "to_torch",
    "export_onnx",
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
    "MinGRUCell",
    "MinLSTMCell",
    "MinGRU",
    "MinLSTM",
    "SLSTMCell",
    "MLSTMCell",
    "SLSTM",
    "MLSTM",
    "LRUCell",
    "S4DCell",
    "MambaCell",
    "LRU",
    "S4D",
    "Mamba",
]
