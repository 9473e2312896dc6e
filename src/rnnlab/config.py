"""Run configuration: dataclasses, TOML presets and ``key=value`` overrides.

The constructors are the schema: ``[task]`` keys (other than ``name``) go to the task class,
``[model.cell_options]`` to the cell class, and both are checked against the constructor's
signature when the config is built, so a typo fails before any training starts.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PRESET_DIR = Path(__file__).parent / "configs"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message says what was expected."""


def did_you_mean(name: str, choices, n: int = 3) -> str:
    """`` Did you mean 'x'?`` for the choices closest to ``name`` by edit distance (difflib),
    or an empty string when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=n, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


@dataclass
class TaskConfig:
    name: str = "copy"
    options: dict = field(default_factory=dict)


@dataclass
class ModelConfig:
    cell: str = "lstm"
    hidden_size: int | list = 128  # a list gives one width per stacked layer
    num_layers: int = 1
    embedding: int = 0
    dropout: float = 0.0
    pool: int = 0
    dense: int = 0
    cell_options: dict = field(default_factory=dict)


@dataclass
class OptimConfig:
    name: str = "rmsprop"
    lr: float = 1e-3
    alpha: float = 0.99
    momentum: float = 0.0
    eps: float = 1e-8
    beta1: float = 0.9
    beta2: float = 0.999
    weight_decay: float = 0.0
    clip: float = 0.0
    group_lr: dict = field(default_factory=dict)
    group_weight_decay: dict = field(default_factory=dict)


@dataclass
class TrainConfig:
    steps: int = 1000
    batch_size: int = 128
    eval_every: int = 100
    eval_batch_size: int = 256
    eval_max_batches: int = 0
    log_every: int = 10
    seed: int = 0
    data_seed: int = -1
    threads: int = 1
    schedule: str = "none"
    plateau_factor: float = 0.5
    plateau_patience: int = 0
    lr_gamma: float = 1.0
    lr_step_every: int = 0
    select_metric: str = ""
    target_metric: str = ""
    target_value: float = 0.0
    test: bool = True
    tensorboard: bool = False
    device: str = "auto"  # auto (CUDA, else MPS, else CPU), cpu, cuda, cuda:N, mps
    precision: str = "fp32"  # fp32, bf16, fp16 (torch.autocast; see docs/device.md)


@dataclass
class RunConfig:
    name: str = "run"
    description: str = ""
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    paper: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)

    @property
    def data_seed(self) -> int:
        return self.train.data_seed if self.train.data_seed >= 0 else self.train.seed + 1


SECTIONS = {"task": TaskConfig, "model": ModelConfig, "optim": OptimConfig, "train": TrainConfig}
OPTIMIZERS = ("rmsprop", "adam", "sgd")
SCHEDULES = ("none", "plateau", "exponential")


def _check_type(where: str, value: Any, hint) -> Any:
    origin = typing.get_origin(hint) or hint
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if origin in (int, float, str, bool, dict):
        ok = isinstance(value, origin) and not (origin is int and isinstance(value, bool))
        if not ok:
            raise ConfigError(f"{where} must be of type {origin.__name__}, got {value!r} ({type(value).__name__})")
    return value


def _build(cls, data: dict, where: str):
    _check_section(data, where)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in [{where}]; valid keys: {names}."
                          + did_you_mean(unknown[0], names))
    kwargs = {k: _check_type(f"{where}.{k}", v, hints[k]) for k, v in data.items()}
    return cls(**kwargs)


def _check_section(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(
            f"[{where}] must be a table of keys (e.g. [{where}] on its own line, then key = value lines), "
            f"got {value!r} ({type(value).__name__})"
        )


def from_dict(data: dict) -> RunConfig:
    """Build a RunConfig from nested dicts (TOML layout: ``[task] name=...; other keys``)."""
    if not isinstance(data, dict):
        raise ConfigError(f"a configuration must be a table of sections, got {type(data).__name__}")
    data = dict(data)
    top = {k: data.pop(k) for k in ("name", "description", "paper") if k in data}
    for k, hint in (("name", str), ("description", str), ("paper", dict)):
        if k in top:
            _check_type(k, top[k], hint)
    for section in SECTIONS:
        if section in data:
            _check_section(data[section], section)
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ConfigError(
            f"unknown section(s) {unknown}; valid: {sorted(SECTIONS) + ['name', 'description', 'paper']}"
        )
    task = dict(data.get("task", {}))
    if "options" in task:  # the resolved JSON layout
        options = task.pop("options")
    else:
        options = {k: task.pop(k) for k in list(task) if k != "name"}
    sections = {
        "task": TaskConfig(name=_check_type("task.name", task.get("name", "copy"), str), options=options),
        "model": _build(ModelConfig, data.get("model", {}), "model"),
        "optim": _build(OptimConfig, data.get("optim", {}), "optim"),
        "train": _build(TrainConfig, data.get("train", {}), "train"),
    }
    cfg = RunConfig(**sections, **{k: v for k, v in top.items()})
    validate(cfg)
    return cfg


def check_kwargs(cls, kwargs: dict, where: str, skip: tuple[str, ...] = ()) -> None:
    """Raise ConfigError if ``kwargs`` has a key ``cls.__init__`` does not take."""
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    valid = [n for n in params if n not in ("self",) + skip]
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown} for {where} ({cls.__name__}); valid: {valid}."
                          + did_you_mean(unknown[0], valid))


def validate(cfg: RunConfig) -> None:
    from .cells import CELLS
    from .tasks import TASKS

    if cfg.task.name not in TASKS:
        raise ConfigError(f"unknown task {cfg.task.name!r}; registered tasks: {sorted(TASKS)}."
                          + did_you_mean(cfg.task.name, TASKS))
    check_kwargs(TASKS[cfg.task.name], cfg.task.options, f"task {cfg.task.name!r}")
    if cfg.model.cell not in CELLS:
        raise ConfigError(f"unknown cell {cfg.model.cell!r}; registered cells: {sorted(CELLS)}."
                          + did_you_mean(cfg.model.cell, CELLS))
    check_kwargs(
        CELLS[cfg.model.cell], cfg.model.cell_options, f"cell {cfg.model.cell!r}",
        skip=("input_size", "hidden_size"),
    )
    if cfg.optim.name not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {cfg.optim.name!r}; expected one of {OPTIMIZERS}")
    from .device import check_spelling

    check_spelling(cfg.train.device, cfg.train.precision)
    if cfg.train.schedule not in SCHEDULES:
        raise ConfigError(f"unknown schedule {cfg.train.schedule!r}; expected one of {SCHEDULES}")
    for key in ("steps", "batch_size", "eval_every", "eval_batch_size", "threads", "log_every"):
        if getattr(cfg.train, key) < 1:
            raise ConfigError(f"train.{key} must be >= 1, got {getattr(cfg.train, key)}")
    if cfg.train.schedule == "exponential" and not 0.0 < cfg.train.lr_gamma <= 1.0:
        raise ConfigError(
            f"train.lr_gamma must be in (0, 1] for schedule = 'exponential' (the lr is multiplied by it "
            f"every train.lr_step_every steps), got {cfg.train.lr_gamma}"
        )
    if cfg.train.lr_step_every < 0:
        raise ConfigError(f"train.lr_step_every must be >= 0 (0 = every train.eval_every steps), got {cfg.train.lr_step_every}")
    if cfg.model.dense < 0:
        raise ConfigError(f"model.dense must be >= 0 (0 = no dense layer before the readout), got {cfg.model.dense}")
    _check_ranges(cfg)
    hs = cfg.model.hidden_size
    widths = hs if isinstance(hs, list) else [hs]
    if not widths or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
        raise ConfigError(
            f"model.hidden_size must be a positive integer or a list of them (one width per layer), got {hs!r}"
        )
    if cfg.model.num_layers < 1:
        raise ConfigError(f"model.num_layers must be >= 1, got {cfg.model.num_layers}")
    if isinstance(hs, list) and cfg.model.num_layers not in (1, len(hs)):
        raise ConfigError(
            f"model.hidden_size={hs} gives {len(hs)} layer widths but model.num_layers="
            f"{cfg.model.num_layers}; set num_layers={len(hs)} or drop it"
        )
    if cfg.model.pool < 0 or (cfg.model.pool and widths[-1] % cfg.model.pool):
        raise ConfigError(
            f"model.pool must be 0 (off) or a divisor of the last layer's width {widths[-1]}, "
            f"got {cfg.model.pool}"
        )


def _need(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise ConfigError(f"{key} must be {expected}, got {value!r}; fix it in the preset or with --set {key}=...")


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_ranges(cfg: RunConfig) -> None:
    """Numbers that would train silently wrong (or crash deep inside torch) are refused here."""
    o, t, m = cfg.optim, cfg.train, cfg.model
    _need(_finite(o.lr) and o.lr > 0, "optim.lr", o.lr, "a finite number > 0")
    _need(_finite(o.clip) and o.clip >= 0, "optim.clip", o.clip, "a finite number >= 0 (0 = no clipping)")
    _need(_finite(o.weight_decay) and o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, "a finite number >= 0")
    _need(_finite(o.momentum) and o.momentum >= 0, "optim.momentum", o.momentum, "a finite number >= 0")
    _need(_finite(o.eps) and o.eps > 0, "optim.eps", o.eps, "a finite number > 0")
    for key in ("alpha", "beta1", "beta2"):
        v = getattr(o, key)
        _need(_finite(v) and 0 <= v < 1, f"optim.{key}", v, "in [0, 1)")
    for key, v in o.group_lr.items():
        _need(_finite(v) and v > 0, f"optim.group_lr.{key}", v, "a finite number > 0")
    for key, v in o.group_weight_decay.items():
        _need(_finite(v) and v >= 0, f"optim.group_weight_decay.{key}", v, "a finite number >= 0")
    _need(t.eval_max_batches >= 0, "train.eval_max_batches", t.eval_max_batches, ">= 0 (0 = the whole split)")
    _need(t.data_seed >= -1, "train.data_seed", t.data_seed, ">= 0, or -1 for seed + 1")
    _need(t.seed >= 0, "train.seed", t.seed, ">= 0")
    _need(_finite(t.plateau_factor) and 0 < t.plateau_factor < 1, "train.plateau_factor", t.plateau_factor, "in (0, 1)")
    _need(t.plateau_patience >= 0, "train.plateau_patience", t.plateau_patience, ">= 0")
    _need(_finite(t.target_value), "train.target_value", t.target_value, "a finite number")
    _need(_finite(m.dropout) and 0 <= m.dropout < 1, "model.dropout", m.dropout, "in [0, 1)")
    _need(m.embedding >= 0, "model.embedding", m.embedding, ">= 0 (0 = one-hot / raw inputs)")


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"train.steps=10"`` -> (["train", "steps"], 10); values are TOML literals, else strings."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like section.key=value (e.g. train.steps=100)")
    key, raw = item.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = json.loads(json.dumps(data))  # deep copy
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for p in path[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {p!r} is not a section")
        node[path[-1]] = value
    return data


def preset_path(name: str) -> Path:
    """A preset by name ("asrnn/copy-L1000") or a path to a TOML file."""
    p = Path(name)
    if p.suffix == ".toml" and p.exists():
        return p
    cand = PRESET_DIR / (name if name.endswith(".toml") else name + ".toml")
    if cand.exists():
        return cand
    import difflib

    presets = list_presets()
    close = difflib.get_close_matches(name, presets, n=5, cutoff=0.6)
    close += [n for n in presets if name.split("/")[-1] in n and n not in close]
    hint = f" Did you mean: {', '.join(close[:5])}?" if close else " Run `rnnlab list presets`."
    raise ConfigError(f"no preset or TOML file named {name!r}.{hint}")


def list_presets() -> list[str]:
    return sorted(str(p.relative_to(PRESET_DIR).with_suffix("")) for p in PRESET_DIR.rglob("*.toml"))


def load(name_or_path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    path = preset_path(str(name_or_path))
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r}); TOML presets "
            f"must be saved as UTF-8"
        ) from None
    except OSError as e:
        raise ConfigError(f"cannot read preset {path}: {e.strerror or e}; check its permissions") from None
    try:
        data = apply_overrides(data, overrides or [])
        for section in ("task", "model"):
            if section in data:
                _check_section(data[section], section)
        missing = [k for k, s in (("task.name", "task"), ("model.cell", "model"))
                   if k.split(".")[1] not in data.get(s, {})]
        if missing:
            raise ConfigError(
                f"a preset must name at least a task and a cell, but {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set (is the file empty?); add e.g. "
                f"[task] name = \"copy\" and [model] cell = \"lstm\" (see `rnnlab list`)"
            )
        return from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def load_json(path: str | Path) -> RunConfig:
    """The resolved configuration of a run (its ``config.json``); a damaged file is a
    :class:`ConfigError` naming it."""
    path = Path(path)
    fix = ("restore it from a copy, or start the run again in a new directory; config.json "
           "is the resolved configuration written when the run started")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        what = getattr(e, "strerror", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path} is unreadable or not valid JSON ({what}); {fix}") from None
    try:
        return from_dict(data)
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"{path} does not hold a valid run configuration ({e}); {fix}") from None
