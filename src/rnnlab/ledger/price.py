"""What a missing run costs: CPU-hours (and GPU-hours where a GPU record exists) of a preset's
runs, from the timings the committed records hold, never from typed numbers.

A run's price is ``steps x s/step (training) + evaluations x s/evaluation``, with the seconds
taken, in this order, from

1. **measured**: a record of the same configuration (the preset's runs at any step budget or
   evaluation schedule: ``train_time_s / steps`` and ``eval_time_s`` per evaluation, per member
   of an ensemble); the longest such run, so a trained record wins over a **probe** (a run of
   ``PROBE_STEPS`` steps kept below a ``records.PROBES`` folder only to time its configuration);
2. **estimate**: else the closest record of the same cell and task family (the task's module:
   ``rnnlab.tasks.mnist``, ``.text``, ``.synthetic``, ...), scaled by the ratio of parameter
   counts x sequence lengths x batch sizes (the closest: the smallest such ratio either way);
3. **speed benchmark**: else a row of ``docs/speed-results-*.json`` (``rnnlab bench``) of the
   same cell, width, sequence length and batch size (training steps only);
4. else *no price (no timing of this configuration)*.

Each source names the CPU (or GPU) that made it: a price holds on that machine. ``Pricer``
reads each record once and caches the price of each configuration.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from .. import config
from ..rundir import RunFiles, read_stored
from .records import PROBES, Record, _resolved, cpu_label, is_probe, preset_dicts
from .stats import counted

#: a missing run is *affordable* on the machine of the records when it fits in this many hours
#: of one CPU thread (the README's line, ``rnnlab reproduce plan --budget``'s default)
AFFORDABLE_HOURS = 6.0
#: runs longer than this (seconds, by their price) checkpoint between evaluations
#: (``train.checkpoint_every``), so that an interruption loses at most ``CHECKPOINT_S`` of work
LONG_RUN_S = 3600.0
CHECKPOINT_S = 900.0
#: configuration keys that change a run's length (or the size of its evaluation sets) but not the
#: cost of one training step
_LENGTH_ONLY = (
    "train.steps",
    "train.eval_every",
    "train.target",
    "train.target_patience",
    "task.val_size",
    "task.test_size",
)
SPEED_RESULTS = Path(__file__).resolve().parents[3] / "docs"
#: a price probe's run: a few steps and two evaluations (its evaluation time includes the test
#: evaluation, so a probe's price errs high by up to half an evaluation per evaluation)
PROBE_STEPS = 20
PROBE_SET = (f"train.steps={PROBE_STEPS}", f"train.eval_every={PROBE_STEPS // 2}")


@dataclass(frozen=True)
class Timing:
    """Seconds per training step and per evaluation, and where they come from."""

    step_s: float
    eval_s: float
    source: str  # "measured", "estimate", "speed benchmark"
    text: str  # what the number is taken from (record or benchmark row, machine)
    gpu: bool = False

    def seconds(self, steps: int, eval_every: int) -> float:
        evals = max(1, steps // max(1, eval_every))
        return steps * self.step_s + evals * self.eval_s


def _device(rec: Record) -> str:
    return str((rec.result.get("conditions") or {}).get("device", "cpu"))


def _machine(rec: Record) -> str:
    cond = rec.result.get("conditions") or {}
    if not _device(rec).startswith("cpu"):
        return f"{cond.get('device_name') or _device(rec)}"
    return cpu_label(cond) or "CPU of unrecorded model"


def _per_member(rec: Record) -> tuple[float, float] | None:
    """(training seconds per step, evaluation seconds per evaluation) of one member of a record
    (an ensemble's time is shared by its members), None without timings."""
    r = rec.result
    steps, train_s = r.get("steps"), r.get("train_time_s")
    if not isinstance(steps, int) or steps <= 0 or not isinstance(train_s, (int, float)) or train_s <= 0:
        return None
    members = (r.get("conditions") or {}).get("ensemble") or 1
    every = max(1, int((rec.config.get("train") or {}).get("eval_every", 100)))
    evals = max(1, steps // every)
    return train_s / steps / members, float(r.get("eval_time_s") or 0.0) / evals / members


def family(task: str) -> str:
    """A task's family: the module of its class (``rnnlab.tasks.mnist`` holds sMNIST and psMNIST)."""
    from ..tasks import TASKS

    cls = TASKS.get(task)
    return cls.__module__ if cls is not None else task


_SIZES: dict[str, tuple[int | None, int | None]] = {}


def sizes(cfg: dict, flat: dict | None = None) -> tuple[int | None, int | None]:
    """(parameter elements, sequence length) of the model and task a configuration builds, None
    for what cannot be known here (a dataset that is not present); cached per configuration
    (``flat``: its resolved form, when the caller holds it)."""
    key = json.dumps(_resolved(cfg) if flat is None else flat, sort_keys=True, default=str)
    if key not in _SIZES:
        _SIZES[key] = _sizes(cfg)
    return _SIZES[key]


def _sizes(cfg: dict) -> tuple[int | None, int | None]:
    from types import SimpleNamespace

    from ..model import build_model
    from ..tasks import TASKS, build_task

    try:
        run = config.from_dict(cfg)
    except (config.ConfigError, KeyError, TypeError, ValueError):
        return None, None
    opts = dict(run.task.options)
    length = opts.get("bptt")
    try:
        task = build_task(run.task)
    except Exception:  # noqa: BLE001 -- a dataset that is not here: the class's own sizes, if it has them
        cls = TASKS.get(run.task.name)
        if cls is None or not getattr(cls, "input_size", 0) or not getattr(cls, "output_size", 0):
            return None, length
        task = SimpleNamespace(
            input_size=cls.input_size,
            output_size=cls.output_size,
            readout=cls.readout,
            num_tokens=cls.num_tokens,
            model_kind=cls.model_kind,
        )
        if run.task.name in ("smnist", "psmnist"):
            length = 784
    length = length or getattr(task, "T", None) or getattr(task, "L_max", None) or getattr(task, "L", None)
    try:
        params = sum(p.numel() for p in build_model(run.model, task).parameters())
    except Exception:  # noqa: BLE001 -- a model that does not build here has no size to scale by
        params = None
    return params, (int(length) if length else None)


def _shape(model: dict) -> dict:
    """A model section without its real-valued cell options (rates, scales, bounds: they change no
    parameter count), to tell two models of one size apart from two of different sizes."""
    opts = {k: v for k, v in (model.get("cell_options") or {}).items() if not isinstance(v, float)}
    return {**model, "cell_options": opts}


def _cost(flat: dict) -> str:
    """A resolved configuration without the keys that only change a run's length
    (``_LENGTH_ONLY``): two configurations with equal costs per step have equal keys."""
    return json.dumps({k: v for k, v in flat.items() if k not in _LENGTH_ONLY}, sort_keys=True, default=str)


_LOADED: dict[tuple, tuple[dict, dict] | None] = {}


def _load(preset: str, overrides: tuple[str, ...] = ()) -> tuple[dict, dict] | None:
    """(configuration, resolved configuration) of a preset with overrides, loaded once."""
    if not overrides and preset in preset_dicts():
        return preset_dicts()[preset]
    key = (preset, overrides)
    if key not in _LOADED:
        try:
            cfg = config.load(preset, list(overrides)).to_dict()
            _LOADED[key] = (cfg, _resolved(cfg))
        except config.ConfigError:
            _LOADED[key] = None
    return _LOADED[key]


def _bench_rows(root: Path = SPEED_RESULTS) -> list[dict]:
    rows = []
    for p in sorted(root.glob("speed-results-*.json")):
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        cond = data.get("conditions") or {}
        for r in data.get("rows", []):
            if isinstance(r, dict) and isinstance(r.get("fast"), dict) and r.get("threads", 1) == 1:
                rows.append({**r, "_file": p.name, "_cpu": cpu_label(cond) or "CPU"})
    return rows


class Pricer:
    """Prices of presets' runs from the records' timings (see the module's docstring)."""

    def __init__(self, records: list[Record], bench_root: Path | None = SPEED_RESULTS):
        self.records = [r for r in records if _per_member(r) is not None]
        self._by_cost: dict[tuple[bool, str], list[Record]] = {}
        self._by_family: dict[tuple[bool, str, str], list[Record]] = {}
        for r in self.records:
            gpu = not _device(r).startswith("cpu")
            self._by_cost.setdefault((gpu, _cost(r.resolved())), []).append(r)
            fam = (gpu, r.config["model"]["cell"], family(r.config["task"]["name"]))
            self._by_family.setdefault(fam, []).append(r)
        self._bench = _bench_rows(bench_root) if bench_root is not None else []
        self._cache: dict[tuple[str, bool], Timing | None] = {}

    def timing(self, preset: str, gpu: bool = False, overrides: tuple[str, ...] = ()) -> Timing | None:
        """The seconds of one step and one evaluation of ``preset`` (with ``overrides``) on the
        records' CPU (or a GPU), None where nothing times it."""
        key = (preset + "|" + "|".join(overrides), gpu)
        if key not in self._cache:
            loaded = _load(preset, tuple(overrides))
            self._cache[key] = None if loaded is None else self._timing(*loaded, gpu)
        return self._cache[key]

    def _timing(self, cfg: dict, flat: dict, gpu: bool) -> Timing | None:
        same = self._by_cost.get((gpu, _cost(flat)), [])
        if same:
            rec = max(same, key=lambda r: r.result.get("steps", 0))  # the longest run: steady state
            step_s, eval_s = _per_member(rec)
            where = f"{rec.path.parent.name}/{rec.path.name}, {_machine(rec)}"
            if is_probe(rec.path):
                return Timing(step_s, eval_s, "probe", f"{PROBES}/{where}, {rec.result['steps']} steps", gpu)
            return Timing(step_s, eval_s, "measured", where, gpu)
        est = self._estimate(cfg, flat, gpu)
        if est is not None or gpu:
            return est
        return self._from_bench(cfg, flat)

    def _estimate(self, cfg: dict, flat: dict, gpu: bool) -> Timing | None:
        candidates = self._by_family.get((gpu, cfg["model"]["cell"], family(cfg["task"]["name"])), [])
        if not candidates:  # (sizing a model costs: only where a record could be scaled)
            return None
        params, length = sizes(cfg, flat)
        batch = cfg["train"]["batch_size"]
        if not length:
            return None
        best = None
        for rec in candidates:
            p, n = sizes(rec.config, rec.resolved())
            p = (rec.result.get("params") or {}).get("elements") or p
            same_task = rec.config["task"]["name"] == cfg["task"]["name"]
            # a model the task's data must size (a vocabulary): the same model on the same task has the record's size
            mine = params or (p if same_task and _shape(rec.config["model"]) == _shape(cfg["model"]) else None)
            if not p or not n or not mine:
                continue
            ratio = (mine / p) * (length / n) * (batch / rec.config["train"]["batch_size"])
            key = (not same_task, abs(math.log(ratio)))  # the same task first, then the nearest size
            if best is None or key < best[0]:
                best = (key, ratio, rec)
        if best is None:
            return None
        _, ratio, rec = best
        step_s, eval_s = _per_member(rec)
        return Timing(
            step_s * ratio,
            eval_s * ratio,
            "estimate",
            f"{rec.path.parent.name}/{rec.path.name} x{ratio:.3g} (parameters x sequence length x batch), "
            f"{_machine(rec)}",
            gpu,
        )

    def _from_bench(self, cfg: dict, flat: dict) -> Timing | None:
        from ..workloads import CONFIGS

        cell, hidden, batch = cfg["model"]["cell"], cfg["model"]["hidden_size"], cfg["train"]["batch_size"]
        for row in self._bench:
            bc = CONFIGS.get(row.get("config"))
            if bc is None or row.get("label") != cell or row.get("hidden") != hidden or bc.batch != batch:
                continue
            if bc.T != sizes(cfg, flat)[1]:
                continue
            return Timing(
                float(row["fast"]["wall"]),
                0.0,
                "speed benchmark",
                f"docs/{row['_file']} ({row['config']}), {row['_cpu']}; training steps only",
            )
        return None


def hours(s: float) -> str:
    """``3600 * 2.25`` -> ``"2.2"``: CPU-hours as the ledger writes them."""
    return f"{s / 3600:.2g}" if s < 36 else f"{s / 3600:.1f}" if s < 360000 else f"{s / 3600:.0f}"


# --- the missing runs of a row -----------------------------------------------------------------
def seeds_needed(runs: int) -> int:
    """Seeds a row's status needs at the full budget, as the ledger counts them: for a value the
    paper reports from one run, ``FEW_SEEDS`` (our spread decides it); else ``claims.needed``
    (``FEW_SEEDS``, or the paper's count when smaller)."""
    from .claims import FEW_SEEDS, needed

    return FEW_SEEDS if runs == 1 else needed(runs)


@dataclass(frozen=True)
class Missing:
    """The runs a preset still needs at the paper's protocol and its full budget."""

    preset: str
    seeds: tuple[int, ...]  # the seeds to run (the preset's seed upward, those done skipped)
    done: int  # seeds already at the full budget
    steps: int
    eval_every: int
    cpu: Timing | None
    gpu: Timing | None = None

    def run_s(self, gpu: bool = False) -> float | None:
        """Seconds of one run on the records' CPU (or GPU), None without a timing."""
        t = self.gpu if gpu else self.cpu
        return None if t is None else t.seconds(self.steps, self.eval_every)

    def total_s(self, gpu: bool = False) -> float | None:
        s = self.run_s(gpu)
        return None if s is None else s * len(self.seeds)

    def text(self) -> str:
        """The ledger's price cell."""
        n = len(self.seeds)
        runs = f"{counted(n, 'seed')} x {self.steps:,} steps"
        if self.cpu is None:
            out = f"{runs}: no price (no timing of this configuration)"
        else:
            each = f"{hours(self.run_s())} CPU-h each, " if n > 1 else ""
            out = f"{runs}: {each}{hours(self.total_s())} CPU-h ({self.cpu.source}: {self.cpu.text})"
        if self.gpu is not None:
            out += f"; GPU {hours(self.total_s(gpu=True))} h ({self.gpu.source}: {self.gpu.text})"
        return out


def done_seeds(ev, preset: str) -> set:
    """The seeds of ``preset`` run at its full budget and configuration."""
    return {r.config.get("train", {}).get("seed") for g in ev.groups(preset) if not g.diffs for r in g.records}


def missing(ev, preset: str, runs: int, pricer: Pricer, need: int | None = None) -> Missing | None:
    """The runs ``preset`` lacks for ``need`` seeds (default: a row of the paper's ``runs``,
    ``seeds_needed``) at the full budget of its configuration; None when none is missing or the
    preset does not load."""
    loaded = _load(preset)
    if loaded is None:
        return None
    train = loaded[0]["train"]
    need = seeds_needed(runs) if need is None else need
    done = done_seeds(ev, preset)
    if len(done) >= need:
        return None
    seeds, s = [], train["seed"]
    while len(seeds) < need - len(done):
        if s not in done:
            seeds.append(s)
        s += 1
    return Missing(
        preset,
        tuple(seeds),
        len(done),
        train["steps"],
        train["eval_every"],
        pricer.timing(preset),
        pricer.timing(preset, gpu=True),
    )


def timing_records(roots) -> list[Record]:
    """The records below ``roots`` as far as a price reads them (``config.json`` and
    ``result.json``; no metrics): faster than ``records.load_records`` where only timings count."""
    from .records import _over_defaults

    out = []
    for root in roots:
        for p in RunFiles.below(root):
            try:
                result = json.loads(read_stored(p))
                cfg = _over_defaults(json.loads(read_stored(RunFiles(p.parent).config)))
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(result, dict):
                out.append(Record(p.parent, cfg, result))
    return out


def checkpoint_every(step_s: float) -> int:
    """Steps between checkpoints so that they are at most ``CHECKPOINT_S`` apart at ``step_s``
    seconds a step (rounded down to two significant digits)."""
    k = max(1, math.floor(CHECKPOINT_S / step_s))
    scale = 10 ** max(0, len(str(k)) - 2)
    return max(1, k // scale * scale)


def suite_jobs(suite, pricer: Pricer) -> list[tuple[str, float, float]]:
    """``(preset, seconds of one job, seconds of one of its steps)`` for each job of a suite at its
    settings, as ``rnnlab suite`` runs them: a job trains one run, or (``ensemble``) the seeds of
    one configuration and of the grid points that differ from it only in learning rates, as one
    batched model of at most ``ensemble`` members (then its members' time adds up)."""
    from ..suite import grid_points, shared_overrides

    out = []
    for preset in suite.presets:
        groups: dict[tuple, list[list[str]]] = {}
        for point in grid_points(suite.grid, f"suite {suite.name}"):
            over = [*suite.set_for(preset), *point]
            groups.setdefault(shared_overrides(over) if suite.ensemble else tuple(over), []).append(over)
        seeds = len(suite.seeds_for(preset))
        for overs in groups.values():
            runs = len(overs) * seeds
            t = pricer.timing(preset, overrides=tuple(overs[0]))
            loaded = _load(preset, tuple(overs[0]))
            if t is None or loaded is None:
                continue
            train = loaded[0]["train"]
            seconds = t.seconds(train["steps"], train["eval_every"])
            cap = (runs if suite.ensemble is True else int(suite.ensemble)) if suite.ensemble else 1
            for first in range(0, runs, cap):
                members = min(cap, runs - first)
                step = (t.step_s + t.eval_s / max(1, train["eval_every"])) * members
                out.append((preset, seconds * members, step))
    return out


def suite_hours(suite, pricer: Pricer) -> tuple[float, list[str]]:
    """The CPU-hours of every run of ``suite`` (one thread each; an ensemble's members add up),
    and the presets nothing prices."""
    jobs = suite_jobs(suite, pricer)
    priced = {p for p, _, _ in jobs}
    return sum(s for _, s, _ in jobs) / 3600, [p for p in suite.presets if p not in priced]


def suite_price_lines(suite, overrides: list[str] | None = None) -> list[str]:
    """``rnnlab suite NAME --price``'s lines: each job's price and the suite's CPU-hours, from the
    timings of the records in ``records/`` of the working directory, as ``rnnlab reproduce plan``
    reads them."""
    import dataclasses

    from ..suite import grid_points

    if overrides:
        suite = dataclasses.replace(suite, set=[*suite.set, *overrides])
    pricer = Pricer(timing_records([Path("records")]))
    jobs = suite_jobs(suite, pricer)
    runs = sum(len(suite.seeds_for(p)) for p in suite.presets) * len(grid_points(suite.grid))
    lines = []
    for preset, seconds, step_s in jobs:
        t = pricer.timing(preset, overrides=tuple(suite.set_for(preset)))
        where = f" ({t.source}: {t.text})" if t is not None else ""
        lines.append(f"  {preset}: a job of {seconds / 3600:.2f} CPU-hours, {step_s:.3g} s a step{where}")
    hours, unpriced = suite_hours(suite, pricer)
    lines.append(
        f"suite {suite.name}: {runs} runs in {len(jobs)} job(s), {hours:.2f} CPU-hours ({hours * 60:.0f} CPU-minutes)"
    )
    if unpriced:
        lines.append(f"  no price (no timing of this configuration): {', '.join(unpriced)}")
    return lines
