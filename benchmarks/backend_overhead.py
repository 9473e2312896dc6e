"""Overhead per run of each backend: the local process pool against Ray, on tiny runs.

    python benchmarks/backend_overhead.py [--runs 8] [--parallel 2] [--out docs/backend-overhead.json]
    python benchmarks/backend_overhead.py --table docs/backend-overhead.json   # the table of a record

Every run is the demo LSTM on a copy task shrunk to almost nothing (2 steps, hidden 8, L=10), so
a run's wall time at the driver is nearly all backend overhead: starting or reaching a worker,
importing rnnlab and torch there, taking the run's lock, building the task, writing the run
directory. For each backend it prints the driver's wall time for all runs, the time spent inside
``train`` (from the runs' result.json), and the overhead per run:
``(wall * parallel - sum of in-run times) / runs``. Ray's cluster start (``ray.init``) is timed
separately; a Ray cluster is normally started once and reused. Each backend is measured twice:
with fresh worker processes (the first use: every worker imports torch and rnnlab) and with
workers that already have them (a pool forked after the imports; Ray's reused workers).

A record (``--out``) carries the CPU model, the BLAS and the load average before, during and
after the run (:mod:`rnnlab.bench.benchrecord`; the benchmark's own load is ``--parallel``), and is
refused on a busy machine (load average above 0.5 per core) unless ``--allow-load``.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rnnlab.backends import job_for, run_jobs
from rnnlab.bench import benchdocs, benchrecord
from rnnlab.rundir import RunFiles

TINY = [
    "train.steps=2",
    "train.eval_every=2",
    "task.L=10",
    "model.hidden_size=8",
    "train.batch_size=16",
    "task.val_size=32",
    "task.test_size=32",
]


def measure(backend: str, runs: int, parallel: int, root: Path, address=None) -> dict:
    jobs = [job_for("demo/lstm", TINY + [f"train.seed={i}"], root / backend / f"run{i}") for i in range(runs)]
    t0 = time.perf_counter()
    out = run_jobs(jobs, backend, parallel=parallel, address=address, log=lambda m: None)
    wall = time.perf_counter() - t0
    assert all(s == "trained" for _, s, _ in out), out
    inside = sum(RunFiles(j.run_dir).read_result()["wall_time_s"] for j in jobs)
    return {
        "backend": backend,
        "runs": runs,
        "parallel": parallel,
        "wall_s": round(wall, 2),
        "in_train_s": round(inside, 2),
        "overhead_per_run_s": round((wall * parallel - inside) / runs, 3),
    }


def render(record) -> str:
    """The Markdown table of docs/sweeps.md from a record (docs/backend-overhead.json; a bare
    list of rows in records made before they carried their conditions)."""
    return benchdocs.overhead_table(record)


def _measure_all(runs: int, parallel: int, host: dict) -> list[dict]:
    """The local pool and Ray, each with fresh and with warm workers (the load average
    sampled into ``host`` after each measurement)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cold = measure("local", runs, parallel, Path(tmp) / "cold")  # workers import torch, rnnlab
        measure("local", 1, 1, Path(tmp) / "warmup")  # in this process: later forks inherit the imports
        warm = measure("local", runs, parallel, Path(tmp) / "warm")
        benchrecord.sample(host)
        rows += [
            {**cold, "backend": "local pool (fresh processes)"},
            {**warm, "backend": "local pool (forked after imports)"},
        ]
        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=parallel, include_dashboard=False, log_to_driver=False)
        start = time.perf_counter() - t0
        try:
            cold = measure("ray", runs, parallel, Path(tmp) / "cold")  # first use: workers start
            warm = measure("ray", runs, parallel, Path(tmp) / "warm")  # workers already up
        finally:
            ray.shutdown()
        rows += [
            {**cold, "backend": "ray (fresh workers)", "ray_init_s": round(start, 2)},
            {**warm, "backend": "ray (warm workers)"},
        ]
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=2, help="pool size / Ray CPUs")
    ap.add_argument("--out", help="also write the record as JSON here (refused on a busy machine)")
    ap.add_argument("--table", metavar="JSON", help="only print the table of recorded rows (no runs)")
    benchrecord.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.table:
        print(benchdocs.VIEWS["overhead"](json.loads(Path(args.table).read_text()), args.table))
        return 0

    def body():
        host = benchrecord.start(args.allow_load or not args.out, own=args.parallel)
        rows = _measure_all(args.runs, args.parallel, host)
        import ray

        rec = {"conditions": benchrecord.conditions(host, ray=ray.__version__), "rows": rows}
        benchrecord.publish(rec, args.out, benchdocs.VIEWS["overhead"](rec, args.out or "(not written)"))
        print(f"\nray.init (local instance, {args.parallel} CPUs): {rows[2]['ray_init_s']} s", file=sys.stderr)

    return benchrecord.exit_code(body)


if __name__ == "__main__":
    sys.exit(main())
