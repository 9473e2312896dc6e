"""``rnnlab doctor``: every fast path against its reference, on one device, as a table.

What runs (each row: path, dtype, max error, tolerance, ok):

* **cell**: each cell family's fast path (and each of its backends: fused, native, scan, ...;
  :data:`PATHS`), with and without lengths, as a ``Recurrent`` layer on the device, against the
  reference step loop (:func:`rnnlab.unroll`) in float64 on the CPU: outputs, final state and
  the gradients of the input, ``h0`` and every parameter. In float64 (where the device has it),
  float32, and float32 parameters under bf16 autocast (where the device runs it).
* **checkpoint**: the time-chunked recomputation (``checkpoint_chunk``) the same way.
* **kernel**: :func:`rnnlab.kernels.elementwise_rnn` for each activation, with lengths, against
  :func:`rnnlab.kernels.reference_elementwise_rnn`; :func:`rnnlab.kernels.tall_linear`
  against ``F.linear``.
* **triton**: the Triton kernel, unguarded, forward (the states) and backward (the gradients
  of u, W, h0 and modReLU's bias) against the fused loop in float64
  (:func:`rnnlab.kernels.triton_recurrence.compare`): on CUDA in this process, at the device's
  limit (the cell rows run it at small H through the guard, whose self-check results are rows
  too); on the CPU at H = 20 through Triton's interpreter in a subprocess
  (``TRITON_INTERPRET=1`` must be set before Triton is imported). Skipped, with the reason,
  where Triton is not installed.
* **train**: per cell family, two optimizer steps (SGD, the cell's regulariser, dynamic
  trivialization's post-step hook) of a layer and a linear readout on the device against the
  same steps through the reference loop in float64 on the CPU: every parameter after the steps.

The error of a row is the largest ``max |fast - reference| / max(1, max |reference|)`` over the
tensors it compares. Tolerances (:data:`TOLERANCE`): float64 1e-9, float32 1e-4 (as the device
tests). Under bf16 autocast the forward is judged the same way and the backward by ``1 - cos``
between all gradients and the reference's (:func:`_cosine_gap`): bf16 keeps 8 significant
bits, and a pre-activation rounded across modReLU's or ReLU's threshold flips that unit's
derivative between 0 and 1, which moves single gradient entries by 10-20% of the scale (seen
on the CPU for expRNN and nnRNN at these sizes) without being a fault; the row's error is the
larger of the two, against 2e-2 (the largest seen over these paths on the CPU: forward 6e-3,
backward 4e-3).

``run(device=...)`` returns the rows; :func:`table` prints them; ``rnnlab doctor`` exits 1 when
a row is not ok.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: `rnnlab --help` stays light
    import torch

#: (cell key, constructor options): every family of rnnlab.CELLS and each of its fast backends
#: (at the doctor's width the default of rnn, gru, rhn and dmu on the CPU is the compiled loops of
#: rnnlab.kernels.small; "fused" names the fused PyTorch kernels, the default above those widths
#: and on GPUs; a family's first path is also its train row)
PATHS: list[tuple[str, dict]] = [
    ("rnn", {"nonlinearity": "tanh", "backend": "fused"}),
    ("rnn", {"nonlinearity": "tanh"}),
    ("rnn", {"nonlinearity": "tanh", "backend": "native"}),
    ("rnn", {"nonlinearity": "relu", "backend": "fused"}),
    ("rnn", {"nonlinearity": "relu"}),
    ("rnn", {"nonlinearity": "modrelu"}),
    ("irnn", {}),
    ("lstm", {}),
    ("lstm", {"backend": "small"}),
    ("gru", {}),
    ("gru", {"backend": "fused"}),
    ("gru", {"backend": "native"}),
    ("exprnn", {}),
    ("scornn", {}),
    ("asrnn", {"a": 0.5, "b": 1.5, "backend": "fast"}),
    ("nnrnn", {}),
    ("dmu", {"layers": []}),
    ("dmu", {"layers": [5]}),
    ("dmu", {"layers": [5], "backend": "fused"}),
    ("rhn", {"depth": 2}),
    ("rhn", {"depth": 2, "backend": "fused"}),
    ("ltrnn", {"backend": "loop"}),
    ("ltrnn", {"backend": "scan", "chunk": 2}),
    ("urnn", {}),
    ("eurnn", {}),
    ("momentumlstm", {}),
    ("fcurnn", {}),
    ("softorth", {"margin": 0.5}),
    ("kru", {}),
    ("antisymrnn", {}),
    ("antisymrnn", {"gated": True}),
    ("incrnn", {"rank": 2}),
    ("naisnet", {}),
    ("lipschitz", {}),
    ("cornn", {}),
    ("lem", {}),
    ("mingru", {}),
    ("mingru", {"backend": "scan"}),
    ("minlstm", {"backend": "scan"}),
    ("slstm", {"heads": 2}),
    ("mlstm", {"heads": 2, "chunk": 4}),
    ("lru", {}),
    ("s4d", {"state_size": 4}),
    ("s4d", {"state_size": 4, "backend": "conv"}),
    ("mamba", {"state_size": 4}),
]

#: tolerance on the relative error (module docstring)
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "bf16-autocast": 2e-2}

#: the training rows' SGD learning rate, one for every parameter (the step is compared with the
#: reference's, not judged by the loss: the papers' per-group rates are not the point here)
TRAIN_LR = 0.01

#: problem sizes: input, hidden, steps, batch; the lengths of the lengths rows
I, H, T, B = 3, 6, 9, 3
LENGTHS = (9, 4, 6)


@dataclass
class Row:
    """One check: ``ok`` is None when skipped (``note`` says why)."""

    section: str
    path: str
    dtype: str
    error: float | None
    tolerance: float | None
    ok: bool | None
    note: str = ""


def _label(key: str, kw: dict) -> str:
    return key + (" " + " ".join(f"{k}={v}" for k, v in kw.items()) if kw else "")


def _error(got, want) -> float:
    """The largest ``max |got - want| / max(1, max |want|)`` over pairs of tensors (NaN if any
    is not finite; pairs where both sides are None are skipped)."""
    import torch

    err = 0.0
    for a, b in zip(got, want, strict=True):
        if a is None and b is None:
            continue
        if a is None or b is None:
            # a gradient one side leaves unreached must be zero on the other
            x = a if b is None else b
            err = max(err, x.detach().abs().max().item())
            continue
        a, b = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            return math.nan
        scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
        err = max(err, (a - b).abs().max().item() / scale if a.numel() else 0.0)
    return err


def _cosine_gap(got, want) -> float:
    """``1 - cos`` between all gradients (concatenated) and the reference's: insensitive to the
    few entries that bf16 rounding moves across a threshold (modReLU's, ReLU's derivative jumps
    there), sensitive to a wrong term or a wrong direction."""
    import torch

    pairs = [(a, b) for a, b in zip(got, want, strict=True) if a is not None and b is not None]
    a = torch.cat([x.detach().to("cpu", torch.float64).flatten() for x, _ in pairs])
    b = torch.cat([y.detach().to("cpu", torch.float64).flatten() for _, y in pairs])
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return math.nan
    denom = (a.norm() * b.norm()).item()
    return 1.0 - (a @ b).item() / denom if denom > 0 else float(a.norm().item() > 0)


def _row(section, path, dtype, err, note="") -> Row:
    tol = TOLERANCE[dtype]
    return Row(section, path, dtype, err, tol, bool(err <= tol), note)  # NaN: not ok


def _failed(section, path, dtype, e: BaseException) -> Row:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return Row(section, path, dtype, None, TOLERANCE.get(dtype), False, f"{type(e).__name__}: {text}"[:160])


def _dtypes(device: torch.device) -> list[str]:
    """float64 where the device has it (not MPS), float32, bf16 autocast where it runs."""
    from ..device import DeviceError, check_precision

    out = [] if device.type == "mps" else ["float64"]
    out.append("float32")
    try:
        check_precision("bf16", device)
        out.append("bf16-autocast")
    except DeviceError:
        pass
    return out


def _leaves(state):
    import torch

    return [state] if isinstance(state, torch.Tensor) else list(state)


def perturbed_pair(key: str, kw: dict, seed: int = 0, *, input_size: int = I, hidden_size: int = H, **layer_kw):
    """A float64 CPU layer of cell ``key`` (cell options ``kw``, layer options ``layer_kw``) with
    its parameters perturbed away from the initialisation (identity and zero inits hide terms
    that vanish there), and its twin on the ``"reference"`` backend."""
    import torch

    from ..cells import CELLS, Recurrent

    torch.manual_seed(seed)
    layer = Recurrent(input_size, hidden_size, cell=CELLS[key], **layer_kw, **kw).double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    ref = copy.deepcopy(layer)
    for c in ref.cells:
        c.backend = "reference"
    return layer, ref


def _forward_backward(layer, x, h0, lengths, r, autocast=None):
    """Outputs, final state leaves and the gradients of (x, h0 leaves, parameters)."""
    import torch

    x = x.clone().requires_grad_()
    h0 = [s.clone().requires_grad_() for s in h0]
    state = h0[0] if len(h0) == 1 else tuple(h0)
    if autocast is not None:
        with torch.autocast(x.device.type, dtype=autocast):
            out, h_n = layer(x, state, lengths)
    else:
        out, h_n = layer(x, state, lengths)
    out, h_n = (
        out.float() if autocast is not None else out,
        [s.float() if autocast is not None else s for s in _leaves(h_n)],
    )
    g = torch.Generator().manual_seed(7)
    loss = (out * r.to(out.device, out.dtype)).sum()
    for s in h_n:
        loss = loss + (s * torch.randn(s.shape, generator=g, dtype=torch.float64).to(s.device, s.dtype)).sum()
    params = list(layer.parameters())
    grads = torch.autograd.grad(loss, [x, *h0, *params], allow_unused=True)
    return [out, *h_n, *grads]


def _inputs(layer, seed=2):
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, B, I, generator=g, dtype=torch.float64)
    proto = layer.cells[0].init_state(B, dtype=torch.float64)
    h0 = [0.5 * torch.randn(1, B, H, generator=g, dtype=torch.float64) for _ in _leaves(proto)]
    r = torch.randn(T, B, H, generator=g, dtype=torch.float64)
    return x, h0, r


def _compare_layer(section, key, kw, device, dtypes, lengths, **layer_kw) -> list[Row]:
    import torch

    path = (
        f"{section} {_label(key, kw)}"
        + (" lengths" if lengths else "")
        + "".join(f" {k}={v}" for k, v in layer_kw.items())
    )
    rows = []
    try:
        layer, ref = perturbed_pair(key, kw, **layer_kw)
        x, h0, r = _inputs(layer)
        lens = torch.tensor(LENGTHS) if lengths else None
        want = _forward_backward(ref, x, h0, lens, r)
    except Exception as e:  # noqa: BLE001 - the reference itself failed: report it
        return [_failed(section, path, dtypes[0], e)]
    for dt in dtypes:
        try:
            dtype = torch.float64 if dt == "float64" else torch.float32
            fast = copy.deepcopy(layer).to(device, dtype)
            note = ""
            cell = fast.cells[0]
            if hasattr(cell, "uses_fast_path") and not cell.uses_fast_path(dtype):
                note = "the cell chose its reference loop here"
            got = _forward_backward(
                fast,
                x.to(device, dtype),
                [s.to(device, dtype) for s in h0],
                lens,
                r,
                autocast=torch.bfloat16 if dt == "bf16-autocast" else None,
            )
            if dt == "bf16-autocast":  # forward: max relative error; backward: 1 - cos (module docstring)
                n = 1 + len(h0)
                fwd, bwd = _error(got[:n], want[:n]), _cosine_gap(got[n:], want[n:])
                note = "; ".join(x for x in (note, f"forward {fwd:.1e}, backward 1-cos {bwd:.1e}") if x)
                rows.append(_row(section, path, dt, max(fwd, bwd) if not math.isnan(fwd + bwd) else math.nan, note))
            else:
                rows.append(_row(section, path, dt, _error(got, want), note))
        except Exception as e:  # noqa: BLE001 - a fast path that raises is a failed check
            rows.append(_failed(section, path, dt, e))
    return rows


def _kernel_rows(device, dtypes) -> list[Row]:
    import torch
    from torch import nn

    from ..kernels import elementwise_rnn, reference_elementwise_rnn, tall_linear

    rows = []
    g = torch.Generator().manual_seed(4)
    u = torch.randn(T, B, H, generator=g, dtype=torch.float64)
    W = torch.randn(H, H, generator=g, dtype=torch.float64) / math.sqrt(H)
    h0 = torch.randn(B, H, generator=g, dtype=torch.float64)
    bias = 0.3 * torch.randn(H, generator=g, dtype=torch.float64)
    r = torch.randn(T, B, H, generator=g, dtype=torch.float64)
    lens = torch.tensor(LENGTHS)
    for act in ("tanh", "relu", "modrelu", "identity"):

        def go(fn, dtype, dev, act=act):
            ins = [t.to(dev, dtype).requires_grad_() for t in (u, W, h0, bias)]
            out, h_n = fn(ins[0], ins[1], ins[2], act, ins[3] if act == "modrelu" else None, lens)
            loss = (out * r.to(dev, dtype)).sum() + h_n.sum()
            grads = torch.autograd.grad(loss, ins if act == "modrelu" else ins[:3])
            return [out, h_n, *grads]

        want = go(reference_elementwise_rnn, torch.float64, "cpu")
        for dt in dtypes:
            if dt == "bf16-autocast":
                continue  # the recurrence runs in float32 under autocast: the float32 row is that case
            try:
                got = go(elementwise_rnn, torch.float64 if dt == "float64" else torch.float32, device)
                rows.append(_row("kernel", f"kernel elementwise_rnn {act} lengths", dt, _error(got, want)))
            except Exception as e:  # noqa: BLE001
                rows.append(_failed("kernel", f"kernel elementwise_rnn {act} lengths", dt, e))
    x = torch.randn(T, B, 5, generator=g, dtype=torch.float64)
    w = torch.randn(H, 5, generator=g, dtype=torch.float64)
    b = torch.randn(H, generator=g, dtype=torch.float64)

    def lin(fn, dtype, dev, autocast=None):
        ins = [t.to(dev, dtype).requires_grad_() for t in (x, w, b)]
        if autocast is not None:
            with torch.autocast(ins[0].device.type, dtype=autocast):
                y = fn(*ins)
        else:
            y = fn(*ins)
        y = y.float() if autocast is not None else y
        return [y, *torch.autograd.grad((y * r.to(dev, y.dtype)).sum(), ins)]

    want = lin(nn.functional.linear, torch.float64, "cpu")
    for dt in dtypes:
        try:
            dtype = torch.float64 if dt == "float64" else torch.float32
            got = lin(tall_linear, dtype, device, torch.bfloat16 if dt == "bf16-autocast" else None)
            rows.append(_row("kernel", "kernel tall_linear", dt, _error(got, want)))
        except Exception as e:  # noqa: BLE001
            rows.append(_failed("kernel", "kernel tall_linear", dt, e))
    return rows


def _train_rows(device, dtypes, cells=None) -> list[Row]:
    import torch
    from torch import nn

    from ..cells import CELLS
    from ..parametrize import after_optimizer_step

    dt = dtypes[0]  # float64 where the device has it, else float32
    rows = []
    firsts = {}
    for key, kw in PATHS:
        firsts.setdefault(key, kw)
    for key in sorted(CELLS):
        if cells is not None and key not in cells:
            continue
        kw = firsts.get(key, {})
        path = f"train {_label(key, kw)}"
        try:
            layer, ref_layer = perturbed_pair(key, kw)
            torch.manual_seed(3)
            readout = nn.Linear(H, 2).double()
            models = []
            for lay, dev, dtype in (
                (layer, device, torch.float64 if dt == "float64" else torch.float32),
                (ref_layer, torch.device("cpu"), torch.float64),
            ):
                models.append((nn.ModuleDict({"rnn": lay, "out": copy.deepcopy(readout)}).to(dev, dtype), dev, dtype))
            x, _, _ = _inputs(layer, seed=5)
            target = torch.randn(B, 2, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
            finals, losses = [], []
            for model, dev, dtype in models:
                opt = torch.optim.SGD(model.parameters(), lr=TRAIN_LR)
                for _ in range(2):
                    out, _ = model["rnn"](x.to(dev, dtype))
                    loss = (model["out"](out[-1]) - target.to(dev, dtype)).pow(2).mean()
                    reg = model["rnn"].regularization()
                    if reg is not None:
                        loss = loss + reg
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    after_optimizer_step(model)
                    losses.append(loss.item())
                finals.append([p for p in model.parameters()])
            if not all(math.isfinite(v) for v in losses):
                raise FloatingPointError(f"a training loss is not finite: {losses}")
            rows.append(_row("train", path, dt, _error(*finals), f"loss {losses[0]:.4g} -> {losses[1]:.4g}"))
        except Exception as e:  # noqa: BLE001
            rows.append(_failed("train", path, dt, e))
    return rows


# --- the Triton kernel ----------------------------------------------------------------------


def triton_rows(
    device: torch.device,
    dtypes=("float32", "float64"),
    hiddens=(20,),
    activations=("tanh", "relu", "modrelu", "identity"),
) -> list[Row]:
    """The Triton kernel (unguarded) against the fused loop in float64, in this process: on a
    CUDA device, or on the CPU when this process runs Triton's interpreter. Forward (states) and
    backward (gradients) are separate rows; on CUDA the compiled kernels' registers and spills
    are noted where Triton reports them."""
    import torch

    from ..kernels import triton_recurrence as tr
    from ..kernels.families import rnn as recurrence

    rows = []
    for dt in dtypes:
        dtype = getattr(torch, dt)
        for hidden in hiddens:
            for act in activations:
                for has_len in (False, True):
                    path = f"triton H={hidden} {act}" + (" lengths" if has_len else "")
                    try:
                        errs, tol = tr.compare(
                            recurrence._ElementwiseRNN, device, dtype, hidden, act, has_len, split=True
                        )
                    except Exception as e:  # noqa: BLE001 - a kernel that does not run
                        rows.append(_failed("triton", path + " forward+backward", dt, e))
                        continue
                    block = tr._block_h(hidden)
                    for part in ("forward", "backward"):
                        res = tr.RESOURCES.get((part, dtype, block, act))
                        note = f"{res[0]} registers, {res[1]} spills" if res else ""
                        rows.append(Row("triton", f"{path} {part}", dt, errs[part], tol, bool(errs[part] <= tol), note))
    return rows


def _triton_section(device: torch.device, dtypes: list[str], quick: bool) -> list[Row]:
    try:
        import importlib.util

        have = importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        have = False
    if not have:
        return [
            Row(
                "triton",
                "triton kernel",
                "-",
                None,
                None,
                None,
                "skipped: Triton is not installed (pip install 'rnnlab[triton]')",
            )
        ]
    kernel_dtypes = [d for d in dtypes if d in ("float32", "float64")]
    if device.type == "cuda":
        import torch

        from ..kernels import triton_recurrence as tr

        budget = tr.device_budget(device)
        out = []
        for dt in kernel_dtypes:
            limit = tr.hidden_limit(getattr(torch, dt), budget)
            if limit == 0:
                out.append(
                    Row(
                        "triton",
                        "triton kernel",
                        dt,
                        None,
                        None,
                        None,
                        f"not dispatched on {budget.name} (compute capability {budget.capability}); "
                        "the fused loop runs instead",
                    )
                )
                continue
            # at the device's limit (the small sizes run in every cell row through the guard)
            out += triton_rows(
                device, (dt,), (limit,), ("tanh", "modrelu") if quick else ("tanh", "relu", "modrelu", "identity")
            )
        return out
    if device.type != "cpu":
        return [Row("triton", "triton kernel", "-", None, None, None, f"skipped: no Triton kernel on {device.type}")]
    if os.environ.get("TRITON_INTERPRET") == "1" and "triton" in sys.modules:
        return triton_rows(device, tuple(kernel_dtypes), activations=_interpreted_activations(quick))
    return _interpreted(kernel_dtypes, quick)


def _interpreted_activations(quick: bool):
    return ("tanh", "modrelu") if quick else ("tanh", "relu", "modrelu", "identity")


def _interpreted(dtypes: list[str], quick: bool) -> list[Row]:
    """The Triton rows on the CPU: a subprocess under Triton's interpreter."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("RNNLAB_TRITON", None)
    code = (
        "import json, torch; from rnnlab.bench import doctor; from dataclasses import asdict; "
        f"rows = doctor.triton_rows(torch.device('cpu'), {tuple(dtypes)!r}, "
        f"activations=doctor._interpreted_activations({quick!r})); "
        "print('ROWS=' + json.dumps([asdict(r) for r in rows]))"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900, check=False
        )
    except subprocess.TimeoutExpired:
        return [Row("triton", "triton kernel (interpreter)", "-", None, None, False, "timed out after 900 s")]
    for line in proc.stdout.splitlines():
        if line.startswith("ROWS="):
            rows = [Row(**r) for r in json.loads(line[5:])]
            for r in rows:
                r.note = ("interpreter; " + r.note) if r.note else "interpreter"
            return rows
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return [Row("triton", "triton kernel (interpreter)", "-", None, None, False, f"subprocess failed: {last}"[:160])]


def kernel_table(
    device: torch.device, hiddens=(32, 64, 128, 192, 256), T: int = 512, batch: int = 128, repeats: int = 5
) -> str:
    """On CUDA (or under Triton's interpreter, for the tests): for float32 and float64 and each H, the Triton kernel forced (unguarded, also
    past the automatic limit) against the fused loop: the compiled kernels' registers and spills
    (Triton's report), the estimate of docs/device.md, the median milliseconds of one forward and
    backward at (T, batch, H), and the largest difference of the states from the fused loop's.
    A Markdown table; on other devices one line saying why there is none."""
    import torch

    interpreted = device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1" and "triton" in sys.modules
    if device.type != "cuda" and not interpreted:  # the interpreter: the tests' way to run this code
        return f"(no kernel table: it needs a CUDA device, not {device})"
    from ..device import synchronize
    from ..kernels import triton_recurrence as tr
    from ..kernels.families import rnn as recurrence

    budget = tr.device_budget(device)
    title = (
        f"Triton kernel on {budget.name} (compute capability {budget.capability}, "
        f"{budget.registers_per_sm} registers/SM, {budget.shared_per_block // 1024} KiB shared/block), "
        f"T={T}, batch {batch}, tanh, forward + backward:"
    )
    header = (
        "| dtype | H | automatic limit | est. registers/thread | registers fwd/bwd | spills fwd/bwd | "
        "kernel ms | fused loop ms | max diff |"
    )
    lines = [title, "", header, "|---|---|---|---|---|---|---|---|---|"]

    def timed(fn):
        for _ in range(2):
            fn()
        synchronize(device)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            times.append(time.perf_counter() - t0)
        return 1e3 * sorted(times)[len(times) // 2]

    for dtype in (torch.float32, torch.float64):
        limit = tr.hidden_limit(dtype, budget)
        for hidden in hiddens:
            g = torch.Generator().manual_seed(0)
            u = torch.randn(T, batch, hidden, generator=g, dtype=dtype).to(device).requires_grad_()
            W = (torch.randn(hidden, hidden, generator=g, dtype=dtype) / math.sqrt(hidden)).to(device).requires_grad_()
            h0 = torch.zeros(batch, hidden, dtype=dtype, device=device, requires_grad=True)

            def step(fn, u=u, W=W, h0=h0):
                S = fn(u, W, h0)
                S.sum().backward()
                return S

            def kernel(u, W, h0):
                return tr.TritonElementwiseRNN.apply(u, W, h0, None, None, "tanh", None)

            def fused(u, W, h0):
                return recurrence._ElementwiseRNN.apply(u, W, h0, None, None, "tanh")

            block = tr._block_h(hidden)
            est = f"{tr.registers_per_thread(block, dtype):.0f}"
            try:
                diff = (step(kernel) - step(fused)).abs().max().item()
                k_ms, f_ms = timed(lambda: step(kernel)), timed(lambda: step(fused))
                res = [tr.RESOURCES.get((kind, dtype, block, "tanh")) for kind in ("forward", "backward")]
                regs = "/".join(str(r[0]) if r else "?" for r in res)
                spills = "/".join(str(r[1]) if r else "?" for r in res)
                lines.append(
                    f"| {str(dtype)[6:]} | {hidden} | {limit} | {est} | {regs} | {spills} | {k_ms:.2f} | "
                    f"{f_ms:.2f} | {diff:.1e} |"
                )
            except Exception as e:  # noqa: BLE001 - a block that does not compile is a result here
                text = str(e).strip().splitlines()[0] if str(e).strip() else ""
                lines.append(
                    f"| {str(dtype)[6:]} | {hidden} | {limit} | {est} | failed: {type(e).__name__}: "
                    f"{text[:80]} | | | | |"
                )
            finally:
                u.grad = W.grad = h0.grad = None
    return "\n".join(lines)


# --- the whole check ------------------------------------------------------------------------

SECTIONS = ("kernel", "cell", "checkpoint", "triton", "train")


def run(
    device: str | torch.device = "auto", quick: bool = False, sections=SECTIONS, cells: tuple[str, ...] | None = None
) -> list[Row]:
    """Every check on ``device`` ("auto", "cpu", "cuda", "cuda:N", "mps" or a torch.device);
    ``quick``: without lengths rows and with fewer checkpoint and Triton rows; ``sections``: a
    subset of :data:`SECTIONS`; ``cells``: only these cell families (keys of ``rnnlab.CELLS``)
    in the cell, checkpoint and train sections."""
    import torch

    from ..cells import CELLS
    from ..device import check_settings, resolve_device

    device = device if isinstance(device, torch.device) else resolve_device(str(device), what="--device")
    check_settings()  # a misspelt RNNLAB_TRITON is a setting to fix, not a kernel mismatch
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown doctor sections {sorted(unknown)}; expected some of {', '.join(SECTIONS)}")
    if cells is not None:
        unknown = set(cells) - set(CELLS)
        if unknown:
            raise ValueError(f"unknown cells {sorted(unknown)}; expected some of {', '.join(sorted(CELLS))}")
    paths = [p for p in PATHS if cells is None or p[0] in cells]
    dtypes = _dtypes(device)
    rows: list[Row] = []
    if "kernel" in sections:
        rows += _kernel_rows(device, dtypes)
    if "cell" in sections:
        for key, kw in paths:
            for lengths in (False,) if quick else (False, True):
                rows += _compare_layer("cell", key, kw, device, dtypes, lengths)
    if "checkpoint" in sections:
        chosen = [p for p in paths if p[0] in ("rnn", "lstm", "dmu", "asrnn")]
        for key, kw in chosen[:1] if quick else chosen:
            rows += _compare_layer("checkpoint", key, kw, device, dtypes[:1], True, checkpoint_chunk=4)
    if "triton" in sections:
        rows += _triton_section(device, dtypes, quick)
    if "train" in sections:
        rows += _train_rows(device, dtypes, cells)
    return rows + _guard_rows()


def _guard_rows() -> list[Row]:
    """What the Triton guard decided in this process while the checks ran (the cell rows on CUDA
    dispatch to the kernel): a shape class that failed its self-check, or a kernel disabled
    after a failed launch, is a mismatch even though the fused loop then gave the right answer."""
    tr = sys.modules.get(f"{__package__.rpartition('.')[0]}.kernels.triton_recurrence")  # rnnlab.kernels
    if tr is None:
        return []
    rows = []
    for key, reason in tr.CHECKED.items():
        device, dtype, block, act, has_len = key
        path = f"triton guard {device} H<={block} {act}" + (" lengths" if has_len else "")
        rows.append(
            Row(
                "triton",
                path,
                dtype,
                None,
                None,
                reason is None,
                "self-check passed, the kernel ran" if reason is None else f"fell back: {reason}",
            )
        )
    if tr.DISABLED is not None:
        rows.append(Row("triton", "triton guard", "-", None, None, False, f"kernel disabled: {tr.DISABLED}"[:160]))
    return rows


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table (path, dtype, max error, tolerance, ok, note)."""
    lines = ["| path | dtype | max error | tolerance | ok | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        err = "-" if r.error is None else ("nan" if math.isnan(r.error) else f"{r.error:.1e}")
        tol = "-" if r.tolerance is None else f"{r.tolerance:.0e}"
        ok = "skipped" if r.ok is None else ("ok" if r.ok else "**MISMATCH**")
        lines.append(f"| {r.path} | {r.dtype} | {err} | {tol} | {ok} | {r.note} |")
    return "\n".join(lines)


def summary(rows: list[Row], device: torch.device | str, seconds: float) -> str:
    bad = [r for r in rows if r.ok is False]
    skipped = sum(r.ok is None for r in rows)
    head = (
        f"{len(rows) - len(bad) - skipped} ok, {len(bad)} mismatched, {skipped} skipped on {device} in {seconds:.0f} s"
    )
    return head + ("" if not bad else "; mismatched: " + ", ".join(f"{r.path} ({r.dtype})" for r in bad))


def environment(device: torch.device) -> str:
    """One line naming what was checked: torch, Triton, the device."""
    import torch

    try:
        import importlib.metadata as md

        triton_version = md.version("triton")
    except Exception:  # noqa: BLE001 - not installed
        triton_version = "not installed"
    from ..device import conditions

    cond = conditions(device)
    extra = f", CUDA {cond['cuda']}, cuDNN {cond['cudnn']}" if device.type == "cuda" else ""
    return (
        f"rnnlab doctor on {device} ({cond['device_name']}{extra}); torch {torch.__version__}, triton {triton_version}"
    )


def add_arguments(p) -> None:
    """The options of ``rnnlab doctor``."""
    p.add_argument(
        "--device", default="auto", help="where to check: auto, cpu, cuda, cuda:N or mps, e.g. --device cuda"
    )
    p.add_argument(
        "--quick", action="store_true", help="no lengths rows, fewer checkpoint and Triton rows, e.g. in a test"
    )
    p.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)}, e.g. --sections cell,triton",
    )
    p.add_argument(
        "--cells",
        help="comma-separated cell families for the cell, checkpoint and train sections "
        "(default: all), e.g. --cells asrnn,lstm",
    )
    p.add_argument(
        "--kernel-table",
        action="store_true",
        help="CUDA only: also the Triton kernel's registers, spills and time against the fused loop "
        "for H = 32 ... 256 (forced past the limit), e.g. to check the documented register arithmetic (device.md)",
    )
    p.add_argument(
        "--dispatch",
        action="store_true",
        help="print only the dispatch table (each recurrence family's paths, where they live, its rule) "
        "and run no check, e.g. rnnlab doctor --dispatch",
    )
    p.add_argument("-o", "--output", help="also write every row to this file, e.g. -o doctor.md")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print every row, not only the summary and the mismatches, e.g. rnnlab doctor -v",
    )


def main_doctor(
    device: str = "auto",
    quick: bool = False,
    sections: str = ",".join(SECTIONS),
    cells: str | None = None,
    with_kernel_table: bool = False,
    output: str | None = None,
    verbose: bool = False,
    dispatch: bool = False,
) -> int:
    """Print the answer (``rnnlab doctor``): what was checked, the one-line summary, then the rows
    that mismatched; every row and the dispatch table with ``verbose`` (and always in
    ``output``). 0 when every row is ok or skipped, 1 on a mismatch. ``dispatch``: print only
    the dispatch table (:func:`rnnlab.kernels.dispatch.table`, then which ensembles run outside
    ``vmap``: :func:`rnnlab.stacked_model.direct_summary`), check nothing, 0."""
    import warnings

    from ..cells import ThreadsWarning
    from ..device import resolve_device
    from ..kernels.dispatch import table as kernel_dispatch
    from ..stacked_model import direct_summary

    def dispatch_table():
        return kernel_dispatch() + "\n" + direct_summary()

    if dispatch:
        print(dispatch_table())
        return 0

    where = resolve_device(device, what="--device")
    picked = tuple(s.strip() for s in sections.split(",") if s.strip())
    families = tuple(c.strip() for c in cells.split(",") if c.strip()) if cells else None
    start = time.perf_counter()
    with warnings.catch_warnings():
        # the checks run tiny layers on purpose: rnnlab's advice on threads for speed is not the
        # user's to act on here
        warnings.simplefilter("ignore", ThreadsWarning)
        rows = run(where, quick=quick, sections=picked, cells=families)
    head = [environment(where), summary(rows, where, time.perf_counter() - start)]
    full = [*head, "", table(rows), "", dispatch_table()]
    if with_kernel_table:
        full += ["", kernel_table(where)]
    bad = [r for r in rows if r.ok is False]
    if verbose:
        shown = full
    else:
        where_all = f"written to {output}" if output else "printed with -v"
        shown = head + (["", table(bad)] if bad else []) + [f"(all {len(rows)} rows: {where_all})"]
        if with_kernel_table:
            shown += ["", kernel_table(where)]
    print("\n".join(shown))
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write("\n".join(full) + "\n")
    return 1 if bad else 0
