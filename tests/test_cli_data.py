"""`rnnlab data ...` and every real-data task trained a few steps end to end from the CLI.

The fast tests use fixture files built here; the slow one uses the real files when present.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import SPANISH_PAIRS
from rnnlab import cli

WORDS = {
    "train": " the cat sat on the mat \n a dog <unk> N \n the end \n",
    "valid": " the dog sat \n a cat \n",
    "test": " the mat \n",
}
PAIRS = SPANISH_PAIRS * 3


def write_idx(path, array):
    import gzip
    import struct

    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]


def write_preset(path: Path, task: str, model: str, steps: int = 3, batch: int = 4, extra_train: str = "") -> Path:
    path.write_text(f"""
name = "smoke-{path.stem}"
[task]
{task}
[model]
{model}
[optim]
name = "adam"
lr = 1e-3
clip = 1.0
[train]
steps = {steps}
batch_size = {batch}
eval_every = {steps}
eval_batch_size = 8
log_every = 1
seed = 0
{extra_train}
""")
    return path


def build_fixture_root(root: Path) -> None:
    import zipfile

    import numpy as np

    from rnnlab.tasks.data import ptb_chars_from_words

    rng = np.random.RandomState(0)
    (root / "mnist").mkdir(parents=True)
    write_idx(root / "mnist" / "train-images-idx3-ubyte.gz", rng.randint(0, 256, (12, 28, 28)).astype(np.uint8))
    write_idx(root / "mnist" / "train-labels-idx1-ubyte.gz", (np.arange(12) % 10).astype(np.uint8))
    write_idx(root / "mnist" / "t10k-images-idx3-ubyte.gz", rng.randint(0, 256, (5, 28, 28)).astype(np.uint8))
    write_idx(root / "mnist" / "t10k-labels-idx1-ubyte.gz", (np.arange(5) % 10).astype(np.uint8))
    (root / "ptb").mkdir()
    for split, text in WORDS.items():
        (root / "ptb" / f"ptb.{split}.txt").write_text(text * 4)
        (root / "ptb" / f"ptb.char.{split}.txt").write_text(ptb_chars_from_words(text * 4))
    (root / "tatoeba").mkdir()
    with zipfile.ZipFile(root / "tatoeba" / "spa-eng.zip", "w") as z:
        z.writestr("spa.txt", "".join(f"{e}\t{s}\n" for e, s in PAIRS))
    try:
        import scipy.io as sio
    except ImportError:
        return
    (root / "polyphonic").mkdir()
    cells = {}
    for key, lengths in (("traindata", [5, 9, 3, 7]), ("validdata", [4, 11]), ("testdata", [6])):
        c = np.empty((1, len(lengths)), dtype=object)
        for i, T in enumerate(lengths):
            c[0, i] = (rng.rand(T, 88) < 0.1).astype(np.uint8)
        cells[key] = c
    sio.savemat(root / "polyphonic" / "Nottingham.mat", cells)


FIXTURE_TASKS = {
    "smnist": ('name = "smnist"\nval_size = 3\nverify = false', 'cell = "rnn"\nhidden_size = 8'),
    "psmnist": ('name = "psmnist"\nval_size = 3\nverify = false', 'cell = "gru"\nhidden_size = 8'),
    "ptb_char": ('name = "ptb_char"\nbptt = 7\nverify = false', 'cell = "lstm"\nhidden_size = 8\nembedding = 4'),
    "ptb_word": ('name = "ptb_word"\nbptt = 5\nverify = false', 'cell = "gru"\nhidden_size = 8'),
    "music": ('name = "music"\ndataset = "nottingham"\nverify = false', 'cell = "gru"\nhidden_size = 8'),
    "translation": (
        'name = "translation"\nval_size = 4\ntest_size = 4\nmin_freq = 1\nteacher_forcing = 0.5\nverify = false',
        'cell = "rnn"\nhidden_size = 8\nembedding = 6',
    ),
}


@pytest.mark.parametrize("task", sorted(FIXTURE_TASKS))
def test_cli_trains_each_task_on_fixture_files(task, tmp_path, capsys):
    if task == "music":
        pytest.importorskip("scipy")
    build_fixture_root(tmp_path / "data")
    t, m = FIXTURE_TASKS[task]
    preset = write_preset(tmp_path / f"{task}.toml", t, m)
    rc = cli.main(
        ["train", str(preset), "--out", str(tmp_path / "run"), "--data-dir", str(tmp_path / "data"), "--quiet"]
    )
    assert rc == 0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["steps"] == 3
    primary = {
        "smnist": "accuracy",
        "psmnist": "accuracy",
        "ptb_char": "bpc",
        "ptb_word": "perplexity",
        "music": "nll",
        "translation": "perplexity",
    }[task]
    assert f"test/{primary}" in result["test"]
    if task == "translation":
        assert "test/bleu" in result["test"]


def test_cli_data_list_verify_download(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RNNLAB_DATA", str(tmp_path / "empty"))
    assert cli.main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "empty") in out and "rnnlab data download mnist" in out
    assert cli.main(["data", "verify", "ptb"]) == 1
    # a missing file makes a training run fail with the fix in the message
    preset = write_preset(tmp_path / "p.toml", 'name = "ptb_char"', 'cell = "rnn"\nhidden_size = 4')
    assert cli.main(["train", str(preset), "--out", str(tmp_path / "run"), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "ptb.char.train.txt" in err and "rnnlab data download ptb" in err
    assert cli.main(["data", "download", "nope"]) != 0


def test_cli_verify_real_copy(capsys, data_root):
    assert cli.main(["data", "verify", "polyphonic", "tinyshakespeare", "--data-dir", str(data_root)]) == 0


REAL_TASKS = {
    "smnist": ('name = "smnist"', 'cell = "rnn"\nhidden_size = 16'),
    "psmnist": ('name = "psmnist"', 'cell = "exprnn"\nhidden_size = 16'),
    "ptb_char": ('name = "ptb_char"\nbptt = 30', 'cell = "lstm"\nhidden_size = 32\nembedding = 8'),
    "ptb_word": ('name = "ptb_word"\nbptt = 10', 'cell = "gru"\nhidden_size = 16\nembedding = 16'),
    "shakespeare": ('name = "text_char"\ncorpus = "shakespeare"\nbptt = 30', 'cell = "gru"\nhidden_size = 16'),
    "jsb": ('name = "music"\ndataset = "jsb"', 'cell = "gru"\nhidden_size = 16'),
    "spa-eng": (
        'name = "translation"\npair = "spa-eng"\nbleu_size = 50',
        'cell = "gru"\nhidden_size = 16\nembedding = 16',
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL_TASKS))
def test_cli_trains_on_real_files(name, tmp_path, data_root):
    t, m = REAL_TASKS[name]
    preset = write_preset(tmp_path / f"{name}.toml", t, m, steps=2, batch=8, extra_train="eval_max_batches = 1")
    rc = cli.main(["train", str(preset), "--out", str(tmp_path / "run"), "--data-dir", str(data_root), "--quiet"])
    assert rc == 0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["steps"] == 2 and result["test"]


def test_trainer_carries_state_into_every_tbptt_chunk(tmp_path, monkeypatch):
    """Every chunk with carry_state=True must start from the previous chunk's final state,
    including the second chunk of a pass (the first has carry_state=False)."""
    from rnnlab import config, train

    build_fixture_root(tmp_path / "data")
    preset = write_preset(
        tmp_path / "c.toml", 'name = "ptb_char"\nbptt = 7\nverify = false', 'cell = "gru"\nhidden_size = 8', steps=12
    )
    cfg = config.load(str(preset))
    seen = []
    real = train.model_forward

    def spy(model, batch, state=None):
        if model.training:
            seen.append((batch.carry_state, state is not None))
        return real(model, batch, state)

    monkeypatch.setattr(train, "model_forward", spy)
    train.train(cfg, tmp_path / "run", progress=False, data_dir=str(tmp_path / "data"))
    assert len(seen) == 12 and seen[0] == (False, False)
    assert any(c for c, _ in seen[1:]) and any(not c for c, _ in seen[1:])  # several passes
    assert all(c == s for c, s in seen), seen


def test_cli_data_download_from_local_server(tmp_path, monkeypatch, capsys):
    import functools
    import hashlib
    import http.server
    import threading

    from rnnlab.tasks import data

    served = tmp_path / "www"
    served.mkdir()
    payload = b"0123456789" * 1000
    (served / "f.bin").write_bytes(payload)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/f.bin"
        ds = data.Dataset(
            "local", "local", (data.DataFile("f.bin", hashlib.sha256(payload).hexdigest(), len(payload), (url,)),)
        )
        monkeypatch.setitem(data.DATASETS, "local", ds)
        root = tmp_path / "root"
        assert cli.main(["data", "verify", "local", "--data-dir", str(root)]) == 1
        assert cli.main(["data", "download", "local", "--data-dir", str(root), "--quiet"]) == 0
        assert (root / "local" / "f.bin").read_bytes() == payload
        assert cli.main(["data", "verify", "local", "--data-dir", str(root)]) == 0
        assert "verified" in capsys.readouterr().out
    finally:
        srv.shutdown()
        srv.server_close()
