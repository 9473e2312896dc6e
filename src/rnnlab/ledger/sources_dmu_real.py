"""Where every outcome setting of the DMU paper's real-data presets comes from: NatLang (PTB
words, ``dmu/natlang-N<N>-<dmu|dmuc|rhn>``) and PolyMusic (Nottingham,
``dmu/polymusic-N<N>-...``), at the paper protocol and at the code protocol
(``dmu/code/<experiment>-N<N>-<dmu|rhn>``: the released scripts ``experiments_repro/nat_lang.sh``
and ``poly_music.sh`` as they run, :data:`rnnlab.ledger.published_dmu.DMU_REAL_CODE_DIFFS`).

``RULES`` has the form of :data:`rnnlab.ledger.sources.SOURCES` (which takes them in, before
the synthetic tasks' rules): the code protocol's own differences first, then the rules both
protocols share.
"""

from __future__ import annotations

from .published_dmu import DMU_REAL_CODE_DIFFS
from .rows import Source, code_source, ours_source, text_source

_text, _code, _ours = text_source, code_source, ours_source  # one home: rnnlab.ledger.rows


NATLANG = ["dmu/natlang-*", "dmu/code/natlang-*"]
POLYMUSIC = ["dmu/polymusic-*", "dmu/code/polymusic-*"]
#: the paper presets (the audited patterns; the code presets are audited with them)
PRESETS = ["dmu/natlang-*", "dmu/polymusic-*"]
ALL = NATLANG + POLYMUSIC
_DMU = [f"{p}-dmu{c}" for p in ALL for c in ("", "c")]
#: the released DMU layer's activation and init: the same source wherever a DMU preset runs it
DMU_ACTIVATION = _code(
    "deep_memory_update/layers/dmu.py:133-137", "tanh of hhat; the hidden layers: leaky ReLU, dmu.py:62"
)
DMU_INIT = _code("deep_memory_update/layers/dmu.py:28-33, 87-104", "Xavier uniform, zero biases (Sec. III-B: Xavier)")
_SCRIPTS = "experiments_repro/nat_lang.sh:13-19 and poly_music.sh:13-19 run the same"
_DMUC = (
    "Sec. IV-H: DMU-C's one rate for all modules was found by a grid search the text does not give, and no "
    "released script runs DMU-C; Table XI's DMU rate and weight decay for every module are ours"
)

RULES: list[tuple[list[str], list[str], Source]] = [
    # --- the code protocol's differences (file and line each)
    *(
        ([f"dmu/code/{exp}-N{n}-{m}"], [key], src)
        for (exp, n, m), diffs in DMU_REAL_CODE_DIFFS.items()
        for key, _v, src, _what in diffs
    ),
    # --- the task
    (
        NATLANG,
        ["task.name"],
        _text(
            "Sec. IV-E: the Penn Treebank corpus, words (App. B-I)",
            "guild.yml:95-104: Mikolov's three files, the sha256 of rnnlab's; <eos> at each line's end as "
            "torchnlp's reader (data/penn_treebank.py:31)",
        ),
    ),
    (
        NATLANG,
        ["task.bptt"],
        _text("App. B-I: 'Sequences include 100 words'", "deep_memory_update/data/penn_treebank.py:58-64 the same"),
    ),
    (
        POLYMUSIC,
        ["task.name", "task.dataset"],
        _text(
            "Sec. IV-D: the Nottingham music dataset (App. B-H)",
            "guild.yml:75-77: data/polyphonic-music/Nottingham.mat, the file rnnlab verifies (sha256 d154f7ca)",
        ),
    ),
    (
        ["dmu/polymusic-*"],
        ["task.predict_first"],
        _ours(
            "rnnlab's default: the first frame predicted from a zero input; App. B-H's 'output at time t is "
            "equal to input at time t+1' reads either way (the released code: not predicted, the code protocol)"
        ),
    ),
    (
        POLYMUSIC,
        ["task.max_train_len"],
        _code("deep_memory_update/data/polyphonic_music.py:70-79", "whole pieces, padded (data/utils.py:31-49)"),
    ),
    (ALL, ["task.data_dir", "task.verify"], _ours("where the data files are and whether their hashes are checked")),
    # --- the model
    (
        ALL,
        ["model.cell", "model.hidden_size", "model.cell_options.layers", "model.cell_options.depth"],
        _text("Table IX", _SCRIPTS),
    ),
    (
        ALL,
        ["model.num_layers"],
        _code("experiments_repro/nat_lang.sh:13-19", "one recurrent block (one recurrent-cells list)"),
    ),
    (NATLANG, ["model.embedding"], _text("App. B-I: input word embedding of 64", "guild.yml:86 the same")),
    (
        NATLANG,
        ["model.embedding_init"],
        _code("deep_memory_update/models/base_model.py:210-216", "nn.Embedding's default N(0, 1), as rnnlab's"),
    ),
    (POLYMUSIC, ["model.embedding"], _code("deep_memory_update/models/base_model.py:283-288 (none)")),
    (
        ALL,
        ["model.dropout", "model.pool"],
        _code("deep_memory_update/models/base_model.py:184-260", "no dropout, no pooling"),
    ),
    (NATLANG, ["model.dense"], _text("App. B-I: a 100-neurons dense layer before the softmax", "guild.yml:91-93")),
    (
        ["dmu/natlang-*"],
        ["model.dense_activation"],
        _ours("the text names no activation: linear (the released code: ReLU, the code protocol)"),
    ),
    (
        POLYMUSIC,
        ["model.dense", "model.dense_activation"],
        _text("App. B-H: a recurrent block and a layer with the sigmoid activation"),
    ),
    (
        NATLANG,
        ["model.readout"],
        _code(
            "deep_memory_update/models/base_model.py:235-238 (nn.Linear)",
            "softmax cross-entropy, models/utils.py:84-90",
        ),
    ),
    (
        POLYMUSIC,
        ["model.readout"],
        _code("deep_memory_update/models/base_model.py:235-238 (nn.Linear)", "sigmoid, models/utils.py:51-62"),
    ),
    (
        ["dmu/natlang-*-dmu", "dmu/natlang-*-dmuc", "dmu/polymusic-*-dmu", "dmu/polymusic-*-dmuc"],
        ["model.cell_options.z_bias"],
        _ours(
            "rnnlab's DMU default 3, which Sec. III-B gives for the synthetic tasks only ('Additionally, in "
            "synthetic tasks, we use the positive bias with a value of 3'); the released scripts: 0, the code protocol"
        ),
    ),
    (
        _DMU,
        ["model.cell_options.activation"],
        DMU_ACTIVATION,
    ),
    (
        _DMU,
        ["model.init"],
        DMU_INIT,
    ),
    (
        ["dmu/natlang-*-rhn", "dmu/polymusic-*-rhn"],
        ["model.cell_options.transform_bias", "model.cell_options.init", "model.init"],
        _ours("the text gives no RHN init: Zilly et al.'s carry bias -2 (the released code: nn.Linear's)"),
    ),
    (
        ["dmu/code/natlang-*-rhn", "dmu/code/polymusic-*-rhn"],
        ["model.cell_options.transform_bias", "model.init"],
        _code("deep_memory_update/layers/rhn.py:12-15, 27-28", "unused under init='linear'"),
    ),
    # --- the optimizer
    (
        ALL,
        ["optim.name", "optim.beta1", "optim.beta2", "optim.eps"],
        _text(
            "App. B-B: 'We use ADAM optimizer'", "torch's defaults: models/dmu_model.py:52-54, base_model.py:107-110"
        ),
    ),
    (
        ["dmu/natlang-*-dmuc", "dmu/polymusic-*-dmuc"],
        ["optim.group_lr.memory", "optim.group_weight_decay.memory", "optim.lr", "optim.weight_decay"],
        _ours(_DMUC),
    ),
    (
        ALL,
        ["optim.lr"],
        _text(
            "Table XI",
            "the DMU block at lr/(2n) (Sec. III-C, eq. 5); nat_lang.sh:13-16 and poly_music.sh:13-16 pass "
            "learning-rate-rnn = lr/(2n)",
        ),
    ),
    (
        ALL,
        ["optim.weight_decay"],
        _text("Table XI", "the DMU block's divided by 2n (Sec. III-C; models/dmu_model.py:44)"),
    ),
    (
        ALL,
        ["optim.clip"],
        _code("deep_memory_update/experiments/experiment.py:74", "no gradient_clip_val in guild.yml or the scripts"),
    ),
    # --- the budget, evaluation and selection
    (
        ["dmu/natlang-*", "dmu/polymusic-*"],
        ["train.batch_size"],
        _ours("the text gives no batch size (the released loaders: 32, the code protocol)"),
    ),
    (
        ["dmu/natlang-*", "dmu/polymusic-*"],
        ["train.steps"],
        _text("Table XI: 40 (NatLang) and 500 (PolyMusic) max epochs", "epochs of batches at our batch size"),
    ),
    (
        ["dmu/natlang-*", "dmu/polymusic-*"],
        ["train.eval_every", "train.lr_step_every"],
        _code("deep_memory_update/experiments/experiment.py:74", "validation and the scheduler step once an epoch"),
    ),
    (
        ALL,
        ["train.schedule", "train.lr_gamma"],
        _text(
            "Table XI: scheduler gamma",
            "models/dmu_model.py:55-57 and base_model.py:111-113: StepLR, one step an epoch",
        ),
    ),
    (
        ["dmu/natlang-*"],
        ["train.eval_batch_size"],
        _ours("the text gives none: 256 rows, the state carried along each (the released code: 32, the code protocol)"),
    ),
    (
        ALL,
        ["train.select_metric"],
        _text(
            "App. B-B: the model from the epoch with the best metric score on the validation set",
            "experiment.py:91-93 tests the checkpoint of the lowest loss/val (guild.yml:6)",
        ),
    ),
    (
        ALL,
        ["train.target_metric", "train.target_value", "train.target_patience", "train.epoch_steps"],
        _text(
            "App. B-B: real-life training stops once the optimizer reaches the final epoch",
            "the released 1e-6 threshold (models/utils.py:244-334) is never reached",
        ),
    ),
]
