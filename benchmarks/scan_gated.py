"""One training step of the gated cells of issue 59: the parallel path against the step loop
and against a floor.

    python benchmarks/scan_gated.py [--T 1024] [--B 32] [--H 256] [--repeats 3] [--cells ...]
    python benchmarks/scan_gated.py --json docs/scan-gated-results.json   # a record (refused when busy)

Per cell (a one-layer ``Recurrent`` of input and hidden width H, float32, one thread), in one
process, interleaved repeat by repeat: forward + backward (a random linear loss on the outputs,
gradients for every parameter and the input) of

* parallel: the cell's parallel path (minGRU/minLSTM: ``backend="scan"``, the log-space scan;
  mLSTM: the chunkwise parallel form; sLSTM has no parallel form: its ``sequence``, the step
  loop with the input terms of all steps in one product);
* fast loop (minGRU/minLSTM only): ``backend="loop"``, the element-wise loop over precomputed
  input terms (the default on the CPU);
* loop: the same layer with ``backend="reference"`` (:func:`rnnlab.unroll`, the step loop);
* floor: ``torch.cumsum`` over a (T, B, H) tensor, forward and backward: the least memory
  traffic a diagonal scan over the outputs can have.

Prints the medians of process CPU seconds and the ratios loop / parallel and parallel / floor
(medians of the per-repeat ratios). A record (``--json``) carries the CPU model and the load
before, during and after (:mod:`rnnlab.bench.benchrecord`); docs/models.md's table is generated
from it (view ``table`` of this file's :data:`VIEWS`).
The mLSTM runs with ``heads`` = H / 16 (head size 16): its step loop keeps a (B, heads, d, d)
memory per step for the backward, which at head size 64 would not fit a small machine.
"""

import argparse
import statistics
import sys
import time

from rnnlab.bench import benchrecord

CELLS = ("mingru", "minlstm", "mlstm", "slstm")
#: the backend of each measured path, per cell
PATHS = {
    "mingru": {"parallel": "scan", "fast loop": "loop", "loop": "reference"},
    "minlstm": {"parallel": "scan", "fast loop": "loop", "loop": "reference"},
    "mlstm": {"parallel": "auto", "loop": "reference"},
    "slstm": {"parallel": "auto", "loop": "reference"},
}


def build(key: str, H: int, backend: str):
    import torch

    from rnnlab.cells import CELLS as REGISTRY
    from rnnlab.cells import Recurrent

    options = {"mlstm": {"heads": max(H // 16, 1)}, "slstm": {"heads": 4}}.get(key, {})
    torch.manual_seed(0)
    return Recurrent(H, H, cell=REGISTRY[key], backend=backend, **options)


def measure(key: str, T: int, B: int, H: int, repeats: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, B, H, generator=g).requires_grad_()
    r = torch.randn(T, B, H, generator=g)
    floor_in = torch.randn(T, B, H, generator=g).requires_grad_()

    def step_layer(layer):
        def run():
            layer.zero_grad(set_to_none=True)
            x.grad = None
            out, _ = layer(x)
            (out * r).sum().backward()

        return run

    def step_floor():
        floor_in.grad = None
        (torch.cumsum(floor_in, 0) * r).sum().backward()

    runs = {name: step_layer(build(key, H, backend)) for name, backend in PATHS[key].items()}
    runs["floor"] = step_floor
    for fn in runs.values():
        fn()  # warm-up
    times = {k: [] for k in runs}
    for _ in range(repeats):
        for k, fn in runs.items():
            c0 = time.process_time()
            fn()
            times[k].append(time.process_time() - c0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "seconds": med,
        "loop/parallel": statistics.median(a / b for a, b in zip(times["loop"], times["parallel"])),
        "parallel/floor": statistics.median(a / b for a, b in zip(times["parallel"], times["floor"])),
    }


def row_line(row: dict) -> str:
    s = row["seconds"]
    fast = f"{s['fast loop']:.3f}" if "fast loop" in s else "-"
    return (
        f"| {row['cell']} | {s['parallel']:.3f} | {fast} | {s['loop']:.3f} | {s['floor']:.4f} | "
        f"{row['loop/parallel']:.2f} | {row['parallel/floor']:.1f} |"
    )


def table(record: dict) -> str:
    c = record["conditions"]
    head = (
        f"T = {c['T']}, B = {c['B']}, H = {c['H']}, one thread, float32, {c['repeats']} repeats (medians of "
        "process CPU seconds; the ratios are medians of per-repeat ratios)\n\n"
        "| cell | parallel s | fast loop s | step loop s | floor s | step loop / parallel | parallel / floor |\n"
        "|---|---|---|---|---|---|---|"
    )
    return "\n".join([head] + [row_line(r) for r in record["rows"]])


VIEWS = {"table": lambda record, source: benchrecord.caption(record, source) + "\n\n" + table(record)}


def main(argv=None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--B", type=int, default=32)
    p.add_argument("--H", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cells", nargs="+", default=list(CELLS), choices=CELLS)
    p.add_argument("--json", help="write the record here (refused on a busy machine)")
    benchrecord.add_arguments(p)
    a = p.parse_args(argv)
    torch.set_num_threads(1)

    def body():
        host = benchrecord.start(a.allow_load or not a.json, own=1)
        rows = []
        for key in a.cells:
            rows.append({"cell": key, **measure(key, a.T, a.B, a.H, a.repeats)})
            print(row_line(rows[-1]), file=sys.stderr, flush=True)
            benchrecord.sample(host)
        cond = benchrecord.conditions(host, T=a.T, B=a.B, H=a.H, repeats=a.repeats, threads=1)
        rec = {"conditions": cond, "rows": rows}
        benchrecord.publish(rec, a.json, VIEWS["table"](rec, a.json or "(not written)"))

    return benchrecord.exit_code(body)


if __name__ == "__main__":
    sys.exit(main())
