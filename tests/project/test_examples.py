"""The scripts in examples/ run as written (at a few steps), and say what they claim to: the
drop-in's converted LSTM gives torch's outputs, the own-data script trains both models into
run directories and tabulates them, the paper figure writes its plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _run(script: str, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return r.stdout


def test_there_are_the_four_examples_and_each_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(
        ["lstm_drop_in.py", "own_data.py", "henaff_copy_small.py", "own_cell.py"]
    )


def test_lstm_drop_in():
    out = _run("lstm_drop_in.py", "--steps", "5")
    diff = float(out.split("largest output difference ")[1].split()[0])
    assert diff < 1e-6
    for name in ("torch.nn.LSTM", "rnnlab.LSTM", "rnnlab.ASRNN"):
        acc = float(out.split(f"{name}")[1].split("steps: ")[1].split()[0])
        assert 0.0 <= acc <= 1.0


def test_own_data(tmp_path):
    out = _run("own_data.py", "--steps", "6", "--out", str(tmp_path))
    for cell in ("asrnn", "lstm"):
        result = json.loads((tmp_path / f"sines-{cell}" / "result.json").read_text())
        assert result["steps"] == 6 and result["cell"] == cell
        assert f"sines-{cell}: test accuracy {result['test']['test/accuracy']:.3f}" in out
        assert f"| sines-{cell} | {cell} |" in out


@pytest.mark.parametrize("steps", ["4"])
def test_henaff_copy_small(tmp_path, steps):
    out = _run("henaff_copy_small.py", "--steps", steps, "--L", "10", "--out", str(tmp_path))
    assert (tmp_path / "recall.png").stat().st_size > 1000
    for name in ("henaff-copy-ltirnn", "henaff-copy-ltornn"):
        (result,) = tmp_path.glob(f"{name}*/result.json")
        recall = json.loads(result.read_text())["test"]["test/recall_accuracy"]
        assert f"test recall {recall:.3f} after {steps} steps" in out


def test_own_cell(tmp_path):
    out = _run("own_cell.py", "--steps", "4", "--seeds", "2", "--out", str(tmp_path))
    assert "FAIL" not in out and out.count("PASS") == 7  # the contract check, without the runs
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| adding |")]
    assert [r[1] for r in rows] == [f"{EXAMPLES / 'own_cell.py'}:MinGated", "dmu", "lstm"]
    assert all(r[5] == "2" for r in rows)  # two seeds each
    assert (tmp_path / "adding.png").stat().st_size > 1000
