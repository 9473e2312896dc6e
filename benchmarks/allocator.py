"""glibc allocator settings against training-iteration time and page faults (copy task rows).

    python benchmarks/allocator.py [--cells nn.LSTM exprnn] [--repeats 5]
    python benchmarks/allocator.py --json docs/allocator-results.json   # a record (refused when busy)

Each row runs the speed benchmark's worker (rnnlab/bench/speed.py) for one cell, alone in its
process (no interleaved baseline or reference), under one allocator setting:

* default: glibc as it comes;
* env MMAP_MAX=0: ``MALLOC_MMAP_MAX_=0`` only (no mmap-served allocations);
* env TRIM=2^40: ``MALLOC_TRIM_THRESHOLD_=1099511627776`` only (no heap trimming);
* env both: the two variables together;
* mallopt: ``rnnlab.runtime.tune_malloc()`` called at process start (what the CLI does).

A record (``--json``) carries the CPU model, the BLAS and the load average before, during and
after the run (:mod:`rnnlab.bench.benchrecord`); BENCHMARKS.md's table is generated from it
(``rnnlab.bench.benchdocs``, view ``allocator``).
"""

import argparse
import os
import sys

from rnnlab.bench import benchdocs, benchrecord, speed

SETTINGS = {
    "default": ({}, "default"),
    "env MMAP_MAX=0": ({"MALLOC_MMAP_MAX_": "0"}, "default"),
    "env TRIM=2^40": ({"MALLOC_TRIM_THRESHOLD_": "1099511627776"}, "default"),
    "env both": ({"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "1099511627776"}, "default"),
    "mallopt (tune_malloc)": ({}, "tuned"),
}


def measure(spec: dict, name: str, threads: int, repeats: int) -> dict:
    """One cell under one allocator setting, alone in a fresh worker process."""
    env, malloc = SETTINGS[name]
    spec = dict(spec, threads=threads, malloc=malloc, repeats=repeats, reference=False, baseline_hidden=None)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({k: v for k, v in saved.items() if not k.startswith("MALLOC_")}, RNNLAB_MALLOC="", **env)
    try:
        res = speed._spawn(spec, 1800)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    row = {"cell": spec["label"], "hidden": spec["hidden"], "allocator": name}
    if "error" in res:
        return {**row, "error": res["error"]}
    f = res["fast"]
    return {**row, "cpu": f["cpu"], "wall": f["wall"], "faults": f["faults"], "peak_mb": res["peak_mb"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", nargs="+", default=["nn.LSTM", "exprnn"])
    p.add_argument("--config", default="copy", choices=list(speed.CONFIGS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the record here (refused on a busy machine)")
    benchrecord.add_arguments(p)
    a = p.parse_args(argv)
    specs = [s for s in speed.plan((a.config,), a.cells) if s["label"] in a.cells]

    def body():
        host = benchrecord.start(a.allow_load or not a.json, own=a.threads)
        rows = []
        for spec in specs:
            for name in SETTINGS:
                rows.append(measure(spec, name, a.threads, a.repeats))
                benchrecord.sample(host)
                print(benchdocs.allocator_line(rows[-1]), file=sys.stderr, flush=True)
        cond = benchrecord.conditions(host, config=a.config, threads=a.threads, repeats=a.repeats)
        rec = {"conditions": cond, "rows": rows}
        benchrecord.publish(rec, a.json, benchdocs.VIEWS["allocator"](rec, a.json or "(not written)"))

    return benchrecord.exit_code(body)


if __name__ == "__main__":
    sys.exit(main())
