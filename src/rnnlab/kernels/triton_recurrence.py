"""A persistent Triton kernel for the element-wise recurrence ``h_t = phi(W h_{t-1} + u_t)``.

The same recurrence as :func:`rnnlab.kernels.elementwise_rnn` (column form, ``W`` (H, H)
applied as ``h @ W.T``, ``u`` (T, B, H) the precomputed input terms, phi in {tanh, relu,
modReLU with a per-unit bias, identity}, optional lengths that freeze a sequence's state), run
on the GPU without a kernel launch per step:

* **forward**: one program per block of ``BLOCK_B`` batch rows loads ``W^T`` once (padded to
  a power of two, kept on chip for the whole sequence) and loops over all T steps, each step
  one ``(BLOCK_B, H) x (H, H)`` product, phi, and a store of ``h_t`` into the (T, B, H)
  output, which is all the backward needs (phi' is read from phi's output);
* **backward**: the reverse loop, again one program per batch block with ``W`` loaded once:
  ``dz_t = (dL/dh_t + carry) * phi'(h_t)`` stored as ``grad_u[t]``, ``carry = dz_t W``; the
  last carry is ``grad_h0``. modReLU's bias gradient is summed per program and the
  programs' partial sums are added outside (deterministic). The weight gradient
  ``sum_t dz_t^T h_{t-1}`` is one large product outside the kernel, as in the CPU path.

Dispatch (:func:`use_triton`): in automatic mode the kernel runs for CUDA tensors when Triton
is importable, in float32 with ``H <= hidden_limit(float32, device)`` and in float64 with
``H <= hidden_limit(float64, device)`` on GPUs with float64 tensor cores
(:data:`FLOAT64_CAPABILITIES`); everything else (CPU above all) keeps the fused loop. The
limit comes from the device's register and shared-memory budget (:func:`hidden_limit`, the
arithmetic is in docs/device.md): 128 for float32 and 64 for float64 on every NVIDIA GPU
since Volta. ``RNNLAB_TRITON`` overrides: ``0``/``off`` never uses the kernel, ``1``/``force``
uses it wherever the kernel's code accepts the shape (``H <= MAX_HIDDEN``), also on CPU tensors
(only meaningful under Triton's CPU interpreter, ``TRITON_INTERPRET=1`` set before Triton is
imported; that is how the tests check it without a GPU). Products run in IEEE float32 (no
TF32), so results agree with the CPU path to float32 rounding.

The guard (automatic mode; :func:`triton_elementwise_rnn` given the fused loop as
``fallback``): whoever calls the launch gets it.

* The first launch of a *shape class* (device, dtype, padded hidden size, activation,
  lengths or not) in a process runs a small problem through the kernel, forward and
  backward, and through the fused loop in float64 (:func:`self_check`); on a disagreement the
  class falls back to the fused loop with one ``RuntimeWarning`` and is remembered.
* A kernel that fails to compile or launch, forward (:func:`_launch_forward`) or backward
  (:func:`_launch_backward`, i.e. inside ``loss.backward()``), falls back with one warning
  and the process stops trying the kernel (:data:`DISABLED`); the backward then runs the fused
  loop's backward on the saved states.
* Forced (``RNNLAB_TRITON=1``) there is no guard: errors are raised and nothing is compared.

This module imports Triton at import; :mod:`rnnlab.kernels.families.rnn` imports it only when
a CUDA tensor (or the force setting) asks for it, so CPU use never loads Triton. It imports
nothing from rnnlab: the fused loop arrives as an argument.

Not measured on a GPU yet: no speed is claimed (docs/speed.md), and the register arithmetic
is an estimate until ``benchmarks/gpu_check.sh`` reports the compiled kernels' registers and
spills.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .triton_setting import mode

try:  # optional extra: pip install "rnnlab[triton]"
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where Triton is absent
    triton = None
    tl = None

#: the largest hidden size the kernel's code accepts (W padded to BLOCK_H = 256): forced runs
#: and the interpreter tests; automatic dispatch stops at :func:`hidden_limit`, lower
MAX_HIDDEN = 256

#: batch rows per program (one program per block); >= 16 as tl.dot requires on the GPU
BLOCK_B = 16

_ACT_CODES = {"tanh": 0, "relu": 1, "modrelu": 2, "identity": 3}
_DTYPES = (torch.float32, torch.float64)

# --- the on-chip budget ---------------------------------------------------------------------

#: registers one thread may address (PTX's limit on every NVIDIA GPU since compute capability 3.5)
REGISTERS_PER_THREAD = 255
#: (BLOCK_B, BLOCK_H) tiles of values live at once in the backward loop, the larger of the two
#: (carry, g, dz, h, the product dz W, modReLU's sign); the forward holds fewer (h, u, z)
VALUE_TILES = 6
#: (BLOCK_B, BLOCK_H) tiles of 64-bit pointers (grad_S, S, grad_u) plus one of masks, counted
#: in 32-bit registers per element: 3 x 2 + 1
POINTER_WORDS = 7

#: compute capabilities with float64 tensor cores (A100, H100/H200, B200/B300): tl.dot in
#: float64 is native there; elsewhere float64 stays on the fused loop (cuBLAS)
FLOAT64_CAPABILITIES = ((8, 0), (9, 0), (10, 0), (10, 3))


@dataclass(frozen=True)
class Budget:
    """What one streaming multiprocessor offers a program (``torch.cuda.get_device_properties``)."""

    registers_per_sm: int
    shared_per_block: int  # bytes, the opt-in maximum per block
    capability: tuple[int, int]
    name: str = "?"


#: the budget assumed where no CUDA device can be asked (the interpreter, tests): Turing (7.5),
#: the smallest shared memory of the GPUs Triton supports (64 KiB per block), 64 Ki registers
CONSERVATIVE_BUDGET = Budget(
    registers_per_sm=65536, shared_per_block=64 * 1024, capability=(7, 5), name="conservative (no CUDA device asked)"
)


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _block_h(hidden: int) -> int:
    return max(16, _pow2(hidden))


def _warps(block_h: int) -> int:
    # more threads to hold a larger W on chip (untuned: no GPU has timed it)
    return 4 if block_h <= 64 else 8


def registers_per_thread(block_h: int, dtype: torch.dtype) -> float:
    """Estimated 32-bit registers per thread of the backward program (the larger): W held
    whole (``block_h^2`` elements), :data:`VALUE_TILES` value tiles and the pointer/mask tiles
    of ``BLOCK_B x block_h`` elements, spread over ``32 * num_warps`` threads."""
    words = torch.finfo(dtype).bits // 32
    tile = BLOCK_B * block_h
    return (words * (block_h * block_h + VALUE_TILES * tile) + POINTER_WORDS * tile) / (32 * _warps(block_h))


def shared_bytes(block_h: int, dtype: torch.dtype) -> int:
    """Bytes of shared memory to stage W once for ``tl.dot`` (the layout conversion): W whole."""
    return block_h * block_h * torch.finfo(dtype).bits // 8


def hidden_limit(dtype: torch.dtype, budget: Budget = CONSERVATIVE_BUDGET) -> int:
    """The largest H that automatic dispatch sends to the kernel on a device with ``budget``:
    the largest padded width ``block_h`` (16 ... :data:`MAX_HIDDEN`, powers of two) whose
    estimated registers per thread fit both :data:`REGISTERS_PER_THREAD` and the SM's register
    file shared by the program's threads, and whose W fits the shared memory of one block.
    0 for float64 where the device has no float64 tensor cores, and for other dtypes."""
    if dtype not in _DTYPES or (dtype == torch.float64 and tuple(budget.capability) not in FLOAT64_CAPABILITIES):
        return 0
    best, block = 0, 16
    while block <= MAX_HIDDEN:
        threads = 32 * _warps(block)
        regs = min(REGISTERS_PER_THREAD, budget.registers_per_sm // threads)
        if registers_per_thread(block, dtype) <= regs and shared_bytes(block, dtype) <= budget.shared_per_block:
            best = block
        block *= 2
    return best


@functools.cache
def _cuda_budget(index: int) -> Budget:
    props = torch.cuda.get_device_properties(index)
    regs = getattr(props, "regs_per_multiprocessor", None) or CONSERVATIVE_BUDGET.registers_per_sm
    shared = (
        getattr(props, "shared_memory_per_block_optin", None)
        or getattr(props, "shared_memory_per_block", None)
        or CONSERVATIVE_BUDGET.shared_per_block
    )
    return Budget(int(regs), int(shared), (int(props.major), int(props.minor)), props.name)


def device_budget(device: torch.device | str | None = None) -> Budget:
    """The :class:`Budget` of a CUDA device (the current one for ``None`` or ``"cuda"``), or
    :data:`CONSERVATIVE_BUDGET` where none can be asked (the CPU interpreter)."""
    device = torch.device(device) if device is not None else None
    if (device is not None and device.type != "cuda") or not torch.cuda.is_available():
        return CONSERVATIVE_BUDGET
    return _cuda_budget(
        device.index if device is not None and device.index is not None else torch.cuda.current_device()
    )


#: set by :func:`disable` after a failed launch (the reason), so automatic dispatch stops trying
DISABLED: str | None = None

#: shape classes checked in this process (:func:`shape_class` -> None where the kernel agreed
#: with the fused loop, else the reason it fell back)
CHECKED: dict[tuple, str | None] = {}

#: registers and spills of the kernels compiled in this process, where Triton reports them
#: (``("forward" | "backward", dtype, block_h, activation) -> (n_regs, n_spills)``)
RESOURCES: dict[tuple, tuple[int, int]] = {}

_WARNED: set = set()


def available() -> bool:
    """Whether Triton could be imported (and the kernel has not been disabled by a failure)."""
    return triton is not None and DISABLED is None


def disable(reason: str) -> None:
    """Stop dispatching to the kernel for the rest of the process (automatic mode only)."""
    global DISABLED
    DISABLED = reason


def reset() -> None:
    """Forget failures, checks and warnings (tests; a process that changed its GPU setup)."""
    global DISABLED
    DISABLED = None
    CHECKED.clear()
    _WARNED.clear()


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(
    device_type: str,
    dtype: torch.dtype,
    hidden: int,
    setting: str | None = None,
    have_triton: bool | None = None,
    device: torch.device | str | None = None,
) -> bool:
    """The dispatch decision for one call of :func:`rnnlab.kernels.elementwise_rnn`.

    Args:
        device_type: the tensors' device type ("cuda", "cpu", ...).
        dtype: the compute dtype (float32 and float64 are supported).
        hidden: H.
        setting: "auto", "off" or "force" (default: :func:`mode`).
        have_triton: whether Triton is importable (default: :func:`available`).
        device: the tensors' device, whose budget sets the limit (default: the current CUDA
            device for "cuda").
    """
    setting = mode() if setting is None else setting
    if setting == "force" and have_triton is None:
        have_triton = triton is not None  # forced runs ignore an earlier automatic fallback
    have_triton = available() if have_triton is None else have_triton
    if setting == "off":
        return False
    if setting == "force":
        if not have_triton:
            raise ValueError(
                "RNNLAB_TRITON=force but Triton is not installed; pip install 'rnnlab[triton]' or unset RNNLAB_TRITON"
            )
        if device_type == "cpu" and not _interpreting():
            raise ValueError(
                "RNNLAB_TRITON=force on CPU tensors needs Triton's interpreter: set TRITON_INTERPRET=1 "
                "before Triton is imported, or unset RNNLAB_TRITON"
            )
        return dtype in _DTYPES and 1 <= hidden <= MAX_HIDDEN
    if not (have_triton and device_type == "cuda"):
        return False
    return 1 <= hidden <= hidden_limit(dtype, device_budget(device if device is not None else "cuda"))


if triton is not None:

    @triton.jit
    def _sign(z):
        return tl.where(z > 0, 1.0, tl.where(z < 0, -1.0, 0.0)).to(z.dtype)

    @triton.jit
    def _tanh(z):
        # tanh(|z|) = (1 - e) / (1 + e) with e = exp(-2|z|) <= 1 (no overflow); near 0 it is
        # accurate in absolute terms (a few ulp of 1), like the CPU path's sigmoid option
        e = tl.exp(-2.0 * tl.abs(z))
        return _sign(z) * ((1.0 - e) / (1.0 + e))

    @triton.jit
    def _forward_kernel(
        u_ptr,
        w_ptr,
        h0_ptr,
        b_ptr,
        len_ptr,
        s_ptr,
        T,
        B,
        H,
        ACT: tl.constexpr,
        HAS_LEN: tl.constexpr,
        BLOCK_B: tl.constexpr,
        BLOCK_H: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rb = pid * BLOCK_B + tl.arange(0, BLOCK_B)
        rh = tl.arange(0, BLOCK_H)
        mb = rb < B
        mh = rh < H
        m2 = mb[:, None] & mh[None, :]
        # W^T held for all steps: wt[k, j] = W[j, k]
        wt = tl.load(w_ptr + rh[None, :] * H + rh[:, None], mask=mh[None, :] & mh[:, None], other=0.0)
        bh = rb[:, None] * H + rh[None, :]
        h = tl.load(h0_ptr + bh, mask=m2, other=0.0)
        if ACT == 2:
            bias = tl.load(b_ptr + rh, mask=mh, other=0.0)
        if HAS_LEN:
            ln = tl.load(len_ptr + rb, mask=mb, other=0)
        u_ptrs = u_ptr + bh
        s_ptrs = s_ptr + bh
        step = B * H
        for t in range(T):
            z = tl.load(u_ptrs, mask=m2, other=0.0) + tl.dot(h, wt, input_precision="ieee")
            if ACT == 0:
                z = _tanh(z)
            elif ACT == 1:
                z = tl.maximum(z, 0.0)
            elif ACT == 2:
                z = _sign(z) * tl.maximum(tl.abs(z) + bias[None, :], 0.0)
            if HAS_LEN:
                z = tl.where((t < ln)[:, None], z, h)
            tl.store(s_ptrs, z, mask=m2)
            h = z
            u_ptrs += step
            s_ptrs += step

    @triton.jit
    def _backward_kernel(
        gs_ptr,
        s_ptr,
        w_ptr,
        len_ptr,
        gu_ptr,
        gh0_ptr,
        gb_ptr,
        T,
        B,
        H,
        last,
        ACT: tl.constexpr,
        HAS_LEN: tl.constexpr,
        BLOCK_B: tl.constexpr,
        BLOCK_H: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rb = pid * BLOCK_B + tl.arange(0, BLOCK_B)
        rh = tl.arange(0, BLOCK_H)
        mb = rb < B
        mh = rh < H
        m2 = mb[:, None] & mh[None, :]
        w = tl.load(w_ptr + rh[:, None] * H + rh[None, :], mask=mh[:, None] & mh[None, :], other=0.0)
        bh = rb[:, None] * H + rh[None, :]
        if HAS_LEN:
            ln = tl.load(len_ptr + rb, mask=mb, other=0)
        # start at step T - 1 (``last`` = (T - 1) B H, an int64 when large) and walk back
        gs_ptrs = gs_ptr + last + bh
        s_ptrs = s_ptr + last + bh
        gu_ptrs = gu_ptr + last + bh
        step = B * H
        carry = tl.zeros((BLOCK_B, BLOCK_H), dtype=w.dtype)  # dL/dh_t arriving from step t+1
        gb = tl.zeros((BLOCK_H,), dtype=w.dtype)
        for i in range(T):
            g = tl.load(gs_ptrs, mask=m2, other=0.0) + carry
            if HAS_LEN:
                keep = ((T - 1 - i) < ln)[:, None]
                dz = tl.where(keep, g, 0.0)  # frozen rows took no step: no dL/dz
            else:
                dz = g
            h = tl.load(s_ptrs, mask=m2, other=0.0)
            if ACT == 0:
                dz = dz * (1.0 - h * h)
            elif ACT == 1:
                dz = tl.where(h > 0, dz, 0.0)
            elif ACT == 2:
                # dh/dz = [|z| + b > 0] = sign(h)^2, dh/db = sign(z) [h != 0] = sign(h)
                sg = _sign(h)
                dz = dz * sg
                gb += tl.sum(dz, axis=0)
                dz = dz * sg
            tl.store(gu_ptrs, dz, mask=m2)
            back = tl.dot(dz, w, input_precision="ieee")
            if HAS_LEN:
                carry = tl.where(keep, back, g)  # a frozen row passes its gradient straight through
            else:
                carry = back
            gs_ptrs -= step
            s_ptrs -= step
            gu_ptrs -= step
        tl.store(gh0_ptr + bh, carry, mask=m2)
        if ACT == 2:
            tl.store(gb_ptr + pid * H + rh, gb, mask=mh)


def _blocks(B: int, H: int) -> tuple[int, int, int]:
    return BLOCK_B, _block_h(H), -(-B // BLOCK_B)


def _on(device: torch.device):
    """Triton launches on the current CUDA device: make it the tensors' own (cuda:1, ...)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _record(kind: str, compiled, dtype: torch.dtype, block_h: int, activation: str) -> None:
    n_regs, n_spills = getattr(compiled, "n_regs", None), getattr(compiled, "n_spills", None)
    if isinstance(n_regs, int) and isinstance(n_spills, int):  # compiled for a GPU (not the interpreter)
        RESOURCES[(kind, dtype, block_h, activation)] = (n_regs, n_spills)


def _launch_forward(
    u: Tensor, weight: Tensor, h0: Tensor, bias: Tensor | None, lengths: Tensor | None, activation: str
) -> Tensor:
    """The forward kernel: the state sequence S (T, B, H)."""
    T, B, H = u.shape
    S = torch.empty_like(u)
    block_b, block_h, n_prog = _blocks(B, H)
    dummy = u.new_empty(1)
    with _on(u.device):
        compiled = _forward_kernel[(n_prog,)](
            u,
            weight,
            h0,
            dummy if bias is None else bias,
            dummy if lengths is None else lengths,
            S,
            T,
            B,
            H,
            ACT=_ACT_CODES[activation],
            HAS_LEN=lengths is not None,
            BLOCK_B=block_b,
            BLOCK_H=block_h,
            num_warps=_warps(block_h),
        )
    _record("forward", compiled, u.dtype, block_h, activation)
    return S


def _launch_backward(
    grad_S: Tensor, S: Tensor, weight: Tensor, lengths: Tensor | None, activation: str
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The backward kernel: ``(G = dL/du (T, B, H), dL/dh0 (B, H), modReLU's per-program bias
    gradients (n_programs, H) or None)``."""
    T, B, H = S.shape
    block_b, block_h, n_prog = _blocks(B, H)
    act = _ACT_CODES[activation]
    G = torch.empty_like(S)  # G[t] = dL/dz_t = dL/du_t
    grad_h0 = S.new_empty(B, H)
    gb_parts = S.new_zeros(n_prog, H) if act == 2 else S.new_empty(1)
    with _on(S.device):
        compiled = _backward_kernel[(n_prog,)](
            grad_S,
            S,
            weight,
            S.new_empty(1) if lengths is None else lengths,
            G,
            grad_h0,
            gb_parts,
            T,
            B,
            H,
            (T - 1) * B * H,
            ACT=act,
            HAS_LEN=lengths is not None,
            BLOCK_B=block_b,
            BLOCK_H=block_h,
            num_warps=_warps(block_h),
        )
    _record("backward", compiled, S.dtype, block_h, activation)
    return G, grad_h0, (gb_parts if act == 2 else None)


# --- the guard ------------------------------------------------------------------------------


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def _warn_once(key, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _give_up(device: torch.device, where: str, error: BaseException) -> None:
    """A failed launch in automatic mode: one warning, and no kernel for the rest of the process."""
    reason = _first_line(error)
    disable(f"{where}: {reason}")
    _warn_once(
        "failed",
        f"the Triton recurrence failed on {device} ({reason}) in its {where}; using the "
        "fused loop for the rest of this process (set RNNLAB_TRITON=0 to skip it)",
    )


def _mask(lengths: Tensor | None, T: int, device: torch.device) -> Tensor | None:
    """The fused loop's (T, B, 1) boolean step mask for int ``lengths`` (B,)."""
    if lengths is None:
        return None
    return (torch.arange(T, device=device).unsqueeze(1) < lengths.to(device).unsqueeze(0)).unsqueeze(2)


def _fused_forward(fallback, u, weight, h0, bias, lengths, activation) -> Tensor:
    return fallback.apply(u, weight, h0, bias, _mask(lengths, u.shape[0], u.device), activation)


def _fused_backward(fallback, needs_input_grad, grad_S, S, weight, h0, bias, lengths, activation):
    """The fused loop's backward on the kernel's saved states (the same S: frozen past each
    sequence's length), through its ``backward(ctx, grad_S)``."""
    ctx = SimpleNamespace(
        saved_tensors=(S, weight, h0, bias, _mask(lengths, S.shape[0], S.device)),
        activation=activation,
        needs_input_grad=tuple(needs_input_grad[:4]) + (False, False),
    )
    return tuple(fallback.backward(ctx, grad_S))[:4]


def shape_class(device: torch.device, dtype: torch.dtype, hidden: int, activation: str, has_lengths: bool) -> tuple:
    """What one compiled kernel serves: the device, dtype, padded hidden size (16, 32, ...,
    256), activation and whether lengths are given."""
    return (str(device), str(dtype).replace("torch.", ""), _block_h(hidden), activation, bool(has_lengths))


#: the self-check's tolerance: max |kernel - fused (float64)| <= TOLERANCE * max(1, max |fused|)
#: per result; float32 is about 1e-6 at its size (T = 5, H <= 256), so 1e-4 leaves room
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10}


def check_problem(hidden: int, activation: str, has_lengths: bool, T: int = 5, B: int = BLOCK_B + 3, seed: int = 0):
    """The self-check's small problem in float64 on the CPU (its own generator: the global RNG
    is not touched): ``(u, W, h0, bias or None, lengths (int32) or None, grad_S)``. B = 19 makes
    two batch programs, the second partly masked; lengths cover T, 1 and 0."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    u = torch.randn(T, B, hidden, generator=g, dtype=f64)
    W = torch.randn(hidden, hidden, generator=g, dtype=f64) / math.sqrt(hidden)
    h0 = torch.randn(B, hidden, generator=g, dtype=f64)
    bias = 0.3 * torch.randn(hidden, generator=g, dtype=f64) if activation == "modrelu" else None
    lengths = torch.tensor([(T, 1, 0, T - 2)[i % 4] for i in range(B)], dtype=torch.int32) if has_lengths else None
    grad_S = torch.randn(T, B, hidden, generator=g, dtype=f64)
    return u, W, h0, bias, lengths, grad_S


def compare(
    fallback,
    device: torch.device,
    dtype: torch.dtype,
    hidden: int,
    activation: str,
    has_lengths: bool,
    launch=None,
    split: bool = False,
    **problem,
):
    """Run :func:`check_problem` through the kernel in ``dtype`` on ``device`` (unguarded, or
    through ``launch(u, W, h0, bias, lengths, activation) -> S`` if given) and through the
    fused loop in float64 on the same device (the same inputs, rounded to ``dtype`` first).

    The forward's error compares the states S. The backward's compares the kernel's gradients
    of u, W, h0 (and the bias) with the fused loop's backward run in float64 *on the kernel's
    own states*: phi' is then read from the same h on both sides, so a pre-activation that
    float32 rounding put on the other side of ReLU's or modReLU's threshold (a unit whose
    derivative jumps between 0 and 1) cannot pass for a wrong kernel, while a wrong backward
    still shows. Returns ``(error, tolerance)``: the largest ``max |kernel - fused| / max(1,
    max |fused|)`` over the results, and :data:`TOLERANCE` of ``dtype``; with ``split``, the
    error is ``{"forward": ..., "backward": ...}``. Exceptions of the kernel propagate."""
    # the caller may be under no_grad, inference_mode or autocast: the check is not
    with torch.inference_mode(False):
        return _compare(fallback, device, dtype, hidden, activation, has_lengths, launch, split, problem)


def _compare(fallback, device, dtype, hidden, activation, has_lengths, launch, split, problem):
    u, W, h0, bias, lengths, grad_S = check_problem(hidden, activation, has_lengths, **problem)
    lengths = None if lengths is None else lengths.to(device)
    f64 = torch.float64
    inputs = [x.to(dtype) for x in (u, W, h0, bias) if x is not None]
    grad_S = grad_S.to(dtype).to(device)
    with torch.enable_grad(), torch.autocast(device.type, enabled=False):
        ins = [x.to(device).requires_grad_() for x in inputs]
        b = ins[3] if bias is not None else None
        run = launch or (lambda *a: TritonElementwiseRNN.apply(*a, None))
        S = run(ins[0], ins[1], ins[2], b, lengths, activation)
        got = [S.detach(), *torch.autograd.grad(S, ins, grad_S)]
        ref = [x.to(device=device, dtype=f64) for x in inputs]
        want_S = _fused_forward(
            fallback, ref[0], ref[1], ref[2], ref[3] if bias is not None else None, lengths, activation
        ).detach()
    with torch.no_grad():
        needs = (True, True, True, bias is not None)
        grads = _fused_backward(
            fallback,
            needs,
            grad_S.to(f64),
            got[0].to(f64),
            ref[1],
            ref[2],
            ref[3] if bias is not None else None,
            lengths,
            activation,
        )
    want = [want_S, *(g for g in grads if g is not None)]
    errs = []
    for x, y in zip(got, want, strict=True):
        scale = max(1.0, y.abs().max().item())
        errs.append((x.to(f64) - y).abs().max().item() / scale)
    if split:
        return {"forward": errs[0], "backward": max(errs[1:])}, TOLERANCE[dtype]
    return max(errs), TOLERANCE[dtype]


def self_check(
    fallback, device: torch.device, dtype: torch.dtype, hidden: int, activation: str, has_lengths: bool
) -> str | None:
    """The first launch of a shape class in this process: :func:`compare` on a small problem;
    None when the kernel agrees, else the reason (remembered in :data:`CHECKED`, one warning).
    A kernel that fails here disables itself (:func:`_give_up`)."""
    key = shape_class(device, dtype, hidden, activation, has_lengths)
    if key in CHECKED:
        return CHECKED[key]
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return None  # no side computation inside a CUDA graph capture; checked on a later eager call
    try:
        err, tol = compare(fallback, device, dtype, hidden, activation, has_lengths)
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the kernel means: do not use it
        _give_up(device, "self-check", e)
        CHECKED[key] = f"failed: {_first_line(e)}"
        return CHECKED[key]
    if not err <= tol:  # also NaN
        CHECKED[key] = f"max error {err:.2e} > {tol:.0e}"
        name = f"{key[1]}, H padded to {key[2]}, {activation}{', lengths' if has_lengths else ''}"
        _warn_once(
            ("mismatch", key),
            f"the Triton recurrence disagrees with the fused loop on {device} ({name}: "
            f"{CHECKED[key]} on a small check problem); using the fused loop for this shape "
            "class for the rest of this process (set RNNLAB_TRITON=0 to skip the kernel; "
            "`rnnlab doctor --device cuda` shows every path)",
        )
        return CHECKED[key]
    CHECKED[key] = None
    return None


def unfit_reason(device: torch.device, dtype: torch.dtype, hidden: int) -> str | None:
    """Why automatic dispatch keeps this call on the fused loop (None: the kernel may run)."""
    if DISABLED is not None:
        return f"disabled ({DISABLED})"
    if device.type == "cpu" and not _interpreting():
        return "CPU tensors run the kernel only under Triton's interpreter (TRITON_INTERPRET=1)"
    if device.type not in ("cuda", "cpu"):
        return f"the kernel runs on CUDA devices, not {device.type}"
    budget = device_budget(device)
    limit = hidden_limit(dtype, budget)
    if limit == 0:
        return f"{dtype} is not run by the kernel on {budget.name} (compute capability {budget.capability})"
    if hidden > limit:
        return f"H = {hidden} > {limit}, the on-chip limit for {dtype} on {budget.name}"
    return None


class TritonElementwiseRNN(torch.autograd.Function):
    """Returns the state sequence S (T, B, H), as ``_ElementwiseRNN`` in
    :mod:`rnnlab.kernels.families.rnn` does; ``lengths`` is None or an int32 (B,) tensor on
    the tensors' device; ``fallback`` is the fused loop's Function (the guard of the backward)
    or None (a failed backward launch raises)."""

    @staticmethod
    def forward(ctx, u, weight, h0, bias, lengths, activation, fallback=None):
        S = _launch_forward(u, weight, h0, bias, lengths, activation)
        ctx.activation = activation
        ctx.fallback = fallback
        ctx.save_for_backward(S, weight, h0, bias, lengths)
        return S

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_S):
        S, weight, h0, bias, lengths = ctx.saved_tensors
        T, _, H = S.shape
        need_u, need_w, need_h0, need_b = ctx.needs_input_grad[:4]
        grad_S = grad_S.contiguous()
        try:
            G, grad_h0, gb_parts = _launch_backward(grad_S, S, weight, lengths, ctx.activation)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:
            if ctx.fallback is None or mode() == "force":
                raise
            _give_up(S.device, "backward", e)
            return (
                *_fused_backward(
                    ctx.fallback, ctx.needs_input_grad, grad_S, S, weight, h0, bias, lengths, ctx.activation
                ),
                None,
                None,
                None,
            )
        grad_w = None
        if need_w:  # sum_t dz_t^T h_{t-1}: one large product, outside the kernel
            grad_w = G[0].t() @ h0
            if T > 1:
                grad_w += G[1:].reshape(-1, H).t() @ S[:-1].reshape(-1, H)
        grad_b = gb_parts.sum(0) if (need_b and gb_parts is not None) else None
        return (G if need_u else None), grad_w, (grad_h0 if need_h0 else None), grad_b, None, None, None


def triton_elementwise_rnn(
    u: Tensor,
    weight: Tensor,
    h0: Tensor,
    activation: str,
    bias: Tensor | None = None,
    lengths: Tensor | None = None,
    fallback=None,
) -> Tensor:
    """The state sequence S (T, B, H) of ``h_t = phi(W h_{t-1} + u_t)`` by the Triton kernel.

    Inputs are as :func:`rnnlab.kernels.elementwise_rnn` passes them: contiguous, one dtype
    (float32/float64), ``h0`` given, ``lengths`` None or (B,) in [0, T]. Outputs past a
    sequence's length hold its frozen state (the caller zeroes them).

    ``fallback``: the fused loop's autograd Function (``_ElementwiseRNN`` of
    :mod:`rnnlab.kernels.families.rnn`: ``apply(u, weight, h0, bias, mask, activation)``, its
    ``backward(ctx, grad_S)`` reading ``ctx.saved_tensors = (S, weight, h0, bias, mask)``).
    Given, and in automatic mode, the call is guarded (module docstring): a shape the device
    cannot hold, a failed self-check, a failed launch forward or backward all compute with
    it. Without it, or under ``RNNLAB_TRITON=force``, the kernel runs unguarded.
    """
    if activation not in _ACT_CODES:
        raise ValueError(f"activation must be one of {tuple(_ACT_CODES)}, got {activation!r}")
    H = u.shape[2]
    guarded = fallback is not None and mode() != "force"
    if not guarded and triton is None:
        raise ValueError("the Triton recurrence needs Triton; pip install 'rnnlab[triton]'")
    if not guarded and H > MAX_HIDDEN:
        raise ValueError(
            f"the Triton recurrence holds W on chip for H <= {MAX_HIDDEN}, got H = {H}; "
            "use elementwise_rnn, which falls back to the fused CPU-style loop"
        )
    if lengths is not None:
        lengths = lengths.to(device=u.device, dtype=torch.int32).contiguous()
    u, weight, h0 = u.contiguous(), weight.contiguous(), h0.contiguous()
    bias = None if bias is None else bias.contiguous()
    if not guarded:
        return TritonElementwiseRNN.apply(u, weight, h0, bias, lengths, activation, None)
    reason = (
        ("Triton is not installed" if triton is None else None)
        or unfit_reason(u.device, u.dtype, H)
        or self_check(fallback, u.device, u.dtype, H, activation, lengths is not None)
    )
    if reason is None:
        try:
            return TritonElementwiseRNN.apply(u, weight, h0, bias, lengths, activation, fallback)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001 - a kernel that cannot run: the fused loop can
            _give_up(u.device, "forward", e)
    return _fused_forward(fallback, u, weight, h0, bias, lengths, activation)
