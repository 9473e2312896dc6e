"""Run records as the ledger's evidence: loading them (and naming the ones left out), matching
each to its preset, grouping seeds, and where each was made.

A run record is a directory with ``config.json``, ``result.json`` (or, for a run stopped by a
non-finite loss, gradient norm or weight, ``diverged.json``: no test scores, and its curve up
to the divergence counts in the threshold protocols as reaching nothing after) and ``metrics.jsonl`` (and
``jacobian.json`` / ``schur.json`` when an analysis was run on it), as ``rnnlab train`` writes
it; an analysis-only record is a directory with ``analysis.json`` (``{"preset", "seeds",
"steps", "source", "values"}``, optionally ``"command"``: how to regenerate it).

A record never changes a verdict silently. ``load_records`` leaves out, and names with the
reason, a record

* whose ``result.json`` or ``config.json`` cannot be read,
* with a non-finite number among its metrics (a NaN test loss is no evidence either way),
* without ``metrics.jsonl`` or with an empty one (no curve: no evidence of "never reached"),
* that repeats another record's configuration and seed (a seed folder copied under another
  name is the same run, not a new seed): the first in path order is kept,
* resumed in another precision (``precision_segments`` in its ``result.json``): a mixed run is
  evidence for neither precision.

:class:`Evidence` adds the records it leaves out of one count only (a DMU threshold-protocol
run without a finite ``val/loss`` is left out of the threshold counts); the ledger lists both
kinds where it counts the records.

Each run is attributed to the preset whose resolved config it matches best (seed, threads and
logging aside); what differs is reported: a smaller budget (steps, sequence length, data sizes)
makes the row "reduced budget", anything else "another configuration".
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .. import config
from ..results import DMU_THRESHOLDS, _mixed_label, dmu_steps_per_epoch, first_reached, mean_std, mixed_precision
from ..rundir import RunFiles, read_jsonl, read_stored
from .stats import counted

#: Flat configuration keys that do not change what a run computes (its name and description, the
#: seeds, where and how fast it ran, how often it logs): the ledger compares runs without them.
NOT_EXPERIMENT = tuple(config.NOT_EXPERIMENT)
BUDGET = (
    "train.steps",
    "task.L",
    "task.T",
    "task.val_size",
    "task.test_size",
    "task.max_pairs",
    "train.eval_every",
    "train.eval_max_batches",
)
#: the commit from which ``result.json`` records the host's CPU, BLAS and the source hash
PROVENANCE_SINCE = "4cfd480"
#: the file in a records root that lists its records awaiting re-making (``path<TAB>why``, paths
#: below the root): their provenance cannot be checked out; the ledger counts them, marked
AWAITING_REMAKE = "awaiting-remake.txt"
UNVERIFIABLE = "provenance unverifiable"


def cpu_label(cond: dict) -> str | None:
    """A record's CPU as the ledger names it (hardware, provenance, prices): the model name, then
    the generation and instruction set where the record has them (``rnnlab.device.cpu_id`` and
    ``cpu_capability``), e.g. ``"AMD EPYC (family 23 model 1, AVX2)"``; None without a model
    name. Records made before these were kept read as the bare name."""
    name = cond.get("cpu_model")
    if not name:
        return None
    extra = [cond[k] for k in ("cpu_id", "cpu_capability") if cond.get(k) and cond[k] != "unknown"]
    return f"{name} ({', '.join(extra)})" if extra else name


def awaiting_remake(root) -> dict[str, str]:
    """``{path below root: why}`` from ``root``'s ``AWAITING_REMAKE`` list ({} without one)."""
    f = Path(root) / AWAITING_REMAKE
    if not f.exists():
        return {}
    out = {}
    for n, line in enumerate(f.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        path, sep, why = line.partition("\t")
        if not sep or not why.strip():
            raise ValueError(
                f"{f}:{n}: expected 'path<TAB>why', got {line!r}; separate the path and the reason by a tab"
            )
        out[path.strip()] = why.strip()
    return out


# --- records ---------------------------------------------------------------------------------
def _resolved(cfg: dict) -> dict:
    flat = config.flatten(cfg)
    return {k: v for k, v in flat.items() if not any(k == i or k.startswith(i + ".") for i in NOT_EXPERIMENT)}


#: a records folder of this name holds *price probes*: short runs (``price.PROBE_SET``) that time a
#: configuration no other record times. The pricer reads them; the ledger's evidence does not
#: (a probe is no trained result, and its row stays "not run yet").
PROBES = "price-probes"


def is_probe(path: Path) -> bool:
    """Whether the run directory ``path`` lies below a ``PROBES`` folder."""
    return PROBES in Path(path).parts


@dataclass
class Record:
    path: Path
    config: dict
    result: dict
    preset: str = ""
    diffs: tuple[str, ...] = ()
    unverifiable: str = ""  # why its provenance cannot be checked out (``AWAITING_REMAKE``), else ""
    _rows: list | None = field(default=None, repr=False)
    _firsts: dict = field(default_factory=dict, repr=False)
    _flat: dict | None = field(default=None, repr=False)

    def resolved(self) -> dict:
        """The flat configuration without the keys that are not part of the experiment (computed
        once per record: the attribution, the duplicates and the prices all compare it)."""
        if self._flat is None:
            self._flat = _resolved(self.config)
        return self._flat

    def metrics(self) -> list[dict]:
        """The rows of ``metrics.jsonl`` (unreadable lines skipped)."""
        if self._rows is None:
            p = RunFiles(self.path).stored(RunFiles.METRICS)
            self._rows = read_jsonl(p)[0] if p is not None else []
        return self._rows

    def extra(self, name: str) -> dict | None:
        p = self.path / name
        return json.loads(p.read_text()) if p.exists() else None

    def value(self, metric: str):
        r = self.result
        if metric == "params":
            return (r.get("params") or {}).get("elements")
        if metric == "params/recurrent":  # the whole network less its readout layer
            whole = (r.get("params") or {}).get("elements")
            readout = readout_elements(self.config)
            return None if whole is None or readout is None else whole - readout
        if metric.startswith("baseline/"):
            return (r.get("baseline") or {}).get(metric.split("/", 1)[1])
        if metric == "time_per_step_s_gpu":
            return r.get("time_per_step_s")
        if metric in (r.get("test") or {}):
            return r["test"][metric]
        if r.get("stopped") == "diverged":  # its last scores are the divergence's, not an outcome
            return None
        return (r.get("final") or {}).get(metric)

    def first_epochs(self, thresholds=DMU_THRESHOLDS, metric: str = "val/loss") -> dict[float, int | None] | None:
        """The DMU protocol (``results.first_reached``): the first epoch of 200 sequences by
        which ``metric`` <= each threshold; None when the run logged no ``metric``. Computed once
        per record for all of the protocol's thresholds (the claims ask for one at a time)."""
        have = self._firsts.get(metric)
        if have is None or (have[1] is not None and not set(thresholds) <= set(have[1])):
            every = tuple(sorted(set(DMU_THRESHOLDS) | set(thresholds) | set(have[1] if have and have[1] else ())))
            spe = dmu_steps_per_epoch(self.config)
            have = self._firsts[metric] = (every, first_reached(self.metrics(), metric, every, spe))
        full = have[1]
        return None if full is None else {th: full[th] for th in thresholds}

    def provenance(self) -> dict:
        """Where the record was made: commit (``+dirty``), source hash, CPU model, torch, BLAS,
        device; ``None`` for what the record does not say."""
        r = self.result
        git = r.get("git") or {}
        cond = r.get("conditions") or {}
        commit = git.get("commit")
        device = str(cond.get("device", "cpu"))
        return {
            "commit": (commit[:7] + ("+dirty" if git.get("dirty") else "")) if commit else None,
            "source": r.get("source_sha256"),
            "cpu": cpu_label(cond),
            "torch": (r.get("versions") or {}).get("torch"),
            "blas": cond.get("blas"),
            "device": None if device.startswith("cpu") else f"{device} ({cond.get('device_name', '?')})",
        }

    def has_provenance(self) -> bool:
        p = self.provenance()
        return bool((p["commit"] or p["source"]) and p["cpu"])


_READOUTS: dict[str, int | None] = {}


def readout_elements(cfg: dict) -> int | None:
    """Parameter elements of the readout layer of the model a saved configuration builds (None
    where it does not build here); cached per configuration."""
    key = json.dumps(_resolved(cfg), sort_keys=True, default=str)
    if key not in _READOUTS:
        from ..model import build_model
        from ..train import build_task

        try:
            run = config.from_dict(cfg)
            model = build_model(run.model, build_task(run.task))
            _READOUTS[key] = sum(p.numel() for p in model.readout.parameters())
        except (config.ConfigError, AttributeError, KeyError, TypeError, ValueError):
            _READOUTS[key] = None
    return _READOUTS[key]


@dataclass
class Analysis:
    path: Path
    preset: str
    data: dict


@dataclass(frozen=True)
class LeftOut:
    """A record the ledger read but did not count, and why."""

    path: Path
    reason: str


def _nonfinite(result: dict) -> list[str]:
    bad = []
    for section in ("test", "final", "best", "baseline"):
        for k, v in (result.get(section) or {}).items():
            if isinstance(v, float) and not math.isfinite(v):
                bad.append(f"{k} = {v}")
    return bad


def _read_record(p: Path) -> tuple[Record | None, str]:
    """The record in ``p.parent`` or (None, why it is left out)."""
    from ..config import ConfigError, load_json

    try:
        result = json.loads(read_stored(p))
        if not isinstance(result, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        return None, f"result.json unreadable ({type(e).__name__}: {str(e)[:60]})"
    cfg_path = RunFiles(p.parent).config
    try:
        cfg = load_json(cfg_path).to_dict()
    except (ConfigError, TypeError, ValueError, KeyError):  # written by other code (keys, types, cells)
        try:
            cfg = _over_defaults(json.loads(read_stored(cfg_path)))
        except (OSError, ValueError, AttributeError) as e:
            return None, f"config.json unreadable ({type(e).__name__}: {str(e)[:60]})"
    except OSError as e:
        return None, f"config.json unreadable ({e.strerror or e})"
    # a diverged run's last validation scores may be the non-finite values that stopped it, and
    # one stopped before its first evaluation has no best score (its "best" holds NaN): the
    # divergence itself, not a bad number (its curve up to there is the evidence)
    stopped = result.get("stopped") == "diverged"
    bad = _nonfinite({k: v for k, v in result.items() if not (stopped and k in ("final", "best"))})
    if bad:
        return None, "non-finite metric (" + ", ".join(bad) + ")"
    segments = mixed_precision(result)
    if segments:
        return None, f"resumed in another precision ({_mixed_label(segments)}): evidence for neither"
    rec = Record(p.parent, cfg, result)
    m = RunFiles(p.parent).stored(RunFiles.METRICS)
    if m is None:
        return None, "no metrics.jsonl"
    rows, lines = read_jsonl(m)
    if not rows:
        return None, "empty metrics.jsonl" if not lines else f"metrics.jsonl has no readable row (lines {lines[:5]})"
    rec._rows = rows
    return rec, ""


def _identity(rec: Record) -> str:
    """A run's configuration and seeds: two records with the same identity are one run."""
    t = rec.config.get("train", {})
    return json.dumps([rec.resolved(), t.get("seed"), t.get("data_seed")], sort_keys=True, default=str)


def load_records(roots) -> tuple[list[Record], list[Analysis], list[LeftOut]]:
    """Every run record (``result.json`` + ``config.json``) and analysis record below ``roots``,
    and the records left out with the reason (see the module's docstring)."""
    records, analyses, left = [], [], []
    seen_paths: set[Path] = set()
    for root in roots:
        root = Path(root)
        if not root.exists():
            from ..rundir import NoSuchPath

            raise NoSuchPath(f"no such records directory: {root} (give the directories that hold run records)")
        pending = awaiting_remake(root)
        for p in RunFiles.outcomes(root):
            if p.resolve() in seen_paths:
                continue
            seen_paths.add(p.resolve())
            rec, why = _read_record(p)
            if rec is None:
                left.append(LeftOut(p.parent, why))
            else:
                rec.unverifiable = pending.get(p.parent.relative_to(root).as_posix(), "")
                records.append(rec)
        for p in RunFiles.below(root, RunFiles.ANALYSIS):
            try:
                data = json.loads(p.read_text())
                analyses.append(Analysis(p.parent, data["preset"], data))
            except (OSError, ValueError, KeyError, TypeError) as e:
                left.append(LeftOut(p.parent, f"analysis.json unreadable ({type(e).__name__}: {str(e)[:60]})"))
    first: dict[str, Record] = {}
    kept = []
    # of two records of one configuration and seed, the one that says where it was made counts
    # (a re-run with provenance supersedes an older record without), then one whose provenance
    # can be checked out (a re-made record supersedes one awaiting re-making), else the first by path
    for rec in sorted(records, key=lambda r: (not r.has_provenance(), bool(r.unverifiable))):
        key = _identity(rec)
        if key in first:
            seed = rec.config.get("train", {}).get("seed")
            if first[key].has_provenance() and not rec.has_provenance():
                why = "; the record with provenance counts"
            elif not first[key].unverifiable and rec.unverifiable:
                why = f"; the record whose provenance can be checked out counts ({UNVERIFIABLE}: {rec.unverifiable})"
            else:
                why = ""
            left.append(LeftOut(rec.path, f"duplicate of {first[key].path} (same configuration and seed {seed}{why})"))
            continue
        first[key] = rec
        kept.append(rec)
    return kept, analyses, left


def _over_defaults(raw: dict) -> dict:
    """``raw`` laid over today's defaults, so that keys it lacks compare at their defaults."""
    from ..config import RunConfig

    out = RunConfig().to_dict()
    for k, v in raw.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "paper":
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


_PRESETS: dict[str, tuple[dict, dict]] | None = None


def preset_dicts() -> dict[str, tuple[dict, dict]]:
    """``{preset name: (config as a dict, resolved flat config)}`` of every preset that loads,
    loaded once (the attribution and the prices read them)."""
    global _PRESETS
    if _PRESETS is None:
        from .. import config

        out = {}
        for name in config.list_presets():
            try:
                cfg = config.load(name).to_dict()
            except config.ConfigError:
                continue
            out[name] = (cfg, _resolved(cfg))
        _PRESETS = out
    return _PRESETS


_FLAT: dict[str, dict] | None = None


def preset_configs() -> dict[str, dict]:
    """``{preset name: resolved flat config}`` of every preset that loads."""
    global _FLAT
    if _FLAT is None:
        _FLAT = {name: flat for name, (_, flat) in preset_dicts().items()}
    return _FLAT


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
        run = r.resolved()
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


# --- formatting ------------------------------------------------------------------------------
def _num(x, metric: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if metric.startswith("params"):
        return f"{x:,.0f}" if x < 1e4 else f"{x / 1e3:,.1f}K" if x < 1e6 else f"{x / 1e6:.2f}M"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
        return f"{x:.3g}"
    return f"{x:.4g}"


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


# --- groups ----------------------------------------------------------------------------------
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
        return [
            v
            for v in (r.value(metric) for r in self.records)
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]

    def stat(self, metric: str):
        """(mean, sample std, number of runs) of ``metric``, or None."""
        vals = self.values(metric)
        return mean_std(vals) + (len(vals),) if vals else None

    def thresholds(self, thresholds=DMU_THRESHOLDS) -> dict[float, list[int | None]]:
        """Per threshold, each run's first epoch (None: never), over the runs that logged val/loss."""
        per = [p for p in (r.first_epochs(thresholds) for r in self.records) if p is not None]
        return {th: [p[th] for p in per] for th in thresholds}

    def unverifiable(self) -> str:
        """ "; k provenance unverifiable" when k of the runs await re-making, else ""."""
        k = sum(1 for r in self.records if r.unverifiable)
        return f"; {k} {UNVERIFIABLE}" if k else ""

    def hardware(self) -> str:
        parts = set()
        for r in self.records:
            cond = r.result.get("conditions") or {}
            threads = cond.get("threads", r.config.get("train", {}).get("threads", 1))
            prov = r.provenance()
            if prov["device"]:
                parts.add(prov["device"])
            else:
                parts.add(f"CPU{' ' + prov['cpu'] if prov['cpu'] else ''}, {counted(threads, 'thread')}")
        return " / ".join(sorted(parts))

    def steps(self) -> str:
        s = sorted({r.result.get("steps", 0) for r in self.records})
        return f"{s[0]:,}" if len(s) == 1 else f"{s[0]:,}-{s[-1]:,}"

    def wall(self) -> str:
        w = [r.result.get("wall_time_s", 0.0) for r in self.records]
        return _seconds(statistics.fmean(w)) + (" each" if len(w) > 1 else "")


class Evidence:
    """Run records grouped by preset, for the ledger rows and the claims' rules; ``left_out``:
    the records read but not counted, with the reason; ``notes``: what a rule left aside."""

    def __init__(self, records: list[Record], analyses: list[Analysis], left_out: list[LeftOut] = ()):
        self.probes = [r for r in records if is_probe(r.path)]  # timings for the prices only
        records = [r for r in records if not is_probe(r.path)]
        attribute(records)
        self.records = list(records)
        self.left_out = list(left_out)
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
        for r in records:
            if r.preset and "thresholds" in _protocol(r.preset) and r.first_epochs() is None:
                self.left_out.append(
                    LeftOut(r.path, "no finite val/loss in metrics.jsonl (left out of the threshold counts)")
                )

    def groups(self, preset: str, same_config: bool = True) -> list[Group]:
        """Groups of runs of ``preset``; ``same_config``: only those that differ at most in budget."""
        return [g for g in self.by_preset.get(preset, []) if not (same_config and g.other)]

    def pooled(self, preset: str) -> Group | None:
        """All runs of ``preset`` that differ from it at most in budget, as one group (its
        ``diffs``: every budget difference among them). When some runs are at the preset's full
        budget, only those are pooled: a smaller run would dilute a full-budget verdict into
        "reduced budget" (its row in the ledger still shows it)."""
        gs = self.groups(preset)
        if not gs:
            return None
        full = [g for g in gs if not g.diffs]
        gs = full or gs
        n = sum(len(g.records) for g in gs)
        diffs = tuple(
            f"{sum(len(g.records) for g in gs if d in g.diffs)} of {n} with {d}"
            for d in sorted({d for g in gs for d in g.diffs})
        )
        return Group(preset, diffs, [r for g in gs for r in g.records])

    def best(self, preset: str) -> Group | None:
        gs = self.groups(preset)
        return gs[0] if gs else None


def _protocol(preset: str) -> str:
    """ "thresholds" for the DMU synthetic presets (judged by the threshold protocol)."""
    stem = preset.split("/")[-1]
    return (
        "thresholds"
        if preset.startswith("dmu/") and stem.split("-")[0] in ("adding", "temporal_order", "noisy_sequence")
        else ""
    )
