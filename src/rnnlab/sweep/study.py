"""Where a sweep's study lives (an RDB: SQLite by default), the samplers and pruners, and the
check that an output directory holds this sweep's study and no other.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..config import ConfigError, toml_value
from .spec import MAY_CHANGE, Sweep, _encoded, grid_values, import_optuna


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
    from .. import config

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
