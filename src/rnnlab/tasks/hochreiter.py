"""Hochreiter & Schmidhuber (1997) long-time-lag problems, as the DMU paper uses them.

Every sequence has its own length ``L ~ U{L_min, ..., L_min + ceil(L_min / 10)}`` (DMU: 100 to
110); batches are padded and carry ``lengths``, and the answer is read at each sequence's last
valid step.

* ``hs_adding`` (their Exp. 4): steps ``[a, b]`` with a ~ U(-1, 1) and a marker b: -1 at the
  first and last step, 1 at two positions (the first among the first ten, the second among the
  first L/2 - 1, distinct), 0 elsewhere. A marked first step has value 0 (``step0_mark="pair"``);
  with ``step0_mark="end"``, as the DMU authors' released generator, step 0 keeps its -1 mark and
  its random value even when a pair element is drawn there, which then adds 0. Target
  ``0.5 + (x1 + x2) / 4`` (``target="hs"``, as Hochreiter & Schmidhuber) or ``x1 + x2``
  (``target="sum"``, as the DMU paper's appendix words it); MSE at the last step.
* ``temporal_order`` (Exp. 6b): one-hot symbols a, b, c, d (distractors), E (start, step 0),
  B (end, step L-1), X/Y at t1 in [0.10, 0.20) L_min, t2 in [0.33, 0.43) L_min, t3 in
  [0.66, 0.76) L_min (10-20, 33-43, 66-76 for L_min = 100); class ``4 b1 + 2 b2 + b3`` with
  b = 1 for Y: 8 classes, chance ln 8.
* ``noisy_sequence`` (Exp. 2b): the first symbol is x or y, the other L - 1 are noise symbols
  drawn at random (``fixed=True`` draws them once per task: the noise-free Exp. 2a); the class
  of the first symbol is the answer at the end; chance ln 2. ``variable_length=False``: every
  sequence is L long; ``classes=2 + noise_symbols``: the answer is a softmax over every symbol
  (both as the DMU authors' released code runs it; only x and y ever occur as answers).
"""

from __future__ import annotations

import math

import torch

from .base import Batch, Draws
from .synthetic import _GeneratedTask


class _VariableLength(_GeneratedTask):
    readout = "last"

    def __init__(self, L: int, val_size: int, test_size: int, seed: int):
        super().__init__(val_size, test_size, seed)
        if L < 20:
            raise ValueError(f"{self.name} needs L (the minimum length) >= 20, got L={L}")
        self.L = int(L)
        self.L_max = self.L + math.ceil(self.L / 10)

    def lengths(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        return torch.randint(self.L, self.L_max + 1, (batch_size,), generator=generator)

    # a batch is its random draws (``draw``, in the generator's order) and a fixed computation
    # on them (``build``, over the rows of any number of batches at once): an ensemble draws each
    # member's batch from its own stream and builds them all in one pass (Task.assemble)
    def make(self, batch_size, generator):
        return self.build(*self.draw(batch_size, generator))

    def train_draws(self, batch_size, generator):
        cls = type(self)
        if cls.make is not _VariableLength.make or cls.train_batches is not _GeneratedTask.train_batches:
            return self.train_batches(batch_size, generator)  # a subclass's own batches
        return self._draws(batch_size, generator)

    def _draws(self, batch_size, generator):
        while True:
            yield Draws(self.draw(batch_size, generator))

    def assemble(self, draws: list) -> list[Batch]:
        if not isinstance(draws[0], Draws):
            return list(draws)
        if len(draws) == 1:
            return [self.build(*draws[0])]
        B = draws[0][0].shape[0]
        whole = self.build(*(None if d[0] is None else torch.cat(d) for d in zip(*draws)))
        cut = lambda t, k: t[k * B : (k + 1) * B]  # noqa: E731
        return [Batch(cut(whole.x, k), cut(whole.y, k), cut(whole.lengths, k)) for k in range(len(draws))]


class HSAddingTask(_VariableLength):
    name = "hs_adding"
    loss_kind = "mse"
    input_size = 2
    output_size = 1

    def __init__(
        self,
        L: int = 100,
        target: str = "hs",
        val_size: int = 1000,
        test_size: int = 1000,
        seed: int = 0,
        step0_mark: str = "pair",
    ):
        super().__init__(L, val_size, test_size, seed)
        if target not in ("hs", "sum"):
            raise ValueError(f"hs_adding target must be 'hs' or 'sum', got {target!r}")
        if step0_mark not in ("pair", "end"):
            raise ValueError(
                f"hs_adding step0_mark must be 'pair' (a pair element drawn at step 0 is marked 1, value 0) "
                f"or 'end' (step 0 always marked -1, as the DMU authors' released generator), got {step0_mark!r}"
            )
        self.target, self.step0_mark = target, step0_mark

    def draw(self, batch_size, generator):
        lengths = self.lengths(batch_size, generator)
        uniform = torch.rand(batch_size, self.L_max, generator=generator)
        first = torch.randint(0, 10, (batch_size,), generator=generator)
        return lengths, uniform, first, torch.rand(batch_size, generator=generator)

    def build(self, lengths, uniform, first, u_second):
        batch_size, T = uniform.shape
        values = uniform * 2 - 1
        marks = torch.zeros(batch_size, T)
        rows = torch.arange(batch_size)
        marks[:, 0] = -1.0
        marks[rows, lengths - 1] = -1.0
        M = lengths // 2 - 1  # second marker among the first L/2 - 1 positions, distinct from the first
        second = (u_second * (M - 1)).long()
        second = second + (second >= first).long()
        marks[rows, first] = 1.0
        marks[rows, second] = 1.0
        if self.step0_mark == "end":
            marks[:, 0] = -1.0  # the pair element drawn at step 0, if any, adds 0
        else:
            values[:, 0] = torch.where(marks[:, 0] == 1.0, torch.zeros(()), values[:, 0])
        pad = torch.arange(T)[None, :] >= lengths[:, None]
        values[pad] = 0.0
        marks[pad] = 0.0
        s = (values * (marks == 1.0)).sum(1, keepdim=True)
        y = 0.5 + s / 4 if self.target == "hs" else s
        return Batch(torch.stack([values, marks], -1), y, lengths)

    def baseline(self):
        """MSE of predicting the mean target: the target's variance, averaged over lengths."""
        var = []
        for L in range(self.L, self.L_max + 1):
            M = L // 2 - 1
            p_first_at_0, p_second_at_0 = 0.1, 0.9 / (M - 1)
            var.append((1 / 3) * ((1 - p_first_at_0) + (1 - p_second_at_0)))
        v = sum(var) / len(var)
        return {"loss": v / 16 if self.target == "hs" else v}


class TemporalOrderTask(_VariableLength):
    name = "temporal_order"
    loss_kind = "ce"
    input_size = num_tokens = 8
    output_size = 8
    E, B, X, Y = 4, 5, 6, 7

    def __init__(self, L: int = 100, val_size: int = 1000, test_size: int = 1000, seed: int = 0):
        super().__init__(L, val_size, test_size, seed)
        self.windows = [(round(a * self.L), round(b * self.L)) for a, b in ((0.10, 0.20), (0.33, 0.43), (0.66, 0.76))]

    def draw(self, batch_size, generator):
        lengths = self.lengths(batch_size, generator)
        x = torch.randint(0, 4, (batch_size, self.L_max), generator=generator)
        bits = torch.randint(0, 2, (batch_size, 3), generator=generator)
        at = [torch.randint(lo, hi, (batch_size,), generator=generator) for lo, hi in self.windows]
        return lengths, x, bits, torch.stack(at, 1)

    def build(self, lengths, x, bits, at):
        rows = torch.arange(x.shape[0])
        x[:, 0] = self.E
        x[rows, lengths - 1] = self.B
        for k in range(len(self.windows)):
            x[rows, at[:, k]] = self.X + bits[:, k]
        y = 4 * bits[:, 0] + 2 * bits[:, 1] + bits[:, 2]
        return Batch(x, y, lengths)

    def baseline(self):
        return {"loss": math.log(8), "accuracy": 1 / 8}


class NoisySequenceTask(_VariableLength):
    name = "noisy_sequence"
    loss_kind = "ce"
    output_size = 2

    def __init__(
        self,
        L: int = 100,
        noise_symbols: int = 100,
        fixed: bool = False,
        val_size: int = 1000,
        test_size: int = 1000,
        seed: int = 0,
        variable_length: bool = True,
        classes: int = 2,
    ):
        super().__init__(L, val_size, test_size, seed)
        if noise_symbols < 1:
            raise ValueError(f"noise_symbols must be >= 1, got {noise_symbols}")
        self.noise_symbols, self.fixed = int(noise_symbols), bool(fixed)
        self.num_tokens = self.input_size = 2 + self.noise_symbols
        if classes not in (2, self.num_tokens):
            raise ValueError(
                f"noisy_sequence classes must be 2 (x or y) or {self.num_tokens} (a softmax over every symbol, "
                f"2 + noise_symbols), got classes={classes}"
            )
        self.output_size = int(classes)
        if not variable_length:  # every sequence L long (the DMU authors' released code)
            self.L_max = self.L
        g = torch.Generator().manual_seed(7_919 * self.seed + 5)
        self._fixed_noise = torch.randint(2, self.num_tokens, (self.L_max,), generator=g)

    def draw(self, batch_size, generator):
        lengths = self.lengths(batch_size, generator)
        x = None if self.fixed else torch.randint(2, self.num_tokens, (batch_size, self.L_max), generator=generator)
        return lengths, x, torch.randint(0, 2, (batch_size,), generator=generator)

    def build(self, lengths, x, y):
        if x is None:  # fixed: the task's one noise sequence
            x = self._fixed_noise.expand(y.shape[0], -1).clone()
        x[:, 0] = y
        return Batch(x, y, lengths)

    def baseline(self):
        return {"loss": math.log(2), "accuracy": 0.5}
