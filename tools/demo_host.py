"""The kind of host a record's numbers reproduce on exactly: the CPU model, the instruction set
torch dispatches on (AVX2, AVX512, ...), the BLAS and the torch build. ``make demo-record``
writes it to docs/demo/host.json; tests/project/test_demo_record.py compares every number only on such
a host (floating-point sums run in another order elsewhere).

    python tools/demo_host.py > docs/demo/host.json
"""

from __future__ import annotations

import json
import sys


def host() -> dict:
    import torch

    from rnnlab.device import blas_info, cpu_capability, cpu_model

    return {
        "cpu_model": cpu_model(),
        "cpu_capability": cpu_capability(),
        "blas": blas_info(),
        "torch": torch.__version__,
    }


if __name__ == "__main__":
    json.dump(host(), sys.stdout, indent=2)
    print()
    sys.exit(0)
