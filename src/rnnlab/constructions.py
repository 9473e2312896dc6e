"""Explicit, hand-built solutions of the copy and adding tasks (Henaff, Szlam & LeCun 2016).

Adding: a one-unit ReLU LT-RNN ``h_t = W h_{t-1} + relu(U x_t + b)`` with ``U = [1, 1]``,
``b = -1``, ``W = 1`` and readout ``V = 1`` outputs exactly the sum of the marked values: the
input path is ``relu(value + marker - 1)``, which is the value when the marker is 1 and 0
otherwise (values lie in [0, 1]).

Copy ("clock"): a linear LT-RNN ``h_t = W h_{t-1} + E[x_t]`` with ``E[a]`` a random unit
vector for each symbol a (zero for the blank and the marker) and ``W`` block-diagonal with 2x2
rotations by angles ``2 pi m_k / P``, ``m_k`` random integers, so that ``W^P = I`` for the
period ``P = L + K`` (delay plus number of symbols). At the recall step of symbol i, time
``i + P``, the state is ``E[a_i] + sum_{t != i} W^{i + P - t} E[a_t]``: the wanted encoding
comes back exactly while the others are rotated by "random-looking" powers of W, so decoding
by the nearest encoding (largest inner product) recovers a_i with high probability when the
dimension d is large compared with the number of stored symbols K.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .cells.ltrnn import LTRNNCell
from .tasks.synthetic import CopyTask


def adding_solution() -> LTRNNCell:
    """The one-unit ReLU LT-RNN that solves the adding task exactly (readout V = 1: the
    state itself is the answer)."""
    cell = LTRNNCell(2, 1, activation="relu", init="identity")
    with torch.no_grad():
        cell.weight_ih.copy_(torch.tensor([[1.0, 1.0]]))
        cell.bias.fill_(-1.0)
    return cell


class CopyClock:
    """The clock construction for the copy task of :class:`rnnlab.tasks.CopyTask`
    (exprnn encoding: K symbols, L blanks, marker, K-1 blanks; recall in the last K steps).

    ``d`` must be even. ``distinct=True`` draws distinct rotation frequencies where possible.
    """

    def __init__(
        self, d: int, K: int, L: int, alphabet: int = 8, generator: torch.Generator | None = None, distinct: bool = True
    ):
        if d < 2 or d % 2:
            raise ValueError(f"the clock needs an even dimension d >= 2, got d={d}")
        self.d, self.K, self.L, self.alphabet = d, K, L, alphabet
        self.period = L + K
        n = d // 2
        if distinct and n <= self.period - 1:
            m = torch.randperm(self.period - 1, generator=generator)[:n] + 1
        else:
            m = torch.randint(1, self.period, (n,), generator=generator)
        theta = 2 * math.pi * m.double() / self.period
        c, s = torch.cos(theta), torch.sin(theta)
        W = torch.zeros(d, d, dtype=torch.float64)
        k = torch.arange(n)
        W[2 * k, 2 * k], W[2 * k, 2 * k + 1] = c, -s
        W[2 * k + 1, 2 * k], W[2 * k + 1, 2 * k + 1] = s, c
        self.W, self.theta = W, theta
        E = torch.randn(alphabet + 2, d, generator=generator, dtype=torch.float64)
        E = E / E.norm(dim=1, keepdim=True)
        E[0] = 0.0  # blank
        E[alphabet + 1] = 0.0  # marker
        self.E = E

    def states(self, x: Tensor) -> Tensor:
        """Run ``h_t = W h_{t-1} + E[x_t]`` over tokens x (B, T); returns h (T, B, d)."""
        from .kernels.scan import linear_recurrence

        v = self.E[x].transpose(0, 1)  # (T, B, d)
        return linear_recurrence(v, self.W, torch.zeros(x.shape[0], self.d, dtype=torch.float64))

    def recall_states(self, x: Tensor) -> Tensor:
        """The states at the K recall steps (K, B, d) in closed form: only the first K inputs
        are non-zero and ``W^P = I``, so ``h_{P+i} = sum_{j<K} W^{i-j} E[x_j]``, where each
        2x2 block of ``W^k`` is a rotation by ``k theta``."""
        K = self.K
        z = torch.view_as_complex(self.E[x[:, :K]].reshape(*x[:, :K].shape, -1, 2).contiguous())  # (B, K, n)
        lag = torch.arange(K)[:, None] - torch.arange(K)[None, :]  # (i, j) -> i - j
        angle = lag[..., None].double() * self.theta
        rot = torch.polar(torch.ones_like(angle), angle)  # (K, K, n)
        h = torch.einsum("ijn,bjn->ibn", rot, z)
        return torch.view_as_real(h).reshape(K, x.shape[0], self.d)

    def recall(self, x: Tensor) -> Tensor:
        """The decoded symbols (B, K) at the K recall positions: the nearest encoding among the
        alphabet symbols (largest inner product)."""
        scores = self.recall_states(x) @ self.E[1 : self.alphabet + 1].T  # (K, B, alphabet)
        return scores.argmax(-1).T + 1

    def success_rate(self, trials: int, generator: torch.Generator | None = None) -> dict[str, float]:
        """Fraction of ``trials`` random sequences recalled perfectly, and of symbols recalled."""
        task = CopyTask(K=self.K, L=self.L, alphabet=self.alphabet)
        batch = task.make(trials, generator or torch.Generator().manual_seed(0))
        pred = self.recall(batch.x)
        target = batch.x[:, : self.K]
        ok = pred == target
        return {"sequences": ok.all(1).double().mean().item(), "symbols": ok.double().mean().item()}


def copy_success_table(
    d: int = 128,
    L: int = 500,
    Ks: tuple[int, ...] = (5, 10, 20, 40),
    alphabets: tuple[int, ...] = (8, 32, 128),
    trials: int = 500,
    seed: int = 0,
) -> list[dict]:
    """Success (fully recalled sequences, over ``trials`` draws of the construction and the data)
    against the number of symbols K and the alphabet size, the analogue of Henaff et al.'s
    Fig. 1 (T = 500, d = 128, 500 trials)."""
    rows = []
    for a in alphabets:
        for K in Ks:
            g = torch.Generator().manual_seed(seed)
            wins = 0
            for _ in range(trials):
                clock = CopyClock(d, K, L, a, generator=g)
                wins += clock.success_rate(1, g)["sequences"]
            rows.append({"d": d, "L": L, "K": K, "alphabet": a, "success": wins / trials})
    return rows
