"""The price of the missing runs and ``rnnlab reproduce plan``.

A price is the preset's steps x the seconds per step a record measured (plus its evaluations),
times the seeds still missing; an estimate scales the closest record by parameters x sequence
length x batch, checked here against models built apart; the plan's commands parse, its suite
loads and runs; the shipped suites whose runs are longer than an hour checkpoint between
evaluations.
"""

import json
import re
import shlex
from pathlib import Path

import pytest

from conftest import write_record
from rnnlab import config
from rnnlab.ledger import price
from rnnlab.ledger.plan import main_plan, make_plan, parse_budget
from rnnlab.ledger.records import Evidence, load_records

ROOT = Path(__file__).resolve().parents[2]


def timed(root, preset, seed, train_s, eval_s, steps=None, ensemble=None, cpu="Test CPU", overrides=(), test=None):
    """A record whose result.json times its run (as the trainer writes it)."""
    cond = {"threads": 1, "device": "cpu", "cpu_model": cpu, **({"ensemble": ensemble} if ensemble else {})}
    extra = {"train_time_s": train_s, "eval_time_s": eval_s, "conditions": cond}
    test = {"test/loss": 0.01} if test is None else test
    return write_record(root, preset, seed, test, overrides=overrides, steps=steps, result_extra=extra)


def test_a_measured_price_is_steps_times_seconds_per_step_times_the_missing_seeds(tmp_path):
    timed(tmp_path, "nnrnn/copy", 1, train_s=30.0, eval_s=1.5)  # 1,500 steps, evaluations every 100
    recs = load_records([tmp_path])[0]
    ev = Evidence(recs, [])
    m = price.missing(ev, "nnrnn/copy", 0, price.Pricer(recs, bench_root=None))
    cfg = config.load("nnrnn/copy")
    assert m.seeds == (2, 3) and m.done == 1  # the preset's seed 1 is done; 3 needed
    per_step, per_eval = 30.0 / cfg.train.steps, 1.5 / (cfg.train.steps // cfg.train.eval_every)
    run = cfg.train.steps * per_step + (cfg.train.steps // cfg.train.eval_every) * per_eval
    assert m.cpu.source == "measured" and m.run_s() == pytest.approx(31.5)
    assert m.total_s() == pytest.approx(2 * run)
    assert "2 seeds x 1,500 steps" in m.text() and "Test CPU" in m.text() and "measured" in m.text()
    assert m.gpu is None and "GPU" not in m.text()


def test_an_ensemble_member_costs_its_share_and_a_gpu_record_gives_a_gpu_price(tmp_path):
    for s in range(3):
        timed(tmp_path, "dmu/short/adding-dmu", s, train_s=510.0, eval_s=51.0, ensemble=51)
    rec = timed(tmp_path / "gpu", "dmu/short/adding-dmu", 7, train_s=20.0, eval_s=2.0)
    r = json.loads((rec / "result.json").read_text())
    r["conditions"].update(device="cuda:0", device_name="Test GPU")
    (rec / "result.json").write_text(json.dumps(r))
    recs = price.timing_records([tmp_path])
    pricer = price.Pricer(recs, bench_root=None)
    steps = config.load("dmu/short/adding-dmu").train.steps
    assert pricer.timing("dmu/short/adding-dmu").step_s == pytest.approx(510.0 / steps / 51)
    gpu = pricer.timing("dmu/short/adding-dmu", gpu=True)
    assert gpu.step_s == pytest.approx(20.0 / steps) and "Test GPU" in gpu.text


def test_an_estimate_scales_the_closest_record_by_parameters_length_and_batch(tmp_path):
    import torch

    from rnnlab.model import build_model
    from rnnlab.train import build_task

    torch.set_num_threads(1)
    timed(tmp_path, "henaff/copy-ltornn", 0, train_s=500.0, eval_s=10.0)
    recs = load_records([tmp_path])[0]
    t = price.Pricer(recs, bench_root=None).timing("henaff/copy-ltornn-T750")
    src, dst = config.load("henaff/copy-ltornn"), config.load("henaff/copy-ltornn-T750")

    def params(c):
        return sum(p.numel() for p in build_model(c.model, build_task(c.task)).parameters())

    def length(c):  # the copy task's sequence: L blanks between 2K symbols
        return c.task.options["L"] + 2 * c.task.options.get("K", 8)

    # the record's own parameter count is the one in its result.json (108 in these test records)
    ratio = params(dst) / 108 * length(dst) / length(src) * dst.train.batch_size / src.train.batch_size
    assert t.source == "estimate" and t.step_s == pytest.approx(500.0 / src.train.steps * ratio)
    assert f"x{ratio:.3g}" in t.text


def test_no_timing_is_no_price(tmp_path):
    write_record(tmp_path, "henaff/copy-ltornn", 0, {"test/loss": 0.01})  # no train_time_s
    recs = load_records([tmp_path])[0]
    m = price.missing(Evidence(recs, []), "henaff/copy-ltornn", 0, price.Pricer(recs, bench_root=None))
    assert m.cpu is None and m.run_s() is None
    assert m.text() == "2 seeds x 5,000 steps: no price (no timing of this configuration)"


def test_the_ledger_prices_its_rows_and_says_how(tmp_path):
    from rnnlab.ledger import ledger

    timed(tmp_path, "nnrnn/copy", 1, train_s=30.0, eval_s=1.5)
    text = ledger([tmp_path])
    assert "Missing runs (price)" in text and "| missing runs (price) |" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| nnRNN, copy") and "`nnrnn/copy`" in ln)
    assert line.rstrip(" |").endswith("measured: nnrnn-copy-T200/seed1, Test CPU)")


def test_budget_and_paper_errors_are_one_line(capsys):
    from rnnlab.cli import main

    assert parse_budget("6h") == 21600 and parse_budget("90m") == 5400 and parse_budget("0.5") == 1800
    for bad in ("soon", "0h", "-1"):
        with pytest.raises(ValueError, match="--budget 6h"):
            parse_budget(bad)
    assert main(["reproduce", "plan", "records", "--paper", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'nope'" in err[0] and "henaff" in err[0]


def test_the_plan_end_to_end_on_a_tiny_budget(tmp_path, capsys):
    """Cheap runs go to this machine's suite, a run over the budget to the GPU section; every
    command parses; the suite loads and runs (a few steps), the GPU suite loads."""
    from rnnlab.cli import build_parser
    from rnnlab.suite import load_suite, run_suite

    rec = tmp_path / "records"
    timed(rec, "nnrnn/copy", 1, train_s=3.0, eval_s=0.15)  # 1,500 steps: ~3 s a run
    timed(rec, "nnrnn/psmnist", 1, train_s=9000.0, eval_s=100.0)  # ~2.5 h a run
    plan = make_plan([rec], budget_s=parse_budget("1m"), paper="nnrnn")
    assert [j.preset for j in plan.cpu] == ["nnrnn/copy"] and plan.cpu[0].need.seeds == (2, 3)
    assert "nnrnn/psmnist" in [j.preset for j in plan.gpu]
    assert plan.claims and plan.claims[0][1][0].preset == "nnrnn/copy"  # a claim its runs decide comes first
    out = tmp_path / "plan.toml"
    assert main_plan([rec], "1m", "nnrnn", str(out)) == 0
    text = capsys.readouterr().out
    counts = re.findall(r"\b(\d+) (runs?|seeds?)\b", text)
    assert counts and all((n == "1") == (not noun.endswith("s")) for n, noun in counts), counts  # "1 run", "2 runs"
    commands = [c for c in text.split("`") if c.startswith("rnnlab ")]
    assert any("--backend ray --device cuda" in c for c in commands) and any(" suite " in c for c in commands)
    parser = build_parser()
    for c in commands:
        args = parser.parse_args(shlex.split(c)[1:])
        assert args.func is not None, c
    suite, gpu = load_suite(str(out)), load_suite(str(tmp_path / "plan-gpu.toml"))
    assert suite.presets == ["nnrnn/copy"] and suite.seeds_for("nnrnn/copy") == [2, 3]
    assert "nnrnn/psmnist" in gpu.presets and gpu.seeds_for("nnrnn/psmnist") == [2, 3]
    statuses = {}
    run_suite(
        suite,
        tmp_path / "runs",
        overrides=["train.steps=3", "train.eval_every=3"],
        statuses=statuses,
        log=lambda m: None,
    )
    assert sorted(p.name for p in statuses) == ["seed2", "seed3"] and set(statuses.values()) == {"trained"}


def test_the_plan_counts_one_run_in_the_singular(tmp_path):
    """With seeds 1 and 2 of nnrnn/copy recorded, its claim waits for one run, and says so."""
    from rnnlab.ledger.plan import render

    for seed in (1, 2):
        timed(tmp_path, "nnrnn/copy", seed, train_s=3.0, eval_s=0.15)
    text = render(make_plan([tmp_path], budget_s=parse_budget("1m"), paper="nnrnn"))
    assert "-- 1 run, " in text and "## On this machine: 1 run, " in text and " 1 runs" not in text


def test_a_claim_of_one_run_a_model_asks_for_the_seeds_a_test_needs(tmp_path):
    """asRNN's MNIST claim reports one run a model, but with asRNN at 3 seeds and the LSTM at 1
    the comparison has no test: the plan asks for a second LSTM seed and two expRNN seeds,
    and once records of exactly those seeds exist, every part of the claim is tested."""
    from rnnlab.ledger.claims import CLAIMS

    claim = next(c for c in CLAIMS if c.paper == "asrnn" and c.where == "Fig. 1b-c, Sec. 3")
    assert claim.runs == 1
    rec = tmp_path / "records"
    for task in ("smnist", "psmnist"):
        for i, seed in enumerate((5544, 5545, 5546)):
            timed(rec, f"asrnn/{task}-n122", seed, 3000.0, 60.0, test={"test/accuracy": 0.98 + i / 1000})
        timed(rec, f"asrnn/{task}-n122-lstm", 5544, 4000.0, 60.0, test={"test/accuracy": 0.96})
    plan = make_plan([rec], budget_s=parse_budget("6h"), paper="asrnn")
    label, runs, _ = next(t for t in plan.claims if claim.text in t[0])
    asked = {m.preset: m.seeds for m in runs}
    assert asked == {
        "asrnn/smnist-n122-lstm": (5545,),
        "asrnn/psmnist-n122-lstm": (5545,),
        "asrnn/smnist-n122-exprnn": (5544, 5545),
        "asrnn/psmnist-n122-exprnn": (5544, 5545),
    }
    ev = Evidence(*load_records([rec]))
    before = [v for _, v, _ in claim.judge(ev)]
    assert before[0::2] == ["untested", "untested"] and all("no test possible" in v for v in before[1::2])
    for preset, seeds in asked.items():
        for i, seed in enumerate(seeds):
            timed(rec, preset, seed, 3000.0, 60.0, test={"test/accuracy": 0.95 + i / 1000})
    ev = Evidence(*load_records([rec]))
    after = claim.judge(ev)
    assert all(f.tested and "no test possible" not in v and v != "untested" for _, v, f in after), after
    assert not any(claim.text in t[0] for t in make_plan([rec], budget_s=parse_budget("6h"), paper="asrnn").claims)


def test_a_suite_names_its_own_seeds_only_for_its_presets(tmp_path):
    from rnnlab.config import ConfigError
    from rnnlab.suite import load_suite

    p = tmp_path / "s.toml"
    p.write_text('name = "s"\npresets = ["demo/lstm"]\nseeds = [0]\n\n[seeds_of]\n"demo/gru" = [1]\n')
    with pytest.raises(ConfigError, match=r"\[seeds_of\] names 'demo/gru'.*not among the suite's presets"):
        load_suite(str(p))
    p.write_text('name = "s"\npresets = ["demo/lstm", "demo/gru"]\nseeds = [0]\n\n[seeds_of]\n"demo/gru" = [1, 2]\n')
    s = load_suite(str(p))
    assert s.seeds_for("demo/lstm") == [0] and s.seeds_for("demo/gru") == [1, 2]


def test_shipped_suites_whose_runs_take_over_an_hour_checkpoint_between_evaluations():
    """Priced from the committed records: each job of a shipped suite longer than
    ``LONG_RUN_S`` sets ``train.checkpoint_every`` so that its checkpoints are at most about
    ``CHECKPOINT_S`` apart (twice that, for prices that move as records are added)."""
    from rnnlab.suite import list_suites, load_suite

    pricer = price.Pricer(price.timing_records([ROOT / "records"]))
    long = 0
    for name in list_suites():
        suite = load_suite(name)
        for preset, seconds, step_s in price.suite_jobs(suite, pricer):
            if seconds <= price.LONG_RUN_S:
                continue
            over = suite.set_for(preset)
            every = [int(s.split("=", 1)[1]) for s in over if s.startswith("train.checkpoint_every=")]
            long += 1
            assert every, f"suite {name}: {preset} runs {seconds / 3600:.1f} h but sets no train.checkpoint_every"
            assert every[-1] * step_s <= 2 * price.CHECKPOINT_S, (name, preset, every, step_s)
    assert long >= 10  # the MNIST baselines and the DMU paper protocol at least


def test_an_estimate_across_sequence_lengths_of_one_model_scales_by_the_length(tmp_path):
    """PTB at bptt 300 from a record at bptt 150 of the same model (its size read from the record
    where the dataset is not here to size it): twice the seconds per step."""
    timed(tmp_path, "asrnn/ptb_char-bptt150", 5544, train_s=262.0 * 2.5, eval_s=12.0, steps=262)
    recs = load_records([tmp_path])[0]
    for r in recs:  # the record's own parameter count is the model's, as the trainer writes it
        r.result["params"]["elements"] = 2_365_250  # records/asrnn-ptb-1epoch
    t = price.Pricer(recs, bench_root=None).timing("asrnn/ptb_char-bptt300")
    assert t.source == "estimate" and t.step_s == pytest.approx(2 * 2.5, rel=1e-3), t


def test_a_price_probe_prices_a_row_that_nothing_timed_and_is_no_evidence(tmp_path, capsys):
    """The plan's probe suite (`-o`) runs 20 steps of a configuration no record times; collected
    into records/price-probes, it prices that preset's row from its own timings (checked against
    its result.json read directly), while the row stays "not run yet" and the claims and counts
    are those of the records without it."""
    import dataclasses

    from rnnlab.ledger import ledger
    from rnnlab.ledger.document import collect
    from rnnlab.suite import load_suite, run_suite

    rec = tmp_path / "records"
    timed(rec, "nnrnn/copy", 1, train_s=3.0, eval_s=0.15)
    before = make_plan([rec], paper="nnrnn")
    assert "nnrnn/copy-rnn" in [j.preset for j in before.unpriced]
    assert main_plan([rec], "6h", "nnrnn", str(tmp_path / "plan.toml")) == 0
    assert "plan-probes.toml" in capsys.readouterr().out
    probes = load_suite(str(tmp_path / "plan-probes.toml"))
    assert probes.name == price.PROBES and tuple(probes.set) == price.PROBE_SET
    assert probes.presets == [j.preset for j in before.unpriced] and probes.seeds_for("nnrnn/copy-rnn") == [1]
    statuses = {}
    run_suite(dataclasses.replace(probes, presets=["nnrnn/copy-rnn"]), tmp_path / "runs", statuses=statuses, log=print)
    assert list(statuses.values()) == ["trained"]
    collect(tmp_path / "runs" / price.PROBES, rec / price.PROBES)
    (probe,) = price.timing_records([rec / price.PROBES])
    r = probe.result
    assert r["steps"] == price.PROBE_STEPS

    after = make_plan([rec], paper="nnrnn")
    assert "nnrnn/copy-rnn" not in [j.preset for j in after.unpriced]
    (job,) = [j for j in after.cpu + after.gpu if j.preset == "nnrnn/copy-rnn"]
    cfg = config.load("nnrnn/copy-rnn")
    evals = cfg.train.steps // cfg.train.eval_every
    per_step, per_eval = r["train_time_s"] / price.PROBE_STEPS, r["eval_time_s"] / 2
    assert job.need.run_s() == pytest.approx(cfg.train.steps * per_step + evals * per_eval)
    assert job.need.cpu.source == "probe" and job.need.seeds == (1, 2, 3)  # no seed counted done
    assert f"(probe: {price.PROBES}/nnrnn-copy-T200-rnn/seed1, " in job.need.text()

    ev = Evidence(*load_records([rec])[:2])
    assert [p.path for p in ev.probes] == [probe.path] and "nnrnn/copy-rnn" not in ev.by_preset
    with_probe, without = ledger([rec]), ledger([rec / "nnrnn-copy-T200"])
    row = next(ln for ln in with_probe.splitlines() if "`nnrnn/copy-rnn`" in ln and ln.startswith("| "))
    assert "not run yet" in row and "probe:" in row
    assert "1 run records" in with_probe and "1 price probes (timings only" in with_probe
    status_lines = lambda t: [ln for ln in t.splitlines() if ln.startswith("| nnrnn |")]  # noqa: E731
    assert status_lines(without) and status_lines(with_probe) == status_lines(without)


def test_plan_o_never_overwrites_a_foreign_file_and_leaves_no_stale_suite_beside_its_own(tmp_path, capsys):
    """`reproduce plan -o FILE` overwrote FILE without a word, and a plan without GPU runs left
    an earlier plan's FILE-gpu.toml beside it, listing runs the new plan does not."""
    from rnnlab.cli import main

    rec = tmp_path / "records"
    timed(rec, "nnrnn/copy", 1, train_s=3.0, eval_s=0.15)
    timed(rec, "nnrnn/psmnist", 1, train_s=9000.0, eval_s=100.0)  # ~2.5 h a run
    mine = tmp_path / "mine.toml"
    mine.write_text('name = "mine"\npresets = ["demo/lstm"]\n')
    before = mine.read_bytes()
    assert main(["reproduce", "plan", str(rec), "--paper", "nnrnn", "-o", str(mine)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "is not a suite that rnnlab reproduce plan wrote" in err and str(mine) in err
    assert mine.read_bytes() == before and not (tmp_path / "mine-gpu.toml").exists()

    plan = tmp_path / "plan.toml"
    gpu = tmp_path / "plan-gpu.toml"
    assert main(["reproduce", "plan", str(rec), "--paper", "nnrnn", "--budget", "1m", "-o", str(plan)]) == 0
    assert gpu.exists() and "wrote " + str(gpu) in capsys.readouterr().out
    # a budget that fits every run: no GPU section, so the earlier plan's GPU suite goes
    assert main(["reproduce", "plan", str(rec), "--paper", "nnrnn", "--budget", "100h", "-o", str(plan)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {plan} (replacing the plan there)" in out
    assert not gpu.exists() and f"removed {gpu}" in out


def test_each_long_run_of_a_plan_checkpoints_at_its_own_interval(tmp_path):
    """The plan's suite set one train.checkpoint_every for all its runs, the slowest run's: a
    run ten times faster checkpointed ten times as often as it needs."""
    from rnnlab.suite import _jobs, load_suite

    rec = tmp_path / "records"
    timed(rec, "nnrnn/copy", 1, train_s=2 * 3600.0, eval_s=10.0)  # two long runs, ten-fold apart
    timed(rec, "nnrnn/psmnist", 1, train_s=20 * 3600.0, eval_s=100.0)
    path = tmp_path / "plan.toml"
    assert main_plan([rec], "100h", "nnrnn", str(path)) == 0
    suite = load_suite(str(path))
    plan = make_plan([rec], budget_s=parse_budget("100h"), paper="nnrnn")
    every = {}
    for job in plan.cpu:
        (ck,) = [o for o in suite.set_for(job.preset) if o.startswith("train.checkpoint_every=")]
        every[job.preset] = int(ck.split("=")[1])
        assert every[job.preset] == price.checkpoint_every(job.need.cpu.step_s), job.preset
        assert every[job.preset] * job.need.cpu.step_s <= price.CHECKPOINT_S
    assert len(every) >= 2 and len(set(every.values())) > 1, every  # not one interval for all
    for preset, overrides, _ in _jobs(suite, tmp_path / "runs", []):  # what the suite trains
        assert f"train.checkpoint_every={every[preset]}" in overrides
