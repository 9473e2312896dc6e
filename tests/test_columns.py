"""The columnar stored form of metrics.jsonl (``rnnlab.columns``) is lossless: over generated
rows (mixed types, keys missing per row and in any order, NaN and infinities, float32-exact
values and not, decimals, ints past 64 bits) and over a sample of the committed records, the
rows it gives back are those ``json.loads`` reads from the plain file (same keys in the same
order, same types, bit-identical floats) and its text is the plain file byte for byte. A file
it cannot give back so stays plain xz; a damaged one is a one-line error naming the file and
the fix; a finished run whose record is compacted still counts as finished."""

from __future__ import annotations

import json
import lzma
import math
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import write_record
from rnnlab import columns, config
from rnnlab.ledger import compact
from rnnlab.rundir import (
    RunFiles,
    StoredFileDamaged,
    is_finished,
    read_jsonl,
    read_stored,
    write_stored,
)

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "records"


def _exact(value):
    """``value`` with every float as its bits and every value tagged with its type: two rows
    are the same row exactly when their ``_exact`` forms are equal (NaN included)."""
    if isinstance(value, dict):
        return ("dict", [(k, _exact(v)) for k, v in value.items()])  # the keys' order counts
    if isinstance(value, list):
        return ("list", [_exact(v) for v in value])
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    return (type(value).__name__, value)


def _plain_rows(text: bytes) -> list[dict]:
    """The rows as the plain file's reader has always read them: one ``json.loads`` a line."""
    return [json.loads(line) for line in text.split(b"\n") if line.strip()]


def _check_round_trip(rows: list[dict]) -> bytes:
    text = columns.rows_text(rows)
    packed = columns.encode(text)
    assert packed is not None, "a file of json.dumps lines of objects must go into columns"
    assert columns.text(packed) == text
    assert _exact(columns.decode(packed)) == _exact(_plain_rows(text))
    return packed


# --- generated rows ---------------------------------------------------------------------------
_decimals = st.builds(
    lambda n, k: n / 10**k,
    st.one_of(st.integers(-(10**9), 10**9), st.integers(-(10**21), 10**21)),  # small, and past 64 bits scaled
    st.integers(0, 6),
)
_values = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-1000, 1000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(width=32, allow_nan=True, allow_infinity=True),  # float32-exact
    _decimals,
    st.sampled_from([0.0, -0.0, 5e-324, 1.7976931348623157e308, 3.4028234663852886e38, 1e16, 0.1 + 0.2]),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
    st.lists(st.integers(0, 3), max_size=2),
)
_keys = st.sampled_from(["time", "train/loss", "lr", "val/loss", "val/accuracy", "x y", "é"])
_row = st.builds(
    lambda step, rest: {"step": step, **rest} if step is not None else rest,
    st.one_of(st.integers(0, 10**6), st.none()),
    st.dictionaries(_keys, _values, max_size=5),
)
# a column of one kind: what a real metric looks like (every value a float, or every an int)
_column_rows = st.builds(
    lambda vals, k: [{"step": i, k: v} for i, v in enumerate(vals)],
    st.one_of(
        st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=40),
        st.lists(st.floats(width=32), max_size=40),
        st.lists(_decimals, max_size=40),
        st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40),
        st.lists(st.integers(-(2**70), 2**70), max_size=10),
    ),
    _keys,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_row, max_size=30))
def test_generated_rows_of_mixed_types_round_trip_exactly(rows):
    _check_round_trip(rows)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_column_rows)
def test_generated_columns_of_one_kind_round_trip_exactly(rows):
    _check_round_trip(rows)


def test_the_kinds_that_matter_round_trip_and_keep_their_types():
    rows = [
        {"step": 1, "time": 1.516, "train/loss": 0.7044634819030762, "lr": 0.05},
        {"step": 2, "time": 2.5, "train/loss": float("nan"), "lr": 1e-3},
        {"step": 3, "time": float("inf"), "train/loss": -0.0, "lr": 0.1 + 0.2},
        {"step": 4, "val/loss": 1.0, "val/accuracy": 1, "flag": True, "note": None},
        {"val/loss": -float("inf"), "step": 2**63 - 1, "flag": False, "note": "é"},
        {"step": -(2**63), "big": 2**64, "val/accuracy": 0.5},
    ]
    back = columns.decode(_check_round_trip(rows))
    assert [list(r) for r in back] == [list(r) for r in rows]  # the keys in each row's order
    assert type(back[3]["val/loss"]) is float and type(back[3]["val/accuracy"]) is int
    assert back[3]["flag"] is True and back[4]["flag"] is False and back[3]["note"] is None
    assert math.isnan(back[1]["train/loss"]) and back[2]["time"] == math.inf
    assert math.copysign(1.0, back[2]["train/loss"]) == -1.0  # -0.0 stays negative
    assert back[5]["big"] == 2**64 and back[4]["step"] == 2**63 - 1


def test_columns_are_much_smaller_than_plain_xz_on_a_training_log():
    """float32 losses, times with 3 decimals, a constant lr: the layout's case."""
    import numpy as np

    rng = np.random.default_rng(0)
    loss = (np.exp(-np.arange(2000) / 500) + 0.05 * rng.random(2000)).astype(np.float32)
    rows = [
        {
            "step": 10 * (i + 1),
            "time": round(1.25 * (i + 1) + 0.01 * rng.random(), 3),
            "train/loss": float(v),
            "lr": 1e-3,
        }
        for i, v in enumerate(loss)
    ]
    text = columns.rows_text(rows)
    packed = _check_round_trip(rows)
    assert len(packed) < 0.6 * len(lzma.compress(text, preset=6))


# --- what stays plain xz ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        b'{"step": 1, "train/loss": 0.5}\n{"step": 2, "train/lo',  # a partial last line
        b'{"step": 1, "train/loss": 0.5}\n{"step": 2}',  # no newline at the end
        b'{"step":1,"train/loss":0.5}\n',  # not written by json.dumps
        b'{"step": 1}\n\n{"step": 2}\n',  # a blank line
        b'{"step": 1}\n[1, 2]\n',  # a line that is not an object
        b'{"step": 1, "step": 2}\n',  # a repeated key
        b'{"step": 1e400}\n',  # a number json.dumps writes otherwise
    ],
    ids=["partial", "no-newline", "separators", "blank", "not-object", "repeated-key", "overflow"],
)
def test_a_file_the_columns_cannot_give_back_byte_for_byte_stays_plain_xz(tmp_path, text):
    assert columns.encode(text) is None
    plain = tmp_path / "metrics.jsonl"
    plain.write_bytes(text)
    before = read_jsonl(plain)
    packed = write_stored(plain, text)
    assert packed.name == "metrics.jsonl.xz" and lzma.decompress(packed.read_bytes()) == text
    plain.unlink()
    assert read_stored(plain) == text and read_jsonl(plain) == before


def test_read_jsonl_from_columns_names_the_rows_without_an_integer_step_as_the_plain_reader_does(tmp_path):
    rows = [{"step": 1, "a": 0.5}, {"step": 1.5, "a": 0.25}, {"a": 1.0}, {"step": 3, "a": 2.0}, {"step": "4"}]
    plain = tmp_path / "metrics.jsonl"
    plain.write_bytes(columns.rows_text(rows))
    expected = read_jsonl(plain)
    assert expected[1] == [2, 3, 5]
    # written as is: write_stored keeps a log this short as plain xz, the smaller
    (tmp_path / "metrics.jsonl.cols.xz").write_bytes(columns.encode(plain.read_bytes()))
    plain.unlink()
    assert _exact(read_jsonl(plain)) == _exact(expected)


# --- the committed records --------------------------------------------------------------------
def _sample_of_records(n: int = 24) -> list[Path]:
    found = sorted(p for p in RunFiles.below(RECORDS, RunFiles.METRICS))
    return found[:: max(1, len(found) // n)]


def test_a_sample_of_the_committed_records_round_trips_exactly():
    sample = _sample_of_records()
    assert len(sample) >= 20
    sizes = []
    for p in sample:
        text = read_stored(p)
        rows = _plain_rows(text)
        assert rows, p
        packed = columns.encode(text)
        assert packed is not None, f"{p} does not go into columns"
        assert columns.text(packed) == text, p
        assert _exact(columns.decode(packed)) == _exact(rows), p
        sizes.append((len(packed), len(lzma.compress(text, preset=6))))
    cols, xz = map(sum, zip(*sizes))
    assert cols < 0.5 * xz, (cols, xz)  # measured on the whole of records/: 0.37


# --- damage -----------------------------------------------------------------------------------
def _packed_payload(payload: bytes) -> bytes:
    return lzma.compress(payload, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],
        lambda b: b[:-1],
        lambda b: b"",
        lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:],
        lambda b: _packed_payload(b"not columns"),
        lambda b: _packed_payload(lzma.decompress(b)[:-3]),  # a whole xz of a truncated payload
    ],
    ids=["half", "last-byte", "empty", "flipped", "not-columns", "short-payload"],
)
def test_a_damaged_columns_file_is_an_error_naming_the_file_and_the_fix(tmp_path, damage):
    rows = [{"step": s, "time": 0.125 * s, "train/loss": 1.0 / s} for s in range(1, 200)]
    f = tmp_path / "metrics.jsonl.cols.xz"
    f.write_bytes(damage(columns.encode(columns.rows_text(rows))))
    for read in (read_jsonl, read_stored):
        with pytest.raises(StoredFileDamaged) as info:
            read(tmp_path / "metrics.jsonl")
        msg = str(info.value)
        assert str(f) in msg and "damaged" in msg and "git checkout --" in msg and "reproduce collect" in msg
        assert "\n" not in msg


# --- a finished run stays finished ------------------------------------------------------------
def test_a_compacted_record_is_still_a_finished_run_of_its_configuration(tmp_path):
    """The suite's skip-finished-runs check (``is_finished`` with the configuration) and the
    result reader see a record whose result.json and config.json are stored compressed."""
    d = write_record(tmp_path / "rec", "asrnn/smnist-n122", 0, {"test/accuracy": 0.9}, metrics=[{"step": 1}])
    cfg = config.load("asrnn/smnist-n122", ["train.seed=0"])
    other = config.load("asrnn/smnist-n122", ["train.seed=0", "train.steps=7"])
    assert is_finished(d, cfg) and not is_finished(d, other)
    result = RunFiles(d).read_result()
    compact(tmp_path / "rec")
    assert not RunFiles(d).result.exists() and (d / "result.json.xz").exists() and (d / "config.json.xz").exists()
    assert is_finished(d) and is_finished(d, cfg) and not is_finished(d, other)
    assert RunFiles(d).read_result() == result
    assert RunFiles.below(tmp_path / "rec") == [d / "result.json.xz"]


def test_the_trainer_takes_a_compacted_finished_run_as_finished(tmp_path):
    """``resume="auto"`` (``rnnlab train --seeds``, the suite's ensembles) gives back the saved
    result of a finished run whose result.json and config.json are stored compressed, and
    refuses one of another configuration, as for the plain files."""
    from rnnlab.rundir import RunExists
    from rnnlab.train import start_mode

    d = write_record(tmp_path / "rec", "asrnn/smnist-n122", 0, {"test/accuracy": 0.9}, metrics=[{"step": 1}])
    cfg = config.load("asrnn/smnist-n122", ["train.seed=0"])
    other = config.load("asrnn/smnist-n122", ["train.seed=0", "train.steps=7"])
    plain = start_mode(RunFiles(d), cfg, "auto")
    compact(tmp_path / "rec")
    assert not RunFiles(d).result.exists()
    assert isinstance(plain, dict) and start_mode(RunFiles(d), cfg, "auto") == plain
    with pytest.raises(RunExists, match="another configuration"):
        start_mode(RunFiles(d), other, "auto")
