"""Fault injection for the trainer's files, configs and data: every fault is made for real
(damaged files written here, a path that is a file, a file-size limit standing in for a full
disk, ...) and each test checks the one-line error, the exit code and that nothing was lost."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch

from conftest import SPANISH_PAIRS, set_flags, tiny_copy
from rnnlab import config
from rnnlab.cli import main
from rnnlab.config import ConfigError
from rnnlab.tasks import TASKS, CopyTask
from rnnlab.tasks.data import DataError, integrity_problem
from rnnlab.train import CheckpointError, RunWriteError, TrainingDiverged, load_run, train

SRC = Path(__file__).resolve().parents[1] / "src"
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

SMALL = tiny_copy(steps=10)


def cli(argv, capsys):
    """Run the CLI in-process; return (exit code, stderr)."""
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    return rc, err


def one_error(err: str) -> str:
    """The single error line of ``err`` (progress lines like 'run ... -> dir' may precede it)."""
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("rnnlab: error:")]
    assert len(lines) == 1, err
    return lines[0]


def train_args(out, *extra, steps=10):
    return ["train", "demo/lstm", *set_flags(*tiny_copy(steps=steps)), "--out", out, "--quiet", *extra]


def snapshot(run: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """A finished 10-step run (checkpoints at steps 5 and 10) to copy and damage."""
    d = tmp_path_factory.mktemp("base") / "run"
    train(config.load("demo/lstm", SMALL), d, progress=False)
    return d


@pytest.fixture
def run(base_run, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(base_run, d)
    return d


# --- damaged checkpoint.pt / best.pt ----------------------------------------------------------
def _other_model_checkpoint(tmp_path):
    d = tmp_path / "other"
    train(config.load("demo/lstm", SMALL + ["model.hidden_size=8"]), d, progress=False)
    return (d / "checkpoint.pt").read_bytes()


def _foreign_same_config(run):
    ck = torch.load(run / "checkpoint.pt", weights_only=False)
    ck["model"] = {k: torch.zeros(3) for k in ck["model"]}  # same keys, wrong shapes
    ck.pop("config")
    import io

    buf = io.BytesIO()
    torch.save(ck, buf)
    return buf.getvalue()


def _no_weights(run):
    ck = torch.load(run / "checkpoint.pt", weights_only=False)
    ck["model"] = "not a state dict"
    import io

    buf = io.BytesIO()
    torch.save(ck, buf)
    return buf.getvalue()


DAMAGE = {
    "truncated": (lambda run, tmp: (run / "checkpoint.pt").read_bytes()[:700], "damaged or truncated"),
    "garbage": (lambda run, tmp: os.urandom(4096), "damaged or truncated"),
    "empty": (lambda run, tmp: b"", "damaged or truncated"),
    "weights-only (a best.pt)": (lambda run, tmp: (run / "best.pt").read_bytes(), "not a checkpoint written by"),
    "another run's checkpoint": (lambda run, tmp: _other_model_checkpoint(tmp), "belongs to another configuration"),
    "foreign weights": (lambda run, tmp: _foreign_same_config(run), "weights of another model"),
    "no weights inside": (lambda run, tmp: _no_weights(run), "does not hold model weights"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_checkpoint_on_resume_is_one_line_and_keeps_the_files(kind, run, tmp_path, capsys):
    make, expected = DAMAGE[kind]
    (run / "checkpoint.pt").write_bytes(make(run, tmp_path))
    before = snapshot(run)
    rc, err = cli(train_args(run, "--resume", steps=20), capsys)
    line = one_error(err)
    assert rc == 1
    assert str(run / "checkpoint.pt") in line and expected in line
    assert "delete" in line or "move it back" in line or "put it back" in line
    assert snapshot(run) == before  # nothing rewritten, nothing removed


def test_non_finite_checkpoint_is_refused_on_resume(run, capsys):
    ck = torch.load(run / "checkpoint.pt", weights_only=False)
    next(v for v in ck["model"].values() if v.is_floating_point()).view(-1)[0] = float("nan")
    torch.save(ck, run / "checkpoint.pt")
    rc, err = cli(train_args(run, "--resume", steps=20), capsys)
    assert rc == 1 and "non-finite" in one_error(err) and "checkpoint.pt" in one_error(err)


@pytest.mark.parametrize("which", ["best", "last"])
def test_load_run_names_a_damaged_weights_file(which, run):
    name = "best.pt" if which == "best" else "checkpoint.pt"
    data = (run / name).read_bytes()
    (run / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=f"{name}.*damaged or truncated.*delete"):
        load_run(run, which=which)
    (run / name).write_bytes(data)
    load_run(run, which=which)  # the intact file loads


# --- config.json ------------------------------------------------------------------------------
CONFIGS = {
    "garbage": b"this is not json",
    "truncated": None,  # first half of the real file
    "not utf-8": b'{"name": "\xff\xfe"}',
    "a list": b"[1, 2, 3]",
    "a scalar section": b'{"model": 3}',
}


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_damaged_config_json_on_resume(kind, run, capsys):
    text = CONFIGS[kind]
    if text is None:
        real = (run / "config.json").read_bytes()
        text = real[: len(real) // 2]
    (run / "config.json").write_bytes(text)
    before = snapshot(run)
    rc, err = cli(train_args(run, "--resume", steps=20), capsys)
    line = one_error(err)
    assert rc == 2 and str(run / "config.json") in line and "start the run again" in line
    assert snapshot(run) == before


# --- output path ------------------------------------------------------------------------------
def test_output_path_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "taken"
    f.write_text("precious")
    for out in (f, f / "sub"):
        rc, err = cli(train_args(out), capsys)
        line = one_error(err)
        assert rc == 1 and f"{f} is a file, not a directory" in line and "--out" in line
    assert f.read_text() == "precious"
    rc, err = cli(["train", "demo/lstm", "--runs-dir", f, "--set", "train.steps=1", "--quiet"], capsys)
    assert rc == 1 and "is a file, not a directory" in one_error(err)


@pytest.mark.skipif(AS_ROOT, reason="root writes through chmod; the file-as-directory test covers root")
def test_output_directory_not_writable(tmp_path, capsys):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        rc, err = cli(train_args(d / "run"), capsys)
    finally:
        d.chmod(0o755)
    line = one_error(err)
    assert rc == 1 and str(d / "run") in line and "not writable" in line


# --- a full disk (RLIMIT_FSIZE) -----------------------------------------------------------------
FULL_DISK = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit raises OSError(EFBIG)
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    from rnnlab.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def test_full_disk_in_process(run, tmp_path):
    """The same fault in this process: a soft RLIMIT_FSIZE (Python ignores SIGXFSZ, so the write
    raises OSError(EFBIG)) while the resumed run writes its step-15 checkpoint."""
    import resource
    import signal

    assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN
    limit = (run / "checkpoint.pt").stat().st_size // 2
    before = (run / "checkpoint.pt").read_bytes()
    cfg = config.load("demo/lstm", tiny_copy(steps=20))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(RunWriteError, match="cannot write .*checkpoint.pt: File too large; the disk is full"):
            train(cfg, run, resume=True, progress=False)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert (run / "checkpoint.pt").read_bytes() == before and not (run / "checkpoint.pt.tmp").exists()
    resumed = train(cfg, run, resume=True, progress=False)
    full = train(cfg, tmp_path / "full", progress=False)
    assert resumed["final"] == full["final"] and resumed["test"] == full["test"]


@pytest.mark.slow
def test_full_disk_during_a_checkpoint_keeps_the_previous_one_and_resume_finishes(run, tmp_path):
    """A file-size limit below the checkpoint's size stands in for a full disk: the write of the
    step-15 checkpoint fails, the step-10 checkpoint stays, and a later resume completes the run
    exactly like an uninterrupted one."""
    ck_size = (run / "checkpoint.pt").stat().st_size
    limit = ck_size // 2
    assert limit > 4 * (run / "metrics.jsonl").stat().st_size and limit > (run / "config.json").stat().st_size
    before = (run / "checkpoint.pt").read_bytes()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    p = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(limit), *map(str, train_args(run, "--resume", steps=20))],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    line = one_error(p.stderr)
    assert p.returncode == 1
    assert f"cannot write {run / 'checkpoint.pt'}" in line and "File too large" in line and "--resume" in line
    assert (run / "checkpoint.pt").read_bytes() == before
    assert not (run / "checkpoint.pt.tmp").exists()
    assert torch.load(run / "checkpoint.pt", weights_only=False)["progress"]["step"] == 10
    # space is back: resume finishes and equals the uninterrupted run
    resumed = train(config.load("demo/lstm", tiny_copy(steps=20)), run, resume=True, progress=False)
    full = train(config.load("demo/lstm", tiny_copy(steps=20)), tmp_path / "full", progress=False)
    assert resumed["final"] == full["final"] and resumed["test"] == full["test"]


# --- presets and arguments ----------------------------------------------------------------------
PRESETS = {
    "empty file": (b"", "must name at least a task and a cell"),
    "a scalar section": (b'optim = "adam"\n[task]\nname = "copy"\n[model]\ncell = "lstm"\n', "[optim] must be a table"),
    "a scalar section (top)": (b'model = 3\n[task]\nname = "copy"\n', "[model] must be a table"),
    "non-string name": (b'name = 3\n[task]\nname = "copy"\n[model]\ncell = "lstm"\n', "name must be of type str"),
    "non-string task name": (b'[task]\nname = 5\n[model]\ncell = "lstm"\n', "task.name must be of type str"),
    "non-string cell": (b'[task]\nname = "copy"\n[model]\ncell = 5\n', "model.cell must be of type str"),
    "not utf-8": (b'[task]\nname = "copy"\n# caf\xe9\n[model]\ncell = "lstm"\n', "not UTF-8"),
    "no cell": (b'[task]\nname = "copy"\n', "model.cell is not set"),
}


@pytest.mark.parametrize("kind", list(PRESETS))
def test_bad_preset_files(kind, tmp_path, capsys):
    text, expected = PRESETS[kind]
    f = tmp_path / "p.toml"
    f.write_bytes(text)
    rc, err = cli(["train", f, "--runs-dir", tmp_path / "runs", "--quiet"], capsys)
    line = one_error(err)
    assert rc == 2 and str(f) in line and expected in line
    assert not (tmp_path / "runs").exists()  # nothing started


BAD_ARGS = {
    "--seeds a,b": (["--seeds", "a,b"], "--seeds must be comma-separated integers"),
    "--seeds 1,1": (["--seeds", "1,1"], "--seeds must be distinct"),
    "--threads 0": (["--threads", "0"], "train.threads must be >= 1, got 0"),
    "train.threads=0": (["--set", "train.threads=0"], "train.threads must be >= 1, got 0"),
    "optim.lr=-1": (["--set", "optim.lr=-1"], "optim.lr must be a finite number > 0, got -1"),
    "optim.lr=nan": (["--set", "optim.lr=nan"], "optim.lr must be a finite number > 0, got nan"),
    "optim.clip=-1": (["--set", "optim.clip=-1"], "optim.clip must be a finite number >= 0"),
    "train.steps=0": (["--set", "train.steps=0"], "train.steps must be >= 1, got 0"),
    "train.batch_size=0": (["--set", "train.batch_size=0"], "train.batch_size must be >= 1, got 0"),
    "train.eval_every=-5": (["--set", "train.eval_every=-5"], "train.eval_every must be >= 1"),
    "model.dropout=1.5": (["--set", "model.dropout=1.5"], "model.dropout must be in [0, 1)"),
    "model.embedding=-1": (["--set", "model.embedding=-1"], "model.embedding must be >= 0"),
    "optim.momentum=-0.5": (["--set", "optim.momentum=-0.5"], "optim.momentum must be a finite number >= 0"),
    "train.schedule=cosine": (["--set", 'train.schedule="cosine"'], "unknown schedule 'cosine'"),
    "train.plateau_patience=-1": (["--set", "train.plateau_patience=-1"], "train.plateau_patience must be >= 0"),
    "train.seed=-3": (["--set", "train.seed=-3"], "train.seed must be in [0, 9223372036854775806]"),
    "optim.weight_decay=-1": (["--set", "optim.weight_decay=-1"], "optim.weight_decay must be"),
    "optim.beta2=1": (["--set", "optim.beta2=1.0"], "optim.beta2 must be in [0, 1)"),
    "optim.eps=0": (["--set", "optim.eps=0.0"], "optim.eps must be a finite number > 0"),
    "train.plateau_factor=2": (["--set", "train.plateau_factor=2.0"], "train.plateau_factor must be in (0, 1)"),
    "train.eval_max_batches=-1": (["--set", "train.eval_max_batches=-1"], "train.eval_max_batches must be >= 0"),
    "optim.group_lr.x=-1": (["--set", "optim.group_lr.recurrent=-1.0"], "optim.group_lr.recurrent must be"),
}


@pytest.mark.parametrize("kind", list(BAD_ARGS))
def test_out_of_range_arguments_are_refused_before_anything_runs(kind, tmp_path, capsys):
    extra, expected = BAD_ARGS[kind]
    rc, err = cli(["train", "demo/lstm", "--runs-dir", tmp_path / "runs", "--quiet", *extra], capsys)
    line = one_error(err)
    assert rc == 2 and expected in line, line
    assert not (tmp_path / "runs").exists()


# --- divergence: never a bad checkpoint ---------------------------------------------------------
def test_huge_learning_rate_writes_no_checkpoint_and_says_so(tmp_path, capsys):
    """expRNN with SGD at lr=1e30: the weights' matrix exponential is NaN after step 1 while the
    stored base is finite, so only the evaluation shows it. Nothing may be checkpointed."""
    out = tmp_path / "run"
    rc, err = cli(
        train_args(
            out,
            "--set",
            'model.cell="exprnn"',
            "--set",
            'optim.name="sgd"',
            "--set",
            "optim.lr=1e30",
            "--set",
            "train.eval_every=1",
        ),
        capsys,
    )
    line = one_error(err)
    assert rc == 1 and "became non-finite at step 1" in line and "no good checkpoint exists" in line
    assert not (out / "checkpoint.pt").exists() and not (out / "best.pt").exists()


class PoisonedGradient(CopyTask):
    """A copy task whose step ``bad_step`` gets an infinite output gradient: the loss of that
    step is finite, the weights after it are not."""

    def __init__(self, bad_step, **kw):
        super().__init__(**kw)
        self.bad_step, self.calls = bad_step, 0

    def loss(self, out, batch):
        self.calls += 1
        if self.calls == self.bad_step and out.requires_grad:
            out.register_hook(lambda g: g * float("inf"))
        return super().loss(out, batch)


def test_weights_gone_non_finite_are_never_checkpointed_and_the_message_points_at_a_good_one(tmp_path):
    cfg = config.load("demo/lstm", tiny_copy('optim.name="sgd"', "optim.lr=0.1", steps=20))
    task = PoisonedGradient(15, K=3, L=8, val_size=64, test_size=64)
    with pytest.raises(TrainingDiverged) as e:
        train(cfg, tmp_path / "r", progress=False, task=task)
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    val10 = next(r["val/loss"] for r in rows if r["step"] == 10 and "val/loss" in r)
    msg = str(e.value)
    assert "the weights became non-finite at step 15" in msg
    assert f"step 10, val/loss={val10:.6g}" in msg
    ck = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)
    assert ck["progress"]["step"] == 10 and ck["select_value"] == val10
    assert all(torch.isfinite(v).all() for v in ck["model"].values() if v.is_floating_point())
    best = torch.load(tmp_path / "r" / "best.pt", weights_only=False)
    assert all(torch.isfinite(v).all() for v in best.values() if v.is_floating_point())


# --- data files ---------------------------------------------------------------------------------
PAIRS = SPANISH_PAIRS * 6


def _tatoeba(root: Path, damage: str) -> Path:
    d = root / "tatoeba"
    d.mkdir(parents=True)
    text = "".join(f"{e}\t{s}\tCC-BY attribution\n" for e, s in PAIRS).encode()
    with zipfile.ZipFile(d / "spa-eng.zip", "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("_about.txt", "about")
        z.writestr("spa.txt", text)
    raw = bytearray((d / "spa-eng.zip").read_bytes())
    if damage == "flipped byte":
        i = raw.index(b"Tom corri")
        raw[i] ^= 0x20  # the zip's directory is intact; the member's CRC is not
    elif damage == "truncated":
        raw = raw[: len(raw) // 2]
    (d / "spa-eng.zip").write_bytes(bytes(raw))
    return d / "spa-eng.zip"


@pytest.mark.parametrize("damage", ["flipped byte", "truncated"])
def test_corrupt_tatoeba_zip_fails_verify_and_training_with_the_fix(damage, tmp_path, capsys):
    path = _tatoeba(tmp_path / "data", damage)
    rc = main(["data", "verify", "tatoeba", "--data-dir", str(tmp_path / "data")])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "spa-eng.zip" in ln)
    assert rc == 1 and "CORRUPT" in line and "re-fetch" in line and "different release" not in line
    preset = tmp_path / "t.toml"
    preset.write_text(
        '[task]\nname = "translation"\nval_size = 5\ntest_size = 6\nmin_freq = 1\n'
        '[model]\ncell = "gru"\nhidden_size = 8\n[train]\nsteps = 1\n'
    )
    rc, err = cli(["train", preset, "--data-dir", tmp_path / "data", "--out", tmp_path / "run", "--quiet"], capsys)
    line = one_error(err)
    assert rc == 1 and str(path) in line and "corrupt" in line and "delete it and re-fetch" in line
    # the fixture-mode loader (no hash check at all) still refuses with the file named
    with pytest.raises(DataError, match="spa-eng.zip.*delete it and re-fetch"):
        TASKS["translation"](val_size=5, test_size=6, min_freq=1, data_dir=tmp_path / "data", verify=False)


def test_intact_other_release_zip_still_passes_verify(tmp_path, capsys):
    _tatoeba(tmp_path / "data", "none")
    main(["data", "verify", "tatoeba", "--data-dir", str(tmp_path / "data")])
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "spa-eng.zip" in ln)
    assert "different release" in line and "CORRUPT" not in line


def test_integrity_check_of_each_format(tmp_path):
    good_gz, bad_gz = tmp_path / "a.gz", tmp_path / "b.gz"
    with gzip.open(good_gz, "wb") as f:
        f.write(os.urandom(50_000))
    bad_gz.write_bytes(good_gz.read_bytes()[:-100])
    assert integrity_problem(good_gz) is None and "EOFError" in integrity_problem(bad_gz)
    txt = tmp_path / "a.txt"
    txt.write_bytes("caf\u00e9\n".encode())
    assert integrity_problem(txt) is None
    txt.write_bytes(b"caf\xe9\n")
    assert "UnicodeDecodeError" in integrity_problem(txt)
    scipy_io = pytest.importorskip("scipy.io")
    mat = tmp_path / "a.mat"
    scipy_io.savemat(mat, {"x": torch.ones(40, 88).numpy()})
    assert integrity_problem(mat) is None
    mat.write_bytes(mat.read_bytes()[:200])
    assert integrity_problem(mat) is not None


def test_damaged_fixture_files_of_every_loader_raise_data_errors(tmp_path):
    """The loaders' own read path (verify=False skips the hash): a truncated gzip (MNIST), a
    truncated .mat (music), non-UTF-8 text (PTB, Shakespeare) each name the file and the fix."""
    d = tmp_path / "mnist"
    d.mkdir()
    for name in (
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    ):
        with gzip.open(d / name, "wb") as f:
            f.write(os.urandom(20_000))
        (d / name).write_bytes((d / name).read_bytes()[:5000])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz.*EOFError.*re-fetch"):
        TASKS["smnist"](data_dir=tmp_path, verify=False)
    d = tmp_path / "polyphonic"
    d.mkdir()
    (d / "Nottingham.mat").write_bytes(b"MATLAB 5.0 MAT-file" + b"\0" * 50)
    with pytest.raises(DataError, match="Nottingham.mat.*re-fetch"):
        TASKS["music"](dataset="nottingham", data_dir=tmp_path, verify=False)
    d = tmp_path / "tinyshakespeare"
    d.mkdir()
    (d / "input.txt").write_bytes(b"To be \xff or not")
    with pytest.raises(DataError, match="input.txt.*UnicodeDecodeError.*re-fetch"):
        TASKS["text_char"](corpus="shakespeare", data_dir=tmp_path, verify=False)


@pytest.mark.skipif(AS_ROOT, reason="root reads through chmod 000")
def test_unreadable_data_file(tmp_path):
    d = tmp_path / "tinyshakespeare"
    d.mkdir()
    (d / "input.txt").write_text("hello world\n" * 100)
    (d / "input.txt").chmod(0)
    try:
        with pytest.raises(DataError, match="cannot read .*input.txt.*chmod"):
            TASKS["text_char"](corpus="shakespeare", data_dir=tmp_path)
    finally:
        (d / "input.txt").chmod(0o644)


def test_config_error_type_is_kept_for_library_callers(tmp_path):
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ConfigError, match="config.json"):
        config.load_json(tmp_path / "config.json")


# --- the last vague errors of earlier rounds ------------------------------------------------------
def test_a_task_json_with_a_control_character_names_the_file_and_the_way_round(run):
    """Before: ``json.JSONDecodeError: Invalid control character`` naming no file."""
    text = (run / "task.json").read_text()
    (run / "task.json").write_text(text.replace('"copy"', '"co\x01py"', 1))
    with pytest.raises(ConfigError, match=r"task.json is not readable .*restore it from a copy.*data=True") as info:
        load_run(run, data=False)
    assert str(run / "task.json") in str(info.value) and "\n" not in str(info.value)
    assert load_run(run, data=True)[0].name == "demo-lstm"  # the way round it works


def test_export_skips_a_garbage_metrics_line_and_names_it(run, capsys):
    """Before: ``rnnlab export`` of a metrics.jsonl with a garbage line failed with a
    JSONDecodeError naming neither the file nor the line."""
    rows = (run / "metrics.jsonl").read_text().splitlines()
    with open(run / "metrics.jsonl", "a") as f:
        f.write("garbage{{\n")
    rc, err = cli(["export", run], capsys)
    assert rc == 0 and f"{run / 'metrics.jsonl'}: skipped line(s) {len(rows) + 1}" in err
    assert len((run / "metrics.csv").read_text().splitlines()) == len(rows) + 1  # header + every good row


def test_a_data_root_that_is_a_file_is_one_line_with_a_fix_that_works(tmp_path, capsys, monkeypatch):
    """Before: a data root that is a file got "dataset file not found ... fix: rnnlab data
    download mnist --data-dir FILE", a fix that fails the same way."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "afile").write_text("")
    for argv, env in (
        (["--data-dir", tmp_path / "afile"], None),
        ([], str(tmp_path / "afile")),
    ):
        if env:
            monkeypatch.setenv("RNNLAB_DATA", env)
        rc, err = cli(["train", "asrnn/smnist-n122", "--runs-dir", tmp_path / "runs", *argv], capsys)
        line = one_error(err)
        assert rc != 0 and f"the data root {tmp_path / 'afile'}" in line and "is a file, not a directory" in line
        assert ("--data-dir / data_dir=" if not env else "$RNNLAB_DATA") in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.json"))
    from rnnlab.tasks.data import data_root, default_root

    monkeypatch.delenv("RNNLAB_DATA")
    assert data_root(str(default_root())) == default_root()  # the directory the message suggests is taken


ZERO_FSIZE = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    from rnnlab.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def test_a_full_disk_before_the_first_checkpoint_says_start_again_and_leaves_no_directories(tmp_path):
    """Before: with a file-size limit of 0 (a disk full from the start) a run under a 40-level
    name left 42 directories and its lock file behind, with "File too large; check the path and
    its permissions"; a limit hit at the first checkpoint suggested `--resume`, which then
    failed ("nothing was checkpointed yet")."""
    name = "/".join(f"d{i}" for i in range(40))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    argv = [
        "train",
        "demo/lstm",
        *set_flags(*SMALL),
        "--set",
        f'name="{name}"',
        "--runs-dir",
        str(tmp_path / "runs"),
        "--quiet",
    ]
    p = subprocess.run([sys.executable, "-c", ZERO_FSIZE, "0", *argv], capture_output=True, text=True, env=env)
    line = one_error(p.stderr)
    assert p.returncode == 1 and ".lock: File too large" in line and "start the run again" in line, line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    # a limit that lets the first files through and stops the first checkpoint (best.pt / checkpoint.pt)
    out = tmp_path / "first"
    p = subprocess.run(
        [sys.executable, "-c", ZERO_FSIZE, "30000", *train_args(out)], capture_output=True, text=True, env=env
    )
    line = one_error(p.stderr)
    assert "File too large" in line and "start the run again (without --resume" in line and "--resume`" not in line
    assert not (out / "checkpoint.pt").exists()
    again = subprocess.run(
        [sys.executable, "-m", "rnnlab.cli", *train_args(out)], capture_output=True, text=True, env=env
    )
    assert again.returncode == 0, again.stderr  # the fix the message gives works


def test_a_path_part_too_long_is_named_and_nothing_is_created(tmp_path):
    """A run name whose last part is longer than a file name may be (255 bytes) made its 40
    parent folders and then failed with "File name too long; check the path and its
    permissions", naming no part and leaving the folders."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    deep = "/".join(["d"] * 40)
    cases = {
        "name": ["--set", f'name="{deep}/{"x" * 300}"', "--runs-dir", str(tmp_path / "runs")],
        "out": ["--out", str(tmp_path / "runs" / deep / ("y" * 300))],
    }
    for what, where in cases.items():
        p = subprocess.run(
            [sys.executable, "-m", "rnnlab.cli", "train", "demo/lstm", *set_flags(*SMALL), *where, "--quiet"],
            capture_output=True,
            text=True,
            env=env,
        )
        line = one_error(p.stderr)
        assert p.returncode == 2 and "is longer than the 255 bytes" in line and "shorten it" in line, line
        assert "bytes)" in line and ("xxxx" in line or "yyyy" in line), line  # the part, named
        assert not (tmp_path / "runs").exists(), what  # nothing created
    ok = "/".join(["d"] * 3) + "/" + "x" * 200  # the fix: a shorter part trains
    p = subprocess.run(
        [sys.executable, "-m", "rnnlab.cli", "train", "demo/lstm", *set_flags(*SMALL), "--out", str(tmp_path / ok)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0, p.stderr
