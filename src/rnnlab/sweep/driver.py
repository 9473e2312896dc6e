"""The driver: workers in this process, a local pool or Ray, until the study has its trials;
and ``rnnlab sweep`` (:func:`main_sweep`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import sys
import time
from pathlib import Path

from ..backends.pool import Interrupted, interruptible, request_stop, stop_requested
from ..config import ConfigError
from ..runtime import show_progress
from .report import _fmt, report
from .spec import Sweep, SweepError, _grid_size, _is_number, check_metric, import_optuna, load_sweep
from .study import absolute_url, check_out_dir, count_states, default_storage, make_storage, open_study, public_url
from .trial import _worker_entry, failure_streak, worker


class TrialLog:
    """Prints one line per finished trial, as the driver sees them in the study."""

    def __init__(self, study, sw: Sweep, log=print, every: float = 2.0):
        self.study, self.sw, self.log, self.every = study, sw, log, every
        self.seen = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
        self.last = 0.0

    def __call__(self, force: bool = True) -> None:
        """Print the trials finished since the last call (``force=False``: at most every
        ``every`` seconds, for the pool's and Ray's frequent ticks)."""
        if not force and time.monotonic() - self.last < self.every:
            return
        self.last = time.monotonic()
        try:
            trials = self.study.get_trials(deepcopy=False)
        except Exception:  # noqa: BLE001 - a busy database: the next call prints it
            return
        finished = sum(t.state.name in ("COMPLETE", "PRUNED") for t in trials)
        for t in trials:
            if t.state.is_finished() and t.number not in self.seen:
                self.seen.add(t.number)
                self.log(f"  trial {t.number}: {self._outcome(t)}; {finished} of {self.sw.trials} finished")

    def _outcome(self, t) -> str:
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in t.params.items())
        if t.state.name == "COMPLETE":
            return f"complete, {self.sw.metric} = {t.value:.6g} ({params})"
        if t.state.name == "PRUNED":
            return f"pruned at step {t.user_attrs.get('steps', '?')} ({params})"
        why = t.user_attrs.get("error") or "its worker died; re-queued"
        return f"failed ({params}): {why}"


def _check_run_args(sw: Sweep, workers: int, backend: str, heartbeat, db_timeout) -> None:
    from ..backends import BACKENDS, check_count

    check_count(sw.trials, "--trials", "finished trials to reach")
    if sw.sampler == "grid":
        size = math.prod(_grid_size(s) for s in sw.space.values())
        if sw.trials > size:
            raise ConfigError(
                f"--trials {sw.trials} exceeds the grid's {size} points (a grid point is never "
                f"trained twice); use --trials {size} or fewer"
            )
    check_count(workers, "--workers", "Optuna workers feeding the study")
    check_count(heartbeat, "--heartbeat", "seconds between trial heartbeats")
    if not _is_number(db_timeout) or db_timeout <= 0:
        raise ConfigError(f"--db-timeout must be a number of seconds > 0, got {db_timeout!r}; e.g. --db-timeout 60")
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; expected one of {BACKENDS}")


def run_sweep(
    sw: Sweep,
    out: str | Path,
    storage: str | None = None,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    data_dir: str | None = None,
    heartbeat: int = 10,
    db_timeout: float = 60.0,
    log=print,
) -> Path:
    """Run (or continue) the sweep: ``workers`` Optuna workers on ``backend`` (``local``: this
    process, or the process pool when ``workers > 1``; ``ray``: one Ray task per worker) feed the
    study at ``storage`` (default ``OUT/study.db``) until ``sw.trials`` trials are finished;
    trials of dead workers are retried. Then writes the report (:func:`report`). Raises
    :class:`SweepError` when ``sw.max_failures`` trials in a row failed (after the report), and
    KeyboardInterrupt on Ctrl-C (the running trials stop at a checkpoint and are re-queued)."""
    _check_run_args(sw, workers, backend, heartbeat, db_timeout)
    import_optuna()  # before anything is written: no empty directory is left without Optuna
    out = Path(out).expanduser().absolute()
    url = absolute_url(storage or default_storage(out))
    data_dir = None if data_dir is None else str(Path(data_dir).expanduser().absolute())
    check_out_dir(sw, out, url, db_timeout)
    check_metric(sw, data_dir, log)  # before any trial trains
    with _backend_ready(sw, backend, address):
        out.mkdir(parents=True, exist_ok=True)
        study = open_study(sw, make_storage(url, heartbeat, db_timeout))  # fails early on a bad database
        (out / "sweep.json").write_text(json.dumps({**sw.to_dict(), "storage": public_url(url)}, indent=2) + "\n")
        log(
            f"sweep {sw.name}: {sw.trials} trials of {sw.preset} ({sw.sampler}, {sw.direction} {sw.metric}), "
            f"{workers} worker(s) on backend {backend}; study {public_url(url)}; already {_counts_text(study)}"
        )
        args = (sw.to_dict(), str(out), url, data_dir, heartbeat, db_timeout)
        trial_log = TrialLog(study, sw, log)
        try:
            _drive(sw, study, args, workers, backend, address, trial_log, log)
        except KeyboardInterrupt:
            trial_log()
            report(sw, out, url, log=log)
            raise
        report(sw, out, url, log=log)
        streak = failure_streak(study)
        if len(streak) >= sw.max_failures:
            last = streak[0]
            raise SweepError(
                f"sweep {sw.name} stopped: the last {len(streak)} trials failed (max_failures = {sw.max_failures}); "
                f"the latest, trial {last.number}: {last.user_attrs.get('error', 'failed')}; narrow the search space "
                f"or fix the preset (see {out / 'trials.md'}), or raise max_failures in the sweep file"
            )
    return out


def _drive(sw: Sweep, study, args: tuple, workers: int, backend: str, address: str | None, trial_log, log) -> None:
    """Run rounds of workers until no trial is waiting (re-queued) or running elsewhere."""
    from optuna.storages import fail_stale_trials

    deadline = None
    while True:
        before = count_states(study)
        errors = _round(sw, args, workers, backend, address, trial_log, log)
        fail_stale_trials(study)
        trial_log()
        c = count_states(study)
        log(f"sweep {sw.name}: {_counts_text(study)}")
        if len(failure_streak(study)) >= sw.max_failures or (not c.get("RUNNING") and not c.get("WAITING")):
            return
        if errors and c == before:
            raise SweepError(f"sweep {sw.name}: every worker failed without finishing a trial; the first: {errors[0]}")
        # trials still marked running belong to other workers, or to dead ones whose heartbeat
        # has not yet expired: wait for them to finish or be re-queued, then run the retries
        deadline = deadline or time.monotonic() + 3 * args[4] + 60
        if c.get("RUNNING") and not c.get("WAITING"):
            if time.monotonic() > deadline:
                log(f"sweep {sw.name}: {c['RUNNING']} trial(s) still running elsewhere; reporting without them")
                return
            time.sleep(args[4])


def _round(sw: Sweep, args: tuple, workers: int, backend: str, address: str | None, trial_log, log) -> list[str]:
    """One round of ``workers`` workers; returns the errors of those that failed (a
    :class:`ConfigError` of a worker, such as a database fault or another study's run, is raised)."""
    errors: list = []
    if backend == "local" and workers == 1:
        _in_process(args, trial_log, log)
    elif backend == "local":
        _local_pool(args, workers, trial_log, errors, log)
    else:
        _ray_workers(sw, args, workers, address, trial_log, errors, log)
    for e in errors:
        if isinstance(e, ConfigError):
            raise e
    return [e if isinstance(e, str) else f"{type(e).__name__}: {e}" for e in errors]


def _in_process(args: tuple, trial_log, log) -> None:
    def first() -> None:
        request_stop()
        log(
            "interrupted: the running trial stops at its next checkpoint and is re-queued (Ctrl-C again to stop it now)"
        )

    with interruptible(first):
        worker(Sweep(**args[0]), *args[1:], index=0, on_trial=trial_log)
        interrupted = stop_requested()
    if interrupted:
        raise Interrupted("interrupted")


def _local_pool(args: tuple, workers: int, trial_log, errors: list, log) -> None:
    from ..backends.pool import run_pool

    def on_outcome(o) -> None:
        if o.state == "done":
            log(f"  [worker {o.index + 1}/{workers}] ran {o.value} trial(s)")
        elif o.state in ("error", "died"):
            errors.append(o.error)
            text = o.error if isinstance(o.error, str) else f"{type(o.error).__name__}: {o.error}"
            log(f"  [worker {o.index + 1}/{workers}] failed: {text}")

    run_pool(
        _worker_entry,
        [(*args, i) for i in range(workers)],
        workers,
        on_outcome,
        tick=lambda: trial_log(force=False),
        log=log,
    )


@contextlib.contextmanager
def _backend_ready(sw: Sweep, backend: str, address: str | None):
    """Ray: connected to the cluster and the workers' request checked against its nodes before
    the output directory and the study are made, so a wrong address or a GPU no node has leaves
    nothing behind (a study made with ``--device cuda`` would refuse the same sweep with
    ``--device cpu``). The rounds reuse this connection."""
    if backend != "ray":
        yield
        return
    from ..backends.ray import check_resources, session

    with session(address) as ray:
        resources, device = _ray_resources(sw, ray)
        check_resources(
            ray, [(resources["num_cpus"], resources["num_gpus"], f"a worker of sweep {sw.name}", device)], address
        )
        yield


def _ray_resources(sw: Sweep, ray) -> tuple[dict, str]:
    """One sweep worker's Ray resources (a trial's: its threads, a GPU as ``gpus_requested``
    says) and its ``train.device``."""
    from .. import config
    from ..device import gpus_requested

    cfg = config.load(sw.preset, sw.set)
    device = str(getattr(cfg.train, "device", "cpu") or "cpu")
    gpus = gpus_requested(device, ray.cluster_resources().get("GPU", 0))
    return {"num_cpus": cfg.train.threads, "num_gpus": gpus, "name": f"rnnlab-sweep:{sw.name}"}, device


def _ray_workers(sw: Sweep, args: tuple, workers: int, address: str | None, trial_log, errors: list, log) -> None:
    from ..backends.ray import run_calls, session

    with session(address) as ray:
        resources, device = _ray_resources(sw, ray)
        log(f"  ray: {workers} sweep worker task(s) on {len(ray.nodes())} node(s)")

        def on_result(i: int, value, error) -> None:
            if error is None:
                log(f"  [worker {i + 1}/{workers}] ran {value} trial(s)")
            else:
                errors.append(error)
                log(f"  [worker {i + 1}/{workers}] failed: {error}")

        run_calls(
            _worker_entry,
            [(*args, i) for i in range(workers)],
            resources,
            address,
            on_result=on_result,
            tick=lambda: trial_log(force=False),
            what=f"a worker of sweep {sw.name}",
            device=device,
        )


def _counts_text(study) -> str:
    c = count_states(study)
    return ", ".join(f"{n} {k.lower()}" for k, n in sorted(c.items())) or "no trials"


def _check_report_only(sw: Sweep, out: Path, storage: str | None) -> None:
    """``--report-only`` writes into ``out`` only for this sweep's existing study."""
    url = absolute_url(storage or default_storage(out))
    check_out_dir(sw, out, url)
    if storage is None and not (out / "study.db").exists():
        raise ConfigError(f"no study to report on: {out / 'study.db'} does not exist; run the sweep first")
    if sw.name not in [s.study_name for s in make_storage(url).get_all_studies()]:
        raise ConfigError(f"no study named {sw.name!r} in {public_url(url)}; run the sweep first")


def main_sweep(
    spec: str,
    *,
    out: str | None = None,
    runs_dir: str = "runs",
    trials: int | None = None,
    overrides: list[str] | None = None,
    storage: str | None = None,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    heartbeat: int = 10,
    db_timeout: float = 60.0,
    report_only: bool = False,
    data_dir: str | None = None,
) -> int:
    """``rnnlab sweep``: run (or continue) the sweep ``spec`` and print its trials table; every
    option as the command line's (``overrides`` = ``--set``). Returns the exit code: 130 after
    Ctrl-C (the same command continues)."""
    sw = load_sweep(spec, list(overrides or []))
    if trials is not None:
        sw.trials = trials
    out = Path(out) if out else Path(runs_dir) / f"sweep-{sw.name}"
    log = functools.partial(show_progress, logging.getLogger(__name__))  # hidden by -q, -qq
    try:
        if report_only:
            _check_report_only(sw, out, storage)
            report(sw, out, storage, log=log)
        else:
            out = run_sweep(
                sw,
                out,
                storage,
                workers,
                backend,
                address,
                data_dir,
                heartbeat=heartbeat,
                db_timeout=db_timeout,
                log=log,
            )
    except KeyboardInterrupt:
        print(
            f"rnnlab: interrupted; the running trials stopped at a checkpoint and are re-queued; rerun the "
            f"same command to continue (report so far in {out})",
            file=sys.stderr,
        )
        return 130
    print((out / "trials.md").read_text(), end="")
    written = [n for n in ("trials.md", "best.toml", "history.png", "importance.png") if (out / n).exists()]
    log(f"\nin {out}: {', '.join(written)}")
    return 0
