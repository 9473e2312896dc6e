"""Sweeps (Optuna, real studies in SQLite) and the trainer's on_eval hook."""

import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from conftest import default_sigint, tiny_job, wait_until
from rnnlab import config
from rnnlab.cli import main
from rnnlab.config import ConfigError
from rnnlab.train import train

TINY = tiny_job(steps=20)
SPACE = """
[space]
"optim.lr" = { type = "loguniform", low = 1e-3, high = 3e-2 }
"optim.name" = { type = "categorical", choices = ["adam", "rmsprop"] }
"""


def write_sweep(path: Path, trials=3, space=SPACE, extra="", name="tiny", set_=TINY) -> Path:
    path.write_text(
        f'name = "{name}"\npreset = "demo/lstm"\nset = {json.dumps(set_)}\ntrials = {trials}\n{extra}\n{space}'
    )
    return path


def eval_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if "val/loss" in r]


# --------------------------------------------------------------------------- the trainer's hook


def test_on_eval_sees_every_evaluation_and_can_stop(tmp_path):
    cfg = config.load("demo/lstm", TINY)
    seen = []
    r_full = train(cfg, tmp_path / "a", progress=False, on_eval=lambda s, m: seen.append((s, m)) and False)
    r_ref = train(cfg, tmp_path / "b", progress=False)
    # the hook is passive when it returns False: same run as without it
    assert r_full["final"] == r_ref["final"] and r_full["steps"] == 20
    # it saw exactly the evaluations the run logged, with the same values
    logged = [(r["step"], {k: v for k, v in r.items() if k.startswith("val/")}) for r in eval_rows(tmp_path / "a")]
    assert [(s, {k: v for k, v in m.items()}) for s, m in seen] == logged
    assert [s for s, _ in seen] == [5, 10, 15, 20]

    r_stop = train(cfg, tmp_path / "c", progress=False, on_eval=lambda s, m: s >= 10)
    assert r_stop["stopped"] == "on_eval" and r_stop["steps"] == 10
    assert [r["step"] for r in eval_rows(tmp_path / "c")] == [5, 10]
    assert r_stop["final"] == dict(logged[1][1])  # stopped run's last evaluation = the full run's at step 10


# --------------------------------------------------------------------------- bad sweep files


@pytest.mark.parametrize(
    "space, words",
    [
        ('"optim.lrr" = { type = "uniform", low = 0.1, high = 0.2 }', ["optim.lrr", "unknown key"]),
        ('"task.Lx" = { type = "int", low = 1, high = 3 }', ["task.Lx", "Lx"]),
        ('"foo.bar" = { type = "uniform", low = 0.1, high = 0.2 }', ["foo.bar", "not a config key"]),
        ('"optim.lr" = { type = "uniform", low = 0.2, high = 0.2 }', ["optim.lr", "empty range"]),
        ('"model.hidden_size" = { type = "int", low = 9, high = 8 }', ["model.hidden_size", "empty range"]),
        ('"optim.lr" = { type = "loguniform", low = 0.0, high = 0.2 }', ["optim.lr", "low > 0"]),
        ('"optim.name" = { type = "categorical", choices = [] }', ["optim.name", "non-empty"]),
        ('"optim.name" = { type = "categorical", choices = ["adam", "lbfgs"] }', ["optim.name", "lbfgs"]),
        ('"optim.lr" = { type = "normal", low = 0.1, high = 0.2 }', ["optim.lr", "normal"]),
        ('"optim.lr" = { type = "uniform", low = 0.1, hi = 0.2 }', ["optim.lr", "hi"]),
        ('"model.hidden_size" = { type = "int", low = 8, high = "16" }', ["model.hidden_size", "integers"]),
        # accepted before, then refused or silently changed by Optuna
        ('"model.hidden_size" = { type = "int", low = 8, high = 64, step = 8, log = true }', ["hidden_size", "log"]),
        (
            '"model.hidden_size" = { type = "int", low = 8, high = 20, step = 8 }',
            ["hidden_size", "multiple of step", "16"],
        ),
        ('"model.hidden_size" = { type = "int", low = 8, high = 16, step = true }', ["hidden_size", "step"]),
        ('"model.hidden_size" = { type = "int", low = 8, high = 16, log = 1 }', ["hidden_size", "true or false"]),
        ('"optim.clip" = { type = "uniform", low = 0.1, high = inf }', ["optim.clip", "finite"]),
        ('"optim.clip" = { type = "uniform", low = nan, high = 1.0 }', ["optim.clip", "finite"]),
        ('"optim.clip" = { type = "uniform", low = -1.7e308, high = 1.7e308 }', ["optim.clip", "wider"]),
        ('"optim.name" = { type = "categorical", choices = ["adam", "adam"] }', ["optim.name", "repeats"]),
        ('"optim.clip" = { type = "categorical", choices = [1, 1.0] }', ["optim.clip", "repeats"]),
    ],
)
def test_bad_search_space_is_a_one_line_error(tmp_path, capsys, space, words):
    spec = write_sweep(tmp_path / "s.toml", space="[space]\n" + space)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rnnlab: error:") and len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    assert not (tmp_path / "o").exists()  # nothing was created, nothing ran


def test_bad_sweep_fields(tmp_path):
    from rnnlab.sweep import load_sweep

    with pytest.raises(ConfigError, match="empty"):
        load_sweep(write_sweep(tmp_path / "a.toml", space="[space]"))
    with pytest.raises(ConfigError, match="'bayes'"):
        load_sweep(write_sweep(tmp_path / "b.toml", extra='sampler = "bayes"'))
    with pytest.raises(ConfigError, match="grid sampler needs a finite set"):
        load_sweep(write_sweep(tmp_path / "c.toml", extra='sampler = "grid"'))
    with pytest.raises(ConfigError, match="unknown key"):
        load_sweep(write_sweep(tmp_path / "d.toml", extra="trails = 3"))
    sw = load_sweep(
        write_sweep(
            tmp_path / "e.toml",
            extra='sampler = "grid"',
            trials=0,
            space="""[space]
"optim.name" = { type = "categorical", choices = ["adam", "rmsprop"] }
"model.hidden_size" = { type = "int", low = 4, high = 8, step = 4 }""",
        )
    )
    assert sw.trials == 4 and sw.metric == "val/loss" and sw.direction == "minimize"
    # every shipped sweep names a real preset and keys that fit it
    from rnnlab.sweep import SWEEP_DIR

    for p in SWEEP_DIR.glob("*.toml"):
        assert load_sweep(p.stem).preset
    with pytest.raises(ConfigError, match="demo-lstm"):
        load_sweep("no-such-sweep")
    grid = 'sampler = "grid"'
    with pytest.raises(ConfigError, match="exceeds the grid's 4 points"):
        load_sweep(
            write_sweep(
                tmp_path / "f.toml",
                extra=grid,
                trials=5,
                space="""[space]
"optim.name" = { type = "categorical", choices = ["adam", "rmsprop"] }
"model.hidden_size" = { type = "int", low = 4, high = 8, step = 4 }""",
            )
        )
    with pytest.raises(ConfigError, match="more than 100000"):
        load_sweep(
            write_sweep(
                tmp_path / "g.toml",
                extra=grid,
                trials=0,
                space="""[space]
"model.hidden_size" = { type = "int", low = 1, high = 1000000000000 }""",
            )
        )
    for bad, words in (
        ("trials = 3\nmax_failures = 0", "max_failures must be >= 1"),
        ('trials = "3"', "trials must be an integer"),
        ("trials = 3\nseed = 1.5", "seed must be an integer"),
    ):
        (tmp_path / "h.toml").write_text(write_sweep(tmp_path / "h.toml").read_text().replace("trials = 3", bad))
        with pytest.raises(ConfigError, match=re.escape(words)):
            load_sweep(tmp_path / "h.toml")
    with pytest.raises(ConfigError, match="set must be a list of"):
        load_sweep(write_sweep(tmp_path / "i.toml", set_=["train.steps=2", 2]))


# --------------------------------------------------------------------------- a real sweep


def test_sweep_end_to_end_best_preset_resume(tmp_path, capsys):
    optuna = pytest.importorskip("optuna")
    out = tmp_path / "sw"
    spec = write_sweep(tmp_path / "s.toml", trials=3, extra='pruner = "none"')
    assert main(["sweep", str(spec), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}")
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for t in trials:  # each trial's value is the best val/loss its own run logged
        run_dir = out / t.user_attrs["run_dir"]
        assert run_dir == out / "trials" / f"trial-{t.number:04d}"
        assert t.value == min(r["val/loss"] for r in eval_rows(run_dir))
        cfg = json.loads((run_dir / "config.json").read_text())
        assert math.isclose(cfg["optim"]["lr"], t.params["optim.lr"]) and cfg["optim"]["name"] == t.params["optim.name"]
        assert f"| {t.number} | complete |" in table
    best = min(trials, key=lambda t: t.value)
    assert study.best_trial.number == best.number
    for png in ("history.png", "importance.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # best.toml is a preset `rnnlab train` accepts, and it is the best trial's configuration
    assert main(["train", str(out / "best.toml"), "--out", str(tmp_path / "again"), "--quiet"]) == 0
    capsys.readouterr()
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    orig = json.loads((out / best.user_attrs["run_dir"] / "config.json").read_text())
    for d in (again, orig):
        d.pop("name"), d.pop("description")
    assert again == orig
    assert min(r["val/loss"] for r in eval_rows(tmp_path / "again")) == best.value

    # a rerun with a higher target continues the same study: one new trial, old ones untouched
    assert main(["sweep", str(spec), "--out", str(out), "--trials", "4"]) == 0
    capsys.readouterr()
    trials = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}").get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    for n in range(3):
        starts = [
            json.loads(x) for x in (out / "trials" / f"trial-{n:04d}" / "attempts.jsonl").read_text().splitlines()
        ]
        assert [e["event"] for e in starts] == ["start", "end"]

    # the same output with a changed search space is refused
    spec2 = write_sweep(tmp_path / "s2.toml", trials=3, extra='pruner = "none"', space=SPACE.replace("3e-2", "5e-2"))
    assert main(["sweep", str(spec2), "--out", str(out)]) == 2
    assert "different sweep" in capsys.readouterr().err


def test_pruned_trials_stop_early_through_on_eval(tmp_path, capsys):
    optuna = pytest.importorskip("optuna")
    out = tmp_path / "sw"
    # random sampler, the median pruner after 2 trials; 5 trials: some are pruned
    spec = write_sweep(
        tmp_path / "s.toml",
        trials=5,
        extra='sampler = "random"\nseed = 3',
        space="""[space]
"optim.lr" = { type = "loguniform", low = 1e-5, high = 3e-2 }""",
    )
    assert main(["sweep", str(spec), "--out", str(out)]) == 0
    capsys.readouterr()
    trials = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}").get_trials()
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert pruned, [t.state.name for t in trials]
    for t in pruned:
        r = json.loads((out / t.user_attrs["run_dir"] / "result.json").read_text())
        assert r["stopped"] == "on_eval" and r["steps"] < 20
        assert sorted(t.intermediate_values) == [row["step"] for row in eval_rows(out / t.user_attrs["run_dir"])]


# --------------------------------------------------------------------------- faults


def test_corrupt_and_locked_study_database(tmp_path, capsys):
    pytest.importorskip("optuna")
    spec = write_sweep(tmp_path / "s.toml")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "study.db").write_bytes(b"this is not a database" * 100)
    assert main(["sweep", str(spec), "--out", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a database" in err and "study.db" in err and len(err.strip().splitlines()) == 1

    locked = tmp_path / "locked"
    locked.mkdir()
    con = sqlite3.connect(locked / "study.db", isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")  # another process writing, as far as SQLite can tell
    try:
        assert main(["sweep", str(spec), "--out", str(locked), "--db-timeout", "0.2"]) == 2
        err = capsys.readouterr().err
        assert "locked" in err and "--db-timeout" in err and len(err.strip().splitlines()) == 1
    finally:
        con.close()
    assert not list(locked.glob("trials/*"))


@pytest.mark.slow
def test_killed_worker_mid_trial_is_retried_in_its_run_directory(tmp_path):
    """SIGKILL the sweep process while trial 0 trains; the rerun fails the stale trial, retries it
    with the same parameters, and the retry resumes trial 0's run directory from its checkpoint:
    the result equals an uninterrupted run of the same configuration, trained once."""
    optuna = pytest.importorskip("optuna")
    slow_tiny = tiny_job(steps=400, eval_every=20)
    spec = write_sweep(tmp_path / "s.toml", trials=2, extra='pruner = "none"', set_=slow_tiny)
    out = tmp_path / "sw"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rnnlab.cli", "sweep", str(spec), "--out", str(out), "--heartbeat", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ck = out / "trials" / "trial-0000" / "checkpoint.pt"
    t0 = time.time()
    while not ck.exists() and time.time() - t0 < 120:
        time.sleep(0.1)
    assert ck.exists() and proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "trials" / "trial-0000" / "result.json").exists()

    time.sleep(3.5)  # past the grace period (3 heartbeats): the rerun sees trial 0 as stale
    assert main(["sweep", str(spec), "--out", str(out), "--heartbeat", "1"]) == 0
    trials = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}").get_trials()
    states = {t.number: t.state.name for t in trials}
    assert states[0] == "FAIL"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retries) == 1 and retries[0].state.name == "COMPLETE"
    retry = retries[0]
    assert retry.params == trials[0].params and retry.user_attrs["run_dir"] == "trials/trial-0000"
    assert sum(s in ("COMPLETE", "PRUNED") for s in states.values()) == 2
    events = [json.loads(x) for x in (out / "trials" / "trial-0000" / "attempts.jsonl").read_text().splitlines()]
    assert [(e["event"], e.get("resume")) for e in events] == [("start", False), ("start", True), ("end", None)]

    run_dir = out / "trials" / "trial-0000"
    cfg = config.load_json(run_dir / "config.json")
    ref = train(cfg, tmp_path / "ref", progress=False)
    got = json.loads((run_dir / "result.json").read_text())
    assert got["final"] == ref["final"] and got["test"] == ref["test"]


@pytest.mark.slow  # 10 s (local) / 110 s (Ray) on the busy 2-core machine
@pytest.mark.parametrize("backend", ["local", "ray"])
def test_two_workers_feed_one_study_without_duplicates(tmp_path, capsys, backend):
    optuna = pytest.importorskip("optuna")
    if backend == "ray":
        pytest.importorskip("ray")
    out = tmp_path / "sw"
    spec = write_sweep(
        tmp_path / "s.toml",
        trials=4,
        extra='pruner = "none"',
        set_=tiny_job(steps=10),
    )
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "2", "--backend", backend]) == 0
    capsys.readouterr()
    trials = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}").get_trials()
    finished = [t for t in trials if t.state.name == "COMPLETE"]
    assert 4 <= len(finished) <= 5 and len(finished) == len(trials)  # at most workers - 1 beyond the target
    assert len({tuple(sorted(t.params.items())) for t in trials}) == len(trials)  # workers proposed different points
    dirs = sorted((out / "trials").iterdir())
    assert [d.name for d in dirs] == [f"trial-{t.number:04d}" for t in trials]
    for d in dirs:  # every trial trained exactly once
        assert [e["event"] for e in map(json.loads, (d / "attempts.jsonl").read_text().splitlines())] == [
            "start",
            "end",
        ]


# --------------------------------------------------------------------------- reliability: no duplicates, no silence

FAST = tiny_job(steps=2, eval_every=2)
SRC = str(Path(__file__).parents[1] / "src")


def study_trials(out: Path, name: str = "tiny"):
    optuna = pytest.importorskip("optuna")
    return optuna.load_study(study_name=name, storage=f"sqlite:///{out / 'study.db'}").get_trials()


def params_of(trials) -> list[tuple]:
    return [tuple(sorted(t.params.items())) for t in trials]


def test_restarts_and_raised_targets_propose_new_points_and_each_trial_is_one_line(tmp_path, capsys):
    """Before, every worker seeded its sampler with seed + worker index, so a rerun with a higher
    --trials (or a restart, a second `rnnlab sweep`, a Ray-retried worker) proposed the first
    trials' parameters again. Now trial n of a study samples with a seed derived from the sweep's
    seed, the study's name and n: new trials get new points, and the same study made again
    reproduces its points trial by trial."""
    pytest.importorskip("optuna")
    from rnnlab.sweep import main_sweep

    spec = write_sweep(tmp_path / "s.toml", trials=2, extra='sampler = "random"\npruner = "none"', set_=FAST)
    out = tmp_path / "sw"
    assert main(["sweep", str(spec), "--out", str(out)]) == 0
    first = capsys.readouterr().err
    assert main(["sweep", str(spec), "--out", str(out), "--trials", "4"]) == 0
    second = capsys.readouterr().err
    trials = study_trials(out)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    assert len(set(params_of(trials))) == 4, params_of(trials)
    for n in (0, 1):  # one line per finished trial, as it finishes
        assert sum(ln.startswith(f"  trial {n}: complete, val/loss = ") for ln in first.splitlines()) == 1, first
    assert "  trial 2: complete" in second and "  trial 0:" not in second

    again = tmp_path / "again"  # the same sweep from scratch: the same points, trial by trial
    assert main_sweep(str(spec), out=str(again)) == 0  # keyword arguments, no argparse Namespace
    capsys.readouterr()
    assert params_of(study_trials(again)) == params_of(trials[:2])


def test_a_sweep_continues_on_other_hardware_but_not_with_another_experiment(tmp_path, capsys):
    """Fixed overrides of execution keys (`--device`, `train.threads`: what a resumed run may
    change too) may differ between runs of one study; an override of the experiment may not.
    Before, `--device cpu` or `--set train.threads=2` on the second run was refused as "a
    different sweep"."""
    pytest.importorskip("optuna")
    spec = write_sweep(tmp_path / "s.toml", trials=1, extra='sampler = "random"\npruner = "none"', set_=FAST)
    out = tmp_path / "sw"
    assert main(["sweep", str(spec), "--out", str(out)]) == 0
    assert main(["sweep", str(spec), "--out", str(out), "--trials", "2", "--device", "cpu"]) == 0
    assert main(["sweep", str(spec), "--out", str(out), "--trials", "3", "--set", "train.threads=2"]) == 0
    capsys.readouterr()
    assert [t.state.name for t in study_trials(out)] == ["COMPLETE"] * 3
    assert main(["sweep", str(spec), "--out", str(out), "--set", "train.steps=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "made from a different sweep" in err and "'set'" in err, err
    assert len(study_trials(out)) == 3


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--trials", "-3"], ["--trials", "-3"]),
        (["--trials", "0"], ["--trials", "0"]),
        (["--workers", "0"], ["--workers", "0"]),
        (["--workers", "-2"], ["--workers", "-2"]),
        (["--heartbeat", "0"], ["--heartbeat", "0"]),
        (["--db-timeout", "0"], ["--db-timeout", "60"]),
    ],
)
def test_counts_below_one_are_refused(tmp_path, capsys, argv, words):
    pytest.importorskip("optuna")
    spec = write_sweep(tmp_path / "s.toml", set_=FAST)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rnnlab: error:") and len(err.splitlines()) == 1 and all(w in err for w in words), err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("metric", ["val/acuracy", "test/loss"])
def test_a_metric_no_run_reports_is_refused_before_any_trial_trains(tmp_path, capsys, metric):
    """Before, a misspelt metric (or a test/ metric with train.test = false) was found out only
    after the first trial had trained."""
    pytest.importorskip("optuna")
    spec = write_sweep(tmp_path / "s.toml", set_=FAST + ["train.test=false"], extra=f'metric = "{metric}"')
    out = tmp_path / "o"
    assert main(["sweep", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rnnlab: error:") and len(err.splitlines()) == 1, err
    assert repr(metric) in err and "val/loss" in err  # names the metrics that do exist
    assert not (out / "trials").exists()


@pytest.mark.parametrize("key", ["select_metric", "target_metric"])
def test_a_preset_metric_the_task_never_reports_is_refused_before_any_trial_trains(tmp_path, capsys, key):
    """The trainer's own check of train.select_metric / train.target_metric
    (train.check_metric_names) runs before the first trial: before, each trial failed on it in
    turn until the failure cap ended the sweep."""
    pytest.importorskip("optuna")
    spec = write_sweep(tmp_path / "s.toml", set_=[*TINY, f'train.{key}="val/acuracy"'], extra='metric = "val/loss"')
    out = tmp_path / "o"
    assert main(["sweep", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rnnlab: error:") and len(err.splitlines()) == 1, err
    assert f"train.{key}" in err and "'val/acuracy'" in err and "val/loss" in err
    assert not (out / "trials").exists()


def test_an_output_directory_of_another_sweep_is_refused(tmp_path, capsys):
    """Before, a sweep renamed but given the same --out adopted the old study's runs as its own
    trials without training anything and overwrote trials.md and best.toml."""
    pytest.importorskip("optuna")
    out = tmp_path / "sw"
    spec = write_sweep(tmp_path / "s.toml", trials=2, extra='sampler = "random"\npruner = "none"', set_=FAST)
    assert main(["sweep", str(spec), "--out", str(out)]) == 0
    capsys.readouterr()
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def refused(spec_path, *words):
        assert main(["sweep", str(spec_path), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("rnnlab: error:") and len(err.splitlines()) == 1, err
        assert all(w in err for w in words), err
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files  # nothing touched

    renamed = write_sweep(
        tmp_path / "r.toml", trials=2, extra='sampler = "random"\npruner = "none"', set_=FAST, name="other"
    )
    refused(renamed, "'tiny'", "'other'")
    (out / "sweep.json").rename(tmp_path / "sweep.json")  # without sweep.json: the study's name says it
    files.pop(out / "sweep.json")
    refused(renamed, "study.db", "'tiny'")
    (out / "study.db").rename(tmp_path / "study.db")  # only the trial runs are left
    files.pop(out / "study.db")
    refused(renamed, "trials", "no sweep.json")
    # the same sweep whose study.db is gone: its new trial 0 would adopt trial-0000's run
    (tmp_path / "sweep.json").rename(out / "sweep.json")
    files[out / "sweep.json"] = (out / "sweep.json").read_bytes()
    assert main(["sweep", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "trial-0000 already holds a run" in err and "another study" in err, err
    assert [
        e["event"] for e in map(json.loads, (out / "trials" / "trial-0000" / "attempts.jsonl").read_text().splitlines())
    ] == ["start", "end"]


def test_a_sweep_whose_trials_all_fail_stops_with_a_clear_message(tmp_path, capsys):
    """Before, a sweep whose trials all diverged never ended (hundreds of FAIL trials a minute)."""
    pytest.importorskip("optuna")
    spec = write_sweep(
        tmp_path / "s.toml",
        trials=10,
        set_=FAST + ["optim.clip=0.0", 'optim.name="sgd"'],
        extra='sampler = "random"\npruner = "none"\nmax_failures = 3',
        space="""[space]
"optim.lr" = { type = "loguniform", low = 1e37, high = 1e38 }""",
    )
    out = tmp_path / "sw"
    t0 = time.time()
    assert main(["sweep", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("rnnlab: error:") and "the last 3 trials failed" in last and "max_failures" in last, err
    assert "became inf" in last or "non-finite" in last  # the run's own reason
    trials = study_trials(out)
    assert [t.state.name for t in trials] == ["FAIL"] * 3 and time.time() - t0 < 120
    assert (out / "trials.md").exists()  # the report is written before it stops
    # a rerun stops at once: the streak is still there
    assert main(["sweep", str(spec), "--out", str(out)]) == 2
    assert "the last 3 trials failed" in capsys.readouterr().err
    assert len(study_trials(out)) == 3


# A slow database between reading a trial's state and writing it (a busy machine) is when two
# workers both saw a dead trial as RUNNING: both failed it and both queued a retry. The child
# slows every such check down, then waits for the others, so all start their recovery at once.
RACER = """
import sys, time, os
sys.path.insert(0, {src!r})
from optuna.storages._rdb.storage import RDBStorage
check = RDBStorage.check_trial_is_updatable
def slow(self, trial_id, state):
    check(self, trial_id, state)
    time.sleep(0.4)
RDBStorage.check_trial_is_updatable = slow
from rnnlab.sweep import load_sweep, worker
sw = load_sweep({spec!r})
while not os.path.exists({go!r}):
    time.sleep(0.005)
print(worker(sw, {out!r}, {url!r}, heartbeat=1))
"""


def test_a_dead_trial_is_retried_once_by_workers_recovering_it_at_once(tmp_path):
    """Two workers start on a study whose trial 0 lost its worker (its heartbeat stopped);
    all look for stale trials at the same moment. Exactly one fails trial 0 and queues one retry
    with trial 0's parameters, which trains trial-0000 once. (Before: with --workers 2 a killed
    worker's trial got two retries, the second counted COMPLETE without training.)"""
    pytest.importorskip("optuna")
    from rnnlab.sweep import load_sweep, make_storage, open_study

    spec = write_sweep(tmp_path / "s.toml", trials=1, extra='pruner = "none"', set_=FAST)
    out = tmp_path / "sw"
    out.mkdir()
    url = f"sqlite:///{out / 'study.db'}"
    sw = load_sweep(spec)
    storage = make_storage(url, heartbeat=1)
    study = open_study(sw, storage)
    with warnings.catch_warnings():  # ("heartbeats are meant for optimize": the worker that died used it)
        warnings.simplefilter("ignore")
        dead = study.ask()  # a trial whose worker died after drawing its parameters
    params = {
        "optim.lr": dead.suggest_float("optim.lr", 1e-3, 3e-2, log=True),
        "optim.name": dead.suggest_categorical("optim.name", ["adam", "rmsprop"]),
    }
    dead.set_user_attr("run_trial", dead.number)
    storage.record_heartbeat(dead._trial_id)
    time.sleep(3.5)  # past the grace period (3 heartbeats)
    go = tmp_path / "go"
    code = RACER.format(src=SRC, spec=str(spec), go=str(go), out=str(out), url=url)
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        time.sleep(1.0)
        go.write_text("")
        results = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), [r[1][-2000:] for r in results]
    trials = study_trials(out)
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == dead.number]
    assert len(retries) == 1, [(t.number, t.state.name, t.system_attrs) for t in trials]
    assert retries[0].params == params and retries[0].state.name == "COMPLETE"
    assert retries[0].user_attrs["run_dir"] == "trials/trial-0000"
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len({t.user_attrs["run_dir"] for t in complete}) == len(complete)  # each counted once
    for d in (out / "trials").iterdir():  # and trained once
        events = [json.loads(x)["event"] for x in (d / "attempts.jsonl").read_text().splitlines()]
        assert events == ["start", "end"], d


def test_a_worker_whose_live_trial_another_worker_declared_dead_goes_on(tmp_path, monkeypatch, caplog):
    """A worker starved past the grace period on a loaded machine: while its trial trains,
    another worker's stale check fails that trial and queues a retry. Optuna then refuses the
    first worker's result ("Cannot tell a FAIL trial"); the worker says so and goes on, the retry
    runs in the same run directory, and the study ends with the trial trained once. (Before: the
    worker died with Optuna's ValueError, seen once when CI ran beside a training job.)"""
    optuna = pytest.importorskip("optuna")
    import rnnlab.backends as backends
    from rnnlab.sweep import load_sweep, make_storage, open_study
    from rnnlab.sweep.trial import worker

    spec = write_sweep(tmp_path / "s.toml", trials=1, extra='pruner = "none"', set_=FAST)
    out = tmp_path / "sw"
    out.mkdir()
    url = f"sqlite:///{out / 'study.db'}"
    sw = load_sweep(spec)
    other = make_storage(url, heartbeat=1)  # the other worker's connection
    real_run_one = backends.run_one
    declared = []

    def run_then_declared_dead(job, **kw):
        got = real_run_one(job, **kw)
        if not declared:  # the other worker's stale check, through Optuna's own path
            (t,) = [t for t in other.get_all_trials(open_study(sw, other)._study_id) if t.state.name == "RUNNING"]
            monkeypatch.setattr(other, "_get_stale_trial_ids", lambda study_id: [t._trial_id])
            optuna.storages.fail_stale_trials(open_study(sw, other))
            declared.append(t.number)
        return got

    monkeypatch.setattr(backends, "run_one", run_then_declared_dead)
    with caplog.at_level("WARNING", logger="rnnlab"):
        worker(sw, out, url, heartbeat=1)
    assert declared == [0]
    assert any("trial 0 was declared dead by another worker" in r.getMessage() for r in caplog.records)
    trials = study_trials(out)
    assert trials[0].state.name == "FAIL"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retries) == 1 and retries[0].state.name == "COMPLETE", [(t.number, t.state.name) for t in trials]
    assert retries[0].params == trials[0].params and retries[0].user_attrs["run_dir"] == "trials/trial-0000"
    events = [
        json.loads(x)["event"] for x in (out / "trials" / "trial-0000" / "attempts.jsonl").read_text().splitlines()
    ]
    assert events == ["start", "end"]  # trained once: the retry took the finished run


# --------------------------------------------------------------------------- spaces: ours = Optuna's


def _spec_strategy():
    from hypothesis import strategies as st

    ints = st.integers(-50, 50)
    floats = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-10, 10),
        st.sampled_from([0.0, 1e-300, -1e308, 1e308, 5e-324]),
    )
    scalars = st.one_of(st.booleans(), ints, st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3))
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("int"), "low": ints, "high": ints},
            optional={
                "step": st.one_of(st.integers(-2, 12), st.booleans(), st.floats(0, 3)),
                "log": st.one_of(st.booleans(), st.integers(0, 1)),
            },
        ),
        st.fixed_dictionaries({"type": st.sampled_from(["uniform", "loguniform"]), "low": floats, "high": floats}),
        st.fixed_dictionaries(
            {
                "type": st.just("categorical"),
                "choices": st.lists(st.one_of(scalars, st.lists(ints, max_size=2)), max_size=4),
            }
        ),
    )


def test_every_space_the_check_accepts_is_one_optuna_samples_without_complaint():
    """Random entries of [space] (hypothesis): whatever ``_check_param`` accepts, Optuna samples
    through the sweep's own ``_suggest`` with warnings as errors (no refusal, no silent change of
    the range, no storage warning), the value lies in the range (on the step grid) or is one of
    the choices, and its distribution survives the JSON round trip of the study database."""
    optuna = pytest.importorskip("optuna")
    from hypothesis import given, settings

    from rnnlab.sweep import _check_param, _suggest

    optuna.logging.set_verbosity(optuna.logging.ERROR)

    @settings(max_examples=300, deadline=None)
    @given(_spec_strategy())
    def check(spec):
        try:
            _check_param("x.y", dict(spec))
        except ConfigError:
            return
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(3):
                trial = study.ask()
                value = _suggest(trial, "x.y", spec)
                dist = trial.distributions["x.y"]
                assert (
                    optuna.distributions.json_to_distribution(optuna.distributions.distribution_to_json(dist)) == dist
                )
                study.tell(trial, 0.0)
                if spec["type"] == "categorical":
                    assert any(value == c and type(value) is type(c) for c in spec["choices"])
                else:
                    assert spec["low"] <= value <= spec["high"]
                    if spec["type"] == "int":
                        assert (value - spec["low"]) % spec.get("step", 1) == 0

    check()


def test_a_grid_point_is_never_trained_twice(tmp_path, capsys):
    """The grid sampler: every worker shuffles the grid with the sweep's seed (before, worker i
    used seed + i, so two workers' trial numbers named different points: one point trained twice,
    another never). A trial that gets a point already taken (two workers starting the last
    trials at once) is skipped, not trained; --trials beyond the grid is refused."""
    optuna = pytest.importorskip("optuna")
    from rnnlab.sweep import _objective, load_sweep, make_storage, open_study

    grid = """[space]
"optim.name" = { type = "categorical", choices = ["adam", "rmsprop", "sgd"] }
"optim.clip" = { type = "categorical", choices = [1.0, 2.0] }"""
    spec = write_sweep(tmp_path / "s.toml", trials=0, extra='sampler = "grid"\npruner = "none"', set_=FAST, space=grid)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--trials", "7"]) == 2
    assert "exceeds the grid's 6 points" in capsys.readouterr().err
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "2"]) == 0
    capsys.readouterr()
    trials = [t for t in study_trials(tmp_path / "o") if t.state.name == "COMPLETE"]
    assert len(trials) == 6 and len(set(params_of(trials))) == 6

    sw = load_sweep(spec)
    sw.trials = 6
    out = tmp_path / "race"
    out.mkdir()
    study = open_study(sw, make_storage(f"sqlite:///{out / 'study.db'}"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (Optuna warns that the grid is exhausted: the case under test)
        for _ in range(6):  # the grid's six points taken (told through the storage: no sampler callback)
            t = study.ask()
            study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.COMPLETE, [1.0])
        late = study.ask()
    with pytest.raises(Exception, match="grid point of trial"):
        _objective(sw, out, None)(late)
    assert study.get_trials()[-1].user_attrs["status"] == "skipped" and not (out / "trials").exists()


# --------------------------------------------------------------------------- Ctrl-C and killed workers


def _spawn_sweep(spec: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(
        [sys.executable, "-m", "rnnlab.cli", "sweep", str(spec), "--out", str(out), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )


def _attempts(run_dir: Path) -> list[tuple]:
    rows = [json.loads(x) for x in (run_dir / "attempts.jsonl").read_text().splitlines()]
    return [(e["event"], e.get("resume"), e.get("status")) for e in rows]


LONG = tiny_job(steps=400, eval_every=20)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="the stop at a checkpoint uses SIGUSR1")
def test_ctrl_c_stops_a_sweep_at_a_checkpoint_and_the_same_command_continues(tmp_path):
    """Ctrl-C (SIGINT) during a sweep: the running trial stops at its next checkpoint, is
    recorded as interrupted and re-queued with its parameters, the report is written and the
    message says to rerun the same command (exit 130); the rerun resumes the trial's run from its
    checkpoint and trains it to the end once. Before, Ctrl-C left the trial RUNNING and ended in a
    traceback."""
    pytest.importorskip("optuna")
    spec = write_sweep(tmp_path / "s.toml", trials=1, extra='pruner = "none"', set_=LONG)
    out = tmp_path / "sw"
    run = out / "trials" / "trial-0000"
    proc = _spawn_sweep(spec, out)
    try:
        assert wait_until(lambda: (run / "checkpoint.pt").exists() or proc.poll() is not None), "no trial started"
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "rerun the same command to continue" in err, err
    assert (out / "trials.md").exists()
    [first] = study_trials(out)[:1]
    assert first.state.name == "FAIL" and "interrupted by Ctrl-C" in first.user_attrs["error"]
    assert [t.state.name for t in study_trials(out)[1:]] == ["WAITING"]  # its retry, queued
    assert _attempts(run)[-1][2] == "interrupted" and not (run / "result.json").exists()

    again = _spawn_sweep(spec, out)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    trials = study_trials(out)
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].params == trials[0].params and trials[1].user_attrs["run_dir"] == "trials/trial-0000"
    assert [(e, r) for e, r, _ in _attempts(run)] == [("start", False), ("end", None), ("start", True), ("end", None)]
    assert json.loads((run / "result.json").read_text())["steps"] == 400


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILL of one pool worker")
def test_a_killed_sweep_worker_is_reported_and_its_trial_retried_once(tmp_path):
    """SIGKILL of one of `--workers 2`'s pool workers while it trains (as the out-of-memory
    killer would): the driver reports that worker's death in one line and goes on; the dead trial
    is failed once its heartbeat is stale and retried once with its parameters in its own run
    directory. Before, the sweep's pool broke with a BrokenProcessPool traceback."""
    pytest.importorskip("optuna")
    spec = write_sweep(tmp_path / "s.toml", trials=2, extra='pruner = "none"', set_=LONG)
    out = tmp_path / "sw"

    def lock_pid() -> int | None:
        try:
            return int(json.loads((out / "trials" / "trial-0000" / ".lock").read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    proc = _spawn_sweep(spec, out, "--workers", "2", "--heartbeat", "1")
    try:
        assert wait_until(
            lambda: (
                (lock_pid() and (out / "trials" / "trial-0000" / "checkpoint.pt").exists()) or proc.poll() is not None
            )
        ), "trial 0 never started"
        assert proc.poll() is None, proc.communicate()
        victim = lock_pid()
        assert victim != proc.pid
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "BrokenProcessPool" not in err, err
    assert any("failed" in ln and "SIGKILL" in ln for ln in err.splitlines()), err
    trials = study_trials(out)
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert trials[0].state.name == "FAIL" and len(retries) == 1 and retries[0].state.name == "COMPLETE", trials
    assert retries[0].params == trials[0].params and retries[0].user_attrs["run_dir"] == "trials/trial-0000"
    assert sum(t.state.name == "COMPLETE" for t in trials) >= 2
    assert [e for e, _, _ in _attempts(out / "trials" / "trial-0000")] == ["start", "start", "end"]


def test_without_optuna_the_sweep_stops_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """Optuna missing (it is the extra rnnlab[sweep]): a one-line error naming the extra, and no
    (empty) sweep directory left behind."""
    monkeypatch.setitem(sys.modules, "optuna", None)
    runs = tmp_path / "runs"
    assert main(["sweep", "demo-lstm", "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert "rnnlab[sweep]" in err and len(err.strip().splitlines()) == 1
    assert not runs.exists()
