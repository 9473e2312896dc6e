"""Declared sweeps (rnnlab.ledger.declared): a claim that a model fails "for any hyperparameters"
is refuted by one setting where it works (3 seeds or more there) and confirmed only over the
whole declared sweep, whose every setting has a source.

The DMU adding parts ("RNN and RHN are not able to reach any threshold within 100 training epochs
for any hyperparameters") are judged over ``dmu-adding-any-lr``: fake records of the grid's runs
(written as the trainer writes them) take the judgement through each of its outcomes.
"""

import math
from pathlib import Path

from conftest import judge, write_record
from rnnlab import config
from rnnlab.ledger import declared, records, sources
from rnnlab.ledger.rules import NEVER_BOUND
from rnnlab.suite import grid_points, load_suite

RNN = "RNN reaches no threshold, for any hyperparameters"
SWEEP = "dmu-adding-any-lr"


def test_every_setting_of_a_declared_sweep_has_a_source():
    """The sweep's own settings (each grid key, the seed count) are declared with a source; every
    other setting of its runs is its presets', each of which is audited with nothing unsourced."""
    for name, sweep in declared.DECLARED.items():
        suite = load_suite(sweep.suite)
        keys = {o.split("=", 1)[0] for point in grid_points(suite.grid) for o in point}
        assert keys | {"seeds"} == set(sweep.sources), name
        for src in sweep.sources.values():
            assert src.kind in ("text", "code", "ours") and (src.kind != "ours" or src.why)
        for preset in suite.presets:
            assert sources.audited(preset) and not sources.unsourced(preset), preset
        # the suite's overrides beside the grid change no outcome setting
        for preset in suite.presets:
            assert sources.outcome_settings(preset) == _outcome(preset, suite.set_for(preset)), preset


def _outcome(preset, overrides):
    """The outcome settings of ``preset`` with ``overrides`` (as sources.outcome_settings reads them)."""
    cfg = config.load(preset, overrides)
    base = config.load(preset)
    assert cfg.to_dict()["task"] == base.to_dict()["task"] and cfg.model == base.model and cfg.optim == base.optim
    return sources.outcome_settings(preset)


def test_the_dmu_sweep_spans_three_decades_log_spaced_with_the_seeds_none_needs():
    suite = load_suite(SWEEP)
    assert set(suite.presets) == {"dmu/code/adding-rnn", "dmu/code/adding-rhn"}  # the claim's two modules, as released
    (axis,) = suite.grid.values()
    assert min(axis) == 1e-4 and max(axis) == 1e-1 and axis == sorted(axis)
    steps = [math.log10(b / a) for a, b in zip(axis, axis[1:])]
    assert all(0.45 <= s <= 0.55 for s in steps), steps  # about half a decade each
    # 0 of n runs: the 95% Clopper-Pearson upper bound of the share is 1 - 0.025^(1/n)
    upper = lambda n: 1 - 0.025 ** (1 / n)  # noqa: E731
    n = next(n for n in range(1, 200) if upper(n) <= NEVER_BOUND)
    assert declared.NONE_SEEDS == n == len(suite.seeds) == 36
    assert suite.ensemble is True  # the rates of a preset are the members of one ensemble


def test_a_grid_point_is_named_as_the_records_name_a_run_of_it(tmp_path):
    """Round trip: a run written at a grid point's rate is attributed to the preset with exactly
    the differences the declared sweep expects for that point (so the judge finds it)."""
    points = declared.sweep_points(SWEEP)["dmu/code/adding-rnn"]
    assert len(points) == 7 and all(n == 36 for _, n in points)
    assert ((), 36) in points  # 0.01 is Table X's rate, the preset's own
    for lr in (1e-4, 3e-2):
        write_record(tmp_path / str(lr), "dmu/code/adding-rnn", 0, {"test/loss": 0.04}, [f"optim.lr={lr}"])
    recs = records.load_records([tmp_path])[0]
    records.attribute(recs)
    assert {r.preset for r in recs} == {"dmu/code/adding-rnn"}
    assert {r.diffs for r in recs} == {("optim.lr 0.0001 (preset 0.01)",), ("optim.lr 0.03 (preset 0.01)",)}
    assert {r.diffs for r in recs} < {d for d, _ in points}


def _runs(root, lr, seeds, reach=()):
    """Runs of the released RNN at ``lr`` (None: the preset's own rate); the seeds in ``reach``
    reach val loss 1e-3 at their second epoch, the others stay at 0.5."""
    for seed in seeds:
        rows = [{"step": 200 * k, "val/loss": 1e-3 if seed in reach and k >= 2 else 0.5} for k in (1, 2, 3)]
        over = [] if lr is None else [f"optim.lr={lr}"]
        write_record(root / f"lr{lr}", "dmu/code/adding-rnn", seed, {"test/loss": 0.04}, over, metrics=rows)


def test_confirmed_only_over_the_whole_declared_sweep(tmp_path):
    """Settings where no run reaches a threshold leave the part open until every grid point has
    its 36 seeds; then it is confirmed as released (over the sweep); the text's settings (paper
    protocol, no declared sweep) stay untested here."""
    _runs(tmp_path, None, range(36))  # the preset's own rate, 0.01: one grid point
    _runs(tmp_path, 1e-4, range(36))
    _runs(tmp_path, 1e-1, range(3))  # too few seeds there to say 'none'
    v = judge(RNN, tmp_path)
    assert v.startswith(
        "inconclusive (settings: the preset's own: confirmed; optim.lr 0.0001 (preset 0.01): confirmed; "
        "optim.lr 0.1 (preset 0.01): inconclusive; mixed in the 3 settings tried; "
    ), v
    assert (
        "confirmed only over the declared sweep `dmu-adding-any-lr` (7 settings x 36 seeds): 4 settings not run yet, 1 undecided)"
        in v
    )
    assert v.endswith("as released (code protocol); untested with the text's settings (paper protocol)")
    for lr in (3e-4, 1e-3, 3e-3, 3e-2):
        _runs(tmp_path, lr, range(36))
    _runs(tmp_path, 1e-1, range(3, 36))
    v = judge(RNN, tmp_path)
    assert v.startswith(
        "confirmed (over the declared sweep `dmu-adding-any-lr` (7 settings x 36 seeds); 7 settings tried: "
    ), v
    # a setting beside the sweep (a longer budget, say) that works still refutes it
    _runs(tmp_path, 2e-2, range(3), reach={1})
    v = judge(RNN, tmp_path)
    assert v.startswith("refuted (setting: optim.lr 0.02 (preset 0.01); 8 settings tried) as released"), v


def test_one_setting_where_it_works_with_three_seeds_refutes_it(tmp_path):
    """One of 3 runs at 3e-2 reaches a threshold: refuted, the setting named, the rest of the
    sweep unrun. With 2 seeds there it cannot refute (3 are needed: FEW_SEEDS)."""
    _runs(tmp_path, None, range(36))
    _runs(tmp_path, 3e-2, range(2), reach={1})
    v = judge(RNN, tmp_path)
    assert v.startswith("inconclusive (settings: "), v
    assert "optim.lr 0.03 (preset 0.01): inconclusive" in v
    _runs(tmp_path, 3e-2, [2])
    v = judge(RNN, tmp_path)
    assert v.startswith("refuted (setting: optim.lr 0.03 (preset 0.01); 2 settings tried) as released (code protocol)")


def test_the_sweep_is_priced_run_by_run_and_a_stage_by_its_seeds(capsys, monkeypatch):
    """``rnnlab suite NAME --price``: every grid point's runs priced (the rates of a preset are one
    ensemble job whose members' times add up), equal to the sum over runs of each run's own
    price; ``--seeds 0-2`` prices that stage only. Nothing runs."""
    from rnnlab.cli import main
    from rnnlab.ledger import price

    ROOT = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(ROOT)
    suite = load_suite(SWEEP)
    pricer = price.Pricer(price.timing_records([ROOT / "records"]))
    jobs = price.suite_jobs(suite, pricer)
    assert [p for p, _, _ in jobs] == suite.presets  # one ensemble per preset: 7 rates x 36 seeds
    by_run = 0.0
    for preset in suite.presets:
        for point in grid_points(suite.grid):
            t = pricer.timing(preset, overrides=(*suite.set_for(preset), *point))
            by_run += len(suite.seeds) * t.seconds(20000, 200)  # the code protocol: 20,000 steps, 100 evaluations
    hours, unpriced = price.suite_hours(suite, pricer)
    assert not unpriced and math.isclose(hours, by_run / 3600, rel_tol=1e-9)
    assert main(["suite", SWEEP, "--price", "--seeds", "0-2"]) == 0
    out = capsys.readouterr().out
    assert f"suite {SWEEP}: 42 runs in 2 job(s), {hours / 12:.2f} CPU-hours" in out
    assert not (ROOT / "runs" / SWEEP).exists()


def test_the_plan_lists_a_declared_sweep_until_the_records_hold_it(tmp_path):
    """``rnnlab reproduce plan`` names each incomplete declared sweep with its command and how
    many of its runs the records hold; a paper without one says None."""
    from rnnlab.ledger.plan import make_plan, render

    _runs(tmp_path, 1e-4, range(3))
    _runs(tmp_path, 3e-4, range(2))
    _runs(tmp_path, 3e-4, [40])  # a seed the sweep does not declare: not counted
    text = render(make_plan([tmp_path], paper="dmu"))
    section = text.split("## Declared sweeps not complete (1)")[1].split("## ")[0]
    assert f"* `rnnlab suite {SWEEP} --jobs 2` -- DMU adding (Fig. 3)" in section
    assert "5 of 504 runs in the records" in section
    assert "## Declared sweeps not complete (0)\n\nNone." in render(make_plan([tmp_path], paper="nnrnn"))
