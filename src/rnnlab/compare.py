"""``rnnlab compare CELL``: a cell against the papers' strongest baselines on the long-memory
tasks, at matched parameter counts, over seeds; one table and one figure per task
(docs/own-cell.md).

Each task is a paper's experiment (:data:`TASKS`): its preset (the *home* preset) gives the
task, the optimizer and the parameter budget (the home model's count, counted as the papers
count). The baselines are read from the ledger's published rows of that experiment
(:mod:`rnnlab.ledger.published`): where the paper prints numbers, the row that scored best;
where it only draws curves, the paper's own cell; and the LSTM row where the experiment has
one. Every baseline runs its own preset (its own learning rates), every model is sized to
the budget with ``model.params``, and the cell under test runs the home preset with its cell
swapped in. The runs go through :func:`rnnlab.suite.run_suite` (local processes or Ray, the
seeds of a configuration as one batched model where the cells allow), so an interrupted
comparison continues where it stopped.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .config import ConfigError
from .runtime import show_progress

#: the budgets: ``quick`` caps each run (a few CPU-minutes a task), ``paper`` uses the presets'
BUDGETS = ("quick", "paper")


@dataclass(frozen=True)
class CompareTask:
    """One experiment of a paper, as ``rnnlab compare`` runs it."""

    key: str
    title: str
    preset: str  # the home preset: task, optimizer, parameter budget
    paper: str  # the ledger rows the baselines come from: paper and table
    table: str
    metric: str  # the table's metric (a test metric)
    quick: tuple[str, ...] = ()  # overrides at the quick budget
    ledger_task: str = ""  # the ledger rows' task, and the start of their setting ("" = any)
    ledger_size: str = ""
    data: str = ""  # the dataset the task reads ("" = generated)


_QUICK_SYNTH = ("train.eval_every=50", "task.val_size=256", "task.test_size=512")

#: the long-memory tasks, in the table's order
TASKS: dict[str, CompareTask] = {
    t.key: t
    for t in (
        CompareTask(
            "copy-T200",
            "copy, T = 200 (nnRNN)",
            "nnrnn/copy",
            "nnrnn",
            "Fig. 2",
            "test/loss",
            ("train.steps=300", *_QUICK_SYNTH),
            ledger_task="copy",
        ),
        CompareTask(
            "copy-L1000",
            "copy, L = 1000 (asRNN)",
            "asrnn/copy-L1000",
            "asrnn",
            "Fig. 2",
            "test/loss",
            ("train.steps=60", "train.batch_size=32", "train.eval_every=20", "task.val_size=128", "task.test_size=256"),
            ledger_task="copy",
        ),
        CompareTask(
            "adding",
            "adding, L = 100 (DMU)",
            "dmu/adding-dmu",
            "dmu",
            "Fig. 3",
            "test/loss",
            ("train.steps=600", *_QUICK_SYNTH),
        ),
        CompareTask(
            "temporal_order",
            "temporal order, L = 100 (DMU)",
            "dmu/temporal_order-dmu",
            "dmu",
            "Fig. 4",
            "test/accuracy",
            ("train.steps=600", *_QUICK_SYNTH),
        ),
        CompareTask(
            "noisy_sequence",
            "noisy sequence, L = 100 (DMU)",
            "dmu/noisy_sequence-dmu",
            "dmu",
            "Fig. 5",
            "test/accuracy",
            ("train.steps=600", *_QUICK_SYNTH),
        ),
        CompareTask(
            "psmnist",
            "psMNIST, N = 128 (DMU Table IV)",
            "dmu/psmnist-N128",
            "dmu",
            "Table IV",
            "test/accuracy",
            ("train.steps=200", "train.eval_every=100", "train.eval_max_batches=4"),
            ledger_task="psMNIST",
            data="mnist",
        ),
        CompareTask(
            "ptb_char",
            "PTB characters, T = 150 (asRNN Table 1)",
            "asrnn/ptb_char-bptt150",
            "asrnn",
            "Table 1",
            "test/bpc",
            ("train.steps=100", "train.eval_every=50", "train.eval_max_batches=4"),
            ledger_task="PTB-c",
            ledger_size="T=150",
            data="ptb",
        ),
        # the memory tasks the field now uses (docs/tasks.md): no paper's table in the ledger, so the
        # home preset is the LSTM's and its parameter count the budget
        CompareTask(
            "selective_copy",
            "selective copying, L = 256 (Mamba)",
            "field/selective_copy-lstm",
            "",
            "",
            "test/accuracy",
            ("train.steps=200", "train.batch_size=16", *_QUICK_SYNTH),
        ),
        CompareTask(
            "mqar",
            "multi-query associative recall, T = 64 (Zoology)",
            "field/mqar-lstm",
            "",
            "",
            "test/accuracy",
            ("train.steps=200", "train.batch_size=16", *_QUICK_SYNTH),
        ),
        CompareTask(
            "induction",
            "induction heads, T = 256",
            "field/induction-lstm",
            "",
            "",
            "test/accuracy",
            ("train.steps=200", "train.batch_size=16", *_QUICK_SYNTH),
        ),
        CompareTask(
            "listops",
            "ListOps, lengths 500-2000 (LRA)",
            "field/listops-lstm",
            "",
            "",
            "test/accuracy",
            ("train.steps=30", "train.batch_size=8", "train.eval_every=15", "task.val_size=64", "task.test_size=128"),
        ),
    )
}

#: the field's modern long-memory cells (docs/ssm.md, docs/models.md): ``rnnlab compare --modern``
#: adds them to every task's baselines, each on the home preset with its cell swapped in
MODERN_CELLS = ("lru", "s4d", "mamba", "mingru", "minlstm", "slstm", "mlstm")


def _higher(metric: str) -> bool:
    from .train import higher_is_better

    return higher_is_better(metric)


def _rows(task: CompareTask) -> list:
    from .ledger.published import ROWS

    return [
        r
        for r in ROWS
        if r.paper == task.paper
        and r.table == task.table
        and r.presets
        and r.task == (task.ledger_task or task.key)
        and r.size.startswith(task.ledger_size)
    ]


def baselines(task: CompareTask) -> list[str]:
    """The baseline presets of ``task`` from the ledger: the best published row (or, for a
    figure of curves, the paper's own cell: the home preset) and the LSTM row if any."""
    rows = _rows(task)
    valued = [r for r in rows if r.value is not None and r.metric == task.metric and r.presets[0]]
    if valued:
        best = (max if _higher(task.metric) else min)(valued, key=lambda r: r.value)
        chosen = [best.presets[0]]
        own = next((r for r in rows if r.presets[0] == task.preset), None)
        if own is not None and task.preset not in chosen:
            chosen.append(task.preset)
    else:
        chosen = [task.preset]
    lstm = next((r.presets[0] for r in rows if r.model.lower().startswith("lstm")), None)
    if lstm and lstm not in chosen:
        chosen.append(lstm)
    return chosen


def published(task: CompareTask, preset: str) -> str:
    """The ledger's number for ``preset`` in ``task``'s table, as ``"0.963 (DMU Table IV)"``."""
    for r in _rows(task):
        if r.presets[0] == preset and r.value is not None and r.metric == task.metric:
            spread = f" +- {r.spread:.3g}" if r.spread is not None else ""
            return f"{r.value:.4g}{spread} ({task.paper} {task.table})"
    return "-"


def _slug(text: str) -> str:
    """A name part for ``text`` (a cell key or path: its last path component)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text.rsplit("/", 1)[-1]).strip("-")[:40] or "cell"


def _preset_data(preset: str) -> dict:
    from . import config

    return config.tomllib.loads(config.preset_path(preset).read_text(encoding="utf-8"))


def budget_of(task: CompareTask, data_dir: str | None = None) -> int:
    """The home preset's free parameter count: the budget every model of ``task`` is sized to."""
    from . import config
    from .model import build_model
    from .tasks import build_task

    cfg = config.load(task.preset)
    return int(build_model(cfg.model, build_task(cfg.task, data_dir)).parameter_counts()["free"])


def swapped_data(preset: str, budget: int, cell: str | None = None) -> dict:
    """``preset``'s TOML data sized to ``budget`` parameters (``model.params``); with ``cell``, that
    cell swapped in (its options and parameter-group rates cleared: the home preset's cell and
    optimizer settings belong to that cell)."""
    data = _preset_data(preset)
    model = dict(data.get("model", {}))
    model.pop("hidden_size", None)
    model["params"] = budget
    if cell is not None and cell != model.get("cell"):
        model["cell"] = cell
        model.pop("cell_options", None)
        optim = dict(data.get("optim", {}))
        optim.pop("group_lr", None)
        optim.pop("group_weight_decay", None)
        data["optim"] = optim
    data["model"] = model
    return data


def write_preset_data(data: dict, folder: Path, name: str, description: str) -> Path:
    """Write preset ``data`` named ``name`` with ``description`` as ``folder/name.toml``."""
    from .config import dump_toml

    data["name"] = name
    data["description"] = description
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(dump_toml(data), encoding="utf-8")
    return path


def sized_preset(
    task: CompareTask, preset: str, budget: int, folder: Path, name: str, cell: str | None = None, what: str = "compare"
) -> Path:
    """Write ``preset`` sized to ``budget`` parameters as ``folder/name.toml``, with ``cell``
    swapped in (:func:`swapped_data`)."""
    data = swapped_data(preset, budget, cell)
    label = data["model"].get("cell", preset)
    data.pop("paper", None)
    description = f"rnnlab {what}: {label} on {task.title}, sized to {budget} parameters ({preset})"
    return write_preset_data(data, folder, name, description)


def write_presets(
    task: CompareTask, cell: str, budget: int, folder: Path, modern: bool = False
) -> list[tuple[str, str, Path]]:
    """``[(label, source preset, generated preset file)]``: the cell under test (the home preset
    with the cell swapped in, its options and parameter-group rates cleared), each baseline
    (its own preset) and with ``modern`` each of :data:`MODERN_CELLS` (the home preset with
    that cell swapped in), all sized to ``budget``."""
    out = [(cell, task.preset, sized_preset(task, task.preset, budget, folder, f"{task.key}-{_slug(cell)}", cell=cell))]
    labels = {cell}
    for preset in baselines(task):
        label = _preset_data(preset).get("model", {}).get("cell", preset)
        labels.add(label)
        out.append((label, preset, sized_preset(task, preset, budget, folder, f"{task.key}-baseline-{_slug(label)}")))
    for m in MODERN_CELLS if modern else ():
        if m not in labels:  # the cell under test or a baseline already
            path = sized_preset(task, task.preset, budget, folder, f"{task.key}-baseline-{m}", cell=m)
            out.append((m, task.preset, path))
    return out


def _data_missing(task: CompareTask, data_dir: str | None) -> str | None:
    if not task.data:
        return None
    from . import config
    from .tasks import build_task
    from .tasks.data import DataError

    try:
        build_task(config.load(task.preset).task, data_dir)
    except DataError as e:
        return str(e).splitlines()[0]
    return None


def _ensemble_ok(paths: list[Path]) -> bool:
    """Whether every model of a task trains its seeds as one batched model by default: each can
    (no dropout, no encoder-decoder) and each cell has a batched path of its own
    (:meth:`rnnlab.cells.base.Cell.batched_sequence`). A cell without one runs its reference
    step loop under vmap, correct but slower than its seeds one after another (asRNN on copy
    L=1000, 60 steps of batch 32: three seeds batched took 41 minutes on a loaded machine,
    where the single run's record gives 0.63 s a step, about 2 minutes for the three)."""
    from . import config
    from .cells import CELLS
    from .cells.base import batched_path
    from .tasks import TASKS as T

    for p in paths:
        cfg = config.load(str(p))
        if cfg.model.dropout > 0 or getattr(T[cfg.task.name], "model_kind", "") == "seq2seq":
            return False
        if batched_path(CELLS[cfg.model.cell]) == "reference":
            return False
    return True


@dataclass
class Row:
    task: str
    label: str
    preset: str
    metric: str
    values: list[float]
    params: int | None
    width: int | None
    wall_s: float
    published: str
    run_dirs: list[Path]


def _results(run_dirs: list[Path]) -> list[dict]:
    from .rundir import RunFiles

    out = []
    for rd in run_dirs:
        try:
            out.append(RunFiles(rd).read_result())
        except (OSError, ValueError):
            continue
    return out


def _wall(results: list[dict]) -> float:
    """The wall time the seeds took: an ensemble's members share one (counted once)."""
    single = sum(r.get("wall_time_s", 0.0) for r in results if r.get("conditions", {}).get("ensemble", 1) == 1)
    batched = {r.get("wall_time_s", 0.0) for r in results if r.get("conditions", {}).get("ensemble", 1) > 1}
    return single + sum(batched)


def run_task(
    task: CompareTask,
    cell: str,
    out: Path,
    budget: str,
    seeds: list[int],
    jobs: int,
    backend: str,
    address: str | None,
    data_dir: str | None,
    overrides: list[str],
    ensemble: bool | None,
    log=print,
    modern: bool = False,
) -> list[Row]:
    """Train ``cell`` and the baselines of ``task`` (see the module docstring; ``modern``: the
    modern cells too); one row each."""
    from .rundir import RunFiles
    from .suite import Suite, _jobs, run_suite

    params = budget_of(task, data_dir)
    made = write_presets(task, cell, params, out / "presets", modern)
    ledgered = set(baselines(task))
    paths = [p for _, _, p in made]
    use_ensemble = _ensemble_ok(paths) and len(seeds) > 1 if ensemble is None else ensemble
    suite = Suite(
        name=f"compare-{task.key}",
        presets=[str(p) for p in paths],
        seeds=list(seeds),
        set=[*(task.quick if budget == "quick" else ()), *overrides],
        ensemble=use_ensemble,
    )
    log(f"{task.title}: {len(made)} models of {params} parameters x {len(seeds)} seeds ({budget} budget)")
    run_suite(suite, out / "runs", jobs, [], data_dir, log=log, backend=backend, address=address)
    where: dict[str, list[Path]] = {}
    for preset, _, rd in _jobs(suite, out / "runs", []):  # the suite's own run directories
        where.setdefault(preset, []).append(Path(rd))
    rows = []
    for label, preset, path in made:
        dirs = [d for d in where.get(str(path), []) if RunFiles(d).has(RunFiles.RESULT)]
        results = _results(dirs)
        counts = results[0]["params"] if results else {}
        rows.append(
            Row(
                task.key,
                label,
                preset,
                task.metric,
                [r["test"][task.metric] for r in results if task.metric in r.get("test", {})],
                counts.get("free"),
                counts.get("hidden_size"),
                _wall(results),
                published(task, preset) if label != cell and preset in ledgered else "-",
                dirs,
            )
        )
    return rows


def table(rows: list[Row], caption: str) -> str:
    """The comparison as Markdown: one row per (task, model), mean +- std over seeds."""
    from .results import mean_std

    lines = [
        caption,
        "",
        "| task | model | params (width) | metric | mean +- std | seeds | wall time (s) | published |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.values:
            m, s = mean_std(r.values)
            value = f"{m:.4g} +- {s:.2g}"
        else:
            value = "no finished run"
        size = f"{r.params:,} ({r.width})" if r.params is not None else "-"
        lines.append(
            f"| {r.task} | {r.label} | {size} | {r.metric} | {value} | {len(r.values)} | {r.wall_s:.0f} | {r.published} |"
        )
    return "\n".join(lines)


def figure(task: CompareTask, rows: list[Row], path: Path) -> Path | None:
    """The validation curves of every run of ``task`` (the project's plot of curves)."""
    from .plots import plot_curves

    dirs, labels = [], []
    for r in rows:
        for d in r.run_dirs:
            dirs.append(d)
            labels.append(f"{r.label} {d.name}")
    if not dirs:
        return None
    metric = "val/" + task.metric.split("/", 1)[1]
    logy = not _higher(task.metric)
    return plot_curves(dirs, path, metric=metric, logy=logy, title=f"{task.title}: {metric}", labels=labels)


def caption(
    cell: str, budget: str, tasks: list[CompareTask], seeds: int, overrides: list[str] = (), modern: bool = False
) -> str:
    if budget == "quick":
        what = (
            "quick budget: a few CPU-minutes per task (each run capped: "
            + "; ".join(f"{t.key} {' '.join(o for o in t.quick if 'steps' in o)}" for t in tasks)
            + "); far below the papers' budgets, so the numbers are not comparable with the published ones"
        )
    else:
        what = "paper budget: the presets' own steps and batch sizes"
    if overrides:
        what += f"; every run also with {' '.join(overrides)}"
    against = "the papers' baselines and the modern cells" if modern else "the papers' baselines"
    if modern:
        what += f"; the modern cells ({', '.join(MODERN_CELLS)}) run the home preset with their cell swapped in"
    return (
        f"**{cell} against {against}** at matched parameter counts (model.params = the home "
        f"preset's count), {seeds} seed(s) per model, test metric of the best validation checkpoint; {what}."
    )


def compare(
    cell: str,
    tasks: list[str] | None = None,
    budget: str = "quick",
    seeds: list[int] | int = 3,
    out: str | Path | None = None,
    runs_dir: str | Path = "runs",
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    data_dir: str | None = None,
    overrides: list[str] | None = None,
    ensemble: bool | None = None,
    log=print,
    modern: bool = False,
) -> Path:
    """Run the comparison (``seeds``: a list of seeds, or a count n for seeds 0..n-1); write ``table.md``, ``results.json`` and ``<task>.png`` into ``out``
    (default ``RUNS_DIR/compare-<cell>``) and return it. A task whose data is absent is skipped
    with a message."""
    from .backends import check_count
    from .cells import CELLS

    if budget not in BUDGETS:
        raise ConfigError(f"--budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seeds:
        raise ConfigError("rnnlab compare needs at least one seed (e.g. --seeds 0-2)")
    if tasks is not None and not list(tasks):
        raise ConfigError(
            f"--tasks names no task; give one or more of {', '.join(TASKS)} (e.g. --tasks adding,copy-T200), "
            f"or leave --tasks out for all of them"
        )
    keys = list(dict.fromkeys(TASKS if tasks is None else tasks))  # each task once, in the order given
    check_count(jobs, "--jobs", "parallel runs")  # before anything is written
    unknown = [k for k in keys if k not in TASKS]
    if unknown:
        raise ConfigError(f"unknown task(s) {unknown} for rnnlab compare; expected some of {', '.join(TASKS)}")
    try:
        CELLS.resolve(cell)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    out = Path(out) if out else Path(runs_dir) / f"compare-{_slug(cell)}"
    out.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    ran: list[CompareTask] = []
    skipped: list[str] = []
    for key in keys:
        task = TASKS[key]
        missing = _data_missing(task, data_dir)
        if missing:
            skipped.append(f"{key}: skipped, its data is absent ({missing}); `rnnlab data download {task.data}`")
            log(skipped[-1])
            continue
        task_rows = run_task(
            task,
            cell,
            out,
            budget,
            seeds,
            jobs,
            backend,
            address,
            data_dir,
            overrides or [],
            ensemble,
            log,
            modern,
        )
        rows += task_rows
        ran.append(task)
        fig = figure(task, task_rows, out / f"{key}.png")
        if fig:
            log(f"wrote {fig}")
    text = table(rows, caption(cell, budget, ran, len(seeds), overrides or [], modern))
    if skipped:
        text += "\n\n" + "\n".join(f"* {s}" for s in skipped)
    (out / "table.md").write_text(text + "\n", encoding="utf-8")
    record = [{**r.__dict__, "run_dirs": [str(d) for d in r.run_dirs]} for r in rows]
    (out / "results.json").write_text(
        json.dumps({"cell": cell, "budget": budget, "modern": modern, "rows": record}, indent=2) + "\n"
    )
    return out


def main_compare(**kwargs) -> int:
    """``rnnlab compare``: print the table; exit 1 when a model has no finished run."""
    log = functools.partial(show_progress, logging.getLogger(__name__))  # hidden by -q, -qq
    try:
        out = compare(log=log, **kwargs)
    except KeyboardInterrupt:
        print(
            "rnnlab: interrupted: finished runs are kept and stopped ones resume from their last checkpoint; "
            "rerun the same rnnlab compare command to continue",
            file=sys.stderr,
        )
        return 130
    text = (out / "table.md").read_text()
    print(text, end="")
    log(f"\nwrote {out / 'table.md'}")
    return 1 if "no finished run" in text else 0
