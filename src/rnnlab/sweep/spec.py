"""The sweep file: its fields (:class:`Sweep`), its search space and the checks that read it
(:func:`load_sweep`, :func:`check_metric`), and Optuna's import.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config import ConfigError, toml_value, tomllib

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "none")
SWEEP_DIR = Path(__file__).parent.parent / "sweeps"
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
    from .. import config
    from ..train import higher_is_better

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
    from .. import config

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
    from ..train import build_task

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

    from ..train import build_model

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
    from .. import config
    from ..tasks.data import DataError
    from ..train import build_task, check_metric_names

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
