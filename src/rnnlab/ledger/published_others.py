"""Henaff et al.'s figures, and coRNN's and LEM's psMNIST results: see
:mod:`rnnlab.ledger.published` for the units.
"""

from __future__ import annotations

from .rows import Published, _add

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
        presets=("cornn/psmnist",),
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
        presets=("lem/psmnist",),
        note="the paper's psMNIST result (the authors' run log: 96.62)",
    )
)
