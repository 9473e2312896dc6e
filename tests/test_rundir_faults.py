"""Fault injection for run directories, for real: SIGKILL of `rnnlab train` at random moments
(including during checkpoint writes), SIGINT, two concurrent writers, a SIGKILLed suite driver.
Each test asserts the outcome: the refusal or message, nothing lost or mixed, and a resumed run
equal to an uninterrupted one. The long kill loops are marked slow."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import (
    default_sigint,
    kill_driver_and_check_its_workers_die,
    run_record,
    set_flags,
    tiny_copy,
    wait_until,
)
from rnnlab.cli import main

SRC = str(Path(__file__).resolve().parents[1] / "src")
TINY = tiny_copy(K=None, eval_size=16, hidden=None, batch=16, eval_every=2, log_every=1)


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONUNBUFFERED": "1"}


def _train_argv(out: Path, steps: int) -> list[str]:
    return ["train", "demo/lstm", "--out", str(out), "--quiet", *set_flags(*TINY, f"train.steps={steps}")]


def _spawn(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rnnlab.cli", *argv],
        env=_env(),
        preexec_fn=default_sigint,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _rows(out: Path) -> int:
    try:
        return (out / "metrics.jsonl").read_bytes().count(b"\n")
    except OSError:
        return 0


def _train_steps(out: Path) -> list[int]:
    """The step of every training-loss row of metrics.jsonl (one per step: log_every=1)."""
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "train/loss" in r]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted runs, in this process, by number of steps."""
    cache = {}

    def get(steps: int) -> dict:
        if steps not in cache:
            out = tmp_path_factory.mktemp("ref") / "run"
            assert main(_train_argv(out, steps)) == 0
            cache[steps] = run_record(out)
        return cache[steps]

    return get


def _finish(out: Path, steps: int, capsys) -> str:
    """Resume (or start over, if killed before the first checkpoint) to the end, in-process."""
    resume = ["--resume"] if (out / "checkpoint.pt").exists() else []
    assert main(_train_argv(out, steps) + resume) == 0
    return capsys.readouterr().err


def _kill_during_training(out: Path, steps: int, rng: random.Random, during_checkpoint: bool = False) -> bool:
    """Start `rnnlab train`, SIGKILL it at a random moment of training (or while checkpoint.pt.tmp
    exists, or mid-training where a loaded machine missed every write for a few checkpoints);
    return whether it was killed before it finished."""
    tmp = out / "checkpoint.pt.tmp"
    if during_checkpoint:  # a temp file left by the previous kill must not count as this write
        tmp.unlink(missing_ok=True)
    p = _spawn(_train_argv(out, steps) + (["--resume"] if (out / "checkpoint.pt").exists() else []))
    try:
        start = _rows(out)
        wait_until(lambda: p.poll() is not None or _rows(out) > start + 2)
        if during_checkpoint:  # the write is brief: after a few checkpoints' rows without seeing it
            # (one checkpoint every 2 steps, 1.5 rows a step) the kill lands anyway, mid-training
            wait_until(lambda: p.poll() is not None or tmp.exists() or _rows(out) > start + 12, timeout=30, poll=0)
            _kill_during_training.mid_write += tmp.exists()
        else:
            time.sleep(rng.uniform(0, 0.4))
        p.kill()
    finally:
        p.wait()
        p.stdout.close()
        p.stderr.close()
    return p.returncode == -signal.SIGKILL


_kill_during_training.mid_write = 0  # kills that found checkpoint.pt.tmp on disk (reported)


def test_sigkill_of_train_then_resume_equals_an_uninterrupted_run(tmp_path, reference, capsys):
    steps = 40
    out = tmp_path / "run"
    killed = _kill_during_training(out, steps, random.Random(0))
    # on a fast machine the kill can land after the run released its lock (interpreter shutdown)
    stale = killed and (out / ".lock").exists()
    err = _finish(out, steps, capsys)
    if stale:  # the killed process's lock record was left behind: taken over, and said so
        assert "took over the stale lock" in err and "no longer running" in err
    assert not (out / ".lock").exists()
    assert run_record(out) == reference(steps)


@pytest.mark.slow
@pytest.mark.parametrize("during_checkpoint", [False, True])
def test_sigkill_loop_including_checkpoint_writes(tmp_path, reference, capsys, during_checkpoint):
    steps, rng = 60, random.Random(1 + during_checkpoint)
    out = tmp_path / "run"
    kills = sum(_kill_during_training(out, steps, rng, during_checkpoint) for _ in range(5))
    assert kills >= 3  # most attempts hit a running training (the run is not over after 5 kills)
    if during_checkpoint:
        with capsys.disabled():
            print(f"\n{kills} kills, {_kill_during_training.mid_write} with checkpoint.pt.tmp on disk")
    _finish(out, steps, capsys)
    assert run_record(out) == reference(steps)


def test_concurrent_writer_is_refused_and_sigint_releases_the_lock(tmp_path, capsys):
    steps = 100_000  # never reached: SIGINT comes first even when the checks in between are slow
    out = tmp_path / "run"
    a = _spawn(_train_argv(out, steps))
    try:
        assert wait_until(lambda: a.poll() is not None or _rows(out) >= 2), "the first writer never started"
        assert a.poll() is None, a.communicate()
        before = (out / "config.json").read_bytes()
        holder = json.loads((out / ".lock").read_text())
        assert holder["pid"] == a.pid and holder["command"].startswith("rnnlab train demo/lstm")
        # a second training into the same --out, and a --resume there, while the first one trains
        for extra in ([], ["--resume"]):
            assert main(_train_argv(out, steps) + extra) == 2
            err = capsys.readouterr().err
            assert f"is in use: locked by pid {a.pid}" in err and err.count("\n") == 2  # "run ->" + error
        assert (out / "config.json").read_bytes() == before
        a.send_signal(signal.SIGINT)
        _, a_err = a.communicate(timeout=60)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert a.returncode == 130 and "interrupted" in a_err
    assert not (out / ".lock").exists()  # released on the way out
    at = torch.load(out / "checkpoint.pt", weights_only=False)["progress"]["step"]
    assert 0 < at < steps
    # the interrupted run resumes cleanly (a few more steps here; resume == uninterrupted is
    # the SIGKILL test's assertion)
    assert main(_train_argv(out, at + 2) + ["--resume"]) == 0
    assert "took over" not in capsys.readouterr().err
    run_record(out)


@pytest.mark.slow
def test_two_trainings_started_together_one_wins(tmp_path):
    out = tmp_path / "run"
    ps = [_spawn(_train_argv(out, 60)) for _ in range(2)]
    res = [p.communicate(timeout=300) + (p.returncode,) for p in ps]
    codes = sorted(r[2] for r in res)
    assert codes == [0, 2], res
    loser = [r for r in res if r[2] == 2][0][1]
    # either it found the winner training (lock) or, if it came late, the finished run
    assert "is in use: locked by pid" in loser or "already holds a run" in loser
    cfg = json.loads((out / "config.json").read_text())
    res = json.loads((out / "result.json").read_text())
    assert cfg["train"]["steps"] == res["steps"] == 60 and _train_steps(out) == list(range(1, 61))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the workers")
def test_killed_suite_driver_takes_its_workers_along_and_a_restart_finishes_each_run_once(tmp_path, capsys):
    suite = tmp_path / "s.toml"
    suite.write_text(
        f'name = "k"\npresets = ["demo/lstm"]\nseeds = [0, 1]\nset = {json.dumps(TINY + ["train.steps=60"])}\n'
    )
    runs = tmp_path / "runs"
    argv = ["suite", str(suite), "--runs-dir", str(runs), "--jobs", "2"]
    driver = _spawn(argv)
    try:
        training = lambda: [m for m in runs.rglob("metrics.jsonl") if m.stat().st_size > 0]  # noqa: E731
        assert wait_until(lambda: driver.poll() is not None or len(training()) >= 2), "no worker started"
        assert driver.poll() is None, driver.communicate()
        kill_driver_and_check_its_workers_die(driver)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        driver.stdout.close()
        driver.stderr.close()
    finished = [d for d in runs.glob("k/*/seed*") if (d / "result.json").exists()]
    started = [d for d in runs.glob("k/*/seed*") if (d / "checkpoint.pt").exists() and d not in finished]
    assert len(finished) < 2  # the kill interrupted something
    assert main(argv[:-1] + ["1"]) == 0  # the restart: no stranger holds a lock, nothing is redone
    err = capsys.readouterr().err
    statuses = [ln.split("]")[0].strip(" [") for ln in err.splitlines() if ln.startswith("  [")]
    assert len(statuses) == 2 and set(statuses) <= {"done", "resumed", "trained"}
    assert statuses.count("done") == len(finished) and statuses.count("resumed") == len(started)
    for d in runs.glob("k/*/seed*"):
        assert _train_steps(d) == list(range(1, 61))  # no step lost or trained twice
        assert json.loads((d / "result.json").read_text())["steps"] == 60
        assert not (d / ".lock").exists()
