"""rnnlab: long-memory recurrent neural networks in PyTorch."""

from .cells import (
    CELLS, DMU, GRU, IRNN, LSTM, LTRNN, RHN, RNN, SCORNN, Cell, DMUCell, ExpRNN, ExpRNNCell,
    GRUCell, IRNNCell, LSTMCell, LTRNNCell, Recurrent, RHNCell, RNNCell, SCORNNCell, unroll,
)
from .cells import NNRNN, NNRNNCell
from .tasks import TASKS, AddingTask, Batch, CopyTask, Task

__version__ = "0.1.0"
