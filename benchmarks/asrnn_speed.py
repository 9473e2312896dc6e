"""Seconds per training iteration on the copy task: asRNN (fast path and step loop) next to an
LSTM of matched size (rnnlab's LSTM layer and a plain ``torch.nn.LSTM``), measured in one
process, interleaved round-robin so that all models see the same machine load.

    PYTHONPATH=src python benchmarks/asrnn_speed.py [--L 1000] [--reps 5] [--threads 1]

An iteration is what the trainer does: forward, cross-entropy over all L + 2K steps, backward,
gradient clipping, RMSprop step and the dynamic-trivialization hook, with the allocator tuned
as the CLI does (``rnnlab.runtime.tune_malloc``). Prints the median and the minimum per model.
"""

import argparse
import statistics
import time

import torch
from torch import nn

from rnnlab import config, parametrize, runtime
from rnnlab.model import build_model
from rnnlab.stepper import build_optimizer
from rnnlab.train import build_task


class TorchLSTM(nn.Module):
    def __init__(self, tokens, hidden, out):
        super().__init__()
        self.tokens = tokens
        self.lstm, self.readout = nn.LSTM(tokens, hidden, batch_first=True), nn.Linear(hidden, out)

    def forward(self, x, state=None, lengths=None):
        h, s = self.lstm(nn.functional.one_hot(x, self.tokens).float())
        return self.readout(h), s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--L", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    runtime.tune_malloc()  # as the CLI's trainer does
    torch.set_num_threads(args.threads)
    cfg = config.load("asrnn/copy-L1000", [f"task.L={args.L}"])
    task = build_task(cfg.task)
    batch = task.make(cfg.train.batch_size, torch.Generator().manual_seed(0))
    models = {}
    for label, preset, backend in (
        ("asrnn n=138 (fast path)", "asrnn/copy-L1000", "auto"),
        ("asrnn n=138 (step loop)", "asrnn/copy-L1000", "reference"),
        ("rnnlab lstm n=68", "asrnn/copy-L1000-lstm", None),
    ):
        c = config.load(preset, [f"task.L={args.L}"])
        torch.manual_seed(0)
        m = build_model(c.model, task)
        if backend:
            for cell in m.rnn.cells:
                cell.backend = backend
        models[label] = (m, build_optimizer(c.optim, m)[0], c.optim.clip)
    torch.manual_seed(0)
    m = TorchLSTM(task.num_tokens, 68, task.output_size)
    models["torch.nn.LSTM n=68"] = (m, torch.optim.RMSprop(m.parameters(), lr=2e-4, alpha=0.9), 10.0)

    def iteration(model, opt, clip):
        t = time.perf_counter()
        opt.zero_grad()
        out, _ = model(batch.x)
        task.loss(out, batch).backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        parametrize.after_optimizer_step(model)
        return time.perf_counter() - t

    times = {k: [] for k in models}
    for v in models.values():  # warm-up
        iteration(*v)
    for _ in range(args.reps):
        for k, v in models.items():
            times[k].append(iteration(*v))
    print(
        f"copy K=10, L={args.L}, batch {cfg.train.batch_size}, {args.threads} thread(s), {args.reps} interleaved reps"
    )
    print("| model | median s/iter | min s/iter |")
    print("|---|---|---|")
    for k, ts in times.items():
        print(f"| {k} | {statistics.median(ts):.3f} | {min(ts):.3f} |")


if __name__ == "__main__":
    main()
