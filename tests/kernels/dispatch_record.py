"""Which path a cell's whole-sequence call runs, observed by running it.

Every function a cell can hand a sequence to (the step loop, the compiled loops, ATen's
kernels, the fused BPTTs, the ensemble loops, the scan, the Triton launch) is wrapped, in every
module that calls it, by a spy that writes its name down and calls through; a case is built,
run forward (and backward where it asks for gradients) and the names seen, in order, are its
record. ``python tests/kernels/dispatch_record.py`` writes the records of :func:`cases` to
``dispatch_golden.json`` beside this file: the behaviour the dispatch table must keep.

The golden is a record of what the cells ran *before* the dispatch table existed, so
:func:`cases` covers only the cells that existed then (:data:`RECORDED`, a fixed list). A cell
added since has no "before": its paths are checked by the table's probes
(tests/kernels/test_dispatch.py), not by adding it here and re-recording (that would record
the table's own choices and check them against themselves).
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import pkgutil
import sys
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, vmap

GOLDEN = Path(__file__).with_name("dispatch_golden.json")

#: module -> the path functions it calls by its own global name
SPIED = {
    "rnnlab.cells.base": ["unroll"],
    "rnnlab.cells.classic": [
        "run_native",
        "elementwise_rnn",
        "compiled_rnn",
        "gru_recurrence",
        "ensemble_gru",
        "compiled_gru",
        "ensemble_lstm",
        "compiled_lstm",
    ],
    "rnnlab.cells.ltrnn": ["elementwise_rnn", "compiled_rnn", "linear_recurrence_fused", "linear_recurrence_scan"],
    "rnnlab.kernels.scan": ["linear_recurrence_fused", "linear_recurrence_scan"],
    "rnnlab.cells.dmu": [
        "dmu_recurrence",
        "rhn_recurrence",
        "ensemble_dmu",
        "ensemble_rhn",
        "compiled_dmu",
        "compiled_rhn",
    ],
    "rnnlab.kernels.families.rnn": ["ensemble_elementwise_rnn", "_triton_forward"],
    # cells added after the golden was recorded (their probes read these; no recorded case calls them)
    "rnnlab.cells.minimal": ["batched_linear", "diagonal_loop", "log_linear_scan"],
    "rnnlab.cells.xlstm": ["batched_linear", "mlstm_parallel"],
    "rnnlab.cells.ssm": ["diagonal_recurrence_fused", "diagonal_recurrence", "causal_convolution"],
}

#: the registry keys the golden recorded: the cells that existed before the dispatch table
RECORDED = (
    "antisymrnn",
    "asrnn",
    "cornn",
    "dmu",
    "eurnn",
    "exprnn",
    "fcurnn",
    "gru",
    "incrnn",
    "irnn",
    "kru",
    "lem",
    "lipschitz",
    "lstm",
    "ltrnn",
    "momentumlstm",
    "naisnet",
    "nnrnn",
    "rhn",
    "rnn",
    "scornn",
    "softorth",
    "urnn",
)

#: the families of the dispatch table, each as (registry key, cell options) variants
MAIN = {
    "rnn": [("rnn", {}), ("rnn", {"nonlinearity": "relu"}), ("rnn", {"nonlinearity": "modrelu"}), ("irnn", {})],
    "ltrnn": [("ltrnn", {}), ("ltrnn", {"chunk": 2})],
    "lstm": [("lstm", {})],
    "gru": [("gru", {})],
    "dmu": [("dmu", {}), ("dmu", {"layers": []}), ("dmu", {"layers": [2, 12]})],
    "rhn": [("rhn", {})],
}
WIDTHS = (4, 5, 8, 9, 32, 33)
#: the other cells: their path functions, spied in every cell module that imports them
OTHER_PATHS = (
    "unroll",
    "elementwise_rnn",
    "cornn_recurrence",
    "lem_recurrence",
    "residual_recurrence",
    "modrelu_recurrence",
)


def _spy(log: list, name: str, fn):
    def run(*args, **kwargs):
        log.append(name + ("+lanes" if kwargs.get("lanes") else ""))  # the lane kernels, added after the golden
        return fn(*args, **kwargs)

    return run


@contextlib.contextmanager
def spying():
    """Yields the list the spies write to; restores every wrapped function on exit."""
    import rnnlab.cells

    log: list[str] = []
    undo = []
    spied = {k: list(v) for k, v in SPIED.items()}
    for info in pkgutil.iter_modules(rnnlab.cells.__path__):
        mod = importlib.import_module(f"rnnlab.cells.{info.name}")
        names = spied.setdefault(mod.__name__, [])
        names += [n for n in OTHER_PATHS if callable(getattr(mod, n, None)) and n not in names]
    for modname, names in spied.items():
        mod = importlib.import_module(modname)
        for name in names:
            fn = getattr(mod, name)
            # the compiled loops were small.<family> when the golden was recorded
            label = f"small.{name.removeprefix('compiled_')}" if name.startswith("compiled_") else name
            setattr(mod, name, _spy(log, label, fn))
            undo.append((mod, name, fn))
    try:
        yield log
    finally:
        for mod, name, fn in undo:
            setattr(mod, name, fn)


class _Batched(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, lengths):
        out, _ = self.cell.batched_sequence(x, None, lengths)
        return out


def run_case(case: dict) -> list[str]:
    """Build ``case``'s cell, run it, return the names of the path functions it called."""
    from rnnlab.cells import CELLS

    torch.manual_seed(0)
    dtype = getattr(torch, case["dtype"])
    cell = CELLS[case["key"]](2, case["hidden"], backend=case["backend"], **case["options"]).to(dtype)
    T, B = 3, case.get("batch", 2)
    x = torch.randn(T, B, 2, dtype=dtype, requires_grad=case["grad"])
    lengths = torch.tensor([T] + [max(1, T - 1)] * (B - 1)) if case["lengths"] else None
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if case.get("autocast") else contextlib.nullcontext()
    grad = contextlib.nullcontext() if case["grad"] else torch.no_grad()
    with spying() as log, grad, autocast:
        try:
            _run(cell, case, x, lengths)
        except Exception as e:  # recorded as what happens today (after the path it took)
            log.append(f"error:{type(e).__name__}")
    seen: list[str] = []
    for name in log:
        if name not in seen:
            seen.append(name)
    return seen


def _run(cell, case, x, lengths):
    if case["ensemble"]:
        E = 2
        wrap = _Batched(cell)
        params = {f"cell.{k}": torch.stack([v.detach()] * E) for k, v in cell.named_parameters()}
        out = vmap(lambda p, xx: functional_call(wrap, p, (xx, lengths)))(params, torch.stack([x] * E))
    else:
        out, _ = cell.sequence(x, None, lengths)
    if case["grad"]:
        out.float().sum().backward()


def cases() -> list[dict]:
    """The recorded configurations: every main family, variant, width around each limit, dtype,
    backend, gradient or not, lengths or not, one run or an ensemble; a few autocast ones; the
    LT-RNN's scan limit from both sides. Only the cells of :data:`RECORDED` (module docstring)."""
    from rnnlab.cells import CELLS

    out = []
    for family, variants in MAIN.items():
        for key, options in variants:
            cls = CELLS[key]
            backends = ("auto", "reference", *cls.extra_backends())
            for H, dtype, backend, grad, lengths, ensemble in itertools.product(
                WIDTHS, ("float32", "float64"), backends, (True, False), (False, True), (False, True)
            ):
                if options.get("nonlinearity") == "modrelu" and backend == "native":
                    continue
                if not grad and H not in (4, 9):
                    continue
                case = dict(family=family, key=key, options=options, hidden=H, dtype=dtype, backend=backend)
                out.append({**case, "grad": grad, "lengths": lengths, "ensemble": ensemble})
            for backend, lengths, ensemble in itertools.product(("auto", "small"), (False, True), (False, True)):
                case = dict(family=family, key=key, options=options, hidden=4, dtype="float32", backend=backend)
                out.append({**case, "grad": True, "lengths": lengths, "ensemble": ensemble, "autocast": True})
    main = {key for variants in MAIN.values() for key, _ in variants}
    for key in RECORDED:
        cls = CELLS[key]
        if key in main:
            continue
        for H, dtype, backend, lengths, ensemble in itertools.product(
            (4, 6), ("float32", "float64"), ("auto", "reference", *cls.extra_backends()), (False, True), (False, True)
        ):
            case = dict(family="other", key=key, options={}, hidden=H, dtype=dtype, backend=backend)
            out.append({**case, "grad": True, "lengths": lengths, "ensemble": ensemble})
    for H, B, backend in itertools.product((33, 40), (2, 30), ("auto", "loop", "scan")):
        case = dict(family="ltrnn", key="ltrnn", options={}, hidden=H, dtype="float64", backend=backend, batch=B)
        out.append({**case, "grad": True, "lengths": False, "ensemble": False})
    return out


FIELDS = ("key", "options", "hidden", "dtype", "backend", "grad", "lengths", "ensemble", "autocast", "batch")


def case_id(case: dict) -> str:
    """A short, stable name of a case (the golden file's key)."""
    values = {**case, "autocast": case.get("autocast", False), "batch": case.get("batch", 2)}
    return " ".join(json.dumps(values[f], separators=(",", ":")).replace('"', "") for f in FIELDS)


def record() -> dict[str, str]:
    torch.set_num_threads(1)
    return {case_id(case): " ".join(run_case(case)) for case in cases()}


def golden() -> dict[str, str]:
    return json.loads(GOLDEN.read_text())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    GOLDEN.write_text(json.dumps(record(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
