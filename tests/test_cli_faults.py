"""The command line under hostile input: one line and the right exit code, nothing left behind.

Each case was a traceback, a wrong run or a misleading message before (reliability issue III).
"""

import json
import os
import subprocess
import sys

import pytest

from rnnlab import train as train_module
from rnnlab.cli import main


def one_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("rnnlab: error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_demo_steps_below_one_is_refused_before_anything_trains(tmp_path, capsys, monkeypatch):
    """``--steps 0`` used to mean "the presets' 600 steps" and trained all five models."""

    def no_training(*a, **k):
        raise AssertionError("the demo trained although --steps was refused")

    monkeypatch.setattr(train_module, "train", no_training)
    for steps in ("0", "-3"):
        assert main(["demo", "--steps", steps, "--out", str(tmp_path / "demo")]) == 2
        line = one_error(capsys.readouterr().err)
        assert "--steps must be an integer >= 1" in line and f"got {steps}" in line
    assert not (tmp_path / "demo").exists()


def _fake_run(root, name="a", seed=0, losses=(1.0, 0.1, 0.01)):
    run = root / name / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"name": name, "seed": seed, "final": {}, "test": {}}))
    rows = [{"step": 10 * (i + 1), "val/loss": v} for i, v in enumerate(losses)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_thresholds_refuses_a_non_positive_epoch_length(tmp_path, capsys):
    """``--steps-per-epoch 0`` divided by zero (a traceback); a negative one gave negative epochs."""
    _fake_run(tmp_path)
    for bad in ("0", "-10"):
        assert main(["thresholds", str(tmp_path), "--steps-per-epoch", bad]) == 2
        assert "--steps-per-epoch must be an integer >= 1" in one_error(capsys.readouterr().err)
    assert main(["thresholds", str(tmp_path), "--steps-per-epoch", "10", "--thresholds", "0.5,0.005"]) == 0
    out = capsys.readouterr().out
    assert "  5e-01 | 0 | 1" in out and "  5e-03 | 0 | 0" in out  # 0.1 at epoch 2; never 0.005


def test_thresholds_that_are_not_finite_positive_numbers_are_refused(tmp_path, capsys):
    """`--thresholds -1,nan,inf` was accepted (a table of thresholds no loss can mean)."""
    _fake_run(tmp_path)
    for bad, named in (("-1,nan,inf", "-1.0, nan, inf"), ("0", "0.0"), ("0.5,-0.1", "-0.1")):
        assert main(["thresholds", str(tmp_path), "--steps-per-epoch", "10", f"--thresholds={bad}"]) == 2
        out, err = capsys.readouterr()
        line = one_error(err)
        assert "--thresholds must be finite positive numbers" in line and f"got {named};" in line, line
        assert out == ""
    assert main(["thresholds", str(tmp_path), "--steps-per-epoch", "10", "--thresholds", "0.5"]) == 0


def test_a_metrics_selection_of_nothing_is_refused_not_read_as_all(tmp_path, capsys):
    """`table --metrics ''` printed every metric (an empty selection read as "not given")."""
    from conftest import set_flags, tiny_copy

    assert main(["train", "demo/lstm", *set_flags(*tiny_copy(steps=2)), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    capsys.readouterr()
    for bad in ("", ",", " , "):
        assert main(["table", str(tmp_path), "--metrics", bad]) == 2
        out, err = capsys.readouterr()
        assert "--metrics" in one_error(err) and "names nothing" in err and out == ""
    assert main(["table", str(tmp_path), "--metrics", "test/loss"]) == 0


@pytest.mark.parametrize("value", ["0.1", None, [0.1]])
def test_a_dropout_of_the_wrong_type_is_one_line_naming_it(value):
    """`rnnlab.LSTM(3, 4, 2, dropout="0.1")` gave a bare TypeError ("'<=' not supported between
    instances of 'float' and 'str'")."""
    import rnnlab

    with pytest.raises(ValueError) as info:
        rnnlab.LSTM(3, 4, 2, dropout=value)
    assert str(info.value) == f"LSTM: dropout must be a float in [0, 1), got {value!r}"
    assert rnnlab.LSTM(3, 4, 2, dropout=0.1).dropout == 0.1


@pytest.fixture
def loop(tmp_path):
    """``loop-a -> loop-b -> loop-a``: a loop of symbolic links."""
    a, b = tmp_path / "loop-a", tmp_path / "loop-b"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "demo/lstm", "--runs-dir", "{loop}", "--quiet"],
        ["train", "demo/lstm", "--out", "{loop}/x", "--quiet"],
        ["demo", "--out", "{loop}", "--steps", "1"],
        ["suite", "demo", "--runs-dir", "{loop}"],
        ["table", "{loop}"],
        ["analyze", "schur", "{loop}"],
    ],
)
def test_a_loop_of_symbolic_links_is_one_line(argv, loop, capsys, monkeypatch):
    def no_training(*a, **k):
        raise AssertionError("trained into a symlink loop")

    monkeypatch.setattr(train_module, "train", no_training)
    assert main([a.format(loop=loop) for a in argv]) == 2
    line = one_error(capsys.readouterr().err)
    assert str(loop) in line and "loop of symbolic links" in line


# a width whose first weight alone exceeds any address space: refused at once, nothing allocated
HUGE = 10**13


def test_a_model_too_large_for_memory_is_one_line_and_leaves_no_directory(tmp_path, capsys):
    out = tmp_path / "runs" / "x"
    assert main(["train", "demo/lstm", "--out", str(out), "--set", f"model.hidden_size={HUGE}", "--quiet"]) == 1
    line = one_error(capsys.readouterr().err)
    assert "out of memory" in line and "GiB" in line and "model.hidden_size" in line
    assert not (tmp_path / "runs").exists()


def test_failed_starts_of_three_more_kinds_leave_no_stub(tmp_path, capsys):
    """Before: a model too large left ``task.json``; a first batch too large left ``config.json``,
    ``metrics.jsonl`` and ``task.json``; ``--tensorboard`` with missing data left ``tensorboard/``."""
    out = tmp_path / "runs" / "x"
    base = ["train", "demo/lstm", "--out", str(out), "--quiet"]
    assert main(base + ["--set", f"model.hidden_size={HUGE}"]) == 1  # building the model
    assert main(base + ["--set", f"train.batch_size={HUGE}"]) == 1  # the first training step
    assert all("out of memory" in ln for ln in capsys.readouterr().err.splitlines() if "error" in ln)
    assert not (tmp_path / "runs").exists()
    pytest.importorskip("tensorboard")
    empty = tmp_path / "no-data"
    empty.mkdir()
    assert (
        main(["train", "asrnn/smnist-n122", "--out", str(out), "--data-dir", str(empty), "--tensorboard", "--quiet"])
        == 1
    )
    assert "train-images" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_failed_start_keeps_what_the_directory_held_and_a_run_that_trained_keeps_its_rows(tmp_path, capsys):
    out = tmp_path / "x"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["train", "demo/lstm", "--out", str(out), "--set", f"model.hidden_size={HUGE}", "--quiet"]) == 1
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    capsys.readouterr()
    # diverged at its first evaluation, before any checkpoint: its metrics row explains it and stays
    assert (
        main(
            [
                "train",
                "demo/exprnn",
                "--out",
                str(tmp_path / "d"),
                "--set",
                'optim.name="sgd"',
                "--set",
                "optim.lr=1e30",
                "--set",
                "train.eval_every=1",
                "--set",
                "train.steps=3",
                "--quiet",
            ]
        )
        == 1
    )
    assert "no good checkpoint" in one_error(capsys.readouterr().err)
    assert (tmp_path / "d" / "metrics.jsonl").read_text().strip()


def test_a_closed_stdout_ends_quietly_like_other_tools(tmp_path):
    """``rnnlab list | head`` exited 1 with "Broken pipe; check the path and its permissions"."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before rnnlab writes: every write fails with EPIPE
    try:
        p = subprocess.run(
            [sys.executable, "-m", "rnnlab.cli", "list", "presets"],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(w)
    assert p.stderr == ""
    assert p.returncode == 128 + 13  # what a shell reports for `seq 100000 | head -1`'s seq (SIGPIPE)
