"""Process-level settings that change speed but not results: threads and glibc's allocator.

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

Nothing here runs at import. :func:`tune_malloc` is for the CLI's entry point (and the
benchmark's worker processes); library users may call it themselves, or set the equivalent
environment variables before starting Python: ``MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=1099511627776`` (1 TiB; measurements in docs/speed.md).
"""

from __future__ import annotations

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

_state = {"malloc": None}


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
