"""The reproduction ledger: ``REPRODUCTION.md`` generated from the papers' published values
(:mod:`rnnlab.published`) and run records, never typed by hand.

A run record is a directory with ``config.json`` and ``result.json`` (and ``metrics.jsonl``;
``jacobian.json`` / ``schur.json`` when an analysis was run on it), as ``rnnlab train`` writes
it; an analysis-only record is a directory with ``analysis.json`` (``{"preset", "seeds",
"steps", "source", "values"}``). Each run is attributed to the preset whose resolved config it
matches best (seed, threads and logging aside); what differs is reported: a smaller budget
(steps, sequence length, data sizes) makes the row "reduced budget", anything else "another
configuration".

Status of a row: "not run yet"; "reproduced" when ``|ours - paper| <= max(2 spread_paper,
2 std_ours, rel * |paper|)`` (``rel`` = 2%, 0.5% for weight counts); "not reproduced"
otherwise; "reduced budget (...)" prefixes either when the runs are smaller than the preset;
figures without numbers read "run (curves only; see claims)"; GPU times are "not comparable".
The claims at the end are rules over the same records; a claim without the runs it needs is
"untested".
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .published import PAPERS, ROWS, Published

IGNORED = ("name", "description", "paper", "train.seed", "train.data_seed", "train.threads", "train.log_every",
           "train.eval_batch_size", "train.test", "train.device")  # the device is the hardware column
BUDGET = ("train.steps", "task.L", "task.T", "task.val_size", "task.test_size", "task.max_pairs",
          "train.eval_every", "train.eval_max_batches")
REL_TOL = {"params": 0.005}
THRESHOLDS = (1e-2, 1e-4, 1e-6)  # the DMU protocol's loss thresholds shown in the ledger
DMU_SEQUENCES_PER_EPOCH = 200


# --- records ---------------------------------------------------------------------------------
def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k != "options":
            out.update(_flatten(v, key + "."))
        elif isinstance(v, dict):  # task options are keyed task.<option>
            out.update(_flatten(v, prefix))
        else:
            out[key] = v
    return out


def _resolved(cfg: dict) -> dict:
    flat = _flatten(cfg)
    if "task.options" in flat:
        flat.pop("task.options")
    return {k: v for k, v in flat.items() if not any(k == i or k.startswith(i + ".") for i in IGNORED)}


@dataclass
class Record:
    path: Path
    config: dict
    result: dict
    preset: str = ""
    diffs: tuple[str, ...] = ()

    def metrics(self) -> list[dict]:
        p = self.path / "metrics.jsonl"
        return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []

    def extra(self, name: str) -> dict | None:
        p = self.path / name
        return json.loads(p.read_text()) if p.exists() else None

    def value(self, metric: str):
        r = self.result
        if metric == "params":
            return (r.get("params") or {}).get("elements")
        if metric.startswith("baseline/"):
            return (r.get("baseline") or {}).get(metric.split("/", 1)[1])
        if metric == "time_per_step_s_gpu":
            return r.get("time_per_step_s")
        if metric in (r.get("test") or {}):
            return r["test"][metric]
        return (r.get("final") or {}).get(metric)


@dataclass
class Analysis:
    path: Path
    preset: str
    data: dict


def load_records(roots) -> tuple[list[Record], list[Analysis]]:
    """Every run record (``result.json`` + ``config.json``) and analysis record below ``roots``."""
    from .config import ConfigError, load_json

    records, analyses = [], []
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise FileNotFoundError(f"no such records directory: {root} (give the directories that hold run records)")
        for p in sorted(root.rglob("result.json")):
            try:
                cfg = load_json(p.parent / "config.json").to_dict()
            except (ConfigError, TypeError, ValueError):  # written by other code (keys, types, cells)
                cfg = _over_defaults(json.loads((p.parent / "config.json").read_text()))
            records.append(Record(p.parent, cfg, json.loads(p.read_text())))
        for p in sorted(root.rglob("analysis.json")):
            data = json.loads(p.read_text())
            analyses.append(Analysis(p.parent, data["preset"], data))
    return records, analyses


def _over_defaults(raw: dict) -> dict:
    """``raw`` laid over today's defaults, so that keys it lacks compare at their defaults."""
    from .config import RunConfig

    out = RunConfig().to_dict()
    for k, v in raw.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "paper":
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


_PRESETS: dict[str, dict] | None = None


def preset_configs() -> dict[str, dict]:
    """``{preset name: resolved flat config}`` of every preset that loads."""
    global _PRESETS
    if _PRESETS is None:
        from . import config

        out = {}
        for name in config.list_presets():
            try:
                out[name] = _resolved(config.load(name).to_dict())
            except config.ConfigError:
                continue
        _PRESETS = out
    return _PRESETS


def _diffs(run: dict, preset: dict) -> list[str]:
    out = []
    for k in sorted(set(run) | set(preset)):
        a, b = run.get(k), preset.get(k)
        if a != b and not (isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b)):
            out.append(f"{k} {_short(a)} (preset {_short(b)})")
    return out


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return json.dumps(v) if isinstance(v, (list, dict, str)) else str(v)


def attribute(records: list[Record]) -> None:
    """Set each record's preset (the best match) and its differences from it."""
    presets = preset_configs()
    for r in records:
        run = _resolved(r.config)
        best = None
        for name, cfg in presets.items():
            if cfg.get("task.name") != run.get("task.name") or cfg.get("model.cell") != run.get("model.cell"):
                continue
            d = _diffs(run, cfg)
            key = (len(d), name.replace("/", "-") != r.config.get("name"), name)
            if best is None or key < best[0]:
                best = (key, name, d)
        if best is not None:
            r.preset, r.diffs = best[1], tuple(best[2])


def _is_budget(diff: str) -> bool:
    """Whether a difference from the preset is one of budget (a pooled group words it
    "k of n with KEY ...", see :meth:`Evidence.pooled`)."""
    return re.sub(r"^\d+ of \d+ with ", "", diff).split(" ", 1)[0] in BUDGET


# --- statistics ------------------------------------------------------------------------------
def _mean_std(vals: list[float]) -> tuple[float, float]:
    return (statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0)


def _num(x, metric: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if metric == "params":
        return f"{x:,.0f}" if x < 1e4 else f"{x / 1e3:,.1f}K" if x < 1e6 else f"{x / 1e6:.2f}M"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
        return f"{x:.3g}"
    return f"{x:.4g}"


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def first_epochs(rec: Record, thresholds=THRESHOLDS, metric: str = "val/loss") -> dict[float, int | None]:
    """The DMU protocol: the first epoch (200 sequences) by which ``metric`` <= each threshold."""
    batch = rec.config["train"]["batch_size"]
    out: dict[float, int | None] = {th: None for th in thresholds}
    best = math.inf
    for row in rec.metrics():
        if metric not in row:
            continue
        best = min(best, row[metric])
        epoch = math.ceil(row["step"] * batch / DMU_SEQUENCES_PER_EPOCH)
        for th in thresholds:
            if out[th] is None and best <= th:
                out[th] = epoch
    return out


@dataclass
class Group:
    """The runs of one preset with one set of differences from it."""

    preset: str
    diffs: tuple[str, ...]
    records: list[Record] = field(default_factory=list)

    @property
    def budget(self) -> list[str]:
        return [d for d in self.diffs if _is_budget(d)]

    @property
    def other(self) -> list[str]:
        return [d for d in self.diffs if not _is_budget(d)]

    def values(self, metric: str) -> list[float]:
        return [v for v in (r.value(metric) for r in self.records) if isinstance(v, (int, float))]

    def stat(self, metric: str):
        vals = self.values(metric)
        return _mean_std(vals) + (len(vals),) if vals else None

    def thresholds(self, thresholds=THRESHOLDS) -> dict[float, list[int | None]]:
        per = [first_epochs(r, thresholds) for r in self.records]
        return {th: [p[th] for p in per] for th in thresholds}

    def hardware(self) -> str:
        r = self.records[0]
        cond = r.result.get("conditions") or {}
        threads = cond.get("threads", r.config.get("train", {}).get("threads", 1))
        device = str(cond.get("device", "cpu"))
        if device.startswith("cpu"):
            return f"CPU, {threads} thread{'s' if threads != 1 else ''}"
        return f"{device} ({cond['device_name']})" if cond.get("device_name") else device

    def steps(self) -> str:
        s = sorted({r.result.get("steps", 0) for r in self.records})
        return f"{s[0]:,}" if len(s) == 1 else f"{s[0]:,}-{s[-1]:,}"

    def wall(self) -> str:
        w = [r.result.get("wall_time_s", 0.0) for r in self.records]
        return _seconds(statistics.fmean(w)) + (" each" if len(w) > 1 else "")


class Evidence:
    """Run records grouped by preset, for the ledger rows and the claims' rules."""

    def __init__(self, records: list[Record], analyses: list[Analysis]):
        attribute(records)
        groups: dict[tuple, Group] = {}
        for r in records:
            if not r.preset:
                continue
            g = groups.setdefault((r.preset, r.diffs), Group(r.preset, r.diffs))
            g.records.append(r)
        self.by_preset: dict[str, list[Group]] = defaultdict(list)
        for g in groups.values():
            self.by_preset[g.preset].append(g)
        for gs in self.by_preset.values():  # full budget and fewest differences first
            gs.sort(key=lambda g: (len(g.other), len(g.budget), g.diffs))
        self.analyses: dict[str, list[Analysis]] = defaultdict(list)
        for a in analyses:
            self.analyses[a.preset].append(a)

    def groups(self, preset: str, same_config: bool = True) -> list[Group]:
        """Groups of runs of ``preset``; ``same_config``: only those that differ at most in budget."""
        return [g for g in self.by_preset.get(preset, []) if not (same_config and g.other)]

    def pooled(self, preset: str) -> Group | None:
        """All runs of ``preset`` that differ from it at most in budget, as one group (its
        ``diffs``: every budget difference among them)."""
        gs = self.groups(preset)
        if not gs:
            return None
        n = sum(len(g.records) for g in gs)
        diffs = tuple(f"{sum(len(g.records) for g in gs if d in g.diffs)} of {n} with {d}"
                      for d in sorted({d for g in gs for d in g.diffs}))
        return Group(preset, diffs, [r for g in gs for r in g.records])

    def best(self, preset: str) -> Group | None:
        gs = self.groups(preset)
        return gs[0] if gs else None


# --- the ledger rows -------------------------------------------------------------------------
def _tolerance(row: Published, ours_std: float) -> float:
    return max(2 * (row.spread or 0.0), 2 * ours_std, REL_TOL.get(row.metric, 0.02) * abs(row.value))


def _row_lines(row: Published, ev: Evidence) -> list[list[str]]:
    """Table lines ``[row, metric, paper, ours, steps, hardware, wall, diff, status, preset]``."""
    label = f"{row.model}, {row.task}" + (f" ({row.size})" if row.size else "")
    if row.value is not None:
        paper = _num(row.value, row.metric)
    elif row.metric == "settings":
        paper = "hyperparameters"
    elif row.table.startswith("Table"):
        paper = "nan (as printed)"
    else:
        paper = "curves"
    if row.value is not None and row.spread is not None:
        paper += f" +- {_num(row.spread)}"
    if row.best is not None:
        paper += f" (best {_num(row.best, row.metric)})"
    if row.runs:
        paper += f" [{row.runs} runs]"
    if not row.presets:
        return [[label, row.metric, paper, "-", "-", "-", "-", "-", f"no preset: {row.reason}", "-"]]
    lines = []
    for i, preset in enumerate(row.presets):
        tag = f"`{preset}`" + (" (variant)" if i else "")
        groups = ev.by_preset.get(preset, [])
        found = [a for a in ev.analyses.get(preset, []) if row.metric in a.data.get("values", {})]
        for a in found:
            lines.append(_analysis_line(row, label, paper, tag, a))
        if not groups and found:
            continue
        if not groups:
            if i == 0 or len(row.presets) == 1:
                lines.append([label, row.metric, paper, "-", "-", "-", "-", "-", "not run yet", tag])
            continue
        for g in groups:
            lines.append(_group_line(row, label, paper, tag, g, ev))
    return lines


def _analysis_line(row: Published, label: str, paper: str, tag: str, a: Analysis) -> list[str]:
    v = a.data["values"][row.metric]
    seeds = a.data.get("seeds", [])
    ours = f"{_num(v)} ({len(seeds)} seed{'s' if len(seeds) != 1 else ''}; analysis record)"
    diff = f"{v - row.value:+.4g}" if row.value is not None else "-"
    verdict = ("reproduced" if abs(v - row.value) <= _tolerance(row, 0.0) else "not reproduced") \
        if row.value is not None else "run (curves only; see claims)"
    return [label, row.metric, paper, ours, f"{a.data.get('steps', 0):,}", "-", "-", diff, verdict, tag]


def _group_line(row: Published, label: str, paper: str, tag: str, g: Group, ev: Evidence) -> list[str]:
    n = len(g.records)
    seeds = f"{n} seed{'s' if n != 1 else ''}" + (f" of {row.runs}" if row.runs and n < row.runs else "")
    qualifiers = []
    if g.budget:
        qualifiers.append("reduced budget (" + "; ".join(g.budget) + ")")
    if g.other:
        qualifiers.append("another configuration (" + "; ".join(g.other) + ")")
    if row.runs and n < row.runs and row.metric == "thresholds":
        qualifiers.append(f"{n} of the paper's {row.runs} runs")
    diff, ours = "-", "-"
    if row.metric == "thresholds":
        th = g.thresholds()
        parts = []
        for t, eps in th.items():
            reached = [e for e in eps if e is not None]
            med = f", median epoch {statistics.median(reached):g}" if reached else ""
            parts.append(f"{t:.0e}: {len(reached)}/{n}{med}")
        ours = "; ".join(parts) + f" ({seeds})"
        verdict = "run (curves only; see claims)"
    else:
        st = g.stat(row.metric)
        if st is not None:
            m, s, k = st
            ours = f"{_num(m, row.metric)} +- {_num(s)} ({seeds})"
        if st is None:
            verdict = f"run; metric {row.metric} not recorded"
        elif row.value is None:
            verdict = "run (curves only; see claims)"
        elif row.metric == "time_per_step_s_gpu":
            diff = f"{st[0] - row.value:+.3g}"
            verdict = f"not comparable (paper: a GPU; ours: {g.hardware()})"
        else:
            m, s, _ = st
            diff = f"{m - row.value:+.4g}"
            verdict = "reproduced" if abs(m - row.value) <= _tolerance(row, s) else "not reproduced"
    status = "; ".join(qualifiers + [verdict])
    return [label, row.metric, paper, ours, g.steps(), g.hardware(), g.wall(), diff, status, tag]


def _cell(text: str) -> str:
    return text.replace("\n", " ").replace("|", "\\|")


def _table(lines: list[list[str]]) -> str:
    head = ["row", "metric", "paper", "ours (mean +- std)", "steps run", "hardware", "wall time", "diff", "status", "preset"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in line) + " |" for line in lines]
    return "\n".join(out)


def _status_kind(status: str) -> str:
    for k in ("not reproduced", "reproduced", "not run yet", "no preset", "not comparable", "curves only"):
        if k in status:
            return {"curves only": "run (figure)"}.get(k, k)
    return "run"


# --- the document ----------------------------------------------------------------------------
def ledger(roots, command: str = "rnnlab reproduce ledger records -o REPRODUCTION.md") -> str:
    """The Markdown text of REPRODUCTION.md from the run records below ``roots``."""
    from .claims import CLAIMS

    records, analyses = load_records(roots)
    ev = Evidence(records, analyses)
    parts = [
        "# Reproduction ledger",
        "",
        f"Generated by `{command}` from the papers' published values (`rnnlab.published`) and the "
        "run records in `records/`; do not edit by hand (a test regenerates it and compares). "
        "How to read it and how to add runs: docs/reproduce.md.",
        "",
        "Status: *reproduced* when |ours - paper| <= max(2 x the paper's spread, 2 x our std, 2% of the "
        "paper's value; 0.5% for weight counts); *reduced budget (...)* when the runs are smaller than "
        "the preset (the differences are listed); *another configuration (...)* when they differ otherwise; "
        "*not run yet* when no record exists; *curves only* for figures without numbers (their content "
        "is judged in the claims). Timings on the paper's GPU are not comparable with our CPU.",
        "",
        f"{len(records)} run records, {len(analyses)} analysis records.",
        "",
    ]
    all_lines: dict[str, list[list[str]]] = {}
    for paper in PAPERS:
        rows = [r for r in ROWS if r.paper == paper]
        tables: dict[str, list[Published]] = {}
        for r in rows:
            tables.setdefault(r.table, []).append(r)
        all_lines[paper] = []
        section = [f"## {PAPERS[paper]}", ""]
        for table, trs in tables.items():
            lines = [ln for r in trs for ln in _row_lines(r, ev)]
            all_lines[paper] += lines
            section += [f"### {paper}: {table}", "", _table(lines), ""]
        parts += section
    # summary right after the header
    counts = []
    kinds = ("reproduced", "not reproduced", "run (figure)", "not comparable", "not run yet", "no preset")
    for paper, lines in all_lines.items():
        c = defaultdict(int)
        for ln in lines:
            c[_status_kind(ln[8])] += 1
        reduced = sum(1 for ln in lines if "reduced budget" in ln[8])
        counts.append(f"| {paper} | " + " | ".join(str(c[k]) for k in kinds) + f" | {reduced} |")
    summary = ["## Summary", "", "| paper | " + " | ".join(kinds) + " | of which reduced budget |",
               "|" + "---|" * (len(kinds) + 2), *counts, ""]
    idx = parts.index(f"## {PAPERS['asrnn']}")
    parts[idx:idx] = summary
    parts += ["## Claims", "",
              "Each claim with the rule that judges it and the evidence; *untested* when the runs it "
              "needs are not in the records.", ""]
    for paper in PAPERS:
        parts += [f"### {paper}", "", "| claim | verdict | evidence | runs |", "|---|---|---|---|"]
        for c in (c for c in CLAIMS if c.paper == paper):
            verdict, evidence, runs = c.judge(ev)
            parts.append(f"| {_cell(c.text)} | **{verdict}** | {_cell(evidence)} | {_cell(runs)} |")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def collect(runs_dir, out_dir) -> list[Path]:
    """Copy the small files of every finished run below ``runs_dir`` (config.json, result.json,
    metrics.jsonl; never checkpoints) to the same relative place below ``out_dir``."""
    import shutil

    runs_dir, out_dir = Path(runs_dir), Path(out_dir)
    if not runs_dir.exists():
        raise FileNotFoundError(f"no such runs directory: {runs_dir}")
    copied = []
    for p in sorted(runs_dir.rglob("result.json")):
        dest = out_dir / p.parent.relative_to(runs_dir)
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "result.json", "metrics.jsonl"):
            if (p.parent / name).exists():
                shutil.copyfile(p.parent / name, dest / name)
        copied.append(dest)
    return copied


def main_ledger(roots, output: str | None) -> int:
    text = ledger(roots)
    if output:
        Path(output).write_text(text)
        print(f"wrote {output}")
    else:
        print(text, end="")
    return 0
