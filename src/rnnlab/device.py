"""Where a run computes and in which precision: ``train.device`` and ``train.precision``.

``train.device``: ``auto`` (CUDA if available, else MPS, else the CPU), ``cpu``, ``cuda``,
``cuda:N`` or ``mps``. ``train.precision``: ``fp32`` (no autocast), ``bf16`` or ``fp16``
(``torch.autocast`` over the forward pass and the loss; fp16 adds a gradient scaler). What runs
in which dtype under autocast is documented in :mod:`rnnlab.kernels.amp` and docs/device.md.

:func:`resolve` checks both before a run writes anything and fails with one line naming the
device asked for, what this machine has and the choices.
"""

from __future__ import annotations

import contextlib
import platform
import re

import torch

from .config import DEVICE_CHOICES, PRECISIONS, ConfigError, check_device_spelling
from .kernels.host import cpuinfo, model_name, platform_name

__all__ = [
    "DEVICE_CHOICES",
    "PRECISIONS",
    "DeviceError",
    "autocast",
    "available",
    "available_memory",
    "check_precision",
    "conditions",
    "gpus_requested",
    "grad_scaler",
    "resolve",
    "resolve_device",
    "synchronize",
]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class DeviceError(ConfigError):
    """A device or precision this machine cannot run; the message names what it has."""


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def available() -> list[str]:
    """The devices present here, e.g. ``["cpu", "cuda:0", "cuda:1"]``."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        found.append("mps")
    return found


def gpus_requested(spec: str, cluster_gpus: float = 0) -> int:
    """How many GPUs a run with ``train.device = spec`` asks a scheduler for: 1 for ``cuda`` /
    ``cuda:N``, 1 for ``auto`` where the cluster has a GPU, else 0 (no hardware query here)."""
    check_device_spelling(spec)
    if spec.startswith("cuda"):
        return 1
    return 1 if spec == "auto" and cluster_gpus > 0 else 0


def resolve_device(spec: str = "auto", what: str = "train.device") -> torch.device:
    """The ``torch.device`` for ``spec``; :class:`DeviceError` if this machine lacks it
    (``what`` names the setting in the message, e.g. ``"--device"``)."""
    check_device_spelling(spec, what=what, error=DeviceError)
    found = ", ".join(available())
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("mps" if _mps_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "mps":
        if not _mps_available():
            why = (
                "this is not an Apple machine"
                if platform.system() != "Darwin"
                else "torch.backends.mps.is_available() is False (macOS 12.3+ and an MPS build of torch are needed)"
            )
            raise DeviceError(
                f"{what}='mps' is not available: {why}; devices found: {found}; "
                f"choices: {DEVICE_CHOICES} (e.g. --device cpu)"
            )
        return torch.device("mps")
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build of torch"
        raise DeviceError(
            f"{what}={spec!r} is not available: no CUDA GPU found ({build}, "
            f"torch.cuda.is_available() is False); devices found: {found}; "
            f"choices: {DEVICE_CHOICES} (e.g. --device cpu)"
        )
    index = int(spec.split(":")[1]) if ":" in spec else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise DeviceError(
            f"{what}={spec!r} is not available: {torch.cuda.device_count()} CUDA "
            f"device(s); devices found: {found}; choices: {DEVICE_CHOICES}"
        )
    return torch.device("cuda", index)


def check_precision(precision: str, device: torch.device) -> None:
    """:class:`DeviceError` unless ``precision`` runs on ``device`` (a tiny autocast product
    and its backward are tried for bf16/fp16)."""
    if precision not in PRECISIONS:
        raise DeviceError(f"train.precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    if precision == "fp32":
        return
    dtype = _DTYPES[precision]
    try:
        a = torch.ones(4, 4, device=device, requires_grad=True)
        with torch.autocast(device_type=device.type, dtype=dtype):
            y = a @ a
        if y.dtype != dtype:
            raise RuntimeError(f"autocast produced {y.dtype}, not {dtype}")
        y.float().sum().backward()
        if precision == "fp16":
            torch.amp.GradScaler(device.type)
    except Exception as e:  # the message of the failing op names the reason
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DeviceError(
            f"train.precision={precision!r} cannot run on {device} ({reason}); "
            f"choices: {', '.join(PRECISIONS)} (fp32 runs everywhere)"
        ) from None


def resolve(spec: str = "auto", precision: str = "fp32") -> torch.device:
    """Check device and precision together (and the ``RNNLAB_TRITON`` setting); returns the device."""
    device = resolve_device(spec)
    check_precision(precision, device)
    check_settings()
    return device


def check_settings() -> None:
    """The environment's settings of the kernels (``RNNLAB_TRITON``) are understood: a
    misspelt one is a :class:`DeviceError` in one line before anything runs (before: every row
    of ``rnnlab doctor`` through the recurrence reported it as a kernel mismatch)."""
    from .kernels.triton_setting import mode

    try:
        mode()
    except ValueError as e:
        raise DeviceError(str(e)) from None


def autocast(device: torch.device, precision: str):
    """The forward-pass context of ``precision`` (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_DTYPES[precision])


def grad_scaler(device: torch.device, precision: str):
    """A ``torch.amp.GradScaler`` for fp16, else None (bf16 has float32's exponent range)."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type)


def conditions(device: torch.device, precision: str = "fp32") -> dict:
    """What result.json records about the device: resolved name, hardware, CUDA/cuDNN."""
    out = {"device": str(device), "precision": precision}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update(
            device_name=props.name,
            device_memory_gb=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
        )
    elif device.type == "mps":
        out.update(device_name=f"Apple MPS ({platform.machine()})")
    else:
        out.update(device_name=platform_name())
    # the host's CPU and BLAS on every device: a record made elsewhere says where
    out.update(cpu_model=cpu_model(), blas=blas_info(), cpu_capability=cpu_capability())
    generation = cpu_id()
    if generation:
        out["cpu_id"] = generation
    return out


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows."""
    return model_name() or "unknown"


def cpu_id() -> str:
    """The CPU's family and model numbers (``/proc/cpuinfo`` on x86 Linux), e.g. ``"family 23
    model 1"``; "" where they are not shown. A virtual machine often masks the model name ("AMD
    EPYC", "Intel(R) Xeon(R) Processor") but not these, and they tell processor generations
    apart: two hosts both named "AMD EPYC" ran the same training step 2x apart in speed."""
    info = cpuinfo()
    if not info.get("cpu family") or not info.get("model"):
        return ""
    return f"family {info['cpu family']} model {info['model']}"


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels dispatch on (``"AVX2"``, ``"AVX512"``, ...;
    ``"unknown"`` where torch cannot say)."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 - an older or unusual build
        return "unknown"


def blas_info() -> str:
    """The BLAS torch was built with (``BLAS_INFO`` of ``torch.__config__.show()``)."""
    try:
        shown = torch.__config__.show()
    except Exception:  # noqa: BLE001 - a build without the summary
        return "unknown"
    found = re.search(r"BLAS_INFO=([^,\s]+)", shown)
    if found:
        return found.group(1)
    return "unknown"


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (timings); a no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def available_memory(device: torch.device) -> int | None:
    """Bytes of memory a run on ``device`` can still take: the CPU's available memory
    (``MemAvailable`` of /proc/meminfo, else the free physical pages), a CUDA device's free
    memory; None where unknown (MPS, other systems)."""
    import os

    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
