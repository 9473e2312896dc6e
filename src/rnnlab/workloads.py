"""The speed benchmark's workloads: the shapes, sizes and cells of each configuration by name.

Data only (no torch at import). :mod:`rnnlab.bench.speed` times these workloads; the ledger's
price of a run (:mod:`rnnlab.ledger.price`) matches a preset against the rows of the speed
records by the sequence length and batch size of their configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BASELINE = "nn.LSTM"


@dataclass
class BenchConfig:
    name: str
    T: int
    batch: int
    input_size: int
    output_size: int
    tokens: bool  # one-hot token inputs (else real-valued pixels)
    readout: str  # "all" or "last"
    size_cell: str  # the cell whose size fixes the parameter budget
    size_hidden: int
    fixed: dict = field(default_factory=dict)  # cell label -> hidden size fixed by the papers
    cells: tuple | None = None  # restrict to these cell labels (None: every registered cell)
    extras: dict = field(default_factory=dict)  # extra rows: label -> (CELLS key, options)
    compare: bool = True  # time the reference loop and nn.LSTM in the same process
    note: str = ""
    reference: bool = True  # with compare: also time the reference loop (slow at large n)
    repeats: int | None = None  # timed repeats per row (None: 5; 3 for PTB; 2 for T > 2000)


#: the memory rows' extra variants of expRNN (reference loop, time-chunked recomputation)
MEMORY_EXTRAS = {
    "exprnn reference loop": ("exprnn", {"backend": "reference"}),
    "exprnn chunk=100": ("exprnn", {"checkpoint_chunk": 100}),
    "exprnn reference chunk=100": ("exprnn", {"backend": "reference", "checkpoint_chunk": 100}),
}

#: the DMU paper's Table IV systems (and coRNN, LEM) with their presets' options and sizes
TABLE4_ROWS = {
    "lstm": ("lstm", {}),
    "momentumlstm": ("momentumlstm", {}),
    "urnn": ("urnn", {}),
    "fcurnn": ("fcurnn", {"K": 1}),
    "softorth": ("softorth", {"penalty": 0.1}),
    "kru": ("kru", {"complex_input": False, "penalty": 0.001}),
    "antisymrnn": ("antisymrnn", {}),
    "incrnn": ("incrnn", {"rank": 9}),
    "exprnn": ("exprnn", {"init": "cayley"}),
    "naisnet": ("naisnet", {}),
    "lipschitz": ("lipschitz", {"init_std": 32.0}),
    "cornn": ("cornn", {}),
    "lem": ("lem", {"dt": 0.31}),
}
TABLE4_SIZES = {
    "lstm": 128,
    "momentumlstm": 256,
    "urnn": 1024,
    "fcurnn": 1024,
    "softorth": 128,
    "kru": 1024,
    "antisymrnn": 128,
    "incrnn": 128,
    "exprnn": 360,
    "naisnet": 128,
    "lipschitz": 128,
    "cornn": 256,
    "lem": 128,
}

CONFIGS = {
    "copy": BenchConfig(
        "copy",
        1020,
        128,
        10,
        9,
        True,
        "all",
        "exprnn",
        190,
        {"exprnn": 190, "scornn": 190, "asrnn": 138, BASELINE: 68, "lstm": 68},
        note="copy task L=1000, K=10 (T=1020), batch 128, ~22K parameters",
    ),
    "mnist": BenchConfig(
        "mnist",
        784,
        128,
        1,
        10,
        False,
        "last",
        "exprnn",
        170,
        {"asrnn": 122},
        note="sequential MNIST (T=784, 1 pixel/step), batch 128, ~16K parameters",
    ),
    "ptb": BenchConfig(
        "ptb",
        150,
        128,
        50,
        50,
        True,
        "all",
        "exprnn",
        1024,
        {"asrnn": 1024},
        note="PTB-char shapes (T=150, 50 symbols one-hot), batch 128, expRNN n=1024 budget",
    ),
    # sequential MNIST at the papers' larger sizes: expRNN n = 257, 364, 512 sets the budget
    # (asRNN's paper pairs its n=364 with expRNN's n=512); every other cell is matched to it.
    # The reference loops are not timed here (minutes per row at these sizes).
    **{
        f"mnist-n{n}": BenchConfig(
            f"mnist-n{n}",
            784,
            128,
            1,
            10,
            False,
            "last",
            "exprnn",
            n,
            fixed,
            reference=False,
            repeats=3,
            note=f"sequential MNIST (T=784, 1 pixel/step), batch 128, expRNN n={n} budget",
        )
        for n, fixed in ((257, {}), (364, {}), (512, {"asrnn": 364}))
    },
    # sequential MNIST with each system of the DMU paper's Table IV at the table's size and
    # preset options (dmu/smnist-<key>), and coRNN, LEM at their papers' psMNIST sizes
    "mnist-table4": BenchConfig(
        "mnist-table4",
        784,
        128,
        1,
        10,
        False,
        "last",
        "lstm",
        128,
        dict(TABLE4_SIZES),
        cells=(BASELINE,),
        extras=dict(TABLE4_ROWS),
        reference=False,
        repeats=3,
        note="sequential MNIST (T=784, 1 pixel/step), batch 128, the DMU paper's Table IV systems at the "
        "table's sizes (nn.LSTM at the LSTM baseline's n=128 budget), coRNN and LEM at theirs",
    ),
    "long": BenchConfig(
        "long",
        10_000,
        128,
        10,
        9,
        True,
        "all",
        "exprnn",
        190,
        {"exprnn": 190, "scornn": 190, "asrnn": 138, BASELINE: 68},
        cells=("exprnn", "scornn", "asrnn", "nnrnn", BASELINE),
        extras=MEMORY_EXTRAS,
        compare=False,
        note="copy-style input at T=10,000, batch 128, ~22K parameters (memory row)",
    ),
    "long-last": BenchConfig(
        "long-last",
        10_000,
        128,
        10,
        10,
        True,
        "last",
        "exprnn",
        190,
        {"exprnn": 190, BASELINE: 68},
        cells=("exprnn", BASELINE),
        extras=MEMORY_EXTRAS,
        compare=False,
        note="T=10,000 with a readout at the last step only (adding-style), batch 128 (memory row)",
    ),
}
