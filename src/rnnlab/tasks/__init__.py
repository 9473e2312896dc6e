"""Benchmark tasks. ``TASKS`` maps registry keys to task classes."""

from .base import Batch, Task
from .hochreiter import HSAddingTask, NoisySequenceTask, TemporalOrderTask
from .mnist import PermutedMNIST, SequentialMNIST
from .music import MusicTask
from .synthetic import AddingTask, CopyTask, VariableCopyTask
from .text import PTBCharTask, PTBWordTask, TextCharTask
from .translation import TranslationTask

#: registry: lowercase key -> task class
TASKS: dict[str, type[Task]] = {
    "copy": CopyTask,
    "copy_variable": VariableCopyTask,
    "adding": AddingTask,
    "hs_adding": HSAddingTask,
    "temporal_order": TemporalOrderTask,
    "noisy_sequence": NoisySequenceTask,
    "smnist": SequentialMNIST,
    "psmnist": PermutedMNIST,
    "ptb_char": PTBCharTask,
    "ptb_word": PTBWordTask,
    "text_char": TextCharTask,
    "music": MusicTask,
    "translation": TranslationTask,
}

__all__ = [
    "TASKS", "Task", "Batch", "CopyTask", "VariableCopyTask", "AddingTask", "SequentialMNIST", "PermutedMNIST",
    "PTBCharTask", "PTBWordTask", "TextCharTask", "MusicTask", "TranslationTask",
    "HSAddingTask", "TemporalOrderTask", "NoisySequenceTask",
]
