"""The task contract: a task is data plus its loss, metrics and trivial baseline.

A task never sees a model: the trainer feeds ``batch.x`` to a model and hands the output back
to ``task.loss`` / ``task.metric_sums``. Batches are batch-first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

SPLITS = ("train", "val", "test")


@dataclass
class Batch:
    """One batch. ``x`` is (B, T, I) float features or (B, T) long token ids.

    ``y``: (B, T) class ids / (B, T, O) targets for ``readout="all"``; (B,) or (B, O) for
    ``readout="last"``. ``lengths`` (B,) marks variable-length sequences; ``mask`` (B, T) bool
    says which output positions count in the loss (default: all valid positions).
    ``carry_state``: truncated BPTT, continue from the previous batch's (detached) final state.
    ``extra`` holds task-specific tensors (e.g. decoder inputs for translation).
    """

    x: Tensor
    y: Tensor
    lengths: Tensor | None = None
    mask: Tensor | None = None
    carry_state: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.x.shape[0]

    def to(self, device) -> Batch:
        mv = lambda t: t.to(device) if isinstance(t, Tensor) else t  # noqa: E731
        return Batch(
            mv(self.x),
            mv(self.y),
            self.lengths,
            mv(self.mask),
            self.carry_state,
            {k: mv(v) for k, v in self.extra.items()},
        )


class Draws(tuple):
    """The random draws of one training batch, as a task's :meth:`Task.train_draws` yields
    them; its :meth:`Task.assemble` builds the batches."""


def train_stream(task, batch_size: int, generator: torch.Generator) -> Iterator:
    """The training stream the trainer reads (items for ``task.assemble``): the task's
    :meth:`Task.train_draws`, unless ``task`` hands the draws of another task on (a wrapper that
    delegates attributes to the task it wraps and yields batches of its own): then its
    ``train_batches``."""
    draws = getattr(task, "train_draws", None)
    if draws is None or getattr(draws, "__self__", None) is not task:
        return task.train_batches(batch_size, generator)
    return draws(batch_size, generator)


def max_steps(task, split: str, batch_size: int) -> int:
    """``task.max_steps(split, batch_size)`` (:meth:`Task.max_steps`), also of a task object of
    one's own that does not derive from :class:`Task` (then the default rule: the first batch's T)."""
    own = getattr(task, "max_steps", None)
    return own(split, batch_size) if own is not None else Task.max_steps(task, split, batch_size)


class Task:
    """Base class and contract of a task: what the trainer uses of one. Subclasses set the
    class/instance attributes below and implement ``train_batches`` and ``eval_batches``;
    ``loss``/``metric_sums``/``metric_names`` have defaults for ``loss_kind`` in {"ce", "mse",
    "bce"}; ``finalize``, ``model_metrics`` and ``baseline`` add nothing unless overridden.

    Attributes
    ----------
    name: registry key.  num_tokens: vocabulary size when ``x`` holds token ids, else None.
    input_size: features per step (for tokens: ``num_tokens``, the one-hot size).
    output_size: classes or regression outputs.  readout: ``"last"`` or ``"all"``.
    primary_metric / higher_is_better: what selects the best checkpoint on validation.
    model_kind: ``"sequence"`` (encoder -> layer -> readout) or ``"seq2seq"`` (encoder-decoder).
    """

    name: ClassVar[str] = ""
    readout: str = "last"
    loss_kind: str = "ce"
    primary_metric: str = "loss"
    higher_is_better: bool = False
    num_tokens: int | None = None
    input_size: int = 0
    output_size: int = 0
    model_kind: str = "sequence"

    # --- data ----------------------------------------------------------------------------
    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """An endless iterator of training batches drawn with ``generator``."""
        raise NotImplementedError

    def eval_batches(self, split: str, batch_size: int) -> Iterable[Batch]:
        """The fixed, finite evaluation data of ``split`` ("val" or "test")."""
        raise NotImplementedError

    def train_draws(self, batch_size: int, generator: torch.Generator) -> Iterator:
        """The training stream as the trainer reads it (:func:`train_stream`): :meth:`assemble`
        of its items are the batches of :meth:`train_batches` (by default its items are those
        batches). A task whose batches are random draws and a fixed computation on them yields
        the draws (:class:`Draws`), so that an ensemble (one stream per member) computes the
        rest once for all members."""
        return self.train_batches(batch_size, generator)

    def assemble(self, draws: list) -> list[Batch]:
        """The batches of ``draws`` (one item of :meth:`train_draws` per member, the same batch
        size): each exactly the batch :meth:`train_batches` gives at that point of its stream.
        Items that are batches already are passed on."""
        return list(draws)

    def max_steps(self, split: str = "train", batch_size: int = 1) -> int:
        """The most time steps (T) a batch of ``split`` of ``batch_size`` sequences can hold: what a
        memory estimate sizes activations by (:func:`rnnlab.ensemble.member_bytes`). By default the T
        of the split's first batch (training: drawn with a fixed generator), which is every batch's
        where all share one T; a task whose batches are padded to their longest sequence gives
        its bound instead (ListOps, music)."""
        if split == "train":
            first = next(iter(self.train_batches(batch_size, torch.Generator().manual_seed(0))), None)
        else:
            first = next(iter(self.eval_batches(split, batch_size)), None)
        return first.x.shape[1] if first is not None and first.x.dim() > 1 else 1

    def check_split(self, split: str) -> None:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")

    # --- loss and metrics ----------------------------------------------------------------
    def _positions(self, out: Tensor, batch: Batch):
        """Flatten (B, T, ...) outputs/targets to the counted positions."""
        y = batch.y
        if self.readout == "last":
            return out, y
        mask = batch.mask
        if mask is None and batch.lengths is not None:
            T = out.shape[1]
            mask = torch.arange(T, device=out.device)[None, :] < batch.lengths.to(out.device)[:, None]
        if mask is None:
            return out.reshape(-1, out.shape[-1]), y.reshape(-1, *y.shape[2:])
        return out[mask], y[mask]

    def loss(self, out: Tensor, batch: Batch) -> Tensor:
        o, y = self._positions(out, batch)
        if self.loss_kind == "ce":
            return F.cross_entropy(o, y)
        if self.loss_kind == "mse":
            return F.mse_loss(o.reshape(y.shape), y)
        if self.loss_kind == "bce":
            return F.binary_cross_entropy_with_logits(o, y)
        raise ValueError(f"unknown loss_kind {self.loss_kind!r}")

    def member_losses(self, out: Tensor, batches: list[Batch]) -> Tensor:
        """Each member's :meth:`loss` as one (E,) tensor: ``out`` (E, B, ...) holds E models'
        outputs, ``batches[k]`` member k's batch. Where the task's loss is this class's and no
        position is masked out (readout ``"last"``, or ``"all"`` without masks and lengths) it is
        one computation for all members (an ensemble's 51 losses and their backward were 51
        small computations each), equal to each member's own to rounding; otherwise member by
        member."""
        kind = self.loss_kind
        cls = type(self)
        fused = (
            cls.loss is Task.loss
            and cls._positions is Task._positions
            and kind in ("ce", "mse", "bce")
            and all(b.mask is None and (self.readout == "last" or b.lengths is None) for b in batches)
        )
        y = torch.stack([b.y for b in batches]) if fused else None
        if fused and kind == "ce" and y.dtype == torch.long and out.shape[:-1] == y.shape:
            E, C = out.shape[0], out.shape[-1]
            each = F.cross_entropy(out.reshape(-1, C), y.reshape(-1), reduction="none").view(E, -1)
            counted = (y.reshape(E, -1) != -100).sum(1)  # F.cross_entropy's ignore_index: not counted
            return each.sum(1) / counted
        if fused and kind == "mse" and out.numel() == y.numel():
            return F.mse_loss(out.reshape(y.shape), y, reduction="none").reshape(y.shape[0], -1).mean(1)
        if fused and kind == "bce" and out.shape == y.shape:
            each = F.binary_cross_entropy_with_logits(out, y, reduction="none")
            return each.reshape(y.shape[0], -1).mean(1)
        return torch.stack([self.loss(o, b) for o, b in zip(out.unbind(0), batches)])

    def metric_sums(self, out: Tensor, batch: Batch) -> dict[str, tuple[float, float]]:
        """Per-batch ``{metric: (sum, count)}``; the trainer adds them up over a split and
        divides, then calls :meth:`finalize`."""
        o, y = self._positions(out, batch)
        n = float(y.shape[0])
        if self.loss_kind == "ce":
            return {
                "loss": (F.cross_entropy(o, y, reduction="sum").item(), n),
                "accuracy": ((o.argmax(-1) == y).sum().item(), n),
            }
        if self.loss_kind == "mse":
            err = (o.reshape(y.shape) - y) ** 2
            return {"loss": (err.sum().item(), float(err.numel()))}
        return {"loss": (F.binary_cross_entropy_with_logits(o, y, reduction="sum").item(), float(y.numel()))}

    def finalize(self, means: dict[str, float]) -> dict[str, float]:
        """Derived metrics from the averaged ones (e.g. bpc = loss / ln 2)."""
        return means

    def model_metrics(self, model, split: str, batch_size: int = 256) -> dict[str, float]:
        """Metrics that need the model itself, not only its outputs (translation's BLEU of
        greedy decodes); none by default."""
        return {}

    def metric_names(self) -> tuple[str, ...]:
        """The metrics an evaluation reports, without the ``"<split>/"`` prefix: what
        ``train.select_metric`` and ``train.target_metric`` may name (as ``"val/<metric>"``).
        A task that reports more extends it (a test checks it against a real evaluation)."""
        return ("loss", "accuracy") if self.loss_kind == "ce" else ("loss",)

    def baseline(self) -> dict[str, float]:
        """What a memoryless / trivial predictor scores, keyed like the metrics."""
        return {}

    def describe(self) -> str:
        return f"{self.name}: input {self.input_size}, output {self.output_size}, readout {self.readout}"

    #: attributes a model is rebuilt from (``TaskInfo``); subclasses may add vocabularies
    METADATA = (
        "name",
        "readout",
        "loss_kind",
        "primary_metric",
        "higher_is_better",
        "num_tokens",
        "input_size",
        "output_size",
    )

    def metadata(self) -> dict:
        """JSON-able description of the task that rebuilding and running a trained model needs
        without the dataset: sizes, readout, loss and, for token data, the vocabularies (the
        trainer writes it to ``task.json``; :class:`TaskInfo` reads it back)."""
        meta = {k: getattr(self, k) for k in self.METADATA}
        meta["model_kind"] = self.model_kind
        meta["baseline"] = self.baseline()
        return meta


class TaskInfo(Task):
    """A task rebuilt from :meth:`Task.metadata` alone: the sizes and vocabularies a model needs
    for inference, and the loss and metrics, but no data (``train_batches`` / ``eval_batches``
    raise). ``rnnlab.load_run`` returns one when the dataset is absent."""

    def __init__(self, meta: dict):
        self.meta = dict(meta)
        for k, v in meta.items():
            if k not in ("baseline",):
                setattr(self, k, v)

    def train_batches(self, batch_size, generator):
        raise RuntimeError(
            f"task {self.name!r} was rebuilt from task.json (no dataset): it has no "
            f"batches; load the run with its data (rnnlab.load_run(..., data=True))"
        )

    eval_batches = train_batches  # type: ignore[assignment]

    def baseline(self) -> dict[str, float]:
        return dict(self.meta.get("baseline", {}))

    def metadata(self) -> dict:
        return dict(self.meta)


LN2 = math.log(2.0)
