"""The asRNN code protocol: ``asrnn/code/*`` (and the copy asRNN's ``asrnn/copy-L{1000,2000}-code``)
are their paper presets with exactly the settings of ``ASRNN_CODE_DIFFS`` changed to the values
the authors' released code (ndminhkhoi46/asRNN) runs, registered as the ``code`` protocol of
their paper preset; the files are what tools/asrnn_code_presets.py writes."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import flat_config, preset_diff_keys
from rnnlab import config
from rnnlab.ledger import published
from rnnlab.ledger.sources_asrnn import ASRNN_CODE_DIFFS
from rnnlab.train import train

torch.set_num_threads(1)
TOOLS = Path(__file__).resolve().parents[2] / "tools"
CODE = sorted(p for p, (_b, proto, _w) in published.PROTOCOLS.items() if proto == "code" and p.startswith("asrnn/"))


def test_the_code_protocol_differs_from_the_paper_protocol_only_where_the_released_code_does():
    assert CODE == sorted(ASRNN_CODE_DIFFS)
    for code, (paper, diffs) in ASRNN_CODE_DIFFS.items():
        assert published.PROTOCOLS[code][:2] == (paper, "code")
        assert published.protocol(paper) == "paper" and published.at_other_protocols(paper)[0] == code
        assert preset_diff_keys(code, paper) == {k for k, *_ in diffs}, code
        flat = flat_config(config.load(code).to_dict())
        for key, value, src, _what in diffs:
            assert flat.get(key) == value, (code, key)
            assert src.kind == "code" and src.where, (code, key)
    # the values as the released code runs them
    assert config.load("asrnn/copy-L1000-code").optim.group_lr == {"orthogonal": 2e-05}  # copytask.py:47
    assert config.load("asrnn/copy-L1000").optim.group_lr == {"orthogonal": 1e-04}  # Table 5
    lstm = config.load("asrnn/code/copy-L2000-lstm")
    assert (lstm.optim.lr, lstm.optim.clip, lstm.model.cell_options) == (
        1e-3,
        1.0,
        {"forget_bias": 0.5, "forget_bias_hh": 0.5},
    )
    assert config.load("asrnn/code/smnist-n122-lstm").model.hidden_size == 128
    assert config.load("asrnn/code/smnist-n122-scornn").model.cell_options["negatives"] == 17  # rho 1/10
    assert config.load("asrnn/code/psmnist-n122-scornn").model.cell_options["negatives"] == 85  # rho 1/2
    assert "K" not in config.load("asrnn/code/psmnist-n122").model.cell_options  # static expm
    # the uRNN has no code preset: the released code has none
    assert not any(p.endswith("-urnn") for p in CODE)
    r = subprocess.run(
        [sys.executable, str(TOOLS / "asrnn_code_presets.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_released_lstm_forget_bias_is_one_in_effect():
    from rnnlab.cells import LSTMCell

    cell = LSTMCell(10, 6, forget_bias=0.5, forget_bias_hh=0.5)
    assert torch.equal(cell.bias_ih[6:12] + cell.bias_hh[6:12], torch.ones(6))


@pytest.mark.parametrize("name", [p for p in CODE if "/code/copy" in p])
def test_every_new_copy_preset_trains_two_steps(name, tmp_path):
    cfg = config.load(name, ["task.L=10", "task.val_size=8", "task.test_size=8", "train.steps=2", "train.eval_every=1"])
    r = train(cfg, tmp_path / "run")
    assert r["steps"] == 2 and r["stopped"] == "completed"
    assert all(v == v for v in r["test"].values())
