"""How much slower small recurrent layers run with torch's default threads than with one.

Times forward + backward of a few layer sizes (rnnlab.LSTM, rnnlab.ASRNN and torch.nn.RNN; batch
B, 100 steps, 8 inputs) in a fresh process per thread count, best of 5, and prints JSON with
the ratio default / one thread, the host's CPU and its load average (the ratio depends on how
busy the other cores are):

    python tools/threads_probe.py > docs/threads-probe.json

A probe, not a benchmark: docs/layers.md ("Threads") quotes its order of magnitude.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

SIZES = [(32, 16), (64, 16), (128, 32), (512, 64)]  # (H, B)


def _time(threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    import rnnlab

    makers = {
        "rnnlab.LSTM": lambda H: rnnlab.LSTM(8, H, batch_first=True),
        "rnnlab.ASRNN": lambda H: rnnlab.ASRNN(8, H, batch_first=True),
        "torch.nn.RNN": lambda H: torch.nn.RNN(8, H, batch_first=True),
    }
    out = {}
    import warnings

    warnings.simplefilter("ignore", rnnlab.ThreadsWarning)
    for name, make in makers.items():
        for H, B in SIZES:
            torch.manual_seed(0)
            m = make(H)
            x = torch.randn(B, 100, 8)
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                m(x)[0].square().mean().backward()
                best = min(best, time.perf_counter() - t)
            out[f"{name} H={H} B={B}"] = best
    return out


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(_time(int(sys.argv[2]))))
        return 0
    import torch

    default = torch.get_num_threads()
    runs = {}
    for n in (1, default):
        r = subprocess.run([sys.executable, __file__, "--child", str(n)], capture_output=True, text=True, check=True)
        runs[n] = json.loads(r.stdout)
    from rnnlab.device import cpu_model

    cpu = cpu_model()
    print(
        json.dumps(
            {
                "command": "python tools/threads_probe.py",
                "cpu": cpu,
                "cores": os.cpu_count(),
                "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                "torch": torch.__version__,
                "default_threads": default,
                "seconds_one_thread": runs[1],
                "seconds_default_threads": runs[default],
                "ratio_default_over_one": {k: round(runs[default][k] / runs[1][k], 2) for k in runs[1]},
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
