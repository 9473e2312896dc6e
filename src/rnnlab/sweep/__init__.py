"""Hyperparameter sweeps over a preset with Optuna (optional extra ``rnnlab[sweep]``).

A sweep is a TOML file::

    name = "copy-lstm-lr"
    preset = "demo/lstm"                 # the configuration every trial starts from
    set = ["train.steps=200"]            # fixed overrides for every trial (optional)
    metric = "val/loss"                  # the objective: its best value over the evaluations
    direction = "minimize"               # optional; default from the metric's name
    trials = 20                          # finished (complete or pruned) trials to reach
    sampler = "tpe"                      # tpe (default) | random | grid
    pruner = "median"                    # median (default) | none
    seed = 0                             # the sampler's seed
    max_failures = 5                     # consecutive failed trials that end the sweep

    [space]                              # one entry per config key (any `--set` key)
    "optim.lr" = { type = "loguniform", low = 1e-4, high = 1e-2 }
    "optim.clip" = { type = "uniform", low = 0.5, high = 10.0 }
    "model.hidden_size" = { type = "int", low = 16, high = 64, step = 16 }
    "optim.name" = { type = "categorical", choices = ["adam", "rmsprop"] }

The study lives in an RDB (SQLite ``OUT/study.db`` by default, or any SQLAlchemy URL such as
``postgresql://...`` for workers on several machines), so a killed sweep continues when the
same command is run again and several workers can feed one study. The sampler of trial ``n``
is seeded from the sweep's seed, the study's name and ``n``, so a restarted sweep, an added
worker or a raised target proposes new points, never the first trials' again. Trial ``n``
trains into ``OUT/trials/trial-000n`` through the backends' ``run_one`` (lock, resume,
attempts log). Each running trial writes a heartbeat; a trial whose worker died is marked FAIL
once its heartbeat is older than the grace period and re-queued once with the same parameters
(SQLite transactions take the write lock when they begin, so two workers never both re-queue
it), and the retry resumes the dead trial's run directory from its checkpoint. Pruning goes
through the trainer's ``on_eval`` hook; the trainer knows nothing of Optuna.

At the end ``OUT`` holds ``best.toml`` (a preset ``rnnlab train`` accepts), ``trials.md`` (one
row per trial) and ``history.png`` / ``importance.png``.
"""

# the sections: spec (the sweep file), study (storage, samplers), trial (one trial, the worker),
# report (trials.md, best.toml, plots), driver (workers until done; ``rnnlab sweep``). Their
# names stay reachable as ``rnnlab.sweep.X`` (a few private ones too, as ``X as X``).
from .driver import TrialLog, main_sweep, run_sweep
from .report import best_preset_text, report, trials_table
from .spec import (
    MAX_GRID,
    MAY_CHANGE,
    PARAM_TYPES,
    PRUNERS,
    SAMPLERS,
    SWEEP_DIR,
    Sweep,
    SweepError,
    TrialFailed,
    TrialInterrupted,
    check_metric,
    decode,
    grid_values,
    import_optuna,
    load_sweep,
    override,
    reported_metrics,
)
from .spec import _check_param as _check_param
from .study import (
    absolute_url,
    check_out_dir,
    count_states,
    default_storage,
    make_storage,
    open_study,
    public_url,
    trial_seed,
)
from .trial import _objective as _objective
from .trial import _suggest as _suggest
from .trial import _worker_entry as _worker_entry
from .trial import failure_streak, objective_value, trial_run_dir, worker

__all__ = [
    "MAX_GRID",
    "MAY_CHANGE",
    "PARAM_TYPES",
    "PRUNERS",
    "SAMPLERS",
    "SWEEP_DIR",
    "Sweep",
    "SweepError",
    "TrialFailed",
    "TrialInterrupted",
    "TrialLog",
    "absolute_url",
    "best_preset_text",
    "check_metric",
    "check_out_dir",
    "count_states",
    "decode",
    "default_storage",
    "failure_streak",
    "grid_values",
    "import_optuna",
    "load_sweep",
    "main_sweep",
    "make_storage",
    "objective_value",
    "open_study",
    "override",
    "public_url",
    "report",
    "reported_metrics",
    "run_sweep",
    "trial_run_dir",
    "trial_seed",
    "trials_table",
    "worker",
]
