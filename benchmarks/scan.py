"""The LT-RNN's linear recurrence ``h_t = W h_{t-1} + v_t``: three implementations side by side.

    python benchmarks/scan.py [--T 1000] [--sizes 8x8 16x64 128x32 128x128] [--repeats 5]

Per size (batch B x hidden H), in one process, interleaved repeat by repeat: forward + backward
(gradients for v, W and h0) of

* loop: an autograd loop of T matrix products (``linear_recurrence_loop``, the reference twin);
* fused: the same loop inside the fused kernel (``linear_recurrence_fused``: no graph in the
  forward, one product per step backward, the weight gradient as one product);
* scan: the chunked scan (``linear_recurrence_scan``, chunks of about sqrt(T) steps).

Prints process-CPU-time medians and the ratio of each to the loop; one thread unless told
(the allocator is tuned as the CLI does). Also records which path ``backend="auto"`` takes.
"""

import argparse
import statistics
import time

from rnnlab import runtime


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", type=int, default=1000)
    p.add_argument("--sizes", nargs="+", default=["8x8", "16x64", "128x32", "128x128"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    runtime.tune_malloc()
    import torch

    from rnnlab.kernels.scan import (
        SCAN_MAX_STEP_MACS,
        linear_recurrence_fused,
        linear_recurrence_loop,
        linear_recurrence_scan,
    )

    torch.set_num_threads(a.threads)
    impls = {"loop": linear_recurrence_loop, "fused": linear_recurrence_fused, "scan": linear_recurrence_scan}
    print(
        f"T={a.T}, threads={torch.get_num_threads()}, torch {torch.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print()
    print("| B x H | loop s | fused s | scan s | fused vs loop | scan vs loop | auto takes |")
    print("|---|---|---|---|---|---|---|")
    for size in a.sizes:
        B, H = (int(s) for s in size.split("x"))
        g = torch.Generator().manual_seed(0)
        v = torch.randn(a.T, B, H, generator=g).requires_grad_()
        Q, _ = torch.linalg.qr(torch.randn(H, H, generator=g))
        W = Q.requires_grad_()  # orthogonal (LT-ORNN): the state neither blows up nor dies
        h0 = torch.zeros(B, H, requires_grad=True)
        r = torch.randn(a.T, B, H, generator=g)

        def step(fn, v=v, W=W, h0=h0, r=r):
            v.grad = W.grad = h0.grad = None
            (fn(v, W, h0) * r).sum().backward()

        for fn in impls.values():
            step(fn)  # warm-up
        times = {k: [] for k in impls}
        for _ in range(a.repeats):
            for k, fn in impls.items():
                c0 = time.process_time()
                step(fn)
                times[k].append(time.process_time() - c0)
        med = {k: statistics.median(t) for k, t in times.items()}
        auto = "scan" if B * H * H <= SCAN_MAX_STEP_MACS else "fused"
        print(
            f"| {B} x {H} | {med['loop']:.3f} | {med['fused']:.3f} | {med['scan']:.3f} | "
            f"{med['loop'] / med['fused']:.2f}x faster | {med['loop'] / med['scan']:.2f}x faster | {auto} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
