"""The command line, end to end in a temporary directory."""

import json
import subprocess
import sys

from conftest import set_flags
from rnnlab.cli import main

FAST = [
    *set_flags("task.L=8", "task.val_size=32", "task.test_size=32", "train.eval_every=5"),
    "--quiet",
]


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("exprnn", "lstm", "copy", "adding", "demo/exprnn", "init='henaff'"):
        assert word in out


def test_train_table_plot_resume(tmp_path, capsys):
    runs = tmp_path / "runs"
    argv = ["train", "demo/exprnn", "--set", "train.steps=10", "--runs-dir", str(runs), "--seeds", "0,1"] + FAST
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "memoryless baseline" in out
    (run,) = runs.glob("demo-exprnn-*")  # the name carries the key of the overridden config
    r0 = json.loads((run / "seed0" / "result.json").read_text())
    r1 = json.loads((run / "seed1" / "result.json").read_text())
    assert r0["seed"] == 0 and r1["seed"] == 1 and r0["final"] != r1["final"]

    assert main(["table", str(runs)]) == 0
    table = capsys.readouterr().out
    assert "| demo-exprnn | exprnn |" in table and "(2)" in table

    png = tmp_path / "c.png"
    assert main(["plot", str(runs), "-o", str(png), "--metric", "val/loss"]) == 0
    assert png.stat().st_size > 1000

    # the same run again without --resume is refused; with --resume and more steps it continues
    one = ["train", "demo/exprnn", "--out", str(run / "seed0"), "--set", "train.seed=0"] + FAST
    assert main(one + ["--set", "train.steps=10"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(one + ["--set", "train.steps=15", "--resume"]) == 0
    r = json.loads((run / "seed0" / "result.json").read_text())
    assert r["steps"] == 15


def test_bad_input_exits_with_a_message(tmp_path, capsys):
    assert main(["train", "demo/lstm", "--set", "train.stepz=3", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "stepz" in err and "valid keys" in err
    assert main(["train", "nope", "--out", str(tmp_path)]) == 2
    assert "rnnlab list presets" in capsys.readouterr().err
    assert main(["table", str(tmp_path / "missing")]) == 2  # a path that does not exist: usage


def test_the_result_lines_label_the_checkpoint_each_number_comes_from(tmp_path, capsys):
    """The last evaluation's validation metrics and the best checkpoint's validation and test
    metrics are printed on separate, labelled lines, each matching result.json."""
    run = tmp_path / "run"
    argv = ["train", "demo/lstm", "--set", "train.steps=12", "--set", "train.eval_every=4", "--out", str(run)]
    assert main(argv + FAST) == 0
    out = capsys.readouterr().out
    r = json.loads((run / "result.json").read_text())
    (last,) = [line for line in out.splitlines() if line.strip().startswith("last (step ")]
    (best,) = [line for line in out.splitlines() if line.strip().startswith("best (step ")]
    assert f"last (step {r['steps']}):" in last and "test/" not in last
    assert f"best (step {r['best']['step']}, by {r['select_metric']}):" in best
    for k, v in r["final"].items():
        assert f"{k}={v:.4g}" in last
    for k, v in r["test"].items():
        assert f"{k}={v:.4g}" in best and k.startswith("test/")


def test_demo_end_to_end(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--steps", "3"]) == 0
    out = capsys.readouterr().out
    from rnnlab.results import copy_verdict

    for name in ("demo-lstm", "demo-asrnn", "demo-nnrnn", "demo-dmu", "demo-ltrnn"):  # one sentence each
        (path,) = tmp_path.glob(f"{name}-*/result.json")  # the name carries the overridden steps' key
        result = json.loads(path.read_text())
        assert copy_verdict(result)[1] in out.splitlines()
    assert "memoryless baseline" in out and "demo-lstm" in out and "demo-asrnn" in out and "demo-ltrnn" in out
    assert (tmp_path / "loss.png").stat().st_size > 1000
    assert "test/recall_accuracy" in (tmp_path / "table.md").read_text()


def test_console_entry_point():
    r = subprocess.run([sys.executable, "-m", "rnnlab.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and "rnnlab" in r.stdout


def test_thresholds_summary(tmp_path, capsys):
    from rnnlab.results import threshold_counts

    runs = tmp_path / "runs"
    assert (
        main(
            [
                "train",
                "dmu/short/adding-dmu",
                "--runs-dir",
                str(runs),
                "--seeds",
                "0,1",
                "--quiet",
                *set_flags("train.steps=30", "task.val_size=50", "task.test_size=50"),
            ]
        )
        == 0
    )
    counts = threshold_counts(runs, "val/loss", (1.0, 1e-9), steps_per_epoch=10)["dmu-short-adding-dmu"]
    assert counts[1.0] == [2, 2, 2]  # every run is below 1.0 from the first epoch on
    assert counts[1e-9] == [0, 0, 0]
    assert main(["thresholds", str(runs)]) == 0
    assert "ep 3" in capsys.readouterr().out


def test_suite_runs_in_parallel_skips_done_runs_and_tabulates(tmp_path, capsys):
    from rnnlab.suite import list_suites, load_suite

    assert {"demo", "dmu-adding", "henaff-T500", "asrnn-copy"} <= set(list_suites())
    for name in list_suites():  # every shipped suite names real presets
        from rnnlab.suite import _jobs

        assert list(_jobs(load_suite(name), tmp_path, []))
    argv = [
        "suite",
        "demo",
        "--runs-dir",
        str(tmp_path),
        "--jobs",
        "2",
        *set_flags("train.steps=4", "task.val_size=16", "task.test_size=16", "train.eval_every=2"),
    ]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "| demo-exprnn | exprnn |" in out.out and "(3)" in out.out
    assert out.err.count("[trained]") == 12
    assert main(argv) == 0
    assert capsys.readouterr().err.count("[done]") == 12
    assert (tmp_path / "demo" / "table.md").exists()
    assert main(["suite", "nope"]) == 2


def test_bench_speed_is_wired_and_train_records_the_allocator(tmp_path):
    from rnnlab.cli import build_parser, cmd_bench

    args = build_parser().parse_args(["bench", "speed", "--quick", "--configs", "copy", "--cells", "lstm"])
    assert args.func is cmd_bench and args.quick and args.configs == ["copy"]
    out = tmp_path / "r"
    assert (
        main(
            [
                "train",
                "demo/lstm",
                "--out",
                str(out),
                "--quiet",
                *set_flags("train.steps=2", "task.val_size=8", "task.test_size=8"),
            ]
        )
        == 0
    )
    r = json.loads((out / "result.json").read_text())
    assert r["conditions"]["malloc"].startswith(("glibc mallopt", "default"))
    assert r["conditions"]["denormals"] in ("flushed to zero", "kept (not supported by this CPU)")


def test_resume_with_several_seeds_starts_those_never_checkpointed(tmp_path, capsys):
    """`train --seeds 0,1 --resume` after a stop before seed 1 began: seed 0 continues, seed 1
    starts (as an ensemble's members do) and equals a run of seed 1 made on its own; one seed
    with nothing to resume is still refused."""
    base = ["train", "demo/exprnn", "--set", "train.steps=10"] + FAST
    runs = tmp_path / "runs"
    assert main(base + ["--runs-dir", str(runs), "--seeds", "0"]) == 0
    assert main(base + ["--runs-dir", str(runs), "--seeds", "0,1", "--resume"]) == 0
    assert "seed 1: no checkpoint to resume; starting it" in capsys.readouterr().err
    alone = tmp_path / "alone"
    assert main(base + ["--runs-dir", str(alone), "--seeds", "1"]) == 0
    (r1,) = runs.glob("demo-exprnn-*/seed1/result.json")
    (a1,) = alone.glob("demo-exprnn-*/seed1/result.json")
    assert json.loads(r1.read_text())["final"] == json.loads(a1.read_text())["final"]
    # both finished: a second --resume reports them and leaves their results as they are
    before = {p: p.read_bytes() for p in runs.glob("demo-exprnn-*/seed*/result.json")}
    capsys.readouterr()
    assert main(base + ["--runs-dir", str(runs), "--seeds", "0,1", "--resume"]) == 0
    assert capsys.readouterr().out.count("10 steps") == 2
    assert {p: p.read_bytes() for p in before} == before
    assert main(base + ["--runs-dir", str(runs), "--seeds", "2", "--resume"]) != 0
    assert "nothing was checkpointed yet" in capsys.readouterr().err
