"""The ``RNNLAB_TRITON`` setting, read in one place (without importing Triton): whether the
element-wise recurrence may run the Triton kernel (:mod:`rnnlab.kernels.triton_recurrence`).
"""

from __future__ import annotations

import os

#: the values ``RNNLAB_TRITON`` understands (case and surrounding spaces ignored) -> the mode
MODES = {
    "": "auto",
    "auto": "auto",
    "0": "off",
    "off": "off",
    "false": "off",
    "no": "off",
    "1": "force",
    "force": "force",
    "on": "force",
    "true": "force",
    "yes": "force",
}


def mode() -> str:
    """The ``RNNLAB_TRITON`` setting: "auto" (default), "off" or "force"."""
    raw = os.environ.get("RNNLAB_TRITON", "auto")
    key = raw.strip().lower()
    if key not in MODES:
        raise ValueError(f"RNNLAB_TRITON={raw!r} is not understood; expected auto, 0/off or 1/force (or unset it)")
    return MODES[key]
