"""`rnnlab analyze schur` end to end on tiny trained runs (nnRNN, expRNN, LSTM)."""

import json

import pytest
import torch

from conftest import set_flags
from rnnlab import cli

torch.set_num_threads(1)

SMALL = [
    *set_flags("train.steps=3", "train.eval_every=3", "task.L=6", "task.K=3", "task.val_size=4", "task.test_size=4"),
    "--quiet",
]


def _train(tmp_path, preset, hidden):
    out = tmp_path / preset.replace("/", "_")
    rc = cli.main(["train", preset, "--out", str(out), "--set", f"model.hidden_size={hidden}", *SMALL])
    assert rc == 0
    return out


def test_analyze_schur_nnrnn_run(tmp_path, capsys):
    run = _train(tmp_path, "nnrnn/copy", 8)
    assert cli.main(["analyze", "schur", str(run)]) == 0
    summary = json.loads((run / "schur" / "schur.json").read_text())
    assert len(summary) == 1 and summary[0]["n"] == 8
    # three tiny RMSprop steps from gamma = 1 at lr 5e-4: moduli stay within a few lr of 1
    assert summary[0]["mean_eigenvalue_modulus"] == pytest.approx(1.0, abs=0.01)
    assert (run / "schur" / "schur_0.png").stat().st_size > 1000
    assert "mean |eigenvalue|" in capsys.readouterr().out
    # a checkpoint file inside the run works too, into another directory
    assert cli.main(["analyze", "schur", str(run / "checkpoint.pt"), "--out", str(tmp_path / "v")]) == 0
    assert (tmp_path / "v" / "schur.json").exists()


def test_analyze_schur_orthogonal_and_gated(tmp_path, capsys):
    run = _train(tmp_path, "nnrnn/copy-exprnn", 6)
    assert cli.main(["analyze", "schur", str(run)]) == 0
    s = json.loads((run / "schur" / "schur.json").read_text())[0]
    assert s["mean_eigenvalue_modulus"] == pytest.approx(1.0, abs=1e-5)  # orthogonal
    assert s["departure_from_normality"] < 1e-4
    run = _train(tmp_path, "nnrnn/copy-lstm", 4)
    assert cli.main(["analyze", "schur", str(run)]) == 2
    assert "no square recurrent matrix" in capsys.readouterr().err
