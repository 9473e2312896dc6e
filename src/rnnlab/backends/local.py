"""The local backend: a process pool on this machine (one process per parallel run; the workers
die with the driver, as the suite's)."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed

from .base import Job, run_one


def run_jobs(jobs: list[Job], parallel: int = 1, log=print) -> list[tuple[Job, str, str]]:
    from ..suite import _worker_init

    out = []

    def report(job, status, err):
        out.append((job, status, err))
        log(f"  [{status}] {job.run_dir}" + (f": {err}" if err else ""))

    if parallel <= 1:
        for job in jobs:
            report(job, *run_one(job))
        return out
    with ProcessPoolExecutor(max_workers=parallel, initializer=_worker_init, initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(run_one, job): job for job in jobs}
        for fut in as_completed(futures):
            try:
                status, err = fut.result()
            except Exception as e:  # the worker process died (killed, out of memory)
                status, err = "failed", f"worker died: {type(e).__name__}: {e}"
            report(futures[fut], status, err)
    return out
