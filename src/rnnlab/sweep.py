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

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .backends.pool import Interrupted, interruptible, request_stop, stop_requested
from .config import ConfigError, dump_toml, toml_value, tomllib
from .rundir import RunFiles

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "none")
SWEEP_DIR = Path(__file__).parent / "sweeps"
PARAM_TYPES = {
    "loguniform": ("low", "high"),
    "uniform": ("low", "high"),
    "int": ("low", "high", "step", "log"),
    "categorical": ("choices",),
}
#: the most points a grid sampler may have (each is a trial)
MAX_GRID = 100_000


@dataclass
class Sweep:
    name: str
    preset: str
    space: dict
    metric: str = ""
    direction: str = ""
    trials: int = 0
    sampler: str = "tpe"
    pruner: str = "median"
    seed: int = 0
    set: list[str] = field(default_factory=list)
    description: str = ""
    max_failures: int = 5

    def to_dict(self) -> dict:
        return asdict(self)


#: fields that may change between runs of one study (the rest must match what made it)
MAY_CHANGE = ("trials", "description", "max_failures")


class TrialFailed(RuntimeError):
    """A trial's run failed (diverged, crashed): recorded as FAIL, the sweep goes on."""


class TrialInterrupted(RuntimeError):
    """Ctrl-C stopped a trial's run at its checkpoint: FAIL, re-queued with its parameters."""


class SweepError(ConfigError):
    """The sweep cannot go on: every recent trial failed, or its directory holds another study."""


def import_optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("sweeps need Optuna: pip install 'rnnlab[sweep]'") from None
    import warnings

    # heartbeats and retries are marked experimental; we rely on them knowingly. Each finished
    # trial is reported in one line by the driver, so Optuna's own per-trial messages are off.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna


# --------------------------------------------------------------------------- the sweep file


def override(key: str, value) -> str:
    """``key=value`` with the value as a TOML literal (what ``--set`` parses)."""
    return f"{key}={toml_value(value)}"


def _grid_size(spec: dict) -> int:
    if spec["type"] == "categorical":
        return len(spec["choices"])
    return (spec["high"] - spec["low"]) // spec.get("step", 1) + 1


def grid_values(key: str, spec: dict) -> list:
    if spec["type"] == "categorical":
        return list(spec["choices"])
    if spec["type"] == "int":
        return list(range(spec["low"], spec["high"] + 1, spec.get("step", 1)))
    raise ConfigError(
        f"search space key {key!r}: the grid sampler needs a finite set of values; give it "
        f'type = "categorical" with choices = [...] (or type = "int"), not {spec["type"]!r}'
    )


def _is_number(x, kinds=(int, float)) -> bool:
    return isinstance(x, kinds) and not isinstance(x, bool) and (not isinstance(x, float) or math.isfinite(x))


def _check_param(key: str, spec) -> dict:
    """One entry of ``[space]``: a one-line ConfigError for anything Optuna would refuse, warn
    about or silently change (``tests/test_sweep.py`` samples every space this accepts)."""
    where = f"search space key {key!r}"
    if not isinstance(spec, dict) or "type" not in spec:
        raise ConfigError(
            f'{where}: expected a table like {{ type = "loguniform", low = 1e-4, high = 1e-2 }}, got {spec!r}'
        )
    kind = spec["type"]
    if kind not in PARAM_TYPES:
        raise ConfigError(f"{where}: unknown type {kind!r}; expected one of {sorted(PARAM_TYPES)}")
    unknown = sorted(set(spec) - {"type", *PARAM_TYPES[kind]})
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown} for type {kind!r}; valid: {list(PARAM_TYPES[kind])}")
    if kind == "categorical":
        return _check_choices(where, spec)
    missing = [k for k in ("low", "high") if k not in spec]
    if missing:
        raise ConfigError(f"{where}: type {kind!r} needs {missing}")
    low, high = spec["low"], spec["high"]
    if not all(_is_number(x, (int,) if kind == "int" else (int, float)) for x in (low, high)):
        raise ConfigError(
            f"{where}: low and high must be {'integers' if kind == 'int' else 'finite numbers'}, "
            f"got low={low!r}, high={high!r}"
        )
    if (kind == "int" and low > high) or (kind != "int" and not low < high):
        raise ConfigError(
            f"{where}: empty range low={low!r}, high={high!r}; need low < high"
            + (" (low <= high for int)" if kind == "int" else "")
        )
    if not math.isfinite(float(high) - float(low)):
        raise ConfigError(f"{where}: the range low={low!r}, high={high!r} is wider than a float holds; narrow it")
    if kind == "int":
        _check_int(where, spec)
    if (kind == "loguniform" or spec.get("log")) and low <= 0:
        raise ConfigError(f"{where}: a log scale needs low > 0, got low={low!r}")
    return spec


def _check_int(where: str, spec: dict) -> None:
    step, log = spec.get("step", 1), spec.get("log", False)
    if not _is_number(step, (int,)) or step < 1:
        raise ConfigError(f"{where}: step must be a positive integer, got {step!r}")
    if not isinstance(log, bool):
        raise ConfigError(f"{where}: log must be true or false, got {log!r}")
    if log and step != 1:
        raise ConfigError(
            f"{where}: step = {step} cannot be combined with log = true (Optuna samples a log "
            f"scale only with step 1); drop one of them"
        )
    if (spec["high"] - spec["low"]) % step:
        fit = spec["low"] + (spec["high"] - spec["low"]) // step * step
        raise ConfigError(
            f"{where}: high - low = {spec['high'] - spec['low']} is not a multiple of step = {step} "
            f"(Optuna would silently lower high to {fit}); set high = {fit} or another step"
        )


def _check_choices(where: str, spec: dict) -> dict:
    choices = spec.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"{where}: 'choices' must be a non-empty list, got {choices!r}")
    for i, c in enumerate(choices):
        if isinstance(c, float) and not math.isfinite(c):
            raise ConfigError(f"{where}: choice {c!r} is not a finite number")
        if isinstance(c, dict):
            raise ConfigError(f"{where}: choice {c!r} is a table; choices are numbers, strings, booleans or lists")
        if any(c == d for d in choices[:i]):  # Optuna tells 1, 1.0 and true apart by equality only
            raise ConfigError(
                f"{where}: choice {c!r} repeats an earlier one (equal values) in {choices!r}; list each value once"
            )
    return spec


def _encoded(spec: dict) -> bool:
    """Whether a categorical's choices reach Optuna as their TOML text (lists: Optuna stores
    only numbers, strings and booleans)."""
    return any(isinstance(c, list) for c in spec["choices"])


def decode(spec: dict, value):
    """A parameter's value as the configuration takes it (undoing :func:`_encoded`'s text)."""
    if spec["type"] == "categorical" and _encoded(spec) and isinstance(value, str):
        texts = [toml_value(c) for c in spec["choices"]]
        return spec["choices"][texts.index(value)] if value in texts else value
    return value


def _representatives(spec: dict) -> list:
    if spec["type"] == "categorical":
        return list(spec["choices"])
    return [spec["low"], spec["high"]]


def _find_sweep_file(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists() and (SWEEP_DIR / f"{path}.toml").exists():
        p = SWEEP_DIR / f"{path}.toml"
    if not p.exists():
        shipped = sorted(q.stem for q in SWEEP_DIR.glob("*.toml"))
        raise ConfigError(
            f"no sweep file {str(path)!r}; give a sweep TOML file (see docs/sweeps.md) or a shipped sweep: {shipped}"
        )
    return p


def _read_sweep_file(p: Path) -> dict:
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    valid = set(Sweep.__dataclass_fields__)
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ConfigError(f"{p}: unknown key(s) {unknown}; valid keys: {sorted(valid)}")
    missing = [k for k in ("name", "preset", "space") if k not in data]
    if missing:
        raise ConfigError(f"{p}: a sweep needs {missing} (see docs/sweeps.md)")
    kinds = {
        "name": str,
        "preset": str,
        "space": dict,
        "metric": str,
        "direction": str,
        "trials": int,
        "sampler": str,
        "pruner": str,
        "seed": int,
        "set": list,
        "description": str,
        "max_failures": int,
    }
    words = {str: "a string", int: "an integer", dict: "a table", list: "a list"}
    for k, v in data.items():
        if not isinstance(v, kinds[k]) or isinstance(v, bool):
            raise ConfigError(f"{p}: {k} must be {words[kinds[k]]}, got {v!r}")
    if not data["name"].strip() or any(c in data["name"] for c in "/\\\n\t"):
        raise ConfigError(
            f"{p}: name must be non-empty, without '/', '\\', tabs or line breaks (it names the "
            f"study and the directory sweep-<name>), got {data['name']!r}"
        )
    if not all(isinstance(x, str) for x in data.get("set", [])):
        raise ConfigError(f'{p}: set must be a list of "key=value" strings, got {data["set"]!r}')
    return data


def load_sweep(path: str | Path, extra_set: list[str] | None = None) -> Sweep:
    """Read and check a sweep TOML: known fields, a valid space whose every key is a config key
    the preset accepts (each value tried against the real configuration), sampler, direction."""
    from . import config
    from .train import higher_is_better

    p = _find_sweep_file(path)
    sw = Sweep(**_read_sweep_file(p))
    sw.set = [*sw.set, *(extra_set or [])]
    if Path(sw.preset).suffix == ".toml" and Path(sw.preset).is_file():  # the same file from any directory
        sw.preset = str(Path(sw.preset).expanduser().absolute())
    if not sw.space:
        raise ConfigError(
            f'{p}: [space] is empty; give at least one key, e.g. "optim.lr" = '
            f'{{ type = "loguniform", low = 1e-4, high = 1e-2 }}'
        )
    if sw.sampler not in SAMPLERS:
        raise ConfigError(f"{p}: unknown sampler {sw.sampler!r}; expected one of {SAMPLERS}")
    if sw.pruner not in PRUNERS:
        raise ConfigError(f"{p}: unknown pruner {sw.pruner!r}; expected one of {PRUNERS}")
    base = config.load(sw.preset, sw.set)  # a bad preset or fixed override fails here
    _check_space(p, sw)
    if not sw.metric:
        sw.metric = base.train.select_metric or f"val/{_primary_metric(base)}"
    if sw.direction == "":
        sw.direction = "maximize" if higher_is_better(sw.metric) else "minimize"
    if sw.direction not in ("minimize", "maximize"):
        raise ConfigError(f"{p}: direction must be 'minimize' or 'maximize', got {sw.direction!r}")
    if sw.sampler == "grid":
        size = math.prod(_grid_size(s) for s in sw.space.values())
        if size > MAX_GRID:
            raise ConfigError(
                f'{p}: the grid has {size} points (more than {MAX_GRID}); use sampler = "tpe" '
                f'or "random", or fewer values'
            )
        if sw.trials > size:
            raise ConfigError(
                f"{p}: trials = {sw.trials} exceeds the grid's {size} points (a grid trial is "
                f"never repeated); use trials <= {size}"
            )
        sw.trials = sw.trials or size
    if sw.trials < 1:
        raise ConfigError(f"{p}: trials must be >= 1, got {sw.trials}")
    if sw.max_failures < 1:
        raise ConfigError(
            f"{p}: max_failures must be >= 1 (consecutive failed trials that end the sweep), got {sw.max_failures}"
        )
    return sw


def _check_space(p: Path, sw: Sweep) -> None:
    from . import config

    for key, spec in sw.space.items():
        _check_param(key, spec)
        section = key.split(".")[0]
        if section not in config.SECTIONS or "." not in key:
            raise ConfigError(
                f"{p}: search space key {key!r} is not a config key; expected "
                f"SECTION.KEY with SECTION in {sorted(config.SECTIONS)} (e.g. optim.lr)"
            )
        if sw.sampler == "grid" and spec["type"] not in ("categorical", "int"):
            grid_values(key, spec)  # the grid sampler's one-line refusal
        for value in _representatives(spec):
            try:
                config.load(sw.preset, [*sw.set, override(key, value)])
            except ConfigError as e:
                raise ConfigError(
                    f"{p}: search space key {key!r} = {value!r} does not fit preset "
                    f"{sw.preset!r}: {str(e).split(': ', 1)[-1]}"
                ) from None


def _primary_metric(cfg) -> str:
    from .train import build_task

    try:
        return build_task(cfg.task).primary_metric
    except Exception:  # real-data task without its files here: the loss is always there
        return "loss"


def reported_metrics(cfg, task) -> set[str]:
    """The metric names a run of ``cfg`` on ``task`` writes to ``metrics.jsonl`` /
    ``result.json``: the task's evaluation metrics (``Task.metric_names``, the trainer's own
    list) as ``val/...`` and, with ``train.test``, ``test/...``; ``train/loss``, ``lr``,
    ``train/grad_norm`` with clipping and ``train/reg`` for a regularised model."""
    import torch

    from .train import build_model

    evals = task.metric_names()
    names = {"train/loss", "lr", *(f"val/{m}" for m in evals)}
    if cfg.train.test:
        names |= {f"test/{m}" for m in evals}
    if cfg.optim.clip > 0:
        names.add("train/grad_norm")
    with torch.random.fork_rng(devices=[]):  # (building the model draws from the global generator)
        reg = getattr(build_model(cfg.model, task), "regularization", None)
        if reg is not None and reg() is not None:
            names.add("train/reg")
    return names


def check_metric(sw: Sweep, data_dir: str | None = None, log=print) -> None:
    """A one-line error, before any trial trains, when no run of the sweep reports its metric,
    or when the preset's own ``train.select_metric`` / ``train.target_metric`` is not one of
    the task's (the trainer's check, :func:`rnnlab.train.check_metric_names`)."""
    from . import config
    from .tasks.data import DataError
    from .train import build_task, check_metric_names

    cfg = config.load(sw.preset, sw.set)
    try:
        task = build_task(cfg.task, data_dir)
    except (DataError, FileNotFoundError) as e:  # e.g. a cluster driver without the data
        log(f"note: metric {sw.metric!r} not checked here ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
        return
    try:
        check_metric_names(cfg, task)
    except ConfigError as e:
        raise ConfigError(f"sweep {sw.name}: preset {sw.preset}: {e}") from None
    names = reported_metrics(cfg, task)
    if sw.metric not in names:
        raise ConfigError(
            f"sweep {sw.name}: metric {sw.metric!r} is never reported by a run of {sw.preset} "
            f"(task {cfg.task.name}); its runs report {sorted(names)}; set metric = one of these "
            f"in the sweep file"
        )


# --------------------------------------------------------------------------- storage and study


def default_storage(out: Path) -> str:
    return f"sqlite:///{(Path(out) / 'study.db').absolute()}"


def absolute_url(url: str) -> str:
    """A SQLite URL with a relative path made absolute here (another process, or a Ray task on
    another machine, would resolve it against its own working directory)."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/"):
        path = url[len(prefix) :]
        if path and not path.startswith(":memory:") and not path.startswith("file:"):
            return prefix + str(Path(path).expanduser().absolute())
    return url


def public_url(url: str) -> str:
    """The storage URL without its password (what sweep.json records)."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy parses: the open fails with its own message
        return url


def make_storage(url: str, heartbeat: int = 10, db_timeout: float = 60.0):
    """An Optuna RDB storage with heartbeats (a dead worker's trial is failed after
    ``3 * heartbeat`` s and re-queued). Unreadable, corrupt or locked databases raise a
    one-line ConfigError."""
    import_optuna()
    import sqlalchemy.exc
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    engine_kwargs = {"connect_args": {"timeout": db_timeout}} if url.startswith("sqlite") else {}
    try:
        storage = RDBStorage(
            url,
            engine_kwargs=engine_kwargs,
            heartbeat_interval=heartbeat,
            grace_period=3 * heartbeat,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
        )
    except sqlalchemy.exc.SQLAlchemyError as e:
        raise ConfigError(_db_error(url, e)) from None
    _serialize_sqlite(storage.engine)
    return storage


def _serialize_sqlite(engine) -> None:
    """Make every SQLite transaction take the write lock when it begins (``BEGIN IMMEDIATE``).

    Optuna changes a trial's state by reading it, checking it and writing it in one transaction
    (``SELECT ... FOR UPDATE`` on PostgreSQL and MySQL, which locks the row). SQLite has no row
    lock, and Python's sqlite3 begins a transaction only at the first write, so two workers
    could both read a dead trial as RUNNING and both fail and re-queue it (two retries, the
    second counted COMPLETE without training), or both pop one waiting trial. With the lock
    taken at BEGIN the second worker reads the state the first one wrote."""
    if engine.dialect.name != "sqlite":
        return
    from sqlalchemy import event

    event.listen(engine, "connect", _sqlite_no_implicit_begin)
    event.listen(engine, "begin", _sqlite_begin_immediate)
    engine.dispose()  # connections opened before the listeners reconnect with them


def _sqlite_no_implicit_begin(dbapi_connection, connection_record) -> None:
    dbapi_connection.isolation_level = None  # sqlite3 emits no BEGIN of its own


def _sqlite_begin_immediate(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _db_error(url: str, e: Exception) -> str:
    if type(e).__name__ == "StorageInternalError":  # Optuna's wrapper of the database's own error
        e = e.__cause__ or e
    msg = str(getattr(e, "orig", None) or e).splitlines()[0]
    if "locked" in msg:
        hint = "another process holds it: wait, stop that process, or raise --db-timeout"
    elif "not a database" in msg or "malformed" in msg or "corrupt" in msg:
        hint = (
            "the file is not a usable SQLite database: move it away to start a new study, or point --storage elsewhere"
        )
    else:
        hint = "check the --storage URL and that the database server is reachable"
    return f"study database {public_url(url)!r}: {msg}; {hint}"


def trial_seed(seed: int, study_name: str, number: int) -> int:
    """The sampler's seed for trial ``number`` of study ``study_name``: the same trial of the same
    study always samples alike (a sweep is reproducible), different trials differently, whichever
    worker, restart or Ray retry runs them."""
    digest = hashlib.sha256(f"{seed}/{study_name}/{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _sampler(sw: Sweep):
    """The sweep's sampler. TPE and random draw from a generator seeded per trial
    (:func:`trial_seed`). The grid sampler keeps one seed: its shuffled grid must be the same in
    every worker, and trial ``n`` takes grid point ``n``, so no point is drawn twice."""
    optuna = import_optuna()
    if sw.sampler == "grid":
        space = {k: [_choice(s, v) for v in grid_values(k, s)] for k, s in sw.space.items()}
        return optuna.samplers.GridSampler(space, seed=sw.seed)
    if sw.sampler == "random":
        make = lambda seed: optuna.samplers.RandomSampler(seed=seed)  # noqa: E731
    else:
        make = lambda seed: optuna.samplers.TPESampler(seed=seed, constant_liar=True)  # noqa: E731
    return _per_trial_seed_sampler()(make, lambda n: trial_seed(sw.seed, sw.name, n))


def _choice(spec: dict, value):
    return toml_value(value) if spec["type"] == "categorical" and _encoded(spec) else value


_SAMPLER_CLASS = []


def _per_trial_seed_sampler():
    """The class of a sampler that builds a fresh inner sampler, seeded for each trial, before
    the trial samples (defined on first use: Optuna is an optional extra)."""
    if _SAMPLER_CLASS:
        return _SAMPLER_CLASS[0]
    optuna = import_optuna()

    class PerTrialSeedSampler(optuna.samplers.BaseSampler):
        def __init__(self, make, seed_of):
            self._make, self._seed_of = make, seed_of
            self._inner = make(seed_of(0))

        def before_trial(self, study, trial):
            self._inner = self._make(self._seed_of(trial.number))
            self._inner.before_trial(study, trial)

        def infer_relative_search_space(self, study, trial):
            return self._inner.infer_relative_search_space(study, trial)

        def sample_relative(self, study, trial, search_space):
            return self._inner.sample_relative(study, trial, search_space)

        def sample_independent(self, study, trial, param_name, param_distribution):
            return self._inner.sample_independent(study, trial, param_name, param_distribution)

        def after_trial(self, study, trial, state, values):
            self._inner.after_trial(study, trial, state, values)

        def reseed_rng(self):
            self._inner.reseed_rng()

    _SAMPLER_CLASS.append(PerTrialSeedSampler)
    return PerTrialSeedSampler


def _pruner(sw: Sweep):
    optuna = import_optuna()
    if sw.pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)


def _spec(sw: Sweep) -> dict:
    """The sweep as its study records it (JSON-normalised)."""
    return json.loads(json.dumps(sw.to_dict()))


def _identity(spec: dict) -> dict:
    """What must match between runs of one study: the recorded sweep without :data:`MAY_CHANGE`
    and without fixed overrides of execution keys (``config.NOT_EXPERIMENT``'s ``execution``:
    ``--device``, ``train.threads``, ...), which a resumed run may change too."""
    from . import config

    out = {k: v for k, v in spec.items() if k not in MAY_CHANGE}
    out["set"] = [
        o for o in out.get("set", []) if config.experiment_category(o.split("=", 1)[0].strip()) != "execution"
    ]
    return out


def open_study(sw: Sweep, storage, worker_index: int = 0):
    """Create the sweep's study, or load it and check that it was made from the same sweep.
    (``worker_index`` is kept for callers of older versions; sampling no longer depends on it.)"""
    optuna = import_optuna()
    import sqlalchemy.exc

    url = getattr(storage, "url", str(storage))
    try:
        study = optuna.create_study(
            study_name=sw.name,
            storage=storage,
            sampler=_sampler(sw),
            pruner=_pruner(sw),
            direction=sw.direction,
            load_if_exists=True,
        )
        spec = _spec(sw)
        saved = study.user_attrs.get("sweep")
        if saved is None:
            study.set_user_attr("sweep", spec)
        else:
            saved, spec = _identity(saved), _identity(spec)
            if saved != spec:
                diffs = sorted(k for k in set(saved) | set(spec) if saved.get(k) != spec.get(k))
                raise ConfigError(
                    f"study {sw.name!r} in {public_url(url)} was made from a different sweep (differs in "
                    f"{diffs}); use another sweep name or output directory, or the original sweep file"
                )
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as e:
        raise ConfigError(_db_error(url, e)) from None
    return study


def count_states(study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts


def check_out_dir(sw: Sweep, out: Path, url: str, db_timeout: float = 60.0) -> None:
    """Refuse an output directory that holds another sweep: its ``sweep.json`` names another
    sweep or another study database, its ``study.db`` holds a study of another name, or it has
    trial runs but no ``sweep.json``. (Otherwise the new study's trial 0 would adopt the old
    ``trials/trial-0000`` and overwrite ``trials.md`` and ``best.toml``.)"""
    fix = "give this sweep its own --out, or move that directory away"
    saved = None
    if (out / "sweep.json").is_file():
        try:
            saved = json.loads((out / "sweep.json").read_text())
        except (ValueError, OSError) as e:
            raise ConfigError(f"{out / 'sweep.json'} is unreadable ({e}); {fix}") from None
        if not isinstance(saved, dict) or saved.get("name") != sw.name:
            other = saved.get("name") if isinstance(saved, dict) else saved
            raise ConfigError(f"{out} holds sweep {other!r} (its sweep.json, study and trials), not {sw.name!r}; {fix}")
        if saved.get("storage") not in (None, public_url(url)):
            raise ConfigError(
                f"{out} belongs to the study in {saved['storage']}, not {public_url(url)}; pass "
                f"--storage {saved['storage']} to continue it, or {fix}"
            )
    if url == default_storage(out) and (out / "study.db").exists():
        names = [s.study_name for s in make_storage(url, db_timeout=db_timeout).get_all_studies()]
        others = [n for n in names if n != sw.name]
        if others:
            raise ConfigError(f"{out / 'study.db'} holds the study of sweep(s) {others}, not {sw.name!r}; {fix}")
    trials = out / "trials"
    if saved is None and trials.is_dir() and any(trials.iterdir()):
        raise ConfigError(f"{trials} holds trial runs, but {out} has no sweep.json saying whose; {fix}")


# --------------------------------------------------------------------------- one trial


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
        rows = [json.loads(x) for x in RunFiles(run_dir).metrics.read_text().splitlines() if x.strip()]
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


def _objective(sw: Sweep, out: Path, data_dir: str | None):
    optuna = import_optuna()
    from .backends import job_for, run_one

    def objective(trial) -> float:
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
    objective = _objective(sw, out, data_dir)
    callbacks = [lambda study, trial: on_trial()] if on_trial is not None else None
    ran = 0
    try:
        while not stop_requested():
            fail_stale_trials(study)
            if _target_reached(study, sw) or len(failure_streak(study)) >= sw.max_failures:
                return ran
            ran += 1
            try:
                study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False, callbacks=callbacks)
            except TrialInterrupted as e:
                _requeue(study, e.args[0])
                if on_trial is not None:
                    on_trial()
                return ran
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as e:
        raise ConfigError(_db_error(storage_url, e)) from None
    return ran


def _worker_entry(
    sweep: dict, out: str, storage_url: str, data_dir: str | None, heartbeat: int, db_timeout: float, index: int = 0
) -> int:
    from .runtime import tune_malloc

    tune_malloc()
    return worker(Sweep(**sweep), out, storage_url, data_dir, heartbeat, db_timeout, index)


# --------------------------------------------------------------------------- the driver


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
    from .backends import BACKENDS, check_count

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
    from .backends.pool import run_pool

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
    from .backends.ray import check_resources, session

    with session(address) as ray:
        resources, device = _ray_resources(sw, ray)
        check_resources(
            ray, [(resources["num_cpus"], resources["num_gpus"], f"a worker of sweep {sw.name}", device)], address
        )
        yield


def _ray_resources(sw: Sweep, ray) -> tuple[dict, str]:
    """One sweep worker's Ray resources (a trial's: its threads, a GPU as ``gpus_requested``
    says) and its ``train.device``."""
    from . import config
    from .device import gpus_requested

    cfg = config.load(sw.preset, sw.set)
    device = str(getattr(cfg.train, "device", "cpu") or "cpu")
    gpus = gpus_requested(device, ray.cluster_resources().get("GPU", 0))
    return {"num_cpus": cfg.train.threads, "num_gpus": gpus, "name": f"rnnlab-sweep:{sw.name}"}, device


def _ray_workers(sw: Sweep, args: tuple, workers: int, address: str | None, trial_log, errors: list, log) -> None:
    from .backends.ray import run_calls, session

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


# --------------------------------------------------------------------------- the report


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def trials_table(study, sw: Sweep) -> str:
    keys = list(sw.space)
    head = ["trial", "state", sw.metric, *keys, "steps", "run dir", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in study.get_trials(deepcopy=False):
        note = t.user_attrs.get("error", "")
        retried = t.system_attrs.get("failed_trial")
        if retried is not None:
            note = f"retry of trial {retried}" + (f"; {note}" if note else "")
        if t.state.name == "FAIL" and not note:
            note = "worker died (re-queued)" if t.user_attrs.get("run_dir") else "failed"
        value = (
            t.value
            if t.value is not None
            else (t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None)
        )
        row = [
            t.number,
            t.state.name.lower(),
            value,
            *(t.params.get(k) for k in keys),
            t.user_attrs.get("steps"),
            t.user_attrs.get("run_dir"),
            note.replace("|", "/"),
        ]
        lines.append("| " + " | ".join(_fmt(x) for x in row) + " |")
    return "\n".join(lines)


def best_preset_text(sw: Sweep, trial) -> str:
    """The best trial's configuration as a preset TOML: the sweep's preset file with the fixed
    overrides and the trial's parameters applied."""
    from . import config

    data = tomllib.loads(config.preset_path(sw.preset).read_text())
    params = {k: decode(sw.space[k], v) if k in sw.space else v for k, v in trial.params.items()}
    data = config.apply_overrides(data, [*sw.set, *(override(k, v) for k, v in params.items())])
    data["name"] = f"{sw.name}-best"
    data["description"] = (
        f"Best trial ({trial.number}) of sweep {sw.name!r} over {sw.preset}: "
        f"{sw.metric} = {trial.value:.6g}. " + data.get("description", "")
    ).strip()
    config.from_dict(json.loads(json.dumps(data)))  # what rnnlab train will do with it
    return dump_toml(data)


def report(sw: Sweep, out: str | Path, storage_url: str | None = None, log=print) -> dict:
    """Write ``best.toml``, ``trials.md``, ``history.png`` and ``importance.png`` into ``out``
    from the study; returns ``{"best": trial number or None, "files": [...]}``."""
    import_optuna()  # a clear error without Optuna, before anything is read
    out = Path(out)
    study = open_study(sw, make_storage(storage_url or default_storage(out)))
    files = []
    md = trials_table(study, sw)
    (out / "trials.md").write_text(md + "\n")
    files.append(out / "trials.md")
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    best = None
    if complete:
        best = study.best_trial
        (out / "best.toml").write_text(best_preset_text(sw, best))
        files.append(out / "best.toml")
        log(
            f"best: trial {best.number}, {sw.metric} = {best.value:.6g}, "
            + ", ".join(f"{k}={_fmt(v)}" for k, v in best.params.items())
        )
    else:
        log("no trial completed yet: no best.toml")
    files += _plots(study, out, log)
    return {"best": None if best is None else best.number, "files": [str(f) for f in files], "table": md}


def _plots(study, out: Path, log) -> list[Path]:
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as ovm

    written = []
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    plots = [("history.png", ovm.plot_optimization_history, 1), ("importance.png", ovm.plot_param_importances, 2)]
    for name, fn, need in plots:
        if len(complete) < need:
            log(f"  {name}: needs {need} completed trials, have {len(complete)}; skipped")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = fn(study)
            fig = ax.figure if hasattr(ax, "figure") else ax
            fig.set_size_inches(7, 4.5)
            fig.tight_layout()
            fig.savefig(out / name, dpi=100)
            plt.close(fig)
            written.append(out / name)
        except (ValueError, RuntimeError) as e:  # e.g. importance when no parameter varied
            log(f"  {name}: skipped ({e})")
    return written


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
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
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
    print(f"\nin {out}: {', '.join(written)}", file=sys.stderr)
    return 0
