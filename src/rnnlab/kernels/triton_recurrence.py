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

Dispatch (:func:`use_triton`): the kernel runs for CUDA tensors in float32/float64 with
``H <= MAX_HIDDEN`` when Triton is importable; everything else (CPU above all) keeps the
existing fused path. The environment variable ``RNNLAB_TRITON`` overrides: ``0``/``off``
never uses it, ``1``/``force`` uses it wherever the shape fits, also on CPU tensors (only
meaningful under Triton's CPU interpreter, ``TRITON_INTERPRET=1`` set before Triton is
imported; that is how the tests check it without a GPU). Products run in IEEE float32 (no
TF32), so results agree with the CPU path to float32 rounding.

This module imports Triton at import; :mod:`rnnlab.kernels.recurrence` imports it only when
a CUDA tensor (or the force setting) asks for it, so CPU use never loads Triton.

Not measured on a GPU yet: no speed is claimed (docs/speed.md).
"""

from __future__ import annotations

import contextlib
import os

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

try:  # optional extra: pip install "rnnlab[triton]"
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where Triton is absent
    triton = None
    tl = None

#: the largest hidden size run by the kernel: W (padded to a power of two) is held on chip for
#: the whole sequence. Above 128 a float32 W no longer fits in registers and spills; that cost
#: has not been measured (no GPU was available), so 256 is a guess at the useful limit.
MAX_HIDDEN = 256

#: batch rows per program (one program per block); >= 16 as tl.dot requires on the GPU
BLOCK_B = 16

_ACT_CODES = {"tanh": 0, "relu": 1, "modrelu": 2, "identity": 3}
_DTYPES = (torch.float32, torch.float64)
_MODES = {"": "auto", "auto": "auto", "0": "off", "off": "off", "false": "off", "no": "off",
          "1": "force", "force": "force", "on": "force", "true": "force", "yes": "force"}


#: set by :func:`disable` after a failed launch (the reason), so automatic dispatch stops trying
DISABLED: str | None = None


def available() -> bool:
    """Whether Triton could be imported (and the kernel has not been disabled by a failure)."""
    return triton is not None and DISABLED is None


def disable(reason: str) -> None:
    """Stop dispatching to the kernel for the rest of the process (automatic mode only)."""
    global DISABLED
    DISABLED = reason


def mode() -> str:
    """The ``RNNLAB_TRITON`` setting: "auto" (default), "off" or "force"."""
    raw = os.environ.get("RNNLAB_TRITON", "auto")
    key = raw.strip().lower()
    if key not in _MODES:
        raise ValueError(
            f"RNNLAB_TRITON={raw!r} is not understood; expected auto, 0/off or 1/force (or unset it)"
        )
    return _MODES[key]


def use_triton(device_type: str, dtype: torch.dtype, hidden: int, setting: str | None = None,
               have_triton: bool | None = None) -> bool:
    """The dispatch decision for one call of :func:`rnnlab.kernels.elementwise_rnn`.

    Args:
        device_type: the tensors' device type ("cuda", "cpu", ...).
        dtype: the compute dtype (float32 and float64 are supported).
        hidden: H.
        setting: "auto", "off" or "force" (default: :func:`mode`).
        have_triton: whether Triton is importable (default: :func:`available`).
    """
    setting = mode() if setting is None else setting
    if setting == "force" and have_triton is None:
        have_triton = triton is not None  # forced runs ignore an earlier automatic fallback
    have_triton = available() if have_triton is None else have_triton
    if setting == "off":
        return False
    fits = dtype in _DTYPES and 1 <= hidden <= MAX_HIDDEN
    if setting == "force":
        if not have_triton:
            raise ValueError("RNNLAB_TRITON=force but Triton is not installed; pip install 'rnnlab[triton]' "
                             "or unset RNNLAB_TRITON")
        if device_type == "cpu" and os.environ.get("TRITON_INTERPRET", "0") != "1":
            raise ValueError("RNNLAB_TRITON=force on CPU tensors needs Triton's interpreter: set TRITON_INTERPRET=1 "
                             "before Triton is imported, or unset RNNLAB_TRITON")
        return fits
    return have_triton and fits and device_type == "cuda"


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
    def _forward_kernel(u_ptr, w_ptr, h0_ptr, b_ptr, len_ptr, s_ptr, T, B, H,
                        ACT: tl.constexpr, HAS_LEN: tl.constexpr, BLOCK_B: tl.constexpr,
                        BLOCK_H: tl.constexpr):
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
    def _backward_kernel(gs_ptr, s_ptr, w_ptr, len_ptr, gu_ptr, gh0_ptr, gb_ptr, T, B, H, last,
                         ACT: tl.constexpr, HAS_LEN: tl.constexpr, BLOCK_B: tl.constexpr,
                         BLOCK_H: tl.constexpr):
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
    block_h = max(16, triton.next_power_of_2(H))
    return BLOCK_B, block_h, triton.cdiv(B, BLOCK_B)


def _on(device: torch.device):
    """Triton launches on the current CUDA device: make it the tensors' own (cuda:1, ...)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _warps(block_h: int) -> int:
    # more threads to hold a larger W on chip (untuned: no GPU has timed it)
    return 4 if block_h <= 64 else 8


class TritonElementwiseRNN(torch.autograd.Function):
    """Returns the state sequence S (T, B, H), as ``_ElementwiseRNN`` in
    :mod:`rnnlab.kernels.recurrence` does; ``lengths`` is None or an int32 (B,) tensor on
    the tensors' device."""

    @staticmethod
    def forward(ctx, u, weight, h0, bias, lengths, activation):
        T, B, H = u.shape
        S = torch.empty_like(u)
        block_b, block_h, n_prog = _blocks(B, H)
        act = _ACT_CODES[activation]
        dummy = u.new_empty(1)
        with _on(u.device):
            _forward_kernel[(n_prog,)](
                u, weight, h0, dummy if bias is None else bias, dummy if lengths is None else lengths, S,
                T, B, H, ACT=act, HAS_LEN=lengths is not None, BLOCK_B=block_b, BLOCK_H=block_h,
                num_warps=_warps(block_h),
            )
        ctx.activation = activation
        ctx.save_for_backward(S, weight, h0, bias, lengths)
        return S

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_S):
        S, weight, h0, bias, lengths = ctx.saved_tensors
        T, B, H = S.shape
        need_u, need_w, need_h0, need_b = ctx.needs_input_grad[:4]
        grad_S = grad_S.contiguous()
        block_b, block_h, n_prog = _blocks(B, H)
        act = _ACT_CODES[ctx.activation]
        G = torch.empty_like(S)  # G[t] = dL/dz_t = dL/du_t
        grad_h0 = torch.empty_like(h0)
        gb_parts = S.new_zeros(n_prog, H) if act == 2 else S.new_empty(1)
        with _on(S.device):
            _backward_kernel[(n_prog,)](
                grad_S, S, weight, S.new_empty(1) if lengths is None else lengths, G, grad_h0, gb_parts,
                T, B, H, (T - 1) * B * H, ACT=act, HAS_LEN=lengths is not None, BLOCK_B=block_b,
                BLOCK_H=block_h, num_warps=_warps(block_h),
            )
        grad_w = None
        if need_w:  # sum_t dz_t^T h_{t-1}: one large product, outside the kernel
            grad_w = G[0].t() @ h0
            if T > 1:
                grad_w += G[1:].reshape(-1, H).t() @ S[:-1].reshape(-1, H)
        grad_b = gb_parts.sum(0) if (need_b and act == 2) else None
        return (G if need_u else None), grad_w, (grad_h0 if need_h0 else None), grad_b, None, None


def triton_elementwise_rnn(u: Tensor, weight: Tensor, h0: Tensor, activation: str, bias: Tensor | None = None,
                           lengths: Tensor | None = None) -> Tensor:
    """The state sequence S (T, B, H) of ``h_t = phi(W h_{t-1} + u_t)`` by the Triton kernel.

    Inputs are as :func:`rnnlab.kernels.elementwise_rnn` passes them: contiguous, one dtype
    (float32/float64), ``h0`` given, ``lengths`` None or (B,) in [0, T]. Outputs past a
    sequence's length hold its frozen state (the caller zeroes them).
    """
    if triton is None:
        raise ValueError("the Triton recurrence needs Triton; pip install 'rnnlab[triton]'")
    if activation not in _ACT_CODES:
        raise ValueError(f"activation must be one of {tuple(_ACT_CODES)}, got {activation!r}")
    H = u.shape[2]
    if H > MAX_HIDDEN:
        raise ValueError(f"the Triton recurrence holds W on chip for H <= {MAX_HIDDEN}, got H = {H}; "
                         "use elementwise_rnn, which falls back to the fused CPU-style loop")
    if lengths is not None:
        lengths = lengths.to(device=u.device, dtype=torch.int32).contiguous()
    return TritonElementwiseRNN.apply(u.contiguous(), weight.contiguous(), h0.contiguous(),
                                      None if bias is None else bias.contiguous(), lengths, activation)
