"""Declared sweeps: the grids over which the ledger judges a claim that something fails "for any
hyperparameters" (``Part.sweep``).

One run that works refutes such a claim, at any setting (3 seeds or more at it, ``FEW_SEEDS``);
it is confirmed only when every setting of its declared sweep has been run and confirms it
(``findings.judge_over_settings``). A sweep is a shipped suite (``rnnlab/suites/<name>.toml``, its
one home: presets, ``[grid]``, seeds); what is declared here is where each of its own settings
comes from (the ``Source`` of every grid key and of the seed count: ``text``, ``code`` with file
and line, or ``ours`` with the reason). Every other setting of its runs is its presets', whose
sources ``rnnlab.ledger.sources`` holds (``tests/ledger/test_declared.py`` checks both).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .rows import Source, ours_source


@dataclass(frozen=True)
class DeclaredSweep:
    """A suite run as a declared sweep, with the source of each setting it adds to its presets
    (``"seeds"``: how many seeds each setting has; a grid key: its values)."""

    suite: str
    sources: dict[str, Source]
    why: str  # the claim it judges, in a few words
    paper: str  # the paper of that claim (rows.PAPERS)


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
