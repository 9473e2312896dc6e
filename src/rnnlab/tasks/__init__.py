"""Benchmark tasks. ``TASKS`` maps registry keys to task classes."""

from .base import Batch, Task
from .synthetic import AddingTask, CopyTask

#: registry: lowercase key -> task class
TASKS: dict[str, type[Task]] = {
    "copy": CopyTask,
    "adding": AddingTask,
}

__all__ = ["TASKS", "Task", "Batch", "CopyTask", "AddingTask"]
