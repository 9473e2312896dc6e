"""Your own data: a task over arrays you provide, from an ``.npz`` file or from Python.

The arrays (numpy or torch), by split ``train``, ``val`` and optionally ``test``:

* ``x_<split>``: (N, T, I) features (float), (N, T) one feature per step (float), or (N, T)
  token ids (integers: the model one-hot encodes them or embeds them with ``model.embedding``);
* ``y_<split>``: the targets. Integers are class labels (cross-entropy, accuracy), floats are
  regression targets (mean squared error). Without a time axis, one target per sequence read
  out at its last (valid) step: (N,) labels, (N,) or (N, O) floats. With a time axis, one
  target per step: (N, T) labels, (N, T) or (N, T, O) floats (``target="auto"`` takes a 2-D
  float ``y`` whose second size is T as per-step; ``target="sequence"`` / ``"step"`` decide);
* ``lengths_<split>`` (optional): (N,) integers in [1, T]; positions at or past a sequence's
  length are padding (ignored by the layers and the loss; a per-sequence target is read at
  step ``length - 1``).

Every array is checked when the task is built (shape, dtype, finite values, labels in range,
lengths in [1, T], the same I and O in every split, at least one feature per step, labels and
token ids numbered 0, 1, ..., C-1 rather than sparse), and an error names the file, the array and
says what was expected. Object arrays are refused (``np.load(..., allow_pickle=False)``). Before
any array is loaded, every member of the ``.npz`` must be a ``.npy`` array whose header's shape
fits in the bytes the member holds (a damaged or cut-short file is named, not allocated).

Batches: training draws epochs of the training sequences in a fresh order each (from the
trainer's generator), dropping an incomplete last batch; evaluation reads a split in order.
Memoryless baseline (``baseline()``, on the validation split): for classes, the training split's
class frequencies (add-one smoothed) as a fixed prediction (loss) and its majority class
(accuracy); for regression, the training targets' mean as a fixed prediction (MSE).

From a preset: ``[task] name = "arrays"``, ``path = "my.npz"`` (relative to the directory you
run rnnlab in), optional ``target`` and ``sha256`` (the file must then have that SHA-256: a run
is identified by its configuration, which holds the path, not the content). From Python:
:func:`from_arrays`, then ``train(cfg, run_dir, task=task)``; ``task.save(path)`` writes the
``.npz`` a preset reads. Tutorial: docs/own-data.md.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

from .base import SPLITS, Batch, Task
from .data import DataError

TARGETS = ("auto", "sequence", "step")


def _numpy(value, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        a = np.asarray(value)
    except Exception as e:  # ragged lists and the like
        raise ValueError(
            f"{name} cannot be read as an array ({type(e).__name__}: {e}); pass a numpy array "
            f"of one shape (pad variable-length sequences and give lengths_*)"
        ) from None
    if a.dtype.kind not in "biuf":
        raise ValueError(
            f"{name} has dtype {a.dtype}; expected numbers (float features or targets, integer "
            f"token ids, labels or lengths)"
        )
    return a


def _check_members(p: Path) -> None:
    """Every member of the ``.npz`` archive ``p`` is a ``.npy`` array whose header's shape and
    dtype fit in the bytes the member holds: a truncated archive, a member that is not an array,
    or a header that declares more data than is there (e.g. a 364 TiB shape) is a
    :class:`DataError` naming the file and the member, before any array is allocated."""
    fix = "write the file again with numpy.savez(path, x_train=..., y_train=..., x_val=..., y_val=...)"
    try:
        with zipfile.ZipFile(p) as z:
            for info in z.infolist():
                name = info.filename
                if not name.endswith(".npy"):
                    raise DataError(f"{p}: member {name!r} is not a .npy array; {fix}")
                with z.open(info) as f:
                    try:
                        fmt = np.lib.format
                        version = fmt.read_magic(f)
                        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                        shape, _, dtype = read(f)
                    except ValueError as e:
                        raise DataError(f"{p}: member {name!r} is not a readable .npy array ({e}); {fix}") from None
                    header = f.tell()
                need = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if dtype.hasobject:
                    continue  # refused when read (no pickles)
                if header + need > info.file_size:
                    raise DataError(
                        f"{p}: {name[:-4]} declares shape {shape} of {dtype} ({need:,} bytes) but holds "
                        f"{info.file_size - header:,} bytes: the file is damaged or cut short; {fix}"
                    )
    except zipfile.BadZipFile as e:
        raise DataError(f"{p} is a damaged .npz (zip) file ({e}); {fix}") from None
    except (OSError, EOFError) as e:
        raise DataError(f"{p} is not a readable .npz file ({type(e).__name__}: {e}); {fix}") from None


#: ids (labels, token ids) up to this many are taken as given; above it they must be dense
DENSE_IDS = 2**16


def _check_dense_ids(arrays: dict, splits: list, prefix: str, what: str, sizes: str) -> None:
    """Labels or token ids must number 0, 1, ..., C-1: a largest id above :data:`DENSE_IDS` and
    above 4 times the number of distinct ids would size the model for ids that never occur (a
    label of 1e9: a readout of a billion outputs)."""
    top_split = max(splits, key=lambda s: int(arrays[s].max()))
    top = int(arrays[top_split].max())
    if top < DENSE_IDS:
        return
    distinct = int(torch.unique(torch.cat([arrays[s].flatten() for s in splits])).numel())
    if top + 1 > 4 * distinct:
        raise ValueError(
            f"{prefix}_{top_split} holds {what} {top}, but only {distinct} distinct {what}s occur: {top + 1} "
            f"{sizes} for them; number them 0, 1, ..., C-1 over all splits (e.g. with "
            f"numpy.unique(all_ids, return_inverse=True))"
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class ArraysTask(Task):
    """A task over your arrays (see the module docstring). Options (preset ``[task]``):
    ``path`` (an ``.npz`` file), ``target`` ("auto", "sequence", "step"), ``sha256`` (the
    file's expected SHA-256, or None)."""

    name = "arrays"

    def __init__(self, path: str = "", target: str = "auto", sha256: str | None = None):
        if not path:
            raise ValueError(
                'task "arrays" needs path = "FILE.npz" (x_train, y_train, x_val, y_val, optionally '
                "x_test, y_test, lengths_*); from Python use rnnlab.tasks.from_arrays(...)"
            )
        p = Path(path).expanduser()
        if not p.is_file():
            raise DataError(
                f'task "arrays": no such file {str(p)!r} (relative paths start at the directory you '
                f"run in, {Path.cwd()}); write it with numpy.savez or ArraysTask.save"
            )
        digest = _sha256(p)
        if sha256 and digest != sha256.lower():
            raise DataError(
                f"{p} has SHA-256 {digest}, but the task asks for {sha256}: the file changed since the "
                f"preset was written; update task.sha256 (and so the run's identity) or restore the file"
            )
        with open(p, "rb") as f:
            magic = f.read(4)
        if magic != b"PK\x03\x04":  # numpy.savez writes a zip archive
            raise DataError(
                f"{p} is not an .npz file (a zip archive of arrays); write it with numpy.savez(path, "
                f"x_train=..., y_train=..., x_val=..., y_val=...)"
            )
        _check_members(p)  # before anything is loaded: a damaged or foreign archive, sizes from headers
        try:
            with np.load(p, allow_pickle=False) as f:
                arrays = {k: f[k] for k in f.files}
        except ValueError as e:
            raise DataError(
                f"{p}: cannot read it as .npz without pickles ({e}); save plain numeric arrays with numpy.savez"
            ) from None
        except (OSError, EOFError, zipfile.BadZipFile) as e:
            raise DataError(
                f"{p} is not a readable .npz file ({type(e).__name__}: {e}); write it again with numpy.savez"
            ) from None
        self.path, self.sha256 = str(path), digest
        self._setup(arrays, target, where=str(p))

    # --- construction ---------------------------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        x_train,
        y_train,
        x_val,
        y_val,
        x_test=None,
        y_test=None,
        *,
        lengths_train=None,
        lengths_val=None,
        lengths_test=None,
        target: str = "auto",
    ) -> ArraysTask:
        """The task over in-memory arrays (numpy or torch); the same checks as a file's."""
        given = dict(
            x_train=x_train,
            y_train=y_train,
            x_val=x_val,
            y_val=y_val,
            x_test=x_test,
            y_test=y_test,
            lengths_train=lengths_train,
            lengths_val=lengths_val,
            lengths_test=lengths_test,
        )
        task = cls.__new__(cls)
        task.path, task.sha256 = "", None
        task._setup({k: v for k, v in given.items() if v is not None}, target, where="from_arrays")
        return task

    def _setup(self, arrays: dict, target: str, where: str) -> None:
        """Check and keep ``arrays``; every error names ``where`` (the file, or from_arrays)."""
        try:
            self._setup_arrays(arrays, target, where)
        except ValueError as e:
            if isinstance(e, DataError) or str(e).startswith(f"{where}:"):
                raise
            raise ValueError(f"{where}: {e}") from None

    def _setup_arrays(self, arrays: dict, target: str, where: str) -> None:
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
        known = {f"{a}_{s}" for a in ("x", "y", "lengths") for s in SPLITS}
        unknown = sorted(set(arrays) - known)
        if unknown:
            raise ValueError(
                f"{where}: unexpected array(s) {unknown}; the arrays task reads x_/y_/lengths_ of train, val and test"
            )
        for need in ("x_train", "y_train", "x_val", "y_val"):
            if need not in arrays:
                raise ValueError(
                    f"{where}: {need} is missing; the arrays task needs x_train, y_train, x_val and "
                    f"y_val (x_test, y_test and lengths_* are optional)"
                )
        if ("x_test" in arrays) != ("y_test" in arrays):
            have, miss = ("x_test", "y_test") if "x_test" in arrays else ("y_test", "x_test")
            raise ValueError(f"{where}: {have} is given without {miss}; give both or neither")
        self.target = target
        self.splits = [s for s in SPLITS if f"x_{s}" in arrays]
        a = {k: _numpy(v, k) for k, v in arrays.items()}
        tokens = a["x_train"].dtype.kind in "biu"
        classes = a["y_train"].dtype.kind in "biu"
        self.x, self.y, self.lengths = {}, {}, {}
        for s in self.splits:
            self.x[s], self.y[s], self.lengths[s] = self._check_split(a, s, tokens, classes)
        x0, y0 = self.x["train"], self.y["train"]
        if classes:
            self.per_step = y0.dim() == 2
        else:
            self.per_step = y0.dim() == 3 or (
                y0.dim() == 2 and target != "sequence" and (target == "step" or y0.shape[1] == x0.shape[1])
            )
        if target != "auto" and self.per_step != (target == "step"):
            raise ValueError(
                f"target={target!r} but y_train has shape {tuple(y0.shape)}, which holds targets per "
                f"{'step' if self.per_step else 'sequence'}; per sequence: (N,) labels, (N,) or (N, O) "
                f"floats; per step: (N, T) labels, (N, T) or (N, T, O) floats"
            )
        if classes:
            top = max(int(self.y[s].max()) for s in self.splits)
            _check_dense_ids(self.y, self.splits, "y", "label", "classes (the readout's outputs)")
            self.output_size = top + 1
            self.loss_kind, self.primary_metric, self.higher_is_better = "ce", "accuracy", True
        else:
            self.output_size = 1 if y0.dim() == (2 if self.per_step else 1) else int(y0.shape[-1])
            self.loss_kind, self.primary_metric, self.higher_is_better = "mse", "loss", False
        self.readout = "all" if self.per_step else "last"
        if tokens:
            _check_dense_ids(self.x, self.splits, "x", "token id", "tokens (the one-hot input's width)")
            self.num_tokens = self.input_size = max(int(self.x[s].max()) for s in self.splits) + 1
        else:
            self.num_tokens, self.input_size = None, int(x0.shape[-1])
        for s in self.splits:  # the same layout everywhere
            self._check_layout(s, classes)

    def _check_split(self, a: dict, s: str, tokens: bool, classes: bool):
        x, y = a[f"x_{s}"], a[f"y_{s}"]
        if (x.dtype.kind in "biu") != tokens:
            raise ValueError(
                f"x_{s} has dtype {x.dtype} but x_train has {a['x_train'].dtype}: features must be "
                f"floats in every split, or token ids (integers) in every split"
            )
        if (y.dtype.kind in "biu") != classes:
            raise ValueError(
                f"y_{s} has dtype {y.dtype} but y_train has {a['y_train'].dtype}: targets must be "
                f"integer labels in every split, or float targets in every split"
            )
        want_x = "(N, T) token ids" if tokens else "(N, T, I) or (N, T) floats"
        if x.ndim not in ((2,) if tokens else (2, 3)) or x.shape[0] == 0 or x.shape[1] == 0:
            raise ValueError(f"x_{s} has shape {x.shape}; expected {want_x} with N >= 1 sequences of T >= 1 steps")
        if not tokens and x.ndim == 3 and x.shape[2] == 0:
            raise ValueError(
                f"x_{s} has shape {x.shape}: 0 features per step; give each step at least one feature "
                f"((N, T, I) with I >= 1, or (N, T) for one feature per step)"
            )
        N, T = x.shape[:2]
        if y.ndim == 0 or y.shape[0] != N:
            raise ValueError(
                f"y_{s} has shape {y.shape} but x_{s} holds {N} sequences; y_{s} needs one row per "
                f"sequence: (N,) or (N, O) per sequence, (N, T) or (N, T, O) per step"
            )
        if y.ndim > 3 or (classes and y.ndim > 2):
            raise ValueError(
                f"y_{s} has shape {y.shape}; expected (N,) labels or (N, T) labels per step"
                if classes
                else f"y_{s} has shape {y.shape}; expected (N,), (N, O), (N, T) or (N, T, O)"
            )
        if y.ndim >= 2 and (classes or y.ndim == 3) and y.shape[1] != T:
            raise ValueError(f"y_{s} has shape {y.shape}: per-step targets need the time axis of x_{s} (T = {T})")
        for name, v in ((f"x_{s}", x), (f"y_{s}", y)):
            if v.dtype.kind == "f" and not np.isfinite(v).all():
                bad = int((~np.isfinite(v)).sum())
                first = tuple(int(i) for i in np.argwhere(~np.isfinite(v))[0])
                raise ValueError(
                    f"{name} has {bad} NaN or infinite value(s) (the first at index {first}); clean or "
                    f"impute them first (padding past lengths_{s} must be finite too, e.g. 0)"
                )
        if tokens and x.min() < 0:
            raise ValueError(f"x_{s} holds token id {int(x.min())}; token ids must be >= 0")
        if classes and y.min() < 0:
            raise ValueError(f"y_{s} holds label {int(y.min())}; class labels must be 0, 1, ..., C-1")
        lengths = None
        key = f"lengths_{s}"
        if key in a:
            L = a[key]
            if L.dtype.kind not in "iu" or L.shape != (N,):
                raise ValueError(
                    f"{key} has shape {L.shape} and dtype {L.dtype}; expected ({N},) integers, one "
                    f"length per sequence of x_{s}"
                )
            if L.min() < 1 or L.max() > T:
                raise ValueError(
                    f"{key} holds lengths from {int(L.min())} to {int(L.max())}; each must be in [1, T = {T}]"
                )
            lengths = torch.from_numpy(L.astype(np.int64))
        xt = torch.from_numpy(x.astype(np.int64 if tokens else np.float32))
        if not tokens and xt.dim() == 2:
            xt = xt.unsqueeze(-1)
        yt = torch.from_numpy(y.astype(np.int64 if classes else np.float32))
        return xt, yt, lengths

    def _check_layout(self, s: str, classes: bool) -> None:
        x, y = self.x[s], self.y[s]
        if self.num_tokens is None and x.shape[-1] != self.input_size:
            raise ValueError(f"x_{s} has {x.shape[-1]} features per step but x_train has {self.input_size}")
        if self.per_step and y.shape[1] != x.shape[1]:
            raise ValueError(
                f"y_{s} has shape {tuple(y.shape)}: per-step targets need the time axis of x_{s} (T = {x.shape[1]})"
            )
        if not classes:
            per = y.dim() == (3 if self.per_step else 2)
            width = int(y.shape[-1]) if per else 1
            if width != self.output_size or (self.per_step and y.dim() < 2) or (not self.per_step and y.dim() > 2):
                raise ValueError(
                    f"y_{s} has shape {tuple(y.shape)}, which does not match y_train's "
                    f"{tuple(self.y['train'].shape)} (per {'step' if self.per_step else 'sequence'}, "
                    f"{self.output_size} output(s))"
                )
            if self.per_step and y.dim() == 2:
                self.y[s] = y.unsqueeze(-1)  # (N, T) -> (N, T, 1), as the model outputs
            elif not self.per_step and y.dim() == 1:
                self.y[s] = y.unsqueeze(-1)  # (N,) -> (N, 1)
        elif self.per_step != (y.dim() == 2):
            raise ValueError(
                f"y_{s} has shape {tuple(y.shape)} but y_train has {tuple(self.y['train'].shape)}: "
                f"labels per sequence or per step in every split"
            )

    # --- batches --------------------------------------------------------------------------------
    def _batch(self, s: str, idx) -> Batch:
        lengths = self.lengths[s]
        return Batch(self.x[s][idx], self.y[s][idx], None if lengths is None else lengths[idx])

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        n = len(self.x["train"])
        if not 0 < batch_size <= n:
            raise ValueError(f"train.batch_size must be in [1, {n}] (the training sequences), got {batch_size}")
        while True:
            order = torch.randperm(n, generator=generator)
            for i in range(0, n - batch_size + 1, batch_size):
                yield self._batch("train", order[i : i + batch_size])

    def eval_batches(self, split: str, batch_size: int) -> Iterable[Batch]:
        self.check_split(split)
        if split not in self.splits:
            raise ValueError(
                f"the arrays task has no {split} split (no x_{split}/y_{split} in "
                f"{self.path or 'the arrays given'}); add them, or set train.test = false"
            )
        n = len(self.x[split])
        for i in range(0, n, batch_size):
            yield self._batch(split, slice(i, i + batch_size))

    # --- baseline, description ------------------------------------------------------------------
    def _valid(self, s: str) -> torch.Tensor:
        """The targets that count in split ``s`` (per step: the positions before each length)."""
        y, lengths = self.y[s], self.lengths[s]
        if not self.per_step or lengths is None:
            return y.reshape(-1, *y.shape[(2 if self.per_step else 1) :])
        mask = torch.arange(y.shape[1])[None, :] < lengths[:, None]
        return y[mask]

    def baseline(self) -> dict[str, float]:
        """Memoryless predictions scored on the validation split: the training class frequencies
        (add-one smoothed; loss) and majority class (accuracy), or the training targets' mean (MSE)."""
        train, val = self._valid("train"), self._valid("val")
        if self.loss_kind == "ce":
            counts = torch.bincount(train, minlength=self.output_size).double()
            prior = (counts + 1) / (counts.sum() + self.output_size)
            return {
                "loss": float(-prior.log()[val].mean()),
                "accuracy": float((val == int(counts.argmax())).double().mean()),
            }
        mean = train.double().mean(0)
        return {"loss": float(((val.double() - mean) ** 2).mean())}

    def metadata(self) -> dict:
        return {**super().metadata(), "path": self.path, "sha256": self.sha256}

    def save(self, path: str | Path) -> Path:
        """Write the arrays to ``path`` (``.npz``, as numpy names it) for a preset's ``[task] path``;
        reading it back gives the same task."""
        out = {}
        for s in self.splits:
            out[f"x_{s}"], out[f"y_{s}"] = self.x[s].numpy(), self.y[s].numpy()
            if self.lengths[s] is not None:
                out[f"lengths_{s}"] = self.lengths[s].numpy()
        path = Path(path)
        path = path if path.suffix == ".npz" else path.with_name(path.name + ".npz")
        np.savez(path, **out)
        return path

    def describe(self) -> str:
        kind = "classes" if self.loss_kind == "ce" else "regression"
        per = "per step" if self.per_step else "per sequence"
        sizes = ", ".join(f"{s} {len(self.x[s])}" for s in self.splits)
        T = self.x["train"].shape[1]
        what = f"{self.num_tokens} token ids" if self.num_tokens else f"{self.input_size} features"
        return (
            f"arrays{': ' + self.path if self.path else ''}: {sizes} sequences of {T} steps, {what}; "
            f"{kind} {per}, {self.output_size} output(s)"
        )


def from_arrays(
    x_train,
    y_train,
    x_val,
    y_val,
    x_test=None,
    y_test=None,
    *,
    lengths_train=None,
    lengths_val=None,
    lengths_test=None,
    target: str = "auto",
) -> ArraysTask:
    """A task over your arrays (numpy or torch; see :mod:`rnnlab.tasks.arrays` for the shapes).

    >>> import numpy as np, rnnlab
    >>> x = np.random.default_rng(0).normal(size=(40, 12, 3)).astype("float32")
    >>> task = rnnlab.tasks.from_arrays(x[:30], (x[:30, :, 0].sum(1) > 0).astype(int), x[30:],
    ...                                  (x[30:, :, 0].sum(1) > 0).astype(int))
    >>> task.describe()
    'arrays: train 30, val 10 sequences of 12 steps, 3 features; classes per sequence, 2 output(s)'
    """
    return ArraysTask.from_arrays(
        x_train,
        y_train,
        x_val,
        y_val,
        x_test,
        y_test,
        lengths_train=lengths_train,
        lengths_val=lengths_val,
        lengths_test=lengths_test,
        target=target,
    )
