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

    [space]                              # one entry per config key (any `--set` key)
    "optim.lr" = { type = "loguniform", low = 1e-4, high = 1e-2 }
    "optim.clip" = { type = "uniform", low = 0.5, high = 10.0 }
    "model.hidden_size" = { type = "int", low = 16, high = 64, step = 16 }
    "optim.name" = { type = "categorical", choices = ["adam", "rmsprop"] }

The study lives in an RDB (SQLite ``OUT/study.db`` by default, or any SQLAlchemy URL such as
``postgresql://...`` for workers on several machines), so a killed sweep continues when the
same command is run again and several workers can feed one study. Trial ``n`` trains into
``OUT/trials/trial-000n`` through the backends' ``run_one`` (lock, resume, attempts log). Each
running trial writes a heartbeat; a trial whose worker died is marked FAIL once its heartbeat
is older than the grace period and re-queued with the same parameters, and the retry resumes
the dead trial's run directory from its checkpoint, so no trial is lost or trained twice.
Pruning goes through the trainer's ``on_eval`` hook; the trainer knows nothing of Optuna.

At the end ``OUT`` holds ``best.toml`` (a preset ``rnnlab train`` accepts), ``trials.md`` (one
row per trial) and ``history.png`` / ``importance.png``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .config import ConfigError, tomllib

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "none")
SWEEP_DIR = Path(__file__).parent / "sweeps"
PARAM_TYPES = {
    "loguniform": ("low", "high"), "uniform": ("low", "high"), "int": ("low", "high", "step", "log"),
    "categorical": ("choices",),
}


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

    def to_dict(self) -> dict:
        return asdict(self)


class TrialFailed(RuntimeError):
    """A trial's run failed (diverged, crashed): recorded as FAIL, the sweep goes on."""


def import_optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("sweeps need Optuna: pip install 'rnnlab[sweep]'") from None
    import warnings

    # heartbeats and retries are marked experimental; we rely on them knowingly
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if not (isinstance(v, float) and not math.isfinite(v)) else str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise ConfigError(f"cannot write {v!r} ({type(v).__name__}) as a TOML value")


def override(key: str, value) -> str:
    """``key=value`` with the value as a TOML literal (what ``--set`` parses)."""
    return f"{key}={_toml_value(value)}"


def grid_values(key: str, spec: dict) -> list:
    if spec["type"] == "categorical":
        return list(spec["choices"])
    if spec["type"] == "int":
        return list(range(spec["low"], spec["high"] + 1, spec.get("step", 1)))
    raise ConfigError(
        f"search space key {key!r}: the grid sampler needs a finite set of values; give it "
        f"type = \"categorical\" with choices = [...] (or type = \"int\"), not {spec['type']!r}"
    )


def _check_param(key: str, spec) -> dict:
    where = f"search space key {key!r}"
    if not isinstance(spec, dict) or "type" not in spec:
        raise ConfigError(f"{where}: expected a table like {{ type = \"loguniform\", low = 1e-4, high = 1e-2 }}, "
                          f"got {spec!r}")
    kind = spec["type"]
    if kind not in PARAM_TYPES:
        raise ConfigError(f"{where}: unknown type {kind!r}; expected one of {sorted(PARAM_TYPES)}")
    unknown = sorted(set(spec) - {"type", *PARAM_TYPES[kind]})
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown} for type {kind!r}; valid: {list(PARAM_TYPES[kind])}")
    if kind == "categorical":
        if not isinstance(spec.get("choices"), list) or not spec["choices"]:
            raise ConfigError(f"{where}: 'choices' must be a non-empty list, got {spec.get('choices')!r}")
        return spec
    missing = [k for k in ("low", "high") if k not in spec]
    if missing:
        raise ConfigError(f"{where}: type {kind!r} needs {missing}")
    low, high = spec["low"], spec["high"]
    num = (int,) if kind == "int" else (int, float)
    if not all(isinstance(x, num) and not isinstance(x, bool) for x in (low, high)):
        raise ConfigError(f"{where}: low and high must be {'integers' if kind == 'int' else 'numbers'}, "
                          f"got low={low!r}, high={high!r}")
    if (kind == "int" and low > high) or (kind != "int" and not low < high):
        raise ConfigError(f"{where}: empty range low={low!r}, high={high!r}; need low < high"
                          + (" (low <= high for int)" if kind == "int" else ""))
    if (kind == "loguniform" or spec.get("log")) and low <= 0:
        raise ConfigError(f"{where}: a log scale needs low > 0, got low={low!r}")
    if kind == "int" and (not isinstance(spec.get("step", 1), int) or spec.get("step", 1) < 1):
        raise ConfigError(f"{where}: step must be a positive integer, got {spec.get('step')!r}")
    return spec


def _representatives(spec: dict) -> list:
    if spec["type"] == "categorical":
        return list(spec["choices"])
    return [spec["low"], spec["high"]]


def load_sweep(path: str | Path, extra_set: list[str] | None = None) -> Sweep:
    """Read and check a sweep TOML: known fields, a valid space whose every key is a config key
    the preset accepts (each value tried against the real configuration), sampler, direction."""
    from . import config
    from .train import higher_is_better

    p = Path(path)
    if not p.exists() and (SWEEP_DIR / f"{path}.toml").exists():
        p = SWEEP_DIR / f"{path}.toml"
    if not p.exists():
        shipped = sorted(q.stem for q in SWEEP_DIR.glob("*.toml"))
        raise ConfigError(f"no sweep file {str(path)!r}; give a sweep TOML file (see docs/sweeps.md) "
                          f"or a shipped sweep: {shipped}")
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
    sw = Sweep(**data)
    sw.set = [*sw.set, *(extra_set or [])]
    if not isinstance(sw.space, dict) or not sw.space:
        raise ConfigError(f"{p}: [space] is empty; give at least one key, e.g. \"optim.lr\" = "
                          f"{{ type = \"loguniform\", low = 1e-4, high = 1e-2 }}")
    if sw.sampler not in SAMPLERS:
        raise ConfigError(f"{p}: unknown sampler {sw.sampler!r}; expected one of {SAMPLERS}")
    if sw.pruner not in PRUNERS:
        raise ConfigError(f"{p}: unknown pruner {sw.pruner!r}; expected one of {PRUNERS}")
    base = config.load(sw.preset, sw.set)  # a bad preset or fixed override fails here
    for key, spec in sw.space.items():
        _check_param(key, spec)
        section = key.split(".")[0]
        if section not in config.SECTIONS or "." not in key:
            raise ConfigError(f"{p}: search space key {key!r} is not a config key; expected "
                              f"SECTION.KEY with SECTION in {sorted(config.SECTIONS)} (e.g. optim.lr)")
        for value in _representatives(spec):
            try:
                config.load(sw.preset, [*sw.set, override(key, value)])
            except ConfigError as e:
                raise ConfigError(f"{p}: search space key {key!r} = {value!r} does not fit preset "
                                  f"{sw.preset!r}: {str(e).split(': ', 1)[-1]}") from None
    if not sw.metric:
        sw.metric = base.train.select_metric or f"val/{_primary_metric(base)}"
    if sw.direction == "":
        sw.direction = "maximize" if higher_is_better(sw.metric) else "minimize"
    if sw.direction not in ("minimize", "maximize"):
        raise ConfigError(f"{p}: direction must be 'minimize' or 'maximize', got {sw.direction!r}")
    if sw.sampler == "grid":
        size = math.prod(len(grid_values(k, s)) for k, s in sw.space.items())
        sw.trials = sw.trials or size
    if sw.trials < 1:
        raise ConfigError(f"{p}: trials must be >= 1, got {sw.trials}")
    return sw


def _primary_metric(cfg) -> str:
    from .train import build_task

    try:
        return build_task(cfg.task).primary_metric
    except Exception:  # real-data task without its files here: the loss is always there
        return "loss"


# --------------------------------------------------------------------------- storage and study

def default_storage(out: Path) -> str:
    return f"sqlite:///{(out / 'study.db').resolve()}"


def make_storage(url: str, heartbeat: int = 10, db_timeout: float = 60.0):
    """An Optuna RDB storage with heartbeats (a dead worker's trial is failed after
    ``3 * heartbeat`` s and re-queued). Unreadable, corrupt or locked databases raise a
    one-line ConfigError."""
    import_optuna()
    import sqlalchemy.exc
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    engine_kwargs = {"connect_args": {"timeout": db_timeout}} if url.startswith("sqlite") else {}
    try:
        return RDBStorage(
            url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat, grace_period=3 * heartbeat,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
        )
    except sqlalchemy.exc.SQLAlchemyError as e:
        raise ConfigError(_db_error(url, e)) from None


def _db_error(url: str, e: Exception) -> str:
    msg = str(getattr(e, "orig", None) or e).splitlines()[0]
    if "locked" in msg:
        hint = "another process holds it: wait, stop that process, or raise --db-timeout"
    elif "not a database" in msg or "malformed" in msg or "corrupt" in msg:
        hint = "the file is not a usable SQLite database: move it away to start a new study, or point --storage elsewhere"
    else:
        hint = "check the --storage URL and that the database server is reachable"
    return f"study database {url!r}: {msg}; {hint}"


def _sampler(sw: Sweep, worker_index: int = 0):
    """Worker ``i`` seeds its sampler with ``seed + i``: workers with one seed would propose the
    same parameters at the same time."""
    optuna = import_optuna()
    seed = sw.seed + worker_index
    if sw.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if sw.sampler == "grid":
        return optuna.samplers.GridSampler({k: grid_values(k, s) for k, s in sw.space.items()}, seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def _pruner(sw: Sweep):
    optuna = import_optuna()
    if sw.pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)


def open_study(sw: Sweep, storage, worker_index: int = 0):
    """Create the sweep's study, or load it and check that it was made from the same sweep."""
    optuna = import_optuna()
    import sqlalchemy.exc

    url = getattr(storage, "url", str(storage))
    try:
        study = optuna.create_study(study_name=sw.name, storage=storage, sampler=_sampler(sw, worker_index),
                                    pruner=_pruner(sw), direction=sw.direction, load_if_exists=True)
        spec = {k: v for k, v in sw.to_dict().items() if k not in ("trials", "description")}
        saved = study.user_attrs.get("sweep")
        if saved is None:
            study.set_user_attr("sweep", spec)
        elif saved != json.loads(json.dumps(spec)):
            diffs = sorted(k for k in set(saved) | set(spec) if saved.get(k) != json.loads(json.dumps(spec.get(k))))
            raise ConfigError(
                f"study {sw.name!r} in {url} was made from a different sweep (differs in {diffs}); "
                f"use another sweep name or output directory, or the original sweep file"
            )
    except sqlalchemy.exc.SQLAlchemyError as e:
        raise ConfigError(_db_error(url, e)) from None
    return study


def count_states(study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts


# --------------------------------------------------------------------------- one trial

def trial_run_dir(out: Path, number: int) -> Path:
    return out / "trials" / f"trial-{number:04d}"


def objective_value(run_dir: Path, metric: str, direction: str) -> float:
    """The trial's value: the best ``metric`` over its evaluations (``metrics.jsonl``), or for
    a ``test/`` metric the one in ``result.json``."""
    result = json.loads((run_dir / "result.json").read_text())
    if metric.startswith("test/"):
        values = [result.get("test", {}).get(metric)]
        keys = sorted(result.get("test", {}))
    else:
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
        values = [r[metric] for r in rows if metric in r]
        keys = sorted({k for r in rows for k in r if "/" in k})
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        raise ConfigError(f"metric {metric!r} was never evaluated in {run_dir}; metrics there: {keys}")
    return min(values) if direction == "minimize" else max(values)


def _objective(sw: Sweep, out: Path, data_dir: str | None):
    optuna = import_optuna()
    from .backends import job_for, run_one

    def objective(trial) -> float:
        params = {k: _suggest(trial, k, s) for k, s in sw.space.items()}
        owner = trial.user_attrs.get("run_trial")  # a retry trains in the dead trial's directory
        if owner is None:
            owner = trial.number
            trial.set_user_attr("run_trial", owner)
        run_dir = trial_run_dir(out, owner)
        trial.set_user_attr("run_dir", str(run_dir.relative_to(out)))
        overrides = [*sw.set, f'name="{sw.name}-trial{owner:04d}"', *(override(k, v) for k, v in params.items())]
        job = job_for(sw.preset, overrides, run_dir, data_dir)
        pruned = []

        def on_eval(step: int, metrics: dict) -> bool:
            value = metrics.get(sw.metric)
            if value is None or math.isnan(value):
                return False
            trial.report(value, step)
            if trial.should_prune():
                pruned.append(step)
                return True
            return False

        # a directory still locked (a retry whose first worker is alive after all) is waited for
        status, err = run_one(job, on_eval=on_eval, wait=300.0)
        trial.set_user_attr("status", status)
        if status in ("failed", "busy"):
            trial.set_user_attr("error", err)
            raise TrialFailed(err)
        value = objective_value(run_dir, sw.metric, sw.direction)
        result = json.loads((run_dir / "result.json").read_text())
        trial.set_user_attr("steps", result["steps"])
        if pruned or result.get("stopped") == "on_eval":
            raise optuna.TrialPruned(f"pruned at step {result['steps']} ({sw.metric}={value:.4g})")
        return value

    return objective


def _suggest(trial, key: str, spec: dict):
    kind = spec["type"]
    if kind == "loguniform":
        return trial.suggest_float(key, spec["low"], spec["high"], log=True)
    if kind == "uniform":
        return trial.suggest_float(key, spec["low"], spec["high"])
    if kind == "int":
        return trial.suggest_int(key, spec["low"], spec["high"], step=spec.get("step", 1), log=spec.get("log", False))
    return trial.suggest_categorical(key, spec["choices"])


def worker(sw: Sweep, out: str | Path, storage_url: str, data_dir: str | None = None, heartbeat: int = 10,
           db_timeout: float = 60.0, index: int = 0) -> int:
    """One Optuna worker: run trials of the study until ``sw.trials`` are finished or taken by
    running trials, and none is waiting (re-queued). Returns the number of trials it ran.
    Any number of workers, on any machines that reach ``storage_url``, may run at once."""
    import_optuna()
    import sqlalchemy.exc
    from optuna.storages import fail_stale_trials

    out = Path(out)
    storage = make_storage(storage_url, heartbeat, db_timeout)
    study = open_study(sw, storage, index)
    objective = _objective(sw, out, data_dir)
    ran = 0
    try:
        while True:
            fail_stale_trials(study)
            c = count_states(study)
            if c.get("WAITING", 0) == 0 and c.get("COMPLETE", 0) + c.get("PRUNED", 0) + c.get("RUNNING", 0) >= sw.trials:
                return ran
            study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False)
            ran += 1
    except sqlalchemy.exc.SQLAlchemyError as e:
        raise ConfigError(_db_error(storage_url, e)) from None


def _worker_entry(sweep: dict, out: str, storage_url: str, data_dir: str | None, heartbeat: int,
                  db_timeout: float, index: int = 0) -> int:
    from .runtime import tune_malloc

    tune_malloc()
    return worker(Sweep(**sweep), out, storage_url, data_dir, heartbeat, db_timeout, index)


# --------------------------------------------------------------------------- the driver

def run_sweep(
    sw: Sweep, out: str | Path, storage: str | None = None, workers: int = 1, backend: str = "local",
    address: str | None = None, data_dir: str | None = None, heartbeat: int = 10, db_timeout: float = 60.0,
    log=print,
) -> Path:
    """Run (or continue) the sweep: ``workers`` Optuna workers on ``backend`` (``local``: this
    process, or a process pool when ``workers > 1``; ``ray``: one Ray task per worker) feed the
    study at ``storage`` (default ``OUT/study.db``) until ``sw.trials`` trials are finished;
    trials of dead workers are retried. Then writes the report (:func:`report`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    url = storage or default_storage(out)
    study = open_study(sw, make_storage(url, heartbeat, db_timeout))  # fails early on a bad database
    (out / "sweep.json").write_text(json.dumps(sw.to_dict(), indent=2) + "\n")
    log(f"sweep {sw.name}: {sw.trials} trials of {sw.preset} ({sw.sampler}, {sw.direction} {sw.metric}), "
        f"{workers} worker(s) on backend {backend}; study {url}; already {_counts_text(study)}")
    args = (sw.to_dict(), str(out), url, data_dir, heartbeat, db_timeout)
    deadline = None
    while True:
        if backend == "local" and workers <= 1:
            _worker_entry(*args)
        elif backend == "local":
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=workers) as pool:
                for f in [pool.submit(_worker_entry, *args, i) for i in range(workers)]:
                    f.result()
        elif backend == "ray":
            _ray_workers(sw, args, workers, address, log)
        else:
            raise ConfigError(f"unknown backend {backend!r}; expected 'local' or 'ray'")
        from optuna.storages import fail_stale_trials

        fail_stale_trials(study)
        c = count_states(study)
        log(f"sweep {sw.name}: {_counts_text(study)}")
        if not c.get("RUNNING") and not c.get("WAITING"):
            break
        # trials still marked running belong to other workers, or to dead ones whose heartbeat
        # has not yet expired: wait for them to finish or be re-queued, then run the retries
        deadline = deadline or time.monotonic() + 3 * heartbeat + 60
        if c.get("RUNNING") and not c.get("WAITING"):
            if time.monotonic() > deadline:
                log(f"sweep {sw.name}: {c['RUNNING']} trial(s) still running elsewhere; reporting without them")
                break
            time.sleep(heartbeat)
    report(sw, out, url, log=log)
    return out


def _ray_workers(sw: Sweep, args: tuple, workers: int, address: str | None, log) -> None:
    from . import config
    from .backends.ray import MAX_RETRIES, session

    cfg = config.load(sw.preset, sw.set)
    device = str(getattr(cfg.train, "device", "cpu") or "cpu")
    with session(address) as ray:
        gpu = device.startswith("cuda") or (device == "auto" and ray.cluster_resources().get("GPU", 0) > 0)
        task = ray.remote(_worker_entry).options(
            num_cpus=cfg.train.threads, num_gpus=1 if gpu else 0,
            max_retries=MAX_RETRIES, name=f"rnnlab-sweep:{sw.name}")
        refs = [task.remote(*args, i) for i in range(workers)]
        log(f"  ray: {workers} sweep worker task(s) on {len(ray.nodes())} node(s)")
        for i, ref in enumerate(refs):
            try:
                n = ray.get(ref)
                log(f"  [worker {i + 1}/{workers}] ran {n} trial(s)")
            except Exception as e:
                msg = str(e).strip().splitlines()
                log(f"  [worker {i + 1}/{workers}] failed: {type(e).__name__}: {msg[-1] if msg else ''}")


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
        value = t.value if t.value is not None else (
            t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None)
        row = [t.number, t.state.name.lower(), value, *(t.params.get(k) for k in keys),
               t.user_attrs.get("steps"), t.user_attrs.get("run_dir"), note.replace("|", "/")]
        lines.append("| " + " | ".join(_fmt(x) for x in row) + " |")
    return "\n".join(lines)


def best_preset_text(sw: Sweep, trial) -> str:
    """The best trial's configuration as a preset TOML: the sweep's preset file with the fixed
    overrides and the trial's parameters applied."""
    from . import config

    data = tomllib.loads(config.preset_path(sw.preset).read_text())
    data = config.apply_overrides(data, [*sw.set, *(override(k, v) for k, v in trial.params.items())])
    data["name"] = f"{sw.name}-best"
    data["description"] = (f"Best trial ({trial.number}) of sweep {sw.name!r} over {sw.preset}: "
                           f"{sw.metric} = {trial.value:.6g}. " + data.get("description", "")).strip()
    config.from_dict(json.loads(json.dumps(data)))  # what rnnlab train will do with it
    return dump_toml(data)


def dump_toml(data: dict) -> str:
    """A small TOML writer for presets: scalars and lists, nested tables."""
    lines: list[str] = []

    def table(d: dict, prefix: str) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in d.items() if isinstance(v, dict)}
        if prefix and (scalars or not tables):
            lines.extend(["", f"[{prefix}]"])
        for k, v in scalars.items():
            lines.append(f"{_key(k)} = {_toml_value(v)}")
        for k, v in tables.items():
            table(v, f"{prefix}.{_key(k)}" if prefix else _key(k))

    table(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


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
        log(f"best: trial {best.number}, {sw.metric} = {best.value:.6g}, "
            + ", ".join(f"{k}={_fmt(v)}" for k, v in best.params.items()))
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


def main_sweep(spec: str, *, out: str | None = None, runs_dir: str = "runs", trials: int | None = None,
               overrides: list[str] | None = None, storage: str | None = None, workers: int = 1,
               backend: str = "local", address: str | None = None, heartbeat: int = 10, db_timeout: float = 60.0,
               report_only: bool = False, data_dir: str | None = None) -> int:
    """``rnnlab sweep``: run (or continue) the sweep ``spec`` and print its trials table; every
    option as the command line's (``overrides`` = ``--set``)."""
    sw = load_sweep(spec, list(overrides or []))
    if trials:
        sw.trials = trials
    out = Path(out) if out else Path(runs_dir) / f"sweep-{sw.name}"
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if report_only:
        report(sw, out, storage, log=log)
    else:
        run_sweep(sw, out, storage, workers, backend, address, data_dir,
                  heartbeat=heartbeat, db_timeout=db_timeout, log=log)
    print((out / "trials.md").read_text(), end="")
    written = [n for n in ("trials.md", "best.toml", "history.png", "importance.png") if (out / n).exists()]
    print(f"\nin {out}: {', '.join(written)}", file=sys.stderr)
    return 0
