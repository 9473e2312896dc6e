"""The C functions of ``small.c``, declared once: the prototypes are checked against this
declaration before any build, the ``ctypes`` signatures are set from it, and every call is
checked against it before C reads a byte.

Each function is declared as its arguments in order, each with its C type as ``small.c``
writes it (``R`` is the real type: ``double`` in the ``_f64`` build, ``float`` in ``_f32``), and
for the tensors the shape the C code reads or writes, as an expression of the size arguments
(``n`` is the DMU's list of layer widths, ``G1`` the width of its first layer's output,
``NSUM`` the sum of its widths). An argument the C code accepts as NULL says when
(``null=True``: may be; ``null="K == 0"``: exactly then).

* :func:`check_source` parses the prototypes of ``small.c`` and compares them with
  :data:`DECLARATIONS` (names, count, order and type of every argument); a difference raises
  :class:`SignatureError` naming the function and the argument. :mod:`rnnlab.kernels.small`
  calls it before it compiles anything.
* :func:`bind` sets ``argtypes`` and ``restype`` of the loaded library's functions.
* :func:`call` checks one call (sizes are ints of the right sign, reals are floats, each
  tensor is a CPU tensor of the build's dtype (lengths: int64), contiguous, of the declared
  shape; NULL only where allowed) and raises :class:`SignatureError` before
  calling into C.
* :func:`shape_of` gives an argument's declared shape at given sizes: the autograd Functions of
  :mod:`rnnlab.kernels.small` allocate by it what the C code writes.
"""

from __future__ import annotations

import ctypes
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

__all__ = [
    "DECLARATIONS",
    "LANE_FUNCTIONS",
    "SCALAR_FUNCTIONS",
    "Arg",
    "SignatureError",
    "bind",
    "call",
    "check_source",
    "prototypes",
    "shape_of",
]


class SignatureError(ValueError):
    """A prototype in ``small.c`` differs from its declaration, or a call does not match it."""


def _norm(ctype: str) -> str:
    """A C type with one space between words and ``*`` written as `` *``: ``const R*`` ->
    ``const R *``."""
    return " ".join(ctype.replace("*", " * ").split()).replace("* *", "**").replace(" * const *", " *const *")


@dataclass(frozen=True)
class Arg:
    """One argument: its C type as written in ``small.c``, its name, and for pointers the shape
    (a Python expression of the sizes, one entry per dimension; for an array of tensors
    ``count`` tensors, each of shape ``shape`` with ``j`` their index) and when it may be NULL."""

    ctype: str
    name: str
    shape: str | None = None
    null: bool | str = False
    count: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "ctype", _norm(self.ctype))  # compared and dispatched on as written once


def _args(*specs) -> tuple[Arg, ...]:
    """``"long E"``, ``"const R *u: E, T, B, H"``, ``"const int64_t *lens: E, B ?"`` (may be NULL)."""
    out = []
    for spec in specs:
        if isinstance(spec, Arg):
            out.append(spec)
            continue
        head, _, shape = spec.partition(":")
        null = shape.strip().endswith("?")
        shape = shape.strip().removesuffix("?").strip() or None
        ctype, name = head.rsplit(None, 1) if "*" not in head else head.rsplit("*", 1)
        ctype = ctype.strip() + (" *" if "*" in head else "")
        out.append(Arg(ctype, name.strip(), shape, null))
    return tuple(out)


_SIZES = ("long E", "long T", "long B", "long H")
_LENS = "const int64_t *lens: E, B ?"
#: the lane kernels' final state (their outputs are zero from each length on, so it is not among them)
_HN, _DHN = "R *hn: E, B, H", "const R *dhn: E, B, H"
#: the lane backwards read the outputs' gradient time-major, or batch-first (batch_first = 1)
_BF, _DS = "int batch_first", "const R *dS: E, B if batch_first else T, T if batch_first else B, H"

#: every C function of small.c (without its _f64/_f32 suffix) and its arguments
DECLARATIONS: dict[str, tuple[Arg, ...]] = {
    "rnn_forward": _args(
        *_SIZES, "int act", "const R *u: E, T, B, H", "const R *W: E, H, H", "const R *h0: E, B, H", _LENS,
        "R *S: E, T, B, H",
    ),
    "rnn_backward": _args(
        *_SIZES, "int act", "const R *dS: E, T, B, H", "const R *S: E, T, B, H", "const R *W: E, H, H", _LENS,
        "R *dU: E, T, B, H", "R *dh0: E, B, H",
    ),
    "rnn_lanes_forward": _args(
        *_SIZES, "int act", "const R *u: E, T, B, H", "const R *W: E, H, H", "const R *h0: E, B, H", _LENS,
        "R *S: E, T, B, H", _HN,
    ),
    "rnn_lanes_backward": _args(
        *_SIZES, "int act", _BF, _DS, _DHN, "const R *S: E, T, B, H", "const R *W: E, H, H",
        "const R *h0: E, B, H", _LENS, "R *dU: E, T, B, H", "R *dW: E, H, H", "R *dh0: E, B, H",
    ),
    "lstm_forward": _args(
        *_SIZES, "const R *u: E, T, B, 4 * H", "const R *W: E, 4 * H, H", "const R *h0: E, B, H",
        "const R *c0: E, B, H", _LENS, "R *S: E, T, B, H", "R *C: E, T, B, H", "R *A: E, T, B, 4 * H",
        "R *TC: E, T, B, H",
    ),
    "lstm_backward": _args(
        *_SIZES, "const R *dS: E, T, B, H", "const R *dC: E, T, B, H", "const R *S: E, T, B, H",
        "const R *C: E, T, B, H", "const R *A: E, T, B, 4 * H", "const R *TC: E, T, B, H",
        "const R *W: E, 4 * H, H", "const R *c0: E, B, H", _LENS, "R *dU: E, T, B, 4 * H", "R *dh0: E, B, H",
        "R *dc0: E, B, H",
    ),
    "gru_forward": _args(
        *_SIZES, "const R *u: E, T, B, 3 * H", "const R *W: E, 3 * H, H", "const R *bhh: E, 3 * H",
        "const R *h0: E, B, H", _LENS, "R *S: E, T, B, H", "R *A: E, T, B, 4 * H",
    ),
    "gru_backward": _args(
        *_SIZES, "const R *dS: E, T, B, H", "const R *S: E, T, B, H", "const R *A: E, T, B, 4 * H",
        "const R *W: E, 3 * H, H", "const R *h0: E, B, H", _LENS, "R *dU: E, T, B, 3 * H",
        "R *dGH: E, T, B, 3 * H", "R *dh0: E, B, H",
    ),
    "rhn_forward": _args(
        *_SIZES, "long D", "const R *u: E, T, B, 2 * H", "const R *W: E, D, 2 * H, H", "const R *bias: E, D, 2 * H",
        "const R *h0: E, B, H", _LENS, "R *S: E, T, B, H", "R *A: E, T, B, D, 3 * H",
    ),
    "rhn_backward": _args(
        *_SIZES, "long D", "const R *dS: E, T, B, H", "const R *A: E, T, B, D, 3 * H", "const R *W: E, D, 2 * H, H",
        _LENS, "R *dU: E, T, B, 2 * H", "R *dW: E, D, 2 * H, H", "R *dbias: E, D, 2 * H", "R *dh0: E, B, H",
    ),
    "dmu_forward": _args(
        *_SIZES, "long K", Arg("const long *", "n", "K"), "int act", "R slope", "const R *u1: E, T, B, G1",
        "const R *w1h: E, G1, H", Arg("R *const *", "Wk", "E, n[j + 1], n[j]", count="K - 1"),
        Arg("R *const *", "bk", "E, n[j + 1]", count="K - 1"), Arg("const R *", "wout", "E, 2 * H, n[K - 1]", "K == 0"),
        Arg("const R *", "bout", "E, 2 * H", "K == 0"), "const R *h0: E, B, H", _LENS, "R *S: E, T, B, H",
        "R *A: E, T, B, NSUM + 2 * H",
    ),
    "dmu_backward": _args(
        *_SIZES, "long K", Arg("const long *", "n", "K"), "int act", "R slope", "const R *dS: E, T, B, H",
        "const R *S: E, T, B, H", "const R *A: E, T, B, NSUM + 2 * H", "const R *w1h: E, G1, H",
        Arg("R *const *", "Wk", "E, n[j + 1], n[j]", count="K - 1"),
        Arg("const R *", "wout", "E, 2 * H, n[K - 1]", "K == 0"), "const R *h0: E, B, H", _LENS,
        "R *dU1: E, T, B, G1", "R *dw1h: E, G1, H", Arg("R *const *", "dWk", "E, n[j + 1], n[j]", count="K - 1"),
        Arg("R *const *", "dbk", "E, n[j + 1]", count="K - 1"), Arg("R *", "dwout", "E, 2 * H, n[K - 1]", "K == 0"),
        Arg("R *", "dbout", "E, 2 * H", "K == 0"), "R *dh0: E, B, H",
    ),
    "gru_lanes_forward": _args(
        *_SIZES, "const R *u: E, T, B, 3 * H", "const R *W: E, 3 * H, H", "const R *bhh: E, 3 * H",
        "const R *h0: E, B, H", _LENS, "R *S: E, T, B, H", _HN,
    ),
    "gru_lanes_backward": _args(
        *_SIZES, _BF, _DS, _DHN, "const R *S: E, T, B, H", "const R *u: E, T, B, 3 * H",
        "const R *W: E, 3 * H, H", "const R *bhh: E, 3 * H", "const R *h0: E, B, H", _LENS,
        "R *dU: E, T, B, 3 * H", "R *dW: E, 3 * H, H", "R *dbhh: E, 3 * H", "R *dh0: E, B, H",
    ),
    "lstm_lanes_forward": _args(
        *_SIZES, "const R *u: E, T, B, 4 * H", "const R *W: E, 4 * H, H", "const R *h0: E, B, H",
        "const R *c0: E, B, H", _LENS, "R *S: E, T, B, H", "R *C: E, T, B, H", _HN,
        "R *cn: E, B, H",
    ),
    "lstm_lanes_backward": _args(
        *_SIZES, _BF, _DS, _DHN, "const R *dcn: E, B, H", "const R *S: E, T, B, H",
        "const R *C: E, T, B, H", "const R *u: E, T, B, 4 * H", "const R *W: E, 4 * H, H", "const R *h0: E, B, H",
        "const R *c0: E, B, H", _LENS, "R *dU: E, T, B, 4 * H", "R *dW: E, 4 * H, H", "R *dh0: E, B, H",
        "R *dc0: E, B, H",
    ),
    "rhn_lanes_forward": _args(
        *_SIZES, "long D", "const R *u: E, T, B, 2 * H", "const R *W: E, D, 2 * H, H", "const R *bias: E, D, 2 * H",
        "const R *h0: E, B, H", _LENS, "R *S: E, T, B, H", _HN,
    ),
    "rhn_lanes_backward": _args(
        *_SIZES, "long D", _BF, _DS, _DHN, "const R *S: E, T, B, H", "const R *u: E, T, B, 2 * H",
        "const R *W: E, D, 2 * H, H", "const R *bias: E, D, 2 * H", "const R *h0: E, B, H", _LENS,
        "R *dU: E, T, B, 2 * H", "R *dW: E, D, 2 * H, H", "R *dbias: E, D, 2 * H", "R *dh0: E, B, H",
    ),
    "dmu_lanes_forward": _args(
        *_SIZES, "long K", Arg("const long *", "n", "K"), "int act", "R slope", "const R *u1: E, T, B, G1",
        "const R *w1h: E, G1, H", Arg("R *const *", "Wk", "E, n[j + 1], n[j]", count="K - 1"),
        Arg("R *const *", "bk", "E, n[j + 1]", count="K - 1"), Arg("const R *", "wout", "E, 2 * H, n[K - 1]", "K == 0"),
        Arg("const R *", "bout", "E, 2 * H", "K == 0"), "const R *h0: E, B, H", _LENS, "R *S: E, T, B, H", _HN,
    ),
    "dmu_lanes_backward": _args(
        *_SIZES, "long K", Arg("const long *", "n", "K"), "int act", "R slope", _BF, _DS, _DHN,
        "const R *S: E, T, B, H", "const R *u1: E, T, B, G1", "const R *w1h: E, G1, H",
        Arg("R *const *", "Wk", "E, n[j + 1], n[j]", count="K - 1"),
        Arg("R *const *", "bk", "E, n[j + 1]", count="K - 1"), Arg("const R *", "wout", "E, 2 * H, n[K - 1]", "K == 0"),
        Arg("const R *", "bout", "E, 2 * H", "K == 0"), "const R *h0: E, B, H", _LENS,
        "R *dU1: E, T, B, G1", "R *dw1h: E, G1, H", Arg("R *const *", "dWk", "E, n[j + 1], n[j]", count="K - 1"),
        Arg("R *const *", "dbk", "E, n[j + 1]", count="K - 1"), Arg("R *", "dwout", "E, 2 * H, n[K - 1]", "K == 0"),
        Arg("R *", "dbout", "E, 2 * H", "K == 0"), "R *dh0: E, B, H",
    ),
}  # fmt: skip

#: the lane kernels (sequences side by side in vector lanes); the others are the scalar loops,
#: which the benchmark's floor (benchmarks/small_floor.c) also defines
LANE_FUNCTIONS = tuple(fn for fn in DECLARATIONS if "_lanes_" in fn)
SCALAR_FUNCTIONS = tuple(fn for fn in DECLARATIONS if fn not in LANE_FUNCTIONS)

_SUFFIX = {torch.float64: "_f64", torch.float32: "_f32"}
_REAL = {torch.float64: ctypes.c_double, torch.float32: ctypes.c_float}
_POINTER = {"const long *": ctypes.POINTER(ctypes.c_long), "R *const *": ctypes.POINTER(ctypes.c_void_p)}


def _written(ctype: str, name: str) -> str:
    """``const R *u``, ``long E``: an argument as C writes it."""
    ctype = _norm(ctype)
    return f"{ctype}{name}" if ctype.endswith("*") else f"{ctype} {name}"


# ---------------------------------------------------------------------------- the source


_PROTOTYPE = re.compile(r"^void\s+NAME\((\w+)\)\s*\(([^)]*)\)\s*\{", re.MULTILINE)


def prototypes(source: str) -> dict[str, list[tuple[str, str]]]:
    """The exported functions of ``small.c``'s text (``void NAME(fn)(...) {``), each as its
    arguments ``(C type, name)`` in order."""
    out = {}
    for m in _PROTOTYPE.finditer(source):
        args = []
        for part in " ".join(m.group(2).split()).split(","):
            part = part.strip()
            found = re.match(r"^(.*?)(\w+)$", part)
            if not found:
                raise SignatureError(f"small.c: cannot read argument {part!r} of {m.group(1)}")
            args.append((_norm(found.group(1)), found.group(2)))
        out[m.group(1)] = args
    return out


def check_source(source: str | Path, only: tuple[str, ...] | None = None) -> None:
    """Compare the prototypes of ``small.c`` (its text or path) with :data:`DECLARATIONS` (or
    the declared functions ``only``, e.g. :data:`SCALAR_FUNCTIONS` for the benchmark's floor); a
    function missing on either side, a different count, or an argument whose type or name
    differs raises :class:`SignatureError` naming the function and the argument."""
    text = source.read_text() if isinstance(source, Path) else source
    found = prototypes(text)
    declared = DECLARATIONS if only is None else {fn: DECLARATIONS[fn] for fn in only}
    problems = []
    for fn in sorted(set(declared) - set(found)):
        problems.append(f"{fn}: declared in small_abi.py but small.c defines no 'void NAME({fn})(...)'")
    for fn in sorted(set(found) - set(declared)):
        problems.append(f"{fn}: small.c defines it but small_abi.py does not declare it")
    for fn in sorted(set(found) & set(declared)):
        want, got = declared[fn], found[fn]
        for i, (a, (ctype, name)) in enumerate(zip(want, got)):
            if (a.ctype, a.name) != (ctype, name):
                problems.append(
                    f"{fn}: argument {i + 1} is '{_written(ctype, name)}' in small.c but declared "
                    f"'{_written(a.ctype, a.name)}'"
                )
                break
        else:
            if len(want) != len(got):
                extra = got[len(want) :] or [(a.ctype, a.name) for a in want[len(got) :]]
                problems.append(
                    f"{fn}: small.c has {len(got)} arguments, the declaration {len(want)} "
                    f"(first difference: argument {min(len(want), len(got)) + 1} '{_written(*extra[0])}')"
                )
    if problems:
        raise SignatureError(
            "the C prototypes of rnnlab/kernels/small.c differ from their declaration in "
            "rnnlab/kernels/small_abi.py (change both together):\n  " + "\n  ".join(problems)
        )


# ---------------------------------------------------------------------------- the library


def _ctypes_of(a: Arg, dtype: torch.dtype):
    t = a.ctype
    if t == "long":
        return ctypes.c_long
    if t == "int":
        return ctypes.c_int
    if t == "R":
        return _REAL[dtype]
    return _POINTER.get(t, ctypes.c_void_p)


def bind(lib: ctypes.CDLL, dtype: torch.dtype, only: tuple[str, ...] | None = None) -> ctypes.CDLL:
    """Set ``argtypes`` and ``restype`` of every declared function of ``lib`` (the build for
    ``dtype``; or of the functions ``only``) from :data:`DECLARATIONS`."""
    for fn in DECLARATIONS if only is None else only:
        args = DECLARATIONS[fn]
        f = getattr(lib, fn + _SUFFIX[dtype])
        f.argtypes = [_ctypes_of(a, dtype) for a in args]
        f.restype = None
    return lib


def _fail(fn: str, i: int, a: Arg, what: str) -> SignatureError:
    return SignatureError(f"{fn}: argument {i + 1} ({_written(a.ctype, a.name)}) {what}")


def _env(fn: str, args: tuple[Arg, ...], values: tuple) -> dict:
    env: dict = {}
    for i, (a, v) in enumerate(zip(args, values)):
        t = a.ctype
        if t in ("long", "int"):
            if isinstance(v, bool) or not isinstance(v, int):
                raise _fail(fn, i, a, f"must be an int, got {type(v).__name__} ({v!r})")
            lowest = 0 if a.name in ("K", "act", "batch_first") else 1
            if not lowest <= v < 2**31:
                raise _fail(fn, i, a, f"must be in [{lowest}, 2**31), got {v}")
            env[a.name] = v
    if "K" in env:
        i = [a.name for a in args].index("n")
        n = values[i]
        if not isinstance(n, (list, tuple)) or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in n):
            raise _fail(fn, i, args[i], f"must be a list of positive ints (the layer widths), got {n!r}")
        if len(n) != env["K"]:
            raise _fail(fn, i, args[i], f"must hold K = {env['K']} widths, got {len(n)}")
        env["n"] = list(n)
        _widths(env)
    return env


def _widths(env: dict) -> None:
    """The DMU's derived sizes: ``G1`` its first layer's output width, ``NSUM`` its widths' sum."""
    n = env["n"]
    env["G1"] = n[0] if n else 2 * env["H"]
    env["NSUM"] = sum(n)


_NO_BUILTINS = {"__builtins__": {}}


@functools.cache
def _code(expr: str):
    """An expression of the declaration, compiled once (evaluated per call on the sizes)."""
    return compile(expr, f"<small_abi: {expr}>", "eval")


def _eval(expr: str, env: dict):
    return eval(_code(expr), _NO_BUILTINS, env)  # noqa: S307 - our own constant expressions


def _shape(expr: str, env: dict) -> tuple[int, ...]:
    return _eval(f"({expr},)", env)


def shape_of(a: Arg, sizes: dict) -> tuple[int, ...] | list[tuple[int, ...]] | None:
    """The declared shape of the tensor argument ``a`` at ``sizes`` (``E``, ``T``, ``B``, ``H``
    and the function's others: ``D``; ``K`` and ``n``); for a pointer array, the list of its
    tensors' shapes; None where the declaration has it NULL at these sizes."""
    env = dict(sizes)
    if "n" in env:
        _widths(env)
    if isinstance(a.null, str) and _eval(a.null, env):
        return None
    if a.count is None:
        return _shape(a.shape, env)
    return [_shape(a.shape, {**env, "j": j}) for j in range(max(_eval(a.count, env), 0))]


def _check_tensor(fn, i, a, t, dtype, shape) -> None:
    want = torch.int64 if "int64_t" in a.ctype else dtype
    if not isinstance(t, Tensor):
        raise _fail(fn, i, a, f"must be a tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise _fail(fn, i, a, f"must be on the CPU, got a tensor on {t.device}")
    if t.dtype != want:
        raise _fail(fn, i, a, f"must be {want}, got {t.dtype}")
    if not t.is_contiguous():
        raise _fail(fn, i, a, f"must be contiguous (call .contiguous()), got strides {t.stride()}")
    if tuple(t.shape) != shape:
        names = f" ({a.shape})" if a.shape else ""
        raise _fail(fn, i, a, f"must have shape {shape}{names}, got {tuple(t.shape)}")


def _convert(fn: str, dtype: torch.dtype, args: tuple[Arg, ...], values: tuple) -> list:
    """Check ``values`` against the declaration of ``fn`` and return them as ctypes values."""
    if len(values) != len(args):
        raise SignatureError(
            f"{fn}: takes {len(args)} arguments ({', '.join(a.name for a in args)}), got {len(values)}"
        )
    env = _env(fn, args, values)
    out: list = []
    for i, (a, v) in enumerate(zip(args, values)):
        t = a.ctype
        if t in ("long", "int"):
            out.append(v)
        elif t == "R":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _fail(fn, i, a, f"must be a real number, got {type(v).__name__}")
            out.append(float(v))
        elif t == "const long *":
            out.append((ctypes.c_long * max(len(v), 1))(*v))
        elif a.count is not None:
            count = max(_eval(a.count, env), 0)
            if not isinstance(v, (list, tuple)) or len(v) != count:
                got = len(v) if isinstance(v, (list, tuple)) else type(v).__name__
                raise _fail(fn, i, a, f"must be a list of {count} tensors, got {got}")
            for j, tj in enumerate(v):
                _check_tensor(fn, i, a, tj, dtype, _shape(a.shape, {**env, "j": j}))
            out.append((ctypes.c_void_p * max(count, 1))(*[tj.data_ptr() for tj in v]))
        else:
            must_null = isinstance(a.null, str) and _eval(a.null, env)
            may_null = a.null is True or must_null
            if v is None:
                if not may_null:
                    raise _fail(fn, i, a, "is NULL (None) but the C code reads it; pass a tensor")
                out.append(None)
                continue
            if must_null:
                raise _fail(fn, i, a, f"must be NULL (None) when {a.null}, got a tensor")
            _check_tensor(fn, i, a, v, dtype, _shape(a.shape, env))
            out.append(v.data_ptr())
    return out


def call(lib: ctypes.CDLL, fn: str, dtype: torch.dtype, *values) -> None:
    """Call ``fn`` (declared in :data:`DECLARATIONS`) of ``lib``, the build for ``dtype``,
    with ``values`` in the declared order: sizes as ints, reals as floats, tensors (or None
    where NULL is allowed), lists of tensors for pointer arrays, the DMU's widths as a list.
    Every value is checked first; a mismatch raises :class:`SignatureError`."""
    if fn not in DECLARATIONS:
        raise SignatureError(f"{fn}: not a declared function of small.c; declared: {', '.join(DECLARATIONS)}")
    if dtype not in _SUFFIX:
        raise SignatureError(f"{fn}: the compiled loops are built for float32 and float64, not {dtype}")
    converted = _convert(fn, dtype, DECLARATIONS[fn], values)
    getattr(lib, fn + _SUFFIX[dtype])(*converted)
