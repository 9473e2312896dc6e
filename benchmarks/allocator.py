"""glibc allocator settings against training-iteration time and page faults (copy task rows).

    python benchmarks/allocator.py [--cells nn.LSTM exprnn] [--repeats 5]

Each row runs the speed benchmark's worker (rnnlab/speed.py) for one cell, alone in its
process (no interleaved baseline or reference), under one allocator setting:

* default: glibc as it comes;
* env MMAP_MAX=0: ``MALLOC_MMAP_MAX_=0`` only (no mmap-served allocations);
* env TRIM=2^40: ``MALLOC_TRIM_THRESHOLD_=1099511627776`` only (no heap trimming);
* env both: the two variables together;
* mallopt: ``rnnlab.runtime.tune_malloc()`` called at process start (what the CLI does).
"""

import argparse
import os
import sys

from rnnlab import speed

SETTINGS = {
    "default": ({}, "default"),
    "env MMAP_MAX=0": ({"MALLOC_MMAP_MAX_": "0"}, "default"),
    "env TRIM=2^40": ({"MALLOC_TRIM_THRESHOLD_": "1099511627776"}, "default"),
    "env both": ({"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "1099511627776"}, "default"),
    "mallopt (tune_malloc)": ({}, "tuned"),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", nargs="+", default=["nn.LSTM", "exprnn"])
    p.add_argument("--config", default="copy", choices=list(speed.CONFIGS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    specs = [s for s in speed.plan((a.config,), a.cells) if s["label"] in a.cells]
    lines = ["| cell | allocator | train s/it CPU (wall) | minor faults/it | peak MB |", "|---|---|---|---|---|"]
    saved = dict(os.environ)
    for spec in specs:
        for name, (env, malloc) in SETTINGS.items():
            spec = dict(
                spec, threads=a.threads, malloc=malloc, repeats=a.repeats, reference=False, baseline_hidden=None
            )
            os.environ.clear()
            os.environ.update({k: v for k, v in saved.items() if not k.startswith("MALLOC_")}, RNNLAB_MALLOC="", **env)
            try:
                res = speed._spawn(spec, 1800)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            if "error" in res:
                line = f"| {spec['label']} n={spec['hidden']} | {name} | error: {res['error'][:60]} | | |"
            else:
                f = res["fast"]
                line = (
                    f"| {spec['label']} n={spec['hidden']} | {name} | {f['cpu']:.3f} ({f['wall']:.3f}) "
                    f"| {f['faults']:.0f} | {res['peak_mb']:.0f} |"
                )
            print(line, file=sys.stderr, flush=True)
            lines.append(line)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
