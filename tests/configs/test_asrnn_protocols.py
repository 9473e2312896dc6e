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
        flat = flat_config(config.load(code).to_dict())
        # the ledger counts train.eval_batch_size as a recording key, but a language model's
        # evaluation carries the state along each row: the PTB code presets set it
        rows = flat_config(config.load(paper).to_dict())["train.eval_batch_size"] != flat["train.eval_batch_size"]
        assert preset_diff_keys(code, paper) | ({"train.eval_batch_size"} if rows else set()) == {
            k for k, *_ in diffs
        }, code
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
    # the uRNN and PTB's EURNN have no code preset: the released code has neither
    assert not any(p.endswith(("-urnn", "-eurnn")) for p in CODE)
    r = subprocess.run(
        [sys.executable, str(TOOLS / "asrnn_code_presets.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_released_mnist_settings_at_n257_and_n364():
    """Hyperparameter.md's rows (lines 29-35, 46-52), as the audit read them."""
    for task in ("smnist", "psmnist"):
        for n in (257, 364):
            assert "K" not in config.load(f"asrnn/code/{task}-n{n}").model.cell_options  # static expm
            lstm = config.load(f"asrnn/code/{task}-n{n}-lstm")  # the record's one MNIST LSTM, n=128
            assert (lstm.model.hidden_size, lstm.optim.lr, lstm.optim.alpha, lstm.optim.clip) == (128, 1e-3, 0.9, 1.0)
            for m in ("exprnn", "scornn"):
                assert config.load(f"asrnn/code/{task}-n{n}-{m}").optim.clip == 0.0  # no clipping
    assert config.load("asrnn/smnist-n364-lstm").model.hidden_size == 184  # ours: the 137K budget
    assert config.load("asrnn/code/smnist-n257-scornn").optim.alpha == 0.99  # Hyperparameter.md:31
    assert config.load("asrnn/code/smnist-n364-scornn").optim.alpha == 0.9  # :35
    assert config.load("asrnn/code/smnist-n257-scornn").model.cell_options["negatives"] == 36  # rho 1/10
    assert config.load("asrnn/code/psmnist-n364-scornn").model.cell_options["negatives"] == 256  # rho 1/2
    # pMNIST asRNN n=364: Hyperparameter.md:50 gives 5e-4 / 5e-5, Table 5 7e-4 / 7e-5
    o = config.load("asrnn/code/psmnist-n364").optim
    assert (o.lr, o.group_lr) == (5e-4, {"orthogonal": 5e-5})
    assert config.load("asrnn/psmnist-n364").optim.lr == 7e-4
    # pMNIST expRNN, read by hidden size: 360 at 7e-4 (line 51), 512 at 5e-4 (line 47)
    assert config.load("asrnn/code/psmnist-n257-exprnn").optim.lr == 7e-4
    e = config.load("asrnn/code/psmnist-n364-exprnn")
    assert (e.model.hidden_size, e.optim.lr) == (512, 5e-4)
    assert config.load("asrnn/code/psmnist-n257-scornn").optim.lr == 5e-4  # line 48


def test_the_released_ptb_settings():
    """pennchar.py and Hyperparameter.md:65-79."""
    for T, epoch in ((150, 262), (300, 131)):
        for m in ("", "-lstm", "-exprnn"):
            cfg = config.load(f"asrnn/code/ptb_char-bptt{T}{m}")
            assert (cfg.model.embedding_init, cfg.model.readout_init) == ("uniform0.1", "uniform0.1")
            t = cfg.train
            assert (t.eval_every, t.eval_batch_size, t.steps) == (epoch, 10, 100 * epoch)
            assert (t.schedule, t.plateau_factor, t.plateau_patience, t.plateau_threshold) == ("plateau", 0.5, 0, 0.0)
            assert cfg.optim.clip == 0.0
        e = config.load(f"asrnn/code/ptb_char-bptt{T}-exprnn").optim
        assert (e.lr, e.group_lr, e.alpha) == (5e-3, {"orthogonal": 1e-4}, 0.9)
        assert config.load(f"asrnn/code/ptb_char-bptt{T}-lstm").model.cell_options == {
            "forget_bias": 0.5,
            "forget_bias_hh": 0.5,
        }
    assert config.load("asrnn/code/ptb_char-bptt150").optim.group_lr == {"orthogonal": 1e-4}  # Hyperparameter.md:70
    assert config.load("asrnn/code/ptb_char-bptt300").optim.group_lr == {"orthogonal": 1e-3}  # :78, as Table 5
    lstm150, lstm300 = config.load("asrnn/code/ptb_char-bptt150-lstm"), config.load("asrnn/code/ptb_char-bptt300-lstm")
    assert (lstm150.optim.lr, lstm150.optim.alpha) == (1e-3, 0.99)
    assert (lstm300.optim.lr, lstm300.optim.alpha) == (3e-3, 0.9)


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


@pytest.mark.needs_data
@pytest.mark.parametrize("name", [p for p in CODE if "/code/" in p and "/code/copy" not in p])
def test_every_data_code_preset_trains_two_steps(name, tmp_path, data_root):
    """MNIST and PTB on the real data (skipped without it), cut to two steps and one evaluation
    batch, smaller where the preset is wide."""
    sets = [f"task.data_dir={str(data_root)!r}", "train.steps=2", "train.eval_every=1", "train.eval_max_batches=1"]
    sets += ["train.batch_size=4", "train.eval_batch_size=4", "model.hidden_size=32"]
    if name.endswith("-scornn"):
        sets += ["model.cell_options.negatives=16"]  # the preset's count would exceed the 32 units
    if "/ptb" in name:
        sets += ["task.bptt=20"]
    else:
        sets += ["task.val_size=8"]
    r = train(config.load(name, sets), tmp_path / "run")
    assert r["steps"] == 2 and r["stopped"] == "completed"
    assert all(v == v for v in r["test"].values())
