"""``rnnlab compare``: baselines from the ledger, matched sizes, one table and one figure per task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from owncell import write_cells
from rnnlab import compare as C
from rnnlab.cli import main
from rnnlab.ledger.published import ROWS


@pytest.mark.parametrize(
    "task, expected",
    [
        # printed numbers: the best row of the table (Lipschitz RNN's 96.3%; the LSTM's 1.41 BPC),
        # then the paper's own cell and the LSTM
        ("psmnist", ["dmu/psmnist-lipschitz", "dmu/psmnist-N128", "dmu/psmnist-lstm"]),
        ("ptb_char", ["asrnn/ptb_char-bptt150-lstm", "asrnn/ptb_char-bptt150"]),
        # curves only: the paper's own cell and the LSTM of the same figure
        ("copy-T200", ["nnrnn/copy", "nnrnn/copy-lstm"]),
        ("copy-L1000", ["asrnn/copy-L1000", "asrnn/copy-L1000-lstm"]),
        ("adding", ["dmu/adding-dmu", "dmu/adding-lstm"]),
        ("temporal_order", ["dmu/temporal_order-dmu", "dmu/temporal_order-lstm"]),
        ("noisy_sequence", ["dmu/noisy_sequence-dmu", "dmu/noisy_sequence-lstm"]),
    ],
)
def test_the_baselines_come_from_the_ledger(task, expected):
    assert C.baselines(C.TASKS[task]) == expected


def test_published_numbers_at_the_same_setting():
    t = C.TASKS["psmnist"]
    lipschitz = next(r for r in ROWS if r.presets[:1] == ("dmu/psmnist-lipschitz",) and r.value is not None)
    assert C.published(t, "dmu/psmnist-lipschitz") == f"{lipschitz.value:.4g} (dmu Table IV)" == "0.963 (dmu Table IV)"
    assert C.published(C.TASKS["ptb_char"], "asrnn/ptb_char-bptt150") == "1.46 +- 0.006 (asrnn Table 1)"
    assert C.published(C.TASKS["adding"], "dmu/adding-dmu") == "-"  # a figure: no number


def test_compare_writes_a_table_and_a_figure_per_task(tmp_path, monkeypatch, capsys):
    cells = write_cells(tmp_path / "outside", "cmpcells")
    spec = f"{cells}:MinGated"
    out = tmp_path / "cmp"
    argv = ["compare", spec, "--tasks", "adding,psmnist", "--seeds", "0,1", "--out", str(out)]
    argv += ["--data-dir", str(tmp_path / "nodata")]
    argv += ["--set", "train.steps=4", "--set", "train.eval_every=2", "--set", "task.val_size=32"]
    argv += ["--set", "task.test_size=32"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "quick budget: a few CPU-minutes per task" in text and "train.steps=4" in text
    lines = [line for line in text.splitlines() if line.startswith("| adding |")]
    assert [line.split(" | ")[1] for line in lines] == [spec, "dmu", "lstm"]
    assert "psmnist: skipped, its data is absent" in text and "rnnlab data download mnist" in text
    record = json.loads((out / "results.json").read_text())
    budget = record["rows"][1]["params"]  # the DMU preset's own count: the budget
    for row in record["rows"]:
        assert len(row["values"]) == 2 and len(row["run_dirs"]) == 2
        assert abs(row["params"] - budget) <= 0.15 * budget  # matched (the nearest width)
        result = json.loads(Path(row["run_dirs"][0], "result.json").read_text())
        assert result["params"]["budget"] == budget and result["steps"] == 4
        # the seeds of a task train as one batched model only where every cell has a batched path
        # of its own (MinGated runs the reference loop, which is slower batched): here one by one
        assert result["conditions"].get("ensemble", 1) == 1
    assert (out / "adding.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "psmnist.png").exists()
    assert (out / "table.md").read_text().strip() == text.strip()


def test_bad_arguments_are_one_line(tmp_path, capsys):
    assert main(["compare", "gru", "--tasks", "copy-L9", "--out", str(tmp_path)]) == 2
    assert "unknown task(s) ['copy-L9']" in capsys.readouterr().err
    assert main(["compare", "nosuch.module:Cell", "--out", str(tmp_path)]) == 2
    assert "cannot import module 'nosuch.module'" in capsys.readouterr().err


def test_the_documented_tasks_are_the_tasks():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "own-cell.md").read_text()
    table = doc.split("| task | the experiment (home preset)", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    documented = {line.split("`")[1]: line.split("(`")[1].split("`")[0] for line in rows}
    assert documented == {k: t.preset for k, t in C.TASKS.items()}


@pytest.mark.slow  # starts a local Ray instance
def test_compare_on_ray_gives_the_local_numbers(tmp_path, capsys):
    ray = pytest.importorskip("ray")
    cells = write_cells(tmp_path / "outside", "raycells")
    common = ["compare", f"{cells}:MinGated", "--tasks", "adding", "--seeds", "0", "--set", "train.steps=4"]
    common += ["--set", "train.eval_every=2", "--set", "task.val_size=32", "--set", "task.test_size=32"]
    assert main([*common, "--out", str(tmp_path / "local")]) == 0
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        assert main([*common, "--out", str(tmp_path / "ray"), "--backend", "ray"]) == 0
    finally:
        ray.shutdown()
    local, remote = (json.loads((tmp_path / d / "results.json").read_text())["rows"] for d in ("local", "ray"))
    assert [r["values"] for r in remote] == [r["values"] for r in local] and len(local) == 3


def test_seeds_train_as_one_batched_model_where_every_cell_has_a_batched_path():
    from rnnlab import config

    dmu, lstm, asrnn = (config.preset_path(n) for n in ("dmu/adding-dmu", "dmu/adding-lstm", "asrnn/copy-L1000"))
    assert C._ensemble_ok([dmu, lstm])
    assert not C._ensemble_ok([dmu, asrnn])  # asRNN's batched model is its step loop under vmap


@pytest.mark.parametrize("args", [["--tasks", ""], ["--tasks", ","], ["--tasks", " , "], ["--jobs", "0"]])
def test_a_selection_of_no_task_or_no_job_is_refused_before_anything_runs(tmp_path, args):
    """`compare --tasks ''` ran all seven tasks (an empty list read as "not given")."""
    import os
    import subprocess
    import sys

    src = str(Path(C.__file__).resolve().parents[1])
    out = tmp_path / "cmp"
    done = subprocess.run(
        [sys.executable, "-m", "rnnlab.cli", "compare", "gru", *args, "--out", str(out)],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=120,
    )
    (line,) = done.stderr.strip().splitlines()
    assert done.returncode == 2 and line.startswith("rnnlab: error: "), done.stderr
    assert (
        "--tasks" in line and "names nothing" in line and "adding" in line
    ) or "--jobs must be an integer >= 1" in line
    with pytest.raises(C.ConfigError, match="--tasks names no task; give one or more of copy-T200"):
        C.compare("gru", tasks=[], out=tmp_path / "py")  # the library refuses it too
    assert not (tmp_path / "py").exists()
    assert not out.exists() and done.stdout == ""


def test_ctrl_c_of_compare_says_rerun_compare_and_the_rerun_resumes(tmp_path):
    """After Ctrl-C, compare advised `rnnlab train ... --resume`; rerunning compare is the fix."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import default_sigint, wait_until

    src = str(Path(C.__file__).resolve().parents[1])
    out = tmp_path / "cmp"
    argv = [sys.executable, "-m", "rnnlab.cli", "compare", "gru", "--tasks", "adding", "--seeds", "0"]
    argv += ["--no-ensemble", "--out", str(out), "--set", "train.steps=20000"]
    run = out / "runs" / "compare-adding" / "adding-gru" / "seed0"
    for attempt in range(2):
        p = subprocess.Popen(
            argv,
            env={**os.environ, "PYTHONPATH": src},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_sigint,
        )
        starts = attempt + 1
        assert wait_until(
            lambda: (
                (run / "attempts.jsonl").exists()
                and (run / "attempts.jsonl").read_text().count('"start"') == starts
                and (run / "checkpoint.pt").exists()
            ),
            timeout=120,
        )
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        assert p.returncode == 130, err
        last = err.strip().splitlines()[-1]
        assert "rerun the same rnnlab compare command" in last and "--resume" not in last, last
    events = [json.loads(line) for line in (run / "attempts.jsonl").read_text().splitlines()]
    assert [e.get("resume") for e in events if e["event"] == "start"] == [False, True]  # the rerun resumed
