"""Henaff et al.'s figures, and coRNN's and LEM's psMNIST results: see
:mod:`rnnlab.ledger.published` for the units.
"""

from __future__ import annotations

from .rows import PROTOCOLS, Published, Source, _add, at_other_protocols

#: The authors' released repositories, at the commits every ``code`` source of coRNN and LEM names.
CORNN_CODE_REPO = "tk-rusch/coRNN at afd8174"
LEM_CODE_REPO = "tk-rusch/LEM at 833da6b"


def _code(where: str) -> Source:
    return Source("code", where)


#: Where the authors' released psMNIST scripts run otherwise than the presets ``cornn/psmnist`` and
#: ``lem/psmnist`` (their own settings: the scripts' defaults, which give the published numbers):
#: preset -> [(dotted key, the code's value, source, what it does)]. The code-protocol presets
#: ``<paper>/code/psmnist`` are the presets with exactly these settings changed. What the scripts do
#: and no setting expresses is in ``OSCILLATOR_CODE_GAPS``.
OSCILLATOR_CODE_DIFFS: dict[str, list[tuple[str, object, Source, str]]] = {}
for _paper, _dir, _per, _task in (
    ("cornn", "psMNIST", 475, "psMNIST_task.py"),
    ("lem", "src/psMNIST", 445, "psMNIST_task.py"),
):
    _lr_at = {"cornn": "88-91", "lem": "96-99"}[_paper]
    _epochs = {"cornn": "13-14", "lem": "14-15"}[_paper]
    OSCILLATOR_CODE_DIFFS[f"{_paper}/psmnist"] = [
        (
            "task.val_size",
            3000,
            _code(f"{_dir}/utils.py:15"),
            "3,000 training images held out for validation, 57,000 trained on (ours: 5,000 and 55,000)",
        ),
        (
            "train.steps",
            120 * _per,
            _code(f"{_dir}/{_task}:{_epochs}; {_dir}/utils.py:15-20"),
            f"120 epochs of {_per} batches of the 57,000 training images",
        ),
        (
            "train.eval_every",
            _per,
            _code(f"{_dir}/{_task}:" + {"cornn": "75-79", "lem": "85-89"}[_paper]),
            f"validation once an epoch of {_per} batches",
        ),
        *(
            (
                key,
                value,
                _code(f"{_dir}/{_task}:{_lr_at}"),
                f"the learning rate divided by 10 after epoch 100, at step {100 * _per} (ours: constant)",
            )
            for key, value in (
                ("train.schedule", "exponential"),
                ("train.lr_gamma", 0.1),
                ("train.lr_step_every", 100 * _per),
            )
        ),
    ]
OSCILLATOR_CODE_DIFFS["lem/psmnist"].append(
    (
        "model.readout_init",
        "kaiming",
        _code("src/psMNIST/network.py:43-46"),
        "a Kaiming-normal classifier weight (ours: torch's nn.Linear init)",
    )
)
for _p, _diffs in OSCILLATOR_CODE_DIFFS.items():
    PROTOCOLS[_p.replace("/", "/code/", 1)] = (_p, "code", "; ".join(f"{_w} ({_s.where})" for _k, _v, _s, _w in _diffs))

#: What the released psMNIST scripts do that no rnnlab setting expresses (the code presets keep
#: rnnlab's way): (paper, what the code does, source, rnnlab's way).
OSCILLATOR_CODE_GAPS: list[tuple[str, str, Source, str]] = [
    (
        "cornn",
        "the pixel order torch.randperm(784) after torch.manual_seed(12008)",
        _code("psMNIST/psMNIST_task.py:29, 34"),
        "numpy's RandomState(92916).permutation(784), the asRNN/expRNN order",
    ),
    (
        "lem",
        "the pixel order torch.randperm(784) after torch.manual_seed(5544)",
        _code("src/psMNIST/psMNIST_task.py:40, 44"),
        "numpy's RandomState(92916).permutation(784), the asRNN/expRNN order",
    ),
    (
        "cornn",
        "the 3,000 validation images drawn by random_split from the 60,000",
        _code("psMNIST/utils.py:15"),
        "the last 3,000 of the training file",
    ),
    (
        "lem",
        "the 3,000 validation images drawn by random_split from the 60,000",
        _code("src/psMNIST/utils.py:15"),
        "the last 3,000 of the training file",
    ),
    (
        "lem",
        "a last batch of 40 images each epoch (57,000 = 445 x 128 + 40; the DataLoader keeps it)",
        _code("src/psMNIST/utils.py:18-20"),
        "445 full batches an epoch: the 40 images left over sit that epoch out",
    ),
]

# Henaff et al. (figures only)
_add(
    Published(
        "henaff",
        "Fig. 1",
        "clock construction",
        "copy",
        "T=500, d=128, 500 trials",
        "success",
        reason="an explicit construction, not a trained preset: benchmarks/henaff_copy_clock.py "
        "(docs/henaff-copy-clock.md)",
    )
)
# Figs. 2-4 show two timescales; the text we hold names only the second, T=750 ("for T = 750, only one
# LT-ORNN and one LT-IRNN were trained"). Our first-timescale presets use T=500, our choice.
for _fig, _task, _metric, _rows in (
    ("Fig. 2", "copy", "test/recall_accuracy", (("LT-ORNN", "henaff/copy-ltornn"), ("LT-IRNN", "henaff/copy-ltirnn"))),
    ("Fig. 3", "adding", "test/loss", (("LT-IRNN", "henaff/adding-ltirnn"), ("LT-ORNN", "henaff/adding-ltornn"))),
    ("Fig. 4", "copy", "test/recall_accuracy", (("LT-ORNN + l2 pooling", "henaff/copy-ltornn-pool"),)),
    ("Fig. 4", "adding", "test/loss", (("LT-ORNN + l2 pooling", "henaff/adding-ltornn-pool"),)),
):
    _units = "80 units" if _task == "copy" else "128 units"
    for _m, _p in _rows:
        _add(
            Published(
                "henaff",
                _fig,
                _m,
                _task,
                f"first timescale, {_units}",
                _metric,
                presets=(_p,),
                note="training curves; the text we hold does not state this timescale: T=500 is our preset's choice",
            )
        )
    for _m, _p in _rows:
        _add(
            Published(
                "henaff",
                _fig,
                _m,
                _task,
                f"T=750, {_units}",
                _metric,
                presets=(_p + "-T750",),
                runs=0 if "pool" in _p else 1,
                note="training curves" + ("" if "pool" in _p else "; the paper trained one run of each model at T=750"),
            )
        )
for _m, _p in (
    ("LT-ORNN", "henaff/copy_variable-ltornn"),
    ("LT-IRNN", "henaff/copy_variable-ltirnn"),
    ("LSTM", "henaff/copy_variable-lstm"),
):
    _add(
        Published(
            "henaff",
            "Fig. 5",
            _m,
            "variable-length copy",
            "T=100",
            "test/recall_accuracy",
            presets=(_p,),
            note="training curves",
        )
    )
_add(
    Published(
        "henaff",
        "Fig. 6",
        "LT-ORNN + l2 pooling",
        "copy / adding",
        "",
        "activations",
        reason="a qualitative view of hidden activations, no number",
    )
)

# coRNN and LEM: their psMNIST results, the comparison points of today's long-memory work
_add(
    Published(
        "cornn",
        "psMNIST",
        "coRNN",
        "psMNIST",
        "N=256, 134K params",
        "test/accuracy",
        0.9734,
        presets=("cornn/psmnist", *at_other_protocols("cornn/psmnist")),
        note="the paper's psMNIST result; the authors' README and run log give the same",
    )
)
_add(
    Published(
        "lem",
        "psMNIST",
        "LEM",
        "psMNIST",
        "N=128, 68K params",
        "test/accuracy",
        0.966,
        presets=("lem/psmnist", *at_other_protocols("lem/psmnist")),
        note="the paper's psMNIST result (the authors' run log: 96.62)",
    )
)
