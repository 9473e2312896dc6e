"""Records stay light: a records folder stores each run's ``metrics.jsonl`` in columns
(``metrics.jsonl.cols.xz``, :mod:`rnnlab.columns`) and its ``config.json``, ``task.json`` and
``result.json`` xz-compressed (``rundir.RunFiles.COMPRESSED``), and every reader takes every form
through one home (``rundir.read_stored`` / ``read_jsonl``). The committed records/ holds the bound
(under 40 MB, no plain record file, no metrics.jsonl.xz the columns could hold); the other tests
check on small records in a temporary directory that each entry point reads the forms alike,
that ``rnnlab reproduce compact`` converts plain and ``.xz`` trees in place once (a second run
changes nothing), that ``collect`` writes the stored forms, and that a damaged stored file is a
one-line error naming the file and the fix. The columns' own round trips: tests/test_columns.py."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import lzma
import random
import shutil
from pathlib import Path

import pytest

from conftest import tiny_copy, write_record
from rnnlab import config, rundir
from rnnlab.cli import main
from rnnlab.ledger import collect, compact
from rnnlab.rundir import RunFiles, StoredFileDamaged, read_jsonl, read_stored, stored, write_stored

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "records"
#: the bound the committed records hold (bytes of every file below records/)
LIMIT_BYTES = 40_000_000
XZ_MAGIC = b"\xfd7zXZ\x00"
#: a record's files as collect and compact store them
STORED_NAMES = ["config.json.xz", "metrics.jsonl.cols.xz", "result.json.xz", "task.json.xz"]


def _tree(root: Path) -> dict[str, str]:
    """Every file below ``root`` and the sha256 of its bytes."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _noisy_rows(n: int, seed: int = 0) -> list[dict]:
    r = random.Random(seed)
    rows = []
    for s in range(1, n + 1):
        rows.append({"step": s, "train/loss": r.random(), "time": 0.01 * s})
        if s % 10 == 0:
            rows.append({"step": s, "val/loss": 10 ** (-4 * s / n) * (1 + 0.1 * r.random())})
    return rows


# --- the bound --------------------------------------------------------------------------------
def test_committed_records_stay_under_40_mb_with_no_plain_record_file():
    plain = sorted(p.relative_to(ROOT).as_posix() for n in RunFiles.COMPRESSED for p in RECORDS.rglob(n))
    assert not plain, (
        f"{len(plain)} record files stored plain below records/ (first: {plain[:3]}); "
        f"run `rnnlab reproduce compact records` and commit the result"
    )
    # a metrics.jsonl.xz stays only where the columns cannot give the file back or are larger
    old = [p for p in RECORDS.rglob(RunFiles.METRICS + ".xz") if rundir.stored_form(p, read_stored(p))[0] != p]
    assert not old, (
        f"{len(old)} metrics.jsonl.xz below records/ the columns would store (first: {old[:3]}); "
        f"run `rnnlab reproduce compact records` and commit the result"
    )
    total = sum(p.stat().st_size for p in RECORDS.rglob("*") if p.is_file())
    assert total < LIMIT_BYTES, f"records/ holds {total / 1e6:.1f} MB, over the bound of {LIMIT_BYTES / 1e6:.0f} MB"


# --- the one reader ---------------------------------------------------------------------------
def test_round_trip_plain_to_xz_reads_back_equal(tmp_path):
    rows = _noisy_rows(300)
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 301, "train/lo'  # a partial last line
    plain = tmp_path / "metrics.jsonl"
    plain.write_text(text)
    expected = read_jsonl(plain)
    assert expected == (rows, [len(rows) + 1])  # the partial line named, as for a plain file
    packed = write_stored(plain, plain.read_bytes())
    assert packed == tmp_path / "metrics.jsonl.xz"
    assert packed.read_bytes().startswith(XZ_MAGIC) and packed.stat().st_size < plain.stat().st_size / 2
    assert lzma.decompress(packed.read_bytes()) == text.encode()  # a standard .xz: `xz -d` reads it
    plain.unlink()
    assert stored(plain) == packed and stored(packed) == packed
    assert read_stored(plain) == read_stored(packed) == text.encode()
    assert read_jsonl(plain) == read_jsonl(packed) == expected


def test_the_plain_file_wins_where_both_exist_and_a_missing_one_names_both_forms(tmp_path):
    """A live run appends to its plain file: where both forms exist (a compact interrupted
    between its write and its removal) the plain name reads the plain one; a file named
    exactly is read as named."""
    (tmp_path / "task.json").write_text('{"a": 1}')
    (tmp_path / "task.json.xz").write_bytes(lzma.compress(b'{"a": 2}'))
    assert stored(tmp_path / "task.json") == tmp_path / "task.json"
    assert json.loads(read_stored(tmp_path / "task.json")) == {"a": 1}
    assert json.loads(read_stored(tmp_path / "task.json.xz")) == {"a": 2}
    assert RunFiles.below(tmp_path, RunFiles.TASK) == [tmp_path / "task.json"]  # one file per run
    assert RunFiles(tmp_path).record() == [tmp_path / "task.json"]
    (tmp_path / "task.json").unlink()
    assert RunFiles.below(tmp_path, RunFiles.TASK) == [tmp_path / "task.json.xz"]
    assert stored(tmp_path / "task.json") == tmp_path / "task.json.xz"
    assert stored(tmp_path / "nothing.json") is None
    with pytest.raises(
        FileNotFoundError, match=r"none of metrics.jsonl, metrics.jsonl.cols.xz, metrics.jsonl.xz exists"
    ):
        read_stored(tmp_path / "metrics.jsonl")


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],
        lambda b: b[:-1],
        lambda b: b"",
        lambda b: b"{not xz}",
        lambda b: b[:60] + b"x" + b[61:],
    ],
    ids=["half", "last-byte", "empty", "not-xz", "flipped"],
)
def test_a_damaged_xz_is_an_error_naming_the_file_and_the_fix(tmp_path, damage):
    f = tmp_path / "metrics.jsonl.xz"
    good = lzma.compress("".join(json.dumps(r) + "\n" for r in _noisy_rows(50)).encode())
    f.write_bytes(damage(good))
    with pytest.raises(StoredFileDamaged) as info:
        read_jsonl(tmp_path / "metrics.jsonl")
    msg = str(info.value)
    assert str(f) in msg and "damaged" in msg and "git checkout --" in msg and "reproduce collect" in msg
    assert "\n" not in msg


def test_the_cli_reports_a_damaged_record_in_one_line_and_exits_1(tmp_path, capsys):
    d = write_record(tmp_path / "rec", "asrnn/smnist-n122", 0, {"test/accuracy": 0.9}, metrics=_noisy_rows(40))
    compact(tmp_path / "rec")
    packed = d / "metrics.jsonl.cols.xz"
    packed.write_bytes(packed.read_bytes()[:-8])  # truncated
    for argv in (["reproduce", "ledger", str(tmp_path / "rec")], ["export", str(d)], ["plot", str(tmp_path / "rec")]):
        capsys.readouterr()
        assert main([*argv, *(["-o", str(tmp_path / "x.png")] if argv[0] == "plot" else [])]) == 1, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(packed) in err[0] and "damaged" in err[0], (argv, err)


# --- every entry point reads both forms -------------------------------------------------------
def _threshold_records(root: Path) -> list[Path]:
    """Two DMU threshold-protocol records (their curves cross thresholds at different steps) and
    one asRNN record, each with a task.json."""
    dirs = []
    for seed, at in ((0, 450), (1, 620)):
        rows = [{"step": s, "train/loss": 0.3, "val/loss": 0.005 if s >= at else 0.05} for s in range(10, 1001, 10)]
        dirs.append(write_record(root, "dmu/short/temporal_order-dmu", seed, {"test/loss": 0.01}, metrics=rows))
    dirs.append(write_record(root, "asrnn/smnist-n122", 0, {"test/accuracy": 0.95}, metrics=_noisy_rows(200)))
    for d in dirs:
        (d / "task.json").write_text(json.dumps({"name": "copy", "input_size": 10, "vocabulary": list(range(50))}))
    return dirs


def _outputs(root: Path, dirs: list[Path], tmp_path: Path, capsys) -> dict:
    """What each reader of records makes of ``root`` (run through the CLI where a command reads it)."""
    from rnnlab.ledger import records
    from rnnlab.plots import metric_names, read_metrics
    from rnnlab.results import threshold_counts
    from rnnlab.sweep.trial import objective_value

    spec = importlib.util.spec_from_file_location(
        "asrnn_evidence_figures", ROOT / "benchmarks/asrnn_evidence_figures.py"
    )
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    out: dict = {}
    for argv in (
        ["table", str(root)],
        ["thresholds", str(root), "--metric", "val/loss"],
        ["reproduce", "ledger", str(root)],
        ["export", str(dirs[2]), "-o", str(tmp_path / "m.csv")],
        ["plot", str(root), "--metric", "val/loss", "-o", str(tmp_path / "c.png")],
    ):
        capsys.readouterr()
        assert main(argv) == 0, argv
        out[argv[0]] = capsys.readouterr().out
    out["csv"] = (tmp_path / "m.csv").read_text()
    out["png"] = hashlib.sha256((tmp_path / "c.png").read_bytes()).hexdigest()
    out["threshold_counts"] = threshold_counts(root, metric="val/loss", thresholds=(1e-2, 1e-3), steps_per_epoch=10)
    recs, _, left = records.load_records([root])
    out["records"] = sorted((str(r.path), json.dumps(r.metrics()), str(r.first_epochs())) for r in recs)
    out["left_out"] = [str(x) for x in left]
    out["plots"] = [(read_metrics(d, "val/loss"), sorted(metric_names(d))) for d in dirs]
    out["objective"] = [objective_value(d, "val/loss", "minimize") for d in dirs]
    out["figures"] = [figures._read(str(d))[1] for d in dirs]
    out["task"] = [json.loads(read_stored(RunFiles(d).task)) for d in dirs]
    return out


def test_every_reader_reads_a_compacted_record_as_the_plain_one(tmp_path, capsys):
    root = tmp_path / "records"
    dirs = _threshold_records(root)
    before = _outputs(root, dirs, tmp_path, capsys)
    assert "1e-02" in before["thresholds"] and before["csv"].count("\n") > 200  # real content compared
    done, notes = compact(root)
    assert len(done) == 12 and not notes
    assert not [p for n in RunFiles.COMPRESSED for p in root.rglob(n)]  # nothing plain left
    after = _outputs(root, dirs, tmp_path, capsys)
    assert after == before


def test_load_run_rebuilds_the_task_from_a_compressed_task_json(tmp_path):
    """``load_run(data=False)`` reads task.json.xz as it read task.json: the same task and the
    same model (a record keeps no weights, so best.pt stands beside it here)."""
    import torch

    from rnnlab import train

    torch.set_num_threads(1)
    run = tmp_path / "run"
    train.train(config.load("demo/lstm", tiny_copy(steps=2, eval_every=2)), run, progress=False)
    _, task, model = rundir.load_run(run, data=False)
    RunFiles(run).checkpoint.unlink()  # a run with checkpoint.pt is live: compact leaves it plain
    done, _ = compact(tmp_path)
    assert sorted(c.path.name for c in done) == ["config.json", "metrics.jsonl", "result.json", "task.json"]
    assert not RunFiles(run).task.exists() and (run / "task.json.xz").exists()
    assert not RunFiles(run).config.exists() and (run / "config.json.xz").exists()
    _, task2, model2 = rundir.load_run(run, data=False)
    assert task2.metadata() == task.metadata() and task2.input_size == task.input_size
    assert repr(model2) == repr(model)
    assert all(torch.equal(a, b) for a, b in zip(model2.state_dict().values(), model.state_dict().values()))


# --- compact ----------------------------------------------------------------------------------
def test_compact_is_idempotent_and_prints_what_it_converted(tmp_path, capsys):
    root = tmp_path / "records"
    dirs = _threshold_records(root)
    plain = {d: {n: (d / n).read_bytes() for n in RunFiles.COMPRESSED} for d in dirs}
    assert main(["reproduce", "compact", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        f"compacted 12 files below {root} (3 config.json, 3 task.json, 3 metrics.jsonl, 3 result.json)" in out
        and " -> " in out
    )
    for d in dirs:
        assert sorted(p.name for p in d.iterdir()) == STORED_NAMES
        for n, data in plain[d].items():
            assert read_stored(d / n) == data and not (d / n).exists()
    tree = _tree(root)
    assert main(["reproduce", "compact", str(root)]) == 0
    assert "nothing to compact" in capsys.readouterr().out
    assert _tree(root) == tree  # a second run changes no byte
    assert compact(root) == ([], [])


def test_compact_leaves_a_live_run_plain_and_settles_an_interrupted_compact(tmp_path):
    root = tmp_path / "records"
    live, half, _ = _threshold_records(root)
    (live / "checkpoint.pt").write_bytes(b"weights")  # rnnlab train --resume appends to its metrics.jsonl
    text = (half / "metrics.jsonl").read_bytes()
    (half / "metrics.jsonl.xz").write_bytes(lzma.compress(text))  # written, the plain one not yet removed
    (half / "task.json.xz").write_bytes(lzma.compress(b'{"stale": true}'))  # differs: the plain one was read
    task = (half / "task.json").read_bytes()
    done, notes = compact(root)
    assert (
        (live / "metrics.jsonl").exists() and (live / "task.json").exists() and not (live / "metrics.jsonl.xz").exists()
    )
    assert any(str(live) in n and "live run" in n for n in notes)
    assert any("task.json.xz differed" in n for n in notes)
    assert read_stored(half / "metrics.jsonl") == text and read_stored(half / "task.json") == task
    assert sorted(p.name for p in half.iterdir()) == STORED_NAMES  # the metrics.jsonl.xz went into columns
    assert len(done) == 8
    assert compact(root)[0] == []


def test_compact_converts_a_tree_of_the_earlier_xz_form_and_keeps_the_files_times(tmp_path, capsys):
    """Records written before the columns (metrics.jsonl.xz and task.json.xz, config.json and
    result.json plain): the metrics go into columns, config and result into xz, task.json.xz is
    left byte for byte; every file reads back as before and keeps its modification time."""
    import os

    root = tmp_path / "records"
    dirs = _threshold_records(root)
    for d in dirs:
        for n in (RunFiles.METRICS, RunFiles.TASK):  # the earlier form, as a collect before wrote it
            (d / (n + ".xz")).write_bytes(lzma.compress((d / n).read_bytes()))
            (d / n).unlink()
    os.utime(dirs[0] / "result.json", ns=(1, 1_000_000_000))
    before = {(d, n): read_stored(d / n) for d in dirs for n in RunFiles.COMPRESSED}
    task = {d: (d / "task.json.xz").read_bytes() for d in dirs}
    done, notes = compact(root)
    assert len(done) == 9 and not notes  # 3 metrics.jsonl, 3 config.json, 3 result.json
    for d in dirs:
        assert sorted(p.name for p in d.iterdir()) == STORED_NAMES
        assert (d / "task.json.xz").read_bytes() == task[d]
    assert {(d, n): read_stored(d / n) for d in dirs for n in RunFiles.COMPRESSED} == before
    assert (dirs[0] / "result.json.xz").stat().st_mtime_ns == 1_000_000_000
    assert compact(root) == ([], [])


def test_compact_stops_at_a_damaged_file_with_one_line_naming_it(tmp_path, capsys):
    root = tmp_path / "records"
    d = _threshold_records(root)[0]
    (d / "metrics.jsonl.xz").write_bytes(lzma.compress((d / "metrics.jsonl").read_bytes())[:-9])
    (d / "metrics.jsonl").unlink()
    assert main(["reproduce", "compact", str(root)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(d / "metrics.jsonl.xz") in err[0] and "damaged" in err[0], err
    assert (d / "metrics.jsonl.xz").exists()  # left for the fix


def test_compact_of_a_missing_folder_is_a_usage_error(tmp_path, capsys):
    assert main(["reproduce", "compact", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such records directory" in err[0]


# --- collect ----------------------------------------------------------------------------------
def test_collect_writes_the_compressed_form(tmp_path, capsys):
    runs = tmp_path / "runs"
    src, *others = _threshold_records(runs)
    for d in others:
        shutil.rmtree(d)
    assert main(["reproduce", "collect", str(runs), "-o", str(tmp_path / "rec")]) == 0
    assert "xz-compressed" in capsys.readouterr().out
    (dest,) = [p.parent for p in (tmp_path / "rec").rglob("result.json.xz")]
    assert sorted(p.name for p in dest.iterdir()) == STORED_NAMES
    for n in STORED_NAMES:
        assert (dest / n).read_bytes().startswith(XZ_MAGIC)  # each an xz file (`xz -d` opens it)
    for n in RunFiles.COMPRESSED:
        assert read_stored(dest / n) == (src / n).read_bytes()
    # the source, a live run directory, stays plain
    assert sorted(p.name for p in src.iterdir()) == ["config.json", "metrics.jsonl", "result.json", "task.json"]
    tree = _tree(tmp_path / "rec")
    assert collect(runs, tmp_path / "rec") == [dest] and _tree(tmp_path / "rec") == tree  # again: the same bytes
