"""Which path runs a recurrence: one table, one rule per family, one :func:`choose`.

A recurrence can run several ways, each tested against the cell's step loop in float64
(tests/kernels/test_dispatch.py holds one probe per entry of :data:`TABLE`):

* ``step``: the cell's ``forward`` looped by :func:`rnnlab.unroll` (the reference);
* ``compiled``: the C loops of :mod:`rnnlab.kernels.small` (forward and BPTT, tiny widths);
* ``lanes``: the same C recurrence with all members' sequences side by side in vector lanes
  (the lane kernels of :mod:`rnnlab.kernels.small`: the RNN family so far);
* ``native``: ATen's whole-sequence kernel (``torch.lstm``, ``torch.gru``, ``torch.rnn_tanh``);
* ``fused``: a whole-sequence autograd Function with a hand-written BPTT in PyTorch;
* ``triton``: the persistent GPU kernel of :mod:`rnnlab.kernels.triton_recurrence`;
* ``loop`` and ``scan``: a linear recurrence as a loop or a scan (the LT-RNN's chunked scan,
  the minimal gated cells' log-space scan);
* ``parallel``: the mLSTM's chunkwise parallel form;
* ``conv``: S4D's whole sequence as one causal convolution (FFT);
* ``ensemble``: the members' batched path inside ``vmap`` (the loops of
  :mod:`rnnlab.kernels.ensemble`, or a cell's own ``batched_sequence``).

A family is one recurrence; its cells (registry keys) share its rule. :func:`choose` is the
only place a cell's ``backend`` option, its width, its tensors' dtype and device, autocast,
lengths and whether it runs as one member of an ensemble turn into a path; the cells and the
kernels ask it (``rnnlab doctor`` prints the table). Nothing here imports a cell.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from . import small
from .amp import autocasting, low_precision_autocast, recurrence_dtype
from .triton_setting import mode as triton_mode

__all__ = [
    "AUTO_MAX_WIDTH",
    "COMPILED",
    "LANES_MAX_WIDTH",
    "DIAGONAL_SCAN_MAX_STEP",
    "PATHS",
    "SCAN_MAX_STEP_MACS",
    "TABLE",
    "Family",
    "choose",
    "compiled",
    "table",
    "triton",
]

#: the paths, each with what it is
PATHS = {
    "step": "the cell's forward, looped by rnnlab.unroll (the reference)",
    "compiled": "C loops, forward and BPTT (rnnlab.kernels.small, compiled at first use)",
    "lanes": "C loops with the sequences of all members side by side in vector lanes (rnnlab.kernels.small)",
    "native": "ATen's whole-sequence kernel",
    "fused": "one autograd Function over the sequence with a hand-written BPTT",
    "triton": "the persistent Triton kernel (CUDA)",
    "loop": "the linear recurrence as one loop",
    "scan": "the linear recurrence as a scan (chunked, or in log space)",
    "parallel": "the chunkwise parallel form (mLSTM)",
    "conv": "the whole sequence as one causal convolution, by FFT (S4D)",
    "ensemble": "the members' batched path inside vmap",
}

#: ``backend="auto"`` takes the compiled loops for cells whose widest layer (hidden size, DMU
#: update-network width) is at most this, per compiled kernel. Measured (one thread, batch 32,
#: T = 100, forward and backward of one layer, against each cell's previous fast path, for one
#: run and for 51 members under vmap): the RNN's loops are faster up to 32 units both ways; the
#: GRU's and the DMU's up to 32 for one run but only to 8 and 4 in an ensemble (to 8 here: the
#: DMU's update network adds its width); the LSTM's up to 4 (ATen's LSTM wins from 8); the
#: RHN's up to 8 in an ensemble (``python benchmarks/small_models.py --widths``; docs/speed.md).
AUTO_MAX_WIDTH = {"rnn": 32, "gru": 8, "dmu": 8, "rhn": 8, "lstm": 4}

#: where the compiled loops run, a kernel with a lane form (``*_lanes_*`` of small.c) runs it up
#: to this width, the scalar loop above it. Measured (``python benchmarks/small_models.py
#: --widths``: one layer's forward and backward, one thread, batch 32, T = 100, lanes time /
#: scalar loop time, medians of 3 steps (21 at E = 1 for the RNN's 4 and 8), on a loaded
#: machine), for widths 4, 8, 16, 32, 64 at E = 1 and E = 51:
#: RNN 0.56, 0.83, 0.95, 0.74, 0.66 and 0.76, 0.96, 0.73, 0.81, 0.88;
#: DMU 0.73, 0.77, 0.66, 0.62, 0.71 and 0.41, 0.70, 0.55, 0.58, 0.55;
#: RHN 0.74, 0.73, 0.83, 0.92, 1.00 and 0.84, 0.58, 0.51, 0.83, 0.93;
#: GRU 0.80, 0.71, 0.85, 0.87, 1.21 and 0.54, 0.87, 0.71, 0.82, 0.95;
#: LSTM 0.79, 0.59, 0.83, 1.01, 1.20 and 0.49, 0.91, 0.83, 1.06, 0.91
#: (the lane kernels copy each weight per lane: 4H x H x 32 for the LSTM, out of cache from 32 on).
LANES_MAX_WIDTH = {"rnn": 64, "dmu": 64, "rhn": 64, "gru": 32, "lstm": 16}

#: the paths that run the compiled loops (a cell's ``small_sequence``)
COMPILED = ("compiled", "lanes")

#: the LT-RNN's ``auto`` uses the scan when one step's product is at most this many
#: multiply-adds (B H^2), else the loop. Measured with ``benchmarks/scan.py`` (one thread,
#: T=1000, forward + backward, against the fused loop): scan faster at B=8, H=8 (4.3x) and
#: B=32, H=32 (1.1x), slower at B=16, H=64 (0.88x) and from B=64, H=64 on (0.5-0.7x).
SCAN_MAX_STEP_MACS = 32_768

#: the diagonal cells' (LRU, S4D, Mamba) ``auto`` runs the chunked scan where one step holds at
#: most this many elements (batch x state elements per sequence), else the fused step loop.
#: Measured with ``benchmarks/ssm_scan.py --crossover`` (one thread, T=1024, complex64, forward +
#: backward, step loop time / scan time): 6.1 at 1 x 8, 6.7 at 1 x 64, 2.5 at 4 x 64, 1.16 at
#: 8 x 128, 0.95 at 32 x 256 (docs/ssm.md).
DIAGONAL_SCAN_MAX_STEP = 4096


@dataclass(frozen=True)
class Family:
    """One recurrence: its cells (registry keys), its paths (name -> where the code lives),
    the compiled kernel it uses (a key of :data:`AUTO_MAX_WIDTH`, or None) and its rule in words."""

    name: str
    cells: tuple[str, ...]
    paths: dict[str, str]
    rule: str
    kernel: str | None = None


_STEP = "rnnlab.cells.base.unroll"
_ELEMENTWISE = "rnnlab.kernels.families.rnn.elementwise_rnn"
_TRITON = "rnnlab.kernels.triton_recurrence.triton_elementwise_rnn"
_BATCHED = "rnnlab.kernels.families.rnn.ensemble_elementwise_rnn"

#: the families, each with its paths and rule (:func:`choose` implements the rules)
TABLE: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "rnn",
            ("rnn", "irnn"),
            {
                "step": _STEP,
                "compiled": "rnnlab.kernels.families.rnn.compiled_rnn",
                "lanes": "rnnlab.kernels.families.rnn.compiled_rnn (lanes=True)",
                "native": "torch.rnn_tanh / torch.rnn_relu",
                "fused": _ELEMENTWISE,
                "triton": _TRITON,
                "ensemble": _BATCHED,
            },
            "reference: step; compiled if it can run (not modReLU), as lanes up to LANES_MAX_WIDTH; native if "
            "asked; else triton on CUDA where it fits, else fused. Ensemble: compiled (lanes) if it can run, "
            "else ensemble",
            "rnn",
        ),
        Family(
            "ltrnn",
            ("ltrnn",),
            {
                "step": _STEP,
                "compiled": "rnnlab.kernels.families.rnn.compiled_rnn (identity)",
                "lanes": "rnnlab.kernels.families.rnn.compiled_rnn (identity, lanes=True)",
                "fused": _ELEMENTWISE + " (identity; with lengths)",
                "triton": _TRITON + " (identity; with lengths)",
                "loop": "rnnlab.kernels.scan.linear_recurrence_fused",
                "scan": "rnnlab.kernels.scan.linear_recurrence_scan",
                "ensemble": _BATCHED,
            },
            "reference: step; compiled if it can run, as lanes up to LANES_MAX_WIDTH; with lengths "
            "triton/fused; loop or scan if asked; else scan when chunk is set or B H^2 <= SCAN_MAX_STEP_MACS, "
            "else loop. Ensemble: compiled (lanes) if it can run, else ensemble",
            "rnn",
        ),
        Family(
            "lstm",
            ("lstm",),
            {
                "step": _STEP,
                "compiled": "rnnlab.kernels.families.lstm.compiled_lstm",
                "lanes": "rnnlab.kernels.families.lstm.compiled_lstm (lanes=True)",
                "native": "torch.lstm (rnnlab.cells.classic.run_native)",
                "ensemble": "rnnlab.kernels.families.lstm.ensemble_lstm",
            },
            "reference: step; compiled if it can run, as lanes up to LANES_MAX_WIDTH; else native. Ensemble: "
            "compiled (lanes) if it can run, else ensemble",
            "lstm",
        ),
        Family(
            "gru",
            ("gru",),
            {
                "step": _STEP,
                "compiled": "rnnlab.kernels.families.gru.compiled_gru",
                "lanes": "rnnlab.kernels.families.gru.compiled_gru (lanes=True)",
                "native": "torch.gru (rnnlab.cells.classic.run_native)",
                "fused": "rnnlab.kernels.families.gru.gru_recurrence",
                "ensemble": "rnnlab.kernels.families.gru.ensemble_gru",
            },
            "reference: step; compiled if it can run, as lanes up to LANES_MAX_WIDTH; native if asked or with "
            "lengths; else fused. Ensemble: compiled (lanes) if it can run; step with lengths under bf16/fp16 "
            "autocast; else ensemble",
            "gru",
        ),
        Family(
            "dmu",
            ("dmu",),
            {
                "step": _STEP,
                "compiled": "rnnlab.kernels.families.dmu.compiled_dmu",
                "lanes": "rnnlab.kernels.families.dmu.compiled_dmu (lanes=True)",
                "fused": "rnnlab.kernels.families.dmu.dmu_recurrence",
                "ensemble": "rnnlab.kernels.families.dmu.ensemble_dmu",
            },
            "reference: step; compiled if it can run (width: the widest layer), as lanes up to LANES_MAX_WIDTH; "
            "step with lengths; else fused. Ensemble: compiled (lanes) if it can run; step with lengths under "
            "bf16/fp16 autocast; else ensemble",
            "dmu",
        ),
        Family(
            "rhn",
            ("rhn",),
            {
                "step": _STEP,
                "compiled": "rnnlab.kernels.families.rhn.compiled_rhn",
                "lanes": "rnnlab.kernels.families.rhn.compiled_rhn (lanes=True)",
                "fused": "rnnlab.kernels.families.rhn.rhn_recurrence",
                "ensemble": "rnnlab.kernels.families.rhn.ensemble_rhn",
            },
            "reference: step; compiled if it can run, as lanes up to LANES_MAX_WIDTH; step with lengths; else "
            "fused. Ensemble: compiled (lanes) if it can run; step with lengths under bf16/fp16 autocast; else "
            "ensemble",
            "rhn",
        ),
        Family(
            "orthogonal",
            ("exprnn", "scornn", "nnrnn"),
            {"step": _STEP, "fused": _ELEMENTWISE, "triton": _TRITON, "ensemble": _BATCHED},
            "reference: step; else triton on CUDA where it fits, else fused. Ensemble: ensemble",
        ),
        Family(
            "transformed",
            ("asrnn", "softorth"),
            {"step": _STEP, "fused": _ELEMENTWISE, "triton": _TRITON},
            "reference: step; else triton on CUDA where it fits, else fused (asRNN's auto also runs its step "
            "loop while W_f's condition number is above FAST_PATH_MAX_KAPPA: a property of the weights, decided "
            "in the cell). Ensemble: step",
        ),
        Family(
            "residual",
            ("antisymrnn", "incrnn", "naisnet", "lipschitz"),
            {"step": _STEP, "fused": "rnnlab.kernels.residual.residual_recurrence"},
            "reference: step; else fused (the gated AntisymmetricRNN and the IncrementalRNN with steps > 1 "
            "have no fused form: step). Ensemble: step",
        ),
        Family(
            "oscillator",
            ("cornn", "lem"),
            {"step": _STEP, "fused": "rnnlab.kernels.oscillator.cornn_recurrence / lem_recurrence"},
            "reference: step; else fused. Ensemble: step",
        ),
        Family(
            "unitary",
            ("urnn", "eurnn", "fcurnn", "kru"),
            {"step": _STEP, "fused": "the cell's sequence (rnnlab.kernels.unitary.modrelu_recurrence)"},
            "reference: step; else fused. Ensemble: step",
        ),
        Family(
            "momentumlstm",
            ("momentumlstm",),
            {"step": _STEP, "fused": "rnnlab.cells.momentum.MomentumLSTMCell.sequence"},
            "reference: step; else fused. Ensemble: step",
        ),
        Family(
            "diagonal",
            ("lru", "s4d", "mamba"),
            {
                "step": _STEP,
                "loop": "rnnlab.kernels.scan.diagonal_recurrence_fused",
                "scan": "rnnlab.kernels.scan.diagonal_recurrence",
                "conv": "rnnlab.cells.ssm.causal_convolution (S4D)",
            },
            "reference: step; conv for a cell with a convolution form (S4D) on backend conv or auto "
            "without lengths; loop for backend step; scan if asked, when chunk is set or "
            "B x state elements <= DIAGONAL_SCAN_MAX_STEP, else loop. Ensemble: step",
        ),
        Family(
            "mingated",
            ("mingru", "minlstm"),
            {
                "step": _STEP,
                "loop": "rnnlab.kernels.logscan.diagonal_loop",
                "scan": "rnnlab.kernels.logscan.log_linear_scan",
                "ensemble": "rnnlab.kernels.logscan.diagonal_loop (batched_linear input terms)",
            },
            "reference: step; loop or scan if asked; else scan off the CPU, loop on it. "
            "Ensemble: ensemble (whatever the backend)",
        ),
        Family(
            "slstm",
            ("slstm",),
            {
                "step": _STEP,
                "fused": "rnnlab.cells.xlstm.SLSTMCell.sequence (input terms in one product, then steps)",
                "ensemble": "rnnlab.cells.xlstm.SLSTMCell.batched_sequence",
            },
            "reference: step; else fused. Ensemble: ensemble (whatever the backend)",
        ),
        Family(
            "mlstm",
            ("mlstm",),
            {
                "step": _STEP,
                "parallel": "rnnlab.kernels.xlstm.mlstm_parallel",
                "ensemble": "rnnlab.kernels.xlstm.mlstm_parallel (batched_linear input terms)",
            },
            "reference: step; else parallel. Ensemble: ensemble (whatever the backend)",
        ),
    )
}


def family_of(cell_key: str) -> Family:
    """The family of a registry key ("irnn" -> the "rnn" family)."""
    for fam in TABLE.values():
        if cell_key in fam.cells:
            return fam
    raise KeyError(f"no dispatch family lists the cell {cell_key!r}; families: {sorted(TABLE)}")


def _capturing() -> bool:
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return torch.jit.is_tracing() or bool(compiling and compiling())


def compiled(kernel: str, backend: str, width: int, tensors) -> bool:
    """Whether the compiled loop ``kernel`` (a key of :data:`AUTO_MAX_WIDTH`) runs for a cell
    with ``backend`` and widest layer ``width`` on ``tensors`` (its input and weights):
    ``"auto"`` up to :data:`AUTO_MAX_WIDTH`, ``"small"`` always, where they can run (CPU, one
    float32 or float64 dtype, no autocast, not traced, a C compiler); ``"small"`` where they
    cannot says so once and runs the PyTorch path."""
    if backend not in ("auto", "small") or (backend == "auto" and width > AUTO_MAX_WIDTH[kernel]):
        return False
    ts = [t for t in tensors if t is not None]
    dtype = ts[0].dtype
    if (
        dtype not in (torch.float32, torch.float64)
        or any(t.dtype != dtype or t.device.type != "cpu" for t in ts)
        or autocasting("cpu")
        or _capturing()
    ):
        if backend == "small":
            small._note(
                "small-skip",
                "backend 'small' runs on CPU float32/float64 tensors without autocast only; "
                "this recurrence runs on its PyTorch path",
            )
        return False
    return small.library(dtype) is not None


def triton(u: Tensor, hidden: int) -> bool:
    """Whether :func:`rnnlab.kernels.elementwise_rnn` runs the Triton kernel on input terms
    ``u`` (in their compute dtype): decided by
    :func:`rnnlab.kernels.triton_recurrence.use_triton` for CUDA tensors or when
    ``RNNLAB_TRITON`` forces it; a CPU tensor with the setting unset is False without
    importing Triton."""
    return _triton(u.device.type, u.dtype, hidden)


def _triton(device_type: str, dtype: torch.dtype, hidden: int) -> bool:
    if device_type != "cuda" and triton_mode() != "force":
        return False
    from . import triton_recurrence

    return triton_recurrence.use_triton(device_type, dtype, hidden)


def _fused_or_triton(x: Tensor, width: int) -> str:
    return "triton" if _triton(x.device.type, recurrence_dtype(x), width) else "fused"


def choose(
    family: str,
    backend: str = "auto",
    *,
    width: int,
    tensors: tuple = (),
    ensemble: bool = False,
    lengths: bool = False,
    nonlinearity: str = "tanh",
    batch: int = 1,
    chunk: int = 0,
    convolution: bool = False,
) -> str:
    """The path (a key of :data:`PATHS`) that a cell of ``family`` runs a whole sequence on.

    Args:
        family: a key of :data:`TABLE`.
        backend: the cell's ``backend`` option.
        width: the widest layer (hidden size; the DMU's update-network width if larger).
        tensors: the input (first) and the weights: their dtype, device and autocast decide.
        ensemble: True inside an ensemble's batched model (the cell's ``batched_sequence``).
        lengths: whether the call has sequence lengths.
        nonlinearity: the element-wise RNN's (modReLU has no compiled loop).
        batch, chunk: the batch size and the ``chunk`` option (the LT-RNN's and the diagonal
            cells' scan or loop; for the diagonal cells ``width`` is a sequence's state elements).
        convolution: whether the cell has a convolution form (a ``"conv"`` backend: S4D).
    """
    fam = TABLE[family]
    x = tensors[0] if tensors else None
    fast = None  # the compiled loops' path where they run: lanes where the kernel has them, up to their width
    if (
        fam.kernel is not None
        and nonlinearity != "modrelu"
        and bool(tensors)
        and compiled(fam.kernel, backend, width, tensors)
    ):
        fast = "lanes" if width <= LANES_MAX_WIDTH.get(fam.kernel, 0) else "compiled"
    if ensemble:
        if fast:
            return fast
        if family in ("gru", "dmu", "rhn") and lengths and x is not None and low_precision_autocast(x):
            return "step"
        return "ensemble" if "ensemble" in fam.paths else "step"
    if backend == "reference":
        return "step"
    if fast:
        return fast
    if family == "rnn":
        return "native" if backend == "native" else _fused_or_triton(x, width)
    if family == "ltrnn":
        if lengths:
            return _fused_or_triton(x, width)
        if backend in ("loop", "scan"):
            return backend
        return "scan" if chunk or batch * width * width <= SCAN_MAX_STEP_MACS else "loop"
    if family == "lstm":
        return "native"
    if family == "gru":
        return "native" if backend == "native" or lengths else "fused"
    if family in ("dmu", "rhn"):
        return "step" if lengths else "fused"
    if family == "mingated":
        if backend in ("loop", "scan"):
            return backend
        return "loop" if x is None or x.device.type == "cpu" else "scan"
    if family == "mlstm":
        return "parallel"
    if family == "diagonal":
        if convolution and not lengths and backend in ("conv", "auto"):
            return "conv"
        if backend == "step":  # the cells' name for the fused step loop
            return "loop"
        return "scan" if backend == "scan" or chunk or batch * width <= DIAGONAL_SCAN_MAX_STEP else "loop"
    if "triton" in fam.paths and x is not None:
        return _fused_or_triton(x, width)
    return "fused"


def table() -> str:
    """The table as text (``rnnlab doctor`` prints it): each family, its cells, its paths
    and where each lives, and its rule."""
    lines = ["dispatch table (rnnlab.kernels.dispatch): family, cells, paths, rule"]
    for fam in TABLE.values():
        lines.append(f"{fam.name} ({', '.join(fam.cells)})")
        for path, where in fam.paths.items():
            lines.append(f"  {path:<9} {where}")
        lines.append(f"  rule: {fam.rule}")
    limits = ", ".join(f"{k} {v}" for k, v in AUTO_MAX_WIDTH.items())
    lanes = ", ".join(f"{k} {v}" for k, v in LANES_MAX_WIDTH.items())
    lines.append(
        f"'compiled if it can run': backend small, or auto up to the width {limits}; on the CPU, float32 "
        f"or float64, no autocast, not traced, a C compiler; as lanes up to the width {lanes}. LT-RNN scan while B H^2 <= {SCAN_MAX_STEP_MACS}; diagonal scan while B x state elements "
        f"<= {DIAGONAL_SCAN_MAX_STEP}"
    )
    return "\n".join(lines)
