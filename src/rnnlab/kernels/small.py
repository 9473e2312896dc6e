"""Tiny recurrences at the speed of their arithmetic: compiled forward and BPTT loops.

A model of 2 to 6 units (the DMU paper's synthetic tasks) does microseconds of arithmetic per
time step, and a PyTorch loop over time spends several times that on each operation it
launches, forward and backward. Here the whole loop over time of a layer, and its backward
pass with the gradient of every weight, is one call into plain C (``small.c``), for the
vanilla RNN (tanh, relu), the LSTM, the GRU, the RHN and the DMU, with ``lengths`` and an
initial state. The same call serves a single run and an ensemble: the tensors carry the
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
(measured per cell); ``"small"`` takes it at any width; any other backend never does. Every function here equals
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
from pathlib import Path

import torch
from torch import Tensor

from .ensemble import ensemble_call
from .host import cpuinfo, platform_name
from .small_abi import bind, call, check_source

__all__ = ["SOURCE", "available", "dmu", "gru", "library", "lstm", "rhn", "rnn"]

#: the C source, compiled at first use
SOURCE = Path(__file__).with_name("small.c")
#: the build: -march=native because the library is built where it runs (the key holds the CPU)
FLAGS = ("-O3", "-march=native", "-std=gnu99", "-shared", "-fPIC")
_ACT = {"tanh": 0, "relu": 1, "identity": 2}

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
# of the same recurrence written in PyTorch operations below, recomputed from the saved inputs,
# so that second-order gradients are exact (tests/kernels/test_second_order.py).


def _step_mask(lens, t: int, h):  # (E, B, 1): the step counts (t < length)
    return None if lens is None else (t < lens).unsqueeze(-1)


def _keep(new, old, mask):
    return new if mask is None else torch.where(mask, new, old)


def _ref_rnn(act, u, W, h0, lens):
    f = (torch.tanh, torch.relu, lambda z: z)[act]
    h, S = h0, []
    for t in range(u.shape[1]):
        h = _keep(f(torch.baddbmm(u[:, t], h, W.transpose(1, 2))), h, _step_mask(lens, t, h))
        S.append(h)
    return torch.stack(S, 1)


def _ref_lstm(u, W, h0, c0, lens):
    h, c, S, C = h0, c0, [], []
    for t in range(u.shape[1]):
        i, f, g, o = torch.baddbmm(u[:, t], h, W.transpose(1, 2)).chunk(4, -1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        m = _step_mask(lens, t, h)
        h, c = _keep(h_new, h, m), _keep(c_new, c, m)
        S.append(h), C.append(c)
    return torch.stack(S, 1), torch.stack(C, 1)


def _ref_gru(u, W, bhh, h0, lens):
    h, S = h0, []
    for t in range(u.shape[1]):
        ir, iz, in_ = u[:, t].chunk(3, -1)
        hr, hz, hn = torch.baddbmm(bhh.unsqueeze(1), h, W.transpose(1, 2)).chunk(3, -1)
        r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
        new = (1 - z) * torch.tanh(in_ + r * hn) + z * h
        h = _keep(new, h, _step_mask(lens, t, h))
        S.append(h)
    return torch.stack(S, 1)


def _ref_rhn(u, W, bias, h0, lens):
    h, S = h0, []
    for t in range(u.shape[1]):
        s = h
        for k in range(W.shape[1]):
            pre = torch.baddbmm(bias[:, k].unsqueeze(1), s, W[:, k].transpose(1, 2))
            a, b = (pre + u[:, t] if k == 0 else pre).chunk(2, -1)
            g = torch.sigmoid(b)
            s = torch.tanh(a) * g + s * (1 - g)
        h = _keep(s, h, _step_mask(lens, t, h))
        S.append(h)
    return torch.stack(S, 1)


def _ref_dmu(act, slope, u1, w1h, w_out, b_out, h0, lens, *hidden):
    lrelu = functools.partial(torch.nn.functional.leaky_relu, negative_slope=slope)
    h, S = h0, []
    for t in range(u1.shape[1]):
        a = torch.baddbmm(u1[:, t], h, w1h.transpose(1, 2))
        if w_out is not None:
            a = lrelu(a)
            for W, b in zip(hidden[0::2], hidden[1::2]):
                a = lrelu(torch.baddbmm(b.unsqueeze(1), a, W.transpose(1, 2)))
            a = torch.baddbmm(b_out.unsqueeze(1), a, w_out.transpose(1, 2))
        z, hh = a.chunk(2, -1)
        c = torch.tanh(hh) if act == 0 else hh
        h = _keep(c + torch.sigmoid(z) * (h - c), h, _step_mask(lens, t, h))
        S.append(h)
    return torch.stack(S, 1)


def _twice(reference):
    """A compiled backward that, when a graph of it is asked for, gives ``reference``'s
    gradients with their graph instead (the forward keeps its arguments in ``ctx.args``)."""

    def wrap(backward):
        @functools.wraps(backward)
        def run(ctx, *grads):
            if not torch.is_grad_enabled():
                return backward(ctx, *grads)
            args = ctx.args
            want = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
            with torch.enable_grad():
                outs = reference(*args)
                outs = outs if isinstance(outs, tuple) else (outs,)
                pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
                got = torch.autograd.grad(
                    [o for o, _ in pairs],
                    [args[i] for i in want],
                    [g for _, g in pairs],
                    create_graph=True,
                    allow_unused=True,
                )
            result: list = [None] * len(args)
            for i, g in zip(want, got):
                result[i] = g
            return tuple(result)

        return run

    return wrap


class _RNN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, act: int, u, W, h0, lens):
        E, T, B, H = u.shape
        S = torch.empty_like(u)
        _call("rnn_forward", u.dtype, E, T, B, H, act, u, W, h0, lens, S)
        ctx.act, ctx.lens, ctx.args = act, lens, (act, u, W, h0, lens)
        ctx.save_for_backward(S, W, h0)
        return S

    @staticmethod
    @_twice(_ref_rnn)
    def backward(ctx, dS):
        dS = dS.contiguous()  # (kept alive across the call: the C code reads its memory)
        S, W, h0 = ctx.saved_tensors
        E, T, B, H = S.shape
        dU, dh0 = torch.empty_like(S), torch.empty_like(h0)
        _call("rnn_backward", S.dtype, E, T, B, H, ctx.act, dS, S, W, ctx.lens, dU, dh0)
        return None, dU, _gram(dU, S, h0), dh0, None


def _rnn(u, W, h0, lengths, act):
    lens = _lens(lengths)
    S = _RNN.apply(act, *_c(u, W, h0), lens)
    return _masked(S, lens), S[:, -1]


class _RNNLanes(torch.autograd.Function):
    """The RNN with its sequences side by side in vector lanes (``rnn_lanes_*`` of small.c);
    the weight's gradient is summed in the C code."""

    @staticmethod
    def forward(ctx, act: int, u, W, h0, lens):
        E, T, B, H = u.shape
        S = torch.empty_like(u)
        _call("rnn_lanes_forward", u.dtype, E, T, B, H, act, u, W, h0, lens, S)
        ctx.act, ctx.lens, ctx.args = act, lens, (act, u, W, h0, lens)
        ctx.save_for_backward(S, W, h0)
        return S

    @staticmethod
    @_twice(_ref_rnn)
    def backward(ctx, dS):
        dS = dS.contiguous()
        S, W, h0 = ctx.saved_tensors
        E, T, B, H = S.shape
        dU, dW, dh0 = torch.empty_like(S), torch.zeros_like(W), torch.empty_like(h0)
        _call("rnn_lanes_backward", S.dtype, E, T, B, H, ctx.act, dS, S, W, h0, ctx.lens, dU, dW, dh0)
        return None, dU, dW, dh0, None


def _rnn_lanes(u, W, h0, lengths, act):
    lens = _lens(lengths)
    S = _RNNLanes.apply(act, *_c(u, W, h0), lens)
    return _masked(S, lens), S[:, -1]


def rnn(
    u: Tensor,
    weight: Tensor,
    h0: Tensor,
    nonlinearity: str = "tanh",
    lengths: Tensor | None = None,
    lanes: bool = False,
):
    """``h_t = phi(W h_{t-1} + u_t)``, phi tanh, relu or identity: ``(outputs (T, B, H), h_n)``.
    ``lanes``: run the lane kernel (the sequences of all members side by side in vector
    lanes; :func:`rnnlab.kernels.dispatch.choose` says when) instead of the scalar loop."""
    act = _ACT[nonlinearity]
    run = _rnn_lanes if lanes else _rnn
    return ensemble_call(lambda *a: run(*a, act), u, weight, h0, lengths)


class _LSTM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, W, h0, c0, lens):
        E, T, B, G = u.shape
        H = G // 4
        S, C, TC = (u.new_empty(E, T, B, H) for _ in range(3))
        A = torch.empty_like(u)
        _call("lstm_forward", u.dtype, E, T, B, H, u, W, h0, c0, lens, S, C, A, TC)
        ctx.lens, ctx.args = lens, (u, W, h0, c0, lens)
        ctx.save_for_backward(S, C, A, TC, W, h0, c0)
        return S, C

    @staticmethod
    @_twice(_ref_lstm)
    def backward(ctx, dS, dC):
        S, C, A, TC, W, h0, c0 = ctx.saved_tensors
        E, T, B, H = S.shape
        dS = torch.zeros_like(S) if dS is None else dS.contiguous()
        dC = torch.zeros_like(C) if dC is None else dC.contiguous()
        dU, dh0, dc0 = torch.empty_like(A), torch.empty_like(h0), torch.empty_like(c0)
        _call("lstm_backward", S.dtype, E, T, B, H, dS, dC, S, C, A, TC, W, c0, ctx.lens, dU, dh0, dc0)
        return dU, _gram(dU, S, h0), dh0, dc0, None


class _LSTMLanes(torch.autograd.Function):
    """The LSTM with its sequences side by side in vector lanes (``lstm_lanes_*`` of small.c):
    the forward keeps the states and cells, the backward recomputes the gates."""

    @staticmethod
    def forward(ctx, u, W, h0, c0, lens):
        E, T, B, G = u.shape
        H = G // 4
        S, C = u.new_empty(E, T, B, H), u.new_empty(E, T, B, H)
        _call("lstm_lanes_forward", u.dtype, E, T, B, H, u, W, h0, c0, lens, S, C)
        ctx.lens, ctx.args = lens, (u, W, h0, c0, lens)
        ctx.save_for_backward(S, C, u, W, h0, c0)
        return S, C

    @staticmethod
    @_twice(_ref_lstm)
    def backward(ctx, dS, dC):
        S, C, u, W, h0, c0 = ctx.saved_tensors
        E, T, B, H = S.shape
        dS = torch.zeros_like(S) if dS is None else dS.contiguous()
        dC = torch.zeros_like(C) if dC is None else dC.contiguous()
        dU, dW, dh0, dc0 = torch.empty_like(u), torch.zeros_like(W), torch.empty_like(h0), torch.empty_like(c0)
        _call("lstm_lanes_backward", S.dtype, E, T, B, H, dS, dC, S, C, u, W, h0, c0, ctx.lens, dU, dW, dh0, dc0)
        return dU, dW, dh0, dc0, None


def _lstm(u, W, h0, c0, lengths, lanes=False):
    lens = _lens(lengths)
    S, C = (_LSTMLanes if lanes else _LSTM).apply(*_c(u, W, h0, c0), lens)
    return _masked(S, lens), S[:, -1], C[:, -1]


def lstm(gi: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, lengths: Tensor | None = None, lanes: bool = False):
    """The LSTM over ``gi`` = W_ih x + b_ih + b_hh (T, B, 4H): ``(outputs, h_n, c_n)``.
    ``lanes``: run the lane kernel (:func:`rnn`) instead of the scalar loop."""
    return ensemble_call(_lstm, gi, w_hh, h0, c0, lengths, lanes)


class _GRU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, W, bhh, h0, lens):
        E, T, B, G = u.shape
        H = G // 3
        S, A = u.new_empty(E, T, B, H), u.new_empty(E, T, B, 4 * H)
        _call("gru_forward", u.dtype, E, T, B, H, u, W, bhh, h0, lens, S, A)
        ctx.lens, ctx.args = lens, (u, W, bhh, h0, lens)
        ctx.save_for_backward(S, A, W, h0, bhh)
        return S

    @staticmethod
    @_twice(_ref_gru)
    def backward(ctx, dS):
        dS = dS.contiguous()
        S, A, W, h0, bhh = ctx.saved_tensors
        E, T, B, H = S.shape
        dU, dGH, dh0 = S.new_empty(E, T, B, 3 * H), S.new_empty(E, T, B, 3 * H), torch.empty_like(h0)
        _call("gru_backward", S.dtype, E, T, B, H, dS, S, A, W, h0, ctx.lens, dU, dGH, dh0)
        return dU, _gram(dGH, S, h0), dGH.sum((1, 2)), dh0, None


class _GRULanes(torch.autograd.Function):
    """The GRU with its sequences side by side in vector lanes (``gru_lanes_*`` of small.c):
    the forward keeps the states only, the backward recomputes the gates."""

    @staticmethod
    def forward(ctx, u, W, bhh, h0, lens):
        E, T, B, G = u.shape
        H = G // 3
        S = u.new_empty(E, T, B, H)
        _call("gru_lanes_forward", u.dtype, E, T, B, H, u, W, bhh, h0, lens, S)
        ctx.lens, ctx.args = lens, (u, W, bhh, h0, lens)
        ctx.save_for_backward(S, u, W, bhh, h0)
        return S

    @staticmethod
    @_twice(_ref_gru)
    def backward(ctx, dS):
        dS = dS.contiguous()
        S, u, W, bhh, h0 = ctx.saved_tensors
        E, T, B, H = S.shape
        dU, dW, db, dh0 = torch.empty_like(u), torch.zeros_like(W), torch.zeros_like(bhh), torch.empty_like(h0)
        _call("gru_lanes_backward", S.dtype, E, T, B, H, dS, S, u, W, bhh, h0, ctx.lens, dU, dW, db, dh0)
        return dU, dW, db, dh0, None


def _gru(u, W, bhh, h0, lengths, lanes=False):
    lens = _lens(lengths)
    S = (_GRULanes if lanes else _GRU).apply(*_c(u, W, bhh, h0), lens)
    return _masked(S, lens), S[:, -1]


def gru(gi: Tensor, w_hh: Tensor, b_hh: Tensor, h0: Tensor, lengths: Tensor | None = None, lanes: bool = False):
    """The GRU over ``gi`` = W_ih x + b_ih (T, B, 3H): ``(outputs, h_n)``.
    ``lanes``: run the lane kernel (:func:`rnn`) instead of the scalar loop."""
    return ensemble_call(_gru, gi, w_hh, b_hh, h0, lengths, lanes)


class _RHN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, W, bias, h0, lens):
        E, T, B, G = u.shape
        H, D = G // 2, W.shape[1]
        S, A = u.new_empty(E, T, B, H), u.new_empty(E, T, B, D, 3 * H)
        _call("rhn_forward", u.dtype, E, T, B, H, D, u, W, bias, h0, lens, S, A)
        ctx.lens, ctx.args = lens, (u, W, bias, h0, lens)
        ctx.save_for_backward(S, A, W, bias, h0)
        return S

    @staticmethod
    @_twice(_ref_rhn)
    def backward(ctx, dS):
        dS = dS.contiguous()
        S, A, W, bias, h0 = ctx.saved_tensors
        E, T, B, H = S.shape
        D = W.shape[1]
        dU, dW, db, dh0 = S.new_empty(E, T, B, 2 * H), torch.zeros_like(W), torch.zeros_like(bias), torch.empty_like(h0)
        _call("rhn_backward", S.dtype, E, T, B, H, D, dS, A, W, ctx.lens, dU, dW, db, dh0)
        return dU, dW, db, dh0, None


class _RHNLanes(torch.autograd.Function):
    """The RHN with its sequences side by side in vector lanes (``rhn_lanes_*`` of small.c): the
    forward keeps the states only, the backward recomputes each step's micro-layers."""

    @staticmethod
    def forward(ctx, u, W, bias, h0, lens):
        E, T, B, G = u.shape
        H, D = G // 2, W.shape[1]
        S = u.new_empty(E, T, B, H)
        _call("rhn_lanes_forward", u.dtype, E, T, B, H, D, u, W, bias, h0, lens, S)
        ctx.lens, ctx.args = lens, (u, W, bias, h0, lens)
        ctx.save_for_backward(S, u, W, bias, h0)
        return S

    @staticmethod
    @_twice(_ref_rhn)
    def backward(ctx, dS):
        dS = dS.contiguous()
        S, u, W, bias, h0 = ctx.saved_tensors
        E, T, B, H = S.shape
        dU, dW, db, dh0 = torch.empty_like(u), torch.zeros_like(W), torch.zeros_like(bias), torch.empty_like(h0)
        _call("rhn_lanes_backward", S.dtype, E, T, B, H, W.shape[1], dS, S, u, W, bias, h0, ctx.lens, dU, dW, db, dh0)
        return dU, dW, db, dh0, None


def _rhn(u, W, bias, h0, lengths, lanes=False):
    lens = _lens(lengths)
    S = (_RHNLanes if lanes else _RHN).apply(*_c(u, W, bias, h0), lens)
    return _masked(S, lens), S[:, -1]


def rhn(u: Tensor, w_hh: Tensor, bias: Tensor, h0: Tensor, lengths: Tensor | None = None, lanes: bool = False):
    """The RHN (coupled carry gate) over ``u`` = W_ih x (T, B, 2H), ``w_hh`` (depth, 2H, H),
    ``bias`` (depth, 2H): ``(outputs, h_n)``. ``lanes``: run the lane kernel (:func:`rnn`)
    instead of the scalar loop."""
    return ensemble_call(_rhn, u, w_hh, bias, h0, lengths, lanes)


class _DMU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, act: int, slope: float, u1, w1h, w_out, b_out, h0, lens, *hidden):
        E, T, B, _ = u1.shape
        H = h0.shape[-1]
        Ws, bs = hidden[0::2], hidden[1::2]
        K = 0 if w_out is None else 1 + len(Ws)
        n = [u1.shape[-1]] + [W.shape[1] for W in Ws] if K else []
        S, A = u1.new_empty(E, T, B, H), u1.new_empty(E, T, B, sum(n) + 2 * H)
        _call(
            "dmu_forward",
            u1.dtype,
            E,
            T,
            B,
            H,
            K,
            n,
            act,
            slope,
            u1,
            w1h,
            list(Ws),
            list(bs),
            w_out,
            b_out,
            h0,
            lens,
            S,
            A,
        )
        ctx.act, ctx.slope, ctx.lens, ctx.K, ctx.n, ctx.hidden = act, slope, lens, K, n, len(Ws)
        ctx.args = (act, slope, u1, w1h, w_out, b_out, h0, lens, *hidden)
        ctx.save_for_backward(S, A, u1, w1h, w_out, b_out, h0, *hidden)
        return S

    @staticmethod
    @_twice(_ref_dmu)
    def backward(ctx, dS):
        dS = dS.contiguous()
        S, A, u1, w1h, w_out, b_out, h0, *hidden = ctx.saved_tensors
        E, T, B, H = S.shape
        Ws, bs = hidden[0::2], hidden[1::2]
        dU1, dw1h, dh0 = torch.empty_like(u1), torch.zeros_like(w1h), torch.empty_like(h0)
        dWs, dbs = [torch.zeros_like(W) for W in Ws], [torch.zeros_like(b) for b in bs]
        dwo = None if w_out is None else torch.zeros_like(w_out)
        dbo = None if b_out is None else torch.zeros_like(b_out)
        _call(
            "dmu_backward", S.dtype, E, T, B, H, ctx.K, ctx.n, ctx.act, ctx.slope, dS, S, A, w1h, list(Ws), w_out, h0,
            ctx.lens, dU1, dw1h, dWs, dbs, dwo, dbo, dh0,
        )  # fmt: skip
        grads = [g for pair in zip(dWs, dbs) for g in pair]
        return None, None, dU1, dw1h, dwo, dbo, dh0, None, *grads


def _dmu_sizes(u1, w_out, Ws):
    K = 0 if w_out is None else 1 + len(Ws)
    return K, ([u1.shape[-1]] + [W.shape[1] for W in Ws] if K else [])


class _DMULanes(torch.autograd.Function):
    """The DMU with its sequences side by side in vector lanes (``dmu_lanes_*`` of small.c): the
    forward keeps the states only, the backward recomputes each step's update network."""

    @staticmethod
    def forward(ctx, act: int, slope: float, u1, w1h, w_out, b_out, h0, lens, *hidden):
        E, T, B, _ = u1.shape
        H = h0.shape[-1]
        Ws, bs = list(hidden[0::2]), list(hidden[1::2])
        K, n = _dmu_sizes(u1, w_out, Ws)
        S = u1.new_empty(E, T, B, H)
        args = (E, T, B, H, K, n, act, slope)
        _call("dmu_lanes_forward", u1.dtype, *args, u1, w1h, Ws, bs, w_out, b_out, h0, lens, S)
        ctx.sizes, ctx.lens, ctx.args = args, lens, (act, slope, u1, w1h, w_out, b_out, h0, lens, *hidden)
        ctx.save_for_backward(S, u1, w1h, w_out, b_out, h0, *hidden)
        return S

    @staticmethod
    @_twice(_ref_dmu)
    def backward(ctx, dS):
        dS = dS.contiguous()
        S, u1, w1h, w_out, b_out, h0, *hidden = ctx.saved_tensors
        Ws, bs = hidden[0::2], hidden[1::2]
        dU1, dw1h, dh0 = torch.empty_like(u1), torch.zeros_like(w1h), torch.empty_like(h0)
        dWs, dbs = [torch.zeros_like(W) for W in Ws], [torch.zeros_like(b) for b in bs]
        dwo = None if w_out is None else torch.zeros_like(w_out)
        dbo = None if b_out is None else torch.zeros_like(b_out)
        _call(
            "dmu_lanes_backward", S.dtype, *ctx.sizes, dS, S, u1, w1h, list(Ws), list(bs), w_out, b_out, h0,
            ctx.lens, dU1, dw1h, dWs, dbs, dwo, dbo, dh0,
        )  # fmt: skip
        grads = [g for pair in zip(dWs, dbs) for g in pair]
        return None, None, dU1, dw1h, dwo, dbo, dh0, None, *grads


def _dmu(u1, h0, w1h, w_out, b_out, lengths, activation, slope, lanes, *hidden):
    lens = _lens(lengths)
    run = _DMULanes if lanes else _DMU
    S = run.apply(_ACT[activation], float(slope), *_c(u1, w1h, w_out, b_out, h0), lens, *_c(*hidden))
    return _masked(S, lens), S[:, -1]


def dmu(
    u1: Tensor,
    h0: Tensor,
    w1h: Tensor,
    hidden: list[tuple[Tensor, Tensor]],
    w_out: Tensor | None,
    b_out: Tensor | None,
    activation: str = "tanh",
    slope: float = 0.01,
    lengths: Tensor | None = None,
    lanes: bool = False,
):
    """The DMU (:func:`rnnlab.kernels.ensemble.ensemble_dmu`'s arguments): ``(outputs, h_n)``.
    ``lanes``: run the lane kernel (:func:`rnn`) instead of the scalar loop."""
    flat = [t for pair in hidden for t in pair]
    return ensemble_call(_dmu, u1, h0, w1h, w_out, b_out, lengths, activation, slope, lanes, *flat)
