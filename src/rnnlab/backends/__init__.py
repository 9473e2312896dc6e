"""Where runs execute: ``local`` (a process pool on this machine) or ``ray`` (a Ray cluster,
optional extra ``rnnlab[ray]``).

Both take the same list of :class:`Job` and run each through :func:`run_one`, which holds the
run directory's lock (``rundir.claim``) while it trains, so two drivers (or a restarted driver
and a task of the killed one that is still running) never train the same run at the same time,
and a finished run of the same configuration is never trained again.
"""

from __future__ import annotations

from .base import Job, job_for, run_one

BACKENDS = ("local", "ray")


def check_count(n, flag: str, what: str) -> None:
    """A one-line error unless ``n`` (the value of ``flag``, a number of ``what``) is an
    integer >= 1."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        from ..config import ConfigError

        raise ConfigError(f"{flag} must be an integer >= 1 ({what}), got {n!r}; e.g. {flag} 2")


def run_jobs(
    jobs: list[Job], backend: str = "local", parallel: int = 1, address: str | None = None, log=print, on_result=None
) -> list[tuple[Job, str, str]]:
    """Run ``jobs`` on ``backend``; returns ``(job, status, error)`` per job, in completion order,
    and calls ``on_result(job, status, error)`` as each ends. ``parallel`` is the local pool's
    size; ``address`` the Ray cluster (None: a local instance). Ctrl-C (local backend) raises
    :class:`~rnnlab.backends.pool.Interrupted` once the running jobs have stopped."""
    from ..config import ConfigError

    check_count(parallel, "--jobs", "parallel runs")
    if backend == "local":
        from .local import run_jobs as run

        return run(jobs, parallel=parallel, log=log, on_result=on_result)
    if backend == "ray":
        from .ray import run_jobs as run

        return run(jobs, address=address, log=log, on_result=on_result)
    raise ConfigError(f"unknown backend {backend!r}; expected one of {BACKENDS}")


__all__ = ["BACKENDS", "Job", "check_count", "job_for", "run_jobs", "run_one"]
