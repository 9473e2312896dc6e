"""The initialisations the nnRNN authors' released scripts run with (nnRNN/nnRNN_release at
294d4ff), as options whose defaults leave every earlier configuration as it was: the RNN's
``expm_skew`` W_hh, Glorot / Kaiming input maps and one input bias; the LSTM's Glorot-normal
gate maps with one bias; expRNN's Glorot input map; nnRNN's ``nn.Linear`` input map; the
language model's U(-0.1, 0.1) embedding and readout, and the copy script's Glorot readout."""

import json
import math

import pytest
import torch

from rnnlab import config, rundir
from rnnlab.cells.classic import LSTMCell, RNNCell
from rnnlab.cells.nnrnn import NNRNNCell
from rnnlab.cells.orthogonal import ExpRNNCell
from rnnlab.model import SequenceModel, build_model
from rnnlab.tasks import TASKS


def test_rnn_expm_skew_is_the_exponential_of_the_skew_part_of_torchs_init():
    torch.manual_seed(0)
    plain = RNNCell(3, 64, "modrelu", "default")
    torch.manual_seed(0)
    code = RNNCell(3, 64, "modrelu", "expm_skew")
    A = plain.weight_hh.detach().double().triu(1)
    want = torch.linalg.matrix_exp(A - A.T).float()
    assert torch.allclose(code.weight_hh, want, atol=1e-6)
    W = code.weight_hh.detach().double()
    assert torch.allclose(W @ W.T, torch.eye(64, dtype=torch.float64), atol=1e-5)
    assert not torch.allclose(W, torch.eye(64, dtype=torch.float64), atol=1e-2)  # not the identity
    assert torch.equal(code.weight_ih, plain.weight_ih)  # the input map untouched


def test_rnn_input_and_bias_inits():
    torch.manual_seed(0)
    x = RNNCell(200, 1024, "modrelu", "glorot", input_init="xavier", bias_init="linear")
    assert x.weight_ih.std().item() == pytest.approx(math.sqrt(2 / (200 + 1024)), rel=0.02)
    assert x.bias_hh.abs().max().item() == 0.0
    assert 0.06 < x.bias_ih.abs().max().item() <= 1 / math.sqrt(200)
    k = RNNCell(200, 1024, "modrelu", "glorot", input_init="kaiming")
    assert k.weight_ih.std().item() == pytest.approx(math.sqrt(2 / 200), rel=0.02)
    d = RNNCell(200, 1024, "modrelu", "glorot")  # the default: torch's uniform, both biases
    assert d.weight_ih.abs().max().item() <= 1 / 32 and d.bias_hh.abs().max().item() > 0
    with pytest.raises(ValueError, match="input_init"):
        RNNCell(3, 4, input_init="glorot")
    with pytest.raises(ValueError, match="bias_init"):
        RNNCell(3, 4, bias_init="zero")
    with pytest.raises(ValueError, match="init must be one of"):
        RNNCell(3, 4, init="cayley")


def test_lstm_glorot_is_the_released_four_linear_maps():
    torch.manual_seed(0)
    c = LSTMCell(200, 475, init="glorot")
    std = math.sqrt(2 / (200 + 2 * 475))  # xavier_normal_ of nn.Linear(I + H, H)
    assert c.weight_ih.std().item() == pytest.approx(std, rel=0.02)
    assert c.weight_hh.std().item() == pytest.approx(std, rel=0.02)
    assert c.bias_hh.abs().max().item() == 0.0
    assert 0.03 < c.bias_ih.abs().max().item() <= 1 / math.sqrt(675)
    f = LSTMCell(10, 8, init="glorot", forget_bias=1.0)  # the forget bias is written after
    assert torch.all(f.bias_ih[8:16] == 1.0)
    with pytest.raises(ValueError, match="LSTM init"):
        LSTMCell(3, 4, init="orthogonal")


def test_exprnn_and_nnrnn_input_inits():
    torch.manual_seed(0)
    e = ExpRNNCell(1, 722, init="cayley", input_init="xavier")
    assert e.weight_ih.std().item() == pytest.approx(math.sqrt(2 / 723), rel=0.1)
    assert ExpRNNCell(1, 722, init="cayley").weight_ih.std().item() > 1.0  # Kaiming: sqrt(2)
    n = NNRNNCell(1, 512, input_init="linear")
    assert n.weight_ih.abs().max().item() <= 1.0 and n.weight_ih.abs().max().item() > 0.95  # U(-1, 1)
    with pytest.raises(ValueError, match="input_init"):
        ExpRNNCell(3, 4, input_init="linear")
    with pytest.raises(ValueError, match="input_init"):
        NNRNNCell(3, 4, input_init="uniform")


def test_embedding_and_readout_inits():
    torch.manual_seed(0)
    m = SequenceModel(
        "rnn", 0, 50, 64, num_tokens=50, embedding=200, embedding_init="uniform0.1", readout_init="uniform0.1"
    )
    assert m.encoder.weight.abs().max().item() <= 0.1 and m.encoder.weight.abs().max().item() > 0.09
    assert m.readout.weight.abs().max().item() <= 0.1 and m.readout.bias.abs().max().item() == 0.0
    d = SequenceModel("rnn", 0, 50, 64, num_tokens=50, embedding=200)
    assert d.encoder.weight.abs().max().item() > 1.0  # torch's N(0, 1)
    x = SequenceModel("rnn", 0, 9, 128, num_tokens=10, readout_init="xavier")
    assert x.readout.weight.std().item() == pytest.approx(math.sqrt(2 / (128 + 9)), rel=0.1)
    with pytest.raises(ValueError, match="readout_init"):
        SequenceModel("rnn", 0, 9, 8, num_tokens=10, readout_init="glorot")


def test_the_model_options_go_through_the_config_and_leave_earlier_keys_as_they_were():
    cfg = config.load("nnrnn/copy-rnn", ["model.readout_init=xavier"])
    task = TASKS["copy"](L=20)
    torch.manual_seed(0)
    m = build_model(cfg.model, task)
    assert m.readout.weight.std().item() == pytest.approx(math.sqrt(2 / (128 + 9)), rel=0.15)
    with pytest.raises(config.ConfigError, match="model.embedding_init"):
        config.load("nnrnn/copy-rnn", ["model.embedding_init=normal"])
    plain = config.load("nnrnn/copy-rnn").to_dict()
    old = json.loads(json.dumps(plain))
    del old["model"]["embedding_init"], old["model"]["readout_init"]
    assert rundir.config_key(plain) == rundir.config_key(old)
    assert rundir.config_key(cfg.to_dict()) != rundir.config_key(old)


def test_plateau_threshold_reaches_the_scheduler_and_leaves_earlier_keys():
    from rnnlab.train import _build_trainer

    task = TASKS["copy"](L=20)
    for value in (1e-4, 0.0):
        cfg = config.load("nnrnn/copy-rnn", ["train.schedule=plateau", f"train.plateau_threshold={value}"])
        tr = _build_trainer(cfg, task, torch.device("cpu"), False)
        assert tr.sched.threshold == value
    with pytest.raises(config.ConfigError, match="train.plateau_threshold"):
        config.load("nnrnn/copy-rnn", ["train.plateau_threshold=-1.0"])
    plain = config.load("nnrnn/copy-rnn", ["train.schedule=plateau"]).to_dict()
    old = json.loads(json.dumps(plain))
    del old["train"]["plateau_threshold"]
    assert rundir.config_key(plain) == rundir.config_key(old)
