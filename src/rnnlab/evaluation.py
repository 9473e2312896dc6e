"""The trainer's evaluation: a model's metrics over a task's split, and the steps it is made of
(the batches on the model's device, the forward pass, the running sums of the task's metrics
and their means), which an ensemble's batched evaluation (:mod:`rnnlab.ensemble`) shares.

>>> from rnnlab import config
>>> from rnnlab.evaluation import evaluate
>>> from rnnlab.model import build_model
>>> from rnnlab.tasks import build_task
>>> cfg = config.load("demo/lstm", ["task.L=5", "task.val_size=8", "model.hidden_size=8"])
>>> task = build_task(cfg.task)
>>> model = build_model(cfg.model, task)
>>> sorted(evaluate(model, task, "val", batch_size=4))
['val/accuracy', 'val/loss', 'val/recall_accuracy']
"""

from __future__ import annotations

import torch
from torch import nn

from . import device as dev
from .model import Model
from .tasks.base import Batch, Task

__all__ = ["add_metric_sums", "eval_data", "evaluate", "model_forward", "split_metrics", "to_device"]


def model_forward(model: Model, batch: Batch, state=None):
    """Call a model on a batch (``model.forward_batch``): ``(out, state)``."""
    return model.forward_batch(batch, state)


def to_device(batch: Batch, device: torch.device) -> Batch:
    """``batch`` on ``device`` (lengths stay on the CPU, where the layers read them); from
    pinned memory without blocking on CUDA."""
    if device.type == "cpu":
        return batch
    if device.type == "cuda":
        pin = lambda t: t.pin_memory() if isinstance(t, torch.Tensor) and t.device.type == "cpu" else t  # noqa: E731
        batch = Batch(
            pin(batch.x),
            pin(batch.y),
            batch.lengths,
            pin(batch.mask),
            batch.carry_state,
            {k: pin(v) for k, v in batch.extra.items()},
        )
        mv = lambda t: t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t  # noqa: E731
        return Batch(
            mv(batch.x),
            mv(batch.y),
            batch.lengths,
            mv(batch.mask),
            batch.carry_state,
            {k: mv(v) for k, v in batch.extra.items()},
        )
    return batch.to(device)


def _model_device(model: nn.Module) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


@torch.no_grad()
def evaluate(
    model: nn.Module, task: Task, split: str, batch_size: int = 256, max_batches: int = 0, precision: str = "fp32"
) -> dict:
    """Metrics of ``model`` over the whole ``split`` (or its first ``max_batches`` batches),
    keyed ``"<split>/<metric>"``; batches go to the model's device, the forward pass runs
    under ``precision``'s autocast."""
    was_training = model.training
    model.eval()
    device = _model_device(model)
    sums: dict[str, list[float]] = {}
    carry = None
    try:
        for batch in eval_data(task, split, batch_size, max_batches, device):
            with dev.autocast(device, precision):
                out, carry = model_forward(model, batch, carry if batch.carry_state else None)
            add_metric_sums(sums, task, out, batch)
    finally:
        model.train(was_training)
    return split_metrics(task, model, split, batch_size, sums)


def eval_data(task: Task, split: str, batch_size: int, max_batches: int, device: torch.device):
    """The evaluation batches of ``split`` (the first ``max_batches`` if > 0) on ``device``."""
    for i, batch in enumerate(task.eval_batches(split, batch_size)):
        if max_batches and i >= max_batches:
            break
        yield to_device(batch, device)


def add_metric_sums(sums: dict, task: Task, out, batch: Batch) -> None:
    """Add one batch's ``task.metric_sums`` to the running ``{metric: [sum, count]}``."""
    for k, (s, n) in task.metric_sums(out, batch).items():
        acc = sums.setdefault(k, [0.0, 0.0])
        acc[0] += s
        acc[1] += n


def split_metrics(task: Task, model: nn.Module, split: str, batch_size: int, sums: dict) -> dict:
    """The metrics of a split from its summed ``{metric: [sum, count]}``: the means, the task's
    derived metrics and those that need the model, keyed ``"<split>/<metric>"``."""
    means = task.finalize({k: s / n for k, (s, n) in sums.items() if n > 0})
    means.update(task.model_metrics(model, split, batch_size))  # those that need the model (BLEU)
    return {f"{split}/{k}": float(v) for k, v in means.items()}
