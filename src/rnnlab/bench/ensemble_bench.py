"""``rnnlab bench ensemble``: members trained per second, as one batched model (an ensemble,
:mod:`rnnlab.ensemble`) and as separate runs, side by side in one process with the same threads.

For each benchmark (DMU on adding, the demo LSTM on copy, nnRNN on copy with N = 128 and batch
10) and each ensemble size E (1, 8 and 51 by default) it times the parts of a run, for one
single run (the trainer's own steps) and for an ensemble of E members (the ensemble's steps):

* the start (models, optimizers, run directories), a few training steps after a warm-up, one
  evaluation with its checkpoint, and the end (test scores of best.pt, result.json);

then extrapolates a whole run: ``start + steps x step + evaluations x evaluation + end`` at
the preset's step budget and evaluation cadence. This is an estimate from a few measured
steps, not a timed run, and runs that stop early at their target do less of it. E separate
runs take E times one run on the same threads; the ensemble takes its own estimate.

The record (``--json``) holds every measured part, the estimates, and the host: CPU model,
BLAS, load average before and after (``rnnlab.bench.benchrecord``: a loaded machine is refused
unless ``--allow-load``, and then marked).
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

#: name -> (preset, overrides): the three benchmarks
BENCHES = {
    "dmu-adding": ("dmu/short/adding-dmu", []),
    "lstm-copy": ("demo/lstm", []),
    "nnrnn-copy": ("nnrnn/copy", ["model.hidden_size=128", "train.batch_size=10"]),
}
SIZES = (1, 8, 51)
OPTIONS = ("benches", "sizes", "threads", "steps", "compare_paths", "json", "allow_load")


def _time_group(cfg, task, root: Path, size: int, steps: int, warmup: int, fast: bool = True, batched=True) -> dict:
    from ..ensemble import started

    t = time.perf_counter()
    with started(cfg, range(size), root, task, fast, batched) as group:
        start = time.perf_counter() - t
        ms = list(group.members)
        times = []
        for i in range(warmup + steps):
            t = time.perf_counter()
            group.step(ms)
            if i >= warmup:
                times.append(time.perf_counter() - t)
        t = time.perf_counter()
        group.evaluate(ms)
        evaluation = time.perf_counter() - t
        t = time.perf_counter()
        group.finish(ms)
        end = time.perf_counter() - t
        failed = [m.seed for m in ms if m.status == "failed"]
    if failed:
        raise RuntimeError(f"members {failed} of the ensemble failed during the benchmark")
    return {"start_s": start, "step_s": times, "eval_s": evaluation, "end_s": end}


def _time_single(cfg, task, root: Path, steps: int, warmup: int) -> dict:
    """A single run's parts: a group of one, as ``rnnlab train`` trains it."""
    return _time_group(cfg, task, root, 1, steps, warmup, batched=False)


def _time_ensemble(cfg, task, root: Path, size: int, steps: int, warmup: int, fast: bool = True) -> dict:
    return _time_group(cfg, task, root, size, steps, warmup, fast)


def full_run(parts: dict, steps: int, eval_every: int) -> float:
    """A whole run's seconds from its measured parts (the median step)."""
    evaluations = math.ceil(steps / eval_every)
    return (
        parts["start_s"] + steps * statistics.median(parts["step_s"]) + evaluations * parts["eval_s"] + parts["end_s"]
    )


def _time_step_loop(cfg, task, root: Path, size: int, steps: int) -> list[float]:
    """Training steps of an ensemble whose cells run their step loop under vmap (no batched
    recurrence): the alternative docs/ensembles.md compares."""
    from ..ensemble import started

    with started(cfg, range(size), root, task, fast=False) as ens:
        times = []
        for i in range(1 + steps):
            t = time.perf_counter()
            ens.step(list(ens.members))
            if i:
                times.append(time.perf_counter() - t)
    return times


def run(
    benches=tuple(BENCHES),
    sizes=SIZES,
    threads: int = 1,
    steps: int = 3,
    compare_paths: bool = False,
    log=print,
    between=lambda: None,
) -> list[dict]:
    """Time every benchmark and size; returns the rows of the record. ``compare_paths``: also
    time training steps with every cell's step loop under vmap (``step_loop_step_s``);
    ``between()`` is called after each row (the load average during the run)."""
    import torch

    from .. import config
    from ..tasks import build_task

    torch.set_num_threads(threads)
    rows = []
    for name in benches:
        preset, overrides = BENCHES[name]
        cfg = config.load(preset, [*overrides, f"train.threads={threads}", 'train.device="cpu"'])
        task = build_task(cfg.task)
        budget, every = cfg.train.steps, cfg.train.eval_every
        with tempfile.TemporaryDirectory() as tmp:
            _time_single(cfg, task, Path(tmp) / "warm-up", 1, 0)  # first-use costs (imports) out of the timing
            log(f"{name}: one run ...")
            single = _time_single(cfg, task, Path(tmp) / "single", steps, 1)
            one = full_run(single, budget, every)
            for size in sizes:
                log(f"{name}: ensemble of {size} ...")
                ens = _time_ensemble(cfg, task, Path(tmp) / f"ensemble{size}", size, steps, 1)
                together = full_run(ens, budget, every)
                if compare_paths:
                    log(f"{name}: ensemble of {size}, step loop under vmap ...")
                    ens["step_loop_step_s"] = _time_step_loop(cfg, task, Path(tmp) / f"loop{size}", size, steps)
                rows.append(
                    {
                        "bench": name,
                        "preset": preset,
                        "overrides": overrides,
                        "members": size,
                        "steps": budget,
                        "eval_every": every,
                        "single": single,
                        "ensemble": ens,
                        "one_run_s": one,
                        "separate_s": size * one,
                        "ensemble_s": together,
                        "members_per_s_separate": 1 / one,
                        "members_per_s_ensemble": size / together,
                        "speedup": size * one / together,
                        "ensemble_over_one_run": together / one,
                    }
                )
                between()
    return rows


def format_table(rows: list[dict]) -> str:
    head = (
        "| benchmark | E | one run (s) | E separate runs (s) | ensemble of E (s) | members/s separate | "
        "members/s ensemble | speed-up | ensemble / one run |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['bench']} | {r['members']} | {r['one_run_s']:.0f} | {r['separate_s']:.0f} | {r['ensemble_s']:.0f} | "
            f"{r['members_per_s_separate']:.4f} | {r['members_per_s_ensemble']:.4f} | {r['speedup']:.1f}x | "
            f"{r['ensemble_over_one_run']:.2f} |"
        )
    return "\n".join(lines)


def parts_table(rows: list[dict]) -> str:
    """The measured parts behind the estimates (seconds; step: median of the measured steps)."""
    lines = ["| benchmark | E | run | start | step | evaluation | end |", "|" + "---|" * 7]
    seen = set()
    for r in rows:
        for kind, p in (("one run", r["single"]), (f"ensemble of {r['members']}", r["ensemble"])):
            key = (r["bench"], kind)
            if key in seen:
                continue
            seen.add(key)
            lines.append(
                f"| {r['bench']} | {r['members']} | {kind} | {p['start_s']:.2f} | "
                f"{statistics.median(p['step_s']):.3f} | {p['eval_s']:.2f} | {p['end_s']:.2f} |"
            )
            if "step_loop_step_s" in p:
                lines.append(
                    f"| {r['bench']} | {r['members']} | {kind}, cells' step loop under vmap | | "
                    f"{statistics.median(p['step_loop_step_s']):.3f} | | |"
                )
    return "\n".join(lines)


def add_arguments(parser) -> None:
    """``rnnlab bench ensemble``'s options."""
    from . import benchrecord

    parser.add_argument(
        "--benches",
        nargs="+",
        default=list(BENCHES),
        choices=list(BENCHES),
        help="benchmarks to run, e.g. --benches dmu-adding",
    )
    parser.add_argument(
        "--sizes", nargs="+", type=int, default=list(SIZES), help="ensemble sizes E, e.g. --sizes 1 8 51"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads, e.g. --threads 2")
    parser.add_argument(
        "--steps", type=int, default=3, help="training steps measured per run after one warm-up step, e.g. --steps 5"
    )
    parser.add_argument(
        "--compare-paths",
        action="store_true",
        help="also time training steps with every cell's step loop under vmap (the alternative to the "
        "batched recurrences, compared in the documentation's ensembles page), "
        "e.g. --compare-paths",
    )
    parser.add_argument("--json", default=None, help="write the record here, e.g. --json docs/ensemble-bench.json")
    benchrecord.add_arguments(parser)


def main(
    benches=tuple(BENCHES),
    sizes=SIZES,
    threads: int = 1,
    steps: int = 3,
    compare_paths: bool = False,
    json: str | None = None,
    allow_load: bool = False,
) -> int:
    """Run, print the tables, write the record (``json``); refuses a busy machine for a record
    unless ``allow_load``."""
    import torch

    from . import benchrecord

    if steps < 1 or threads < 1 or any(s < 1 for s in sizes):
        from ..config import ConfigError

        raise ConfigError(f"--steps, --threads and --sizes must be >= 1, got {steps}, {threads}, {list(sizes)}")
    host = benchrecord.start(allow_load or not json, own=threads)
    rows = run(
        benches,
        sizes,
        threads,
        steps,
        compare_paths,
        log=lambda m: print(m, file=sys.stderr, flush=True),
        between=lambda: benchrecord.sample(host),
    )
    cond = benchrecord.conditions(host, torch=torch.__version__, threads=threads, steps_measured=steps)
    from ..ledger.records import cpu_label

    print(
        f"\n{cond['date']}; {cpu_label(cond)}; torch {cond['torch']}; {threads} thread(s); load average "
        f"{cond['loadavg_before'][0]:.2f} before, {cond['loadavg_after'][0]:.2f} after"
        + (" (loaded: not a result)" if cond["loaded"] else "")
        + "\n"
    )
    print(
        "Whole runs estimated from the measured parts (start + steps x step + evaluations x evaluation + end, "
        "at each preset's step budget):\n"
    )
    print(format_table(rows))
    print("\nThe measured parts (seconds):\n")
    print(parts_table(rows))
    largest = next((r for r in rows if r["bench"] == "dmu-adding" and r["members"] == 51), None)
    if largest is not None:
        print(
            f"\nDMU adding, 51 members: {largest['ensemble_over_one_run']:.2f}x one run's time, "
            f"{largest['speedup']:.1f}x the throughput of separate runs"
        )
    if json:
        benchrecord.write(json, {"conditions": cond, "rows": rows}, cond)
        print(f"\nwrote {json}", file=sys.stderr)
    return 0
