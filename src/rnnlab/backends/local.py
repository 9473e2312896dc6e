"""The local backend: runs in this process (``parallel=1``) or in the process pool
(:mod:`rnnlab.backends.pool`: one process per parallel run, the workers die with the driver).

Ctrl-C cancels the queued runs at once and stops the running ones at their next checkpoint
(a second Ctrl-C stops them now); :class:`~rnnlab.backends.pool.Interrupted` is raised once
they have stopped, after their statuses were reported.
"""

from __future__ import annotations

from .base import Job, run_one
from .pool import Interrupted, interruptible, one_line, request_stop, run_pool, stop_requested


def run_jobs(jobs: list[Job], parallel: int = 1, log=print, on_result=None) -> list[tuple[Job, str, str]]:
    """Run ``jobs``; returns ``(job, status, error)`` per job, in completion order (a job
    cancelled by Ctrl-C has status ``cancelled``), and calls ``on_result`` with each."""
    out = []

    def report(job, status, err):
        out.append((job, status, err))
        if on_result is not None:
            on_result(job, status, err)
        log(f"  [{status}] {job.run_dir}" + (f": {err}" if err else ""))

    if parallel <= 1:
        _run_here(jobs, report, log)
        return out

    def on_outcome(o) -> None:
        if o.state == "done":
            report(jobs[o.index], *o.value)
        elif o.state == "cancelled":
            report(jobs[o.index], "cancelled", "")
        else:  # the worker died (killed, out of memory) or could not run the job at all
            report(jobs[o.index], "failed", o.error if isinstance(o.error, str) else one_line(o.error))

    run_pool(run_one, [(job,) for job in jobs], parallel, on_outcome, log=log)
    return out


def _run_here(jobs: list[Job], report, log) -> None:
    def first() -> None:
        request_stop()
        log(
            "interrupted: the queued runs are cancelled; the running one stops at its next checkpoint "
            "(Ctrl-C again to stop it now)"
        )

    with interruptible(first):
        for job in jobs:
            if stop_requested():
                report(job, "cancelled", "")
                continue
            report(job, *run_one(job))
        interrupted = stop_requested()
    if interrupted:
        raise Interrupted("interrupted")
