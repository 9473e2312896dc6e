"""Tables from run directories (``result.json`` files), mean +- std over seeds, next to the
memoryless baseline and the paper's published number.

Runs are grouped by run name *and* configuration key (``rundir.config_key``: the resolved
configuration, seed aside), so runs that differ in anything but the seed never share a row;
rows of one name with different keys are labelled with the keys that differ. A run resumed in
another precision (``precision_segments`` in its result.json) is a mixed-precision run: it
gets a row of its own, labelled with its segments. A seed that appears twice in one group
counts once. Unreadable files are skipped with a note naming them.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

from .rundir import NoSuchPath, RunFiles, differences, read_jsonl, read_stored, saved_config, saved_key

log = logging.getLogger(__name__)


class UnknownMetric(ValueError):
    """A metric no run has; the message lists the ones that exist."""


def _note(msg: str) -> None:
    log.warning(msg)


def find_results(runs_dir: str | Path | list, notes: list[str] | None = None, diverged: bool = False) -> list[dict]:
    """Every ``result.json`` below ``runs_dir`` (a folder or a list of run folders; with
    ``diverged``, also the ``diverged.json`` of runs stopped by divergence: ``RunFiles.outcomes``), with its
    directory under ``"run_dir"``, its configuration under ``"config"`` and the configuration
    key under ``"config_key"`` (None without a readable ``config.json``). Unreadable
    ``result.json`` files are skipped and named in ``notes`` (else on stderr)."""
    roots = [Path(r) for r in runs_dir] if isinstance(runs_dir, (list, tuple)) else [Path(runs_dir)]
    paths = []
    for root in roots:
        if not root.exists():
            raise NoSuchPath(f"no such runs directory: {root}")
        paths += RunFiles.outcomes(root) if diverged else RunFiles.below(root)
    out = []
    for p in paths:
        try:
            r = json.loads(read_stored(p))
            if not isinstance(r, dict) or "name" not in r:
                raise ValueError("not a result record")
        except (OSError, ValueError) as e:
            msg = f"skipped {p}: unreadable ({type(e).__name__}: {str(e)[:80]})"
            notes.append(msg) if notes is not None else _note(msg)
            continue
        r["run_dir"] = str(p.parent)
        r["config"] = saved_config(p.parent)
        r["config_key"] = saved_key(p.parent)
        out.append(r)
    return out


def mixed_precision(r: dict) -> tuple | None:
    """The precision segments ``((first step, precision), ...)`` of a run resumed in another
    precision, else None (a run in one precision)."""
    segments = r.get("precision_segments") or []
    if len(segments) < 2:
        return None
    return tuple((int(s[0]), str(s[1])) for s in segments)


def _mixed_label(segments: tuple) -> str:
    return "mixed precision: " + ", ".join(f"{p} from step {s}" for s, p in segments)


def _groups(results: list[dict], notes: list[str]) -> dict[tuple, list[dict]]:
    """Runs grouped by (name, configuration key, precision segments of a mixed run), one run
    per seed (the first directory)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    seen: dict[tuple, dict] = {}
    for r in results:
        g = (r["name"], r.get("config_key"), mixed_precision(r))
        s = (g, r.get("seed"))
        if s in seen:
            notes.append(
                f"{r['run_dir']} repeats seed {r.get('seed')} of {seen[s]['run_dir']} "
                f"(same configuration); counted once"
            )
            continue
        seen[s] = r
        groups[g].append(r)
    return groups


def _labels(groups: dict[tuple, list[dict]]) -> dict[tuple, str]:
    """Row labels: the run name, plus the differing keys when one name has several configurations."""
    by_name: dict[str, list[tuple]] = defaultdict(list)
    for g in groups:
        by_name[g[0]].append(g)
    labels = {}
    for name, gs in by_name.items():
        if len(gs) == 1:
            labels[gs[0]] = name if gs[0][2] is None else f"{name} [{_mixed_label(gs[0][2])}]"
            continue
        cfgs = {g: groups[g][0].get("config") for g in gs}
        known = [g for g in gs if cfgs[g] is not None]
        keys = sorted({k for a in known for b in known for k in differences(cfgs[a], cfgs[b])})
        for g in gs:
            if cfgs[g] is None:
                labels[g] = f"{name} [no config.json]"
                continue
            flat = differences({}, cfgs[g])  # every key of g: ({} side, g side)
            parts = [f"{k}={flat[k][1]}" for k in keys if k in flat]
            if g[2] is not None:
                parts.append(_mixed_label(g[2]))
            labels[g] = f"{name} [{', '.join(parts or [f'config {g[1]}'])}]"
    return labels


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0 for one value) of ``values``: the one
    "mean +- std over seeds" of rnnlab's tables and the reproduction ledger."""
    m = math.fsum(values) / len(values)
    s = math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return m, s


_mean_std = mean_std  # the name summarize() has always called


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a ``|`` (allowed in a run name) would end the cell."""
    return str(text).replace("|", "\\|")


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, (int,)) and not isinstance(x, bool):
        return f"{x:,}"
    ax = abs(x)
    return f"{x:.4f}" if 1e-3 <= ax < 1e4 or ax == 0 else f"{x:.3e}"


def summarize(results: list[dict], metrics: list[str] | None = None, notes: list[str] | None = None) -> list[dict]:
    """One row per (run name, configuration, metric): mean, std, seeds, baseline and paper
    values. Raises ``UnknownMetric`` when a metric of ``metrics`` is in no run."""
    notes = [] if notes is None else notes
    groups = _groups(results, notes)
    labels = _labels(groups)
    if metrics:
        have = sorted({k for r in results for k in (*r.get("final", {}), *r.get("test", {}))})
        missing = [m for m in metrics if m not in have]
        if missing and results:
            from .config import did_you_mean

            raise UnknownMetric(
                f"no run has metric(s) {missing}; the runs have: {', '.join(have)}." + did_you_mean(missing[0], have)
            )
    rows = []
    for g, rs in groups.items():
        name = labels[g]
        scores = [{**r.get("final", {}), **r.get("test", {})} for r in rs]
        keys = metrics or sorted(rs[0].get("test") or rs[0].get("final", {}))
        for key in keys:
            vals = [s[key] for s in scores if key in s and s[key] is not None]
            if not vals:
                continue
            mean, std = _mean_std(vals)
            metric = key.split("/")[-1]
            rows.append(
                {
                    "name": name,
                    "cell": rs[0]["cell"],
                    "task": rs[0]["task"],
                    "seeds": len(vals),
                    "params": rs[0].get("params", {}).get("free"),
                    "steps": rs[0].get("steps"),
                    "s_per_step": rs[0].get("time_per_step_s"),
                    "eval_s": rs[0].get("eval_time_s"),
                    "metric": key,
                    "mean": mean,
                    "std": std,
                    "baseline": rs[0].get("baseline", {}).get(metric),
                    "paper": rs[0].get("paper", {}).get(key),
                    # text tasks: the unigram predictor beside the uniform one (tasks/text.py)
                    "baseline_unigram": rs[0].get("baseline", {}).get(f"unigram_{metric}"),
                }
            )
    return rows


def table(runs_dir: str | Path | list, metrics: list[str] | None = None, timing: bool = True) -> str:
    """A Markdown table of every run below ``runs_dir`` (a folder or a list of run folders),
    followed by notes on skipped files and repeated seeds, if any. ``s/step``: training alone
    (of the first seed); ``eval s``: its evaluation and checkpointing time in all.
    ``timing=False`` leaves both out (only what a rerun reproduces exactly)."""
    notes: list[str] = []
    rows = summarize(find_results(runs_dir, notes), metrics, notes)
    if not rows:
        return "\n".join([f"(no finished runs with result.json below {runs_dir})", *notes])
    times = "s/step | eval s | " if timing else ""
    head = f"| run | cell | params | steps | {times}metric | ours (mean +- std, seeds) | memoryless baseline | paper |"
    lines = [head, "|" + "---|" * (10 if timing else 8)]
    for r in rows:
        ours = f"{_fmt(r['mean'])} +- {_fmt(r['std'])} ({r['seeds']})"
        t = f"{_fmt(r['s_per_step'])} | {_fmt(r['eval_s'])} | " if timing else ""
        base = _fmt(r["baseline"])
        if r.get("baseline_unigram") is not None:
            base = f"{base} uniform, {_fmt(r['baseline_unigram'])} unigram"
        lines.append(
            f"| {_cell(r['name'])} | {r['cell']} | {_fmt(r['params'])} | {_fmt(r['steps'])} | {t}"
            f"{r['metric']} | {ours} | {base} | {_fmt(r['paper'])} |"
        )
    if notes:
        lines += [""] + [f"note: {n}" for n in notes]
    return "\n".join(lines)


# The copy task's verdict (the demo's sentence, its record test): solved when the test loss is under
# this fraction of the memoryless baseline and the recall of the copied symbols at least SOLVED_RECALL;
# not solved when the loss is over UNSOLVED_FRACTION of the baseline; in between, no verdict.
SOLVED_FRACTION = 0.1
SOLVED_RECALL = 0.95
UNSOLVED_FRACTION = 0.5


def copy_verdict(result: dict) -> tuple[str | None, str]:
    """The verdict on a copy-task run's ``result.json`` (``"solved"``, ``"not solved"`` or None for
    in between) and one sentence that says why, from the best checkpoint's test metrics."""
    test, base = result.get("test", {}), result.get("baseline", {}).get("loss")
    loss, recall = test.get("test/loss"), test.get("test/recall_accuracy")
    name = result.get("name", "run")
    if loss is None or recall is None or not base:
        return None, f"{name}: no verdict (no test loss, recall or memoryless baseline recorded)"
    why = f"test loss {loss:.3g} is {loss / base:.0%} of the memoryless baseline {base:.3g}, recall {recall:.3f}"
    if loss < SOLVED_FRACTION * base and recall >= SOLVED_RECALL:
        return "solved", f"{name}: solved ({why})"
    if loss > UNSOLVED_FRACTION * base:
        return "not solved", f"{name}: not solved ({why})"
    return None, (
        f"{name}: partly ({why}; solved means under {SOLVED_FRACTION:.0%} of the baseline with recall "
        f">= {SOLVED_RECALL}, not solved over {UNSOLVED_FRACTION:.0%})"
    )


#: the DMU protocol's validation-loss thresholds (DMU paper, Figs. 3-5): the one list used by
#: ``rnnlab thresholds`` and the reproduction ledger's rows and claims
DMU_THRESHOLDS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
#: the DMU protocol's epoch: 200 training sequences (Table X), so 200 / batch size optimizer steps
DMU_SEQUENCES_PER_EPOCH = 200


def dmu_steps_per_epoch(config: dict | None) -> Fraction | None:
    """Optimizer steps per epoch of the DMU protocol for a run's saved configuration: its
    ``train.epoch_steps`` where set (the paper protocol's 200 batches of 32), else 200 sequences
    over its batch size (10 at the short protocol's batch 20; None without a batch size)."""
    train = (config or {}).get("train") or {}
    if isinstance(train.get("epoch_steps"), int) and train["epoch_steps"] > 0:
        return Fraction(train["epoch_steps"])
    batch = train.get("batch_size")
    return Fraction(DMU_SEQUENCES_PER_EPOCH, batch) if isinstance(batch, int) and batch > 0 else None


def median_epoch(epochs) -> float | None:
    """The median of first epochs (the mean of the two middle ones for an even count), None for
    none: the one median of the threshold rows and the claims' profiles."""
    return statistics.median(epochs) if epochs else None


def epoch_of(step: int, steps_per_epoch) -> int:
    """The (1-based) epoch an optimizer step belongs to: steps 1..s are epoch 1, s+1..2s epoch 2.
    A value seen at ``step`` is known by the end of this epoch, not before. ``steps_per_epoch``
    may be a fraction (``Fraction(200, batch)`` for the DMU protocol's 200 sequences per epoch);
    it is counted exactly, without float rounding."""
    spe = Fraction(steps_per_epoch)
    if spe <= 0:
        raise ValueError(f"steps_per_epoch must be > 0, got {steps_per_epoch}")
    return math.ceil(Fraction(int(step)) / spe)


def first_reached(
    rows: list[dict], metric: str, thresholds=DMU_THRESHOLDS, steps_per_epoch=1
) -> dict[float, int | None] | None:
    """The DMU paper's rule ("runs that have reached the threshold in or before the specific
    epoch"): for each threshold, the first epoch (``epoch_of``) at whose evaluation ``metric``
    had been ``<=`` it, None if never. Returns None when no row has a finite ``metric``: a run
    that logged nothing is no evidence of "never reached"."""
    out: dict[float, int | None] = {th: None for th in thresholds}
    best, seen = math.inf, False
    for row in sorted(
        (
            r
            for r in rows
            if isinstance(r.get(metric), (int, float))
            and not isinstance(r.get(metric), bool)
            and math.isfinite(r[metric])
        ),
        key=lambda r: r.get("step", 0),
    ):
        seen = True
        best = min(best, row[metric])
        for th in thresholds:
            if out[th] is None and best <= th:
                out[th] = epoch_of(row.get("step", 0), steps_per_epoch)
    return out if seen else None


def threshold_counts(
    runs_dir: str | Path,
    metric: str = "val/loss",
    thresholds: tuple[float, ...] = DMU_THRESHOLDS,
    steps_per_epoch: int | None = None,
) -> dict[str, dict[float, list[int]]]:
    """The DMU paper's summary of synthetic runs: for each run name and loss threshold, how many
    of its runs (seeds) had reached ``metric <= threshold`` by each epoch (``first_reached``:
    the evaluation at ``step`` counts for epoch ``epoch_of(step, steps_per_epoch)``; by default
    each run's epoch is the protocol's 200 sequences, ``dmu_steps_per_epoch``). Returns
    ``{name: {threshold: [count at epoch 1, 2, ...]}}`` up to the last evaluated epoch. A run
    whose ``metrics.jsonl`` has no finite ``metric`` is left out with a note; a run stopped by
    divergence (``diverged.json``) counts with what it reached before, as the ledger counts it."""
    if steps_per_epoch is not None and steps_per_epoch <= 0:
        raise ValueError(f"--steps-per-epoch must be a positive number of optimizer steps, got {steps_per_epoch}")
    bad = [t for t in thresholds if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf]
    if bad or not thresholds:
        shown = ", ".join(str(t) for t in bad) if bad else "none"
        raise ValueError(
            f"--thresholds must be finite positive numbers (a loss reaches them from above), got {shown}; "
            f"e.g. --thresholds 1e-2,1e-4"
        )
    notes: list[str] = []
    results = find_results(runs_dir, notes, diverged=True)
    if not results:
        raise FileNotFoundError(
            f"no finished runs (result.json) below {runs_dir}; train some first (rnnlab train / rnnlab suite)"
        )
    groups = _groups(results, notes)
    labels = _labels(groups)
    firsts: dict[str, list[dict]] = defaultdict(list)
    horizon: dict[str, int] = defaultdict(int)
    seen_metrics: set[str] = set()
    for g, r in ((g, r) for g, rs in groups.items() for r in rs):
        name = labels[g]
        path = RunFiles(r["run_dir"]).stored(RunFiles.METRICS) or RunFiles(r["run_dir"]).metrics
        try:
            rows, bad = read_jsonl(path)
        except OSError as e:
            notes.append(f"skipped {path}: {e.strerror or e}")
            continue
        if bad:
            notes.append(f"{path}: skipped unreadable line(s) {bad}")
        seen_metrics.update(k for row in rows for k in row if "/" in k)
        spe = steps_per_epoch or dmu_steps_per_epoch(r.get("config"))
        if spe is None:
            notes.append(f"left out {r['run_dir']}: no batch size in its config.json (give --steps-per-epoch)")
            continue
        reached = first_reached(rows, metric, thresholds, spe)
        if reached is None:
            notes.append(f"left out {r['run_dir']}: no {metric} in its metrics.jsonl")
            continue
        firsts[name].append(reached)
        last = max((row.get("step", 0) for row in rows if isinstance(row.get(metric), (int, float))), default=0)
        horizon[name] = max(horizon[name], epoch_of(last, spe))
    for n in notes:
        _note(n)
    if metric not in seen_metrics:
        raise UnknownMetric(
            f"no run below {runs_dir} logged metric {metric!r}; the runs have: "
            f"{', '.join(sorted(seen_metrics)) or 'none'}"
        )
    out = {}
    for name, runs in firsts.items():
        out[name] = {
            th: [sum(1 for rc in runs if rc[th] is not None and rc[th] <= e) for e in range(1, horizon[name] + 1)]
            for th in thresholds
        }
    return out


def export_csv(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write a run's ``metrics.jsonl`` (or a record's ``metrics.jsonl.xz``) as CSV (default ``RUN/metrics.csv``): one row per logged
    line, one column per key in order of first appearance (``step`` first), empty where a row
    lacks the key (training rows have no validation metrics and vice versa)."""
    import csv

    run_dir = Path(run_dir)
    src = RunFiles(run_dir).stored(RunFiles.METRICS)
    if src is None:
        raise NoSuchPath(f"{run_dir} has no metrics.jsonl (is it a run directory?)")
    rows, bad = read_jsonl(src)
    if bad:  # a partial last line (an interrupted write) or garbage: skipped and named, as table/plot do
        log.warning(f"{src}: skipped line(s) {', '.join(map(str, bad[:10]))} (not a metrics row)")
    columns = ["step"]
    for row in rows:
        columns += [k for k in row if k not in columns]
    out = Path(out) if out else run_dir / "metrics.csv"
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, restval="")
        w.writeheader()
        w.writerows(rows)
    return out
