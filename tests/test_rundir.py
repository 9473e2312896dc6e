"""Run identity (configuration key, directory names), the run lock, grids in suites, and the
results side (tables by key, unknown metrics, broken metrics.jsonl lines)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import set_flags, tiny_copy
from rnnlab import config, rundir
from rnnlab.cli import main

TINY = tiny_copy(K=None, eval_size=16, hidden=None, batch=16, eval_every=2, log_every=None)
TINY_SET = set_flags(*TINY)
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "rnnlab.cli", *args]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


# ------------------------------------------------------------------ configuration key


def test_key_ignores_seed_and_execution_keys_but_nothing_else():
    base = config.load("demo/lstm")
    same = [["train.seed=7"], ["train.threads=2"], ["name=other-name"], ["description='x'"]]
    differ = [
        ["optim.lr=3e-4"],
        ["train.steps=11"],
        ["task.L=9"],
        ["model.hidden_size=33"],
        ["train.data_seed=5"],
        ["optim.clip=1.0"],
    ]
    k0 = rundir.config_key(config.load("demo/lstm", ["optim.lr=1.0"]))
    assert rundir.config_key(config.load("demo/lstm", ["optim.lr=1"])) == k0  # int and float alike
    for ov in same:
        cfg = config.load("demo/lstm", ov)
        assert rundir.config_key(cfg) == rundir.config_key(base), ov
        assert rundir.differences(base, cfg) == {}
    for ov in differ:
        cfg = config.load("demo/lstm", ov)
        diff = rundir.differences(base, cfg)
        assert rundir.config_key(cfg) != rundir.config_key(base), ov
        assert list(diff) == [ov[0].split("=")[0]], (ov, diff)  # exactly the changed key
        # the key of the saved JSON equals the key of the config (a round trip through disk)
        assert rundir.config_key(json.loads(cfg.to_json())) == rundir.config_key(cfg)


def test_directory_names_carry_the_key(tmp_path):
    base = config.load("demo/lstm")
    assert rundir.run_dir(tmp_path, base, base) == tmp_path / "demo-lstm" / f"seed{base.train.seed}"
    lr = config.load("demo/lstm", ["optim.lr=3e-4"])
    name = rundir.dir_name(lr, base)
    assert name.startswith("demo-lstm-lr=0.0003-") and name.endswith(rundir.config_key(lr)[:6])
    many = config.load("demo/lstm", TINY + ["train.steps=3", "optim.lr=3e-4"])
    assert rundir.dir_name(many, base) == f"demo-lstm-{rundir.config_key(many)[:6]}"  # too long to read
    names = {rundir.dir_name(config.load("demo/lstm", [f"optim.lr={v}"]), base) for v in (1e-3, 3e-4, 1e-4, 2e-3)}
    assert len(names) == 4
    # the plain name already holds a run of another configuration (the preset was edited since)
    old = tmp_path / "demo-lstm" / "seed0"
    old.mkdir(parents=True)
    (old / "config.json").write_text(lr.to_json().replace(lr.name, base.name))
    moved = rundir.run_dir(tmp_path, base, base)
    assert moved.parent.name == f"demo-lstm-{rundir.config_key(base)[:6]}"
    assert rundir.run_dir(tmp_path, base, base, resume=True).parent.name == "demo-lstm"


@pytest.mark.parametrize("bad", ["../evil", "/tmp/abs", "a/../../b", "", "a//b", "./x", "~/x"])
def test_run_names_that_are_not_plain_relative_paths_are_refused(tmp_path, capsys, bad):
    runs = tmp_path / "runs"
    assert (
        main(
            [
                "train",
                "demo/lstm",
                "--runs-dir",
                str(runs),
                "--set",
                f"name='{bad}'",
                "--set",
                "train.steps=1",
                "--quiet",
            ]
            + TINY_SET
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "not a plain relative path" in err and err.count("\n") == 1
    assert not runs.exists() and not (tmp_path / "evil").exists()


# ------------------------------------------------------------------ the lock

# a holder process running only the lock code (loaded from its file: no torch import, fast)
# (sys.argv[2], the module's file, names which rundir: the one on PYTHONPATH)
HOLD = (
    "import sys, time\n"
    "import rnnlab.rundir as m\n"
    "with m.claim(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)\n"
)


def test_lock_refuses_a_second_writer_names_the_holder_and_is_released(tmp_path):
    d = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(d), rundir.__file__], stdout=subprocess.PIPE, text=True, env=_env()
    )
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(rundir.RunLocked, match=f"pid {p.pid} on "):
            with rundir.claim(d):
                pass
        info = json.loads((d / ".lock").read_text())
        assert info["pid"] == p.pid and "command" in info and "started" in info
    finally:
        p.kill()
        p.communicate()  # reaps it and closes its pipes
    # its holder was SIGKILLed: the kernel dropped the flock, the record stays; take it over
    with rundir.claim(d) as lock:
        assert f"pid {p.pid}" in lock.took_over and "no longer running" in lock.took_over
        assert json.loads((d / ".lock").read_text())["pid"] == os.getpid()
        with rundir.claim(d):  # re-entrant within one process
            pass
        assert (d / ".lock").exists()
    assert not (d / ".lock").exists()  # released and removed on a clean exit
    with rundir.claim(d) as lock:
        assert lock.took_over == ""


def test_failed_starts_leave_no_stub_directory(tmp_path, capsys):
    out = tmp_path / "runs" / "a" / "seed0"
    assert main(["train", "demo/lstm", "--out", str(out), "--resume", "--quiet"]) == 1  # nothing to resume
    assert "cannot resume" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    empty = tmp_path / "no-data"
    empty.mkdir()
    assert main(["train", "asrnn/smnist-n122", "--out", str(out), "--data-dir", str(empty), "--quiet"]) == 1
    assert not (tmp_path / "runs").exists()  # missing data: nothing created
    assert main(["train", "demo/lstm", "--out", str(out), "--set", "optim.lrr=1", "--quiet"]) == 2
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ resume and steps


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two tiny runs of demo/lstm (seeds 0, 1) and one with another lr, through the CLI."""
    runs = tmp_path_factory.mktemp("runs")
    assert (
        main(
            ["train", "demo/lstm", "--runs-dir", str(runs), "--seeds", "0,1", "--quiet", "--set", "train.steps=4"]
            + TINY_SET
        )
        == 0
    )
    assert (
        main(
            [
                "train",
                "demo/lstm",
                "--runs-dir",
                str(runs),
                "--seeds",
                "0",
                "--quiet",
                "--set",
                "train.steps=4",
                "--set",
                "optim.lr=3e-4",
            ]
            + TINY_SET
        )
        == 0
    )
    return runs


def test_resume_with_fewer_steps_is_refused_and_more_steps_keep_config_and_result_consistent(tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["train", "demo/lstm", "--out", str(out), "--quiet"] + TINY_SET
    assert main(argv + ["--set", "train.steps=6"]) == 0
    before = {f: (out / f).read_bytes() for f in ("config.json", "result.json", "metrics.jsonl")}
    assert main(argv + ["--set", "train.steps=4", "--resume"]) == 2
    assert "already trained 6 steps" in capsys.readouterr().err
    assert {f: (out / f).read_bytes() for f in before} == before  # nothing rewritten
    assert main(argv + ["--set", "train.steps=8", "--resume"]) == 0
    cfg, res = (json.loads((out / f).read_text()) for f in ("config.json", "result.json"))
    assert cfg["train"]["steps"] == res["steps"] == 8


def test_resume_finds_the_run_when_only_steps_changed(tmp_path, capsys):
    runs = tmp_path / "runs"
    argv = ["train", "demo/lstm", "--runs-dir", str(runs), "--quiet"] + TINY_SET
    assert main(argv + ["--set", "train.steps=4"]) == 0
    (first,) = runs.glob("demo-lstm-*/seed*")
    assert main(argv + ["--set", "train.steps=6", "--resume"]) == 0
    assert list(runs.glob("demo-lstm-*/seed*")) == [first]  # continued in place, no new directory
    assert json.loads((first / "result.json").read_text())["steps"] == 6


# ------------------------------------------------------------------ tables by configuration


def test_table_never_pools_configurations_and_counts_a_repeated_seed_once(trained, tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(trained, runs)
    (same,) = [d for d in runs.glob("demo-lstm-*") if len(list(d.glob("seed*"))) == 2]
    shutil.copytree(same / "seed0", runs / "copy-of-seed0")  # the same run, elsewhere
    assert main(["table", str(runs), "--metrics", "test/loss"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("| demo-lstm")]
    assert len(rows) == 2  # two configurations, two rows
    lr_row = [r for r in rows if "optim.lr=0.0003" in r]
    assert len(lr_row) == 1 and "(1)" in lr_row[0]
    other = [r for r in rows if r not in lr_row][0]
    assert "optim.lr=0.001" in other and "(2)" in other  # seeds 0 and 1, the copy counted once
    assert "repeats seed 0" in out
    vals = [json.loads((same / s / "result.json").read_text())["test"]["test/loss"] for s in ("seed0", "seed1")]
    from rnnlab.results import _fmt

    assert f"| {_fmt(sum(vals) / 2)} +- " in other


def test_unknown_metrics_and_empty_folders_are_one_line_errors(trained, tmp_path, capsys):
    assert main(["table", str(trained), "--metrics", "test/nope"]) == 2
    err = capsys.readouterr().err
    assert "test/nope" in err and "test/loss" in err and err.count("\n") == 1
    assert main(["plot", str(trained), "--metric", "val/nope", "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "val/nope" in err and "val/loss" in err and not (tmp_path / "x.png").exists()
    assert main(["thresholds", str(trained), "--metric", "val/nope"]) == 2
    assert "val/loss" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["thresholds", str(tmp_path / "empty")]) == 1
    assert "no finished runs" in capsys.readouterr().err


def test_broken_metrics_lines_are_skipped_and_named(trained, tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(trained, runs)
    victim = sorted(runs.rglob("metrics.jsonl"))[0]
    rows, bad = rundir.read_jsonl(victim)
    assert bad == []
    with victim.open("a") as f:
        f.write('{"step": 9, "val/lo')  # what an interrupted write leaves
    with sorted(runs.rglob("metrics.jsonl"))[1].open("a") as f:
        f.write("\x00\x00garbage\n")
    assert rundir.read_jsonl(victim) == (rows, [len(rows) + 1])
    assert main(["plot", str(runs), "--metric", "val/loss", "-o", str(tmp_path / "c.png")]) == 0
    assert str(victim) in capsys.readouterr().err
    assert main(["thresholds", str(runs), "--steps-per-epoch", "2"]) == 0
    assert "skipped unreadable line" in capsys.readouterr().err
    (runs / "broken").mkdir()
    (runs / "broken" / "result.json").write_text('{"name": "x", "fin')
    assert main(["table", str(runs)]) == 0
    assert "skipped" in capsys.readouterr().out


# ------------------------------------------------------------------ suites with grids


def _suite(tmp_path, body: str) -> str:
    p = tmp_path / "s.toml"
    p.write_text(
        'name = "g"\npresets = ["demo/lstm"]\nseeds = [0, 1]\n'
        f'set = {json.dumps(TINY + ["train.steps=2"])}\nmetrics = ["test/loss"]\n' + body
    )
    return str(p)


def test_grid_suite_one_row_per_point_reuse_only_on_match(tmp_path, capsys):
    from rnnlab.suite import grid_points

    assert grid_points(
        {
            "optim.lr": [1e-3, 3e-4],
            "size": [{"model.hidden_size": 8, "optim.clip": 1.0}, {"model.hidden_size": 12, "optim.clip": 2.0}],
        }
    ) == [
        ["optim.lr=0.001", "model.hidden_size=8", "optim.clip=1.0"],
        ["optim.lr=0.001", "model.hidden_size=12", "optim.clip=2.0"],
        ["optim.lr=0.0003", "model.hidden_size=8", "optim.clip=1.0"],
        ["optim.lr=0.0003", "model.hidden_size=12", "optim.clip=2.0"],
    ]
    suite = _suite(tmp_path, '[grid]\n"optim.lr" = [1e-3, 3e-4]\n')
    runs = tmp_path / "runs"
    assert main(["suite", suite, "--runs-dir", str(runs)]) == 0
    cap = capsys.readouterr()
    assert cap.err.count("[trained]") == 4
    rows = [ln for ln in cap.out.splitlines() if ln.startswith("| demo-lstm")]
    assert len(rows) == 2 and all("(2)" in r for r in rows)
    assert {("optim.lr=0.001" in r, "optim.lr=0.0003" in r) for r in rows} == {(True, False), (False, True)}
    cfgs = [json.loads(p.read_text()) for p in runs.rglob("config.json")]
    assert sorted((c["optim"]["lr"], c["train"]["seed"]) for c in cfgs) == [(3e-4, 0), (3e-4, 1), (1e-3, 0), (1e-3, 1)]
    assert main(["suite", suite, "--runs-dir", str(runs)]) == 0
    assert capsys.readouterr().err.count("[done]") == 4
    # other steps: not the finished runs, new directories
    assert main(["suite", suite, "--runs-dir", str(runs), "--set", "train.steps=3"]) == 0
    cap = capsys.readouterr()
    assert cap.err.count("[trained]") == 4 and "[done]" not in cap.err
    assert len(list(runs.rglob("result.json"))) == 8


@pytest.mark.parametrize(
    "grid, words",
    [
        ('"optim.lrr" = [1e-3]', ["lrr", "valid keys"]),
        ('"optim.lr" = []', ["optim.lr", "non-empty"]),
        ("lr = [1e-3]", ["'lr'", "names no config key"]),
        ('"train.seed" = [1, 2]', ["seeds"]),
        ('t = [{"task.nope" = 1}]', ["nope"]),
    ],
)
def test_bad_grids_are_one_line_errors(tmp_path, capsys, grid, words):
    assert main(["suite", _suite(tmp_path, "[grid]\n" + grid + "\n"), "--runs-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words) and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()


def test_a_suite_with_a_failed_run_finishes_the_others_and_exits_nonzero(tmp_path, capsys):
    tiny = tmp_path / "tiny.toml"  # demo/lstm, small
    text = config.preset_path("demo/lstm").read_text()
    for key, v in (("L", 8), ("val_size", 16), ("test_size", 16)):
        text = re.sub(rf"(?m)^{key} = \d+$", f"{key} = {v}", text)
    tiny.write_text(text)
    assert config.load(str(tiny)).task.options["val_size"] == 16
    p = tmp_path / "s.toml"
    p.write_text(
        f'name = "f"\npresets = [{json.dumps(str(tiny))}, "asrnn/smnist-n122"]\nseeds = [0]\n'
        f"set = {json.dumps(tiny_copy(L=None, K=None, eval_size=None, hidden=None, batch=16, eval_every=2, log_every=None, steps=2))}\n"
    )
    empty = tmp_path / "no-data"
    empty.mkdir()
    assert main(["suite", str(p), "--runs-dir", str(tmp_path / "r"), "--data-dir", str(empty)]) == 1
    cap = capsys.readouterr()
    assert "[failed]" in cap.err and "[trained]" in cap.err and "| demo-lstm |" in cap.out
    assert "1 of 2 runs" in cap.err
    assert len(list((tmp_path / "r").rglob("result.json"))) == 1


def test_resume_drops_a_partial_last_metrics_line(tmp_path, capsys):
    def rows(out):
        return [
            {k: v for k, v in json.loads(ln).items() if k != "time"}
            for ln in (out / "metrics.jsonl").read_text().splitlines()
        ]

    argv = ["train", "demo/lstm", "--quiet", "--set", "train.log_every=1"] + TINY_SET
    assert main(argv + ["--out", str(tmp_path / "a"), "--set", "train.steps=6"]) == 0
    b = tmp_path / "b"
    assert main(argv + ["--out", str(b), "--set", "train.steps=4"]) == 0
    with (b / "metrics.jsonl").open("a") as f:
        f.write('{"step": 5, "train/lo')  # a write interrupted by a kill
    capsys.readouterr()
    assert main(argv + ["--out", str(b), "--set", "train.steps=6", "--resume"]) == 0
    assert "dropped unreadable line" in capsys.readouterr().err
    assert rows(b) == rows(tmp_path / "a")  # as if never interrupted


def test_demo_reuses_a_finished_run_only_when_its_configuration_matches(tmp_path, capsys, monkeypatch):
    from rnnlab import cli

    monkeypatch.setattr(cli.many, "DEMO_PRESETS", ["demo/lstm"])  # the demo's module reads it
    assert main(["demo", "--out", str(tmp_path), "--steps", "2"]) == 0
    assert "training demo-lstm" in capsys.readouterr().err
    assert main(["demo", "--out", str(tmp_path), "--steps", "2"]) == 0
    assert "already done" in capsys.readouterr().err
    assert main(["demo", "--out", str(tmp_path), "--steps", "3"]) == 0  # other steps: a new run
    cap = capsys.readouterr()
    assert "training demo-lstm" in cap.err and "already done" not in cap.err
    steps = sorted(json.loads(p.read_text())["steps"] for p in tmp_path.rglob("result.json"))
    assert steps == [2, 3]  # the old run is kept beside the new one
    assert "| demo-lstm |" in cap.out and "(1)" in cap.out  # the table shows this invocation's run


# A holder that forks a child which keeps the lock's file open a moment after the holder exits:
# the lock is still held although its recorded PID is gone, as while a killed multi-threaded
# worker is still exiting.
HOLD_THEN_DIE = (
    "import os, sys, time\n"
    "import rnnlab.rundir as m\n"
    "lock = m.RunLock(m.Path(sys.argv[1])); m.Path(sys.argv[1]).mkdir(parents=True); lock.acquire()\n"
    "if os.fork() == 0:\n    time.sleep(float(sys.argv[3])); os._exit(0)\n"
    "print('held', flush=True); os._exit(0)\n"
)


def test_pid_alive_counts_a_zombie_as_exited():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # exited but not yet reaped: a zombie
        if Path(f"/proc/{p.pid}/stat").exists() and not rundir.pid_alive(p.pid):
            break
        time.sleep(0.02)
    if sys.platform.startswith("linux"):
        assert not rundir.pid_alive(p.pid)
        assert Path(f"/proc/{p.pid}").exists()  # still there, as a zombie
    p.wait()
    assert not rundir.pid_alive(p.pid)
    assert rundir.pid_alive(os.getpid())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("linger, waits", [(1.0, True), (4.0, False)])
def test_a_lock_whose_recorded_holder_is_dead_is_awaited_a_moment(tmp_path, monkeypatch, linger, waits):
    monkeypatch.setattr(rundir, "DYING_HOLDER_WAIT_S", 2.0)
    d = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD_THEN_DIE, str(d), rundir.__file__, str(linger)],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert p.stdout.readline().strip() == "held"
    p.wait()
    p.stdout.close()
    t0 = time.monotonic()
    if waits:  # released within the wait: taken over, after about `linger` seconds
        with rundir.claim(d) as lock:
            assert "no longer running" in lock.took_over
        assert 0.3 < time.monotonic() - t0 < rundir.DYING_HOLDER_WAIT_S
    else:  # still held after the wait: a process we cannot see holds it; refuse, naming the record
        with pytest.raises(rundir.RunLocked, match=f"pid {p.pid} on "):
            with rundir.claim(d):
                pass
        assert time.monotonic() - t0 >= rundir.DYING_HOLDER_WAIT_S - 0.5


# ------------------------------------------------------------------ the run's files, named once


def test_run_files_name_every_file_the_trainer_writes_and_the_record_it_copies(tmp_path):
    from rnnlab.train import train

    out = tmp_path / "r"
    train(config.load("demo/lstm", [*TINY, "train.steps=2"]), out, progress=False)
    files = rundir.RunFiles(out)
    written = {p.name for p in out.iterdir()}
    known = {files.CONFIG, files.TASK, files.METRICS, files.CHECKPOINT, files.BEST, files.RESULT, files.LOCK}
    assert written <= known, written - known  # nothing written under a name RunFiles does not know
    assert {"config.json", "task.json", "metrics.jsonl", "checkpoint.pt", "best.pt", "result.json"} <= written
    assert [p.name for p in files.record()] == ["config.json", "task.json", "metrics.jsonl", "result.json"]
    (out / files.ANALYSIS).write_text("{}")
    assert [p.name for p in files.record()][-2:] == ["analysis.json", "result.json"]  # result.json last
    assert rundir.RunFiles.below(tmp_path) == [out / "result.json"]
    assert files.read_result() == json.loads((out / "result.json").read_text())
    assert rundir.is_finished(out) and not rundir.is_finished(tmp_path)
