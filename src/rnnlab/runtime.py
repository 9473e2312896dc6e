"""Process-level settings for speed: glibc's allocator and subnormal floats.

Why the allocator matters: a training iteration over a long sequence allocates and frees
tensors of tens of megabytes (the (T, B, H) state and gradient buffers, LSTM gate
workspaces). glibc serves allocations above its mmap threshold (at most 32 MiB) with fresh
``mmap`` pages and gives freed heap tops back to the kernel above its trim threshold, so the
same memory is faulted in (and zeroed by the kernel) again in every iteration: on the copy
task (T=1020, B=128) ``torch.nn.LSTM`` takes over 100k minor page faults per iteration with
the default settings (see BENCHMARKS.md). Telling glibc never to use mmap for allocations
and never to trim keeps the pages in the process: the faults go away and the iteration gets
faster. The cost is that the process keeps its peak heap (RSS does not shrink after a
large step), which is what a training process does anyway.

Why subnormal floats matter: a float32 below 1.2e-38 (a subnormal) is handled by x86 CPUs in
microcode, many times slower than a normal number. The gradients of an LSTM or a GRU decaying
over sequential MNIST's 784 steps pass through that range, and a training step gets several
times slower (``benchmarks/denormals.py`` measures it; its record is in BENCHMARKS.md).
:func:`flush_denormals` sets the CPU to treat subnormal inputs and results as zero
(``torch.set_flush_denormal``), which changes a result only where a value falls below 1.2e-38
(it becomes 0); a run records the setting in its result's ``conditions``. It applies to the
calling thread and to threads it starts afterwards (worker threads inherit the setting), so
it is made at the entry point, before torch starts its thread pool.

Nothing here runs at import. :func:`tune_process` (both settings) is for the CLI's entry point
and the backends' worker processes; library users may call it, or either function, themselves.
The allocator's equivalent environment variables, set before starting Python:
``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1099511627776`` (1 TiB; measurements in
docs/speed.md). Opt-outs: ``RNNLAB_MALLOC=default`` and ``RNNLAB_DENORMALS=keep``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import platform

# glibc's mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4

#: trim threshold passed to mallopt by :func:`tune_malloc`: -1 disables trimming completely
#: (mallopt(3)); a finite int caps at 2 GiB, which a T=10,000 step exceeds (measured: the
#: faults came back there with 2^31-1)
NO_TRIM = -1

_state = {"malloc": None, "denormals": None}


def _libc():
    if platform.system() != "Linux":
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return None  # not glibc (e.g. musl): mallopt semantics differ, leave it alone
    return libc


def tune_malloc() -> bool:
    """Ask glibc not to serve allocations with mmap and not to trim the heap (``mallopt``).

    Safe to call at any time (glibc applies the settings to later calls; existing blocks are
    unaffected). Returns True if both settings were accepted, False on non-glibc platforms
    or when ``RNNLAB_MALLOC=default`` is set in the environment (the opt-out).
    """
    if os.environ.get("RNNLAB_MALLOC", "").lower() == "default":
        _state["malloc"] = "default (RNNLAB_MALLOC=default)"
        return False
    libc = _libc()
    if libc is None:
        _state["malloc"] = "default (not glibc)"
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = bool(libc.mallopt(_M_MMAP_MAX, 0))
    ok = bool(libc.mallopt(_M_TRIM_THRESHOLD, NO_TRIM)) and ok
    _state["malloc"] = "glibc mallopt: M_MMAP_MAX=0, M_TRIM_THRESHOLD=-1 (never)" if ok else "default (mallopt refused)"
    return ok


def malloc_conditions() -> str:
    """A one-line description of the allocator settings in force (for tables and logs)."""
    if _state["malloc"] is not None:
        return _state["malloc"]
    env = {k: os.environ[k] for k in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_") if k in os.environ}
    if env:
        return "glibc environment: " + " ".join(f"{k}={v}" for k, v in env.items())
    return "default"


def flush_denormals() -> bool:
    """Treat subnormal float inputs and results as zero on this thread and the threads it starts.

    Returns True when the CPU accepted it (x86 with SSE3; ``torch.set_flush_denormal``),
    False elsewhere or when ``RNNLAB_DENORMALS=keep`` is set in the environment (the opt-out,
    for bit-for-bit comparisons with runs made before the setting existed).
    """
    import torch

    if os.environ.get("RNNLAB_DENORMALS", "").lower() == "keep":
        torch.set_flush_denormal(False)
        _state["denormals"] = "kept (RNNLAB_DENORMALS=keep)"
        return False
    ok = bool(torch.set_flush_denormal(True))
    _state["denormals"] = "flushed to zero" if ok else "kept (not supported by this CPU)"
    return ok


def denormal_conditions() -> str:
    """How this process treats subnormal floats (for a run's conditions)."""
    if _state["denormals"] is not None:
        return _state["denormals"]
    import torch

    # set by someone else (or not at all): ask the CPU by flushing a subnormal through it
    tiny = torch.tensor([1e-39], dtype=torch.float32)
    return "flushed to zero" if float(tiny * 1.0) == 0.0 else "kept"


def tune_process() -> None:
    """The process settings a training entry point makes: :func:`tune_malloc` and
    :func:`flush_denormals` (each with its opt-out)."""
    tune_malloc()
    flush_denormals()


#: off a terminal, a short progress line at most this often between evaluations (seconds): the
#: trainer's and the ensembles' (a batch job's log shows the run is alive)
PROGRESS_EVERY_S = 30.0


def show_progress(logger, text: str) -> None:
    """One progress line (the trainer's and the ensembles' lines off a terminal, in place of a
    progress bar): an ``INFO`` record of ``logger`` when the application has set up logging (a
    handler on it or above it, as ``rnnlab``'s command line and ``logging.basicConfig`` do), so
    that its level decides; else written to stderr, as a progress bar would be."""
    import sys

    if logger.hasHandlers():
        logger.info(text)
    else:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


@contextlib.contextmanager
def caller_state_kept():
    """Within it, a run may set torch's thread count (``train.threads``) and seed torch's global
    random generators (``train.seed``); afterwards the caller's count and random state are back
    (``train()``, ``train_ensemble()`` and ``check_cell()`` leave the process as they found it:
    a script's own draws after a run are those it would make without the run)."""
    import torch

    threads = torch.get_num_threads()
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=cuda):
            yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
