"""Benchmark records that hold: the host and load they were made under, and the Markdown made
from them.

Every benchmark that writes a timing record (``rnnlab bench speed --json``, ``rnnlab bench
ensemble --json``, ``benchmarks/papers_code.py --json``, ``benchmarks/scan.py --json``,
``benchmarks/allocator.py --json``, ``benchmarks/backend_overhead.py --out``) goes through this
module:

* :func:`start` notes the CPU model, the BLAS, the number of cores and the 1-, 5- and 15-minute
  load average before the run, and refuses (:class:`LoadError`) when the 1-minute load average
  exceeds :data:`LOAD_PER_CORE` per core, unless ``allow_load`` (``--allow-load``) is given;
* :func:`sample` notes the load average during the run (between rows or rounds), and
  :func:`finish` the load average after it; the record is marked ``loaded`` when the load
  before exceeded the limit, or the load during or after did beyond the benchmark's own threads;
* :func:`write` writes the record, or, for a loaded run without ``--allow-load``, keeps it
  beside the requested path (``PATH.loaded``) and refuses.

A timing made while other processes compete for the cores is not a result: two codes slow
down by different factors under load (the papers' code more than rnnlab's), so even
ratios from one process drift. Records made before the load was recorded ("legacy") are
captioned as such.

:func:`caption` is the sentence above every table generated from a record; :func:`render_block`
renders the ``<!-- bench: ... -->`` blocks that :mod:`rnnlab.bench.docsync` keeps current in
BENCHMARKS.md and docs/ (``python -m rnnlab.bench.docsync BENCHMARKS.md docs/speed.md ...``).
:func:`spread` is the median and range of per-round ratios that every speed table shows.

A new benchmark records the same way, in a ``main`` that :func:`exit_code` wraps::

    def body():
        host = benchrecord.start(allow_load or not out, own=threads)  # refuses a busy machine
        ...                               # the timed work, benchrecord.sample(host) between parts
        record = {"conditions": benchrecord.conditions(host, threads=threads), "rows": rows}
        benchrecord.publish(record, out, benchdocs.VIEWS["mine"](record, out))  # or OUT.loaded, refused
    return benchrecord.exit_code(body)    # LoadError -> "error: ..." and exit status 2

and adds its ``--allow-load`` with :func:`add_arguments`, and a view to
:data:`rnnlab.bench.benchdocs.VIEWS` for its table.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

#: the highest 1-minute load average per core at which a timing record is written unasked
LOAD_PER_CORE = 0.5

#: what a record's conditions must hold (records without them are legacy)
HOST_KEYS = ("cpu_model", "blas", "cores", "load_limit", "own_load", "loadavg_before", "loadavg_after", "loaded")


class LoadError(RuntimeError):
    """The machine is too busy for a timing record (the message says how busy and what to do)."""


# --- the load check -----------------------------------------------------------------------


def start(allow_load: bool = False, own: float = 1.0, *, loadavg=None, cores: int | None = None) -> dict:
    """The host's conditions before a timed run: CPU model, BLAS, cores, the load limit and the
    load average (1, 5, 15 minutes). ``own`` is the number of cores the benchmark itself keeps
    busy (its threads or parallel workers): the load after the run is judged net of it.

    Raises :class:`LoadError` when the 1-minute load average exceeds the limit and
    ``allow_load`` is false. ``loadavg`` and ``cores`` replace the machine's (tests)."""
    cores = int(cores or os.cpu_count() or 1)
    before = [round(float(v), 2) for v in (loadavg if loadavg is not None else os.getloadavg())]
    limit = LOAD_PER_CORE * cores
    if before[0] > limit and not allow_load:
        raise LoadError(
            f"the load average is {before[0]:.2f} over the last minute, above the limit of {limit:.2f} "
            f"({LOAD_PER_CORE} per core on {cores} cores): other processes are using this machine, so a "
            f"timing record made now would not hold. Run it when the machine is idle (`uptime` shows the "
            f"load), or pass --allow-load to record anyway (the record is then marked loaded)"
        )
    from .. import device  # here, not at the top: reading records (docsync) must not import torch

    return {
        "cpu_model": device.cpu_model(),
        "cpu_id": device.cpu_id(),
        "cpu_capability": device.cpu_capability(),
        "blas": device.blas_info(),
        "cores": cores,
        "load_limit": limit,
        "own_load": float(own),
        "loadavg_before": before,
        "allow_load": bool(allow_load),
    }


def sample(cond: dict, *, loadavg=None) -> None:
    """Note the 1-minute load average during the run (between rows or rounds) in ``cond``."""
    now = loadavg if loadavg is not None else os.getloadavg()
    cond.setdefault("loadavg_during", []).append(round(float(now[0]), 2))


def finish(cond: dict, *, loadavg=None) -> dict:
    """Add the load average after the run and the verdict ``loaded`` to ``cond`` (returned):
    loaded when the 1-minute load before the run exceeded the limit, or when it did during or
    after the run beyond the benchmark's own load."""
    after = [round(float(v), 2) for v in (loadavg if loadavg is not None else os.getloadavg())]
    cond["loadavg_after"] = after
    peak = max([after[0], *cond.get("loadavg_during", [])])
    cond["loaded"] = cond["loadavg_before"][0] > cond["load_limit"] or peak - cond["own_load"] > cond["load_limit"]
    return cond


def write(path, record: dict, cond: dict) -> Path:
    """Write ``record`` (JSON) to ``path``; a loaded run without ``allow_load`` is kept in
    ``PATH.loaded`` instead and refused (:class:`LoadError`), so nothing measured is lost."""
    path = Path(path)
    text = json.dumps(record, indent=1) + "\n"
    if cond.get("loaded") and not cond.get("allow_load"):
        kept = path.with_name(path.name + ".loaded")
        kept.write_text(text)
        raise LoadError(
            f"not written to {path}: the load average rose to {cond['loadavg_after'][0]:.2f} during the run "
            f"(limit {cond['load_limit']:.2f} beyond the benchmark's own {cond['own_load']:g}); the measurements "
            f"are kept, marked loaded, in {kept}. Rerun on an idle machine, or pass --allow-load to record a "
            f"loaded run"
        )
    path.write_text(text)
    return path


def conditions(host: dict, *, loadavg=None, **facts) -> dict:
    """A record's conditions: the date (UTC), the benchmark's own ``facts`` (torch version,
    threads, repeats, ...; a ``date`` among them replaces the default), then the host and its
    load from :func:`start` and :func:`sample`, closed by :func:`finish` (``loadavg``: tests)."""
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **facts, **finish(host, loadavg=loadavg)}


def publish(record: dict, path, table: str) -> None:
    """Print ``table`` (the record's view, see :data:`rnnlab.bench.benchdocs.VIEWS`) and, when ``path``
    is given, write the record there through :func:`write` (refused when loaded)."""
    print(table)
    if path:
        write(path, record, record["conditions"])


def exit_code(body: Callable[[], int | None], *errors: type[Exception]) -> int:
    """Run a benchmark's ``body`` and return its exit status: 0 (or what it returns), or 2 with
    ``error: ...`` on standard error for a :class:`LoadError` or one of ``errors``."""
    try:
        return body() or 0
    except (LoadError, *errors) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def add_arguments(parser) -> None:
    """The ``--allow-load`` option every recording benchmark takes."""
    parser.add_argument(
        "--allow-load",
        action="store_true",
        help=f"write the record even when the 1-minute load average exceeds {LOAD_PER_CORE} per "
        "core (the record and its tables are then marked loaded), e.g. --allow-load",
    )


# --- reading records ----------------------------------------------------------------------


def conditions_of(record) -> dict:
    """A record's conditions as a dict (legacy records: a bare list of rows, or a string)."""
    if isinstance(record, list):
        return {}
    cond = record.get("conditions", {})
    return {"text": cond} if isinstance(cond, str) else cond


def is_legacy(record) -> bool:
    """True for a record made before records carried their host and load."""
    cond = conditions_of(record)
    return not all(k in cond for k in HOST_KEYS)


def caption(record, source: str) -> str:
    """The sentence above a table generated from ``record`` (read from ``source``): idle,
    loaded or legacy, with the load average, the CPU model and the BLAS."""
    cond = conditions_of(record)
    if is_legacy(record):
        end = cond.get("loadavg_end")
        at_end = f"; load average at its end {end[0]:.2f} (1 minute), its own threads included" if end else ""
        return (
            f"*Legacy record `{source}`, load unknown: made before records carried the load average "
            f"before the run and the CPU model{at_end}. To be re-recorded on an idle machine.*"
        )
    from ..ledger.records import cpu_label  # torch-free, as this module must stay

    before, after = cond["loadavg_before"][0], cond["loadavg_after"][0]
    during = cond.get("loadavg_during")
    peak = f", at most {max(during):.2f} during" if during else ""
    load = (
        f"load average {before:.2f} before{peak} and {after:.2f} after the run (the benchmark's own "
        f"{cond['own_load']:g}; limit {cond['load_limit']:.2f}, {LOAD_PER_CORE} per core on {cond['cores']} "
        f"cores); {cpu_label(cond)}, BLAS {cond['blas']}"
    )
    if cond["loaded"]:
        return f"**Loaded machine (`{source}`): {load}. Timings and ratios from a loaded machine are not results.**"
    return f"*Record `{source}`, idle machine: {load}.*"


def spread(values) -> tuple[float, float, float]:
    """(median, min, max) of per-round values."""
    values = list(values)
    return statistics.median(values), min(values), max(values)


def fmt_spread(s: tuple, digits: int = 2) -> str:
    """``median [min-max]``, e.g. ``0.84 [0.83-0.85]``; the median alone when the range is
    unknown (``(m, None, None)``: a record without per-round times)."""
    m, lo, hi = s
    if lo is None:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"
