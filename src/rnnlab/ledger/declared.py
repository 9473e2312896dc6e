"""Declared sweeps: the grids over which the ledger judges a claim that something fails "for any
hyperparameters" (``Part.sweep``).

One run that works refutes such a claim, at any setting (3 seeds or more at it, ``FEW_SEEDS``);
it is confirmed only when every setting of its declared sweep has been run and confirms it
(``findings.judge_over_settings``). A sweep is a shipped suite (``rnnlab/suites/<name>.toml``, its
one home: presets, ``[grid]``, seeds); what is declared here is where each of its own settings
comes from (the ``Source`` of every grid key and of the seed count: ``text``, ``code`` with file
and line, or ``ours`` with the reason). Every other setting of its runs is its presets', whose
sources ``rnnlab.ledger.sources`` holds (``tests/ledger/test_declared.py`` checks both).

A sweep too wide to run whole at the full budget is **staged** (``DeclaredSweep.promote``): its
suite is the screening stage (every grid point at one seed and a short budget), and a
:class:`Promotion` rule, declared with the sweep before any of its runs, takes the best points of
each preset on to the full budget at 3 seeds (:func:`promoted`; ``rnnlab reproduce promote``
writes those runs as suites). The screening runs are a reduced budget and decide no verdict; a
claim that something works is confirmed by one promoted point (or any other full-budget setting)
at 3 seeds, and one that something fails is confirmed only when every promoted point confirms it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from .rows import Source, ours_source


@dataclass(frozen=True)
class Promotion:
    """The rule that takes the points of a screening stage to the full budget: per preset, the
    ``top`` grid points with the lowest mean ``metric`` (its final value, ``Record.value``) over
    their screening seeds, each run ``steps`` steps at ``seeds`` seeds. A point is taken only when
    every one of its screening seeds has a finite value (a diverged or missing run leaves it
    behind); ties go by grid order."""

    metric: str
    top: int
    steps: int
    seeds: int

    def describe(self) -> str:
        return (
            f"per preset, the {self.top} points with the lowest mean final {self.metric} over their screening "
            f"seeds (every seed finite; ties by grid order) go on to {self.steps:,} steps at {self.seeds} seeds"
        )


@dataclass(frozen=True)
class DeclaredSweep:
    """A suite run as a declared sweep, with the source of each setting it adds to its presets
    (``"seeds"``: how many seeds each setting has; a grid key: its values; ``"promotion"``: the
    rule of a staged sweep)."""

    suite: str
    sources: dict[str, Source]
    why: str  # the claim it judges, in a few words
    paper: str  # the paper of that claim (rows.PAPERS)
    #: a staged sweep: the suite is its screening stage, this rule takes points to the full budget
    promote: Promotion | None = None


#: the smallest number of runs of which none reaching a threshold bounds the share at
#: ``rules.NEVER_BOUND`` (0.1): the 95% Clopper-Pearson upper bound of 0 of 36 is 0.097
NONE_SEEDS = 36

DECLARED: dict[str, DeclaredSweep] = {
    "dmu-adding-any-lr": DeclaredSweep(
        "dmu-adding-any-lr",
        {
            "optim.lr": ours_source(
                "Sec. IV-A says RNN and RHN reach no threshold 'for any hyperparameters' and names no search; the "
                "released scripts take the rate as an argument (Table X: RNN 0.01, RHN 0.02). Adam's rate is the "
                "setting that decides whether a small RNN trains at all: swept over three decades, 1e-4 to 1e-1, in "
                "steps of about half a decade (1, 3, 10, ...), beside each preset's own rate"
            ),
            "seeds": ours_source(
                f"{NONE_SEEDS} seeds at every setting: the fewest of which none reaching a threshold confirms 'none' "
                f"there (95% Clopper-Pearson upper bound of the share at most 0.1, the rule's reading); 3 seeds at a "
                f"setting already refute the claim when one run reaches a threshold"
            ),
        },
        "DMU adding (Fig. 3): RNN and RHN reach no threshold for any hyperparameters",
        "dmu",
    ),
}


#: Henaff et al.: the settings a screening grid sweeps, none in the text we have and no code released
#: (``rows.OPEN_SETTINGS``); each source says why these values
_HENAFF_SCREEN = {
    "optim.name": ours_source(
        "the text names no optimizer and no code was released: RMSprop (the presets' choice) and Adam, the two "
        "adaptive optimizers the other papers here train these tasks with"
    ),
    "optim.lr": ours_source(
        "not in the text: 1e-4 and 1e-3 with each optimizer, a decade apart around the presets' rates (copy and "
        "adding 1e-4, variable-length copy 1e-3); at 1e-3 the LT-ORNN diverges at step 2 with the presets' init "
        "and clipping, which the clipping and init-scale axes are there to meet"
    ),
    "optim.clip": ours_source(
        "not in the text: the presets' 1.0 and a tenth of it; ReLU inputs piling up on an orthogonal W over "
        "hundreds of steps give first gradients far above 1, which a tighter threshold bounds"
    ),
    "train.batch_size": ours_source(
        "not in the text: the presets' 128 and 32 (four times the steps for the same data: noisier, cheaper steps)"
    ),
    "seeds": ours_source(
        "one seed at each screening point (the screen ranks points, it judges none: a reduced budget decides no "
        "verdict); 3 at each promoted point, the fewest a verdict takes (findings.FEW_SEEDS)"
    ),
    "promotion": ours_source(
        "declared with the grid, before any run: the final validation loss is the loss each task trains "
        "(cross-entropy on copy, MSE on adding), graded where recall and 'solved' are not; 3 points a preset "
        "keep the full stage at 9 runs a preset (its price: docs/reproduce.md, Declared sweeps)"
    ),
}
_LT_INIT = {
    "model.cell_options.input_scale": ours_source(
        "the text gives the LT-RNN's structure, not the init of U: rnnlab's U(+-1/sqrt(H)) and a quarter of it; "
        "smaller input weights put less mass on the ReLU inputs that add up on a norm-preserving W over T + 2K steps"
    ),
    "model.cell_options.bias_value": ours_source(
        "not in the text for training; its adding construction (Sec. 3.2.1) has b = -1 at unit input weights "
        "(U = [1, 1]), a bias that keeps the ReLU input path shut but at the marked steps: 0 (the presets') and "
        "-0.02, the same sign at a fifth of our input range 1/sqrt(H) (0.11 at H = 80, 0.09 at H = 128)"
    ),
}


def _henaff_steps(screen: int, preset: int, full: int, why_full: str) -> Source:
    return ours_source(
        f"not in the text: the screen at a tenth of the preset's budget ({screen:,} of {preset:,} steps) ranks the "
        f"points by how far they get and judges none; the promoted points run {full:,} steps ({why_full})"
    )


_T500_STEPS = _henaff_steps(
    500,
    5000,
    20000,
    "4x the preset's 5,000, at which the LT-ORNN's copy recall is 0.89 at RMSprop 1e-4 in records/henaff-T500",
)
#: T=750: the presets' budget is T=500's (5,000 steps), and so are the screen's and the promoted points'
_T750_STEPS = _henaff_steps(500, 5000, 20000, "4x the preset's 5,000, as at T=500")
_T100_STEPS = _henaff_steps(2000, 20000, 20000, "the preset's own budget; the text gives none for Fig. 5")
#: the rule of every Henaff screen: the 3 best points of a preset to 3 seeds at the full budget
_HENAFF_T500 = Promotion("val/loss", 3, 20000, 3)
_HENAFF_T100 = Promotion("val/loss", 3, 20000, 3)
_LT_T500 = {**_HENAFF_SCREEN, **_LT_INIT, "train.steps": _T500_STEPS}
_LT_T750 = {**_HENAFF_SCREEN, **_LT_INIT, "train.steps": _T750_STEPS}

DECLARED.update(
    {
        "henaff-copy-T500-screen": DeclaredSweep(
            "henaff-copy-T500-screen",
            _LT_T500,
            "Henaff copy at T=500 (Fig. 2): LT-ORNN solves it, LT-IRNN does not",
            "henaff",
            _HENAFF_T500,
        ),
        "henaff-adding-T500-screen": DeclaredSweep(
            "henaff-adding-T500-screen",
            _LT_T500,
            "Henaff adding at T=500 (Fig. 3): LT-IRNN solves it, LT-ORNN behind",
            "henaff",
            _HENAFF_T500,
        ),
        "henaff-pool-T500-screen": DeclaredSweep(
            "henaff-pool-T500-screen",
            _LT_T500,
            "Henaff pooling at T=500 (Fig. 4): LT-ORNN + pooling solves copy, approximately solves adding",
            "henaff",
            _HENAFF_T500,
        ),
        "henaff-copy-T750-screen": DeclaredSweep(
            "henaff-copy-T750-screen",
            _LT_T750,
            "Henaff copy at T=750 (Fig. 2): LT-ORNN solves it, LT-IRNN does not",
            "henaff",
            _HENAFF_T500,  # one rule at both timescales: the same full budget
        ),
        "henaff-pool-T750-screen": DeclaredSweep(
            "henaff-pool-T750-screen",
            _LT_T750,
            "Henaff pooling at T=750 (Fig. 4): LT-ORNN + pooling solves copy, approximately solves adding",
            "henaff",
            _HENAFF_T500,
        ),
        "henaff-copy_variable-screen": DeclaredSweep(
            "henaff-copy_variable-screen",
            {**_HENAFF_SCREEN, **_LT_INIT, "train.steps": _T100_STEPS},
            "Henaff variable-length copy (Fig. 5): the LT-RNNs stay at chance",
            "henaff",
            _HENAFF_T100,
        ),
        "henaff-copy_variable-lstm-screen": DeclaredSweep(
            "henaff-copy_variable-lstm-screen",
            {**_HENAFF_SCREEN, "train.steps": _T100_STEPS},
            "Henaff variable-length copy (Fig. 5): the LSTM solves it",
            "henaff",
            _HENAFF_T100,
        ),
    }
)


def declared(name: str) -> DeclaredSweep:
    if name not in DECLARED:
        raise KeyError(f"no declared sweep {name!r}; declared: {sorted(DECLARED)}")
    return DECLARED[name]


@functools.cache
def sweep_points(name: str) -> dict[str, tuple[tuple[tuple[str, ...], int], ...]]:
    """``{preset: ((differences from the preset, seeds), ...)}``: each grid point of the declared
    sweep ``name`` in the words the records use for a run's differences from its preset (the
    settings ``judge_over_settings`` tells apart), with the seeds the suite gives it."""
    from .. import config
    from ..suite import grid_points, load_suite
    from .records import _diffs, _resolved, preset_configs

    suite = load_suite(declared(name).suite)
    out = {}
    for preset in suite.presets:
        base = preset_configs()[preset]
        points = []
        for point in grid_points(suite.grid, f"suite {suite.name}"):
            run = _resolved(config.load(preset, [*suite.set_for(preset), *point]).to_dict())
            points.append((tuple(_diffs(run, base)), len(suite.seeds_for(preset))))
        out[preset] = tuple(dict.fromkeys(points))  # two grid points of one configuration are one setting
    return out


def sweep_progress(name: str, ev) -> list[tuple[str, tuple[str, ...], int, int]]:
    """``(preset, differences, seeds in the records, seeds declared)`` for each setting of the
    declared sweep ``name``: how much of it the records of ``ev`` (an ``Evidence``) hold."""
    from ..suite import load_suite

    suite = load_suite(declared(name).suite)
    out = []
    for preset, points in sweep_points(name).items():
        seeds = set(suite.seeds_for(preset))
        groups = {g.diffs: g for g in ev.groups(preset, same_config=False)}
        for diffs, n in points:
            g = groups.get(diffs)
            have = set() if g is None else {r.config.get("train", {}).get("seed") for r in g.records}
            out.append((preset, diffs, len(have & seeds), n))
    return out


def _point_diffs(preset: str, overrides) -> tuple[str, ...]:
    """The differences from ``preset`` the records give a run with ``overrides``."""
    return _diffs_of(preset, tuple(overrides))


@functools.cache
def _diffs_of(preset: str, overrides: tuple[str, ...]) -> tuple[str, ...]:
    from .. import config
    from .records import _diffs, _resolved, preset_configs

    return tuple(_diffs(_resolved(config.load(preset, list(overrides)).to_dict()), preset_configs()[preset]))


def _with_steps(point: list[str], steps: int) -> list[str]:
    return [o for o in point if not o.startswith("train.steps=")] + [f"train.steps={steps}"]


def promoted(name: str, ev, presets=None) -> tuple[dict[str, list[list[str]]], str]:
    """The full-budget points of the staged sweep ``name`` by its :class:`Promotion` rule, read
    from the screening runs of ``ev`` (an ``Evidence``): ``({preset: [overrides of each promoted
    point, at the full budget]}, "")``, or ``({}, why)`` while the records do not hold the whole
    screening stage (every point of every preset at its seeds; ``presets``: of these only)."""
    from ..suite import grid_points, load_suite

    sweep = declared(name)
    rule = sweep.promote
    if rule is None:
        raise ValueError(f"declared sweep {name!r} is not staged (it has no promotion rule)")
    suite = load_suite(sweep.suite)
    grid = grid_points(suite.grid, f"suite {suite.name}")
    out, missing = {}, 0
    for preset in [p for p in suite.presets if presets is None or p in presets]:
        seeds = set(suite.seeds_for(preset))
        groups = {g.diffs: g for g in ev.groups(preset, same_config=False)}
        scored, seen = [], set()
        for i, point in enumerate(grid):
            diffs = _point_diffs(preset, [*suite.set_for(preset), *point])
            if diffs in seen:  # two grid points of one configuration are one setting
                continue
            seen.add(diffs)
            g = groups.get(diffs)
            recs = [] if g is None else [r for r in g.records if r.config.get("train", {}).get("seed") in seeds]
            have = {r.config["train"]["seed"] for r in recs}
            if len(have) < len(seeds):
                missing += len(seeds) - len(have)
                continue
            vals = [r.value(rule.metric) for r in recs]
            if all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
                scored.append((sum(vals) / len(vals), i, point))
        out[preset] = [_with_steps(p, rule.steps) for _, _, p in sorted(scored)[: rule.top]]
    if missing:
        return {}, f"its screening stage is not complete: {missing} of its runs are not in the records"
    return out, ""


def declared_points(name: str, ev, presets=None) -> tuple[dict[str, tuple[tuple[tuple[str, ...], int], ...]], str]:
    """The settings over which the declared sweep ``name`` confirms a claim, as
    :func:`sweep_points` gives them: its grid points, or (a staged sweep) the points its rule
    promotes from the screening runs of ``ev``, each with the rule's seeds; and ``""``, or why
    they are not known yet (the screen of ``presets``, default all, is not complete)."""
    rule = declared(name).promote
    if rule is None:
        return sweep_points(name), ""
    chosen, why = promoted(name, ev, presets)
    if why:
        return {}, why
    return {p: tuple((_point_diffs(p, o), rule.seeds) for o in pts) for p, pts in chosen.items()}, ""


def full_stage_suites(name: str, ev) -> tuple[dict[str, str], str]:
    """The full stage of the staged sweep ``name`` as suite files: ``({suite name: TOML text}, "")``,
    one suite per preset (its promoted points as one tied grid axis, the rule's seeds), or
    ``({}, why)`` while the screen is not complete."""
    from ..config import dump_toml, parse_override, toml_value
    from ..suite import load_suite

    chosen, why = promoted(name, ev)
    if why:
        return {}, why
    screen, rule = load_suite(declared(name).suite), declared(name).promote
    out = {}
    for preset, pts in chosen.items():
        if not pts:
            continue
        full = f"{name.removesuffix('-screen')}-full-{preset.split('/')[-1]}"
        entries = [{".".join(parse_override(o)[0]): parse_override(o)[1] for o in p} for p in pts]
        data = {
            "name": full,
            "description": f"The full stage of the declared sweep {name} for {preset}: {rule.describe()} "
            f"(rnnlab.ledger.declared; written by rnnlab reproduce promote from the screening records).",
            "presets": [preset],
            "seeds": list(range(rule.seeds)),
            "set": ["train.checkpoint_every=500"],  # full-budget jobs of hours: a checkpoint every few minutes
            "metrics": screen.metrics,
            "ensemble": True,
        }
        text = dump_toml(data) + "\n[grid]\npoint = [\n"
        for e in entries:
            text += "    {" + ", ".join(f'"{k}" = {toml_value(v)}' for k, v in e.items()) + "},\n"
        out[full] = text + "]\n"
    return out, ""


def main_promote(roots, output: str, paper: str | None = None) -> int:
    """``rnnlab reproduce promote RECORDS -o DIR``: for each staged declared sweep (of ``paper``),
    the full stage its rule takes from the screening runs in ``roots``, written as one suite file
    a preset in ``DIR`` (``rnnlab suite DIR/<name>.toml`` runs it); a sweep whose screen is not
    complete says what is missing and writes nothing."""
    from pathlib import Path

    from ..config import ConfigError
    from .records import Evidence, load_records

    if not output:
        raise ConfigError("rnnlab reproduce promote needs -o DIR: the folder for the full stage's suite files")
    ev = Evidence(*load_records([Path(r) for r in roots]))
    out = Path(output)
    for name, sweep in DECLARED.items():
        if sweep.promote is None or (paper and sweep.paper != paper):
            continue
        suites, why = full_stage_suites(name, ev)
        if why:
            print(f"{name}: nothing promoted yet ({why}); run: rnnlab suite {name}")
            continue
        out.mkdir(parents=True, exist_ok=True)
        for full, text in suites.items():
            (out / f"{full}.toml").write_text(text)
            print(
                f"{name}: wrote {out / f'{full}.toml'} ({sweep.promote.describe()}); run: rnnlab suite {out / full}.toml"
            )
    return 0
