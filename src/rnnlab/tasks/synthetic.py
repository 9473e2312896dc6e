"""Generated long-memory tasks: copy memory and adding (no data files)."""

from __future__ import annotations

import math
from typing import Iterable, Iterator

import torch

from .base import Batch, Task

_EVAL_SEEDS = {"val": 1, "test": 2}


class _GeneratedTask(Task):
    """A task whose batches come from ``make(batch_size, generator)``; the validation and
    test sets are fixed by ``seed`` (independent of the training data seed)."""

    def __init__(self, val_size: int, test_size: int, seed: int):
        for key, v in (("val_size", val_size), ("test_size", test_size)):
            if int(v) < 1:
                raise ValueError(f"{key} must be a positive integer, got {v}")
        self.sizes = {"val": int(val_size), "test": int(test_size)}
        self.seed = int(seed)
        self._eval_cache: dict[str, Batch] = {}

    def make(self, batch_size: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        while True:
            yield self.make(batch_size, generator)

    def eval_set(self, split: str) -> Batch:
        self.check_split(split)
        if split == "train":
            raise ValueError("generated tasks draw training data fresh; evaluate on 'val' or 'test'")
        if split not in self._eval_cache:
            g = torch.Generator().manual_seed(1_000_003 * self.seed + _EVAL_SEEDS[split])
            self._eval_cache[split] = self.make(self.sizes[split], g)
        return self._eval_cache[split]

    def eval_batches(self, split: str, batch_size: int) -> Iterable[Batch]:
        full = self.eval_set(split)
        for i in range(0, full.size, batch_size):
            part = slice(i, i + batch_size)
            lengths = None if full.lengths is None else full.lengths[part]
            yield Batch(full.x[part], full.y[part], lengths)


class CopyTask(_GeneratedTask):
    """Copy memory (Hochreiter & Schmidhuber 1997, as in the asRNN/expRNN/nnRNN papers).

    Tokens: 0 blank, 1..alphabet symbols, alphabet+1 the marker. Sequences have length
    L + 2K. ``encoding="exprnn"`` (asRNN/expRNN): K symbols, L blanks, marker, K-1 blanks;
    ``encoding="nnrnn"``: K symbols, L-1 blanks, marker, K blanks. In both, the targets are
    L + K blanks followed by the K symbols, and the loss is cross-entropy over all L + 2K
    positions. A memoryless predictor that outputs blanks and then a uniform guess scores
    ``K ln(alphabet) / (L + 2K)`` (0.0204 for K=10, L=1000).

    Metrics: ``loss``, ``accuracy`` (all positions, inflated by the blanks) and
    ``recall_accuracy`` (the K recall positions only).
    """

    name = "copy"
    readout = "all"
    loss_kind = "ce"

    def __init__(
        self, K: int = 10, L: int = 1000, alphabet: int = 8, encoding: str = "exprnn",
        val_size: int = 512, test_size: int = 1024, seed: int = 0,
    ):
        super().__init__(val_size, test_size, seed)
        if K < 1 or L < 1 or alphabet < 2:
            raise ValueError(f"copy needs K >= 1, L >= 1, alphabet >= 2; got K={K}, L={L}, alphabet={alphabet}")
        if encoding not in ("exprnn", "nnrnn"):
            raise ValueError(f"copy encoding must be 'exprnn' or 'nnrnn', got {encoding!r}")
        self.K, self.L, self.alphabet, self.encoding = int(K), int(L), int(alphabet), encoding
        self.num_tokens = self.input_size = alphabet + 2
        self.output_size = alphabet + 1
        self.T = self.L + 2 * self.K

    def make(self, batch_size: int, generator: torch.Generator) -> Batch:
        K, L, T = self.K, self.L, self.T
        sym = torch.randint(1, self.alphabet + 1, (batch_size, K), generator=generator)
        x = torch.zeros(batch_size, T, dtype=torch.long)
        x[:, :K] = sym
        marker = K + L if self.encoding == "exprnn" else K + L - 1
        x[:, marker] = self.alphabet + 1
        y = torch.zeros(batch_size, T, dtype=torch.long)
        y[:, L + K :] = sym
        return Batch(x, y)

    def metric_sums(self, out, batch):
        sums = super().metric_sums(out, batch)
        recall = out[:, self.L + self.K :].argmax(-1) == batch.y[:, self.L + self.K :]
        sums["recall_accuracy"] = (recall.sum().item(), float(recall.numel()))
        return sums

    def baseline(self) -> dict[str, float]:
        K, L, a = self.K, self.L, self.alphabet
        return {
            "loss": K * math.log(a) / (L + 2 * K),
            "accuracy": (L + K + K / a) / (L + 2 * K),
            "recall_accuracy": 1.0 / a,
        }

    def describe(self) -> str:
        return f"copy: K={self.K}, L={self.L}, alphabet={self.alphabet}, T={self.T}, encoding={self.encoding}"


class AddingTask(_GeneratedTask):
    """Adding problem (Le et al. 2015; Arjovsky et al. 2016; nnRNN): two input features per
    step, a value ~ U(0, 1) and a marker; one marker falls in each half of the sequence; the
    target is the sum of the two marked values; MSE at the last step. Predicting 1 always
    scores the variance of the sum, 1/6."""

    name = "adding"
    readout = "last"
    loss_kind = "mse"
    input_size = 2
    output_size = 1

    def __init__(self, T: int = 200, val_size: int = 1000, test_size: int = 1000, seed: int = 0):
        super().__init__(val_size, test_size, seed)
        if T < 2:
            raise ValueError(f"adding needs T >= 2, got T={T}")
        self.T = int(T)

    def make(self, batch_size: int, generator: torch.Generator) -> Batch:
        T, half = self.T, self.T // 2
        values = torch.rand(batch_size, T, generator=generator)
        first = torch.randint(0, half, (batch_size,), generator=generator)
        second = torch.randint(half, T, (batch_size,), generator=generator)
        marks = torch.zeros(batch_size, T)
        rows = torch.arange(batch_size)
        marks[rows, first] = 1.0
        marks[rows, second] = 1.0
        y = (values * marks).sum(1, keepdim=True)
        return Batch(torch.stack([values, marks], -1), y)

    def baseline(self) -> dict[str, float]:
        return {"loss": 1.0 / 6.0}

    def describe(self) -> str:
        return f"adding: T={self.T}"
