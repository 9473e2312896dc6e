"""Tables from run directories (``result.json`` files), mean +- std over seeds, next to the
memoryless baseline and the paper's published number."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path


def find_results(runs_dir: str | Path) -> list[dict]:
    """Every ``result.json`` below ``runs_dir`` (with its directory under ``"run_dir"``)."""
    root = Path(runs_dir)
    if not root.exists():
        raise FileNotFoundError(f"no such runs directory: {root}")
    out = []
    for p in sorted(root.rglob("result.json")):
        r = json.loads(p.read_text())
        r["run_dir"] = str(p.parent)
        out.append(r)
    return out


def _mean_std(values: list[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    s = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return m, s


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, (int,)) and not isinstance(x, bool):
        return f"{x:,}"
    ax = abs(x)
    return f"{x:.4f}" if 1e-3 <= ax < 1e4 or ax == 0 else f"{x:.3e}"


def summarize(results: list[dict], metrics: list[str] | None = None) -> list[dict]:
    """One row per (run name, metric): mean, std, seeds, baseline and paper values."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        groups[r["name"]].append(r)
    rows = []
    for name, rs in groups.items():
        scores = [{**r.get("final", {}), **r.get("test", {})} for r in rs]
        keys = metrics or sorted(rs[0].get("test") or rs[0].get("final", {}))
        for key in keys:
            vals = [s[key] for s in scores if key in s and s[key] is not None]
            if not vals:
                continue
            mean, std = _mean_std(vals)
            metric = key.split("/")[-1]
            rows.append({
                "name": name, "cell": rs[0]["cell"], "task": rs[0]["task"], "seeds": len(vals),
                "params": rs[0].get("params", {}).get("free"), "steps": rs[0].get("steps"),
                "s_per_step": rs[0].get("time_per_step_s"),
                "eval_s": rs[0].get("eval_time_s"), "metric": key, "mean": mean, "std": std,
                "baseline": rs[0].get("baseline", {}).get(metric), "paper": rs[0].get("paper", {}).get(key),
            })
    return rows


def table(runs_dir: str | Path, metrics: list[str] | None = None, timing: bool = True) -> str:
    """A Markdown table of every run below ``runs_dir``. ``s/step``: training alone (of the
    first seed); ``eval s``: its evaluation and checkpointing time in all. ``timing=False``
    leaves both out (only what a rerun reproduces exactly)."""
    results = find_results(runs_dir)
    if metrics and results:
        known = {k for r in results for k in (*r.get("final", {}), *r.get("test", {}))}
        unknown = [m for m in metrics if m not in known]
        if unknown:
            from .config import did_you_mean

            raise ValueError(f"unknown metric {unknown[0]!r} for the runs below {runs_dir}; they have "
                             f"{sorted(known)}." + did_you_mean(unknown[0], known))
    rows = summarize(results, metrics)
    if not rows:
        return f"(no finished runs with result.json below {runs_dir})"
    times = "s/step | eval s | " if timing else ""
    head = f"| run | cell | params | steps | {times}metric | ours (mean +- std, seeds) | memoryless baseline | paper |"
    lines = [head, "|" + "---|" * (10 if timing else 8)]
    for r in rows:
        ours = f"{_fmt(r['mean'])} +- {_fmt(r['std'])} ({r['seeds']})"
        t = f"{_fmt(r['s_per_step'])} | {_fmt(r['eval_s'])} | " if timing else ""
        lines.append(
            f"| {r['name']} | {r['cell']} | {_fmt(r['params'])} | {_fmt(r['steps'])} | {t}"
            f"{r['metric']} | {ours} | {_fmt(r['baseline'])} | {_fmt(r['paper'])} |"
        )
    return "\n".join(lines)


def threshold_counts(
    runs_dir: str | Path, metric: str = "val/loss", thresholds: tuple[float, ...] = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6),
    steps_per_epoch: int = 1,
) -> dict[str, dict[float, list[int]]]:
    """The DMU paper's summary of synthetic runs: for each run name and loss threshold, how many
    of its runs (seeds) had reached ``metric <= threshold`` by each epoch (evaluation points of
    ``metrics.jsonl``; ``epoch = step // steps_per_epoch``). Returns
    ``{name: {threshold: [count at epoch 1, 2, ...]}}`` up to the last evaluated epoch."""
    from collections import defaultdict

    firsts: dict[str, list[float | None]] = defaultdict(list)
    horizon: dict[str, int] = defaultdict(int)
    for r in find_results(runs_dir):
        rows = [json.loads(x) for x in (Path(r["run_dir"]) / "metrics.jsonl").read_text().splitlines() if x.strip()]
        evals = [(row["step"] // steps_per_epoch, row[metric]) for row in rows if metric in row]
        best, reached = float("inf"), {}
        for epoch, value in evals:
            best = min(best, value)
            for th in thresholds:
                if best <= th and th not in reached:
                    reached[th] = epoch
        firsts[r["name"]].append(reached)
        horizon[r["name"]] = max(horizon[r["name"]], max((e for e, _ in evals), default=0))
    out = {}
    for name, runs in firsts.items():
        out[name] = {
            th: [sum(1 for rc in runs if th in rc and rc[th] <= e) for e in range(1, horizon[name] + 1)]
            for th in thresholds
        }
    return out


def export_csv(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write a run's ``metrics.jsonl`` as CSV (default ``RUN/metrics.csv``): one row per logged
    line, one column per key in order of first appearance (``step`` first), empty where a row
    lacks the key (training rows have no validation metrics and vice versa)."""
    import csv

    run_dir = Path(run_dir)
    src = run_dir / "metrics.jsonl"
    if not src.exists():
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl (is it a run directory?)")
    rows = [json.loads(x) for x in src.read_text().splitlines() if x.strip()]
    columns = ["step"]
    for row in rows:
        columns += [k for k in row if k not in columns]
    out = Path(out) if out else run_dir / "metrics.csv"
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, restval="")
        w.writeheader()
        w.writerows(rows)
    return out
