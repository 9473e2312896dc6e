"""The Triton kernel's guard: a failed launch (forward or backward) and a kernel that computes
a wrong answer both fall back to the fused loop with one warning; the on-chip limit and the
float64 rule of automatic dispatch.

Failures are injected where a real one would arise: the compiled kernels themselves
(``_forward_kernel`` / ``_backward_kernel``) are replaced by stand-ins that raise, or that
compute the recurrence with the fused loop (optionally off by a little), so the launch
wrappers, the guard and ``elementwise_rnn`` around them are the real code. These run on the
CPU without Triton's interpreter (the stand-ins never reach Triton). One test runs the real
kernel through the interpreter in automatic mode: its self-check must pass (no false alarm).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rnnlab.kernels import triton_recurrence as tr
from rnnlab.kernels.families import rnn as recurrence
from rnnlab.kernels.families.rnn import elementwise_rnn, reference_elementwise_rnn

F64 = torch.float64


@pytest.fixture
def guard(monkeypatch):
    """Automatic mode, CPU tensors standing in for CUDA ones (TRITON_INTERPRET=1 lets the
    guard accept CPU tensors; the kernels are stand-ins, so Triton never runs), a clean slate."""
    monkeypatch.delenv("RNNLAB_TRITON", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(tr, "triton", tr.triton or object())  # as if installed
    monkeypatch.setattr(tr, "DISABLED", None)
    monkeypatch.setattr(tr, "CHECKED", {})
    monkeypatch.setattr(tr, "_WARNED", set())
    # float64 under the conservative budget goes to the fused loop: give the stand-in device a
    # GPU with float64 tensor cores
    monkeypatch.setattr(tr, "CONSERVATIVE_BUDGET", tr.Budget(65536, 227 * 1024, (9, 0), "test GPU"))
    monkeypatch.setattr(recurrence, "_triton_dispatch", lambda u, H: True)
    return SimpleNamespace(forward=[], backward=[])


def _mask(lengths, T):
    return None if lengths is None else (torch.arange(T).unsqueeze(1) < lengths.long().unsqueeze(0)).unsqueeze(2)


class FakeForward:
    """Stands in for ``_forward_kernel[grid](...)``: writes the fused loop's states (plus
    ``error``) into the kernel's output buffer S, or raises ``fail``."""

    def __init__(self, calls, error=0.0, fail=None):
        self.calls, self.error, self.fail = calls, error, fail

    def __getitem__(self, grid):
        def launch(u, weight, h0, bias, lengths, S, T, B, H, ACT, HAS_LEN, **kw):
            self.calls.append(ACT)
            if self.fail:
                raise self.fail
            act = list(tr._ACT_CODES)[ACT]
            with torch.no_grad():
                S.copy_(
                    recurrence._ElementwiseRNN.apply(
                        u, weight, h0, bias if act == "modrelu" else None, _mask(lengths, T) if HAS_LEN else None, act
                    )
                    + self.error
                )

        return launch


class FakeBackward:
    """Stands in for ``_backward_kernel[grid](...)``: the fused loop's backward written into
    the kernel's outputs (G, grad_h0, the first program's bias gradient), scaled by
    ``1 + error``, or raises ``fail``."""

    def __init__(self, calls, error=0.0, fail=None):
        self.calls, self.error, self.fail = calls, error, fail

    def __getitem__(self, grid):
        def launch(grad_S, S, weight, lengths, G, grad_h0, gb_parts, T, B, H, last, ACT, HAS_LEN, **kw):
            self.calls.append(ACT)
            if self.fail:
                raise self.fail
            act = list(tr._ACT_CODES)[ACT]
            bias = S.new_zeros(H) if act == "modrelu" else None
            ctx = SimpleNamespace(
                saved_tensors=(S, weight, None, bias, _mask(lengths, T) if HAS_LEN else None),
                activation=act,
                needs_input_grad=(True, False, True, act == "modrelu"),
            )
            g, _, gh0, gb = recurrence._ElementwiseRNN.backward(ctx, grad_S)[:4]
            G.copy_(g * (1 + self.error))
            grad_h0.copy_(gh0)
            if gb is not None:
                gb_parts.zero_()
                gb_parts[0].copy_(gb)

        return launch


def _problem(act="tanh", T=6, B=5, H=7, lengths=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(T, B, H, generator=g, dtype=F64, requires_grad=True)
    W = (torch.randn(H, H, generator=g, dtype=F64) / H**0.5).requires_grad_()
    h0 = torch.randn(B, H, generator=g, dtype=F64, requires_grad=True)
    b = (0.3 * torch.randn(H, generator=g, dtype=F64)).requires_grad_() if act == "modrelu" else None
    lens = torch.tensor([(T, 2, 0, 4, 1)[i % 5] for i in range(B)]) if lengths else None
    return u, W, h0, b, lens


def _grads(fn, u, W, h0, b, act, lens):
    out, h_n = fn(u, W, h0, act, b, lens)
    g = torch.Generator().manual_seed(9)
    loss = (out * torch.randn(out.shape, generator=g, dtype=F64).to(out.device, out.dtype)).sum() + h_n.square().sum()
    ins = [x for x in (u, W, h0, b) if x is not None]
    return [out.detach(), h_n.detach(), *torch.autograd.grad(loss, ins)]


def _assert_same(got, want):
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=1e-10)


def _runtime_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, RuntimeWarning)]


# --- failures -------------------------------------------------------------------------------


@pytest.mark.parametrize("act", ["tanh", "modrelu"])
def test_backward_launch_failure_falls_back_with_one_warning(guard, monkeypatch, act):
    """The issue's case: the backward kernel fails inside ``loss.backward()``. Automatic mode
    warns once and computes the gradients with the fused loop's backward (equal to the
    reference loop's); the process then stops using the kernel."""
    monkeypatch.setattr(tr, "_forward_kernel", FakeForward(guard.forward))
    monkeypatch.setattr(
        tr, "_backward_kernel", FakeBackward(guard.backward, fail=RuntimeError("out of resource: shared memory\nlog"))
    )
    tr.CHECKED[tr.shape_class(torch.device("cpu"), F64, 7, act, True)] = None  # as if checked earlier
    p = _problem(act, lengths=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = _grads(elementwise_rnn, *p[:4], act, p[4])
    _assert_same(got, _grads(reference_elementwise_rnn, *p[:4], act, p[4]))
    msgs = _runtime_warnings(record)
    assert len(msgs) == 1 and "in its backward" in msgs[0] and "out of resource: shared memory)" in msgs[0], msgs
    assert guard.forward and guard.backward == [tr._ACT_CODES[act]]
    assert tr.DISABLED and not tr.available()
    n = len(guard.forward)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _grads(elementwise_rnn, *p[:4], act, p[4])
    assert len(guard.forward) == n and len(guard.backward) == 1 and not _runtime_warnings(record)


def test_backward_launch_failure_raises_when_forced_or_unguarded(guard, monkeypatch):
    monkeypatch.setattr(tr, "_forward_kernel", FakeForward(guard.forward))
    monkeypatch.setattr(tr, "_backward_kernel", FakeBackward(guard.backward, fail=RuntimeError("PTX error")))
    u, W, h0, _, _ = _problem()
    S = tr.triton_elementwise_rnn(u, W, h0, "tanh")  # no fallback given: unguarded
    with pytest.raises(RuntimeError, match="PTX error"):
        S.sum().backward()
    monkeypatch.setenv("RNNLAB_TRITON", "force")
    out, _ = elementwise_rnn(u, W, h0, "tanh")
    with pytest.raises(RuntimeError, match="PTX error"):
        out.sum().backward()
    assert tr.DISABLED is None and tr.CHECKED == {}  # forced: no check, nothing disabled


@pytest.mark.parametrize("when", ["self-check", "forward"])
def test_forward_launch_failure_falls_back_with_one_warning(guard, monkeypatch, when):
    """A forward kernel that fails (at its first launch, which is the self-check, or later):
    one warning, the fused loop's result, no further attempt."""
    monkeypatch.setattr(tr, "_forward_kernel", FakeForward(guard.forward, fail=RuntimeError("PTX compilation failed")))
    monkeypatch.setattr(tr, "_backward_kernel", FakeBackward(guard.backward))
    if when == "forward":
        tr.CHECKED[tr.shape_class(torch.device("cpu"), F64, 7, "relu", False)] = None
    p = _problem("relu")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = _grads(elementwise_rnn, *p[:4], "relu", None)
        again = _grads(elementwise_rnn, *p[:4], "relu", None)
    _assert_same(got, _grads(reference_elementwise_rnn, *p[:4], "relu", None))
    _assert_same(again, got)
    msgs = _runtime_warnings(record)
    assert len(msgs) == 1 and f"in its {when}" in msgs[0] and "PTX compilation failed" in msgs[0], msgs
    assert len(guard.forward) == 1 and guard.backward == []


def test_out_of_memory_is_not_a_kernel_failure(guard, monkeypatch):
    """Running out of GPU memory is raised, not hidden by a fallback that needs the same memory."""
    monkeypatch.setattr(tr, "_forward_kernel", FakeForward(guard.forward, fail=torch.cuda.OutOfMemoryError("OOM")))
    with pytest.raises(torch.cuda.OutOfMemoryError):
        tr.triton_elementwise_rnn(*_problem()[:3], "tanh", fallback=recurrence._ElementwiseRNN)
    assert tr.DISABLED is None


# --- the self-check -------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["forward", "backward"])
def test_wrong_kernel_is_caught_by_the_self_check(guard, monkeypatch, which):
    """A kernel that compiles and runs but is off by 1e-3 (forward states, or the backward's
    dL/du): the first launch of the shape class compares a small problem with the fused loop,
    warns once, falls back and remembers; other classes are checked on their own."""
    monkeypatch.setattr(tr, "_forward_kernel", FakeForward(guard.forward, error=1e-3 if which == "forward" else 0))
    monkeypatch.setattr(tr, "_backward_kernel", FakeBackward(guard.backward, error=1e-3 if which == "backward" else 0))
    p = _problem("tanh")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = _grads(elementwise_rnn, *p[:4], "tanh", None)
        again = _grads(elementwise_rnn, *p[:4], "tanh", None)
    _assert_same(got, _grads(reference_elementwise_rnn, *p[:4], "tanh", None))  # the fused loop's answer
    _assert_same(again, got)
    msgs = _runtime_warnings(record)
    assert len(msgs) == 1 and "disagrees with the fused loop" in msgs[0] and "H padded to 16, tanh" in msgs[0], msgs
    key = tr.shape_class(torch.device("cpu"), F64, 7, "tanh", False)
    assert tr.CHECKED[key].startswith("max error ")
    assert len(guard.forward) == 1  # the check's only; none after
    assert tr.DISABLED is None  # a wrong answer in one class does not disable the others
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _grads(elementwise_rnn, *_problem("identity", lengths=True)[:4], "identity", _problem(lengths=True)[4])
    assert len(_runtime_warnings(record)) == 1 and len(tr.CHECKED) == 2


def test_a_correct_kernel_passes_its_check_and_runs(guard, monkeypatch):
    monkeypatch.setattr(tr, "_forward_kernel", FakeForward(guard.forward))
    monkeypatch.setattr(tr, "_backward_kernel", FakeBackward(guard.backward))
    for act in ("tanh", "relu", "modrelu", "identity"):
        p = _problem(act, lengths=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = _grads(elementwise_rnn, *p[:4], act, p[4])
        _assert_same(got, _grads(reference_elementwise_rnn, *p[:4], act, p[4]))
    # per class: the check's launch and the call's (forward and backward)
    assert len(guard.forward) == 8 and len(guard.backward) == 8
    assert set(tr.CHECKED.values()) == {None} and len(tr.CHECKED) == 4


@pytest.mark.parametrize("context", ["no_grad", "inference_mode", "autocast"])
def test_self_check_runs_under_the_callers_modes(guard, monkeypatch, context):
    """A first launch under torch.no_grad(), torch.inference_mode() or bf16 autocast (evaluation,
    serving) still checks with gradients and in the call's dtype: no false failure that would
    switch the kernel off."""
    monkeypatch.setattr(tr, "_forward_kernel", FakeForward(guard.forward))
    monkeypatch.setattr(tr, "_backward_kernel", FakeBackward(guard.backward))
    u, W, h0, _, _ = _problem()
    ctx = {
        "no_grad": torch.no_grad,
        "inference_mode": torch.inference_mode,
        "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    }[context]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ctx():
            S = tr.triton_elementwise_rnn(
                u.detach(), W.detach(), h0.detach(), "tanh", fallback=recurrence._ElementwiseRNN
            )
    assert tr.DISABLED is None and list(tr.CHECKED.values()) == [None]
    assert len(guard.forward) == 2 and len(guard.backward) == 1  # the check's launches and the call's forward
    torch.testing.assert_close(S, reference_elementwise_rnn(u.detach(), W.detach(), h0.detach())[0])


def test_self_check_leaves_the_global_random_stream_alone(guard, monkeypatch):
    monkeypatch.setattr(tr, "_forward_kernel", FakeForward(guard.forward))
    monkeypatch.setattr(tr, "_backward_kernel", FakeBackward(guard.backward))
    torch.manual_seed(5)
    tr.triton_elementwise_rnn(*_problem()[:3], "tanh", fallback=recurrence._ElementwiseRNN)
    after = torch.rand(3)
    torch.manual_seed(5)
    torch.testing.assert_close(after, torch.rand(3))
    assert len(guard.forward) == 2


# --- the on-chip limit and float64 --------------------------------------------------------

H100 = tr.Budget(registers_per_sm=65536, shared_per_block=227 * 1024, capability=(9, 0), name="H100")
RTX4090 = tr.Budget(registers_per_sm=65536, shared_per_block=99 * 1024, capability=(8, 9), name="RTX 4090")


def test_register_arithmetic_by_hand():
    """docs/device.md's numbers: (words (H^2 + 6 * 16 H) + 7 * 16 H) / (32 warps)."""
    assert tr.registers_per_thread(128, torch.float32) == (128 * 128 + 6 * 16 * 128 + 7 * 16 * 128) / 256 == 168
    assert tr.registers_per_thread(256, torch.float32) == (256 * 256 + 13 * 16 * 256) / 256 == 464
    assert tr.registers_per_thread(128, F64) == (2 * (128 * 128 + 6 * 16 * 128) + 7 * 16 * 128) / 256 == 280
    assert tr.registers_per_thread(64, F64) == (2 * (64 * 64 + 6 * 16 * 64) + 7 * 16 * 64) / 128 == 216
    assert tr.shared_bytes(128, torch.float32) == 64 * 1024 and tr.shared_bytes(64, F64) == 32 * 1024


@pytest.mark.parametrize(
    "budget,f32,f64",
    [
        (H100, 128, 64),
        (RTX4090, 128, 0),  # no float64 tensor cores
        (tr.CONSERVATIVE_BUDGET, 128, 0),
        (tr.Budget(65536, 48 * 1024, (8, 0)), 64, 64),  # 48 KiB of shared memory: a float32 W of 128^2 is 64 KiB
        (tr.Budget(32768, 227 * 1024, (9, 0)), 64, 64),  # half the register file: 168 > 32768 / 256 at 128
        (tr.Budget(16384, 227 * 1024, (9, 0)), 32, 32),
    ],
)
def test_hidden_limit_from_the_budget(budget, f32, f64):
    assert tr.hidden_limit(torch.float32, budget) == f32
    assert tr.hidden_limit(F64, budget) == f64
    assert tr.hidden_limit(torch.float16, budget) == 0
    for dtype, limit in ((torch.float32, f32), (F64, f64)):
        if limit:  # what fits, fits; the next power of two does not (or is past MAX_HIDDEN)
            regs = min(tr.REGISTERS_PER_THREAD, budget.registers_per_sm // (32 * tr._warps(limit)))
            assert tr.registers_per_thread(limit, dtype) <= regs
            assert tr.shared_bytes(limit, dtype) <= budget.shared_per_block
            nxt = 2 * limit
            if nxt <= tr.MAX_HIDDEN:
                regs = min(tr.REGISTERS_PER_THREAD, budget.registers_per_sm // (32 * tr._warps(nxt)))
                assert (
                    tr.registers_per_thread(nxt, dtype) > regs or tr.shared_bytes(nxt, dtype) > budget.shared_per_block
                )


def test_dispatch_reads_the_device_properties(monkeypatch):
    """On CUDA the limit and the float64 rule come from torch.cuda.get_device_properties."""
    props = {
        0: SimpleNamespace(
            name="NVIDIA H200", major=9, minor=0, regs_per_multiprocessor=65536, shared_memory_per_block_optin=232448
        ),
        1: SimpleNamespace(
            name="NVIDIA GeForce RTX 4090",
            major=8,
            minor=9,
            regs_per_multiprocessor=65536,
            shared_memory_per_block_optin=101376,
        ),
    }
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
    tr._cuda_budget.cache_clear()
    try:
        use = tr.use_triton
        assert tr.device_budget("cuda:0").name == "NVIDIA H200"
        assert use("cuda", torch.float32, 128, "auto", True) and not use("cuda", torch.float32, 129, "auto", True)
        assert use("cuda", F64, 64, "auto", True) and not use("cuda", F64, 65, "auto", True)
        assert not use("cuda", F64, 16, "auto", True, device=torch.device("cuda", 1))  # no float64 tensor cores
        assert use("cuda", torch.float32, 100, "auto", True, device=torch.device("cuda", 1))
        reason = tr.unfit_reason(torch.device("cuda", 1), F64, 16)
        assert "RTX 4090" in reason and "(8, 9)" in reason
        assert "H = 129 > 128" in tr.unfit_reason(torch.device("cuda", 0), torch.float32, 129)
    finally:
        tr._cuda_budget.cache_clear()


def test_guard_sends_unfit_shapes_to_the_fused_loop_silently(guard, monkeypatch):
    """Past the limit (or float64 without tensor cores) the launch function itself computes
    with the fused loop, whoever calls it, and without a warning: that is a rule, not a fault."""
    monkeypatch.setattr(tr, "_forward_kernel", FakeForward(guard.forward))
    monkeypatch.setattr(tr, "CONSERVATIVE_BUDGET", RTX4090)
    u, W, h0, _, _ = _problem(H=7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        S = tr.triton_elementwise_rnn(u, W, h0, "tanh", fallback=recurrence._ElementwiseRNN)  # float64 on a 4090
        u32 = torch.randn(2, 3, 130)
        S32 = tr.triton_elementwise_rnn(
            u32, torch.eye(130) * 0.5, torch.zeros(3, 130), "tanh", fallback=recurrence._ElementwiseRNN
        )
        S300 = tr.triton_elementwise_rnn(
            torch.randn(2, 3, 300),
            torch.eye(300) * 0.5,
            torch.zeros(3, 300),
            "relu",
            fallback=recurrence._ElementwiseRNN,
        )  # past what the kernel's code accepts
        monkeypatch.setattr(tr, "triton", None)  # Triton not installed
        S_none = tr.triton_elementwise_rnn(u, W, h0, "tanh", fallback=recurrence._ElementwiseRNN)
    assert guard.forward == [] and S300.shape == (2, 3, 300)
    torch.testing.assert_close(S, reference_elementwise_rnn(u, W, h0, "tanh")[0])
    torch.testing.assert_close(S_none, S)
    torch.testing.assert_close(S32, reference_elementwise_rnn(u32, torch.eye(130) * 0.5, torch.zeros(3, 130))[0])


# --- the real kernel, interpreted, in automatic mode -----------------------------------------


def _interpreted_worker(path: str) -> None:
    """Subprocess (TRITON_INTERPRET=1, RNNLAB_TRITON unset): the guarded launch on CPU float32
    tensors runs the real kernel after its self-check."""
    from rnnlab.kernels import triton_recurrence as tr

    assert type(tr._forward_kernel).__name__ == "InterpretedFunction"
    launches = []
    real = tr._launch_forward
    tr._launch_forward = lambda *a: launches.append(1) or real(*a)
    out = {}
    for act, lengths in (("tanh", None), ("modrelu", torch.tensor([5, 1, 0, 3]))):
        g = torch.Generator().manual_seed(1)
        u = torch.randn(5, 4, 20, generator=g, requires_grad=True)
        W = (torch.randn(20, 20, generator=g) / 20**0.5).requires_grad_()
        h0 = torch.randn(4, 20, generator=g, requires_grad=True)
        b = (0.3 * torch.randn(20, generator=g)).requires_grad_() if act == "modrelu" else None
        ins = [x for x in (u, W, h0, b) if x is not None]
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            S = tr.triton_elementwise_rnn(u, W, h0, act, b, lengths, fallback=recurrence._ElementwiseRNN)
            got = [S.detach(), *torch.autograd.grad(S.pow(2).sum(), ins)]
        mask = None if lengths is None else (torch.arange(5)[:, None] < lengths[None, :]).unsqueeze(2)
        S2 = recurrence._ElementwiseRNN.apply(u, W, h0, b, mask, act)
        out[act] = {
            "got": got,
            "want": [S2.detach(), *torch.autograd.grad(S2.pow(2).sum(), ins)],
            "warnings": [str(w.message) for w in record],
        }
    out["launches"] = len(launches)
    out["checked"] = dict(tr.CHECKED)
    torch.save(out, path)


def test_real_kernel_passes_its_self_check_under_the_interpreter(tmp_path):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'rnnlab[triton]')")
    path = tmp_path / "out.pt"
    here = Path(__file__).resolve().parent
    env = {k: v for k, v in os.environ.items() if k != "RNNLAB_TRITON"}
    env.update(TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(here), *[p for p in sys.path if p]]))
    code = f"import test_triton_guard as t; t._interpreted_worker({str(path)!r})"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = torch.load(path)
    assert res["launches"] == 4  # per activation: the self-check's launch and the call's
    assert list(res["checked"].values()) == [None, None], res["checked"]
    for act in ("tanh", "modrelu"):
        assert res[act]["warnings"] == []
        for x, y in zip(res[act]["got"], res[act]["want"], strict=True):
            torch.testing.assert_close(x, y, atol=2e-5, rtol=2e-5)


# --- the real kernel on CUDA (skipped without a GPU; benchmarks/gpu_check.sh runs it) ---------

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")


@CUDA
@pytest.mark.parametrize("act", ["tanh", "modrelu"])
def test_kernel_on_cuda_passes_its_check_and_agrees(monkeypatch, act):
    """Automatic mode on a CUDA device: for float32 (and float64 where the device has float64
    tensor cores), at a small H and at the device's limit, with and without lengths,
    elementwise_rnn takes the kernel after a passing self-check and warns nothing; its outputs
    and gradients agree with the reference loop run in float64 on the CPU (modReLU in float32:
    judged as the self-check judges, since float32 rounding may put a unit on the other side
    of modReLU's threshold, where the derivative jumps)."""
    pytest.importorskip("triton")
    monkeypatch.delenv("RNNLAB_TRITON", raising=False)
    monkeypatch.setattr(tr, "DISABLED", None)
    monkeypatch.setattr(tr, "CHECKED", {})
    launches = []
    real = tr._launch_forward
    monkeypatch.setattr(tr, "_launch_forward", lambda *a: launches.append(1) or real(*a))
    device = torch.device("cuda", torch.cuda.current_device())
    budget = tr.device_budget(device)
    n = 0
    for dtype in (torch.float32, F64):
        limit = tr.hidden_limit(dtype, budget)
        if not limit:
            continue
        for hidden in sorted({20, limit}):
            for lengths in (False, True):
                p = _problem(act, T=7, B=19, H=hidden, lengths=lengths)
                dev = [None if x is None else x.detach().to(device, dtype).requires_grad_() for x in p[:4]]
                with warnings.catch_warnings():
                    warnings.simplefilter("error", RuntimeWarning)
                    got = _grads(elementwise_rnn, *dev, act, p[4])
                n += 1
                if act == "modrelu" and dtype == torch.float32:
                    err, tol = tr.compare(recurrence._ElementwiseRNN, device, dtype, hidden, act, lengths, T=7)
                    assert err <= tol, (hidden, lengths, err)
                    continue
                want = _grads(reference_elementwise_rnn, *p[:4], act, p[4])
                tol = 1e-10 if dtype == F64 else 1e-4
                for x, y in zip(got, want, strict=True):
                    torch.testing.assert_close(x.cpu().double(), y, atol=tol, rtol=tol)
    assert len(launches) == 2 * n + sum(act == "modrelu" and k[1] == "float32" for k in tr.CHECKED), (
        len(launches),
        n,
        tr.CHECKED,
    )
    assert tr.CHECKED and set(tr.CHECKED.values()) == {None}
