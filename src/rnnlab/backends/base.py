"""One run as a picklable job, its lock, and the function every backend calls to execute it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

#: name of the lock file inside a run directory (``flock``: released by the kernel when the
#: holding process dies, so a killed worker never leaves a stale lock behind)
LOCK_NAME = ".run.lock"
#: one JSON line per attempt at a run: who started it, how it ended (an audit trail)
ATTEMPTS_NAME = "attempts.jsonl"


class RunLocked(RuntimeError):
    """Another process holds the run directory's lock."""


@dataclass
class Job:
    """Everything a worker needs to train one run (plain data: pickles to any process or node)."""

    preset: str
    overrides: list[str]
    run_dir: str
    data_dir: str | None = None
    threads: int = 1
    gpus: int = 0
    label: str = ""
    extra: dict = field(default_factory=dict)


def job_for(preset: str, overrides: list[str], run_dir: str | Path, data_dir: str | None = None) -> Job:
    """Resolve the configuration now (a bad preset or override fails before anything runs) and
    read the resources the run needs: ``train.threads`` CPUs, one GPU if ``train.device`` is CUDA."""
    from .. import config

    cfg = config.load(preset, overrides)
    device = str(getattr(cfg.train, "device", "cpu") or "cpu")
    return Job(preset, list(overrides), str(run_dir), data_dir, threads=cfg.train.threads,
               gpus=1 if device.startswith("cuda") else 0, label=cfg.name)


@contextlib.contextmanager
def run_lock(run_dir: str | Path, wait: bool = True, log=None):
    """Hold ``run_dir``'s exclusive lock (creating the directory). ``wait=False`` raises
    :class:`RunLocked` instead of waiting for the holder to finish."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            if not wait:
                raise RunLocked(f"{run_dir} is being trained by {holder}; wait for it or stop it") from None
            if log:
                log(f"  [waiting] {run_dir} is locked by {holder}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _record(run_dir: Path, **event) -> None:
    event = {"time": round(time.time(), 3), "host": socket.gethostname(), "pid": os.getpid(), **event}
    with open(run_dir / ATTEMPTS_NAME, "a") as f:
        f.write(json.dumps(event) + "\n")


def run_one(job: Job, on_eval=None) -> tuple[str, str]:
    """Train ``job`` unless its ``result.json`` exists; resume it if it has a checkpoint.

    Returns ``(status, error)`` with status ``done`` (already finished), ``trained``, ``resumed``
    or ``failed`` (the error is a one-line message; nothing is raised, so a failed run never
    stops the others). Holds the run's lock throughout and appends the attempt to
    ``attempts.jsonl``.
    """
    from .. import config
    from ..runtime import tune_malloc
    from ..train import train

    tune_malloc()
    run_dir = Path(job.run_dir)
    with run_lock(run_dir):
        if (run_dir / "result.json").exists():
            return "done", ""
        resume = (run_dir / "checkpoint.pt").exists()
        _record(run_dir, event="start", resume=resume)
        try:
            cfg = config.load(job.preset, job.overrides)
            train(cfg, run_dir, resume=resume, progress=False, data_dir=job.data_dir, on_eval=on_eval)
            status, err = ("resumed" if resume else "trained"), ""
        except Exception as e:  # reported per run; the others go on
            msg = " ".join(line.strip() for line in str(e).splitlines())
            status, err = "failed", f"{type(e).__name__}: {msg}"
        _record(run_dir, event="end", status=status, error=err)
        return status, err
