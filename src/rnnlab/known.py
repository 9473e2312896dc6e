"""The modern models' known behaviours, checked at a CPU scale (docs/field-known.md).

Each modern model's paper shows a signature behaviour on a memory task: Mamba's selective scan
solves selective copying where a time-invariant SSM does not, and solves induction heads at
lengths it was not trained on; minGRU and minLSTM need more than one layer for selective
copying; recurrent models lose multi-query associative recall as the pairs grow at a fixed
width, and mLSTM keeps more of it; LRU's ring initialisation near the unit circle carries long
memories. A :class:`Check` is one such statement (quoted, with its source), the contrasted
models (:class:`Arm`: a cell and its options on one home preset, sized to one parameter count
with ``model.params``), the setting that scales it down to a few CPU-minutes, and the
comparisons that would show it (:class:`Expect`). ``rnnlab field --known`` trains every arm
over the seeds (:func:`run_known`, through the field table's suite runner: the arms with a
batched path as one ensemble), writes one record and prints the table; :func:`verdict` judges
each check from the record alone: "shown at this scale" when every comparison holds, else "not
shown at this scale (finding)", naming the comparison that failed.

A comparison ``A > B`` holds when the mean of A exceeds the mean of B by the margin *and* every
seed of A is above every seed of B (with 3 seeds against 3, the one-sided exact rank test's
smallest p, 1/20); a floor ``A >= v`` holds when the mean of A reaches v. The budget is far below
the papers' (thousands of updates at lengths of hundreds to a million, on GPUs): a behaviour
not shown here is a finding about this scale, not a refutation of the paper.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .config import ConfigError

#: the record's format (a reader refuses another)
RECORD_VERSION = 1
KIND = "rnnlab known behaviours"


@dataclass(frozen=True)
class Arm:
    """One contrasted model: ``label`` (unique in its check), ``cell`` and overrides of its own
    (``model.num_layers=3``, ``model.cell_options.r_min=0.9``, ``task.num_kv_pairs=8``)."""

    label: str
    cell: str
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expect:
    """``better > worse`` by ``margin`` with every seed above (``worse`` a label), or
    ``better >= floor`` on the mean (``worse`` empty), or (``similar``) the two means within
    ``margin`` of each other."""

    better: str
    worse: str = ""
    margin: float = 0.05
    floor: float | None = None
    similar: bool = False

    def text(self) -> str:
        if self.similar:
            return f"{self.better} ~ {self.worse} (means within {self.margin:g})"
        if self.worse:
            return f"{self.better} > {self.worse} (+{self.margin:g}, every seed)"
        return f"{self.better} >= {self.floor:g}"


@dataclass(frozen=True)
class Check:
    key: str
    model: str
    claim: str  # the paper's statement, quoted or closely paraphrased
    source: str  # paper, section / table, and how far we could check it
    setting: str  # ours, and how it is scaled down
    preset: str  # the home preset: task, optimizer
    params: int  # every arm sized to this many free parameters
    overrides: tuple[str, ...]  # task and optimizer settings of every arm
    train: tuple[str, ...]  # the budget: train.* and evaluation sizes (replaced by the tiny budget)
    arms: tuple[Arm, ...]
    expect: tuple[Expect, ...]
    metric: str = "test/accuracy"
    #: ``(label suffix, task overrides)``: each run's best checkpoint is also scored on the test
    #: split of the task with these options (a longer sequence), recorded as ``LABEL@suffix``
    extra_eval: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def labels(self) -> list[str]:
        return [a.label for a in self.arms] + [f"{a.label}@{s}" for a in self.arms for s, _ in self.extra_eval]


def _train(steps: int, batch: int, val: int = 64, test: int = 256) -> tuple[str, ...]:
    return (
        f"train.steps={steps}",
        f"train.batch_size={batch}",
        f"train.eval_every={steps}",
        "train.eval_batch_size=128",
        "train.target_metric=",
        f"task.val_size={val}",
        f"task.test_size={test}",
    )


#: the selective-copying setting of the checks: 4 data tokens from 8 symbols among 32 noise
#: tokens (T = 40), Adam 3e-3 (Mamba's: 16 tokens among 4,096, vocabulary 16)
_SC = ("task.L=32", "task.K=4", "task.alphabet=8", "optim.lr=3e-3")

CHECKS: tuple[Check, ...] = (
    Check(
        key="mamba-selective-copy",
        model="Mamba (S6) vs S4D",
        claim="The Selective Copying task 'has random spacing in between inputs and requires time-varying "
        "models that can selectively remember or ignore inputs depending on their content' (Fig. 2); Table 1 "
        "has the selective S6 layer solving it where the time-invariant S4 layer does not",
        source="Gu and Dao 2023 (arXiv:2312.00752), Fig. 2 and Sec. 4.1.1, Table 1 (the Fig. 2 caption checked "
        "against the paper's text; Table 1's accuracies were not checked against a copy here, so none is "
        "quoted)",
        setting="selective copying with 4 data tokens from 8 symbols among 32 noise tokens (T = 40, Mamba's: 16 "
        "among 4,096); two stacked layers of each (the Mamba block, the S4D layer); 8,000 parameters; Adam 3e-3, "
        "1,000 updates of batch 32",
        preset="field/selective_copy-lstm",
        params=8000,
        overrides=(*_SC, "model.num_layers=2"),
        train=_train(1000, 32),
        arms=(Arm("mamba", "mamba"), Arm("s4d", "s4d")),
        expect=(Expect("mamba", "s4d", 0.1),),
    ),
    Check(
        key="mamba-selective-copy-L128",
        model="Mamba (S6) vs S4D, longer",
        claim="As mamba-selective-copy: the time-invariant layer falls behind the selective one as the noise "
        "between the data tokens grows (Mamba's setting: L = 4,096)",
        source="Gu and Dao 2023 (arXiv:2312.00752), Sec. 4.1.1, Table 1",
        setting="mamba-selective-copy with 128 noise tokens instead of 32 (T = 136); two stacked layers of each; "
        "8,000 parameters; Adam 3e-3, 1,000 updates of batch 32",
        preset="field/selective_copy-lstm",
        params=8000,
        overrides=("task.L=128", "task.K=4", "task.alphabet=8", "optim.lr=3e-3", "model.num_layers=2"),
        train=_train(1000, 32),
        arms=(Arm("mamba", "mamba"), Arm("s4d", "s4d")),
        expect=(Expect("mamba", "s4d", 0.1),),
    ),
    Check(
        key="mamba-induction",
        model="Mamba (S6) vs S4D",
        claim="Mamba solves the induction heads task and keeps its accuracy on test sequences far longer "
        "than its training sequences, where the other models it is compared with do not",
        source="Gu and Dao 2023 (arXiv:2312.00752), Sec. 4.1.2, Table 2 (a qualitative reading; the table's "
        "lengths and accuracies were not checked against a copy here, so none is quoted)",
        setting="induction heads with 8 symbols, trained at T = 32 and tested at T = 32, 64, 128 and 256 (up to 8 "
        "times the training length; Mamba's: 16 symbols, 256 and up to 2^20); two stacked layers of each; 8,000 "
        "parameters; Adam 3e-3, 1,000 updates of batch 32",
        preset="field/induction-lstm",
        params=8000,
        overrides=("task.T=32", "task.alphabet=8", "model.num_layers=2", "optim.lr=3e-3"),
        train=_train(1000, 32),
        arms=(Arm("mamba", "mamba"), Arm("s4d", "s4d")),
        expect=(Expect("mamba", "s4d", 0.1), Expect("mamba", floor=0.9), Expect("mamba@T256", floor=0.9)),
        extra_eval=(("T64", ("task.T=64",)), ("T128", ("task.T=128",)), ("T256", ("task.T=256",))),
    ),
    Check(
        key="minrnn-layers",
        model="minGRU, minLSTM: 1 vs 3 layers",
        claim="On selective copying a single layer of minGRU or minLSTM does poorly and stacking more layers solves it",
        source="Feng et al. 2024, 'Were RNNs All We Needed?' (arXiv:2410.01201), Sec. 4, its selective-copying "
        "table (a qualitative reading; the table's accuracies were not checked against a copy here, so none is "
        "quoted)",
        setting="the selective copying task of mamba-selective-copy; 1 layer against 3 stacked layers (rnnlab's plain "
        "stacking: no residual or normalisation between layers), all at 8,000 parameters; Adam 3e-3, 1,000 "
        "updates of batch 32",
        preset="field/selective_copy-lstm",
        params=8000,
        overrides=_SC,
        train=_train(1000, 32),
        arms=(
            Arm("mingru-1", "mingru"),
            Arm("mingru-3", "mingru", ("model.num_layers=3",)),
            Arm("minlstm-1", "minlstm"),
            Arm("minlstm-3", "minlstm", ("model.num_layers=3",)),
        ),
        expect=(Expect("mingru-3", "mingru-1", 0.1), Expect("minlstm-3", "minlstm-1", 0.1)),
    ),
    Check(
        key="mqar-pairs",
        model="mLSTM vs LRU on MQAR",
        claim="At a fixed model width, the accuracy of recurrent and convolutional models on multi-query "
        "associative recall falls as the number of key-value pairs grows (Zoology); mLSTM and xLSTM do well on "
        "MQAR among the non-Transformer models (xLSTM)",
        source="Arora et al. 2023, 'Zoology' (arXiv:2312.04927), Sec. 3-4, Fig. 2; Beck et al. 2024, 'xLSTM' "
        "(arXiv:2405.04517), Sec. 4.1, its MQAR figure (qualitative statements; not checked against a copy here)",
        setting="MQAR at T = 32, vocabulary 64 (the authors': T 64 to 512, vocabulary 8,192), 2 against 8 "
        "key-value pairs, embedding 16; one layer; 8,000 parameters; Adam 3e-3, 1,000 updates of batch 32",
        preset="field/mqar-lstm",
        params=8000,
        overrides=("task.T=32", "task.vocab=64", "model.embedding=16", "optim.lr=3e-3"),
        train=_train(1000, 32),
        arms=(
            Arm("lru-2", "lru", ("task.num_kv_pairs=2",)),
            Arm("lru-8", "lru", ("task.num_kv_pairs=8",)),
            Arm("mlstm-2", "mlstm", ("task.num_kv_pairs=2",)),
            Arm("mlstm-8", "mlstm", ("task.num_kv_pairs=8",)),
        ),
        expect=(Expect("lru-2", "lru-8", 0.1), Expect("mlstm-8", "lru-8", 0.05)),
    ),
    Check(
        key="lru-ring",
        model="LRU: ring r_min = 0.9 vs 0",
        claim="Initialising the eigenvalues on a ring close to the unit circle (r_min = 0.9 instead of the "
        "whole disk, r_min = 0) is what lets the linear diagonal recurrence learn the long-range tasks "
        "(PathFinder, PathX), together with the gamma normalisation",
        source="Orvieto et al. 2023, 'Resurrecting Recurrent Neural Networks for Long Sequences' (ICML), Sec. "
        "3.3 and its ablation tables (qualitative statement; not checked against a copy here). The gamma "
        "normalisation is ablated apart (lru-gamma-norm)",
        setting="the copy task with 10 symbols to recall after L = 100 blanks (T = 120; the papers' LRA tasks "
        "are 1,024 to 16,384 long); one LRU layer without the block; 8,000 parameters; Adam 3e-3, 1,000 "
        "updates of batch 32",
        preset="ssm/lru-copy",
        params=8000,
        overrides=("task.L=100", "optim.name=adam", "optim.lr=3e-3", "optim.clip=1.0"),
        train=_train(1000, 32),
        arms=(Arm("r_min=0.9", "lru", ("model.cell_options.r_min=0.9",)), Arm("r_min=0", "lru")),
        expect=(Expect("r_min=0.9", "r_min=0", 0.05),),
        metric="test/recall_accuracy",
    ),
    Check(
        key="lru-gamma-norm",
        model="LRU: gamma normalisation on vs off",
        claim="The LRU normalises its input branch by gamma = sqrt(1 - |lambda|^2): with eigenvalues initialised "
        "near the unit circle the hidden state of the unnormalised recurrence grows with 1 / (1 - |lambda|^2) "
        "and the model trains worse on the long-range tasks without it",
        source="Orvieto et al. 2023, 'Resurrecting Recurrent Neural Networks for Long Sequences' (ICML), its "
        "normalisation section and ablation (qualitative statement; not checked against a copy here, so no "
        "number is quoted)",
        setting="the copy task of lru-ring (10 symbols to recall after L = 100 blanks, T = 120); one LRU layer "
        "without the block, ring r_min = 0.9; 8,000 parameters; Adam 3e-3, 1,000 updates of batch 32",
        preset="ssm/lru-copy",
        params=8000,
        overrides=(
            "task.L=100",
            "optim.name=adam",
            "optim.lr=3e-3",
            "optim.clip=1.0",
            "model.cell_options.r_min=0.9",
        ),
        train=_train(1000, 32),
        arms=(Arm("gamma", "lru"), Arm("no-gamma", "lru", ("model.cell_options.gamma_norm=false",))),
        expect=(Expect("gamma", "no-gamma", 0.05),),
        metric="test/recall_accuracy",
    ),
    Check(
        key="s4d-init",
        model="S4D-Lin vs S4D-Inv",
        claim="Both of S4D's simple diagonal initialisations, S4D-Lin (A_n = -1/2 + i pi n) and S4D-Inv "
        "(A_n = -1/2 + i (N/pi) (N/(2n+1) - 1)), train well, with similar results on the long-range tasks",
        source="Gu, Gupta, Goel and Re 2022, 'On the Parameterization and Initialization of Diagonal State "
        "Space Models' (NeurIPS), the S4D-Lin and S4D-Inv definitions and its comparison of initialisations "
        "(qualitative statement; its tables were not checked against a copy here, so no number is quoted)",
        setting="the copy task of lru-ring (10 symbols to recall after L = 100 blanks, T = 120; the paper's "
        "LRA tasks are 1,024 to 16,384 long); one S4D layer, N = 64; 8,000 parameters; Adam 3e-3, 1,000 "
        "updates of batch 32",
        preset="ssm/lru-copy",
        params=8000,
        overrides=("task.L=100", "optim.name=adam", "optim.lr=3e-3", "optim.clip=1.0"),
        train=_train(1000, 32),
        arms=(Arm("lin", "s4d"), Arm("inv", "s4d", ('model.cell_options.init="inv"',))),
        expect=(Expect("lin", floor=0.5), Expect("inv", floor=0.5), Expect("lin", "inv", 0.1, similar=True)),
        metric="test/recall_accuracy",
    ),
)

#: ``table``: each check's own budget (:attr:`Check.train`); ``tiny``: seconds, a well-formed record
BUDGETS = ("table", "tiny")


def _tiny(check: Check) -> tuple[str, ...]:
    """The tiny budget: two updates of batch two, evaluation sets of eight (numbers mean nothing)."""
    return (
        "train.steps=2",
        "train.batch_size=2",
        "train.eval_every=2",
        "train.eval_batch_size=8",
        "train.target_metric=",
        "task.val_size=8",
        "task.test_size=8",
    )


def check_by_key(keys) -> list[Check]:
    known = {c.key: c for c in CHECKS}
    names = list(dict.fromkeys(known if keys is None else keys))
    unknown = [k for k in names if k not in known]
    if not names or unknown:
        raise ConfigError(
            f"unknown check(s) {unknown or names} for rnnlab field --known; expected some of {', '.join(known)}"
        )
    return [known[k] for k in names]


def write_arm(check: Check, arm: Arm, train: tuple[str, ...], folder: Path) -> Path:
    """The arm's preset: the home preset with the cell swapped in (its cell options and group
    rates cleared where the cell changes), sized to ``check.params``, with the check's and the
    arm's overrides and the budget written in."""
    from .compare import _slug, swapped_data, write_preset_data
    from .config import apply_overrides

    data = apply_overrides(swapped_data(check.preset, check.params, arm.cell), [*check.overrides, *arm.options, *train])
    name = f"known-{check.key}-{_slug(arm.label.replace('=', ''))}"
    description = f"rnnlab field --known: {arm.label} for the check {check.key} ({check.preset})"
    return write_preset_data(data, folder, name, description)


def _extra_value(run_dir: Path, options: tuple[str, ...], metric: str, data_dir) -> float:
    """The run's best checkpoint scored on the test split of its task with ``options``."""
    import dataclasses

    from .config import apply_overrides
    from .rundir import load_run
    from .tasks import build_task
    from .train import evaluate

    cfg, _, model = load_run(run_dir, data_dir=data_dir, data=False)
    opts = apply_overrides({"task": dict(cfg.task.options)}, list(options))["task"]
    task = build_task(dataclasses.replace(cfg.task, options=opts), data_dir)
    metrics = evaluate(model, task, "test", cfg.train.eval_batch_size, cfg.train.eval_max_batches)
    return float(metrics[metric])


def _run_check(check: Check, budget: str, seeds, out: Path, data_dir, log) -> tuple[list, list, dict]:
    from types import SimpleNamespace

    from .field import _cpu_s, _row, _train, finished_value
    from .rundir import RunFiles

    cpu, started = _cpu_s(), time.time()
    train = check.train if budget == "table" else _tiny(check)
    paths = {arm.label: write_arm(check, arm, train, out / "presets") for arm in check.arms}
    log(f"{check.key}: {len(paths)} arms of {check.params} parameters x {len(seeds)} seeds ({budget} budget)")
    where, errors = _train(
        SimpleNamespace(key=f"known-{check.key}"), list(paths.values()), out, seeds, [], 1, "local", None, data_dir, log
    )
    rows, missing, reused = [], [], 0
    for arm in check.arms:
        dirs = where.get(str(paths[arm.label]), [])
        reused += sum(RunFiles(d).result.exists() and RunFiles(d).result.stat().st_mtime < started for d in dirs)
        done = []
        for seed, rd in zip(seeds, dirs, strict=True):
            value, result, _ = finished_value(rd, check.metric)
            if value is None:
                continue
            done.append(seed)
            rows.append(_row(check.key, arm.label, seed, value, result))
            for suffix, options in check.extra_eval:
                extra = _extra_value(Path(rd), options, check.metric, data_dir)
                rows.append({**_row(check.key, f"{arm.label}@{suffix}", seed, extra, result), "eval": list(options)})
        if len(done) < len(seeds):
            why = next((e for e in (errors.get(str(d)) or errors.get(str(d.parent)) for d in dirs) if e), "")
            missing.append(
                {"check": check.key, "arm": arm.label, "seeds": [s for s in seeds if s not in done],
                 "reason": why or "no finished run"}
            )  # fmt: skip
    info = {
        "model": check.model,
        "claim": check.claim,
        "source": check.source,
        "setting": check.setting,
        "preset": check.preset,
        "params": check.params,
        "metric": check.metric,
        "overrides": [*check.overrides, *train],
        "arms": {a.label: {"cell": a.cell, "options": list(a.options)} for a in check.arms},
        "expect": [e.__dict__ for e in check.expect],
        "extra_eval": {s: list(o) for s, o in check.extra_eval},
        "cpu_s": round(_cpu_s() - cpu, 1),
        "runs": len(check.arms) * len(seeds),
        "runs_reused": reused,
    }
    return rows, missing, info


def _carry_cpu(info: dict, previous: dict) -> dict:
    """A check whose every run was reused (trained by an earlier call) keeps the CPU time that the
    earlier call's record at the same path measured for it, where that record ran the same
    settings; else this call's."""
    old = (previous.get("checks") or {}).get(info["key"]) if previous.get("kind") == KIND else None
    if info["runs_reused"] == info["runs"] and old and old.get("overrides") == info["overrides"] and old.get("cpu_s"):
        return {**info, "cpu_s": old["cpu_s"], "cpu_s_from": old.get("cpu_s_from") or previous.get("date")}
    return info


def run_known(
    checks: list[str] | None = None,
    budget: str = "table",
    seeds: list[int] | int = 3,
    out: str | Path | None = None,
    record: str | Path | None = None,
    data_dir: str | None = None,
    log=print,
    command: str = "",
) -> dict:
    """Train every check's arms over ``seeds`` into ``out`` (default ``runs/known-<budget>``; a
    second call reuses the finished runs) and write the record (default ``out/known-results.json``).

    ``checks`` (a selection) merges into the record already at ``record``: the checks not selected
    keep their rows, missing runs and settings as that record has them (each check's ``git`` and
    ``date`` say which call ran it), the selected ones are replaced, in :data:`CHECKS`' order. A
    record of another budget or other seeds is refused rather than mixed."""
    from .rundir import git_state, versions

    if budget not in BUDGETS:
        raise ConfigError(f"the known checks' budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seeds:
        raise ConfigError("rnnlab field --known needs at least one seed (e.g. --seeds 0-2)")
    todo = check_by_key(checks)
    git = git_state()  # the tree the runs start from (a page edited while they run is not theirs)
    out = Path(out) if out else Path("runs") / f"known-{budget}"
    record = Path(record) if record else out / "known-results.json"
    try:
        previous = json.loads(record.read_text())
    except (OSError, ValueError):
        previous = {}
    kept = _kept_checks(previous, record, [c.key for c in todo], budget, seeds) if checks is not None else {}
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows, missing, info = [], [], {}
    for check in todo:
        r, m, i = _run_check(check, budget, seeds, out, data_dir, log)
        i = _carry_cpu({"key": check.key, **i}, previous)
        del i["key"]
        rows, missing, info[check.key] = rows + r, missing + m, {**i, "git": git, "date": date}
    order = [c.key for c in CHECKS] + [k for k in kept if k not in {c.key for c in CHECKS}]
    info = {k: info[k] if k in info else kept[k] for k in order if k in info or k in kept}
    rows = [r for r in previous.get("rows", []) if r["task"] in kept] + rows if kept else rows
    missing = [m for m in previous.get("missing", []) if m["check"] in kept] + missing if kept else missing
    rec = {
        "kind": KIND,
        "version": RECORD_VERSION,
        "date": date,
        "command": command,
        "budget": budget,
        "seeds": seeds,
        "checks": info,
        "git": git,
        "versions": versions(),
        "rows": rows,
        "missing": missing,
    }
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(rec, indent=0, separators=(",", ":")) + "\n")
    log(f"wrote {record}")
    return rec


def _kept_checks(previous: dict, record: Path, selected: list[str], budget: str, seeds: list[int]) -> dict:
    """The checks of the record at ``record`` that a call running only ``selected`` keeps (each
    with its provenance: the record's ``git`` and ``date`` where it has none of its own)."""
    if not previous:
        return {}
    if previous.get("kind") != KIND or previous.get("version") != RECORD_VERSION:
        raise ConfigError(
            f"{record} is not a known-behaviours record of version {RECORD_VERSION}: --checks merges into the "
            f"record at --record; give another --record path"
        )
    if previous.get("budget") != budget or previous.get("seeds") != seeds:
        raise ConfigError(
            f"{record} holds budget {previous.get('budget')!r} with seeds {previous.get('seeds')}; --checks "
            f"{','.join(selected)} at budget {budget!r} with seeds {seeds} would mix them in one record: run them at "
            f"the record's budget and seeds, or give another --record path"
        )
    keep, code = {}, {c.key: c for c in CHECKS}
    for key, i in previous.get("checks", {}).items():
        if key not in selected:
            keep[key] = {**i, "git": i.get("git", previous.get("git")), "date": i.get("date", previous.get("date"))}
            c = code.get(key)
            if c is not None and i.get("overrides") == [*c.overrides, *c.train]:
                keep[key]["source"] = c.source  # the citation's wording follows the code: the settings are what ran
    return keep


# --- reading the record (torch-free) ---------------------------------------------------------


def values(record: dict, check: str) -> dict[str, list[float]]:
    """``{label: [value per seed, in seed order]}`` of one check."""
    out: dict[str, list[tuple[int, float]]] = {}
    for r in record["rows"]:
        if r["task"] == check and isinstance(r.get("value"), (int, float)) and math.isfinite(r["value"]):
            out.setdefault(r["cell"], []).append((r["seed"], float(r["value"])))
    return {k: [v for _, v in sorted(vs)] for k, vs in out.items()}


def _mean_sd(v: list[float]) -> tuple[float, float]:
    m = sum(v) / len(v)
    return m, (math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0)


def holds(expect: dict, vals: dict[str, list[float]]) -> bool | None:
    """Whether one comparison holds on the record's values (None: a side has no finished run)."""
    a = vals.get(expect["better"])
    if not a:
        return None
    if not expect["worse"]:
        return _mean_sd(a)[0] >= expect["floor"]
    b = vals.get(expect["worse"])
    if not b:
        return None
    if expect.get("similar"):
        return abs(_mean_sd(a)[0] - _mean_sd(b)[0]) <= expect["margin"]
    return _mean_sd(a)[0] - _mean_sd(b)[0] >= expect["margin"] and min(a) > max(b)


def verdict(record: dict, check: str) -> str:
    """ "shown at this scale", "not shown at this scale (finding): ..." or "no verdict: ..."."""
    info, vals = record["checks"][check], values(record, check)
    failed, absent = [], []
    for e in info["expect"]:
        ok = holds(e, vals)
        text = Expect(**e).text()
        (absent if ok is None else failed if not ok else []).append(text)
    if absent:
        return "no verdict: no finished run for " + "; ".join(absent)
    if failed:
        return "not shown at this scale (finding): fails " + "; ".join(failed)
    return "shown at this scale"


def _fmt(m: float, sd: float) -> str:
    return f"{m:.3f} ± {sd:.3f}"


def format_table(record: dict, source: str = "") -> str:
    """The record as Markdown: a row per check (the paper's statement and source, our setting, our
    numbers as mean ± sample standard deviation over the seeds, the verdict), the budget below."""
    lines = [
        "| check | the paper's statement (source) | our setting (scaled down) | ours: mean ± std over seeds | verdict |",
        "|---|---|---|---|---|",
    ]
    for key, info in record["checks"].items():
        vals = values(record, key)
        metric = info["metric"].split("/", 1)[1]
        nums = "; ".join(f"{lbl} {_fmt(*_mean_sd(v))}" for lbl, v in vals.items()) or "-"
        tests = "; ".join(Expect(**e).text() for e in info["expect"])
        lines.append(
            f"| {key} ({info['model']}) | {info['claim']} ({info['source']}) | {info['setting']} | "
            f"{metric}: {nums} (tested: {tests}) | {verdict(record, key)} |"
        )
    git = record.get("git") or {}
    commit = (git.get("commit") or "?")[:10] + (" (dirty tree)" if git.get("dirty") else "")
    cpu = sum(i.get("cpu_s", 0.0) for i in record["checks"].values())
    where = f"`{source}`: " if source else ""
    caption = (
        f"*{where}each modern model's known behaviour beside ours, {len(record['seeds'])} seed(s) per model, "
        f"budget `{record['budget']}`, {cpu / 60:.1f} CPU-minutes measured; commit {commit}, {record['date']}. "
        "A comparison A > B holds when A's mean is above B's by the margin and every seed of A is above every "
        "seed of B; a behaviour not shown at this scale is a finding about this scale, not a refutation."
        + (" The tiny budget only checks that the record is well formed: its numbers and verdicts mean nothing.*"
           if record["budget"] == "tiny" else "*")
    )  # fmt: skip
    out = [caption, "", *lines, "", "| check | home preset | every run | CPU-minutes |", "|---|---|---|---|"]
    for key, info in record["checks"].items():
        over = " ".join(info["overrides"])
        when = f" (its runs trained by the call of {info['cpu_s_from']})" if info.get("cpu_s_from") else ""
        own = info.get("git") or git
        if (own.get("commit"), own.get("dirty")) != (git.get("commit"), git.get("dirty")):  # merged from another call
            dirty = " (dirty tree)" if own.get("dirty") else ""
            when += f" (run at commit {(own.get('commit') or '?')[:10]}{dirty}, {info.get('date', '?')})"
        out.append(f"| {key} | `{info['preset']}` | {over} | {info.get('cpu_s', 0.0) / 60:.1f}{when} |")
    if record["missing"]:
        out += ["", "Without a finished run:", ""]
        out += [f"* {m['check']} / {m['arm']}, seeds {m['seeds']}: {m['reason']}" for m in record["missing"]]
    return "\n".join(out)


def check_record(record: dict, checks: list[str] | None = None) -> list[str]:
    """Problems of a record: the wrong kind, a check of :data:`CHECKS` absent, an arm with fewer
    runs than seeds and no reason."""
    if record.get("kind") != KIND or record.get("version") != RECORD_VERSION:
        return [f"not a known-behaviours record of version {RECORD_VERSION}"]
    problems = []
    for key in [c.key for c in CHECKS] if checks is None else checks:
        info = record["checks"].get(key)
        if info is None:
            problems.append(f"check {key} absent")
            continue
        vals = values(record, key)
        excused = {m["arm"] for m in record["missing"] if m["check"] == key}
        for label in info["arms"]:
            if len(vals.get(label, [])) < len(record["seeds"]) and label not in excused:
                problems.append(
                    f"{key}/{label}: {len(vals.get(label, []))} of {len(record['seeds'])} runs and no reason"
                )
    return problems


def main_known(**kwargs) -> int:
    """``rnnlab field --known``: train (or continue) the checks, write the record, print the table."""
    from .runtime import show_progress

    log = functools.partial(show_progress, logging.getLogger(__name__))
    command = "rnnlab " + " ".join(sys.argv[1:]) if sys.argv and "field" in sys.argv else "rnnlab field --known"
    try:
        rec = run_known(log=log, command=command, **kwargs)
    except KeyboardInterrupt:
        print("rnnlab: interrupted: finished runs are kept; rerun the same command to continue", file=sys.stderr)
        return 130
    print(format_table(rec))
    return 0
