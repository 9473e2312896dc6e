"""rnnlab: long-memory recurrent neural networks in PyTorch."""

from .cells import (
    ASRNN, CELLS, DMU, GRU, IRNN, LSTM, LTRNN, NNRNN, RHN, RNN, SCORNN, ASRNNCell, Cell, DMUCell,
    ExpRNN, ExpRNNCell, GRUCell, IRNNCell, LSTMCell, LTRNNCell, NNRNNCell, Recurrent, RHNCell,
    RNNCell, SCORNNCell, EURNN, EURNNCell, URNN, URNNCell, unroll,
)
from .tasks import TASKS, AddingTask, Batch, CopyTask, Task

__version__ = "0.1.0"
