"""Benchmark tasks. ``TASKS`` maps registry keys to task classes; ``build_task`` makes one from
a ``TaskConfig``.

The registry is filled on first use (``_registry`` below imports each task module by name):
``rnnlab.tasks.data`` (data files only, no torch) lives in this package, so importing the
package must not import torch, or ``rnnlab data list`` would take seconds to start.
"""

from __future__ import annotations

__all__ = [
    "TASKS",
    "Task",
    "Batch",
    "build_task",
    "CopyTask",
    "VariableCopyTask",
    "AddingTask",
    "SequentialMNIST",
    "PermutedMNIST",
    "PTBCharTask",
    "PTBWordTask",
    "TextCharTask",
    "MusicTask",
    "TranslationTask",
    "HSAddingTask",
    "TemporalOrderTask",
    "NoisySequenceTask",
    "ArraysTask",
    "SelectiveCopyTask",
    "MQARTask",
    "InductionTask",
    "ListOpsTask",
    "from_arrays",
]


def _registry() -> dict[str, type]:
    """The registry, importing the task modules (lazily: see the module docstring)."""
    from .arrays import ArraysTask
    from .hochreiter import HSAddingTask, NoisySequenceTask, TemporalOrderTask
    from .listops import ListOpsTask
    from .mnist import PermutedMNIST, SequentialMNIST
    from .music import MusicTask
    from .recall import InductionTask, MQARTask, SelectiveCopyTask
    from .synthetic import AddingTask, CopyTask, VariableCopyTask
    from .text import PTBCharTask, PTBWordTask, TextCharTask
    from .translation import TranslationTask

    return {
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
        "arrays": ArraysTask,
        "selective_copy": SelectiveCopyTask,
        "mqar": MQARTask,
        "induction": InductionTask,
        "listops": ListOpsTask,
    }


def build_task(cfg, data_dir: str | None = None):
    """The task of a ``TaskConfig``: its class from ``TASKS`` called with ``cfg.options`` (and
    ``data_dir`` where the class takes one and the options do not set it)."""
    import inspect

    cls = _registry()[cfg.name]
    kwargs = dict(cfg.options)
    if data_dir is not None and "data_dir" in inspect.signature(cls.__init__).parameters:
        kwargs.setdefault("data_dir", data_dir)
    return cls(**kwargs)


def __getattr__(name: str):
    if name == "TASKS":
        value = _registry()
    elif name in ("Task", "Batch"):
        from . import base

        value = getattr(base, name)
    elif name == "from_arrays":
        from .arrays import from_arrays as value
    elif name in __all__:
        value = next(c for c in _registry().values() if c.__name__ == name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
