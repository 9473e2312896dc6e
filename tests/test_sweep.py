"""Sweeps (Optuna, real studies in SQLite) and the trainer's on_eval hook."""

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rnnlab import config
from rnnlab.cli import main
from rnnlab.config import ConfigError
from rnnlab.train import train

TINY = ["train.steps=20", "train.eval_every=5", "task.L=10", "model.hidden_size=8", "train.batch_size=16",
        "task.val_size=64", "task.test_size=64"]
SPACE = """
[space]
"optim.lr" = { type = "loguniform", low = 1e-3, high = 3e-2 }
"optim.name" = { type = "categorical", choices = ["adam", "rmsprop"] }
"""


def write_sweep(path: Path, trials=3, space=SPACE, extra="", name="tiny", set_=TINY) -> Path:
    path.write_text(f'name = "{name}"\npreset = "demo/lstm"\nset = {json.dumps(set_)}\n'
                    f'trials = {trials}\n{extra}\n{space}')
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

@pytest.mark.parametrize("space, words", [
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
])
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
        load_sweep(write_sweep(tmp_path / "d.toml", extra='trails = 3'))
    sw = load_sweep(write_sweep(tmp_path / "e.toml", extra='sampler = "grid"', trials=0, space="""[space]
"optim.name" = { type = "categorical", choices = ["adam", "rmsprop"] }
"model.hidden_size" = { type = "int", low = 4, high = 8, step = 4 }"""))
    assert sw.trials == 4 and sw.metric == "val/loss" and sw.direction == "minimize"
    # every shipped sweep names a real preset and keys that fit it
    from rnnlab.sweep import SWEEP_DIR

    for p in SWEEP_DIR.glob("*.toml"):
        assert load_sweep(p.stem).preset
    with pytest.raises(ConfigError, match="demo-lstm"):
        load_sweep("no-such-sweep")


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
        starts = [json.loads(x) for x in (out / "trials" / f"trial-{n:04d}" / "attempts.jsonl").read_text().splitlines()]
        assert [e["event"] for e in starts] == ["start", "end"]

    # the same output with a changed search space is refused
    spec2 = write_sweep(tmp_path / "s2.toml", trials=3, extra='pruner = "none"',
                        space=SPACE.replace("3e-2", "5e-2"))
    assert main(["sweep", str(spec2), "--out", str(out)]) == 2
    assert "different sweep" in capsys.readouterr().err


def test_pruned_trials_stop_early_through_on_eval(tmp_path, capsys):
    optuna = pytest.importorskip("optuna")
    out = tmp_path / "sw"
    # random sampler, the median pruner after 2 trials; 5 trials: some are pruned
    spec = write_sweep(tmp_path / "s.toml", trials=5, extra='sampler = "random"\nseed = 3', space="""[space]
"optim.lr" = { type = "loguniform", low = 1e-5, high = 3e-2 }""")
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
    slow_tiny = [s.replace("train.steps=20", "train.steps=400").replace("eval_every=5", "eval_every=20") for s in TINY]
    spec = write_sweep(tmp_path / "s.toml", trials=2, extra='pruner = "none"', set_=slow_tiny)
    out = tmp_path / "sw"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "rnnlab.cli", "sweep", str(spec), "--out", str(out),
                             "--heartbeat", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    spec = write_sweep(tmp_path / "s.toml", trials=4, extra='pruner = "none"',
                       set_=[s.replace("train.steps=20", "train.steps=10") for s in TINY])
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "2", "--backend", backend]) == 0
    capsys.readouterr()
    trials = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}").get_trials()
    finished = [t for t in trials if t.state.name == "COMPLETE"]
    assert 4 <= len(finished) <= 5 and len(finished) == len(trials)  # at most workers - 1 beyond the target
    assert len({tuple(sorted(t.params.items())) for t in trials}) == len(trials)  # workers proposed different points
    dirs = sorted((out / "trials").iterdir())
    assert [d.name for d in dirs] == [f"trial-{t.number:04d}" for t in trials]
    for d in dirs:  # every trial trained exactly once
        assert [e["event"] for e in map(json.loads, (d / "attempts.jsonl").read_text().splitlines())] == ["start", "end"]
