"""rnnlab's layers as a drop-in for torch.nn.LSTM in a model of your own.

A small sequence classifier is written once against the torch.nn.LSTM signature; the same class
then runs with rnnlab.LSTM (the same weights, converted with rnnlab.from_torch, give the same
outputs) and with asRNN, trained for a few steps with plain torch code. Run it:

    python examples/lstm_drop_in.py [--steps 200]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import rnnlab


class Classifier(nn.Module):
    """Embeds nothing, reads a (B, T, I) batch with any torch.nn.LSTM-like layer, classifies the last step."""

    def __init__(self, rnn: nn.Module, hidden_size: int, classes: int):
        super().__init__()
        self.rnn, self.head = rnn, nn.Linear(hidden_size, classes)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def batch(gen: torch.Generator, n: int = 64, T: int = 30):
    """The class is the sign of the sum of the first 3 steps' first feature: memory over T steps."""
    x = torch.randn(n, T, 4, generator=gen)
    return x, (x[:, :3, 0].sum(1) > 0).long()


def train(model: nn.Module, steps: int, lr: float) -> float:
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        x, y = batch(gen)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, y = batch(torch.Generator().manual_seed(1), n=512)
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="training steps per model, e.g. --steps 50")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny models: one thread is fastest

    theirs = nn.LSTM(4, 32, batch_first=True)
    ours = rnnlab.from_torch(theirs)  # rnnlab.LSTM with the same weights
    x = torch.randn(2, 30, 4)
    same = (theirs(x)[0] - ours(x)[0]).abs().max().item()
    print(f"rnnlab.from_torch(nn.LSTM): largest output difference {same:.1e}")

    for name, layer in [
        ("torch.nn.LSTM", nn.LSTM(4, 32, batch_first=True)),
        ("rnnlab.LSTM", rnnlab.LSTM(4, 32, batch_first=True)),
        ("rnnlab.ASRNN", rnnlab.ASRNN(4, 32, batch_first=True)),
    ]:
        acc = train(Classifier(layer, 32, 2), args.steps, lr=1e-2)
        print(f"{name:14s} test accuracy after {args.steps} steps: {acc:.3f} (chance 0.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
