"""rnnlab: long-memory recurrent neural networks in PyTorch."""

from .cells import (
    ASRNN, ASRNNCell, CELLS, GRU, IRNN, LSTM, RNN, SCORNN, Cell, ExpRNN, ExpRNNCell, GRUCell, IRNNCell,
    LSTMCell, Recurrent, RNNCell, SCORNNCell, unroll,
)
from .tasks import TASKS, AddingTask, Batch, CopyTask, Task

__version__ = "0.1.0"
