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
import re
import types
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


@dataclass(frozen=True)
class TaskConfig:
    name: str = "copy"
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ModelConfig:
    cell: str = "lstm"
    hidden_size: int | list = 128  # a list gives one width per stacked layer; 0 with params
    num_layers: int = 1
    embedding: int = 0
    dropout: float = 0.0
    pool: int = 0
    dense: int = 0
    dense_activation: str = "none"  # of the dense layer: "none" (linear) or "relu"
    cell_options: dict = field(default_factory=dict)
    params: int = 0  # a parameter budget: the width whose model has the nearest count (rnnlab.sizing)
    embedding_init: str = "default"  # see EMBEDDING_INITS below
    readout_init: str = "default"  # see READOUT_INITS below


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    batch_size: int = 128
    eval_every: int = 100
    eval_batch_size: int = 256
    eval_max_batches: int = 0
    log_every: int = 10
    checkpoint_every: int = 0  # also checkpoint every this many steps between evaluations (0: only at them)
    seed: int = 0
    data_seed: int = -1
    threads: int = 1
    schedule: str = "none"
    plateau_factor: float = 0.5
    plateau_patience: int = 0
    plateau_threshold: float = 1e-4  # torch's: an improvement is below best * (1 - threshold); 0: any decrease
    lr_gamma: float = 1.0
    lr_step_every: int = 0
    select_metric: str = ""
    target_metric: str = ""
    target_value: float = 0.0
    target_patience: int = 1  # stop once target_metric has reached target_value at this many evaluations in a row
    epoch_steps: int = 0  # optimizer steps per epoch where a protocol counts epochs of batches; 0: not set
    test: bool = True
    tensorboard: bool = False
    device: str = "auto"  # auto (CUDA, else MPS, else CPU), cpu, cuda, cuda:N, mps
    precision: str = "fp32"  # fp32, bf16, fp16 (torch.autocast; see docs/device.md)


@dataclass(frozen=True)
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


# ---------------------------------------------------------------------------- what is an experiment

#: The configuration keys that are **not part of an experiment**, each with its category: the
#: one definition that the run key, resume, the CLI's resume lookup and the ledger read.
#:
#: * ``label``: words about a run (its name, description, the paper's published numbers).
#: * ``seed``: which draw of the experiment a run is (the initialisation seed, and an explicit
#:   data seed, whose default follows the seed).
#: * ``execution``: where and how fast the run computes (threads, device, TensorBoard events):
#:   the same experiment on other hardware, equal up to floating-point summation order.
#: * ``recording``: what is written down about a run, not what it trains (how often the
#:   training loss is logged, the batches an evaluation is cut into, whether the test split
#:   is scored at the end).
#:
#: Who uses which: the ledger compares runs without all of them; a resume may change all but
#: the seeds (plus :data:`RESUME_MAY_ALSO_CHANGE`); the run key (directory names, table rows,
#: reuse of a finished run) leaves out :data:`RUN_KEY_OMITS`.
NOT_EXPERIMENT: dict[str, str] = {
    "name": "label",
    "description": "label",
    "paper": "label",
    "train.epoch_steps": "label",
    "train.seed": "seed",
    "train.data_seed": "seed",
    "train.threads": "execution",
    "train.device": "execution",
    "train.tensorboard": "execution",
    "train.checkpoint_every": "execution",
    "train.log_every": "recording",
    "train.eval_batch_size": "recording",
    "train.test": "recording",
}

#: The keys the run key leaves out: the labels, ``train.seed`` (seeds of one experiment share a
#: key; the directory is ``seed<k>``) and the execution keys. ``train.data_seed`` and the
#: recording keys stay in it although they are not part of the experiment, because they change
#: what a run directory holds: another data stream under the same ``seed<k>`` directory, other
#: metrics rows, no test scores; a finished run is reused only where it holds what was asked for.
RUN_KEY_OMITS: tuple[str, ...] = tuple(
    k for k, c in NOT_EXPERIMENT.items() if c in ("label", "execution") or k == "train.seed"
)

#: Keys added after runs were made, with the default that reproduces what those runs did: at
#: that default the run key leaves them out, so an earlier run keeps its key (and its resume).
#: ``model.dense_activation``: the dense layer's activation ("none": linear)
DENSE_ACTIVATIONS = ("none", "relu")
#: ``model.embedding_init``: "default" (torch's N(0, 1)) or "uniform0.1" (U(-0.1, 0.1), the
#: word-language-model init of the PyTorch example, awd-lstm and the nnRNN language script)
EMBEDDING_INITS = ("default", "uniform0.1")
#: ``model.readout_init``: "default" (torch's nn.Linear), "xavier" (Glorot-normal weight,
#: torch's bias: the nnRNN copy script), "uniform0.1" (weight U(-0.1, 0.1), bias 0: the
#: language-model init as above) or "kaiming" (Kaiming-normal weight, N(0, 2 / fan-in), torch's
#: bias: the LEM scripts' classifier)
READOUT_INITS = ("default", "xavier", "uniform0.1", "kaiming")

RUN_KEY_OMITS_AT_DEFAULT: dict[str, object] = {
    "train.target_patience": 1,
    "model.params": 0,
    "model.dense_activation": "none",
    "model.embedding_init": "default",
    "model.readout_init": "default",
    "train.plateau_threshold": 1e-4,
}

#: Keys of the experiment that a resume may change all the same: the step budget (a longer run
#: continues the same experiment) and the precision (the run is then recorded as a mixed run:
#: ``precision_segments`` in result.json, a row of its own in ``rnnlab table``).
RESUME_MAY_ALSO_CHANGE: tuple[str, ...] = ("train.steps", "train.precision")


def not_experiment(*categories: str) -> tuple[str, ...]:
    """The keys of :data:`NOT_EXPERIMENT` in ``categories`` (all of them when none is named)."""
    return tuple(k for k, c in NOT_EXPERIMENT.items() if not categories or c in categories)


def experiment_category(key: str) -> str | None:
    """The :data:`NOT_EXPERIMENT` category of a dotted key (or of the table holding it:
    ``paper.test/loss`` is a ``label``), None for a key that is part of the experiment."""
    parts = key.split(".")
    for i in range(len(parts), 0, -1):
        category = NOT_EXPERIMENT.get(".".join(parts[:i]))
        if category is not None:
            return category
    return None


def resume_may_change(key: str) -> bool:
    """Whether a resumed run may change ``key`` (dotted, as ``--set`` spells it): anything that
    is not part of the experiment except the seeds (the data stream and RNG are restored from
    the checkpoint), plus :data:`RESUME_MAY_ALSO_CHANGE`."""
    return key in RESUME_MAY_ALSO_CHANGE or experiment_category(key) not in (None, "seed")


def resume_refusals(saved, new) -> list[str]:
    """``"key: old -> new"`` for each key where ``new`` differs from ``saved`` (RunConfigs or
    their dicts) in a way a resume may not change."""
    a, b = flatten(as_dict(saved)), flatten(as_dict(new))
    return [
        f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k) and not resume_may_change(k)
    ]


def as_dict(cfg) -> dict:
    """A RunConfig as its dict (a dict as it is)."""
    return cfg if isinstance(cfg, dict) else cfg.to_dict()


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """The leaves of a nested configuration dict keyed by their dotted path as ``--set`` spells
    them: a resolved configuration's ``task.options.L`` is ``task.L``; an empty table adds no key.

    >>> flatten({"task": {"name": "copy", "options": {"L": 5}}, "train": {"steps": 3, "x": {}}})
    {'task.name': 'copy', 'task.L': 5, 'train.steps': 3}
    """
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict):
            inner = prefix if (prefix == "task." and k == "options") else f"{prefix}{k}."
            out.update(flatten(v, inner))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ---------------------------------------------------------------------------- TOML out


def toml_value(v: Any) -> str:
    """``v`` as a TOML literal that reads back to it (what ``--set key=value`` parses): bools,
    numbers (also nan and inf), strings, arrays and inline tables."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(str(k))} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise ConfigError(f"cannot write {v!r} ({type(v).__name__}) as a TOML value")


def toml_key(k: str) -> str:
    """A bare TOML key where that is allowed, else a quoted one."""
    return k if k and k.replace("_", "").replace("-", "").isalnum() and k.isascii() else json.dumps(k)


def dump_toml(data: dict) -> str:
    """A TOML document of ``data``: scalars and arrays first, then each table under its header.

    >>> print(dump_toml({"name": "x", "train": {"steps": 5}}), end="")
    name = "x"
    <BLANKLINE>
    [train]
    steps = 5
    """
    lines: list[str] = []
    _toml_table(data, "", lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_table(d: dict, prefix: str, lines: list[str]) -> None:
    scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in d.items() if isinstance(v, dict)}
    if prefix and (scalars or not tables):
        lines.extend(["", f"[{prefix}]"])
    for k, v in scalars.items():
        lines.append(f"{toml_key(str(k))} = {toml_value(v)}")
    for k, v in tables.items():
        _toml_table(v, f"{prefix}.{toml_key(str(k))}" if prefix else toml_key(str(k)), lines)


# ---------------------------------------------------------------------------- checks of single values

PRECISIONS = ("fp32", "bf16", "fp16")
DEVICE_CHOICES = "auto, cpu, cuda, cuda:N, mps"
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def check_device_spelling(
    spec: Any, precision: Any = "fp32", what: str = "train.device", error: type[ConfigError] = ConfigError
) -> None:
    """Syntax of ``train.device`` and ``train.precision`` (no hardware query; the device module
    checks the hardware)."""
    if not isinstance(spec, str) or not DEVICE_PATTERN.match(spec):
        raise error(f"{what} must be one of {DEVICE_CHOICES}; got {spec!r}")
    if precision not in PRECISIONS:
        raise error(f"train.precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")


def check_name(name: Any) -> str:
    """A run name becomes a directory below the runs folder and a row of ``rnnlab table``: refuse
    anything but a plain relative path of printable characters (no absolute path, no ``..``/``.``
    or empty component, no newline, tab or other control character)."""
    text = str(name)
    parts = text.split("/")
    bad_char = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if bad_char is not None:
        raise ConfigError(
            f"run name {text!r} holds the control character {bad_char!r} (a newline, tab, ...), which "
            f"would break directory listings and `rnnlab table`; use letters, digits, '-', '_', '.', '/'"
        )
    if not text or text.startswith(("/", "~")) or "\\" in text or any(p in ("", ".", "..") for p in parts):
        raise ConfigError(
            f"run name {text!r} is not a plain relative path (no leading '/', '~', no '..' or '.' "
            f'components); set name = "..." in the preset or --set name=my-run'
        )
    return text


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def matches(value: Any, hint) -> bool:
    """Whether ``value`` (as TOML gives it) fits the declared type ``hint``: int (not bool),
    float (an int too), str, bool, list/tuple (element types checked), dict, unions, Optional,
    Literal. Types this cannot judge (a callable, a class) count as a match."""
    origin = typing.get_origin(hint)
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in typing.get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint in (list, tuple) or origin in (list, tuple):
        return isinstance(value, (list, tuple)) and _elements_match(value, hint)
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    return True


def _elements_match(value, hint) -> bool:
    args = typing.get_args(hint)
    if not args:
        return True
    if typing.get_origin(hint) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return len(value) == len(args) and all(matches(v, a) for v, a in zip(value, args))
    return all(matches(v, args[0]) for v in value)


def _check_type(where: str, value: Any, hint) -> Any:
    """``value`` if it fits ``hint`` (a float field's int comes back as a float), else a
    :class:`ConfigError` naming the key, the value and the type expected."""
    if not matches(value, hint):
        raise ConfigError(
            f"{where} must be of type {_type_name(hint)}, got {value!r} ({type(value).__name__}); "
            f"fix it in the preset or with --set {where}=..."
        )
    if hint is float and isinstance(value, int):
        return float(value)
    return value


def _build(cls, data: dict, where: str):
    _check_section(data, where)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {unknown} in [{where}]; valid keys: {names}." + did_you_mean(unknown[0], names)
        )
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
        raise ConfigError(f"unknown section(s) {unknown}; valid: {sorted(SECTIONS) + ['name', 'description', 'paper']}")
    task = dict(data.get("task", {}))
    if "options" in task:  # the resolved JSON layout
        options = task.pop("options")
    else:
        options = {k: task.pop(k) for k in list(task) if k != "name"}
    sections = {
        "task": TaskConfig(name=_check_type("task.name", task.get("name", "copy"), str), options=options),
        "model": _build(ModelConfig, _budget_width(data.get("model", {})), "model"),
        "optim": _build(OptimConfig, data.get("optim", {}), "optim"),
        "train": _build(TrainConfig, data.get("train", {}), "train"),
    }
    cfg = RunConfig(**sections, **{k: v for k, v in top.items()})
    validate(cfg)
    return cfg


def _budget_width(model: dict) -> dict:
    """A [model] table with ``params`` (a parameter budget) and no ``hidden_size`` gets width 0:
    the width is solved for when the model is built (rnnlab.sizing)."""
    if isinstance(model, dict) and model.get("params") and "hidden_size" not in model:
        return {**model, "hidden_size": 0}
    return model


def check_kwargs(cls, kwargs: dict, where: str, skip: tuple[str, ...] = (), prefix: str = "") -> None:
    """Raise ConfigError if ``kwargs`` has a key ``cls.__init__`` does not take, or a value that
    does not fit the parameter's declared type (``prefix`` + key names it in the message, e.g.
    ``task.L``)."""
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        valid = [n for n in params if n not in ("self",) + skip]
        unknown = sorted(set(kwargs) - set(valid))
        if unknown:
            raise ConfigError(
                f"unknown option(s) {unknown} for {where} ({cls.__name__}); valid: {valid}."
                + did_you_mean(unknown[0], valid)
            )
    hints = option_types(cls)
    for k, v in kwargs.items():
        if k in hints and not matches(v, hints[k]):
            raise ConfigError(
                f"{prefix}{k} must be of type {_type_name(hints[k])} for {where} ({cls.__name__}), got {v!r} "
                f"({type(v).__name__}); fix it in the preset or with --set {prefix}{k}=..."
            )


def option_types(cls) -> dict[str, Any]:
    """The declared types of ``cls.__init__``'s parameters (resolved annotations); a test checks
    that they resolve for every registered cell and task, so no option goes unchecked."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: nothing to check against
        return {}
    hints.pop("return", None)
    return hints


def _validate_model_head(m: ModelConfig) -> None:
    """The encoder, dense layer and readout settings of ``[model]``."""
    if m.embedding_init not in EMBEDDING_INITS:
        raise ConfigError(f"unknown model.embedding_init {m.embedding_init!r}; expected one of {EMBEDDING_INITS}")
    if m.readout_init not in READOUT_INITS:
        raise ConfigError(f"unknown model.readout_init {m.readout_init!r}; expected one of {READOUT_INITS}")
    if m.dense < 0:
        raise ConfigError(f"model.dense must be >= 0 (0 = no dense layer before the readout), got {m.dense}")
    if m.dense_activation not in DENSE_ACTIVATIONS:
        raise ConfigError(
            f"model.dense_activation must be one of {', '.join(DENSE_ACTIVATIONS)}, got {m.dense_activation!r}"
        )


def validate(cfg: RunConfig) -> None:
    from .cells import CELLS
    from .tasks import TASKS

    if cfg.task.name not in TASKS:
        raise ConfigError(
            f"unknown task {cfg.task.name!r}; registered tasks: {sorted(TASKS)}." + did_you_mean(cfg.task.name, TASKS)
        )
    check_name(cfg.name)
    check_kwargs(TASKS[cfg.task.name], cfg.task.options, f"task {cfg.task.name!r}", prefix="task.")
    try:
        cell_class = CELLS.resolve(cfg.model.cell)  # a key, "package.module:Class" or an entry point
    except ValueError as e:
        hint = did_you_mean(cfg.model.cell, e.choices) if getattr(e, "choices", None) else ""
        raise ConfigError(f"{e}{hint}") from None
    check_kwargs(
        cell_class,
        cfg.model.cell_options,
        f"cell {cfg.model.cell!r}",
        skip=("input_size", "hidden_size"),
        prefix="model.cell_options.",
    )
    if cfg.optim.name not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {cfg.optim.name!r}; expected one of {OPTIMIZERS}")
    check_device_spelling(cfg.train.device, cfg.train.precision)
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
    if cfg.train.checkpoint_every < 0:
        raise ConfigError(
            f"train.checkpoint_every must be >= 0 (0 = checkpoint only at the evaluations, every "
            f"train.eval_every steps), got {cfg.train.checkpoint_every}"
        )
    if cfg.train.lr_step_every < 0:
        raise ConfigError(
            f"train.lr_step_every must be >= 0 (0 = every train.eval_every steps), got {cfg.train.lr_step_every}"
        )
    _validate_model_head(cfg.model)
    if cfg.model.dense_activation != "none" and not cfg.model.dense:
        raise ConfigError(
            f"model.dense_activation={cfg.model.dense_activation!r} needs a dense layer (model.dense > 0)"
        )
    _check_ranges(cfg)
    hs = cfg.model.hidden_size
    widths = hs if isinstance(hs, list) else [hs]
    if cfg.model.params:  # a budget instead of a width (rnnlab.sizing)
        _need(cfg.model.params >= 1, "model.params", cfg.model.params, "an integer >= 1 (0 = use model.hidden_size)")
        if hs != 0:
            raise ConfigError(
                f"model.params = {cfg.model.params} and model.hidden_size = {hs!r} are both given; give one: "
                f"remove hidden_size (or --set model.hidden_size=0) to size the model by its parameter count"
            )
        widths = [max(cfg.model.pool, 1)]  # the solver keeps to widths that the pool divides
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
            f"model.pool must be 0 (off) or a divisor of the last layer's width {widths[-1]}, got {cfg.model.pool}"
        )


#: the largest seed: torch's generators take a signed 64-bit seed, and the default data seed is seed + 1
MAX_SEED = 2**63 - 2


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
    _need(-1 <= t.data_seed <= MAX_SEED, "train.data_seed", t.data_seed, f"in [0, {MAX_SEED}], or -1 for seed + 1")
    _need(0 <= t.seed <= MAX_SEED, "train.seed", t.seed, f"in [0, {MAX_SEED}]")
    _need(_finite(t.plateau_factor) and 0 < t.plateau_factor < 1, "train.plateau_factor", t.plateau_factor, "in (0, 1)")
    _need(t.plateau_patience >= 0, "train.plateau_patience", t.plateau_patience, ">= 0")
    _need(
        _finite(t.plateau_threshold) and 0 <= t.plateau_threshold < 1,
        "train.plateau_threshold",
        t.plateau_threshold,
        "in [0, 1)",
    )
    _need(_finite(t.target_value), "train.target_value", t.target_value, "a finite number")
    _need(t.target_patience >= 1, "train.target_patience", t.target_patience, ">= 1")
    _need(t.epoch_steps >= 0, "train.epoch_steps", t.epoch_steps, ">= 0 (0: not set)")
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
            f"{path}: not UTF-8 text (byte {e.start}: {e.object[e.start : e.start + 1]!r}); TOML presets "
            f"must be saved as UTF-8"
        ) from None
    except OSError as e:
        raise ConfigError(f"cannot read preset {path}: {e.strerror or e}; check its permissions") from None
    try:
        data = apply_overrides(data, overrides or [])
        for section in ("task", "model"):
            if section in data:
                _check_section(data[section], section)
        missing = [
            k for k, s in (("task.name", "task"), ("model.cell", "model")) if k.split(".")[1] not in data.get(s, {})
        ]
        if missing:
            raise ConfigError(
                f"a preset must name at least a task and a cell, but {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set (is the file empty?); add e.g. "
                f'[task] name = "copy" and [model] cell = "lstm" (see `rnnlab list`)'
            )
        return from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def load_json(path: str | Path) -> RunConfig:
    """The resolved configuration of a run (its ``config.json``, plain or, in a record,
    compressed: ``stored.read_stored``); a damaged file is a :class:`ConfigError` naming it (a
    compressed file that does not decompress: ``stored.StoredFileDamaged``)."""
    from .stored import read_stored

    path = Path(path)
    fix = (
        "restore it from a copy, or start the run again in a new directory; config.json "
        "is the resolved configuration written when the run started"
    )
    try:
        data = json.loads(read_stored(path).decode("utf-8"))
    except FileNotFoundError:
        raise
    except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        what = getattr(e, "strerror", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path} is unreadable or not valid JSON ({what}); {fix}") from None
    _check_recorded_cell(path, data)
    try:
        return from_dict(data)
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"{path} does not hold a valid run configuration ({e}); {fix}") from None


def _check_recorded_cell(path: Path, data) -> None:
    """A run's cell that cannot be found here is not a damaged config.json: the cell's file,
    module or package is missing where this command runs (a ``file.py:Class`` path is read
    relative to the current directory); a one-line error naming the cell and the fix."""
    from .cells import CELLS

    cell = data.get("model", {}).get("cell") if isinstance(data, dict) and isinstance(data.get("model"), dict) else None
    if not isinstance(cell, str):
        return
    try:
        CELLS.resolve(cell)
    except ValueError as e:
        file = cell.rpartition(":")[0]
        if file.endswith(".py") and not Path(file).expanduser().is_absolute() and "no file" in str(e):
            raise ConfigError(
                f"{path} records model.cell = {cell!r}, a file relative to the directory the run was started "
                f"in, and there is no {Path(file).resolve()}; run this command from that directory"
            ) from None
        raise ConfigError(f"{path} records a cell that cannot be loaded here: {e}") from None
