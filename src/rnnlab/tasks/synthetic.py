"""Generated long-memory tasks: copy memory and adding (no data files)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import ClassVar

import torch

from .base import Batch, Task

_EVAL_SEEDS = {"val": 1, "test": 2}


class _GeneratedTask(Task):
    """A task whose batches come from ``make(batch_size, generator)``; the validation and
    test sets are fixed by ``seed`` (independent of the training data seed).

    ``EVAL_SEED_OFFSET``: the evaluation generators are seeded ``1_000_003 * seed + 1`` (val)
    and ``+ 2`` (test), plus this offset. At 0 (the older tasks, whose recorded sets stay as
    they were) those seeds are small integers that a training stream shares: the trainer seeds
    its stream with ``data_seed`` (``train.seed + 1``), so at ``seed = 0`` the first training
    batch of ``train.seed = 0`` is the first rows of the validation set, and that of
    ``train.seed = 1`` the first rows of the test set. The newer tasks add 0x9E3779B9
    (2,654,435,769; torch's CPU generator keeps a seed's low 32 bits, so a larger offset would
    not help): their evaluation seeds lie above 2.6e9 for task seeds below 1,600, where no
    ``data_seed`` of an ordinary run reaches.
    """

    EVAL_SEED_OFFSET: ClassVar[int] = 0

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
            g = torch.Generator().manual_seed(self.EVAL_SEED_OFFSET + 1_000_003 * self.seed + _EVAL_SEEDS[split])
            self._eval_cache[split] = self.make(self.sizes[split], g)
        return self._eval_cache[split]

    def eval_batches(self, split: str, batch_size: int) -> Iterable[Batch]:
        full = self.eval_set(split)
        for i in range(0, full.size, batch_size):
            part = slice(i, i + batch_size)
            lengths = None if full.lengths is None else full.lengths[part]
            mask = None if full.mask is None else full.mask[part]
            yield Batch(full.x[part], full.y[part], lengths, mask)


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
        self,
        K: int = 10,
        L: int = 1000,
        alphabet: int = 8,
        encoding: str = "exprnn",
        val_size: int = 512,
        test_size: int = 1024,
        seed: int = 0,
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

    def metric_names(self) -> tuple[str, ...]:
        return (*super().metric_names(), "recall_accuracy")

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


class VariableCopyTask(CopyTask):
    """Variable-length copy (Henaff, Szlam & LeCun 2016, their Fig. 5): copy memory whose
    marker comes after a random number of blanks.

    Tokens as in :class:`CopyTask` (0 blank, 1..alphabet symbols, alphabet+1 the marker);
    every sequence has length T = L + 2K: K symbols, ``l`` blanks with l ~ U{L_min..L} drawn
    per sequence, the marker at position m = K + l, then blanks. The targets are blanks except
    the K positions m..m+K-1, which hold the K symbols in order (the first at the marker step,
    as in the fixed task's "exprnn" encoding; l = L is exactly that task). Cross-entropy over
    all T positions; ``recall_accuracy`` over each sequence's own K recall positions.

    Baseline: the best memoryless predictor, one that sees the current input x_t and the step
    t but nothing earlier. On a symbol input (t < K) it says blank (loss 0), on the marker a
    uniform guess (ln a); on a blank at t >= K it cannot tell whether a recall is running, so
    with q_t = P(m in [t-K+1, t-1] | x_t blank) it puts 1 - q_t on blank and q_t / a on each
    symbol, scoring H(q_t) + q_t ln a (H the binary entropy). :meth:`baseline` sums this
    exactly over t and the law of m. (A model that remembers when the marker came but none
    of the symbols scores the fixed task's K ln(a) / (L + 2K).)
    """

    name = "copy_variable"

    def __init__(
        self,
        K: int = 10,
        L: int = 100,
        alphabet: int = 8,
        L_min: int = 1,
        val_size: int = 512,
        test_size: int = 1024,
        seed: int = 0,
    ):
        super().__init__(K, L, alphabet, "exprnn", val_size, test_size, seed)
        if not 1 <= int(L_min) <= self.L:
            raise ValueError(f"copy_variable needs 1 <= L_min <= L={self.L}, got L_min={L_min}")
        self.L_min = int(L_min)

    def make(self, batch_size: int, generator: torch.Generator) -> Batch:
        K, T = self.K, self.T
        sym = torch.randint(1, self.alphabet + 1, (batch_size, K), generator=generator)
        marker = K + torch.randint(self.L_min, self.L + 1, (batch_size,), generator=generator)
        rows = torch.arange(batch_size)
        x = torch.zeros(batch_size, T, dtype=torch.long)
        x[:, :K] = sym
        x[rows, marker] = self.alphabet + 1
        y = torch.zeros(batch_size, T, dtype=torch.long)
        y[rows.unsqueeze(1), marker.unsqueeze(1) + torch.arange(K)] = sym
        return Batch(x, y)

    def recall_mask(self, batch: Batch) -> torch.Tensor:
        """(B, T) True at each sequence's K recall positions."""
        marker = (batch.x == self.alphabet + 1).int().argmax(1, keepdim=True)
        t = torch.arange(self.T, device=batch.x.device)
        return (t >= marker) & (t < marker + self.K)

    def metric_sums(self, out, batch):
        sums = Task.metric_sums(self, out, batch)
        mask = self.recall_mask(batch).to(out.device)
        hit = (out.argmax(-1) == batch.y.to(out.device)) & mask
        sums["recall_accuracy"] = (hit.sum().item(), float(mask.sum().item()))
        return sums

    def baseline(self) -> dict[str, float]:
        K, T, a = self.K, self.T, self.alphabet
        starts = range(K + self.L_min, K + self.L + 1)
        p = 1.0 / len(starts)  # P(m = s) for each possible marker position s
        loss = correct = recall_hits = 0.0
        correct += K  # symbol inputs: blank targets, known
        for t in range(K, T):
            pm = p if K + self.L_min <= t <= K + self.L else 0.0
            running = sum(p for s in starts if t - K + 1 <= s <= t - 1)
            q = running / (1.0 - pm) if pm < 1.0 else 0.0
            h = -sum(v * math.log(v) for v in (q, 1.0 - q) if v > 0)
            loss += pm * math.log(a) + (1.0 - pm) * (h + q * math.log(a))
            says_symbol = q / a > 1.0 - q
            correct += pm / a + (1.0 - pm) * (q / a if says_symbol else 1.0 - q)
            recall_hits += pm / a + (1.0 - pm) * q * (1.0 / a if says_symbol else 0.0)
        return {"loss": loss / T, "accuracy": correct / T, "recall_accuracy": recall_hits / K}

    def describe(self) -> str:
        return (
            f"copy_variable: K={self.K}, L in [{self.L_min}, {self.L}] blanks before the marker, "
            f"alphabet={self.alphabet}, T={self.T}"
        )


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
