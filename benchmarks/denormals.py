"""Subnormal floats kept against flushed to zero: training-iteration time on sequential MNIST.

    python benchmarks/denormals.py [--cells nn.LSTM lstm gru asrnn exprnn] [--rounds 2]
    python benchmarks/denormals.py --json docs/denormals-results.json   # a record (refused when busy)

Each row runs the speed benchmark's worker (rnnlab/bench/speed.py, the ``mnist`` configuration:
T=784, batch 128, about 16K parameters, uniform random pixels) for one cell, alone in its
process, once with subnormal floats kept (the CPU's default) and once flushed to zero
(``rnnlab.runtime.flush_denormals``, what the trainer does); the two settings alternate over
``--rounds`` rounds and the table gives the median over rounds of each setting's median
CPU seconds per training iteration (forward, backward, optimizer step), and the median of the
per-round ratios kept / flushed. A cell whose gradients decay through float32's subnormal
range (below 1.2e-38) over the 784 steps pays for it on x86 CPUs, which handle a subnormal
in microcode.

A record (``--json``) carries the CPU model, the BLAS and the load average before, during and
after the run (:mod:`rnnlab.bench.benchrecord`); BENCHMARKS.md's table is generated from it
(view ``table`` of this file's :data:`VIEWS`).
"""

import argparse
import statistics
import sys

from rnnlab.bench import benchrecord, speed

SETTINGS = ("keep", "flush")


def measure(spec: dict, denormals: str, threads: int, repeats: int) -> dict:
    """CPU and wall seconds per iteration of one cell under one setting, in a fresh worker."""
    spec = dict(spec, threads=threads, malloc="tuned", denormals=denormals, repeats=repeats, reference=False)
    spec["baseline_hidden"] = None
    res = speed._spawn(spec, 3600)
    if "error" in res:
        return {"error": res["error"]}
    return {"cpu": res["fast"]["cpu"], "wall": res["fast"]["wall"], "seen": res.get("denormals")}


def row_line(row: dict) -> str:
    if "error" in row:
        return f"| {row['cell']} | {row['hidden']} | error: {row['error']} | | |"
    kept, flushed = (statistics.median(row[s]) for s in SETTINGS)
    ratio = benchrecord.fmt_spread(benchrecord.spread([k / f for k, f in zip(row["keep"], row["flush"])]))
    return f"| {row['cell']} | {row['hidden']} | {kept:.3f} | {flushed:.3f} | {ratio} |"


def table(record: dict) -> str:
    lines = [
        "| cell | n | kept: train s/it CPU | flushed: train s/it CPU | kept / flushed (median [min-max] of rounds) |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(lines + [row_line(r) for r in record["rows"]])


VIEWS = {"table": lambda record, source: benchrecord.caption(record, source) + "\n\n" + table(record)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", nargs="+", default=["nn.LSTM", "lstm", "gru", "asrnn", "exprnn"])
    p.add_argument("--rounds", type=int, default=2, help="alternations of the two settings per cell")
    p.add_argument("--repeats", type=int, default=3, help="timed iterations per worker (median)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the record here (refused on a busy machine)")
    benchrecord.add_arguments(p)
    a = p.parse_args(argv)
    specs = [s for s in speed.plan(("mnist",), a.cells) if s["label"] in a.cells]
    missing = set(a.cells) - {s["label"] for s in specs}
    if missing:
        p.error(
            f"unknown cells {sorted(missing)}: the mnist configuration has {[s['label'] for s in speed.plan(('mnist',))]}"
        )

    def body():
        host = benchrecord.start(a.allow_load or not a.json, own=a.threads)
        rows = []
        for spec in specs:
            row = {
                "cell": spec["label"],
                "hidden": spec["hidden"],
                "keep": [],
                "flush": [],
                "wall": {s: [] for s in SETTINGS},
            }
            for _ in range(a.rounds):
                for s in SETTINGS:
                    m = measure(spec, s, a.threads, a.repeats)
                    if "error" in m:
                        row = {"cell": spec["label"], "hidden": spec["hidden"], "error": m["error"]}
                        break
                    row[s].append(m["cpu"])
                    row["wall"][s].append(m["wall"])
                    row.setdefault("seen", {})[s] = m["seen"]
                if "error" in row:
                    break
                benchrecord.sample(host)
            rows.append(row)
            print(row_line(row), file=sys.stderr, flush=True)
        cond = benchrecord.conditions(host, config="mnist", threads=a.threads, rounds=a.rounds, repeats=a.repeats)
        rec = {"conditions": cond, "rows": rows}
        benchrecord.publish(rec, a.json, VIEWS["table"](rec, a.json or "(not written)"))

    return benchrecord.exit_code(body)


if __name__ == "__main__":
    sys.exit(main())
