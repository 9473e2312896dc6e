"""What a run directory records and how it is used afterwards: evaluation lines for batch jobs,
training time apart from evaluation time, CSV / TensorBoard exports, the configuration hash and
git commit, and reloading a trained model without its dataset."""

import csv
import json
import logging
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

import rnnlab
from conftest import tiny_copy
from rnnlab import config
from rnnlab import train as train_mod
from rnnlab.cli import main
from rnnlab.results import export_csv
from rnnlab.rundir import config_key
from rnnlab.tasks.base import TaskInfo
from rnnlab.tasks.data import DataError
from rnnlab.train import evaluate, git_state, load_run, source_hash, train


def small(steps=6, **extra):
    over = tiny_copy(L=6, eval_size=32, hidden=12, batch=16, eval_every=2, log_every=1, steps=steps)
    return config.load("demo/lstm", over + [f"{k}={v}" for k, v in extra.items()])


def rows(run):
    return [json.loads(x) for x in (Path(run) / "metrics.jsonl").read_text().splitlines() if x.strip()]


def test_one_log_line_per_evaluation_off_a_terminal(tmp_path, capsys, caplog):
    # progress=None; pytest's stderr is not a terminal, and pytest has set up logging (a handler
    # on the root logger): the lines are INFO records of rnnlab.train
    with caplog.at_level(logging.INFO, logger="rnnlab"):
        train(small(steps=6), tmp_path / "r")
    lines = [r.getMessage() for r in caplog.records if r.name == "rnnlab.train" and " step " in r.getMessage()]
    evals = [r for r in rows(tmp_path / "r") if "val/loss" in r]
    assert len(lines) == len(evals) == 3
    for ln, r in zip(lines, evals):
        assert ln.startswith(f"demo-lstm step {r['step']}/6 ")
        assert f"val/loss {r['val/loss']:.4g}" in ln and "train/loss " in ln and "lr 0.001" in ln
        assert re.search(r"  \d+\.\d{4} s/step \(training\)$", ln)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rnnlab"):
        train(small(steps=2), tmp_path / "q", progress=False)  # quiet: neither bar nor lines
    assert " step " not in capsys.readouterr().err and not [r for r in caplog.records if " step " in r.getMessage()]


def test_without_logging_set_up_the_lines_go_to_stderr(tmp_path, capsys, monkeypatch):
    """A script that set up no logging still sees the lines off a terminal, on stderr."""
    from rnnlab import runtime

    monkeypatch.setattr(logging.Logger, "hasHandlers", lambda self: False)
    train(small(steps=4), tmp_path / "r")
    lines = [ln for ln in capsys.readouterr().err.splitlines() if " step " in ln]
    assert len(lines) == 2 and lines[-1].startswith("demo-lstm step 4/4 ")
    assert runtime.show_progress.__module__ == "rnnlab.runtime"


def test_time_per_step_excludes_evaluation(tmp_path, monkeypatch, capsys, caplog):
    slow = 0.15

    def slow_evaluate(*a, **k):
        time.sleep(slow)
        return evaluate(*a, **k)

    monkeypatch.setattr(train_mod, "evaluate", slow_evaluate)
    with caplog.at_level(logging.INFO, logger="rnnlab"):
        r = train(small(steps=4, **{"train.eval_every": 1, "train.test": "false"}), tmp_path / "r")
    assert r["eval_time_s"] >= 4 * slow
    assert r["train_time_s"] == pytest.approx(r["wall_time_s"] - r["eval_time_s"], abs=0.02)
    assert r["time_per_step_s"] == pytest.approx(r["train_time_s"] / 4, abs=1e-3)
    assert r["time_per_step_s"] * 4 < r["wall_time_s"] - 4 * slow + 0.05
    # the per-evaluation figure of the log lines is training alone as well
    per_eval = [float(x) for x in re.findall(r"(\d+\.\d+) s/step", caplog.text)]
    assert len(per_eval) == 4 and max(per_eval) < slow


def test_csv_export_round_trip(tmp_path, capsys):
    train(small(), tmp_path / "r", progress=False)
    assert main(["export", str(tmp_path / "r"), "--csv", "-o", str(tmp_path / "m.csv")]) == 0
    with open(tmp_path / "m.csv", newline="") as f:
        got = list(csv.DictReader(f))
    want = rows(tmp_path / "r")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert {k for k, v in g.items() if v != ""} == set(w)
        for k, v in w.items():
            assert float(g[k]) == pytest.approx(float(v), rel=1e-12)
    assert export_csv(tmp_path / "r") == tmp_path / "r" / "metrics.csv"


def test_tensorboard_events_match_metrics(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert (
        main(
            [
                "train",
                "demo/lstm",
                "--out",
                str(tmp_path / "r"),
                "--tensorboard",
                "--quiet",
                "--set",
                "train.steps=4",
                "--set",
                "train.eval_every=2",
                "--set",
                "task.L=6",
                "--set",
                "task.val_size=32",
                "--set",
                "task.test_size=32",
            ]
        )
        == 0
    )
    acc = EventAccumulator(str(tmp_path / "r" / "tensorboard"))
    acc.Reload()
    evals = [r for r in rows(tmp_path / "r") if "val/loss" in r]
    events = acc.Scalars("val/loss")
    assert [e.step for e in events] == [r["step"] for r in evals]
    assert [e.value for e in events] == pytest.approx([r["val/loss"] for r in evals], rel=1e-6)


def test_tensorboard_missing_is_a_one_line_config_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tb(name, *a, **k):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError("no tensorboard")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_tb)
    with pytest.raises(config.ConfigError, match=r"rnnlab\[tensorboard\]"):
        train(small(**{"train.tensorboard": "true"}), tmp_path / "r", progress=False)


def test_result_records_config_key_and_git_commit(tmp_path):
    r = train(small(steps=2), tmp_path / "r", progress=False)
    saved = config.load_json(tmp_path / "r" / "config.json")
    assert r["config_key"] == config_key(saved) and len(r["config_key"]) == 12
    assert config_key(small(steps=3)) != r["config_key"]  # another experiment
    assert config_key(small(steps=2, **{"train.seed": 7})) == r["config_key"]  # another seed of it
    assert config_key(small(steps=2, **{"train.tensorboard": "true"})) == r["config_key"]  # output only
    src = Path(rnnlab.__file__).parent
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True)
    if head.returncode == 0:
        assert r["git"]["commit"] == head.stdout.strip() and isinstance(r["git"]["dirty"], bool)
    else:
        assert r["git"] is None
    assert git_state(tmp_path) is None  # no checkout there
    assert r["source_sha256"] == source_hash() and len(r["source_sha256"]) == 16


def test_git_state_counts_untracked_files_under_src(tmp_path):
    """A module under src/ that the commit lacks makes the tree dirty (before: unseen, as
    ``--untracked-files=no`` hid it); an untracked file elsewhere does not."""
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "src" / "pkg" / "a.py").write_text("x = 1\n")

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    clean = git_state(repo / "src" / "pkg")
    assert clean["dirty"] is False and clean["untracked_src"] == 0 and len(clean["commit"]) == 40
    (repo / "notes.txt").write_text("not source\n")
    assert git_state(repo / "src" / "pkg")["dirty"] is False
    (repo / "src" / "pkg" / "b.py").write_text("y = 2\n")
    (repo / "src" / "pkg" / "sub").mkdir()
    (repo / "src" / "pkg" / "sub" / "c.py").write_text("z = 3\n")
    state = git_state(repo / "src" / "pkg")
    assert state["dirty"] is True and state["untracked_src"] == 2


def test_result_records_the_host_cpu_and_blas(tmp_path):
    r = train(small(steps=1), tmp_path / "r", progress=False)
    cond = r["conditions"]
    assert cond["cpu_model"] == rnnlab.device.cpu_model() and cond["cpu_model"]
    assert cond["blas"] == rnnlab.device.blas_info()
    if Path("/proc/cpuinfo").exists():  # Linux: the model name line, independently read
        names = [
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.lower().startswith("model name")
        ]
        if names:
            assert cond["cpu_model"] == names[0]
    assert cond["blas"] in torch.__config__.show() or cond["blas"] == "unknown"
    assert cond["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_result_records_the_cpu_generation_where_cpuinfo_shows_it(tmp_path):
    """A masked model name ("AMD EPYC") names hosts of different speed alike; the family and
    model numbers of /proc/cpuinfo, read here independently, tell them apart."""
    cond = train(small(steps=1), tmp_path / "r", progress=False)["conditions"]
    info = Path("/proc/cpuinfo")
    fields = {}
    if info.exists():
        for ln in info.read_text().split("\n\n")[0].splitlines():
            k, _, v = ln.partition(":")
            fields.setdefault(k.strip().lower(), v.strip())
    if "cpu family" in fields and "model" in fields:
        assert cond["cpu_id"] == f"family {fields['cpu family']} model {fields['model']}"
    else:
        assert "cpu_id" not in cond


def test_a_host_without_cpuinfo_names_its_cpu_as_platform_does(monkeypatch):
    """Where ``/proc/cpuinfo`` says nothing (macOS, Windows), the record's CPU and the compiled
    kernels' cache key both fall back to what :mod:`platform` reports, and no generation is made up."""
    import platform

    from rnnlab.kernels import host, small

    monkeypatch.setattr(host, "cpuinfo", lambda: {})
    monkeypatch.setattr(rnnlab.device, "cpuinfo", lambda: {})
    monkeypatch.setattr(small, "cpuinfo", lambda: {})
    expected = platform.processor() or platform.machine()
    assert rnnlab.device.cpu_model() == (expected or "unknown")
    assert rnnlab.device.cpu_id() == ""
    assert small._cpu() == expected
    monkeypatch.setattr(host.platform, "processor", lambda: "")
    monkeypatch.setattr(host.platform, "machine", lambda: "")
    assert rnnlab.device.cpu_model() == "unknown"


def test_source_hash_changes_with_a_source_file(tmp_path, monkeypatch):
    import shutil

    import rnnlab.rundir as tr  # provenance lives with the run directory

    copy = tmp_path / "rnnlab"
    shutil.copytree(Path(rnnlab.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(tr, "__file__", str(copy / "rundir.py"))
    before = tr.source_hash()
    (copy / "cells" / "base.py").write_text((copy / "cells" / "base.py").read_text() + "\n# changed\n")
    assert tr.source_hash() != before


# --- self-contained runs ----------------------------------------------------------------------
WORDS = {
    "train": " the cat sat on the mat \n the dog sat on the log \n a cat and a dog \n",
    "valid": " the cat sat on the log \n a dog \n",
    "test": " the dog sat on the mat \n a cat \n",
}


@pytest.fixture
def ptb_root(tmp_path):
    d = tmp_path / "data" / "ptb"
    d.mkdir(parents=True)
    for split, text in WORDS.items():
        (d / f"ptb.{split}.txt").write_text(text)
    return tmp_path / "data"


def test_run_reloads_without_its_dataset(tmp_path, ptb_root):
    cfg = config.from_dict(
        {
            "name": "words",
            "task": {"name": "ptb_word", "bptt": 4, "verify": False},
            "model": {"cell": "lstm", "hidden_size": 8, "embedding": 6},
            "train": {"steps": 3, "batch_size": 2, "eval_every": 3, "eval_batch_size": 2},
        }
    )
    r = train(cfg, tmp_path / "run", progress=False, data_dir=str(ptb_root))
    _, task, model = load_run(tmp_path / "run", data_dir=str(ptb_root), data=True)
    assert not isinstance(task, TaskInfo)
    x = torch.randint(0, task.num_tokens, (2, 5))
    want, _ = model(x)
    rescored = evaluate(model, task, "test", 2)
    assert rescored == pytest.approx(r["test"], rel=1e-12)

    shutil.rmtree(ptb_root)
    with pytest.raises(DataError):
        load_run(tmp_path / "run", data_dir=str(ptb_root), data=True)
    _, info, again = load_run(tmp_path / "run", data_dir=str(ptb_root))
    assert isinstance(info, TaskInfo) and info.vocab == task.vocab.itos
    assert info.baseline() == pytest.approx(task.baseline())
    got, _ = again(x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="no dataset"):
        evaluate(again, info, "test")
    _, _, on_cpu = load_run(tmp_path / "run", data=False, device="cpu")
    assert {p.device.type for p in on_cpu.parameters()} == {"cpu"} and not on_cpu.training


def test_translation_run_keeps_both_vocabularies(tmp_path):
    pairs = [
        ("go .", "ve ."),
        ("run .", "corre ."),
        ("go now .", "ve ahora ."),
        ("i run .", "yo corro ."),
        ("i go .", "yo voy ."),
        ("run now .", "corre ahora ."),
    ] * 4
    d = tmp_path / "data" / "tatoeba"
    d.mkdir(parents=True)
    import zipfile

    with zipfile.ZipFile(d / "spa-eng.zip", "w") as z:
        z.writestr("spa.txt", "".join(f"{e}\t{s}\tCC-BY\n" for e, s in pairs))
    cfg = config.from_dict(
        {
            "name": "tr",
            "task": {"name": "translation", "val_size": 4, "test_size": 4, "min_freq": 1, "verify": False},
            "model": {"cell": "gru", "hidden_size": 8},
            "train": {"steps": 2, "batch_size": 4, "eval_every": 2, "eval_batch_size": 4},
        }
    )
    train(cfg, tmp_path / "run", progress=False, data_dir=str(tmp_path / "data"))
    _, task, model = load_run(tmp_path / "run", data_dir=str(tmp_path / "data"))
    x, lengths = torch.tensor([[4, 5, 0], [5, 4, 6]]), torch.tensor([2, 3])
    want = model.generate(x, lengths, 5)
    shutil.rmtree(tmp_path / "data")
    _, info, again = load_run(tmp_path / "run", data_dir=str(tmp_path / "data"))
    assert info.src_vocab == task.src_vocab.itos and info.tgt_vocab == task.tgt_vocab.itos
    assert (info.bos_id, info.eos_id) == (task.bos_id, task.eos_id)
    assert torch.equal(again.generate(x, lengths, 5), want)


def test_weights_are_loaded_without_running_pickled_code(tmp_path):
    train(small(steps=2), tmp_path / "r", progress=False)

    import datetime  # any object that is not tensors / containers / numbers

    torch.save({"model": datetime.date(2020, 1, 1)}, tmp_path / "r" / "best.pt")
    with pytest.raises(Exception, match="[Ww]eights.only|Unsupported global"):
        load_run(tmp_path / "r")


def test_cli_evaluate_rescores_a_run(tmp_path, capsys):
    run = tmp_path / "r"
    train(small(steps=4), run, progress=False)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "test"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got == pytest.approx(json.loads((run / "result.json").read_text())["test"], rel=1e-12)
    assert main(["evaluate", str(tmp_path / "nowhere")]) == 2  # a path that does not exist: usage
