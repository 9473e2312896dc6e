"""The LT-RNN's linear recurrence ``h_t = W h_{t-1} + v_t``: three implementations side by side.

    python benchmarks/scan.py [--T 1000] [--sizes 8x8 16x64 128x32 128x128] [--repeats 5]
    python benchmarks/scan.py --json docs/scan-results.json     # a record (refused on a busy machine)

Per size (batch B x hidden H), in one process, interleaved repeat by repeat: forward + backward
(gradients for v, W and h0) of

* loop: an autograd loop of T matrix products (``linear_recurrence_loop``, the reference twin);
* fused: the same loop inside the fused kernel (``linear_recurrence_fused``: no graph in the
  forward, one product per step backward, the weight gradient as one product);
* scan: the chunked scan (``linear_recurrence_scan``, chunks of about sqrt(T) steps).

Prints the process-CPU-time medians and each one's speed-up over the loop (the median
[min-max] of the per-repeat ratios); one thread unless told (the allocator is tuned as the
CLI does); also which path ``backend="auto"`` takes. A record (``--json``) carries the CPU
model, the BLAS and the load average before, during and after the run
(:mod:`rnnlab.bench.benchrecord`); BENCHMARKS.md's table and the scan target are generated from it
(``rnnlab.bench.benchdocs``, view ``scan``).
"""

import argparse
import sys
import time

from rnnlab import runtime
from rnnlab.bench import benchdocs, benchrecord

IMPLS = ("loop", "fused", "scan")


def measure(T: int, B: int, H: int, repeats: int) -> dict:
    """One size: the per-repeat CPU seconds of the three implementations, interleaved."""
    import torch

    from rnnlab.kernels.dispatch import SCAN_MAX_STEP_MACS
    from rnnlab.kernels.scan import (
        linear_recurrence_fused,
        linear_recurrence_loop,
        linear_recurrence_scan,
    )

    impls = dict(zip(IMPLS, (linear_recurrence_loop, linear_recurrence_fused, linear_recurrence_scan)))
    g = torch.Generator().manual_seed(0)
    v = torch.randn(T, B, H, generator=g).requires_grad_()
    Q, _ = torch.linalg.qr(torch.randn(H, H, generator=g))
    W = Q.requires_grad_()  # orthogonal (LT-ORNN): the state neither blows up nor dies
    h0 = torch.zeros(B, H, requires_grad=True)
    r = torch.randn(T, B, H, generator=g)

    def step(fn):
        v.grad = W.grad = h0.grad = None
        (fn(v, W, h0) * r).sum().backward()

    for fn in impls.values():
        step(fn)  # warm-up
    times = {k: [] for k in impls}
    for _ in range(repeats):
        for k, fn in impls.items():
            c0 = time.process_time()
            step(fn)
            times[k].append(round(time.process_time() - c0, 6))
    auto = "scan" if B * H * H <= SCAN_MAX_STEP_MACS else "fused"
    return {"B": B, "H": H, "T": T, "times_s": times, "auto": auto}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", type=int, default=1000)
    p.add_argument("--sizes", nargs="+", default=["8x8", "16x64", "128x32", "128x128"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the record here (refused on a busy machine)")
    benchrecord.add_arguments(p)
    a = p.parse_args(argv)
    runtime.tune_malloc()
    import torch

    torch.set_num_threads(a.threads)

    def body():
        host = benchrecord.start(a.allow_load or not a.json, own=a.threads)
        rows = []
        for size in a.sizes:
            B, H = (int(s) for s in size.split("x"))
            rows.append(measure(a.T, B, H, a.repeats))
            benchrecord.sample(host)
            print(f"{size}: done", file=sys.stderr, flush=True)
        cond = benchrecord.conditions(host, torch=torch.__version__, threads=torch.get_num_threads(), repeats=a.repeats)
        rec = {"conditions": cond, "rows": rows}
        benchrecord.publish(rec, a.json, benchdocs.VIEWS["scan"](rec, a.json or "(not written)"))

    return benchrecord.exit_code(body)


if __name__ == "__main__":
    raise SystemExit(main())
