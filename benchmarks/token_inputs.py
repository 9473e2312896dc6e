"""An ensemble's training step with one-hot inputs given to the first layer as tokens, against
the path before (one-hot vectors times the input weights), side by side in one process.

    python benchmarks/token_inputs.py                       # the one-hot DMU presets at E = 1, 8 and 51
    python benchmarks/token_inputs.py --presets dmu/noisy_sequence-gru dmu/adding-dmu --sizes 51 --steps 10

For each preset and size one ensemble (``rnnlab.ensemble.started``, batch 32, one thread) steps
with :data:`rnnlab.kernels.ensemble.TOKEN_INPUTS` off ("before": the one-hot vectors and a
batched product) and on ("after": the weight's columns gathered), and with the benchmark's scalar
floor in place of the compiled loops (``benchmarks/small_floor.c``: only the time inside it
counts), interleaved one step of each per repeat, the order reversed every other repeat; the
table gives the medians of this thread's CPU time (``time.thread_time``) and one evaluation of
the validation split each way; then eight runs in turn (8 x the step at E = 1) against one
ensemble of 8 (E = 1 is a single run, as ``rnnlab train`` runs one seed, which reads the tokens
too). A preset without one-hot inputs (the adding task) is a control: its two columns time the
same code. Printed, not recorded.
"""

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

from rnnlab import runtime
from rnnlab.bench import small_bench

FLOOR = Path(__file__).with_name("small_floor.c")
PRESETS = [p for p in small_bench.PRESETS if "adding" not in p] + ["dmu/adding-dmu"]


def time_preset(preset: str, size: int, floor: dict, steps: int, warmup: int = 2) -> dict:
    from rnnlab.ensemble import started
    from rnnlab.kernels import ensemble as K
    from rnnlab.tasks import build_task

    cfg = small_bench._cfg(preset, "auto")
    task = build_task(cfg.task)

    @contextlib.contextmanager
    def tokens(on: bool):
        was = K.TOKEN_INPUTS
        K.TOKEN_INPUTS = on
        try:
            yield
        finally:
            K.TOKEN_INPUTS = was

    batched = size > 1  # E = 1: a single run (a group of one), as `rnnlab train` runs it
    with tempfile.TemporaryDirectory() as tmp, started(cfg, range(size), Path(tmp), task, batched=batched) as group:
        ms = list(group.members)

        def variant(on: bool, libs=None):
            def run():
                with tokens(on), small_bench.timed_kernels(libs) as spent:
                    t = time.thread_time()
                    group.step(ms)
                    return time.thread_time() - t, spent[0]

            return run

        variants = {"before": variant(False), "after": variant(True), "floor": variant(True, floor)}
        med = small_bench.interleaved(variants, steps, warmup)
        row = {
            "preset": preset,
            "E": size,
            "before": med("before", 0),
            "after": med("after", 0),
            "after_kernels": med("after", 1),
            "floor": med("floor", 1),
        }
        for k, on in (("eval_before", False), ("eval_after", True)):
            with tokens(on):
                t = time.thread_time()
                group.evaluate(ms)
                row[k] = time.thread_time() - t
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=PRESETS)
    p.add_argument("--sizes", nargs="+", type=int, default=[1, 8, 51])
    p.add_argument("--steps", type=int, default=7)
    a = p.parse_args(argv)
    runtime.tune_malloc()
    import torch

    torch.set_num_threads(1)
    print(
        "| preset | E | before (ms) | after (ms) | before / after | kernels, after (ms) | floor (ms) "
        "| before / floor | after / floor | evaluation before / after (s) |"
    )
    print("|" + "---|" * 10)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        floor = small_bench.build_floor(FLOOR, Path(tmp))
        time_preset(a.presets[0], a.sizes[0], floor, 1)  # a discarded round (the first preset of a process runs slow)
        for preset in a.presets:
            for size in a.sizes:
                r = rows[preset, size] = time_preset(preset, size, floor, a.steps)
                f = r["floor"]
                print(
                    f"| {preset} | {size} | {r['before'] * 1e3:.1f} | {r['after'] * 1e3:.1f} | "
                    f"{r['before'] / r['after']:.2f}x | {r['after_kernels'] * 1e3:.1f} | {f * 1e3:.1f} | "
                    f"{r['before'] / f:.2f} | {r['after'] / f:.2f} | "
                    f"{r['eval_before']:.2f} / {r['eval_after']:.2f} |",
                    flush=True,
                )
    turns = [p for p in a.presets if (p, 1) in rows and (p, 8) in rows]
    if turns:
        print("\n| preset | 8 runs in turn / one ensemble of 8, before | the same, after |\n|---|---|---|")
        for p in turns:
            one, eight = rows[p, 1], rows[p, 8]
            print(f"| {p} | {8 * one['before'] / eight['before']:.2f}x | {8 * one['after'] / eight['after']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
