"""Tiny recurrences at the speed of their arithmetic: compiled forward and BPTT loops.

A model of 2 to 6 units (the DMU paper's synthetic tasks) does microseconds of arithmetic per
time step, and a PyTorch loop over time spends several times that on each operation it
launches, forward and backward. Here the whole loop over time of a layer, and its backward
pass with the gradient of every weight, is one call into plain C (``small.c``), for the
vanilla RNN (tanh, relu), the LSTM, the GRU, the RHN and the DMU, with ``lengths`` and an
initial state. This module builds, caches and calls the C code and makes a C pair's declaration
an autograd Function (:func:`_kernel`); each family's declaration (a :class:`_Family`), its
Function, its wrapper (``compiled_rnn``, ``compiled_lstm``, ...) and the recurrence in PyTorch
operations that gives its second order are in its module of :mod:`rnnlab.kernels.families`. The same call serves a single run and an ensemble: the tensors carry the
members first (:func:`rnnlab.kernels.ensemble.ensemble_call` steps out of ``vmap`` into it),
each member with its own weights.

The C source ships with the package and is compiled with the system's C compiler (``cc``, or
``$CC``) the first time a tiny recurrence runs, never at import, into
``$XDG_CACHE_HOME/rnnlab/kernels`` (default ``~/.cache/rnnlab/kernels``; ``RNNLAB_KERNEL_CACHE``
overrides), keyed by the source and the compiler, so later processes load it at once; each
build is recorded with its SHA-256, and one cut short or changed since (loading it could kill the
process with a bus error) is rebuilt, with a note. Where
there is no compiler (or it fails), a one-line note says so and the cells run their PyTorch
paths: the same results, slower.

The cells choose this path with their ``backend`` option, by the rule of
:mod:`rnnlab.kernels.dispatch`: ``"auto"`` (the default) takes it on the CPU, in float32 or
float64, without autocast, for widths up to :data:`rnnlab.kernels.dispatch.AUTO_MAX_WIDTH`
(measured per cell); ``"small"`` takes it at any width; any other backend never does. Every compiled loop equals
the cells' step loop (tests/kernels/test_small.py: outputs, final states and every gradient
to 1e-10 in float64).

Shapes (per member, as :mod:`rnnlab.kernels.ensemble`): ``u`` (T, B, G) the input terms of
all steps, weights as the cells store them, ``h0`` (B, H), ``lengths`` (B,) or None.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from .host import cpuinfo, platform_name
from .small_abi import DECLARATIONS, bind, call, check_source, shape_of

__all__ = ["SOURCE", "available", "library"]

#: the C source, compiled at first use
SOURCE = Path(__file__).with_name("small.c")
#: the build: -march=native because the library is built where it runs (the key holds the CPU)
FLAGS = ("-O3", "-march=native", "-std=gnu99", "-shared", "-fPIC")
_ACT = {"tanh": 0, "relu": 1, "identity": 2}
#: whether the lane kernels' backward reads the outputs' gradient in the batch-first memory a
#: readout hands it (False: a contiguous time-major copy first, the path before; for benchmarks)
READ_BATCH_FIRST = True

log = logging.getLogger(__name__)

_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL | None] = {}
_noted: set[str] = set()


def _note(key: str, text: str) -> None:
    if key not in _noted:
        _noted.add(key)
        log.warning(text)


def cache_dir() -> Path:
    """Where the compiled kernels are kept: ``$RNNLAB_KERNEL_CACHE``, else
    ``$XDG_CACHE_HOME/rnnlab/kernels`` (``~/.cache/rnnlab/kernels``)."""
    env = os.environ.get("RNNLAB_KERNEL_CACHE")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "rnnlab" / "kernels"


def _cpu() -> str:
    """The CPU's model and instruction sets (the cache key of a -march=native build)."""
    info = cpuinfo()
    if not info:
        return platform_name()
    return f"{info.get('model name', '')}\n{info.get('flags', '')}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cached(folder: Path, stem: str) -> tuple[Path | None, Path | None]:
    """(the cached build of ``stem``, whole and unchanged; else None, and the damaged or missing
    file the cache's record names, if any). A build is a file named by its content's hash, and
    the record ``stem.sha256`` holds that hash: a file cut short or changed since it was built
    (loading one can kill the process with a bus error) does not match it."""
    try:
        digest = (folder / f"{stem}.sha256").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None, None
    lib = folder / f"{stem}-{digest[:16]}.so"
    try:
        if len(digest) == 64 and _sha256(lib) == digest:
            return lib, None
    except OSError:
        pass
    return None, lib


def _build(cc: str, flags: tuple, folder: Path, stem: str) -> Path:
    """Compile ``small.c`` into ``folder`` and record the build's hash (both written atomically:
    a concurrent process loads a whole file or builds its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    try:
        done = subprocess.run([cc, *flags, str(SOURCE), "-o", tmp, "-lm"], capture_output=True, text=True, timeout=300)
        said = " ".join((done.stderr or done.stdout).split())[:300]
        if done.returncode != 0:
            raise RuntimeError(
                f"{cc} exited with status {done.returncode}" + (f": {said}" if said else " and printed nothing")
            )
        head = Path(tmp).read_bytes()[:4]
        if head not in (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"MZ\x90\x00"):
            size = os.path.getsize(tmp)
            raise RuntimeError(
                f"{cc} exited with status 0 but wrote {'nothing' if size == 0 else f'{size} bytes that are not a shared library'}"
                + (f" (it printed: {said})" if said else "")
            )
        digest = _sha256(Path(tmp))
        lib = folder / f"{stem}-{digest[:16]}.so"
        os.replace(tmp, lib)
        record = folder / f"{stem}.sha256.{os.getpid()}.tmp"
        record.write_text(digest + "\n")
        os.replace(record, folder / f"{stem}.sha256")
        return lib
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _compile(kind: str) -> ctypes.CDLL | None:
    cc = shutil.which(os.environ.get("CC") or "cc")
    if cc is None:
        _note(
            "cc",
            "no C compiler (cc) found, so tiny recurrences run on their PyTorch paths (the same results, "
            "slower); install one (e.g. apt-get install gcc) for the compiled loops of rnnlab.kernels.small",
        )
        return None
    folder = cache_dir()
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout
        flags = (*FLAGS, "-DSINGLE") if kind == "f32" else FLAGS
        parts = [SOURCE.read_text(), cc, version, *flags, _cpu()]
        stem = f"small-{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:16]}-{kind}"
        lib, damaged = _cached(folder, stem)
        if lib is None:
            lib = _build(cc, flags, folder, stem)
            if damaged is not None:
                if damaged != lib:
                    with contextlib.suppress(OSError):
                        damaged.unlink()
                _note(
                    f"damaged-{kind}",
                    f"the compiled loops in {damaged} were missing, cut short or changed since they were built; "
                    f"rebuilt them as {lib.name}",
                )
        return bind(ctypes.CDLL(str(lib)), torch.float32 if kind == "f32" else torch.float64)
    except OSError as e:  # the cache folder: not writable, a file, full
        where = e.filename or folder
        if not str(where).startswith(str(folder)):
            return _not_built(cc, e)
        _note(
            "compile",
            f"the compiled loops of rnnlab.kernels.small could not be built in {where} ({e.strerror or e}); "
            f"tiny recurrences run on their PyTorch paths (the same results, slower); set RNNLAB_KERNEL_CACHE "
            f"to a writable folder for them",
        )
        return None
    except Exception as e:  # noqa: BLE001 - any failure means: the PyTorch path
        return _not_built(cc, e)


def _not_built(cc: str, e: Exception) -> None:
    _note(
        "compile",
        f"the compiled loops of rnnlab.kernels.small could not be built with {cc} ({type(e).__name__}: {e}); "
        f"tiny recurrences run on their PyTorch paths (the same results, slower)",
    )


def library(dtype: torch.dtype) -> ctypes.CDLL | None:
    """The compiled kernels for ``dtype`` (float32 or float64), built on first use; None where
    they cannot be (no compiler: a note says so once)."""
    kind = {torch.float64: "f64", torch.float32: "f32"}.get(dtype)
    if kind is None:
        return None
    with _lock:
        if kind not in _libs:
            check_source(SOURCE)  # a prototype that differs from small_abi.py fails here, before any build
            _libs[kind] = _compile(kind)
        return _libs[kind]


def available() -> bool:
    """Whether the compiled loops can run here (compiles them on the first call)."""
    return library(torch.float64) is not None and library(torch.float32) is not None


# ---------------------------------------------------------------------------- calls into C


def _call(name: str, dtype: torch.dtype, *args) -> None:
    """Call the C function ``name`` of the ``dtype`` build, every argument checked first
    against its declaration (:mod:`rnnlab.kernels.small_abi`)."""
    call(library(dtype), name, dtype, *args)


def _lens(lengths: Tensor | None) -> Tensor | None:
    return None if lengths is None else lengths.to(torch.int64).contiguous()


def _masked(S: Tensor, lengths: Tensor | None) -> Tensor:
    """The outputs: the states, zero from each sequence's length on."""
    if lengths is None:
        return S
    T = S.shape[1]
    mask = torch.arange(T, device=S.device)[None, :, None] < lengths.to(S.device, torch.int64)[:, None, :]
    return S * mask.unsqueeze(-1).to(S.dtype)


def _gram(dZ: Tensor, S: Tensor, h0: Tensor) -> Tensor:
    """A weight's gradient ``sum_{t, b} dz_t h_{t-1}^T`` per member, one batched product:
    ``dZ`` (E, T, B, G), the states ``S`` (E, T, B, H) after each step, ``h0`` (E, B, H)."""
    E, T, B, H = S.shape
    prev = torch.cat([h0.unsqueeze(1), S[:, :-1]], 1).reshape(E, T * B, H)
    return torch.bmm(dZ.reshape(E, T * B, -1).transpose(1, 2), prev)


def _c(*ts):
    return [None if t is None else t.contiguous() for t in ts]


# ---------------------------------------------------------------------------- second order

# The compiled backward builds no graph. When a graph of the backward is asked for
# (``create_graph=True``: gradient penalties, Hessian-vector products), the gradients are those
# of the same recurrence written in PyTorch operations (its family's ``_reference`` in
# rnnlab.kernels.families, masked with the helpers below), recomputed from the saved inputs,
# so that second-order gradients are exact (tests/kernels/test_second_order.py).


def _step_mask(lens, t: int, h):  # (E, B, 1): the step counts (t < length)
    return None if lens is None else (t < lens).unsqueeze(-1)


def _keep(new, old, mask):
    return new if mask is None else torch.where(mask, new, old)


def _outputs(reference: Callable, lanes: bool, lens_at: int) -> Callable:
    """``reference`` returning what a Function returns: the states as they are (a scalar loop),
    or (a lane kernel) the outputs, zero from each length on, and the final states."""
    if not lanes:
        return reference

    def outputs(*args):
        got = reference(*args)
        S, rest = (got[0], got[1:]) if isinstance(got, tuple) else (got, ())
        return (_masked(S, args[lens_at]), S[:, -1], *(x[:, -1] for x in rest))

    return outputs


def _second_order(reference, args: tuple, grads: tuple) -> tuple:
    """The gradients of ``reference(*args)`` (the recurrence in PyTorch operations) with their
    graph, for a backward of which a graph is asked (the compiled one builds none)."""
    want = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
    with torch.enable_grad():
        outs = reference(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
        got = torch.autograd.grad(
            [o for o, _ in pairs], [args[i] for i in want], [g for _, g in pairs], create_graph=True, allow_unused=True
        )
    result: list = [None] * len(args)
    for i, g in zip(want, got):
        result[i] = g
    return tuple(result)


# ---------------------------------------------------------------------------- the autograd Functions

# One Function per C pair ``<name>_forward`` / ``<name>_backward``, made by :func:`_kernel` from
# the pair's declaration (:mod:`rnnlab.kernels.small_abi`): each C argument is taken by its
# declared name from the Function's inputs, the sizes, the saved tensors and the incoming
# gradients, and each tensor the C code writes (an argument found in none of them) is allocated
# at its declared shape. The forward saves for the backward what the C backward reads of its tensors.

_NO_GRAD = ("act", "slope", "lens")  # the inputs that are not differentiable tensors
_GRAD_NAME = {"u": "dU", "u1": "dU1"}  # the C names of the input terms' gradients; the others': "d" + name
_HIDDEN = "*hidden"  # the DMU's hidden layers as (weight, bias) pairs, flat: the C arrays Wk and bk
_SIZES = ("E", "T", "B", "H", "D", "K", "n")  # the size arguments (n: the DMU's layer widths)


@dataclass(frozen=True)
class _Family:
    """A C pair ``name``_forward/_backward as an autograd Function: ``apply(*inputs)`` (the
    declared names) returns ``outputs``; ``H`` is the input terms' width over ``gates`` (0: the
    initial state's width); a scalar loop's ``finish(env)`` makes in PyTorch the gradients its C
    code leaves out, from ``keep`` (saved besides what the C backward reads); ``reference``, the
    recurrence in PyTorch operations, gives second order."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    reference: Callable
    gates: int
    keep: tuple[str, ...] = ()
    finish: Callable[[dict], None] | None = None


class _Plan(NamedTuple):
    """What stays from call to call of one Function (:func:`_plan`)."""

    forward: str  # the C functions
    backward: str
    forward_names: tuple[str, ...]  # their arguments' names, in order
    backward_names: tuple[str, ...]
    saved: tuple[str, ...]  # what the forward saves: its tensors the C backward reads, and ``keep``
    made: tuple[str, ...]  # the tensors the forward writes
    made_back: tuple[str, ...]  # the tensors the backward writes
    grads: tuple[str | None, ...]  # each input's gradient (None: not differentiable; the DMU's layers last)
    depth: bool  # the RHN's D among the sizes
    widths: bool  # the DMU's K and n among the sizes


def _plan(family: _Family) -> _Plan:
    fwd, bwd = DECLARATIONS[family.name + "_forward"], DECLARATIONS[family.name + "_backward"]
    inputs = {n for n in family.inputs if n != _HIDDEN} | ({"Wk", "bk"} if _HIDDEN in family.inputs else set())
    made = tuple(a.name for a in fwd if a.shape is not None and a.name not in inputs | set(_SIZES))
    saved = [a.name for a in bwd if a.name in inputs | set(made) and a.name not in _NO_GRAD]
    known = {*inputs, *made, *_SIZES, *(f"d{o}" for o in family.outputs)}
    names = tuple(a.name for a in fwd)
    return _Plan(
        family.name + "_forward",
        family.name + "_backward",
        names,
        tuple(a.name for a in bwd),
        tuple(dict.fromkeys((*saved, *family.keep))),
        made,
        tuple(a.name for a in bwd if a.shape is not None and a.name not in known),
        tuple(None if n in _NO_GRAD else _GRAD_NAME.get(n, "d" + n) for n in family.inputs if n != _HIDDEN),
        "D" in names,
        "K" in names,
    )


def _bind(family: _Family, plan: _Plan, args: tuple) -> tuple[dict, tuple]:
    """The Function's arguments by their declared names with the size arguments, and the sizes
    as ``(name, value)`` pairs (the DMU's widths a tuple)."""
    env = dict(zip(family.inputs, args))
    u = env["u"] if "u" in env else env["u1"]
    E, T, B, G = u.shape
    sizes = [("E", E), ("T", T), ("B", B), ("H", G // family.gates if family.gates else env["h0"].shape[-1])]
    if plan.depth:
        sizes.append(("D", env["W"].shape[1]))
    if plan.widths:
        hidden = args[len(family.inputs) - 1 :]
        env["Wk"], env["bk"] = list(hidden[0::2]), list(hidden[1::2])
        K, n = _dmu_sizes(u, env["wout"], env["Wk"])
        sizes += [("K", K), ("n", tuple(n))]
    env.update(sizes)
    return env, tuple(sizes)


def _dmu_sizes(u1, w_out, Ws):
    K = 0 if w_out is None else 1 + len(Ws)
    return K, ([u1.shape[-1]] + [W.shape[1] for W in Ws] if K else [])


@functools.lru_cache(maxsize=512)
def _buffers(fn: str, made: tuple[str, ...], sizes: tuple) -> tuple:
    """The tensors ``made`` that ``fn`` writes, at ``sizes`` (:func:`_bind`): ``(name, shape,
    zero)``, the shape a list for a pointer array and None for a NULL; a backward's weight
    gradients, which the C code sums over the batch, start at zero (the others it writes whole)."""
    env, zeroed = dict(sizes), fn.endswith("_backward")
    out = []
    for a in DECLARATIONS[fn]:
        if a.name in made:
            summed = zeroed and "B" not in (d.strip() for d in a.shape.split(","))
            out.append((a.name, shape_of(a, env), summed))
    return tuple(out)


def _run(fn: str, names: tuple, made: tuple, env: dict, sizes: tuple, like: Tensor) -> None:
    """Call ``fn`` (its argument ``names``) with its arguments from ``env``, first allocating
    (like ``like``) the tensors it writes (:func:`_buffers`)."""
    for name, shape, summed in _buffers(fn, made, sizes):
        new = like.new_zeros if summed else like.new_empty
        env[name] = None if shape is None else [new(s) for s in shape] if isinstance(shape, list) else new(shape)
    _call(fn, like.dtype, *[env[n] for n in names])


def _forward(ctx, family: _Family, plan: _Plan, args: tuple):
    env, ctx.sizes = _bind(family, plan, args)
    _run(plan.forward, plan.forward_names, plan.made, env, ctx.sizes, env["u"] if "u" in env else env["u1"])
    if plan.widths:  # the arrays saved flat, each of K - 1 tensors
        ctx.save_for_backward(*(t for n in plan.saved for t in (env[n] if n in ("Wk", "bk") else [env[n]])))
    else:
        ctx.save_for_backward(*[env[n] for n in plan.saved])
    ctx.env = {n: env[n] for n in _NO_GRAD if n in env}
    ctx.shapes, ctx.dtype = {o: env[o].shape for o in family.outputs}, env[family.outputs[0]].dtype
    ctx.args = args
    return tuple(env[o] for o in family.outputs) if len(family.outputs) > 1 else env[family.outputs[0]]


def _saved(ctx, plan: _Plan) -> dict:
    env = dict(ctx.sizes)
    env.update(ctx.env)
    tensors = ctx.saved_tensors
    if not plan.widths:
        env.update(zip(plan.saved, tensors))
        return env
    count, i = env["K"] - 1 if env["K"] else 0, 0
    for n in plan.saved:
        step = count if n in ("Wk", "bk") else 1
        env[n] = list(tensors[i : i + step]) if n in ("Wk", "bk") else tensors[i]
        i += step
    return env


def _backward(ctx, family: _Family, plan: _Plan, grads: tuple) -> tuple:
    if torch.is_grad_enabled():
        lanes = "_lanes" in family.name
        return _second_order(_outputs(family.reference, lanes, family.inputs.index("lens")), ctx.args, grads)
    env = _saved(ctx, plan)
    if "batch_first" in plan.backward_names:  # a lane backward reads a batch-first gradient as it is
        g = grads[0]
        bf = READ_BATCH_FIRST and g is not None and not g.is_contiguous() and g.transpose(1, 2).is_contiguous()
        env["batch_first"] = int(bf)
    for out, g in zip(family.outputs, grads):  # (kept in env across the call: the C code reads their memory)
        if g is None:
            g = torch.zeros(ctx.shapes[out], dtype=ctx.dtype)
        env["d" + out] = g.transpose(1, 2) if out == "S" and env.get("batch_first") else g.contiguous()
    _run(plan.backward, plan.backward_names, plan.made_back, env, ctx.sizes, env["dS"])
    if family.finish is not None:
        family.finish(env)
    result = [None if n is None else env[n] for n in plan.grads]
    if plan.widths:
        result += [g for pair in zip(env["dWk"], env["dbk"]) for g in pair]
    return tuple(result)


def _kernel(cls: str, family: _Family, doc: str | None = None) -> type[torch.autograd.Function]:
    """The autograd Function (named ``cls``) of ``family``."""
    plan = _plan(family)
    body = {
        "__doc__": doc,
        "forward": staticmethod(lambda ctx, *args: _forward(ctx, family, plan, args)),
        "backward": staticmethod(lambda ctx, *grads: _backward(ctx, family, plan, grads)),
    }
    return type(cls, (torch.autograd.Function,), body)


def _weight_from_dU(env: dict) -> None:
    env["dW"] = _gram(env["dU"], env["S"], env["h0"])
