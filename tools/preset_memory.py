"""Peak memory of one training step of the pixel-MNIST presets of the DMU paper's Table IV
(and the coRNN / LEM psMNIST presets) at each preset's batch size.

For each preset, in a fresh process: the preset's model (``rnnlab.model.build_model``, pixel
MNIST's shapes: 784 steps of one input, 10 classes, the last step read out), then one forward
and backward pass on a random batch of the preset's ``train.batch_size``, one torch thread.
Prints JSON with the process's peak resident memory before and after the step (the difference
is what the step needs: mostly what autograd keeps of the 784 steps) and the step's seconds
(on a loaded machine a rough figure, not a benchmark):

    python tools/preset_memory.py > docs/table4-memory.json

docs/models.md ("Memory") quotes the memory column; a test checks it against the JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PRESETS = [
    f"dmu/{task}-{key}"
    for key in (
        "lstm",
        "momentumlstm",
        "urnn",
        "fcurnn",
        "softorth",
        "kru",
        "antisymrnn",
        "incrnn",
        "exprnn",
        "naisnet",
        "lipschitz",
    )
    for task in ("smnist", "psmnist")
] + ["cornn/psmnist", "lem/psmnist"]


def _measure(name: str) -> dict:
    import resource
    import time
    from types import SimpleNamespace

    import torch

    torch.set_num_threads(1)
    from rnnlab import config
    from rnnlab.model import build_model

    cfg = config.load(name)
    pixel_mnist = SimpleNamespace(model_kind="sequence", input_size=1, output_size=10, readout="last", num_tokens=None)
    torch.manual_seed(0)
    model = build_model(cfg.model, pixel_mnist)
    B = cfg.train.batch_size
    x, y = torch.randn(B, 784, 1), torch.randint(0, 10, (B,))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    out, _ = model(x)
    torch.nn.functional.cross_entropy(out, y).backward()
    seconds = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kib = 1 if sys.platform != "darwin" else 1024  # ru_maxrss: KiB on Linux, bytes on macOS
    return {
        "cell": cfg.model.cell,
        "hidden_size": cfg.model.hidden_size,
        "batch_size": B,
        "peak_before_mib": round(before / kib / 1024),
        "peak_after_mib": round(after / kib / 1024),
        "step_mib": round((after - before) / kib / 1024),
        "step_seconds": round(seconds, 1),
    }


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(_measure(sys.argv[2])))
        return 0
    import torch

    names = sys.argv[1:] or PRESETS
    rows = {}
    for name in names:
        r = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True, check=True)
        rows[name] = json.loads(r.stdout.strip().splitlines()[-1])
    from rnnlab.device import cpu_model

    cpu = cpu_model()
    print(
        json.dumps(
            {
                "command": "python tools/preset_memory.py",
                "cpu": cpu,
                "cores": os.cpu_count(),
                "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                "torch": torch.__version__,
                "threads": 1,
                "sequence_length": 784,
                "presets": rows,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
