"""ListOps (Nangia and Bowman 2018), generated as the Long Range Arena builds it (Tay et al.
2021): nested MIN / MAX / MED / SM expressions over the digits 0-9, read token by token; the
class is the expression's value (10 classes). No download: every sequence is generated.

The generator, as LRA's (google-research/long-range-arena lra_benchmarks/data/listops.py
``generate_tree``@29833a10, written again here): a node at depth d < ``max_depth`` is an
operator with probability ``value_p`` (else a digit; at ``max_depth`` always a digit); an
operator draws its operation uniformly from MIN, MAX, MED, SM and its argument count uniformly
from 2..``max_args``, each argument a node at depth d + 1. The root is at depth 1. A tree is
kept when its token count (operators, digits and closing brackets) lies strictly between
``min_length`` and ``max_length``, else drawn again. LRA: max_depth 10, max_args 10, value_p
0.25, lengths 500 < n < 2000. MED is the median, the mean of the two middle values rounded
down for an even count (LRA's ``int(np.median)``); SM the sum modulo 10.

Tokens: 0-9 the digits, 10 ``[MIN``, 11 ``[MAX``, 12 ``[MED``, 13 ``[SM``, 14 ``]``; LRA's
parentheses, which repeat the bracket structure, are left out (as the S4 repository's LRA
loader drops them). Sequences are padded (``batch.lengths``) and answered at their last token.
"""

from __future__ import annotations

import math
import random

import torch

from .base import Batch
from .synthetic import _GeneratedTask

DIGITS = 10
MIN, MAX, MED, SM, END = 10, 11, 12, 13, 14
OPERATORS = (MIN, MAX, MED, SM)
TOKEN_NAMES = (*[str(d) for d in range(DIGITS)], "[MIN", "[MAX", "[MED", "[SM", "]")


def apply(op: int, args: list[int]) -> int:
    """The value of operator ``op`` (a token id) on the digit values ``args``."""
    if op == MIN:
        return min(args)
    if op == MAX:
        return max(args)
    if op == SM:
        return sum(args) % 10
    if op == MED:
        s, n = sorted(args), len(args)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2
    raise ValueError(f"unknown ListOps operator token {op}; expected one of {OPERATORS}")


def _tree(rng: random.Random, depth: int, max_depth: int, max_args: int, value_p: float, out: list[int]) -> int:
    """Append one random subtree's tokens to ``out`` and return its value."""
    if depth >= max_depth or rng.random() > value_p:
        v = rng.randrange(DIGITS)
        out.append(v)
        return v
    op = OPERATORS[rng.randrange(len(OPERATORS))]
    out.append(op)
    n = rng.randint(2, max_args)
    args = [_tree(rng, depth + 1, max_depth, max_args, value_p, out) for _ in range(n)]
    out.append(END)
    return apply(op, args)


def longest(max_depth: int, max_args: int) -> int:
    """The most tokens a tree can have: a full tree of ``max_args`` arguments per operator."""
    n = 1
    for _ in range(max_depth - 1):
        n = 2 + max_args * n
    return n


class ListOpsTask(_GeneratedTask):
    """ListOps as in the Long Range Arena (see the module docstring for the generator).

    Baseline: the best prediction that ignores the input, a fixed distribution over the ten
    classes: the cross-entropy of the validation labels' own frequencies (their entropy) and the
    majority class's share as accuracy. The labels are not uniform: MAX favours 9 and MIN 0, and
    at LRA's settings 0 and 9 are each about 17% of the labels (entropy about 2.24 against the
    uniform ln 10 = 2.30); docs/tasks.md gives the measured values.
    """

    name = "listops"
    readout = "last"
    loss_kind = "ce"
    num_tokens = input_size = len(TOKEN_NAMES)
    output_size = DIGITS
    EVAL_SEED_OFFSET = 0x9E3779B9  # evaluation sets no training stream can draw (see _GeneratedTask)

    #: draws allowed per sequence before the settings are declared too rare to meet
    MAX_TRIES = 100_000

    def __init__(
        self,
        min_length: int = 500,
        max_length: int = 2000,
        max_depth: int = 10,
        max_args: int = 10,
        value_p: float = 0.25,
        val_size: int = 2000,
        test_size: int = 2000,
        seed: int = 0,
    ):
        super().__init__(val_size, test_size, seed)
        for key, v, low in (("max_depth", max_depth, 2), ("max_args", max_args, 2), ("min_length", min_length, 0)):
            if int(v) != v or int(v) < low:
                raise ValueError(f"listops needs an integer {key} >= {low}, got {key}={v!r}")
        if int(max_length) != max_length or max_length < min_length + 2:
            raise ValueError(
                f"listops keeps lengths n with min_length < n < max_length: needs max_length >= min_length + 2, "
                f"got min_length={min_length}, max_length={max_length}"
            )
        if not 0.0 < float(value_p) <= 1.0:
            raise ValueError(f"listops needs 0 < value_p <= 1 (the chance a node is an operator), got {value_p!r}")
        top = longest(int(max_depth), int(max_args))
        if top <= min_length:
            raise ValueError(
                f"listops: no tree of max_depth={max_depth}, max_args={max_args} has more than {top} tokens, "
                f"so none exceeds min_length={min_length}; lower min_length or raise max_depth / max_args"
            )
        self.min_length, self.max_length = int(min_length), int(max_length)
        self.max_depth, self.max_args, self.value_p = int(max_depth), int(max_args), float(value_p)

    def sample(self, rng: random.Random) -> tuple[list[int], int]:
        """One sequence's tokens and its value, drawn from ``rng`` until its length fits."""
        for _ in range(self.MAX_TRIES):
            tokens: list[int] = []
            value = _tree(rng, 1, self.max_depth, self.max_args, self.value_p, tokens)
            if self.min_length < len(tokens) < self.max_length:
                return tokens, value
        raise ValueError(
            f"listops: no tree of length in ({self.min_length}, {self.max_length}) in {self.MAX_TRIES:,} draws "
            f"(max_depth={self.max_depth}, max_args={self.max_args}, value_p={self.value_p}): such trees are too "
            f"rare; widen the length range or raise value_p"
        )

    def make(self, batch_size: int, generator: torch.Generator) -> Batch:
        rng = random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))
        seqs, labels = zip(*(self.sample(rng) for _ in range(batch_size)))
        lengths = torch.tensor([len(s) for s in seqs])
        x = torch.zeros(batch_size, int(lengths.max()), dtype=torch.long)
        for i, s in enumerate(seqs):
            x[i, : len(s)] = torch.tensor(s)
        return Batch(x, torch.tensor(labels), lengths)

    def max_steps(self, split: str = "train", batch_size: int = 1) -> int:
        """Every split's bound: a kept tree has fewer than ``max_length`` tokens, and none has
        more than a full tree (:func:`longest`)."""
        return min(self.max_length - 1, longest(self.max_depth, self.max_args))

    def baseline(self) -> dict[str, float]:
        y = self.eval_set("val").y
        freq = torch.bincount(y, minlength=DIGITS).double() / len(y)
        entropy = -sum(float(p) * math.log(float(p)) for p in freq if p > 0)
        return {"loss": entropy, "accuracy": float(freq.max())}

    def describe(self) -> str:
        return (
            f"listops: lengths in ({self.min_length}, {self.max_length}), max_depth={self.max_depth}, "
            f"max_args={self.max_args}, value_p={self.value_p}"
        )
