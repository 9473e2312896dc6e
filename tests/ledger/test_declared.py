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
        staged = {"promotion"} if sweep.promote else set()  # a staged sweep's rule has its source too
        assert keys | {"seeds"} | staged == set(sweep.sources), name
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
    # one ensemble job is priced at its first point's timing; once the records hold the sweep's own
    # runs, each point has its own measured timing, equal to the job's up to the records' rounding
    assert not unpriced and math.isclose(hours, by_run / 3600, rel_tol=1e-4)
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


# --- staged sweeps: Henaff's screens and the rule that takes points to the full budget -------------
LSTM = "the LSTM solves it (within the preset's budget: the text gives none)"
LSTM_SCREEN = "henaff-copy_variable-lstm-screen"


def _screen(root, name, preset, score, skip=(), diverge=()):
    """One screening run of ``preset`` at every grid point of ``name`` (point i in root/p<i>), its
    final val/loss ``score(i)``; points in ``skip`` not run, in ``diverge`` diverged."""
    points = grid_points(load_suite(name).grid)
    for i, point in enumerate(points):
        if i in skip:
            continue
        extra = {"stopped": "diverged"} if i in diverge else {}
        final = {"final": {"val/loss": score(i)}, **extra}
        write_record(root / f"p{i}", preset, 0, {"test/recall_accuracy": 0.2}, point, result_extra=final)
    return points


def test_every_henaff_claim_of_a_grid_names_its_declared_screen():
    """Each Henaff part at either timescale (T=500, T=750) or at T=100 that says something works
    or fails is judged over a declared staged sweep whose screen holds its preset; the grids cover
    the optimizer, rate, clipping, batch and step budget, and the LT-RNN's input and bias init.
    (Part texts repeat across claims, "LT-IRNN does not" at both timescales: parts, not texts.)"""
    from rnnlab.ledger import claims

    named = [p for c in claims.CLAIMS if c.paper == "henaff" for p in c.parts if p.sweep]
    assert len(named) == 12, sorted(p.text for p in named)
    for part in named:
        sweep = declared.declared(part.sweep)
        assert sweep.paper == "henaff" and sweep.promote is not None and part.says in ("works", "fails")
        keys = set(sweep.sources)
        assert {"optim.name", "optim.lr", "optim.clip", "train.batch_size", "train.steps", "promotion"} <= keys
        suite = load_suite(sweep.suite)
        assert suite.seeds == [0] and suite.ensemble is True
        if any("lstm" not in p for p in suite.presets):
            assert {"model.cell_options.input_scale", "model.cell_options.bias_value"} <= keys
        # the screen runs a tenth of each preset's budget: a reduced budget, which decides no verdict
        for preset in suite.presets:
            (steps,) = {
                int(o.split("=")[1]) for pt in grid_points(suite.grid) for o in pt if o.startswith("train.steps")
            }
            assert steps * 10 == config.load(preset).train.steps
            assert sweep.promote.steps >= config.load(preset).train.steps


def test_the_t750_screens_are_the_t500_screens_on_the_t750_presets():
    """The T=750 screens sweep the T=500 ones' grid, from the same sources and by the same rule;
    only the presets differ (each a T=500 preset at T=750)."""
    for kind in ("copy", "pool"):
        t500, t750 = declared.declared(f"henaff-{kind}-T500-screen"), declared.declared(f"henaff-{kind}-T750-screen")
        assert t750.promote == t500.promote
        assert set(t750.sources) == set(t500.sources)
        assert all(t750.sources[k] == t500.sources[k] for k in t500.sources if k != "train.steps")
        s500, s750 = load_suite(t500.suite), load_suite(t750.suite)
        assert grid_points(s750.grid) == grid_points(s500.grid)
        assert s750.presets == [f"{p}-T750" for p in s500.presets]
        assert (s750.seeds, s750.ensemble, s750.metrics) == (s500.seeds, s500.ensemble, s500.metrics)


def test_the_rule_takes_the_best_complete_points_of_the_screen_to_the_full_budget(tmp_path):
    """The declared rule, on fake screening records: the 3 points with the lowest final val/loss
    (a diverged point passed over however low its loss), at 20,000 steps and 3 seeds; an incomplete
    screen promotes nothing and says how much is missing. The suite it writes loads and its
    runs are the points the judge expects."""
    from rnnlab.ledger.records import Evidence, load_records

    preset = "henaff/copy_variable-lstm"
    points = _screen(tmp_path, LSTM_SCREEN, preset, lambda i: [5.0, 0.3, 9.0, 0.1][i % 4] + i / 100, skip={15})
    ev = Evidence(*load_records([tmp_path]))
    chosen, why = declared.promoted(LSTM_SCREEN, ev)
    assert chosen == {} and why.endswith("1 of its runs are not in the records")
    _screen(tmp_path / "b", LSTM_SCREEN, preset, lambda i: 0.0, skip=set(range(15)), diverge={15})
    ev = Evidence(*load_records([tmp_path]))
    chosen, why = declared.promoted(LSTM_SCREEN, ev)
    assert why == ""
    # scores 0.1 + i/100 at i = 3, 7, 11 (15 diverged): the lowest, in order
    assert chosen[preset] == [[o for o in points[i] if "steps" not in o] + ["train.steps=20000"] for i in (3, 7, 11)]
    suites, why = declared.full_stage_suites(LSTM_SCREEN, ev)
    (name,) = suites
    path = tmp_path / f"{name}.toml"
    path.write_text(suites[name])
    full = load_suite(str(path))
    assert full.presets == [preset] and full.seeds == [0, 1, 2] and full.ensemble is True
    assert [sorted(p) for p in grid_points(full.grid)] == [sorted(p) for p in chosen[preset]]
    from rnnlab.cli import main

    assert main(["reproduce", "promote", str(tmp_path), "-o", str(tmp_path / "full"), "--paper", "henaff"]) == 0
    assert (tmp_path / "full" / f"{name}.toml").read_text() == suites[name]
    points_judged, _ = declared.declared_points(LSTM_SCREEN, ev)
    assert [n for _d, n in points_judged[preset]] == [3, 3, 3]
    assert all("train.steps 20000 (preset 20000)" not in " ".join(d) for d, _ in points_judged[preset])


def test_a_henaff_success_is_confirmed_by_one_promoted_point_at_three_seeds(tmp_path):
    """ "The LSTM solves it": the screening runs alone decide nothing (a reduced budget); one
    promoted point with 3 seeds at recall >= 0.99 confirms it, naming the setting; below that it
    is "not reproduced in the N settings tried" with the list and how much of the sweep is run."""
    from rnnlab.ledger.records import Evidence, load_records

    preset = "henaff/copy_variable-lstm"
    _screen(tmp_path / "screen", LSTM_SCREEN, preset, lambda i: 1.0 - i / 100)
    v = judge(LSTM, tmp_path)
    assert v.startswith("inconclusive") and "reduced budget" in v, v
    chosen, _ = declared.promoted(LSTM_SCREEN, Evidence(*load_records([tmp_path])))
    best, second = chosen[preset][:2]
    for seed in range(3):
        write_record(tmp_path / "full0", preset, seed, {"test/recall_accuracy": 0.5}, best)
    v = judge(LSTM, tmp_path)
    assert v.startswith("not reproduced in the 1 setting of ours tried (")
    assert v.endswith(f"declared sweep `{LSTM_SCREEN}`: 1 of its 3 settings run)"), v
    for seed in range(3):
        write_record(tmp_path / "full1", preset, seed, {"test/recall_accuracy": 0.999}, second)
    v = judge(LSTM, tmp_path)
    assert v.startswith("confirmed (setting: ") and "2 settings of ours tried" in v, v


def test_a_henaff_failure_is_confirmed_only_over_every_promoted_point(tmp_path):
    """ "LT-ORNN at chance": open until the screen is complete and every promoted point has its 3
    seeds at chance; a setting of ours above chance makes it "not reproduced", never "refuted"."""
    from rnnlab.ledger.records import Evidence, load_records

    part, preset, name = (
        "LT-ORNN at chance (within 0.05 of 1/8)",
        "henaff/copy_variable-ltornn",
        "henaff-copy_variable-screen",
    )
    _screen(tmp_path / "screen", name, preset, lambda i: 1.0 + (i % 7) / 10)
    chosen, why = declared.promoted(name, Evidence(*load_records([tmp_path])), [preset])
    assert why == "" and len(chosen[preset]) == 3
    for k, point in enumerate(chosen[preset][:2]):
        for seed in range(3):
            write_record(tmp_path / f"full{k}", preset, seed, {"test/recall_accuracy": 0.13}, point)
    v = judge(part, tmp_path)
    assert (
        v.startswith("inconclusive")
        and f"confirmed only over the declared sweep `{name}` (3 settings x 3 seeds): 1 setting not run yet" in v
    ), v
    for seed in range(3):
        write_record(tmp_path / "full2", preset, seed, {"test/recall_accuracy": 0.12}, chosen[preset][2])
    v = judge(part, tmp_path)
    assert v.startswith(f"confirmed (over the declared sweep `{name}` (3 settings x 3 seeds)"), v
    for seed in range(3):
        write_record(tmp_path / "other", preset, seed, {"test/recall_accuracy": 0.6}, ["optim.lr=0.003"])
    # a setting of ours above chance: the paper's failure is not reproduced there, but a setting of
    # ours alone refutes nothing the paper saw at its own (open) settings
    v = judge(part, tmp_path)
    assert v.startswith("not reproduced in the 4 settings of ours tried (") and "optim.lr 0.003" in v, v
    assert v.endswith("the paper's settings are open)") and "refuted (" not in v, v
