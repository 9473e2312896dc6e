"""How much precision the asRNN fast path (transformed coordinates g = W_f h) loses, against
the step loop, as D_f gets ill-conditioned and U_f moves away from a signed permutation.

    PYTHONPATH=src python benchmarks/asrnn_fast_path_precision.py [--steps 1] [--hidden 64]

For each (cond(D_f), scale of U_f's skew parameter) it prints kappa (the cell's
``amplification()``) and the relative errors (2-norm, worst over outputs and over every
parameter's gradient) of: the fast path in float64, the fast path in float32 and the step
loop in float32, all against the step loop in float64. d is log-spaced over [3/cond, 3].
"""

import argparse
import math

import torch

from rnnlab import ASRNNCell


def make(H, cond, scale, seed=0):
    torch.manual_seed(seed)
    c = ASRNNCell(10, H, init="henaff").double()
    with torch.no_grad():
        c.parametrizations.weight_uf.original.copy_(scale * torch.randn(H, H, dtype=torch.float64))
        s = torch.exp(torch.linspace(math.log(3 / cond), math.log(3.0), H, dtype=torch.float64))
        c.parametrizations.diag_f.original.copy_(s[torch.randperm(H)] - c.eps)
    return c


def run(c, T, backend, dtype):
    c = c.to(dtype)
    c.backend = backend
    g = torch.Generator().manual_seed(3)
    x = torch.randn(T, 8, 10, generator=g, dtype=torch.float64).to(dtype)
    h0 = torch.randn(8, c.hidden_size, generator=g, dtype=torch.float64).to(dtype)
    c.zero_grad()
    o = c.sequence(x, h0)[0]
    w = torch.randn(o.shape, generator=g, dtype=torch.float64).to(dtype)
    (o * w).sum().backward()
    res = o.detach().double(), {n: p.grad.double().clone() for n, p in c.named_parameters()}
    c.double()
    return res


def err(a, b):
    (oa, ga), (ob, gb) = a, b
    rel = lambda u, v: ((u - v).norm() / v.norm()).item()  # noqa: E731
    return rel(oa, ob), max(rel(ga[n], gb[n]) for n in gb)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"T = {args.steps} step(s), H = {args.hidden}, batch 8; relative errors out / worst gradient\n")
    print("| cond(D_f) | U_f skew scale | kappa | fast f64 | fast f32 | step loop f32 |")
    print("|---|---|---|---|---|---|")
    for cond in (1e1, 1e3, 1e5):
        for scale in (0.0, 1e-3, 1e-2, 1e-1, 1.0):
            c = make(args.hidden, cond, scale)
            ref = run(c, args.steps, "reference", torch.float64)
            cells = []
            for backend, dtype in (("fast", torch.float64), ("fast", torch.float32), ("reference", torch.float32)):
                o, g = err(run(c, args.steps, backend, dtype), ref)
                cells.append(f"{o:.1e} / {g:.1e}")
            print(f"| {cond:.0e} | {scale:g} | {c.amplification():.1e} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
