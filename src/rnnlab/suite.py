"""Benchmark suites: presets x seeds, run in parallel processes, summarised side by side.

A suite is a TOML file (shipped ones live in ``rnnlab/suites/``)::

    name = "dmu-adding"
    description = "..."
    presets = ["dmu/adding-dmu", "dmu/adding-gru", ...]
    seeds = [0, 1, 2, 3, 4]
    set = ["train.steps=1000"]          # optional overrides for every run

    [seeds_of]                           # optional: a preset's own seeds instead of ``seeds``
    "dmu/adding-gru" = [5, 6]            #   (rnnlab reproduce plan writes its runs so)

    [set_of]                             # optional: a preset's own overrides, after ``set``
    "dmu/adding-gru" = ["train.checkpoint_every=500"]
    metrics = ["test/loss"]              # columns of the summary table

    [analyze]                            # optional: the analysis recorded for each finished
    "nnrnn/copy" = "schur"               #   run of a preset (analysis.json, rnnlab.analysis.record)

    [grid]                               # optional: every combination, x presets x seeds
    "optim.lr" = [1e-3, 3e-4]
    size = [{"model.hidden_size" = 64, "optim.lr" = 1e-3},   # a tied axis: a list of tables,
            {"model.hidden_size" = 128, "optim.lr" = 5e-4}]  # the keys of one entry move together

``run_suite`` trains every (preset, grid point, seed) into
``RUNS_DIR/<suite>/<dir name>/seed<seed>``, where the directory name is the run name, plus the
changed keys and the configuration key when the run differs from its preset + the suite's
``set`` (``rundir.run_dir``). A run whose ``result.json`` exists *and* whose saved configuration
matches is skipped; one with only a checkpoint is resumed, so an interrupted suite continues
where it stopped. Every run holds its directory's lock while it trains: a second driver (or a
stray worker) cannot train the same run at the same time; such a run is reported busy. Runs
execute in the local process pool, or as Ray tasks with ``backend="ray"`` (``rnnlab.backends``).
Each worker process uses one torch thread and dies with the driver. A run that fails (diverges,
missing data, busy, its worker killed) is reported, the others go on, and the suite exits
non-zero at the end. Ctrl-C cancels the queued runs, stops the running ones at their next
checkpoint and exits 130; the same command continues.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .config import SECTIONS, ConfigError, flatten, toml_value, tomllib
from .rundir import RunFiles
from .runtime import show_progress

SUITE_DIR = Path(__file__).parent / "suites"


@dataclass
class Suite:
    name: str
    presets: list[str]
    seeds: list[int] = field(default_factory=lambda: [0])
    set: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    description: str = ""
    grid: dict = field(default_factory=dict)
    #: train the seeds of each configuration as one batched model (rnnlab.ensemble): true, or
    #: the most members per ensemble; ``rnnlab suite --ensemble / --no-ensemble`` overrides it
    ensemble: bool | int = False
    #: ``{preset: analysis}``: after training, each finished run of the preset gets its analysis
    #: record (``analysis.json``, :mod:`rnnlab.analysis.record`: "jacobian" or "schur")
    analyze: dict = field(default_factory=dict)
    #: ``{preset: [seeds]}``: the seeds of a preset that has its own, instead of ``seeds``
    seeds_of: dict = field(default_factory=dict)
    #: ``{preset: ["key=value", ...]}``: overrides of one preset's runs, after ``set`` (``rnnlab
    #: reproduce plan`` gives each long run its own checkpoint interval so)
    set_of: dict = field(default_factory=dict)

    def seeds_for(self, preset: str) -> list[int]:
        """The seeds of ``preset``: its own (``seeds_of``) or the suite's."""
        return list(self.seeds_of.get(preset, self.seeds))

    def only_seeds(self, seeds: list[int]) -> Suite:
        """The suite with only those of its seeds in ``seeds`` (a stage of it: ``rnnlab suite ...
        --seeds 0-2``; the same command without ``--seeds`` completes it in the same directories)."""
        known = sorted(set(self.seeds) | {s for ss in self.seeds_of.values() for s in ss})
        unknown = [s for s in seeds if s not in known]
        if unknown:
            raise ConfigError(
                f"--seeds: seed(s) {unknown} are not among suite {self.name}'s seeds {known}: a stage of a "
                f"suite runs some of its own seeds (e.g. --seeds {known[0]}-{known[min(2, len(known) - 1)]})"
            )
        keep = set(seeds)
        return dataclasses.replace(
            self,
            seeds=[s for s in self.seeds if s in keep],
            seeds_of={p: [s for s in ss if s in keep] for p, ss in self.seeds_of.items()},
        )

    def set_for(self, preset: str) -> list[str]:
        """The overrides of every run of ``preset``: the suite's ``set``, then its own (``set_of``)."""
        return [*self.set, *self.set_of.get(preset, [])]


def list_suites() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.toml"))


def load_suite(name_or_path: str) -> Suite:
    p = Path(name_or_path)
    if not (p.suffix == ".toml" and p.exists()):
        p = SUITE_DIR / f"{name_or_path}.toml"
    if not p.exists():
        raise ConfigError(f"no suite named {name_or_path!r}; shipped suites: {list_suites()}")
    data = tomllib.loads(p.read_text())
    valid = set(Suite.__dataclass_fields__)
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ConfigError(f"{p}: unknown key(s) {unknown}; valid keys: {sorted(valid)}")
    if "name" not in data or "presets" not in data:
        raise ConfigError(f"{p}: a suite needs 'name' and 'presets'")
    suite = Suite(**data)
    if not isinstance(suite.ensemble, (bool, int)) or suite.ensemble < 0:
        raise ConfigError(
            f"{p}: ensemble must be true, false or the most members per ensemble (an integer >= 1), "
            f"got {suite.ensemble!r}"
        )
    grid_points(suite.grid, str(p))  # shape errors now; key errors when the runs are resolved
    _check_analyze(suite, str(p))
    _check_seeds_of(suite, str(p))
    _check_set_of(suite, str(p))
    return suite


def _check_named_preset(suite: Suite, table: str, preset: str, where: str) -> None:
    """A suite table keyed by preset ([analyze], [seeds_of]) names only the suite's presets."""
    if preset not in suite.presets:
        raise ConfigError(
            f"{where}: [{table}] names {preset!r}, which is not among the suite's presets {suite.presets}"
        )


def _check_analyze(suite: Suite, where: str) -> None:
    from .analysis.record import KINDS

    if not isinstance(suite.analyze, dict):
        raise ConfigError(f'{where}: [analyze] must be a table of preset = analysis, e.g. "nnrnn/copy" = "schur"')
    for preset, kind in suite.analyze.items():
        _check_named_preset(suite, "analyze", preset, where)
        if kind not in KINDS:
            raise ConfigError(f"{where}: [analyze] {preset!r} = {kind!r}: expected one of {list(KINDS)}")


def _check_seeds_of(suite: Suite, where: str) -> None:
    if not isinstance(suite.seeds_of, dict):
        raise ConfigError(f'{where}: [seeds_of] must be a table of preset = [seeds], e.g. "dmu/adding-gru" = [5, 6]')
    for preset, seeds in suite.seeds_of.items():
        _check_named_preset(suite, "seeds_of", preset, where)
        if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
            raise ConfigError(f"{where}: [seeds_of] {preset!r} = {seeds!r}: expected a list of integer seeds")


def _check_set_of(suite: Suite, where: str) -> None:
    if not isinstance(suite.set_of, dict):
        raise ConfigError(
            f'{where}: [set_of] must be a table of preset = ["key=value", ...], e.g. "dmu/adding-gru" = '
            f'["train.checkpoint_every=500"]'
        )
    for preset, over in suite.set_of.items():
        _check_named_preset(suite, "set_of", preset, where)
        if not isinstance(over, list) or not all(isinstance(o, str) and "=" in o for o in over):
            raise ConfigError(f'{where}: [set_of] {preset!r} = {over!r}: expected a list of "key=value" strings')


def _check_grid_key(key: str, where: str) -> None:
    parts = key.split(".")
    if len(parts) < 2 or parts[0] not in SECTIONS or not all(parts):
        raise ConfigError(
            f"{where}: grid key {key!r} names no config key; expected section.key with "
            f'section one of {sorted(SECTIONS)} (e.g. "optim.lr")'
        )
    if key == "train.seed":
        raise ConfigError(f"{where}: grid key 'train.seed': list seeds under seeds = [...], not in [grid]")


def grid_points(grid: dict, where: str = "suite") -> list[list[str]]:
    """The ``[grid]`` table as a list of override lists, one per grid point (the product of the
    axes; a tied axis, a list of tables, moves its keys together). ``[[]]`` without a grid."""
    if not isinstance(grid, dict):
        raise ConfigError(f"{where}: [grid] must be a table of axes, got {grid!r}")
    axes = []
    # an unquoted dotted key (optim.lr = [...]) arrives as nested tables: flatten those
    flat = {}
    for axis, values in grid.items():
        flat.update(flatten({axis: values}) if isinstance(values, dict) else {axis: values})
    for axis, values in flat.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: grid axis {axis!r} must be a non-empty list of values, got {values!r}")
        if all(isinstance(v, dict) for v in values):  # tied axis
            points = []
            for v in values:
                entry = flatten(v)
                if not entry:
                    raise ConfigError(f"{where}: tied grid axis {axis!r} has an empty entry")
                for k in entry:
                    _check_grid_key(k, where)
                points.append([f"{k}={toml_value(x)}" for k, x in entry.items()])
        elif any(isinstance(v, dict) for v in values):
            raise ConfigError(
                f"{where}: grid axis {axis!r} mixes tables and values; a tied axis is a list of tables only"
            )
        else:
            _check_grid_key(axis, where)
            points = [[f"{axis}={toml_value(v)}"] for v in values]
        axes.append(points)
    return [sum(combo, []) for combo in itertools.product(*axes)]


def _jobs(suite: Suite, runs_dir: Path, extra: list[str]):
    """(preset, overrides, run directory) for every run of the suite, each run once."""
    from . import config, rundir

    seen = set()
    for preset in suite.presets:
        for point in grid_points(suite.grid, f"suite {suite.name}"):
            for seed in suite.seeds_for(preset):
                overrides = [*suite.set_for(preset), *point, *extra, f"train.seed={seed}"]
                try:  # fails early, before anything runs, on a bad suite
                    cfg = config.load(preset, overrides)
                except ConfigError as e:
                    where = f" at grid point {point}" if point else ""
                    raise ConfigError(f"suite {suite.name}, preset {preset}{where}: {e}") from None
                base = config.load(preset, [*suite.set_for(preset), f"train.seed={seed}"])
                rd = rundir.run_dir(Path(runs_dir) / suite.name, cfg, base)
                if rd not in seen:  # two grid points that resolve to one configuration run once
                    seen.add(rd)
                    yield preset, overrides, rd


def per_member(override: str) -> bool:
    """An override of a key the members of one ensemble may differ in besides the seed (a
    learning rate: ``rnnlab.ensemble.MEMBER_KEYS``)."""
    from .config import parse_override
    from .ensemble import member_key

    return member_key(".".join(parse_override(override)[0]))


def shared_overrides(overrides: list[str]) -> tuple[str, ...]:
    """``overrides`` without those of keys the members of one ensemble may differ in
    (:func:`per_member`): runs with equal shared overrides train as one ensemble."""
    return tuple(o for o in overrides if not per_member(o))


def _ensembles(todo: list, size: int, data_dir: str | None) -> list:
    """The runs of ``todo`` that differ only in their seed and learning rates (a grid of rates
    expanded into members, each at its own: ``rnnlab.ensemble.MEMBER_KEYS``), as ensemble jobs of
    at most ``size`` members (0: all): ``[(job, [(seed, run directory)...], {runs finished
    before})]``."""
    from .backends import job_for
    from .rundir import is_finished

    groups: dict[tuple, list] = {}
    for preset, ov, rd in todo:  # the seed is the last override (_jobs)
        shared = shared_overrides(ov[:-1])
        groups.setdefault((preset, shared), []).append((int(ov[-1].split("=", 1)[1]), Path(rd), list(ov[:-1])))
    out = []
    for (preset, shared), members in groups.items():
        step = size or len(members)
        for i in range(0, len(members), step):
            part = members[i : i + step]
            own = [m[2] for m in part]
            where = Path(os.path.commonpath([d.parent for _, d, _ in part]))  # the grid's folders: their parent
            job = job_for(preset, [*own[0], f"train.seed={part[0][0]}"], where, data_dir)
            job.overrides = list(shared) if any(o != own[0] for o in own) else own[0]
            job.label = f"{job.label} x{len(part)}"
            # each member's own overrides where they differ (its learning rate): as its single run resolves them
            job.extra["seeds"] = [
                [s, str(d.absolute()), o] if o != job.overrides else [s, str(d.absolute())] for s, d, o in part
            ]
            out.append((job, [(s, d) for s, d, _ in part], {d for _, d, _ in part if is_finished(d)}))
    return out


def run_suite(
    suite: Suite,
    runs_dir: str | Path = "runs",
    jobs: int = 1,
    overrides: list[str] | None = None,
    data_dir: str | None = None,
    log=print,
    statuses: dict | None = None,
    backend: str = "local",
    address: str | None = None,
    ensemble: bool | int | None = None,
) -> Path:
    """Run (or continue) every run of ``suite``; returns the suite's run directory. ``statuses``
    (a dict) receives {run directory: "done" | "trained" | "resumed" | "failed" | "busy" |
    "interrupted" | "cancelled"} as the runs end (also when Ctrl-C raises KeyboardInterrupt).
    ``backend="ray"`` runs each as a Ray task (``rnnlab.backends.ray``) on the cluster at
    ``address`` (default: a local Ray instance) instead of the local pool of ``jobs`` processes.
    ``ensemble`` (default: the suite's own ``ensemble``): the seeds of each configuration train
    as one batched model, one job (pool process or Ray task) per ensemble (true, or the most
    members per ensemble; :mod:`rnnlab.ensemble`); each member's status is read from its run
    directory."""
    from .backends import check_count, job_for, run_jobs

    check_count(jobs, "--jobs", "parallel runs")
    runs_dir = Path(runs_dir)
    todo = list(_jobs(suite, runs_dir, overrides or []))
    ensemble = suite.ensemble if ensemble is None else ensemble
    npoints = len(grid_points(suite.grid))
    grid = f" x {npoints} grid points" if suite.grid else ""
    where = (
        f"{jobs} parallel job(s), one thread each"
        if backend == "local"
        else "Ray " + (f"cluster at {address}" if address else "(local instance)")
    )
    seeds = f"{len(suite.seeds)} seeds" if not suite.seeds_of else "their seeds"
    log(f"suite {suite.name}: {len(todo)} runs ({len(suite.presets)} presets{grid} x {seeds}), {where}")
    statuses = {} if statuses is None else statuses

    groups: dict[int, tuple] = {}  # an ensemble job -> its members and those finished before
    if ensemble:
        size = 0 if ensemble is True else int(ensemble)
        log(f"  seeds of each configuration as one batched model (ensembles of {size or 'all'} members)")
        groups = {id(job): (job, part, done) for job, part, done in _ensembles(todo, size, data_dir)}

    def record(job, status: str, err: str) -> None:
        if id(job) not in groups:
            statuses[Path(job.run_dir)] = status
            return
        _, part, done = groups[id(job)]
        for _, rd in part:  # each member's status from its run directory
            if RunFiles(rd).has(RunFiles.RESULT):
                statuses[rd] = "done" if rd in done else "trained"
            else:
                statuses[rd] = status if status in ("interrupted", "cancelled") else "failed"

    run = [job for job, _, _ in groups.values()] if ensemble else [job_for(p, ov, rd, data_dir) for p, ov, rd in todo]
    run_jobs(run, backend, parallel=jobs, address=address, log=log, on_result=record)
    _analyze(suite, todo, statuses, data_dir, log)
    return runs_dir / suite.name


def _analyze(suite: Suite, todo: list, statuses: dict, data_dir: str | None, log) -> None:
    """The analysis records of the suite's ``[analyze]`` table, for each finished run that has
    none made since its result (a failed analysis marks its run failed)."""
    from .analysis.record import is_current, write_record

    for preset, _ov, rd in todo:
        rd = Path(rd)
        kind = suite.analyze.get(preset)
        if kind is None or not RunFiles(rd).has(RunFiles.RESULT) or is_current(rd):
            continue
        try:
            write_record(rd, kind, preset, f"rnnlab suite {suite.name}", data_dir)
            log(f"  [analysed] {rd} ({kind}: {RunFiles(rd).analysis})")
        except Exception as e:  # reported like a failed run; the run's own record stays
            statuses[rd] = "failed"
            log(f"  [failed] {rd}: the {kind} analysis: {type(e).__name__}: {e}")


def main_suite(
    name: str,
    runs_dir: str,
    jobs: int,
    overrides: list[str],
    data_dir: str | None,
    backend: str = "local",
    address: str | None = None,
    ensemble: bool | None = None,
    seeds: list[int] | None = None,
) -> int:
    """``rnnlab suite``: run (or continue) the suite and print its table. Ctrl-C cancels the
    queued runs, stops the running ones at their next checkpoint and exits 130; the same
    command continues. ``seeds``: only those of the suite's seeds (a stage)."""
    from . import rundir
    from .results import table

    suite = load_suite(name)
    if seeds is not None:
        suite = suite.only_seeds(seeds)
    statuses: dict[Path, str] = {}
    log = functools.partial(show_progress, logging.getLogger(__name__))  # hidden by -q, -qq
    try:
        out = run_suite(
            suite,
            runs_dir,
            jobs,
            overrides,
            data_dir,
            log=log,
            statuses=statuses,
            backend=backend,
            address=address,
            ensemble=ensemble,
        )
    except KeyboardInterrupt:
        stopped = sum(st == "interrupted" for st in statuses.values())
        finished = sum(st in ("done", "trained", "resumed") for st in statuses.values())
        print(
            f"rnnlab: interrupted: {finished} run(s) finished, {stopped} stopped (each resumes from its last "
            f"checkpoint), the others not started; rerun the same command to continue",
            file=sys.stderr,
        )
        return 130
    finished = [rd for rd in statuses if rundir.is_finished(rd)]  # this suite's runs only
    md = table(finished, suite.metrics or None) if finished else f"(no finished runs in {out})"
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(md + "\n")
    print(md)
    log(f"\nwrote {out / 'table.md'}")
    failed = sorted(str(rd) for rd, st in statuses.items() if st in ("failed", "busy"))
    if failed:
        print(
            f"rnnlab: error: {len(failed)} of {len(statuses)} runs of suite {suite.name} failed or were "
            f"busy (see above): {', '.join(failed)}; rerun the suite to retry them",
            file=sys.stderr,
        )
        return 1
    return 0
