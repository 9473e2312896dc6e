"""One trial: its run directory, its objective (a run through the backends' ``run_one``, pruned
through the trainer's ``on_eval`` hook), and the worker loop that feeds a study.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from ..backends.pool import stop_requested
from ..config import ConfigError
from ..rundir import RunFiles, read_jsonl
from .spec import Sweep, SweepError, TrialFailed, TrialInterrupted, _grid_size, decode, import_optuna, override
from .study import _choice, _db_error, count_states, make_storage, open_study

log = logging.getLogger(__name__)


def trial_run_dir(out: Path, number: int) -> Path:
    return out / "trials" / f"trial-{number:04d}"


def objective_value(run_dir: Path, metric: str, direction: str) -> float:
    """The trial's value: the best ``metric`` over its evaluations (``metrics.jsonl``), or for
    a ``test/`` metric the one in ``result.json``."""
    result = RunFiles(run_dir).read_result()
    if metric.startswith("test/"):
        values = [result.get("test", {}).get(metric)]
        keys = sorted(result.get("test", {}))
    else:
        rows = read_jsonl(RunFiles(run_dir).metrics)[0]
        values = [r[metric] for r in rows if metric in r]
        keys = sorted({k for r in rows for k in r if "/" in k})
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        raise ConfigError(f"metric {metric!r} was never evaluated in {run_dir}; metrics there: {keys}")
    return min(values) if direction == "minimize" else max(values)


def _trial_dir(trial, out: Path, study_name: str) -> tuple[int, Path]:
    """The run directory a trial trains in: its own, or a retried trial's (a retry resumes the
    dead trial's run). A new trial whose directory already holds a run is another study's."""
    owner = trial.user_attrs.get("run_trial")
    if owner is not None:
        return owner, trial_run_dir(out, owner)
    run_dir = trial_run_dir(out, trial.number)
    if run_dir.is_dir() and any(p.name != RunFiles.LOCK for p in run_dir.iterdir()):
        raise SweepError(
            f"{run_dir} already holds a run, but trial {trial.number} of study {study_name!r} is new: "
            f"the directory holds another study's trials (a study.db replaced or deleted?); move "
            f"{out / 'trials'} away or use another --out"
        )
    trial.set_user_attr("run_trial", trial.number)
    return trial.number, run_dir


def _pruning_hook(trial, metric: str, pruned: list):
    def on_eval(step: int, metrics: dict) -> bool:
        value = metrics.get(metric)
        if value is None or math.isnan(value):
            return False
        trial.report(value, step)
        if trial.should_prune():
            pruned.append(step)
            return True
        return False

    return on_eval


def _objective(sw: Sweep, out: Path, data_dir: str | None, running: list | None = None):
    """The study's objective; ``running`` (when given) gets the number of each trial it starts."""
    optuna = import_optuna()
    from ..backends import job_for, run_one

    def objective(trial) -> float:
        if running is not None:
            running.append(trial.number)
        if sw.sampler == "grid":
            _refuse_a_taken_grid_point(trial)
        params = {k: _suggest(trial, k, s) for k, s in sw.space.items()}
        owner, run_dir = _trial_dir(trial, out, sw.name)
        trial.set_user_attr("run_dir", str(run_dir.relative_to(out)))
        for attr in ("status", "error"):  # a retry inherits the attributes of the trial it repeats
            trial.set_user_attr(attr, "")
        overrides = [*sw.set, f'name="{sw.name}-trial{owner:04d}"', *(override(k, v) for k, v in params.items())]
        job = job_for(sw.preset, overrides, run_dir, data_dir)
        pruned: list[int] = []
        # a directory still locked (a retry whose first worker is alive after all) is waited for
        status, err = run_one(job, on_eval=_pruning_hook(trial, sw.metric, pruned), wait=300.0)
        trial.set_user_attr("status", status)
        if status in ("interrupted", "cancelled"):
            trial.set_user_attr("error", "interrupted by Ctrl-C (re-queued)")
            raise TrialInterrupted(trial.number)
        if status in ("failed", "busy"):
            trial.set_user_attr("error", err)
            raise TrialFailed(err)
        value = objective_value(run_dir, sw.metric, sw.direction)
        result = RunFiles(run_dir).read_result()
        trial.set_user_attr("steps", result["steps"])
        if pruned or result.get("stopped") == "on_eval":
            raise optuna.TrialPruned(f"pruned at step {result['steps']} ({sw.metric}={value:.4g})")
        return value

    return objective


def _refuse_a_taken_grid_point(trial) -> None:
    """Two workers that start the last trials of a grid at once: the one that comes second gets
    a point already taken (Optuna repeats one when the grid is exhausted). It is recorded as a
    skipped FAIL instead of training the same configuration twice."""
    trials = trial.study.get_trials(deepcopy=False)
    me = next(t for t in trials if t.number == trial.number)
    gid = me.system_attrs.get("grid_id")
    if gid is None or me.user_attrs.get("run_trial") is not None:
        return
    for t in trials:
        if t.number < trial.number and t.system_attrs.get("grid_id") == gid and t.state.name != "FAIL":
            trial.set_user_attr("status", "skipped")
            trial.set_user_attr("error", f"grid point of trial {t.number} (the grid is exhausted): not run")
            raise TrialFailed(f"grid point of trial {t.number}")


def _suggest(trial, key: str, spec: dict):
    kind = spec["type"]
    if kind == "loguniform":
        return trial.suggest_float(key, spec["low"], spec["high"], log=True)
    if kind == "uniform":
        return trial.suggest_float(key, spec["low"], spec["high"])
    if kind == "int":
        return trial.suggest_int(key, spec["low"], spec["high"], step=spec.get("step", 1), log=spec.get("log", False))
    return decode(spec, trial.suggest_categorical(key, [_choice(spec, c) for c in spec["choices"]]))


def failure_streak(study) -> list:
    """The trials that failed one after another most recently (in completion order): runs that
    failed or stayed busy. Trials of dead workers and Ctrl-C are neither counted nor break it."""
    finished = sorted(
        (t for t in study.get_trials(deepcopy=False) if t.state.is_finished()),
        key=lambda t: (t.datetime_complete or t.datetime_start, t.number),
    )
    streak = []
    for t in reversed(finished):
        if t.state.name != "FAIL":
            break
        if t.user_attrs.get("status") in ("failed", "busy"):
            streak.append(t)
    return streak


def _target_reached(study, sw: Sweep) -> bool:
    """``sw.trials`` finished or running and none waiting; for a grid, also every point taken."""
    c = count_states(study)
    if c.get("WAITING", 0):
        return False
    if sw.sampler == "grid":
        taken = {t.system_attrs.get("grid_id") for t in study.get_trials(deepcopy=False) if t.state.name != "FAIL"}
        if len(taken - {None}) >= math.prod(_grid_size(s) for s in sw.space.values()):
            return True
    return c.get("COMPLETE", 0) + c.get("PRUNED", 0) + c.get("RUNNING", 0) >= sw.trials


def _requeue(study, number: int) -> None:
    """Queue a retry of trial ``number`` with its parameters and run directory (as for a dead worker)."""
    from optuna.storages import RetryHeartbeatStaleTrialCallback

    trial = next(t for t in study.get_trials(deepcopy=True) if t.number == number)
    RetryHeartbeatStaleTrialCallback(max_retry=None)(study, trial)


def worker(
    sw: Sweep,
    out: str | Path,
    storage_url: str,
    data_dir: str | None = None,
    heartbeat: int = 10,
    db_timeout: float = 60.0,
    index: int = 0,
    on_trial=None,
) -> int:
    """One Optuna worker: run trials of the study until ``sw.trials`` are finished or taken by
    running trials and none is waiting (re-queued), the last ``sw.max_failures`` trials failed,
    or a stop was requested (Ctrl-C). Returns the number of trials it ran; ``on_trial()`` is
    called after each. Any number of workers, on any machines that reach ``storage_url``, may
    run at once (``index`` only names the worker)."""
    optuna = import_optuna()
    import sqlalchemy.exc
    from optuna.storages import fail_stale_trials

    out = Path(out)
    storage = make_storage(storage_url, heartbeat, db_timeout)
    study = open_study(sw, storage)
    running: list[int] = []
    objective = _objective(sw, out, data_dir, running)
    callbacks = [lambda study, trial: on_trial()] if on_trial is not None else None
    ran = 0
    try:
        while not stop_requested():
            fail_stale_trials(study)
            if _target_reached(study, sw) or len(failure_streak(study)) >= sw.max_failures:
                return ran
            ran += 1
            running.clear()
            try:
                study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False, callbacks=callbacks)
            except ValueError as e:  # Optuna's refusal to record a trial failed elsewhere
                if isinstance(e, ConfigError) or not _declared_dead(study, running, heartbeat):
                    raise
            except TrialInterrupted as e:
                _requeue(study, e.args[0])
                if on_trial is not None:
                    on_trial()
                return ran
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as e:
        raise ConfigError(_db_error(storage_url, e)) from None
    return ran


def _declared_dead(study, running: list, heartbeat: int) -> bool:
    """Whether the trial this worker was running was failed by another worker as stale: its
    heartbeat lapsed past the grace period while it was alive (a starved process on a loaded
    machine), so Optuna refuses the worker's own result ("Cannot tell a FAIL trial"). That
    worker has queued a retry in the same run directory, which resumes or reuses this run; the
    worker goes on with the next trial instead of dying."""
    if not running:
        return False
    trials = study.get_trials(deepcopy=False)
    trial = next((t for t in trials if t.number == running[-1]), None)
    if trial is None or trial.state.name != "FAIL":
        return False
    if not any(t.system_attrs.get("failed_trial") == trial.number for t in trials):
        return False  # failed without a retry: not by a stale check (or out of retries)
    log.warning(
        f"trial {trial.number} was declared dead by another worker while it ran (no heartbeat for "
        f"{3 * heartbeat} s: is the machine overloaded? --heartbeat sets the interval); its retry "
        f"is queued and continues in {trial.user_attrs.get('run_dir', 'its run directory')}"
    )
    return True


def _worker_entry(
    sweep: dict, out: str, storage_url: str, data_dir: str | None, heartbeat: int, db_timeout: float, index: int = 0
) -> int:
    from ..runtime import tune_process

    tune_process()
    return worker(Sweep(**sweep), out, storage_url, data_dir, heartbeat, db_timeout, index)
