"""Where every outcome setting of the coRNN and LEM presets comes from (issue 57's audit):
the authors' released psMNIST scripts (:data:`~rnnlab.ledger.published_others.CORNN_CODE_REPO`,
:data:`~rnnlab.ledger.published_others.LEM_CODE_REPO`: file and line), whose defaults are the
settings of the published runs (the repositories' READMEs and run logs give the papers' numbers),
or ours with the reason. The papers' text is not in the set rnnlab holds, so no setting here is
sourced to it.

``RULES`` has the form of :data:`rnnlab.ledger.sources.SOURCES`: the code protocol's own
differences first (``OSCILLATOR_CODE_DIFFS``), then the rules the paper and code presets share.
"""

from __future__ import annotations

from .published_others import OSCILLATOR_CODE_DIFFS
from .rows import Source


def _code(where: str, why: str = "") -> Source:
    return Source("code", where, why)


def _ours(why: str) -> Source:
    return Source("ours", "", why)


CORNN, LEM = ["cornn/psmnist", "cornn/code/psmnist"], ["lem/psmnist", "lem/code/psmnist"]
#: the audited presets (paper and code protocol)
AUDITED = ["cornn/*", "lem/*"]
_C, _L = "psMNIST/psMNIST_task.py", "src/psMNIST/psMNIST_task.py"
#: the code protocol's key -> the outcome setting it changes
_OUTCOME_KEY = {"model.readout_init": "model.readout"}

RULES: list[tuple[list[str], list[str], Source]] = [
    # --- the code protocol's differences (file and line each)
    *(
        ([p.replace("/", "/code/", 1)], [_OUTCOME_KEY.get(key, key)], src)
        for p, diffs in OSCILLATOR_CODE_DIFFS.items()
        for key, _v, src, _what in diffs
    ),
    # --- the task
    (CORNN, ["task.name", "task.permute"], _code(f"{_C}:34, 65-67", "one pixel a step in a fixed random order")),
    (LEM, ["task.name", "task.permute"], _code(f"{_L}:44, 74-76", "one pixel a step in a fixed random order")),
    (
        CORNN + LEM,
        ["task.perm_seed"],
        _ours(
            "the asRNN/expRNN order; the scripts draw torch.randperm(784) after their seed, which no rnnlab "
            "setting reproduces (a gap listed on the page)"
        ),
    ),
    (
        ["cornn/psmnist", "lem/psmnist"],
        ["task.val_size"],
        _ours("rnnlab's 5,000; the scripts hold out 3,000 (utils.py:15): the code protocol"),
    ),
    (
        CORNN + LEM,
        ["task.split"],
        _ours("the last images of the training file; the scripts' random_split draw (utils.py:15) is a gap"),
    ),
    (CORNN, ["task.shuffle"], _code("psMNIST/utils.py:18-20", "a fresh order each epoch")),
    (LEM, ["task.shuffle"], _code("src/psMNIST/utils.py:18-20", "a fresh order each epoch")),
    (
        CORNN + LEM,
        ["task.data_dir", "task.verify"],
        _ours("where the data files are read and whether their hashes are checked: the same data either way"),
    ),
    # --- the model
    (CORNN, ["model.cell"], _code("psMNIST/network.py:5-18", "the coRNN cell")),
    (CORNN, ["model.hidden_size"], _code(f"{_C}:11-12 (n_hid 256)")),
    (CORNN, ["model.cell_options.dt"], _code(f"{_C}:19-20 (0.076)")),
    (CORNN, ["model.cell_options.gamma"], _code(f"{_C}:21-22 (0.4)")),
    (CORNN, ["model.cell_options.epsilon"], _code(f"{_C}:23-24 (8.0)")),
    (
        CORNN,
        ["model.init"],
        _code("psMNIST/network.py:11, 29-30", "one nn.Linear over [x; z; y] (U(+-1/sqrt(1 + 2H))), zero states"),
    ),
    (CORNN, ["model.readout"], _code("psMNIST/network.py:25 (nn.Linear)")),
    (LEM, ["model.cell"], _code("src/psMNIST/network.py:5-33", "the LEM cell")),
    (LEM, ["model.hidden_size"], _code(f"{_L}:12-13 (nhid 128)")),
    (LEM, ["model.cell_options.dt"], _code(f"{_L}:22-23 (0.31)")),
    (
        LEM,
        ["model.init"],
        _code("src/psMNIST/network.py:11-19, 50-51", "every cell parameter U(+-1/sqrt(H)), zero states"),
    ),
    (
        ["lem/psmnist"],
        ["model.readout"],
        _ours("torch's nn.Linear init; the script's Kaiming-normal classifier weight: the code protocol"),
    ),
    (
        CORNN,
        ["model.num_layers", "model.embedding", "model.dropout", "model.pool", "model.dense"],
        _code("psMNIST/network.py:20-36", "one cell and a linear readout"),
    ),
    (
        LEM,
        ["model.num_layers", "model.embedding", "model.dropout", "model.pool", "model.dense"],
        _code("src/psMNIST/network.py:35-55", "one cell and a linear readout"),
    ),
    # --- the optimizer
    (CORNN, ["optim.name", "optim.beta1", "optim.beta2", "optim.eps"], _code(f"{_C}:40", "Adam, torch's defaults")),
    (LEM, ["optim.name", "optim.beta1", "optim.beta2", "optim.eps"], _code(f"{_L}:52", "Adam, torch's defaults")),
    (CORNN, ["optim.lr"], _code(f"{_C}:17-18 (0.0054)")),
    (LEM, ["optim.lr"], _code(f"{_L}:20-21 (0.0073)")),
    (CORNN, ["optim.weight_decay"], _code(f"{_C}:40 (none)")),
    (LEM, ["optim.weight_decay"], _code(f"{_L}:52 (none)")),
    (CORNN, ["optim.clip"], _code(f"{_C}:69-73", "no clipping")),
    (LEM, ["optim.clip"], _code(f"{_L}:24-25, 82", "the gradient norm clipped at 1.1")),
    # --- the budget, evaluation and selection
    (CORNN, ["train.batch_size"], _code(f"{_C}:15-16 (120)")),
    (LEM, ["train.batch_size"], _code(f"{_L}:18-19 (128)")),
    (
        ["cornn/psmnist", "lem/psmnist"],
        ["train.steps", "train.eval_every"],
        _ours(
            "120 epochs, validation once an epoch, of rnnlab's 55,000 training images; the scripts' 57,000: "
            "the code protocol"
        ),
    ),
    (
        ["cornn/psmnist", "lem/psmnist"],
        ["train.schedule"],
        _ours(
            "a constant rate; the scripts divide it by 10 after epoch 100: the code protocol (their run logs, "
            "psMNIST/result/psMNIST_log.txt and src/psMNIST/result/psMNIST_log.txt: the best validation accuracy "
            "95.83% (coRNN) and 95.8% (LEM) over "
            "epochs 1-100, 96.93% and 96.77% after the drop)"
        ),
    ),
    (
        CORNN,
        ["train.select_metric"],
        _code(f"{_C}:75-79", "the test accuracy of the epoch of the best validation accuracy"),
    ),
    (
        LEM,
        ["train.select_metric"],
        _code(f"{_L}:85-89", "the test accuracy of the epoch of the best validation accuracy"),
    ),
    (
        CORNN,
        ["train.target_metric", "train.target_value", "train.target_patience"],
        _code(f"{_C}:62-91", "no early stop: every epoch is run"),
    ),
    (
        LEM,
        ["train.target_metric", "train.target_value", "train.target_patience"],
        _code(f"{_L}:70-99", "no early stop: every epoch is run"),
    ),
    (CORNN + LEM, ["train.epoch_steps"], _ours("not set: no coRNN or LEM claim counts epochs")),
]
