"""Tiny models' training step: before and after the compiled loops, beside a scalar floor.

    python benchmarks/small_models.py                                  # print the table
    python benchmarks/small_models.py --json docs/small-results.json   # a record (refused on a busy machine)
    python benchmarks/small_models.py --presets dmu/adding-rnn --sizes 1 8 51 --steps 8
    python benchmarks/small_models.py --widths      # one layer, compiled loops against the previous path
    python benchmarks/small_models.py --sizes 1 8 51 --vmap   # ensembles' forward under vmap (no direct forward)

For the 15 DMU synthetic presets (adding, temporal order, noisy sequence x RNN, LSTM, GRU, RHN,
DMU; batch 32) at E = 1 (one run) and E = 51 (an ensemble), in one process on one thread, the
CPU time per training step of the previous path (before), the default path (after: the
compiled loops of rnnlab.kernels.small and the ensemble's stacked optimizer step), and a plain
scalar compiled loop of the recurrences' arithmetic (``benchmarks/small_floor.c``, timed in the
same step); then each preset's evaluation, one run against the ensemble
(:mod:`rnnlab.bench.small_bench` says exactly what each column holds). A record (``--json``)
carries the CPU model, the BLAS and the load average (:mod:`rnnlab.bench.benchrecord`); BENCHMARKS.md's
table is generated from it (``rnnlab.bench.benchdocs``, view ``small``).

``--widths`` times one layer's forward and backward instead (batch 32, T = 100), the compiled
loops against each cell's previous fast path at widths 4 to 32, for one model and 51: the
measurement behind ``rnnlab.kernels.dispatch.AUTO_MAX_WIDTH`` (printed, not recorded).

``--vmap`` turns the ensembles' direct forward off (``rnnlab.stacked_model.DIRECT``), so that
the batched model runs under ``torch.func.vmap`` as it did before it: the same tables for the
path the direct forward replaced, on the same machine (the record says ``"direct": false``).
"""

import argparse
import sys
from pathlib import Path

from rnnlab import runtime
from rnnlab.bench import benchdocs, benchrecord, small_bench

FLOOR = Path(__file__).with_name("small_floor.c")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=list(small_bench.PRESETS))
    p.add_argument("--sizes", nargs="+", type=int, default=list(small_bench.SIZES))
    p.add_argument("--steps", type=int, default=8, help="measured steps at E = 1 (half as many for ensembles)")
    p.add_argument("--widths", action="store_true", help="time one layer at widths 4-32 instead (AUTO_MAX_WIDTH)")
    p.add_argument("--json", help="write the record here (refused on a busy machine)")
    p.add_argument(
        "--vmap",
        action="store_true",
        help="ensembles' forward under vmap, not the direct forward (rnnlab.stacked_model.DIRECT)",
    )
    benchrecord.add_arguments(p)
    a = p.parse_args(argv)
    runtime.tune_malloc()
    import torch

    from rnnlab import stacked_model

    if a.vmap:
        stacked_model.DIRECT = False

    if a.widths:
        log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        print(small_bench.format_widths(small_bench.width_rows(sizes=a.sizes, log=log)))
        return 0

    def body():
        host = benchrecord.start(a.allow_load or not a.json, own=1)
        rows = small_bench.run(
            a.presets,
            a.sizes,
            FLOOR,
            a.steps,
            log=lambda line: print(line, file=sys.stderr, flush=True),
            between=lambda: benchrecord.sample(host),
        )
        cond = benchrecord.conditions(
            host,
            torch=torch.__version__,
            threads=1,
            steps=a.steps,
            batch=small_bench.BATCH,
            direct=stacked_model.DIRECT,
        )
        rec = {"conditions": cond, "rows": rows}
        benchrecord.publish(rec, a.json, benchdocs.VIEWS["small"](rec, a.json or "(not written)"))

    return benchrecord.exit_code(body)


if __name__ == "__main__":
    raise SystemExit(main())
