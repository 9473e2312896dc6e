"""The diagonal recurrences of the LRU, S4D and Mamba (S6): one training step, scan against step
loop against a memory-traffic floor (docs/ssm.md).

    python benchmarks/ssm_scan.py [--T 1024] [--B 32] [--repeats 3] [--json out.json]
    python benchmarks/ssm_scan.py --crossover       # scan vs fused step loop by step size (backend="auto")

At batch B, T steps, 256 state units per example (LRU: N = 256 complex; S4D: 32 channels x 8
complex modes; Mamba: 16 channels x 16 real states, i.e. H = 8 at expand 2), float32, one
thread. Two tables, each timed forward + backward (every gradient), interleaved repeat by
repeat, medians of the process CPU time:

* kernel: the recurrence ``h_t = a_t * h_{t-1} + b_t`` alone on the model's tensors: the chunked
  scan, the fused step loop (one autograd Function, hand-written adjoint), the autograd step loop
  (:func:`diagonal_recurrence_loop`), and the floor, ``torch.cumsum`` over a tensor of the same
  shape and dtype (forward + backward: one read and one write each way), beside ``copy``
  (``b * 2``, forward + backward: the same traffic at the speed of an element-wise pass; on
  this CPU torch's cumsum along the leading dimension is slower than that);
* cell: the whole cell's ``sequence`` (projections, conv, gates, readout included) per backend,
  ``reference`` being the step loop over ``forward`` (rnnlab.unroll).

glibc's allocator is tuned as the CLI tunes it (rnnlab.runtime.tune_malloc) and every fast
variant runs once untimed first. Ratios are to the floor. Few repeats: the autograd step loops at T = 1024 take seconds, so
they are timed once (the first repeat).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from rnnlab import runtime
from rnnlab.bench import benchrecord
from rnnlab.cells import LRUCell, MambaCell, S4DCell
from rnnlab.kernels.scan import diagonal_recurrence, diagonal_recurrence_loop

STATE = 256


def models(B: int):
    """name -> (cell builder, input width, kernel tensors (a, b, h0) of the model's shapes)."""
    c64 = torch.complex64

    def cplx(*shape):
        return torch.complex(torch.randn(*shape), torch.randn(*shape)).to(c64)

    return {
        "lru": (lambda backend: LRUCell(STATE, STATE, r_min=0.9, r_max=0.999, backend=backend), STATE,
                lambda T: (0.99 * torch.polar(torch.ones(STATE), torch.rand(STATE)), cplx(T, B, STATE), cplx(B, STATE))),
        "s4d": (lambda backend: S4DCell(32, 32, state_size=16, backend=backend), 32,
                lambda T: (0.99 * torch.polar(torch.ones(32, 8), torch.rand(32, 8)), cplx(T, B, 32, 8), cplx(B, 32, 8))),
        "mamba": (lambda backend: MambaCell(8, 8, state_size=16, expand=2, backend=backend), 8,
                  lambda T: (torch.rand(T, B, 16, 16) * 0.5 + 0.5, torch.randn(T, B, 16, 16), torch.randn(B, 16, 16))),
    }  # fmt: skip


def _time(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def kernel_step(a, b, h0, how: str):
    a, b, h0 = (t.clone().requires_grad_() for t in (a, b, h0))
    if how == "floor":
        h = torch.cumsum(b, 0)
    elif how == "copy":
        h = b * 2.0
    elif how == "autograd loop":
        h = diagonal_recurrence_loop(a, b, h0)
    else:
        h = diagonal_recurrence(a, b, h0, b.shape[0] if how == "fused step" else None)
    (h.real if h.is_complex() else h).sum().backward()


def cell_step(cell, x):
    out, state = cell.sequence(x)
    (out.sum() + sum(s.sum() for s in state)).backward()


SLOW = ("kernel autograd loop", "cell reference")


def measure(T: int, B: int, repeats: int, log=print) -> dict:
    """The medians per model; the two step loops over autograd (SLOW) are timed in the first
    repeat only (seconds each at T = 1,024). Each model's row is logged when it is done."""
    torch.manual_seed(0)
    rows = {}
    for name, (build, I, tensors) in models(B).items():
        a, b, h0 = tensors(T)
        kernels = ("floor", "copy", "scan", "fused step", "autograd loop")
        cells = {bk: build(bk) for bk in ("scan", "step", "reference") + (("conv",) if name == "s4d" else ())}
        for c in cells.values():
            c.load_state_dict(cells["scan"].state_dict())
        x = torch.randn(T, B, I)
        times = {f"kernel {k}": [] for k in kernels} | {f"cell {k}": [] for k in cells}
        for k in kernels[:4]:  # warm-up, untimed: the heap grows to its size once
            kernel_step(a, b, h0, k)
        for k in ("scan", "step"):
            cell_step(cells[k], x)
        for rep in range(repeats):  # interleaved: each repeat times every variant once
            for k in kernels:
                if rep == 0 or f"kernel {k}" not in SLOW:
                    times[f"kernel {k}"].append(_time(lambda k=k, t=(a, b, h0): kernel_step(*t, k)))
            for k, c in cells.items():
                if rep == 0 or f"cell {k}" not in SLOW:
                    times[f"cell {k}"].append(_time(lambda c=c, x=x: cell_step(c, x)))
        rows[name] = {k: statistics.median(v) for k, v in times.items()}
        rows[name]["tensor"] = f"{tuple(b.shape)} {str(b.dtype).removeprefix('torch.')}"
        log(_lines(name, rows[name]), flush=True)
    return rows


def _lines(name: str, r: dict) -> str:
    floor, copy = r["kernel floor"], r["kernel copy"]
    return "\n".join(
        f"| {name} | {r['tensor']} | {k} | {1e3 * v:.1f} | {v / floor:.2f} | {v / copy:.1f} |"
        for k, v in r.items()
        if k != "tensor"
    )


def crossover(T: int, repeats: int) -> list[tuple[int, int, float, float]]:
    """Scan and fused step loop (kernel, forward + backward, a time-invariant complex ``a``) at
    T steps, over the size of one step (batch x state units)."""
    out = []
    for B, N in ((1, 8), (1, 64), (4, 64), (8, 128), (32, 256)):
        a = 0.99 * torch.polar(torch.ones(N), torch.rand(N))
        b = torch.complex(torch.randn(T, B, N), torch.randn(T, B, N))
        h0 = torch.zeros(B, N, dtype=b.dtype)
        s, f = [], []
        for _ in range(repeats):
            s.append(_time(lambda t=(a, b, h0): kernel_step(*t, "scan")))
            f.append(_time(lambda t=(a, b, h0): kernel_step(*t, "fused step")))
        out.append((B, N, statistics.median(s), statistics.median(f)))
    return out


def table(record: dict) -> str:
    c = record["conditions"]
    head = (
        f"One training step (forward + backward), B = {c['B']}, T = {c['T']}, one thread, float32, median of "
        f"{c['repeats']} ({', '.join(SLOW)}: 1) (process CPU ms; ratios to the cumsum floor and to the copy)\n\n"
        "| model | tensor | path | ms | x cumsum floor | x copy |\n|---|---|---|---:|---:|---:|"
    )
    return "\n".join([head] + [_lines(name, r) for name, r in record["rows"].items()])


VIEWS = {"table": lambda record, source: benchrecord.caption(record, source) + "\n\n" + table(record)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--B", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--crossover", action="store_true")
    ap.add_argument("--json", default=None, help="write the record here (refused on a busy machine)")
    benchrecord.add_arguments(ap)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    runtime.tune_malloc()  # as the CLI does: no mmap per large tensor (page faults timed otherwise)
    if args.crossover:
        print(f"T={args.T}, complex64, 1 thread, median of {args.repeats} (process CPU ms)")
        print("| B | N | B x N | scan | fused step | step / scan |\n|---:|---:|---:|---:|---:|---:|")
        for B, N, s, f in crossover(args.T, args.repeats):
            print(f"| {B} | {N} | {B * N} | {1e3 * s:.1f} | {1e3 * f:.1f} | {f / s:.2f} |")
        return 0

    def body():
        host = benchrecord.start(args.allow_load or not args.json, own=1)
        rows = measure(args.T, args.B, args.repeats, log=lambda *a, **k: print(*a, file=sys.stderr, **k))
        benchrecord.sample(host)
        cond = benchrecord.conditions(host, T=args.T, B=args.B, repeats=args.repeats, threads=1)
        rec = {"conditions": cond, "rows": rows}
        benchrecord.publish(rec, args.json, VIEWS["table"](rec, args.json or "(not written)"))

    return benchrecord.exit_code(body)


if __name__ == "__main__":
    sys.exit(main())
