"""The host's CPU as ``/proc/cpuinfo`` shows it: one reader for the compiled kernels' cache key
(model name and instruction-set flags) and for the CPU that :mod:`rnnlab.device` writes into
records (model name, family and model numbers). Torch-free; imports nothing of the package."""

from __future__ import annotations

import functools
import platform


@functools.cache
def cpuinfo() -> dict[str, str]:
    """The first processor's block of ``/proc/cpuinfo`` as ``{lower-case key: value}`` (Linux);
    {} where there is none. The one reader of that file: the model name, the family and model
    numbers and the instruction-set flags all come from here."""
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if found:  # the first processor's block is enough
                        break
                    continue
                key, _, value = line.partition(":")
                found.setdefault(key.strip().lower(), value.strip())
    except OSError:
        return {}
    return found


def platform_name() -> str:
    """What :mod:`platform` calls the processor (``platform.processor()``, often empty on Linux,
    else the architecture, e.g. ``x86_64``): the fallback where ``/proc/cpuinfo`` says nothing."""
    return platform.processor() or platform.machine()


def model_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else :func:`platform_name`; "" where
    neither knows."""
    return cpuinfo().get("model name") or platform_name()
