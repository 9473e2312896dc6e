"""The recall tasks the field now measures long-memory models on: selective copying (Gu and Dao
2023), multi-query associative recall (Arora et al. 2023) and induction heads (Olsson et al.
2022; Fu et al. 2023). Generated (no data files), token inputs, seeded by the trainer's generator.

Every task here answers at chosen positions only: ``readout="all"`` with a ``mask`` (selective
copy, MQAR) or ``readout="last"`` (induction). Each one's :meth:`baseline` is the best
*memoryless* predictor, one that sees the current token x_t and the step t but nothing earlier;
the tests check it against such a predictor counted from data. Documentation: docs/tasks.md.
"""

from __future__ import annotations

import math

import torch

from .base import Batch
from .synthetic import _GeneratedTask


def _positive(task: str, **values: int) -> None:
    for key, v in values.items():
        if int(v) != v or int(v) < 1:
            raise ValueError(f"{task} needs {key} to be a positive integer, got {key}={v!r}")


class _MaskedRecall(_GeneratedTask):
    """Cross-entropy and accuracy over the masked (answer) positions only (``Task._positions``
    keeps the positions of ``batch.mask``)."""

    readout = "all"
    loss_kind = "ce"
    EVAL_SEED_OFFSET = 0x9E3779B9  # evaluation sets no training stream can draw (see _GeneratedTask)


class SelectiveCopyTask(_MaskedRecall):
    """Selective copying (Gu and Dao 2023, "Mamba", Sec. 3.1 and App. E.1): K data tokens at
    random positions among L noise tokens, then K markers; at the markers the model outputs the
    data tokens in their order.

    Tokens: 0 noise, 1..alphabet data symbols, alphabet+1 the marker. A sequence has length
    T = L + 2K: the first L + K positions hold the K data symbols (drawn uniformly, with
    repetition) at K distinct positions drawn uniformly and sorted, noise elsewhere; the last K
    positions are markers. Targets (class k = token k; class 0, noise, is never a target) count
    at the K marker positions only (``batch.mask``). This is the layout of the S4 repository's
    generator with ``variable=True`` (state-spaces/s4 src/dataloaders/datasets/copying.py
    ``torch_copying_data``@d27bdf99); the Mamba paper's setting reads as L = 4096, K = 16 and a
    vocabulary of 16 with noise and marker (alphabet = 14).

    Baseline: a memoryless predictor sees a marker at every answer position and cannot know
    the symbol: ``ln(alphabet)``, accuracy ``1 / alphabet``.
    """

    name = "selective_copy"

    def __init__(
        self,
        K: int = 16,
        L: int = 4096,
        alphabet: int = 14,
        val_size: int = 512,
        test_size: int = 1024,
        seed: int = 0,
    ):
        super().__init__(val_size, test_size, seed)
        _positive("selective_copy", K=K, L=L)
        if int(alphabet) != alphabet or alphabet < 2:
            raise ValueError(f"selective_copy needs alphabet >= 2 data symbols, got alphabet={alphabet!r}")
        self.K, self.L, self.alphabet = int(K), int(L), int(alphabet)
        self.marker = self.alphabet + 1
        self.num_tokens = self.input_size = self.alphabet + 2
        self.output_size = self.alphabet + 1
        self.T = self.L + 2 * self.K

    def make(self, batch_size: int, generator: torch.Generator) -> Batch:
        K, L, T = self.K, self.L, self.T
        sym = torch.randint(1, self.alphabet + 1, (batch_size, K), generator=generator)
        # K distinct positions among the first L + K, uniformly: the K smallest of random keys
        keys = torch.rand(batch_size, L + K, generator=generator)
        pos = keys.topk(K, dim=1, largest=False).indices.sort(dim=1).values
        x = torch.zeros(batch_size, T, dtype=torch.long)
        x.scatter_(1, pos, sym)
        x[:, L + K :] = self.marker
        y = torch.zeros(batch_size, T, dtype=torch.long)
        y[:, L + K :] = sym
        mask = torch.zeros(batch_size, T, dtype=torch.bool)
        mask[:, L + K :] = True
        return Batch(x, y, mask=mask)

    def baseline(self) -> dict[str, float]:
        return {"loss": math.log(self.alphabet), "accuracy": 1.0 / self.alphabet}

    def describe(self) -> str:
        return f"selective_copy: K={self.K} data tokens among L={self.L} noise, alphabet={self.alphabet}, T={self.T}"


class MQARTask(_MaskedRecall):
    """Multi-query associative recall (Arora et al. 2023, "Zoology").

    Tokens 0..vocab-1: keys are drawn from 1..vocab//2 - 1, values from vocab//2..vocab-1, both
    without repetition within a sequence. A sequence of length T starts with the n =
    ``num_kv_pairs`` pairs k_1 v_1 ... k_n v_n; each key is then queried once, at position
    2n + 2g for gaps g drawn without replacement from 0..(T - 2n)//2 - 1 with P(g) proportional
    to (g + 1)^(power_a - 1) (``power_a = 1``: uniform; small ``power_a``: queries soon after
    the pairs, as in text). At a query the target is the key's value (the answer counts there
    only, ``batch.mask``); every other position holds 0, or with ``random_non_queries`` a token
    drawn uniformly from the whole vocabulary. As the authors' generator
    (HazyResearch/zoology zoology/data/associative_recall.py ``_mqar``@0123f0d0), whose defaults
    these are except the vocabulary (theirs 8,192).

    Baseline: a memoryless predictor sees the queried key but not its pair: the value is
    uniform over the vocab - vocab//2 value tokens, ``ln(vocab - vocab//2)``.
    """

    name = "mqar"

    def __init__(
        self,
        num_kv_pairs: int = 8,
        T: int = 64,
        vocab: int = 8192,
        power_a: float = 0.01,
        random_non_queries: bool = True,
        val_size: int = 512,
        test_size: int = 1024,
        seed: int = 0,
    ):
        super().__init__(val_size, test_size, seed)
        _positive("mqar", num_kv_pairs=num_kv_pairs, T=T, vocab=vocab)
        n, T, vocab = int(num_kv_pairs), int(T), int(vocab)
        if T < 4 * n:
            raise ValueError(
                f"mqar needs T >= 4 * num_kv_pairs (2n tokens of pairs, then n queries at distinct even "
                f"gaps), got T={T}, num_kv_pairs={n}; raise T or lower num_kv_pairs"
            )
        if vocab // 2 - 1 < n:
            raise ValueError(
                f"mqar draws n distinct keys from 1..vocab//2 - 1: vocab={vocab} has {vocab // 2 - 1} keys "
                f"for num_kv_pairs={n}; use vocab >= {2 * n + 2}"
            )
        if not float(power_a) > 0:
            raise ValueError(f"mqar needs power_a > 0 (1 is uniform gaps), got power_a={power_a!r}")
        self.n, self.T, self.vocab, self.power_a = n, T, vocab, float(power_a)
        self.random_non_queries = bool(random_non_queries)
        self.num_tokens = self.input_size = self.output_size = vocab
        space = (T - 2 * n) // 2
        g = torch.arange(1, space + 1, dtype=torch.float64)
        self.gap_p = g ** (self.power_a - 1)

    def make(self, batch_size: int, generator: torch.Generator) -> Batch:
        n, T, half = self.n, self.T, self.vocab // 2
        B = batch_size
        keys = 1 + torch.rand(B, half - 1, generator=generator).argsort(1)[:, :n]
        values = half + torch.rand(B, self.vocab - half, generator=generator).argsort(1)[:, :n]
        gaps = torch.multinomial(self.gap_p.expand(B, -1), n, replacement=False, generator=generator)
        qpos = 2 * n + 2 * gaps
        if self.random_non_queries:
            x = torch.randint(0, self.vocab, (B, T), generator=generator)
        else:
            x = torch.zeros(B, T, dtype=torch.long)
        x[:, 0 : 2 * n : 2] = keys
        x[:, 1 : 2 * n : 2] = values
        x.scatter_(1, qpos, keys)
        y = torch.zeros(B, T, dtype=torch.long)
        y.scatter_(1, qpos, values)
        mask = torch.zeros(B, T, dtype=torch.bool)
        mask.scatter_(1, qpos, True)
        return Batch(x, y, mask=mask)

    def baseline(self) -> dict[str, float]:
        m = self.vocab - self.vocab // 2
        return {"loss": math.log(m), "accuracy": 1.0 / m}

    def describe(self) -> str:
        return (
            f"mqar: {self.n} key-value pairs, T={self.T}, vocab={self.vocab}, power_a={self.power_a}, "
            f"random_non_queries={self.random_non_queries}"
        )


class InductionTask(_GeneratedTask):
    """Induction heads (Olsson et al. 2022; the synthetic of Fu et al. 2023, "H3", and Gu and
    Dao 2023, "Mamba", Sec. 4.1.2): after a trigger token, recall the token that followed the
    trigger's first occurrence.

    Tokens: 0..alphabet-1 symbols, alphabet the trigger. A sequence of length T holds uniform
    random symbols, the trigger once at a position p drawn uniformly from 0..T-3, and the
    trigger again at the last step T-1; the target, read at the last step, is the symbol at
    p + 1 (class k = symbol k). Mamba's setting: alphabet 16, T = 256.

    Baseline: a memoryless predictor sees the trigger at the last step; the answer is a uniform
    symbol: ``ln(alphabet)``, accuracy ``1 / alphabet``.
    """

    name = "induction"
    readout = "last"
    loss_kind = "ce"
    EVAL_SEED_OFFSET = 0x9E3779B9

    def __init__(self, T: int = 256, alphabet: int = 16, val_size: int = 512, test_size: int = 1024, seed: int = 0):
        super().__init__(val_size, test_size, seed)
        _positive("induction", T=T)
        if T < 3:
            raise ValueError(f"induction needs T >= 3 (trigger, answer, trigger), got T={T}")
        if int(alphabet) != alphabet or alphabet < 2:
            raise ValueError(f"induction needs alphabet >= 2 symbols, got alphabet={alphabet!r}")
        self.T, self.alphabet = int(T), int(alphabet)
        self.trigger = self.alphabet
        self.num_tokens = self.input_size = self.alphabet + 1
        self.output_size = self.alphabet

    def make(self, batch_size: int, generator: torch.Generator) -> Batch:
        T = self.T
        x = torch.randint(0, self.alphabet, (batch_size, T), generator=generator)
        p = torch.randint(0, T - 2, (batch_size,), generator=generator)
        rows = torch.arange(batch_size)
        x[rows, p] = self.trigger
        x[:, T - 1] = self.trigger
        return Batch(x, x[rows, p + 1].clone())

    def baseline(self) -> dict[str, float]:
        return {"loss": math.log(self.alphabet), "accuracy": 1.0 / self.alphabet}

    def describe(self) -> str:
        return f"induction: T={self.T}, alphabet={self.alphabet}"
