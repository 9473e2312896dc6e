"""Train asRNN on the copy task with a preset's settings and time an ``nn.LSTM`` of matched size
in the same process (the evidence run of docs/asrnn.md).

    PYTHONPATH=src python benchmarks/asrnn_copy_evidence.py \
        --preset src/rnnlab/configs/asrnn/copy-L1000.toml --out runs/asrnn-copy-L1000-evidence \
        [--steps 4000] [--deadline 2026-11-29T11:15]

It does what the trainer does for this preset (RMSprop with the preset's per-group learning
rates, global-norm clipping, dynamic trivialization after each step, init seed ``seed`` and
data seed ``seed + 1``) in a short loop of its own, so that it could start before the trainer
existed. Every ``eval_every`` steps it evaluates on the task's fixed validation set, writes
``checkpoint.pt`` (a ``SequenceModel``-compatible state dict: ``rnn.*`` and ``readout.*``) and
times two training iterations of ``nn.LSTM(I, n_lstm)`` + linear readout on the same batch.
Stops at ``--steps`` or at ``--deadline`` (UTC), whichever comes first, and says which.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import torch
from torch import nn

from rnnlab import CELLS, Recurrent
from rnnlab.parametrize import after_optimizer_step
from rnnlab.tasks import TASKS


class CopyModel(nn.Module):
    """One-hot -> Recurrent(cell) -> linear readout at every step (the trainer's model layout)."""

    def __init__(self, cell: str, num_tokens: int, hidden: int, out: int, options: dict):
        super().__init__()
        self.num_tokens = num_tokens
        self.rnn = Recurrent(num_tokens, hidden, batch_first=True, cell=CELLS[cell], **options)
        self.readout = nn.Linear(hidden, out)

    def forward(self, x):
        h, _ = self.rnn(nn.functional.one_hot(x, self.num_tokens).float())
        return self.readout(h)


def optimizer(model: nn.Module, optim: dict) -> torch.optim.Optimizer:
    groups = model.rnn.param_groups()
    inner = {id(p) for ps in groups.values() for p in ps}
    groups.setdefault("default", []).extend(p for p in model.parameters() if id(p) not in inner)
    lrs = optim.get("group_lr", {})
    param_groups = [{"params": ps, "lr": lrs.get(tag, optim["lr"]), "tag": tag} for tag, ps in groups.items()]
    return torch.optim.RMSprop(param_groups, lr=optim["lr"], alpha=optim.get("alpha", 0.99))


def lstm_iteration_time(x, y, num_tokens, hidden, out, repeats=2) -> float:
    """Seconds per training iteration (forward, backward, RMSprop step) of nn.LSTM + readout."""
    lstm, ro = nn.LSTM(num_tokens, hidden, batch_first=True), nn.Linear(hidden, out)
    opt = torch.optim.RMSprop(list(lstm.parameters()) + list(ro.parameters()), lr=1e-4, alpha=0.9)
    xo = nn.functional.one_hot(x, num_tokens).float()
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        opt.zero_grad()
        h, _ = lstm(xo)
        nn.functional.cross_entropy(ro(h).reshape(-1, out), y.reshape(-1)).backward()
        nn.utils.clip_grad_norm_(list(lstm.parameters()) + list(ro.parameters()), 10.0)
        opt.step()
        best = min(best, time.perf_counter() - t)
    return best


@torch.no_grad()
def evaluate(model, task) -> dict:
    sums: dict[str, list[float]] = {}
    for batch in task.eval_batches("val", 128):
        for k, (s, n) in task.metric_sums(model(batch.x), batch).items():
            acc = sums.setdefault(k, [0.0, 0.0])
            acc[0] += s
            acc[1] += n
    return {f"val/{k}": s / n for k, (s, n) in sums.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--deadline", default=None, help="UTC time YYYY-MM-DDTHH:MM to stop at")
    ap.add_argument("--lstm-hidden", type=int, default=68)
    args = ap.parse_args()
    torch.set_num_threads(1)

    cfg = tomllib.loads(Path(args.preset).read_text())
    task_opts = {k: v for k, v in cfg["task"].items() if k != "name"}
    task = TASKS[cfg["task"]["name"]](**task_opts)
    tr, optim, m = cfg["train"], cfg["optim"], cfg["model"]
    steps = args.steps or tr["steps"]
    deadline = dt.datetime.fromisoformat(args.deadline).replace(tzinfo=dt.timezone.utc) if args.deadline else None

    torch.manual_seed(tr["seed"])
    model = CopyModel(m["cell"], task.num_tokens, m["hidden_size"], task.output_size, cfg["model"].get("cell_options", {}))
    opt = optimizer(model, optim)
    gen = torch.Generator().manual_seed(tr["seed"] + 1)
    batches = task.train_batches(tr["batch_size"], gen)
    cell = model.rnn.cells[0]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "preset.json").write_text(json.dumps(cfg, indent=2))
    log = open(out / "metrics.jsonl", "a")
    baseline = task.baseline()
    t0, stop_reason, train_time = time.perf_counter(), "steps", 0.0
    step_times, lstm_times = [], []
    for step in range(1, steps + 1):
        if deadline and dt.datetime.now(dt.timezone.utc) >= deadline:
            stop_reason = "deadline"
            step -= 1
            break
        batch = next(batches)
        t = time.perf_counter()
        opt.zero_grad()
        logits = model(batch.x)
        loss = task.loss(logits, batch)
        loss.backward()
        gnorm = nn.utils.clip_grad_norm_(model.parameters(), optim["clip"]) if optim.get("clip") else None
        opt.step()
        after_optimizer_step(model)
        dt_step = time.perf_counter() - t
        train_time += dt_step
        step_times.append(dt_step)
        row = {"step": step, "time": round(time.perf_counter() - t0, 2), "train/loss": loss.item(),
               "step_s": round(dt_step, 4)}
        if gnorm is not None:
            row["grad_norm"] = float(gnorm)
        if hasattr(cell, "amplification") and step % 10 == 0:
            row["kappa"] = cell.amplification()
            row["cond_D_f"] = cell.condition_number()
            row["fast_path"] = cell.uses_fast_path(torch.float32)
        if step % tr["eval_every"] == 0 or step == 1:
            model.eval()
            row.update(evaluate(model, task))
            model.train()
            lstm_s = lstm_iteration_time(batch.x, batch.y, task.num_tokens, args.lstm_hidden, task.output_size)
            lstm_times.append(lstm_s)
            row["lstm_step_s"] = round(lstm_s, 4)
            tmp = out / "checkpoint.pt.tmp"
            torch.save({"model": model.state_dict(), "step": step}, tmp)
            os.replace(tmp, out / "checkpoint.pt")
        log.write(json.dumps(row) + "\n")
        log.flush()
    med = lambda v: sorted(v)[len(v) // 2] if v else None  # noqa: E731
    result = {
        "preset": args.preset, "steps_done": step, "steps_planned": steps, "stopped_by": stop_reason,
        "wall_time_s": round(time.perf_counter() - t0, 1), "train_time_s": round(train_time, 1),
        "median_step_s": med(step_times), "median_lstm_step_s": med(lstm_times),
        "lstm_hidden": args.lstm_hidden, "baseline": baseline, "final": evaluate(model.eval(), task),
        "fast_path_at_end": getattr(cell, "uses_fast_path", lambda d: None)(torch.float32),
    }
    torch.save({"model": model.state_dict(), "step": step}, out / "checkpoint.pt")
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
