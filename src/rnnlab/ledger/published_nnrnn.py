"""The nnRNN paper's code protocol: where the authors' released scripts, run with the settings of
the paper's supplement (its Tables 2, 3 and 5 give every model's hyperparameters), differ from the
paper presets (``configs/nnrnn/*.toml``).

The released repository (:data:`NNRNN_CODE_REPO`) ships the supplement as a PDF and the scripts
``copytask.py``, ``sMNIST.py`` and ``language_task.py`` with their model code (``RNN_Cell.py``,
``LSTM.py``, ``expRNN/``, ``utils.py``). It holds no EURNN (the README points to the authors'
TensorFlow tests) and no fixed-gamma runs (SM F), so those presets have no code protocol.
"""

from __future__ import annotations

from .rows import PROTOCOLS, Source

#: The authors' released repository, at the commit every ``code`` source below names.
NNRNN_CODE_REPO = "nnRNN/nnRNN_release at 294d4ff"
#: the supplement as the repository ships it ("SUPPL_nnRNN_NeurIPS_2019 .pdf")
SUPPLEMENT = "the supplement (SUPPL_nnRNN_NeurIPS_2019 .pdf)"


def _code(where: str) -> Source:
    return Source("code", where)


def _suppl(table: str) -> Source:
    return Source("text", f"supplement {table}")


# --- the differences, each once ------------------------------------------------------------
_T_MASK = (
    "model.cell_options.t_mask",
    "reference",
    _code("RNN_Cell.py:124-127, 202"),
    "T free on the whole strict triangle (mask triu(1) in the code's row form), the corner inside each 2x2 "
    "block included (the paper's Schur form leaves it to the rotation block)",
)
_NN_INPUT = (
    "model.cell_options.input_init",
    "linear",
    _code("RNN_Cell.py:110-112, 157-164"),
    "U keeps torch's nn.Linear init U(+-1/sqrt(I)): the cell's reset_parameters never applies the "
    "input initialiser the script passes (ours: Glorot normal)",
)
_COPY_READOUT = (
    "model.readout_init",
    "xavier",
    _code("copytask.py:107-111"),
    "a Glorot-normal readout weight (ours: torch's nn.Linear init)",
)
_EXP_XAVIER = {
    "copy": (
        "model.cell_options.input_init",
        "xavier",
        _code("copytask.py:47-49; utils.py:61-64, 132-133; expRNN/exprnn.py:76"),
        "a Glorot-normal input map, the script's --iinit default (ours: Kaiming normal, expRNN's own code)",
    ),
    "psmnist": (
        "model.cell_options.input_init",
        "xavier",
        _code("sMNIST.py:48-50; utils.py:61-64, 132-133; expRNN/exprnn.py:76"),
        "a Glorot-normal input map, the script's --iinit default (ours: Kaiming normal, expRNN's own code)",
    ),
}
_RNN_INPUT = {
    "copy": (
        "model.cell_options.input_init",
        "xavier",
        _code("copytask.py:47-49; RNN_Cell.py:48-49, 58"),
        "a Glorot-normal input map, the script's --iinit default (ours: torch's uniform)",
    ),
    "psmnist": (
        "model.cell_options.input_init",
        "xavier",
        _code("sMNIST.py:48-50; RNN_Cell.py:48-49, 58"),
        "a Glorot-normal input map, the script's --iinit default (ours: torch's uniform)",
    ),
    "ptb": (
        "model.cell_options.input_init",
        "kaiming",
        _code("language_task.py:131-133; RNN_Cell.py:48-49, 58; utils.py:134-135"),
        "a Kaiming-normal input map, the language script's --iinit default (ours: torch's uniform)",
    ),
}
_RNN_BIAS = (
    "model.cell_options.bias_init",
    "linear",
    _code("RNN_Cell.py:48, 51; utils.py:49-54"),
    "one input bias U(+-1/sqrt(I)) and no hidden bias (ours: both, U(+-1/sqrt(H)))",
)
_RNN_ORTH = (
    "model.cell_options.init",
    "expm_skew",
    _code("RNN_Cell.py:51, 57-63, 68-76"),
    "W_hh = expm of the skew part of nn.Linear's init, near the identity: _B ignores the orthogonal "
    "matrix the init flag gives it (ours: a Haar-random orthogonal matrix)",
)
_LSTM = (
    "model.cell_options.init",
    "glorot",
    _code("LSTM.py:9-19"),
    "four nn.Linear(I + H, H) with Glorot-normal weights, one bias each (ours: torch's uniform init); the "
    "supplement's tables say Glorot Normal too",
)
_SPLIT = (
    "task.split",
    "nnrnn",
    _code("sMNIST.py:69-71, 83-87"),
    "validation: 10,000 training images drawn by RandomState(1234) after the pixel order (ours: the last 10,000)",
)
_NO_SHUFFLE = (
    "task.shuffle",
    False,
    _code("sMNIST.py:92-95"),
    "every epoch in the same order, DataLoader(shuffle=False) (ours: reshuffled each epoch)",
)
_PTB_COMMON = [
    (
        "model.embedding_init",
        "uniform0.1",
        _code("language_task.py:64, 85-87"),
        "embedding U(-0.1, 0.1) (ours: torch's N(0, 1))",
    ),
    (
        "model.readout_init",
        "uniform0.1",
        _code("language_task.py:66, 85-89"),
        "readout weight U(-0.1, 0.1), bias 0 (ours: torch's nn.Linear init)",
    ),
    (
        "train.schedule",
        "plateau",
        _code("language_task.py:301-303, 336-345"),
        "both rates halved after every epoch whose validation loss is not the best so far (ours: constant)",
    ),
    (
        "train.plateau_threshold",
        0.0,
        _code("language_task.py:337"),
        "any decrease of the validation loss counts as an improvement",
    ),
]
#: PTB: 100 epochs of 262 (bptt 150) or 131 (bptt 300) batches of 128 (5,017,482 training
#: characters in 128 rows of 39,199), validation once an epoch
_PTB_BUDGET = {150: (26200, 262), 300: (13100, 131)}


def _ptb_budget(bptt: int) -> list:
    steps, epoch = _PTB_BUDGET[bptt]
    return [
        (
            "train.steps",
            steps,
            _code("language_task.py:112, 120, 250"),
            f"100 epochs of {epoch} batches of 128 (SM A.3: 100 epochs, batch 128; ours: {steps - 100} steps)",
        ),
        (
            "train.eval_every",
            epoch,
            _code("language_task.py:321-325"),
            "validation once an epoch (ours: every 500 steps)",
        ),
    ]


#: paper preset (under configs/nnrnn/) -> [(dotted key, the released value, source, what)]
NNRNN_CODE_DIFFS: dict[str, list[tuple[str, object, Source, str]]] = {
    # --- copy (T = 200): copytask.py, supplement Table 2
    "copy": [_T_MASK, _NN_INPUT, _COPY_READOUT],
    "copy-exprnn": [_EXP_XAVIER["copy"], _COPY_READOUT],
    "copy-lstm": [
        ("model.hidden_size", 63, _suppl("Table 2"), "63 units (ours: 62, 18.9K parameters with torch's two biases)"),
        _LSTM,
        _COPY_READOUT,
    ],
    "copy-rnn-orth": [_RNN_ORTH, _RNN_INPUT["copy"], _RNN_BIAS, _COPY_READOUT],
    "copy-rnn": [_RNN_INPUT["copy"], _RNN_BIAS, _COPY_READOUT],
    # --- psMNIST: sMNIST.py, supplement Table 3
    "psmnist": [
        ("optim.lr", 1.5e-4, _suppl("Table 3"), "lr 1.5e-4 (ours: the README's 2e-4, README.md:290-297)"),
        ("optim.group_lr.orthogonal", 1.5e-5, _suppl("Table 3"), "orthogonal lr 1.5e-5 (ours: the README's 2e-5)"),
        ("model.cell_options.delta", 0.15, _suppl("Table 3"), "delta 0.15 (ours: the README's 0.1)"),
        _T_MASK,
        _NN_INPUT,
        _SPLIT,
        _NO_SHUFFLE,
    ],
    "psmnist-exprnn": [
        (
            "optim.lr",
            5e-4,
            _suppl("Table 3"),
            "lr 5e-4 (ours: 5e-5, the README's row for n=722 gives one rate only, README.md:280-287)",
        ),
        _EXP_XAVIER["psmnist"],
        _SPLIT,
        _NO_SHUFFLE,
    ],
    "psmnist-lstm": [_LSTM, _SPLIT, _NO_SHUFFLE],
    "psmnist-rnn-orth": [_RNN_ORTH, _RNN_INPUT["psmnist"], _RNN_BIAS, _SPLIT, _NO_SHUFFLE],
    "psmnist-rnn": [_RNN_INPUT["psmnist"], _RNN_BIAS, _SPLIT, _NO_SHUFFLE],
}
for _T in (150, 300):
    _p = f"ptb-bptt{_T}"
    _common = [*_PTB_COMMON, *_ptb_budget(_T)]
    NNRNN_CODE_DIFFS[_p] = [_T_MASK, _NN_INPUT, *_common]
    if _T == 300:
        NNRNN_CODE_DIFFS[_p][:0] = [
            ("optim.group_lr.orthogonal", 6e-5, _suppl("Table 5"), "orthogonal lr 6e-5 at length 300 (ours: 8e-5)"),
            ("model.cell_options.delta", 1e-4, _suppl("Table 5"), "delta 1e-4 at length 300 (ours: 1)"),
        ]
    for _n in ("", "-n1024"):
        NNRNN_CODE_DIFFS[f"{_p}-exprnn{_n}"] = [
            ("optim.lr", 5e-3, _suppl("Table 5"), "lr 5e-3 (ours: 1e-3, the later README's rate for n = 1024)"),
            ("optim.group_lr.orthogonal", 1e-4, _suppl("Table 5"), "orthogonal lr 1e-4 (ours: 1e-3)"),
            *_common,
        ]
    _lstm_rate = {150: (1e-3, 0.99), 300: (3e-3, 0.9)}[_T]
    NNRNN_CODE_DIFFS[f"{_p}-lstm"] = [
        ("model.hidden_size", 475, _suppl("Table 5"), "475 units (ours: 474)"),
        *(
            [("optim.lr", _lstm_rate[0], _suppl("Table 5"), f"lr {_lstm_rate[0]:g} (ours: 1e-3)")]
            if _lstm_rate[0] != 1e-3
            else []
        ),
        *(
            [("optim.alpha", _lstm_rate[1], _suppl("Table 5"), f"RMSprop alpha {_lstm_rate[1]} (ours: 0.9)")]
            if _lstm_rate[1] != 0.9
            else []
        ),
        _LSTM,
        *_common,
    ]
    if _T == 150:
        NNRNN_CODE_DIFFS[f"{_p}-lstm-n1024"] = [
            ("optim.lr", 8e-3, _suppl("Table 5"), "lr 8e-3 (ours: 1e-3)"),
            _LSTM,
            *_common,
        ]
    NNRNN_CODE_DIFFS[f"{_p}-rnn-orth"] = [_RNN_ORTH, _RNN_INPUT["ptb"], _RNN_BIAS, *_common]
    NNRNN_CODE_DIFFS[f"{_p}-rnn"] = [_RNN_INPUT["ptb"], _RNN_BIAS, *_common]

for _stem, _diffs in NNRNN_CODE_DIFFS.items():
    PROTOCOLS[f"nnrnn/code/{_stem}"] = (
        f"nnrnn/{_stem}",
        "code",
        "; ".join(f"{_what} ({_src.where})" for _k, _v, _src, _what in _diffs),
    )
