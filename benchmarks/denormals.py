"""Subnormal floats kept against flushed to zero: training-iteration time, cell by cell.

    python benchmarks/denormals.py [--configs mnist copy] [--cells nn.LSTM lstm asrnn] [--rounds 2]
    python benchmarks/denormals.py --json docs/denormals-results.json   # a record (refused when busy)

Each row runs the speed benchmark's worker (rnnlab/bench/speed.py; by default its ``mnist``
configuration, T=784, batch 128, about 16K parameters, uniform random pixels, and its ``copy``
configuration) for one cell, alone in its process, once with subnormal floats kept (the CPU's
default) and once flushed to zero (``rnnlab.runtime.flush_denormals``, what the trainer does).
The two settings alternate over ``--rounds`` rounds; the table gives the median over rounds of
each setting's median CPU seconds per training iteration (forward, backward, optimizer step)
and the median [min-max] of the per-round ratios kept / flushed. A cell whose gradients decay
through float32's subnormal range (below 1.2e-38) over a long sequence pays for it on x86
CPUs, which handle a subnormal in microcode.

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
    head = f"| {row['config']} | {row['cell']} | {row['hidden']} |"
    if "error" in row:
        return f"{head} error: {row['error']} | | |"
    kept, flushed = (statistics.median(row[s]) for s in SETTINGS)
    ratio = benchrecord.fmt_spread(benchrecord.spread([k / f for k, f in zip(row["keep"], row["flush"])]))
    return f"{head} {kept:.3f} | {flushed:.3f} | {ratio} |"


def table(record: dict) -> str:
    lines = [
        "| config | cell | n | kept: train s/it CPU | flushed: train s/it CPU | kept / flushed (median [min-max] of rounds) |",
        "|---|---|---|---|---|---|",
    ]
    return "\n".join(lines + [row_line(r) for r in record["rows"]])


VIEWS = {"table": lambda record, source: benchrecord.caption(record, source) + "\n\n" + table(record)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=["mnist", "copy"], choices=list(speed.CONFIGS))
    p.add_argument("--cells", nargs="+", default=["nn.LSTM", "lstm", "gru", "asrnn", "exprnn"])
    p.add_argument("--rounds", type=int, default=2, help="alternations of the two settings per cell")
    p.add_argument("--repeats", type=int, default=3, help="timed iterations per worker (median)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the record here (refused on a busy machine)")
    benchrecord.add_arguments(p)
    a = p.parse_args(argv)
    specs = [s for s in speed.plan(tuple(a.configs), a.cells) if s["label"] in a.cells]
    missing = set(a.cells) - {s["label"] for s in specs}
    if missing:
        have = sorted({s["label"] for s in speed.plan(tuple(a.configs))})
        p.error(f"unknown cells {sorted(missing)}: the configurations {a.configs} have {have}")

    def body():
        host = benchrecord.start(a.allow_load or not a.json, own=a.threads)
        rows = []
        for spec in specs:
            name = {"config": spec["config"]["name"], "cell": spec["label"], "hidden": spec["hidden"]}
            row = {**name, "keep": [], "flush": [], "wall": {s: [] for s in SETTINGS}, "seen": {}}
            for _ in range(a.rounds):
                for s in SETTINGS:
                    m = measure(spec, s, a.threads, a.repeats)
                    if "error" in m:
                        row = {**name, "error": m["error"]}
                        break
                    row[s].append(m["cpu"])
                    row["wall"][s].append(m["wall"])
                    row["seen"][s] = m["seen"]
                if "error" in row:
                    break
                benchrecord.sample(host)
            rows.append(row)
            print(row_line(row), file=sys.stderr, flush=True)
        cond = benchrecord.conditions(host, configs=a.configs, threads=a.threads, rounds=a.rounds, repeats=a.repeats)
        rec = {"conditions": cond, "rows": rows}
        benchrecord.publish(rec, a.json, VIEWS["table"](rec, a.json or "(not written)"))

    return benchrecord.exit_code(body)


if __name__ == "__main__":
    sys.exit(main())
