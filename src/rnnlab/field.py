"""The field table: every cell of the library, the papers' and the modern ones, on the long-memory
tasks, the papers' and the field's, at matched parameter counts over seeds, at a stated budget
(docs/field.md).

``rnnlab field`` is ``rnnlab compare`` over the whole registry. Each task is one of
:data:`rnnlab.compare.TASKS` (:data:`FIELD_TASKS`): its home preset gives the task, the
optimizer and the parameter budget (the home model's count). Every cell is sized to that
budget with ``model.params`` on the home preset with the cell swapped in
(:func:`rnnlab.compare.sized_preset`; the home cell keeps its own preset). Each task is one
suite (:func:`rnnlab.suite.run_suite`): the cells with a batched path of their own train their
seeds as one ensemble, the others seed by seed, so an interrupted table continues where it
stopped. The budget (:data:`BUDGETS`: updates, batch, evaluation sizes per task) is far below
the papers': at the ``table`` budget the table ranks early learning, not final ability.

The record is one JSON file (:func:`build_record`): per run the test metric of the best
validation checkpoint, the parameter count and width, steps, wall time and configuration key,
with the budget, the commit and the versions; a (cell, task) that has no finished run carries
its reason. :func:`format_table` (torch-free: docs/field.md's block through
:mod:`rnnlab.bench.docsync`) and :func:`figure` read the record only.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import sys
import time
from pathlib import Path

from .config import ConfigError
from .runtime import show_progress

#: the tasks of the table, in its column order: the papers' long-memory tasks, then the field's
FIELD_TASKS = (
    "copy-T200",
    "copy-L1000",
    "adding",
    "temporal_order",
    "noisy_sequence",
    "psmnist",
    "selective_copy",
    "mqar",
    "induction",
    "listops",
)


def _steps(steps: int, batch: int, val: int, test: int) -> tuple[str, ...]:
    """A synthetic task's budget: ``steps`` updates of ``batch``, one evaluation at the end (its
    validation set only picks that checkpoint, so it is small; the test set gives the number)."""
    return (
        f"train.steps={steps}",
        f"train.batch_size={batch}",
        f"train.eval_every={steps}",
        "train.eval_batch_size=64",
        f"task.val_size={val}",
        f"task.test_size={test}",
    )


#: the budgets, per task: overrides of every run (the sequence lengths stay the papers').
#: ``table`` is the stated budget of the committed record, priced at about one CPU-hour on one
#: thread (docs/field.md); ``tiny`` is seconds per run, for tests that the table is well formed
#: (its numbers mean nothing)
BUDGETS: dict[str, dict[str, tuple[str, ...]]] = {
    "table": {
        "copy-T200": _steps(40, 16, 32, 256),
        "copy-L1000": _steps(20, 8, 16, 64),
        "adding": _steps(100, 32, 32, 512),
        "temporal_order": _steps(100, 32, 32, 512),
        "noisy_sequence": _steps(100, 32, 32, 512),
        "psmnist": (
            "train.steps=20",
            "train.batch_size=16",
            "train.eval_every=20",
            "train.eval_batch_size=64",
            "train.eval_max_batches=4",
        ),
        "selective_copy": _steps(20, 8, 32, 256),
        "mqar": _steps(20, 8, 32, 128),
        "induction": _steps(20, 8, 32, 256),
        "listops": _steps(20, 8, 16, 64),
    },
}
BUDGETS["tiny"] = {
    key: (
        "train.steps=2",
        "train.batch_size=2",
        "train.eval_every=2",
        "train.eval_batch_size=8",
        *(("train.eval_max_batches=1",) if key == "psmnist" else ("task.val_size=8", "task.test_size=8")),
    )
    for key in FIELD_TASKS
}

#: ``{budget: {(cell, task): price}}``: the points a budget leaves out because one of them alone would
#: cost more than about two CPU-minutes (a thirtieth of the table; ten typical points), with the
#: price measured when the budget was set (docs/field.md; cell ``"*"``: every cell of the task).
#: The record lists each with its price as the reason; ``--priced-out`` (``priced_out=True``)
#: trains them too
PRICED_OUT: dict[str, dict[tuple[str, str], str]] = {
    "tiny": {},
    "table": {
        ("*", "listops"): "about 45 CPU-minutes for the task at 20 updates of batch 8 (measured: lstm 104 CPU-s "
        "for its 3 seeds, lru 24 CPU-s; sequences of 500 to 2,000 tokens)",
        ("urnn", "copy-L1000"): "about 3 CPU-minutes (2.4 CPU-s a step of one seed at batch 2, width 948, T = 1,020)",
        ("urnn", "psmnist"): "about 5 CPU-minutes (3.6 CPU-s a step of one seed at batch 16, width 2,304)",
        ("eurnn", "psmnist"): "about 3 CPU-minutes (2.0 CPU-s a step of one seed at batch 16, width 2,658)",
        ("mingru", "psmnist"): "about 6 CPU-minutes (5 CPU-s a step of one seed at batch 16, width 2,469; its "
        "ensemble of 3 needs 11 GiB)",
        ("minlstm", "psmnist"): "not measured: priced as mingru, the same input-gated scan at width 2,160",
        ("mlstm", "psmnist"): "about 25 CPU-minutes (12.8 CPU-s a step of one seed at batch 16, width 1,920; 29 "
        "CPU-s to evaluate 64 images)",
    },
}

#: the record's format (a reader refuses another)
RECORD_VERSION = 1


def field_cells() -> list[str]:
    """Every cell of the built-in registry, in its order."""
    from .cells import CELLS

    return list(CELLS)


def _check_names(given, known, what: str, flag: str) -> list[str]:
    names = list(dict.fromkeys(known if given is None else given))
    if not names:
        raise ConfigError(f"{flag} names no {what}; give one or more of {', '.join(known)}, or leave it out for all")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown {what}(s) {unknown} for rnnlab field; expected some of {', '.join(known)}")
    return names


def write_presets(task, cells: list[str], budget: int, folder: Path) -> list[tuple[str, Path]]:
    """``[(cell, generated preset)]``: each cell on ``task``'s home preset sized to ``budget``."""
    from .compare import _slug, sized_preset

    return [
        (cell, sized_preset(task, task.preset, budget, folder, f"field-{task.key}-{_slug(cell)}", cell, "field"))
        for cell in cells
    ]


def _last_error(run_dir: Path) -> str:
    """The error of the last failed attempt at a run (its attempts.jsonl), or ''."""
    from .backends.base import ATTEMPTS_NAME

    try:
        lines = (Path(run_dir) / ATTEMPTS_NAME).read_text().splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("error"):
            return str(event["error"])[:300]
    return ""


def _run_task(
    task, cells, out: Path, budget: str, seeds, jobs, backend, address, data_dir, extra, log, priced_out=False
):
    """Train every cell on ``task``; returns (rows, missing, parameter budget)."""
    from . import config
    from .compare import budget_of

    params = budget_of(task, data_dir)
    overrides = [*BUDGETS[budget][task.key], *extra]
    made, missing = [], []
    priced = {} if priced_out else PRICED_OUT[budget]
    for cell in cells:
        price = priced.get((cell, task.key)) or priced.get(("*", task.key))
        if price:
            reason = f"priced out of the {budget} budget: {price}; `--priced-out` trains it"
            missing.append({"task": task.key, "cell": cell, "seeds": list(seeds), "reason": reason})
    cells = [c for c in cells if (c, task.key) not in priced and ("*", task.key) not in priced]
    for cell, path in write_presets(task, cells, params, out / "presets"):
        try:  # a cell the home preset cannot configure is a row with its reason, not a stopped table
            config.load(str(path), overrides)
            made.append((cell, path))
        except ConfigError as e:
            missing.append({"task": task.key, "cell": cell, "seeds": list(seeds), "reason": str(e).splitlines()[0]})
    log(f"{task.title}: {len(made)} cells of {params} parameters x {len(seeds)} seeds ({budget} budget)")
    where, errors = _train(task, [p for _, p in made], out, seeds, overrides, jobs, backend, address, data_dir, log)
    rows = []
    for cell, path in made:
        dirs, done, why = where.get(str(path), []), [], ""
        for seed, rd in zip(seeds, dirs, strict=True):
            value, result, bad = finished_value(rd, task.metric)
            if value is None:
                why = bad or why
                continue
            done.append(seed)
            rows.append(_row(task.key, cell, seed, value, result))
        if len(done) < len(seeds):
            reported = [errors.get(str(d)) or errors.get(str(d.parent)) for d in dirs]
            why = next((e for e in [*reported, *map(_last_error, dirs), why] if e), "") or "no finished run"
            missing.append(
                {"task": task.key, "cell": cell, "seeds": [s for s in seeds if s not in done], "reason": why}
            )
    return rows, missing, params


def finished_value(run_dir, metric: str) -> tuple[float | None, dict | None, str]:
    """A run's test ``metric`` from its result.json: ``(value, result, "")`` when it is a finite
    number, ``(None, None, "")`` without a readable result, ``(None, result, why)`` otherwise."""
    from .rundir import RunFiles

    try:
        result = json.loads(RunFiles(run_dir).result.read_text())
    except (OSError, ValueError):
        return None, None, ""
    value = result.get("test", {}).get(metric)
    if not (isinstance(value, (int, float)) and math.isfinite(value)):
        return None, result, f"its test {metric} is {value!r}"
    return value, result, ""


def _row(task: str, cell: str, seed: int, value: float, result: dict) -> dict:
    """One run of the record, from its result.json."""
    counts, git = result.get("params", {}), result.get("git") or {}
    return {
        "task": task,
        "cell": cell,
        "seed": seed,
        "value": value,
        "params": counts.get("free"),
        "hidden": counts.get("hidden_size"),
        "steps": result.get("steps"),
        "wall_s": round(float(result.get("wall_time_s", 0.0)), 2),
        "ensemble": result.get("conditions", {}).get("ensemble", 1),
        "config_key": result.get("config_key"),
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
    }


def _train(task, paths: list[Path], out: Path, seeds, overrides, jobs, backend, address, data_dir, log):
    """Train the presets ``paths`` over ``seeds`` as the suite ``field-<task>``: the cells with a
    batched path as ensembles, then the others (and an ensemble that did not finish: too big for
    the free memory) seed by seed. Returns ({preset: run directories in seed order}, {run
    directory (an ensemble's: its preset's): the error its job ended with})."""
    from .compare import _ensemble_ok
    from .rundir import RunFiles
    from .suite import Suite, _jobs, run_suite

    batched = [str(p) for p in paths if len(seeds) > 1 and _ensemble_ok([p])]
    single = [str(p) for p in paths if str(p) not in batched]
    where: dict[str, list[Path]] = {}
    errors: dict[str, str] = {}

    def noting(line: str) -> None:  # the backends report a failed job as "  [failed] RUN_DIR: error"
        head, _, err = line.strip().partition(": ")
        if head.startswith("[failed] ") and err:
            errors[head[len("[failed] ") :]] = err[:300]
        log(line)

    for ensemble in (True, False):
        presets = batched if ensemble else single
        if not presets:
            continue
        suite = Suite(name=f"field-{task.key}", presets=presets, seeds=list(seeds), set=overrides, ensemble=ensemble)
        run_suite(suite, out / "runs", jobs, [], data_dir, log=noting, backend=backend, address=address)
        for preset, _, rd in _jobs(suite, out / "runs", []):  # in seed order per preset
            where.setdefault(preset, []).append(Path(rd))
        if ensemble:
            retry = [p for p in presets if not all(RunFiles(d).result.exists() for d in where[p])]
            for p in retry:
                log(f"  {p}: its ensemble did not finish; its seeds one by one")
                del where[p]
            single = [*retry, *single]
    return where, errors


def build_record(rows, missing, tasks_info, cells, seeds, budget: str, command: str, priced_out: bool = False) -> dict:
    """The field table's record (see the module docstring)."""
    from .rundir import git_state, versions

    return {
        "kind": "rnnlab field table",
        "version": RECORD_VERSION,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": command,
        "budget": budget,
        "priced_out_trained": bool(priced_out),
        "seeds": list(seeds),
        "cells": list(cells),
        "tasks": tasks_info,
        "git": git_state(),
        "versions": versions(),
        "rows": rows,
        "missing": missing,
    }


def run_field(
    cells: list[str] | None = None,
    tasks: list[str] | None = None,
    budget: str = "table",
    seeds: list[int] | int = 3,
    out: str | Path | None = None,
    record: str | Path | None = None,
    figure_path: str | Path | None = None,
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    data_dir: str | None = None,
    overrides: list[str] | None = None,
    log=print,
    command: str = "",
    priced_out: bool = False,
) -> dict:
    """Train the table (or continue it) into ``out`` (default ``runs/field-<budget>``); write its
    record (default ``out/field-results.json``) and figure (default beside the record, ``.png``); return the
    record. A task whose data is absent is skipped: its cells are in ``missing`` with the reason."""
    from .backends import check_count
    from .compare import TASKS, _data_missing
    from .train import higher_is_better

    if budget not in BUDGETS:
        raise ConfigError(f"--budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seeds:
        raise ConfigError("rnnlab field needs at least one seed (e.g. --seeds 0-2)")
    cells = _check_names(cells, field_cells(), "cell", "--cells")
    tasks = _check_names(tasks, list(FIELD_TASKS), "task", "--tasks")
    check_count(jobs, "--jobs", "parallel runs")
    out = Path(out) if out else Path("runs") / f"field-{budget}"
    record = Path(record) if record else out / "field-results.json"
    figure_path = Path(figure_path) if figure_path else record.with_suffix(".png")
    rows, missing, info = [], [], {}
    for key in tasks:
        task = TASKS[key]
        info[key] = {
            "title": task.title,
            "preset": task.preset,
            "metric": task.metric,
            "higher": higher_is_better(task.metric),
            "overrides": [*BUDGETS[budget][key], *(overrides or [])],
        }
        absent = _data_missing(task, data_dir)
        if absent:
            reason = f"data absent ({absent}); `rnnlab data download {task.data}` and pass --data-dir"
            log(f"{key}: skipped, {reason}")
            missing += [{"task": key, "cell": c, "seeds": seeds, "reason": reason} for c in cells]
            continue
        cpu = _cpu_s()
        r, m, params = _run_task(
            task, cells, out, budget, seeds, jobs, backend, address, data_dir, overrides or [], log, priced_out
        )
        info[key]["cpu_s"] = round(_cpu_s() - cpu, 1)
        info[key]["params"] = params
        info[key]["baseline"] = _baseline(task, data_dir)
        rows += r
        missing += m
    rec = build_record(rows, missing, info, cells, seeds, budget, command, priced_out)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(rec, indent=0, separators=(",", ":")) + "\n")
    log(f"wrote {record}")
    if rows and figure(rec, figure_path):
        log(f"wrote {figure_path}")
    return rec


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (with ``--jobs`` > 1 a pool
    worker's time counts once it has exited)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _baseline(task, data_dir) -> float | None:
    """The memoryless baseline of ``task``'s metric (the task's own), or None."""
    from . import config
    from .tasks import build_task

    base = build_task(config.load(task.preset).task, data_dir).baseline()
    name = task.metric.split("/", 1)[1]
    for k in (task.metric, name, f"val/{name}"):
        if isinstance(base.get(k), (int, float)):
            return float(base[k])
    return None


# --- reading the record (torch-free) ---------------------------------------------------------


def cell_means(record: dict) -> dict[tuple[str, str], tuple[float, float, int]]:
    """``{(cell, task): (mean, sample std, runs)}`` over the seeds of each finished pair."""
    values: dict[tuple[str, str], list[float]] = {}
    for r in record["rows"]:
        if isinstance(r.get("value"), (int, float)) and math.isfinite(r["value"]):
            values.setdefault((r["cell"], r["task"]), []).append(float(r["value"]))
    out = {}
    for k, v in values.items():
        m = sum(v) / len(v)
        sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
        out[k] = (m, sd, len(v))
    return out


def ranks(record: dict) -> dict[tuple[str, str], int]:
    """``{(cell, task): rank}`` of each cell's mean among the task's cells: 1 + the number of cells
    with a better mean (1 = best; equal means share a rank)."""
    means = cell_means(record)
    out = {}
    for task, info in record["tasks"].items():
        sign = -1.0 if info["higher"] else 1.0
        scores = {c: sign * m[0] for (c, t), m in means.items() if t == task}
        for c, v in scores.items():
            out[(c, task)] = 1 + sum(w < v for w in scores.values())
    return out


def _fmt(x: float) -> str:
    return f"{x:.3f}" if 1e-2 <= abs(x) < 1e3 or x == 0 else f"{x:.2e}"


def format_table(record: dict, source: str = "") -> str:
    """The table as Markdown: a row per cell (mean over seeds of each task's test metric, marked
    ``*`` where no better than the memoryless baseline, its rank on the task in brackets; the mean
    rank), the memoryless baselines and the budget."""
    means, rank = cell_means(record), ranks(record)
    tasks = list(record["tasks"])
    head = (
        "| cell | "
        + " | ".join(f"{t} ({record['tasks'][t]['metric'].split('/')[1]})" for t in tasks)
        + " | mean rank |"
    )
    lines = [head, "|---" * (len(tasks) + 2) + "|"]
    order = []
    for cell in record["cells"]:
        rs = [rank[(cell, t)] for t in tasks if (cell, t) in rank]
        order.append((sum(rs) / len(rs) if rs else math.inf, cell))
    for mean_rank, cell in sorted(order):
        cols = []
        for t in tasks:
            m = means.get((cell, t))
            mark = "" if m is None or _beats_baseline(m[0], record["tasks"][t]) else "*"
            cols.append(f"{_fmt(m[0])}{mark} ({rank[(cell, t)]})" if m else "-")
        lines.append(
            f"| {cell} | " + " | ".join(cols) + f" | {mean_rank:.1f} |"
            if math.isfinite(mean_rank)
            else f"| {cell} | " + " | ".join(cols) + " | - |"
        )
    base = [record["tasks"][t].get("baseline") for t in tasks]
    lines.append("| memoryless baseline | " + " | ".join(_fmt(b) if b is not None else "-" for b in base) + " | |")
    seeds = len(record["seeds"])
    where = f"`{source}`: " if source else ""
    wall = sum(r["wall_s"] for r in _ensemble_once(record["rows"]))
    cpu = sum(info.get("cpu_s", 0.0) for info in record["tasks"].values())
    git = record.get("git") or {}
    commit = (git.get("commit") or "?")[:10] + (" (dirty tree)" if git.get("dirty") else "")
    if record.get("parts"):  # a merged record: the commit of each part's runs
        commit = "; ".join(
            f"{', '.join(p['tasks'])} from {(p.get('commit') or '?')[:10]}" for p in record["parts"] if p["tasks"]
        )
    caption = (
        f"*{where}every cell of the library on each task's home preset with the cell swapped in, sized to the "
        f"home model's parameter count (model.params), test metric of the best validation checkpoint, mean over "
        f"{seeds} seed(s) and the rank among the cells (1 = best); budget `{record['budget']}` (below), "
        f"{cpu / 60:.0f} CPU-minutes measured ({wall / 60:.0f} minutes of training wall time); commit {commit}, "
        f"{record['date']}. At this budget the table ranks early learning, not final ability.*"
    )
    cost = ["| task | home preset | params | budget (every run) | CPU-minutes |", "|---|---|---|---|---|"]
    for t in tasks:
        info = record["tasks"][t]
        spent = f"{info['cpu_s'] / 60:.1f}" if "cpu_s" in info else "skipped"
        cost.append(
            f"| {t} | `{info['preset']}` | {info.get('params', '-')} | {' '.join(info['overrides'])} | {spent} |"
        )
    out = [caption, "", *lines, "", "\\* no better than the task's memoryless baseline.", "", *cost]
    if record["missing"]:
        out.append("")
        groups: dict[str, list[str]] = {}
        for m in record["missing"]:
            groups.setdefault(m["reason"], []).append(f"{m['cell']}/{m['task']}")
        for reason, pairs in groups.items():
            shown = ", ".join(pairs[:8]) + (f" and {len(pairs) - 8} more" if len(pairs) > 8 else "")
            out.append(f"* without a finished run: {shown}: {reason}")
    return "\n".join(out)


def _beats_baseline(value: float, info: dict) -> bool:
    """Whether ``value`` is better than the task's memoryless baseline (True where it has none)."""
    base = info.get("baseline")
    if base is None:
        return True
    return value > base if info["higher"] else value < base


def budget_markdown(budget: str = "table") -> str:
    """The budget as docs/field.md states it: per task its home preset, metric and overrides."""
    from .compare import TASKS

    lines = ["| task | home preset (task, optimizer, parameter count) | metric | every run |", "|---|---|---|---|"]
    for key in FIELD_TASKS:
        t = TASKS[key]
        lines.append(f"| {key} | `{t.preset}` | {t.metric} | {' '.join(BUDGETS[budget][key])} |")
    priced = [
        f"* {'every cell' if cell == '*' else f'`{cell}`'} on {task}: {price}"
        for (cell, task), price in PRICED_OUT[budget].items()
    ]
    if priced:
        lines += ["", "Priced out of this budget (`--priced-out` trains them too):", "", *priced]
    return "\n".join(lines)


def _ensemble_once(rows: list[dict]) -> list[dict]:
    """The rows with an ensemble's shared wall time counted once."""
    seen, out = set(), []
    for r in rows:
        key = (r["task"], r["cell"]) if r.get("ensemble", 1) > 1 else id(r)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def check_record(record: dict, cells: list[str], tasks=FIELD_TASKS) -> list[str]:
    """What the record lacks against the registry: every (cell, task) has a finished run of
    every seed or a reason, each row a value, and no cell or task the registry does not know."""
    problems = []
    if record.get("kind") != "rnnlab field table" or record.get("version") != RECORD_VERSION:
        return [f"not a field-table record of version {RECORD_VERSION}"]
    if set(record["cells"]) != set(cells):
        problems.append(
            f"cells differ from the registry: missing {sorted(set(cells) - set(record['cells']))}, "
            f"unknown {sorted(set(record['cells']) - set(cells))}"
        )
    if list(record["tasks"]) != list(tasks):
        problems.append(f"tasks {list(record['tasks'])}, expected {list(tasks)}")
    seeds = set(record["seeds"])
    done: dict[tuple[str, str], set] = {}
    for r in record["rows"]:
        if not isinstance(r.get("value"), (int, float)):
            problems.append(
                f"{r['cell']}/{r['task']} seed {r['seed']}: no value of {record['tasks'][r['task']]['metric']}"
            )
        done.setdefault((r["cell"], r["task"]), set()).add(r["seed"])
    explained = {(m["cell"], m["task"]) for m in record["missing"] if m.get("reason")}
    for c in cells:
        for t in tasks:
            if done.get((c, t), set()) != seeds and (c, t) not in explained:
                problems.append(f"{c}/{t}: seeds {sorted(done.get((c, t), set()))} of {sorted(seeds)} and no reason")
    return problems


def figure(record: dict, path: str | Path) -> Path | None:
    """A heat map of the ranks (cells x tasks), each cell annotated with its mean; a small PNG."""
    from .plots import pyplot, save_figure

    plt = pyplot()

    means, rank = cell_means(record), ranks(record)
    tasks, cells = list(record["tasks"]), list(record["cells"])
    if not rank:
        return None
    order = sorted(
        cells,
        key=lambda c: (lambda rs: sum(rs) / len(rs) if rs else math.inf)(
            [rank[(c, t)] for t in tasks if (c, t) in rank]
        ),
    )
    grid = [[rank.get((c, t), math.nan) for t in tasks] for c in order]
    fig, ax = plt.subplots(figsize=(1.1 * len(tasks) + 2, 0.28 * len(cells) + 1.6))
    im = ax.imshow(grid, cmap="RdYlGn_r", aspect="auto")
    ax.set_xticks(range(len(tasks)), tasks, rotation=35, ha="right", fontsize=7)
    ax.set_yticks(range(len(order)), order, fontsize=7)
    for i, c in enumerate(order):
        for j, t in enumerate(tasks):
            m = means.get((c, t))
            ax.text(j, i, _fmt(m[0]) if m else "-", ha="center", va="center", fontsize=5, color="k")
    fig.colorbar(im, ax=ax, label="rank on the task (1 = best)", shrink=0.6)
    ax.set_title(f"rnnlab field table, budget {record['budget']}: early learning, not final ability", fontsize=8)
    return save_figure(fig, path, dpi=90)


def merge_records(records: list[dict], command: str = "") -> dict:
    """One record from the records of parts of the table (the same budget and seeds): each task is
    taken, with its rows, its points without a finished run and its CPU time, from the last record
    that holds it; the tasks in the table's column order. Nothing is trained. The merged record
    lists the parts (their commands, commits and dates) in ``parts``."""
    if not records:
        raise ConfigError("rnnlab field --merge needs one or more records, e.g. --merge a.json b.json")
    for rec in records:
        if rec.get("kind") != "rnnlab field table" or rec.get("version") != RECORD_VERSION:
            raise ConfigError(f"--merge takes field-table records of version {RECORD_VERSION}; one is not")
    first = records[0]
    for rec in records[1:]:
        for key in ("budget", "seeds"):
            if rec[key] != first[key]:
                raise ConfigError(
                    f"--merge: the records differ in {key} ({first[key]!r} and {rec[key]!r}); merge only parts "
                    f"of one table (the same --budget and --seeds)"
                )
    owner = {t: i for i, rec in enumerate(records) for t in rec["tasks"]}
    tasks = [t for t in FIELD_TASKS if t in owner] + [t for t in owner if t not in FIELD_TASKS]
    cells = list(dict.fromkeys(c for rec in records for c in rec["cells"]))
    merged = dict(first)
    merged.update(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        command=command or "rnnlab field --merge",
        cells=cells,
        tasks={t: records[owner[t]]["tasks"][t] for t in tasks},
        rows=[r for t in tasks for r in records[owner[t]]["rows"] if r["task"] == t],
        missing=[m for t in tasks for m in records[owner[t]]["missing"] if m["task"] == t],
        priced_out_trained=any(records[i].get("priced_out_trained", False) for i in set(owner.values())),
        parts=[
            {
                "command": rec.get("command"),
                "date": rec.get("date"),
                "commit": (rec.get("git") or {}).get("commit"),
                "tasks": [t for t in tasks if owner[t] == i],
            }
            for i, rec in enumerate(records)
        ],
    )
    for t in tasks:  # which of the parts trained the task's priced-out points
        merged["tasks"][t] = {
            **merged["tasks"][t],
            "priced_out_trained": records[owner[t]].get("priced_out_trained", False),
        }
    return merged


def _merge_main(paths, record, figure_path, command: str) -> dict:
    """``rnnlab field --merge A.json B.json ... --record OUT``."""
    recs = []
    for p in paths:
        try:
            recs.append(json.loads(Path(p).read_text()))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--merge: cannot read the field record {p}: {e}") from e
    rec = merge_records(recs, command)
    record = Path(record) if record else Path("field-results.json")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(rec, indent=0, separators=(",", ":")) + "\n")
    if rec["rows"]:
        figure(rec, Path(figure_path) if figure_path else record.with_suffix(".png"))
    return rec


def main_field(merge=None, **kwargs) -> int:
    """``rnnlab field``: train (or continue) the table, write its record and figure, print it;
    exit 1 when a (cell, task) has no finished run and no reason the record gives. With ``merge``
    (record paths), write one record from those parts instead and train nothing."""
    log = functools.partial(show_progress, logging.getLogger(__name__))  # hidden by -q, -qq
    command = "rnnlab " + " ".join(sys.argv[1:]) if sys.argv and "field" in sys.argv else "rnnlab field"
    if merge:
        rec = _merge_main(merge, kwargs.get("record"), kwargs.get("figure_path"), command)
        print(format_table(rec))
        return 0
    try:
        rec = run_field(log=log, command=command, **kwargs)
    except KeyboardInterrupt:
        print(
            "rnnlab: interrupted: finished runs are kept and stopped ones resume from their last checkpoint; "
            "rerun the same rnnlab field command to continue",
            file=sys.stderr,
        )
        return 130
    print(format_table(rec))
    return 0
