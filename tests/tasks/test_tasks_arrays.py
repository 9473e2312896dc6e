"""The arrays task: your own data from an .npz or from Python. Kinds (classes / regression, per
sequence / per step), lengths, batches, the memoryless baseline computed a second way, a round
trip through a file, training from a preset, and an error naming the array for each bad input."""

import math

import numpy as np
import pytest
import torch

import rnnlab
from rnnlab import config
from rnnlab.tasks import TASKS, ArraysTask, from_arrays
from rnnlab.tasks.data import DataError
from rnnlab.train import evaluate, load_run, train

torch.set_num_threads(1)
RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 9, 2)).astype(np.float32)


def _split(y, lengths=None, test=True):
    kw = dict(x_train=X[:40], y_train=y[:40], x_val=X[40:50], y_val=y[40:50])
    if test:
        kw.update(x_test=X[50:], y_test=y[50:])
    if lengths is not None:
        kw.update(lengths_train=lengths[:40], lengths_val=lengths[40:50])
        if test:
            kw["lengths_test"] = lengths[50:]
    return kw


def test_registered_and_public():
    assert TASKS["arrays"] is ArraysTask and rnnlab.tasks.from_arrays is from_arrays


@pytest.mark.parametrize(
    "y,kind,readout,out",
    [
        ((X[:, :, 0].sum(1) > 0).astype(np.int64), "ce", "last", 2),  # labels per sequence
        (X[:, :, 0].sum(1), "mse", "last", 1),  # a float per sequence
        (X.sum(1), "mse", "last", 2),  # (N, O) floats
        ((X[..., 0] > 0).astype(np.int32), "ce", "all", 2),  # labels per step
        (np.cumsum(X[..., 0], 1), "mse", "all", 1),  # (N, T) floats per step
        (np.cumsum(X, 1), "mse", "all", 2),  # (N, T, O)
    ],
)
def test_kinds_follow_dtype_and_shape(y, kind, readout, out):
    task = from_arrays(**_split(y))
    assert (task.loss_kind, task.readout, task.output_size, task.input_size) == (kind, readout, out, 2)
    b = next(task.train_batches(8, torch.Generator().manual_seed(0)))
    assert b.x.shape == (8, 9, 2) and b.x.dtype == torch.float32
    model = rnnlab.model.build_model(config.ModelConfig(cell="gru", hidden_size=6), task)
    out_t, _ = model(b.x, None, b.lengths)
    assert torch.isfinite(task.loss(out_t, b))


def test_target_option_decides_a_2d_float_y():
    y = np.cumsum(X[:, :, 0], 1)[:, :9]  # (N, T): auto reads it per step
    assert from_arrays(**_split(y)).readout == "all"
    assert from_arrays(**_split(y), target="sequence").output_size == 9
    with pytest.raises(ValueError, match="target='step' but y_train has shape \\(40,\\)"):
        from_arrays(**_split(y[:, 0]), target="step")


def test_baseline_is_the_memoryless_prediction():
    labels = RNG.integers(0, 3, size=60)
    task = from_arrays(**_split(labels))
    counts = np.bincount(labels[:40], minlength=3)
    prior = (counts + 1) / (counts.sum() + 3)
    val = labels[40:50]
    assert task.baseline()["loss"] == pytest.approx(-np.log(prior[val]).mean())
    assert task.baseline()["accuracy"] == pytest.approx((val == counts.argmax()).mean())
    # the model that outputs log prior at every sequence scores exactly the baseline loss
    out = torch.tensor(np.log(prior), dtype=torch.float32).expand(10, 3)
    sums = task.metric_sums(out, next(iter(task.eval_batches("val", 100))))
    assert sums["loss"][0] / sums["loss"][1] == pytest.approx(task.baseline()["loss"], rel=1e-6)

    y = RNG.normal(size=(60, 9)).astype(np.float32) + 3
    L = RNG.integers(1, 10, size=60)
    reg = from_arrays(**_split(y, L))
    mask = np.arange(9)[None, :] < L[:, None]
    mean = y[:40][mask[:40]].mean()
    assert reg.baseline()["loss"] == pytest.approx(((y[40:50][mask[40:50]] - mean) ** 2).mean(), rel=1e-6)


def test_lengths_mask_the_loss_and_reach_the_model():
    y = np.cumsum(X[..., 0], 1)
    L = RNG.integers(1, 10, size=60)
    task = from_arrays(**_split(y, L))
    b = next(iter(task.eval_batches("val", 4)))
    assert b.lengths.tolist() == L[40:44].tolist()
    out = torch.zeros(4, 9, 1)
    out[0, L[40] :] = 1e6  # past the length: must not count
    want = np.concatenate([(y[40 + i, : L[40 + i]]) ** 2 for i in range(4)]).mean()
    assert task.loss(out, b).item() == pytest.approx(want, rel=1e-5)


def test_tokens_and_epochs():
    x = RNG.integers(0, 5, size=(60, 9))
    y = RNG.integers(0, 2, size=60)
    task = from_arrays(x[:40], y[:40], x[40:50], y[40:50])
    assert task.num_tokens == task.input_size == 5 and task.splits == ["train", "val"]
    stream = task.train_batches(16, torch.Generator().manual_seed(1))
    seen = torch.cat([next(stream).x for _ in range(2)])  # one epoch: 2 full batches of 16 (8 dropped)
    rows = {tuple(r) for r in x[:40].tolist()}
    assert all(tuple(r) in rows for r in seen.tolist()) and len({tuple(r) for r in seen.tolist()}) == len(seen)
    with pytest.raises(ValueError, match="no test split"):
        list(task.eval_batches("test", 8))
    with pytest.raises(ValueError, match=r"train.batch_size must be in \[1, 40\]"):
        next(task.train_batches(41, torch.Generator()))


def test_file_round_trip_and_sha256(tmp_path):
    y = (X[:, 0, 0] > 0).astype(np.int64)
    task = from_arrays(**_split(y, RNG.integers(1, 10, size=60)))
    path = task.save(tmp_path / "mine")
    assert path.name == "mine.npz"
    again = ArraysTask(str(path))
    for s in ("train", "val", "test"):
        assert torch.equal(again.x[s], task.x[s]) and torch.equal(again.y[s], task.y[s])
        assert torch.equal(again.lengths[s], task.lengths[s])
    assert again.baseline() == task.baseline() and len(again.sha256) == 64
    assert ArraysTask(str(path), sha256=again.sha256.upper()).sha256 == again.sha256
    with pytest.raises(DataError, match="has SHA-256"):
        ArraysTask(str(path), sha256="0" * 64)
    with pytest.raises(DataError, match="no such file 'nope.npz'"):
        ArraysTask("nope.npz")
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(DataError, match="is not an .npz file"):
        ArraysTask(str(tmp_path / "bad.npz"))
    np.savez(tmp_path / "obj.npz", x_train=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DataError, match="without pickles"):
        ArraysTask(str(tmp_path / "obj.npz"))


BAD = {
    "x_test without y_test": (dict(x_test=X[50:], y_test=None), "x_test is given without y_test"),
    "ragged x": (dict(x_train=[[1.0, 2.0], [3.0]]), "x_train cannot be read as an array"),
    "strings": (dict(y_train=np.array(["a"] * 40)), "y_train has dtype <U1; expected numbers"),
    "1-D x": (dict(x_train=X[:40, 0, 0]), r"x_train has shape \(40,\); expected \(N, T, I\) or \(N, T\)"),
    "rows": (dict(y_val=np.zeros(9, dtype=np.int64)), "y_val has shape \\(9,\\) but x_val holds 10 sequences"),
    "NaN": (dict(x_val=np.where(X[40:50] > 1.5, np.nan, X[40:50])), "x_val has .* NaN or infinite"),
    "inf y": (dict(y_train=np.r_[np.inf, np.zeros(39)]), "y_train has 1 NaN or infinite value"),
    "float val labels": (dict(y_val=np.zeros(10)), "y_val has dtype float64 but y_train has int64"),
    "negative label": (dict(y_train=np.r_[-1, np.zeros(39, dtype=np.int64)]), "y_train holds label -1"),
    "width": (dict(x_val=X[40:50, :, :1]), "x_val has 1 features per step but x_train has 2"),
    "lengths range": (dict(lengths_val=np.r_[0, np.ones(9, dtype=np.int64)]), r"lengths_val .* in \[1, T = 9\]"),
    "lengths dtype": (dict(lengths_train=np.ones(40)), r"lengths_train has shape \(40,\) and dtype float64"),
    "time axis": (dict(y_val=np.zeros((10, 5), dtype=np.int64)), "per-step targets need the time axis of x_val"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_arrays_are_named(case):
    change, match = BAD[case]
    kw = _split((X[:, 0, 0] > 0).astype(np.int64), test=False)
    for k, v in change.items():
        if v is None:
            kw.pop(k, None)
        else:
            kw[k] = v
    with pytest.raises(ValueError, match=match) as info:
        from_arrays(**kw)
    assert "\n" not in str(info.value)


def test_unknown_arrays_in_a_file_are_named(tmp_path):
    np.savez(tmp_path / "f.npz", x_train=X[:40], y_train=X[:40, 0, 0], x_val=X[40:], y_val=X[40:, 0, 0], z_train=X)
    with pytest.raises(ValueError, match=r"unexpected array\(s\) \['z_train'\]"):
        ArraysTask(str(tmp_path / "f.npz"))
    np.savez(tmp_path / "g.npz", x_train=X[:40], y_train=X[:40, 0, 0], x_val=X[40:])
    with pytest.raises(ValueError, match="y_val is missing"):
        ArraysTask(str(tmp_path / "g.npz"))


def test_trains_from_a_preset_and_reloads_without_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    y = (X[:, :3, 0].sum(1) > 0).astype(np.int64)
    from_arrays(**_split(y)).save("mine.npz")
    (tmp_path / "mine.toml").write_text(
        'name = "mine"\n[task]\nname = "arrays"\npath = "mine.npz"\n[model]\ncell = "asrnn"\nhidden_size = 8\n'
        "[train]\nsteps = 20\nbatch_size = 8\neval_every = 10\n"
    )
    cfg = config.load(str(tmp_path / "mine.toml"))
    result = train(cfg, tmp_path / "runs" / "mine", progress=False)
    assert set(result["test"]) == {"test/loss", "test/accuracy"}
    majority = int(np.bincount(y[:40]).argmax())
    assert result["baseline"]["accuracy"] == pytest.approx(np.mean(y[40:50] == majority))
    (tmp_path / "mine.npz").unlink()  # the run reloads from task.json without its data
    _, task, model = load_run(tmp_path / "runs" / "mine")
    assert task.input_size == 2 and task.output_size == 2 and task.meta["path"] == "mine.npz"
    out, _ = model(torch.from_numpy(X[:3]))
    assert out.shape == (3, 2)


def test_from_python_with_train(tmp_path):
    y = np.cumsum(X[..., 0], 1)
    task = from_arrays(**_split(y, test=False))
    cfg = config.from_dict(
        {
            "name": "py",
            "task": {"name": "arrays"},
            "model": {"cell": "nnrnn", "hidden_size": 8},
            "train": {"steps": 10, "batch_size": 8, "eval_every": 10, "test": False},
        }
    )
    result = train(cfg, tmp_path / "py", task=task, progress=False)
    assert result["baseline"]["loss"] == pytest.approx(task.baseline()["loss"])
    assert math.isfinite(result["final"]["val/loss"])
    model = load_run(tmp_path / "py", which="last", data=False)[2]
    assert evaluate(model, task, "val")["val/loss"] == pytest.approx(result["final"]["val/loss"], rel=1e-6)


def _npz_members(path, arrays: dict, raw: dict = ()) -> None:
    """An .npz written member by member: ``arrays`` saved as .npy, ``raw`` as the bytes given."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for k, v in arrays.items():
            b = io.BytesIO()
            np.save(b, v)
            z.writestr(k + ".npy", b.getvalue())
        for name, data in dict(raw).items():
            z.writestr(name, data)


def test_damaged_or_foreign_npz_files_are_one_line_errors_naming_the_file(tmp_path):
    """Before: a truncated .npz raised ``zipfile.BadZipFile``; a header declaring a 364 TiB
    shape, a label or token id of 1e9 ended in "out of memory ... use a smaller model"; a member
    that is not .npy gave "x_test has dtype |S200" and 0 features per step an error naming
    neither x_train nor the file."""
    import io

    y = (X[:, 0, 0] > 0).astype(np.int64)
    base = dict(x_train=X[:40], y_train=y[:40], x_val=X[40:50], y_val=y[40:50])
    np.savez(tmp_path / "good.npz", **base)
    data = (tmp_path / "good.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**7, 10**7, 1000)}
    )
    _npz_members(
        tmp_path / "huge.npz", {k: v for k, v in base.items() if k != "x_train"}, {"x_train.npy": header.getvalue()}
    )
    _npz_members(tmp_path / "foreign.npz", base, {"x_test": b"x" * 200})
    np.savez(
        tmp_path / "zero.npz",
        **{**base, "x_train": np.zeros((40, 9, 0), "float32"), "x_val": np.zeros((10, 9, 0), "float32")},
    )
    np.savez(tmp_path / "label.npz", **{**base, "y_train": np.r_[10**9, y[1:40]]})
    tokens = np.zeros((40, 9), np.int64)
    tokens[0, 0] = 10**9
    np.savez(tmp_path / "token.npz", **{**base, "x_train": tokens, "x_val": np.zeros((10, 9), np.int64)})
    cases = {
        "cut": (DataError, "is a damaged .npz"),
        "huge": (DataError, r"x_train declares shape \(10000000, 10000000, 1000\) of float32 .* cut short"),
        "foreign": (DataError, "member 'x_test' is not a .npy array"),
        "zero": (ValueError, r"x_train has shape \(40, 9, 0\): 0 features per step"),
        "label": (ValueError, r"y_train holds label 1000000000, but only 3 distinct labels .* numpy.unique"),
        "token": (ValueError, r"x_train holds token id 1000000000, but only 2 distinct token ids"),
    }
    for name, (kind, match) in cases.items():
        path = tmp_path / f"{name}.npz"
        with pytest.raises(kind, match=match) as info:
            ArraysTask(str(path))
        msg = str(info.value)
        assert "\n" not in msg and str(path) in msg, msg
        if kind is DataError:
            assert "numpy.savez" in msg  # the fix
    ArraysTask(str(tmp_path / "good.npz"))  # the checks pass a good file
