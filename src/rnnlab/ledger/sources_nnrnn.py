"""Where every outcome setting of the nnRNN presets comes from (issue 57's audit): the paper
(Kerg, Goyette et al., NeurIPS 2019: its sections, Table 1 and the supplement's Tables 2, 3 and 5,
which give every model's hyperparameters), the authors' released code
(:data:`~rnnlab.ledger.published_nnrnn.NNRNN_CODE_REPO`: file and line) or ours, with the reason.

``NNRNN_SOURCES`` are rules as :data:`rnnlab.ledger.sources.SOURCES` reads them (preset patterns,
setting patterns, source; the first match decides): the code protocol's own differences first
(``NNRNN_CODE_DIFFS``), then the settings both protocols share, the paper presets' values
(``nnrnn/<name>``) and the code presets' (``nnrnn/code/<name>``). The README the repository ships
is cited where a paper preset follows it: its tables were written after the paper ("Changes from
paper"), so where they differ from the supplement the value is ours.
"""

from __future__ import annotations

from .published_nnrnn import NNRNN_CODE_DIFFS
from .rows import Source, code_source, ours_source, text_source

#: the audited presets: every paper preset of the nnRNN rows and the code protocol's
NNRNN_AUDITED = ["nnrnn/*"]


_text, _code, _ours = text_source, code_source, ours_source  # one home: rnnlab.ledger.rows


def _both(*stems: str) -> list[str]:
    """The paper presets ``nnrnn/<stem>`` and their code presets ``nnrnn/code/<stem>``."""
    return [f"nnrnn/{s}" for s in stems] + [f"nnrnn/code/{s}" for s in stems]


def _paper(*stems: str) -> list[str]:
    return [f"nnrnn/{s}" for s in stems]


_COPY, _MNIST, _PTB = _both("copy*"), _both("psmnist*"), _both("ptb-*")
_ALL = _COPY + _MNIST + _PTB
_NN = _both("copy", "psmnist", "ptb-bptt150", "ptb-bptt300", "ptb-bptt150-fixed-gamma")
_EXP = _both("*-exprnn", "*-exprnn-n1024")
_LSTM = _both("*-lstm", "*-lstm-n1024")
_RNN = _both("*-rnn")
_ORTH = _both("*-rnn-orth")
_EURNN = _paper("*-eurnn")
_NO_CODE = "the authors' EURNN runs used their TensorFlow tests, which the repository does not hold"
_SCRIPT_LOOP = "copytask.py:145-169; sMNIST.py:154-193; language_task.py:250-277"

#: the code protocol's key in NNRNN_CODE_DIFFS -> the outcome setting it changes
_OUTCOME_KEY = {"model.readout_init": "model.readout"}

NNRNN_SOURCES: list[tuple[list[str], list[str], Source]] = [
    # the rows an evaluation of a language model carries its state along (an outcome setting there)
    (
        _PTB,
        ["train.eval_batch_size"],
        _ours(
            "256 rows, rnnlab's default; the released code evaluates in 10 rows (language_task.py:175-178), "
            "which changes where the state restarts"
        ),
    ),
    # --- the code protocol's differences (the released code's file and line, or the supplement's table)
    *(
        ([f"nnrnn/code/{name}"], [_OUTCOME_KEY.get(key, key)], src)
        for name, diffs in NNRNN_CODE_DIFFS.items()
        for key, _v, src, _what in diffs
    ),
    # --- tasks
    (_COPY, ["task.name", "task.L"], _text("Sec. 5.1: the copy task at delay T = 200")),
    (_COPY, ["task.K", "task.alphabet"], _text("SM A.1: 10 symbols, each one of 8 values")),
    (
        _COPY,
        ["task.encoding"],
        _code("copytask.py:61-84", "10 symbols, T - 1 blanks, the cue, 10 blanks; targets T + 10 blanks, the symbols"),
    ),
    (
        _COPY,
        ["task.val_size", "task.test_size"],
        _ours("evaluation sets of ours: the script trains on fresh batches and reports the training loss"),
    ),
    (_MNIST, ["task.name"], _text("Sec. 5.1: permuted sequential MNIST")),
    (_MNIST, ["task.permute", "task.perm_seed"], _code("sMNIST.py:69-71 (RandomState(1234).permutation(784))")),
    (_MNIST, ["task.val_size"], _code("sMNIST.py:83-87 (10,000 of the 60,000 training images held out)")),
    (
        _paper("psmnist*"),
        ["task.split", "task.shuffle"],
        _ours("rnnlab's MNIST split (the last 10,000) and a fresh order each epoch; the script's: the code protocol"),
    ),
    (_PTB, ["task.name"], _text("Sec. 5.2: Penn Treebank characters")),
    (_PTB, ["task.bptt"], _text("Sec. 5.2 and Table 1: truncated BPTT over 150 and over 300 steps")),
    (
        _MNIST + _PTB,
        ["task.data_dir", "task.verify"],
        _ours("where the data files are read and whether their hashes are checked: the same data either way"),
    ),
    # --- the model's shape
    (_both("copy", "copy-exprnn", "copy-rnn", "copy-rnn-orth"), ["model.cell"], _text("Sec. 5.1, SM A.1 and Table 2")),
    (_both("copy", "copy-rnn", "copy-rnn-orth"), ["model.hidden_size"], _text("SM Table 2 (N = 128)")),
    (_both("copy-exprnn"), ["model.hidden_size"], _text("SM Table 2 (expRNN at 176: ~18.9K parameters, Fig. 4)")),
    (
        _paper("copy-lstm"),
        ["model.hidden_size"],
        _ours("62 units: ~18.9K parameters with rnnlab's LSTM (two biases); SM Table 2: 63, the code protocol"),
    ),
    (_both("copy-lstm"), ["model.cell"], _text("Sec. 5.1, SM A.1 and Table 2")),
    (_MNIST, ["model.cell"], _text("Sec. 5.1, SM A.2 and Table 3")),
    (
        _both("psmnist", "psmnist-rnn", "psmnist-rnn-orth"),
        ["model.hidden_size"],
        _text("Sec. 5.1 and SM Table 3 (N = 512)"),
    ),
    (_both("psmnist-exprnn", "psmnist-lstm"), ["model.hidden_size"], _text("SM Table 3 (~269K parameters, Fig. 4)")),
    (_PTB, ["model.cell"], _text("Table 1 and SM Table 5")),
    (
        _both("ptb-bptt150", "ptb-bptt300", "ptb-*-rnn", "ptb-*-rnn-orth", "ptb-*-n1024", "ptb-*-fixed-gamma"),
        ["model.hidden_size"],
        _text("Table 1 and SM Table 5 (N = 1024)"),
    ),
    (_both("ptb-*-exprnn"), ["model.hidden_size"], _text("SM Table 5 (expRNN at 1386: ~1.32M parameters, Table 1)")),
    (
        _paper("ptb-*-lstm"),
        ["model.hidden_size"],
        _ours("474 units: ~1.32M parameters with rnnlab's LSTM (two biases); SM Table 5: 475, the code protocol"),
    ),
    (
        _EURNN,
        ["model.hidden_size"],
        _ours(
            "2599 complex units (real width 5198) for Table 1's ~1.32M parameters; SM Table 5 lists EURNN at "
            f"1024 and 2048 units, a count we cannot map ({_NO_CODE})"
        ),
    ),
    (
        _COPY,
        ["model.embedding"],
        _code(
            "copytask.py:99-101, 223-224",
            "one-hot inputs (--onehot): Fig. 4's 18.9K parameters hold with 10 one-hot inputs, not with the "
            "default scalar input (17.8K for the nnRNN)",
        ),
    ),
    (_MNIST, ["model.embedding"], _code("sMNIST.py:113-117 (one pixel a step, input size 1)")),
    (_PTB, ["model.embedding"], _code("language_task.py:108-109 (emsize 200)")),
    (
        _ALL,
        ["model.num_layers", "model.dropout", "model.pool", "model.dense"],
        _code("copytask.py:103-111; sMNIST.py:105-110; language_task.py:59-101", "one cell and a linear readout"),
    ),
    # --- nnRNN's cell
    (
        _paper("copy"),
        ["model.cell_options.init"],
        _ours(
            "Cayley, the README's (README.md:204-211); SM Table 2: Henaff; the released cell ignores the flag "
            "(P0 = expm of an uninitialised log P, RNN_Cell.py:117-118, 157-174); V0 = Lambda0 under either"
        ),
    ),
    (
        _NN,
        ["model.cell_options.init"],
        _text(
            "SM Tables 3 and 5 (Cayley)",
            "the released cell ignores the flag: P0 = expm of an uninitialised log P, RNN_Cell.py:117-118, 157-174",
        ),
    ),
    (_both("copy"), ["model.cell_options.delta"], _text("SM Table 2 (delta 1e-4)")),
    (
        _paper("psmnist"),
        ["model.cell_options.delta", "optim.lr", "optim.group_lr.orthogonal"],
        _ours(
            "the README's (README.md:290-297: 2e-4, 2e-5, delta 0.1); SM Table 3: 1.5e-4, 1.5e-5, 0.15, the code protocol"
        ),
    ),
    (
        _both("ptb-bptt150", "ptb-bptt150-fixed-gamma"),
        ["model.cell_options.delta"],
        _text("SM Table 5 (delta 1 at length 150)"),
    ),
    (
        _paper("ptb-bptt300"),
        ["model.cell_options.delta", "optim.group_lr.orthogonal"],
        _ours(
            "length 150's delta 1 and orthogonal lr 8e-5; SM Table 5 at length 300: 1e-4 and 6e-5, the code protocol"
        ),
    ),
    (
        _paper("copy", "psmnist", "ptb-bptt150", "ptb-bptt300", "ptb-bptt150-fixed-gamma"),
        ["model.cell_options.t_mask"],
        _text(
            "Sec. 4: T strictly lower triangular outside the 2x2 blocks",
            "the released mask frees the in-block corner too: the code protocol",
        ),
    ),
    (
        _paper("copy", "psmnist", "ptb-bptt150", "ptb-bptt300", "ptb-bptt150-fixed-gamma"),
        ["model.cell_options.input_init"],
        _ours(
            "Glorot normal, the copy and MNIST scripts' --iinit default (copytask.py:47-49, sMNIST.py:48-50; the "
            "language script's: Kaiming, language_task.py:131-133); the released cell applies neither: the code protocol"
        ),
    ),
    (
        _NN,
        ["model.cell_options.theta_init"],
        _code("RNN_Cell.py:132-135", "theta ~ U(0, 2 x 3.14): phases uniform on the circle"),
    ),
    (
        _NN + _EXP,
        ["model.cell_options.K", "model.cell_options.M"],
        _code("RNN_Cell.py:176-186; expRNN/exprnn.py:78-99", "the exact exponential, no dynamic trivialization"),
    ),
    (_paper("ptb-bptt150-fixed-gamma"), ["model.cell_options.fixed_gamma"], _text("SM F: every gamma held at 1")),
    (_NN, ["model.cell_options.fixed_gamma"], _code("RNN_Cell.py:138-141", "gamma trained from 1")),
    (_NN, ["model.init"], _code("RNN_Cell.py:124-141; expRNN/exprnn.py:16-17", "gamma 1, T 0, modReLU bias U(+-0.01)")),
    # --- expRNN
    (_both("copy-exprnn"), ["model.cell_options.init"], _text("SM Table 2 (Henaff)")),
    (
        _both("psmnist-exprnn", "ptb-*-exprnn", "ptb-*-exprnn-n1024"),
        ["model.cell_options.init"],
        _text("SM Tables 3 and 5 (Cayley)"),
    ),
    (
        _paper("copy-exprnn", "psmnist-exprnn"),
        ["model.cell_options.input_init"],
        _ours(
            "Kaiming normal, expRNN's own code; the nnRNN scripts' --iinit default is Glorot normal: the code protocol"
        ),
    ),
    (_EXP, ["model.cell_options.input_init"], _code("language_task.py:131-133; utils.py:134-135 (Kaiming normal)")),
    (_EXP, ["model.init"], _code("expRNN/exprnn.py:16-17, 69-76", "modReLU bias U(+-0.01), no input bias")),
    # --- RNN and RNN-orth
    (_RNN + _ORTH, ["model.cell_options.nonlinearity"], _text("SM A.1: every non-gated model uses modReLU")),
    (_RNN, ["model.cell_options.init"], _text("SM Tables 2, 3, 5 (Glorot Normal)")),
    (
        _paper("copy-rnn-orth", "psmnist-rnn-orth", "ptb-bptt150-rnn-orth"),
        ["model.cell_options.init"],
        _text(
            "SM Tables 2, 3, 5 (Random orth)",
            "the released cell starts from expm of the skew part of nn.Linear's init whatever the flag: the code protocol",
        ),
    ),
    (
        _paper("ptb-bptt300-rnn-orth"),
        ["model.cell_options.init"],
        _ours(
            "random orthogonal as at length 150; SM Table 5 at length 300: Cayley; the released cell ignores the flag: the code protocol"
        ),
    ),
    (
        _paper("*-rnn", "*-rnn-orth"),
        ["model.cell_options.input_init", "model.cell_options.bias_init"],
        _ours(
            "torch's uniform input map and its two biases; the scripts: Glorot/Kaiming normal and one input bias, the code protocol"
        ),
    ),
    (_RNN + _ORTH, ["model.init"], _code("expRNN/exprnn.py:16-17", "modReLU bias U(+-0.01)")),
    # --- LSTM
    (
        _paper("*-lstm", "*-lstm-n1024"),
        ["model.cell_options.init"],
        _ours(
            "torch's uniform init; SM Tables 2, 3, 5 and the released LSTM (LSTM.py:9-19): Glorot normal, the code protocol"
        ),
    ),
    (
        _LSTM,
        ["model.cell_options.forget_bias", "model.cell_options.forget_bias_hh"],
        _code("LSTM.py:9-12", "no forget-gate bias: nn.Linear's"),
    ),
    (_LSTM, ["model.init"], _code("LSTM.py:9-19")),
    # --- EURNN (no released code)
    (
        _EURNN,
        ["optim.clip", "optim.eps", "optim.momentum", "optim.weight_decay"],
        _ours(f"no clipping and torch's RMSprop defaults, as the other PTB models; {_NO_CODE}"),
    ),
    (_EURNN, ["model.cell_options.*", "model.init"], _ours(f"the paper states the budget only; {_NO_CODE}")),
    # --- readout and embedding
    (
        _paper("copy*"),
        ["model.readout"],
        _ours("torch's nn.Linear init; the copy script's Glorot normal: the code protocol"),
    ),
    (
        _both("copy-rnn", "copy-rnn-orth", "copy-lstm", "copy", "copy-exprnn"),
        ["model.readout"],
        _code("copytask.py:107-111"),
    ),
    (_MNIST, ["model.readout"], _code("sMNIST.py:110 (nn.Linear)")),
    (
        _paper("ptb-*"),
        ["model.readout", "model.embedding_init"],
        _ours("torch's init; the language script's U(-0.1, 0.1) (bias 0): the code protocol"),
    ),
    # --- optimizer
    (_ALL, ["optim.name"], _text("SM A.4: RMSprop for every model")),
    (_ALL, ["optim.eps", "optim.momentum"], _code("utils.py:166-179", "torch's RMSprop defaults")),
    (_ALL, ["optim.weight_decay"], _code("utils.py:139-164", "only T decays (group_weight_decay.nonnormal)")),
    (_NN, ["optim.group_weight_decay.nonnormal"], _text("SM Tables 2, 3, 5 (T decay)")),
    (
        _ALL,
        ["optim.clip"],
        _code(_SCRIPT_LOOP, "no clipping (the README's later PTB runs add it)"),
    ),
    (
        _paper("psmnist-exprnn"),
        ["optim.lr"],
        _ours("5e-5, the README's one rate for n = 722 (README.md:280-287); SM Table 3: 5e-4, the code protocol"),
    ),
    (
        _paper("ptb-*-exprnn", "ptb-*-exprnn-n1024"),
        ["optim.lr", "optim.group_lr.orthogonal"],
        _ours(
            "1e-3 for both groups, the later README's rate for n = 1024 (README.md:382-389, 462-469; for n = 1386 it gives 8e-3 / 8e-4 at length 150, 1e-3 at 300, README.md:393-400, 473-480); SM Table 5: 5e-3 and 1e-4, the code protocol"
        ),
    ),
    (
        _paper("ptb-bptt150-lstm"),
        ["optim.alpha"],
        _ours("alpha 0.9, as every PTB model; SM Table 5: 0.99 for the 475-unit LSTM at length 150, the code protocol"),
    ),
    (
        _paper("ptb-bptt300-lstm", "ptb-*-lstm-n1024"),
        ["optim.lr"],
        _ours("1e-3, our choice; SM Table 5: 3e-3 (475 units, length 300), 8e-3 (1024 units): the code protocol"),
    ),
    (_EURNN, ["optim.lr", "optim.alpha"], _text("SM Table 5 (EURNN: 1e-3, alpha 0.9)")),
    (_ALL, ["optim.lr", "optim.alpha", "optim.group_lr.orthogonal"], _text("SM Tables 2, 3, 5 (each model's row)")),
    # --- training
    (_COPY, ["train.steps"], _code("copytask.py:210 (1500 updates)")),
    (_COPY, ["train.batch_size"], _text("SM A.1: mini-batches of 10")),
    (_MNIST, ["train.steps"], _code("sMNIST.py:29 (100 epochs of 500 batches)")),
    (_MNIST, ["train.batch_size"], _text("SM A.2: mini-batches of 100")),
    (_MNIST, ["train.eval_every"], _code("sMNIST.py:195 (validation once an epoch)")),
    (_PTB, ["train.batch_size"], _text("SM A.3: mini-batches of 128")),
    (
        _paper("ptb-*"),
        ["train.steps", "train.eval_every"],
        _ours(
            "~100 epochs (26,100 / 13,000 steps of 262 / 131 an epoch), validation every 500; SM A.3 and the script: 100 epochs, validation once an epoch, the code protocol"
        ),
    ),
    (
        _COPY,
        ["train.eval_every"],
        _ours(
            "evaluation of ours on held-out sequences: the script reports the training loss only (copytask.py:165-173)"
        ),
    ),
    (_COPY + _MNIST, ["train.schedule"], _code(_SCRIPT_LOOP, "constant rates: no scheduler")),
    (
        _paper("ptb-*"),
        ["train.schedule"],
        _ours(
            "constant rates; the language script halves both after every epoch without validation improvement: the code protocol"
        ),
    ),
    (
        _PTB,
        ["train.plateau_factor", "train.plateau_patience"],
        _code("language_task.py:301-303, 336-345", "halve after one epoch without improvement"),
    ),
    (
        _MNIST + _PTB,
        ["train.select_metric"],
        _code(
            "sMNIST.py:198-206, 242-244; language_task.py:337-340, 362-367",
            "test on the best validation checkpoint (SM A.3)",
        ),
    ),
    (
        _COPY,
        ["train.select_metric"],
        _ours("the script keeps the last weights and reports the training loss; ours selects on val/loss"),
    ),
    (
        _ALL,
        ["train.target_metric", "train.target_value", "train.target_patience"],
        _code(_SCRIPT_LOOP, "no early stop: every step is run"),
    ),
    (_ALL, ["train.epoch_steps"], _ours("not set: no nnRNN claim counts epochs")),
]
