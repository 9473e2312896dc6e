"""One run as a picklable job, and the function every backend calls to execute it."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from .pool import one_line

#: one JSON line per attempt at a run: who started it, how it ended (an audit trail)
ATTEMPTS_NAME = "attempts.jsonl"


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
    read the resources the run needs: ``train.threads`` CPUs, one GPU if ``train.device`` is CUDA
    (``auto`` is decided by the backend: Ray gives such a run a GPU when the cluster has any)."""
    from .. import config
    from ..device import gpus_requested

    cfg = config.load(preset, overrides)
    device = str(getattr(cfg.train, "device", "cpu") or "cpu")
    return Job(
        preset,
        list(overrides),
        str(run_dir),
        data_dir,
        threads=cfg.train.threads,
        gpus=gpus_requested(device),
        label=cfg.name,
        extra={"device": device},
    )


def _record(run_dir: Path, **event) -> None:
    event = {"time": round(time.time(), 3), "host": socket.gethostname(), "pid": os.getpid(), **event}
    with open(run_dir / ATTEMPTS_NAME, "a") as f:
        f.write(json.dumps(event) + "\n")


def _claim(run_dir: Path, wait: float):
    """The run's lock (``rundir.claim``); with ``wait > 0`` a busy run is retried for that many
    seconds (a restarted driver waits for a task of the killed one that still holds it)."""
    from .. import rundir

    deadline = time.monotonic() + wait
    while True:
        c = rundir.claim(run_dir)
        try:
            c.__enter__()
            return c
        except rundir.RunLocked:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


def run_one(job: Job, on_eval=None, wait: float = 0.0) -> tuple[str, str]:
    """Train ``job`` unless a finished run of the same configuration is in its directory;
    resume it if it has a checkpoint.

    Returns ``(status, error)``: ``done`` (already finished), ``trained``, ``resumed``,
    ``busy`` (another process holds the run's lock, even after ``wait`` seconds), ``failed``
    (the error is one line; nothing is raised, so a failed run never stops the others),
    ``interrupted`` (Ctrl-C: stopped at its checkpoint, the same command resumes it) or
    ``cancelled`` (a stop was requested before it started; nothing was touched). Holds the
    run's lock throughout and appends each attempt to ``attempts.jsonl``.
    """
    from .. import config, rundir
    from ..runtime import tune_process
    from .pool import stop_requested

    if stop_requested():
        return "cancelled", "not started: the driver was interrupted"
    if job.extra.get("seeds"):
        return run_ensemble(job)
    tune_process()
    run_dir = Path(job.run_dir)
    try:
        cfg = config.load(job.preset, job.overrides)
        lock = _claim(run_dir, wait)
    except rundir.RunLocked as e:
        return "busy", str(e)
    except Exception as e:
        return "failed", one_line(e)
    try:
        if rundir.is_finished(run_dir):
            if rundir.is_finished(run_dir, cfg):
                return "done", ""
            return "failed", (
                f"{run_dir} holds a finished run of another configuration "
                f"(config.json); move it away or use another --runs-dir"
            )
        return _train_locked(job, cfg, run_dir, on_eval)
    finally:
        lock.__exit__(None, None, None)


def _train_locked(job: Job, cfg, run_dir: Path, on_eval) -> tuple[str, str]:
    """The training part of :func:`run_one`, with the run's lock held."""
    from .. import rundir
    from ..train import train
    from .pool import CheckpointStop, busy

    files = rundir.RunFiles(run_dir)
    resume = files.checkpoint.exists()
    _record(run_dir, event="start", resume=resume)
    stop = CheckpointStop(files.checkpoint, cfg.train.steps)
    try:
        with busy():
            train(cfg, run_dir, resume=resume, progress=False, data_dir=job.data_dir, on_eval=stop.hook(on_eval))
        status, err = ("resumed" if resume else "trained"), ""
    except KeyboardInterrupt:
        stop.disarm()
        if rundir.is_finished(run_dir):  # the stop came as the run finished
            status, err = ("resumed" if resume else "trained"), ""
        else:
            where = "at its checkpoint" if stop.fired.is_set() else "before its next checkpoint"
            status, err = "interrupted", f"stopped {where} by Ctrl-C; the same command resumes it"
    except Exception as e:  # reported per run; the others go on
        status, err = "failed", one_line(e)
    finally:
        stop.disarm()
    if {p.name for p in run_dir.iterdir()} <= {ATTEMPTS_NAME, rundir.LOCK_NAME}:
        (run_dir / ATTEMPTS_NAME).unlink()  # a start that failed before writing anything: no stub
    else:
        _record(run_dir, event="end", status=status, error=err)
    return status, err


def run_ensemble(job: Job) -> tuple[str, str]:
    """:func:`run_one` for a job that trains several seeds of one configuration as one batched
    model (:mod:`rnnlab.ensemble`): ``job.extra["seeds"]`` lists ``[seed, run directory]`` and
    ``job.overrides`` leave the seed out; an entry ``[seed, run directory, overrides]`` gives that
    member's own overrides instead (members at their own learning rates: a suite's grid of
    rates expanded into members, ``rnnlab.suite``). Each member keeps run_one's rules: its own lock (a
    member another process holds is busy, the others train), skip-if-finished, resume from its
    checkpoint, its attempts in ``attempts.jsonl``. Returns ``("done" | "trained" | "failed",
    error)``: failed when any member failed or was busy, the error one clause per such member."""
    from .. import config
    from ..ensemble import Member, member_labels, run_members
    from ..runtime import tune_process
    from .pool import busy, stop_requested

    tune_process()
    try:
        members = [
            Member(
                int(s), config.load(job.preset, [*(own[0] if own else job.overrides), f"train.seed={int(s)}"]), Path(d)
            )
            for s, d, *own in job.extra["seeds"]
        ]
    except Exception as e:
        return "failed", one_line(e)
    started = []

    def start(m) -> None:
        _record(m.root, event="start", resume=m.resume, ensemble=len(members))
        started.append(m)

    interrupted = False
    try:
        with busy():
            run_members(members, "auto", progress=False, data_dir=job.data_dir, on_start=start, stop=stop_requested)
    except KeyboardInterrupt:  # Ctrl-C: every member keeps its last checkpoint; the same command resumes them
        interrupted = True
        for m in members:
            if m.status in ("pending", "training", "failed") and m.error in ("interrupted", "not finished", ""):
                m.status, m.error = "interrupted", "stopped by Ctrl-C; the same command resumes it"
    except Exception as e:  # the batched computation itself failed: every member still training did
        for m in members:
            if m.status in ("pending", "training") or m.error == "not finished":
                m.status, m.error = "failed", one_line(e)
    for m in started:
        _record(m.root, event="end", status=m.status, error=m.error)
    if interrupted:
        return "interrupted", "stopped by Ctrl-C; the same command resumes its members"
    bad = [(label, m) for label, m in zip(member_labels(members), members) if m.status in ("failed", "busy")]
    if bad:
        return "failed", "; ".join(f"{label} {m.status}: {m.error}" for label, m in bad)
    return ("done" if all(m.status == "done" for m in members) else "trained"), ""
