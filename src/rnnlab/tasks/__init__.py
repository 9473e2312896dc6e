"""Benchmark tasks. ``TASKS`` maps registry keys to task classes.

The task modules (and torch) are imported on first use of a name below, so that
``rnnlab.tasks.data`` (data files only) imports without torch: ``rnnlab data list`` starts fast.
"""

from importlib import import_module

#: public name -> module that defines it
_WHERE = {
    "Batch": "base", "Task": "base",
    "ArraysTask": "arrays", "from_arrays": "arrays",
    "HSAddingTask": "hochreiter", "NoisySequenceTask": "hochreiter", "TemporalOrderTask": "hochreiter",
    "PermutedMNIST": "mnist", "SequentialMNIST": "mnist",
    "MusicTask": "music",
    "AddingTask": "synthetic", "CopyTask": "synthetic", "VariableCopyTask": "synthetic",
    "PTBCharTask": "text", "PTBWordTask": "text", "TextCharTask": "text",
    "TranslationTask": "translation",
}

#: registry: lowercase key -> task class name (resolved into ``TASKS`` on first use)
_REGISTRY = {
    "copy": "CopyTask",
    "copy_variable": "VariableCopyTask",
    "adding": "AddingTask",
    "hs_adding": "HSAddingTask",
    "temporal_order": "TemporalOrderTask",
    "noisy_sequence": "NoisySequenceTask",
    "smnist": "SequentialMNIST",
    "psmnist": "PermutedMNIST",
    "ptb_char": "PTBCharTask",
    "ptb_word": "PTBWordTask",
    "text_char": "TextCharTask",
    "music": "MusicTask",
    "translation": "TranslationTask",
    "arrays": "ArraysTask",
}

__all__ = [
    "TASKS", "Task", "Batch", "CopyTask", "VariableCopyTask", "AddingTask", "SequentialMNIST", "PermutedMNIST",
    "PTBCharTask", "PTBWordTask", "TextCharTask", "MusicTask", "TranslationTask",
    "HSAddingTask", "TemporalOrderTask", "NoisySequenceTask", "ArraysTask", "from_arrays",
]


def __getattr__(name: str):
    if name == "TASKS":
        value = {key: __getattr__(cls) for key, cls in _REGISTRY.items()}
    elif name in _WHERE:
        value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
