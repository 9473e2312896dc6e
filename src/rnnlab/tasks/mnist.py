"""Pixel-by-pixel MNIST: sequential (sMNIST) and permuted (psMNIST).

Each 28x28 image is read as a sequence of T = 784 pixels in [0, 1], one per step (input size
1), in raster order (sMNIST) or in a fixed random order (psMNIST: ``x_t = pixel[perm[t]]``,
``perm = numpy.random.RandomState(92916).permutation(784)`` by default, the permutation of the
asRNN/expRNN code). The class (10-way cross-entropy) is read out at the last step.

Splits: the last ``val_size`` (default 5000) of the 60000 official training images are held
out for validation and never trained on; training uses the first 55000; test is the official
10000-image test set. Select the checkpoint on ``val/accuracy`` and report ``test/accuracy``
of that checkpoint (the reference scripts selected on the test set).

The images stay in memory as uint8 (47 MB); a batch is gathered and scaled to float on the fly.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

from . import data
from .base import Batch, Task

DEFAULT_PERM_SEED = 92916
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (gzip-compressed when the name ends in ``.gz``) into a numpy array.

    Header: two zero bytes, a type code (0x08 = uint8, ...), the number of dimensions, then
    one big-endian uint32 per dimension; the data follow in C order.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic {raw[:4]!r})")
    code, ndim = raw[2], raw[3]
    if code not in _DTYPES:
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02x}")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    dtype = np.dtype(_DTYPES[code])
    expected = int(np.prod(dims)) * dtype.itemsize
    body = raw[4 + 4 * ndim :]
    if len(body) != expected:
        raise ValueError(f"{path}: header says {dims} ({expected} bytes) but holds {len(body)} bytes")
    return np.frombuffer(body, dtype=dtype).reshape(dims)


def mnist_permutation(seed: int = DEFAULT_PERM_SEED, size: int = 784) -> np.ndarray:
    """The fixed pixel order of psMNIST: ``numpy.random.RandomState(seed).permutation(size)``."""
    return np.random.RandomState(seed).permutation(size)


class SequentialMNIST(Task):
    """sMNIST / psMNIST (Le et al. 2015; asRNN, expRNN, nnRNN papers).

    Options: ``permute`` (default False for ``smnist``, True for ``psmnist``), ``perm_seed`` (92916),
    ``val_size`` (5000: the last images of the official training set), ``data_dir``
    (data root, see :mod:`rnnlab.tasks.data`), ``verify`` (check sha256 of the files; turn off
    only for hand-made fixture files), ``split`` ("last": the last ``val_size`` training images
    are the validation set; "nnrnn": as the nnRNN authors' MNIST script, sMNIST.py:69-87, the
    permutation ``R`` of the 60000 training images that ``RandomState(perm_seed)`` draws after
    the pixel order: training ``R[:60000 - val_size]``, validation the rest), ``shuffle`` (True:
    a fresh random order every epoch; False: every epoch in the split's order, as that script's
    ``DataLoader(shuffle=False)``, sMNIST.py:92-95).

    ``x`` (B, 784, 1) float in [0, 1]; ``y`` (B,) class ids; readout "last".
    """

    name = "smnist"
    readout = "last"
    loss_kind = "ce"
    primary_metric = "accuracy"
    higher_is_better = True
    input_size = 1
    output_size = 10

    def __init__(
        self,
        permute: bool = False,
        perm_seed: int = DEFAULT_PERM_SEED,
        val_size: int = 5000,
        data_dir: str | None = None,
        verify: bool = True,
        split: str = "last",
        shuffle: bool = True,
    ):
        if split not in ("last", "nnrnn"):
            raise ValueError(f"split must be 'last' or 'nnrnn', got {split!r}")
        self.split, self.shuffle = split, bool(shuffle)
        self.permute = bool(permute)
        self.perm_seed = int(perm_seed)
        self.data_dir = data_dir
        arrays = {}
        for split, files in _FILES.items():
            paths = [data.require("mnist", f, data_dir, check_hash=verify) for f in files]
            with data.reading("mnist", files[0], paths[0], data_dir):
                images = read_idx(paths[0])
            with data.reading("mnist", files[1], paths[1], data_dir):
                labels = read_idx(paths[1])
            if images.ndim != 3 or images.shape[1:] != (28, 28) or labels.shape != images.shape[:1]:
                raise ValueError(
                    f"MNIST {split} files hold images {images.shape} and labels {labels.shape}; "
                    f"expected (N, 28, 28) and (N,)"
                )
            arrays[split] = (images.reshape(len(images), 784), labels.astype(np.int64))
        n_train = len(arrays["train"][0])
        if not 0 < int(val_size) < n_train:
            raise ValueError(f"val_size must be in [1, {n_train - 1}], got {val_size}")
        self.val_size = int(val_size)
        self.perm = mnist_permutation(self.perm_seed) if self.permute else None
        order = torch.as_tensor(self.perm) if self.perm is not None else None

        def tensors(images, labels):
            x = torch.from_numpy(np.array(images, copy=True))
            if order is not None:
                x = x[:, order].contiguous()
            return x, torch.from_numpy(labels)

        tx, ty = tensors(*arrays["train"])
        cut = n_train - self.val_size
        if self.split == "nnrnn":
            rng = np.random.RandomState(self.perm_seed)
            if self.permute:
                rng.permutation(784)  # the pixel order is drawn first from the same generator
            R = torch.from_numpy(rng.permutation(n_train))
            tx, ty = tx[R], ty[R]
        self.images = {"train": tx[:cut], "val": tx[cut:], "test": tensors(*arrays["test"])[0]}
        self.labels = {"train": ty[:cut], "val": ty[cut:], "test": tensors(*arrays["test"])[1]}

    @staticmethod
    def _batch(images: torch.Tensor, labels: torch.Tensor) -> Batch:
        return Batch(images.float().div_(255.0).unsqueeze(-1), labels)

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """Epochs of the training images in a fresh random order each (drawn with ``generator``;
        ``shuffle=False``: in the split's order every epoch); the last incomplete batch of an
        epoch is dropped."""
        n = len(self.labels["train"])
        if not 0 < batch_size <= n:
            raise ValueError(f"batch_size must be in [1, {n}], got {batch_size}")
        while True:
            order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
            for i in range(0, n - batch_size + 1, batch_size):
                idx = order[i : i + batch_size]
                yield self._batch(self.images["train"][idx], self.labels["train"][idx])

    def eval_batches(self, split: str, batch_size: int) -> Iterable[Batch]:
        self.check_split(split)
        images, labels = self.images[split], self.labels[split]
        for i in range(0, len(labels), batch_size):
            yield self._batch(images[i : i + batch_size], labels[i : i + batch_size])

    def baseline(self) -> dict[str, float]:
        """The majority class of the training split, scored on the validation split."""
        counts = torch.bincount(self.labels["train"], minlength=10)
        majority = int(counts.argmax())
        return {"accuracy": float((self.labels["val"] == majority).float().mean())}

    def describe(self) -> str:
        order = f"permuted (seed {self.perm_seed})" if self.permute else "raster order"
        sizes = ", ".join(f"{k} {len(v)}" for k, v in self.labels.items())
        return f"{self.name}: 784 pixels one per step, {order}; {sizes}"


class PermutedMNIST(SequentialMNIST):
    """psMNIST: :class:`SequentialMNIST` with ``permute=True`` by default."""

    name = "psmnist"

    def __init__(
        self,
        permute: bool = True,
        perm_seed: int = DEFAULT_PERM_SEED,
        val_size: int = 5000,
        data_dir: str | None = None,
        verify: bool = True,
        split: str = "last",
        shuffle: bool = True,
    ):
        super().__init__(permute, perm_seed, val_size, data_dir, verify, split, shuffle)
