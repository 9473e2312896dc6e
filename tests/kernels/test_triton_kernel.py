"""The Triton recurrence kernel against the reference loop, through Triton's CPU interpreter.

``TRITON_INTERPRET=1`` must be set before Triton itself is imported (Triton's own library
functions are decorated at its import), so the interpreted runs happen in one subprocess per
case set (:func:`_worker`, started by a module fixture) with ``TRITON_INTERPRET=1`` and
``RNNLAB_TRITON=force``; it saves the kernel's and the reference's results and each test
compares its case here. This process never imports Triton under the interpreter, so no other
test is affected. The dispatch tests need no Triton.

Each case runs :func:`rnnlab.kernels.elementwise_rnn` (which must take the Triton path) and
:func:`rnnlab.kernels.reference_elementwise_rnn` (a plain autograd loop) on the same inputs and
compares outputs, final state and the gradients of u, W, h0 and the modReLU bias. Tolerances:
float64 to 1e-12 (observed ~1e-14); float32 to 2e-5 absolute and relative (observed a few
1e-6 on the weight gradient, a sum over T * B products).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rnnlab.kernels import triton_recurrence as tr_module
from rnnlab.kernels.families import rnn as recurrence
from rnnlab.kernels.families.rnn import elementwise_rnn, reference_elementwise_rnn

ACTS = ("tanh", "relu", "modrelu", "identity")
TOL = {torch.float64: dict(atol=1e-12, rtol=1e-12), torch.float32: dict(atol=2e-5, rtol=2e-5)}
DTYPES = {"f32": torch.float32, "f64": torch.float64}

# two shapes: a single program with h0 given; B=17 > BLOCK_B (two programs, the second
# partly masked) and H=20 (padded to 32) with h0 = zeros
SHAPES = {"T4B3H5-h0": (4, 3, 5, True), "T3B17H20-noh0": (3, 17, 20, False)}
CASES = {f"{a}-{s}-{d}": (*SHAPES[s], a, d, None) for a in ACTS for s in SHAPES for d in DTYPES}
# lengths 4, 1 and 0: frozen states, zero outputs, gradients passed straight through
CASES.update({f"{a}-lengths-f64": (4, 3, 6, True, a, "f64", [4, 1, 0]) for a in ACTS})
# H = 130 (padded to 256, near the on-chip limit), three batch programs, 40 steps
SLOW_CASES = {
    f"{a}-T40B40H130-lengths-f32": (40, 40, 130, True, a, "f32", [40] * 30 + [17] * 10) for a in ("tanh", "modrelu")
}


def _problem(T, B, H, act, dtype, with_h0, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(T, B, H, generator=g, dtype=dtype).requires_grad_()
    W = (torch.randn(H, H, generator=g, dtype=dtype) / H**0.5).requires_grad_()
    h0 = torch.randn(B, H, generator=g, dtype=dtype).requires_grad_() if with_h0 else None
    b = (0.3 * torch.randn(H, generator=g, dtype=dtype)).requires_grad_() if act == "modrelu" else None
    r_out = torch.randn(T, B, H, generator=g, dtype=dtype)
    r_last = torch.randn(B, H, generator=g, dtype=dtype)
    return u, W, h0, b, r_out, r_last


def _run(fn, u, W, h0, b, act, lengths, r_out, r_last):
    out, h_n = fn(u, W, h0, act, b, lengths)
    loss = (out * r_out).sum() + (h_n * r_last).sum()  # gradients through outputs and final state
    ins = [x for x in (u, W, h0, b) if x is not None]
    return [out.detach(), h_n.detach(), *torch.autograd.grad(loss, ins)]


def _worker(path: str, slow: bool) -> None:
    """Run in the subprocess (TRITON_INTERPRET=1, RNNLAB_TRITON=force): every case through
    elementwise_rnn (counting calls of the Triton kernel) and the reference loop."""
    from rnnlab.kernels import triton_recurrence as tr

    assert type(tr._forward_kernel).__name__ == "InterpretedFunction", type(tr._forward_kernel)
    calls = []
    real = tr.triton_elementwise_rnn
    tr.triton_elementwise_rnn = lambda *a, **k: calls.append(1) or real(*a, **k)
    results = {}
    for name, (T, B, H, with_h0, act, dt, lengths) in (SLOW_CASES if slow else CASES).items():
        u, W, h0, b, r_out, r_last = _problem(T, B, H, act, DTYPES[dt], with_h0)
        lengths = None if lengths is None else torch.tensor(lengths)
        n = len(calls)
        got = _run(elementwise_rnn, u, W, h0, b, act, lengths, r_out, r_last)
        results[name] = {
            "triton_calls": len(calls) - n,
            "got": got,
            "want": _run(reference_elementwise_rnn, u, W, h0, b, act, lengths, r_out, r_last),
        }
        if slow:  # float32 at this size: judged against the CPU path's own error from float64
            os.environ["RNNLAB_TRITON"] = "off"
            results[name]["fused"] = _run(elementwise_rnn, u, W, h0, b, act, lengths, r_out, r_last)
            os.environ["RNNLAB_TRITON"] = "force"
            d = [x.detach().double().requires_grad_() if x is not None else None for x in (u, W, h0, b)]
            results[name]["want"] = _run(
                reference_elementwise_rnn, d[0], d[1], d[2], d[3], act, lengths, r_out.double(), r_last.double()
            )
    if not slow:  # the kernel's state sequence against the CPU fused Function directly
        u, W, h0, b, r_out, _ = _problem(5, 4, 9, "modrelu", torch.float32, True, seed=3)
        ins = [u, W, h0, b]
        S = real(u, W, h0, "modrelu", b)
        S2 = recurrence._ElementwiseRNN.apply(u, W, h0, b, None, "modrelu")
        results["fused"] = {
            "got": [S.detach(), *torch.autograd.grad((S * r_out).sum(), ins)],
            "want": [S2.detach(), *torch.autograd.grad((S2 * r_out).sum(), ins)],
        }
        # asRNN's transformed coordinates: the fast path (Triton under force) against the step loop
        from rnnlab.cells.asrnn import ASRNNCell
        from rnnlab.cells.base import unroll

        torch.manual_seed(0)
        cell = ASRNNCell(3, 7, a=0.5, b=1.5).double()
        x = torch.randn(4, 2, 3, dtype=torch.float64)
        r = torch.randn(4, 2, 7, dtype=torch.float64)
        params = list(cell.parameters())
        n = len(calls)
        runs = []
        for fn in (cell.sequence, lambda x: unroll(cell, x)):
            out, h_n = fn(x)
            runs.append([out.detach(), h_n.detach(), *torch.autograd.grad((out * r).sum() + h_n.sum(), params)])
        results["asrnn"] = {"triton_calls": len(calls) - n, "got": runs[0], "want": runs[1]}
        H = tr.MAX_HIDDEN + 1
        try:
            real(torch.zeros(1, 1, H), torch.zeros(H, H), torch.zeros(1, H), "tanh")
            results["too_large"] = "no error"
        except ValueError as e:
            results["too_large"] = str(e)
    torch.save(results, path)


def _interpret(tmp_path_factory, slow: bool) -> dict:
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'rnnlab[triton]')")
    path = tmp_path_factory.mktemp("triton") / "results.pt"
    here = Path(__file__).resolve().parent
    env = dict(
        os.environ,
        TRITON_INTERPRET="1",
        RNNLAB_TRITON="force",
        PYTHONPATH=os.pathsep.join([str(here), *[p for p in sys.path if p]]),
    )
    code = f"import test_triton_kernel as t; t._worker({str(path)!r}, {slow})"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"the interpreter run failed:\n{proc.stderr[-4000:]}"
    return torch.load(path)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    return _interpret(tmp_path_factory, slow=False)


@pytest.fixture(scope="module")
def interpreted_slow(tmp_path_factory):
    return _interpret(tmp_path_factory, slow=True)


def _check(result, name, dtype, with_h0, has_bias):
    assert result["triton_calls"] == 1, (
        f"{name}: elementwise_rnn did not take the Triton path under RNNLAB_TRITON=force"
    )
    names = (
        ["outputs", "h_n", "grad_u", "grad_W"] + (["grad_h0"] if with_h0 else []) + (["grad_bias"] if has_bias else [])
    )
    assert len(result["got"]) == len(names) == len(result["want"])
    for label, x, y in zip(names, result["got"], result["want"]):
        torch.testing.assert_close(x, y, **TOL[dtype], msg=lambda m, n=label: f"{name} {n}: {m}")


@pytest.mark.parametrize("name", list(CASES))
def test_triton_matches_reference_loop(interpreted, name):
    T, B, H, with_h0, act, dt, lengths = CASES[name]
    _check(interpreted[name], name, DTYPES[dt], with_h0, act == "modrelu")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW_CASES))
def test_triton_larger_shape(interpreted_slow, name):
    """At this size float32 rounding differs between any two summation orders (modReLU's
    threshold can flip a unit), so the kernel's float32 error from the float64 reference must
    stay within 4x the CPU fused path's own float32 error (plus 1e-5 of the scale)."""
    res = interpreted_slow[name]
    assert res["triton_calls"] == 1
    for i, (x, f, y) in enumerate(zip(res["got"], res["fused"], res["want"], strict=True)):
        err, ref_err = (x.double() - y).abs().max().item(), (f.double() - y).abs().max().item()
        assert err <= 4 * ref_err + 1e-5 * y.abs().max().item(), f"{name} result {i}: {err} vs CPU path {ref_err}"


def test_triton_matches_fused_path_float32(interpreted):
    """The kernel's state sequence and gradients (u, W, h0, bias) against the CPU fused Function."""
    for x, y in zip(interpreted["fused"]["got"], interpreted["fused"]["want"], strict=True):
        torch.testing.assert_close(x, y, **TOL[torch.float32])


def test_asrnn_fast_path_through_triton(interpreted):
    """ASRNNCell.sequence takes the Triton kernel for its transformed tanh recurrence and
    agrees with the step loop (outputs, final state, every parameter's gradient) in float64."""
    res = interpreted["asrnn"]
    assert res["triton_calls"] == 1
    for x, y in zip(res["got"], res["want"], strict=True):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=1e-10)


def test_triton_rejects_large_hidden(interpreted):
    assert f"H = {tr_module.MAX_HIDDEN + 1}" in interpreted["too_large"]


# --- dispatch (no Triton needed) ----------------------------------------------------------


def test_use_triton_decision():
    f32 = torch.float32
    use = tr_module.use_triton
    assert use("cuda", f32, 128, "auto", True)
    assert not use("cuda", f32, 129, "auto", True)  # past the on-chip limit (tests/kernels/test_triton_guard.py)
    assert not use("cuda", torch.float64, 16, "auto", True)  # no device to ask: float64 tensor cores not assumed
    assert use("cuda", torch.float64, tr_module.MAX_HIDDEN, "force", True)
    assert not use("cpu", f32, 128, "auto", True)  # CPU keeps the fused loop
    assert not use("cuda", f32, 128, "auto", False)  # Triton not installed
    assert not use("cuda", f32, tr_module.MAX_HIDDEN + 1, "auto", True)  # W does not fit on chip
    assert not use("cuda", torch.float16, 128, "auto", True)
    assert not use("cuda", f32, 128, "off", True)
    with pytest.raises(ValueError, match="not installed"):
        use("cuda", f32, 128, "force", False)


def test_mode_reads_environment(monkeypatch):
    for raw, want in [("0", "off"), ("off", "off"), ("1", "force"), ("FORCE", "force"), ("auto", "auto")]:
        monkeypatch.setenv("RNNLAB_TRITON", raw)
        assert tr_module.mode() == want
    monkeypatch.delenv("RNNLAB_TRITON")
    assert tr_module.mode() == "auto"
    monkeypatch.setenv("RNNLAB_TRITON", "sometimes")
    with pytest.raises(ValueError, match="'sometimes'"):
        tr_module.mode()


def test_force_on_cpu_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        tr_module.use_triton("cpu", torch.float32, 8, "force", True)


def test_elementwise_rnn_dispatches_on_device(monkeypatch):
    """CPU tensors never reach the kernel; a CUDA tensor goes to use_triton's decision."""
    monkeypatch.delenv("RNNLAB_TRITON", raising=False)

    def boom(*a, **k):
        raise AssertionError("the Triton kernel was called for CPU tensors")

    monkeypatch.setattr(tr_module, "triton_elementwise_rnn", boom)
    monkeypatch.setattr(tr_module, "available", lambda: True)  # as if Triton were installed
    u = torch.randn(3, 2, 4, dtype=torch.float64)
    out, _ = elementwise_rnn(u, torch.eye(4, dtype=torch.float64) * 0.5)
    torch.testing.assert_close(out, reference_elementwise_rnn(u, torch.eye(4, dtype=torch.float64) * 0.5)[0])
    assert not recurrence._triton_dispatch(u, 4)
    cuda_like = SimpleNamespace(device=torch.device("cuda"), dtype=torch.float32)
    assert recurrence._triton_dispatch(cuda_like, 64)
    assert not recurrence._triton_dispatch(cuda_like, tr_module.MAX_HIDDEN + 1)
    monkeypatch.setenv("RNNLAB_TRITON", "off")
    assert not recurrence._triton_dispatch(cuda_like, 64)
    monkeypatch.setattr(tr_module, "available", lambda: False)
    monkeypatch.delenv("RNNLAB_TRITON")
    assert not recurrence._triton_dispatch(cuda_like, 64)


def test_failed_launch_falls_back_once_with_a_warning(monkeypatch):
    """A kernel that does not compile on the user's GPU: automatic mode warns, computes with
    the fused loop, and stops dispatching; forced mode raises."""
    monkeypatch.delenv("RNNLAB_TRITON", raising=False)
    monkeypatch.setattr(tr_module, "DISABLED", None)
    monkeypatch.setattr(tr_module, "triton", tr_module.triton or object())  # as if installed
    launches = []

    def broken(*a, **k):
        launches.append(1)
        raise RuntimeError("PTX compilation failed\nlong log")

    monkeypatch.setattr(tr_module, "triton_elementwise_rnn", broken)
    real_dispatch = recurrence._triton_dispatch
    monkeypatch.setattr(recurrence, "_triton_dispatch", lambda u, H: tr_module.available())  # CPU stands in for CUDA
    u = torch.randn(3, 2, 4, dtype=torch.float64)
    W = 0.5 * torch.eye(4, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match=r"PTX compilation failed\); using the fused loop"):
        out, _ = elementwise_rnn(u, W)
    torch.testing.assert_close(out, reference_elementwise_rnn(u, W)[0])
    assert tr_module.DISABLED and not tr_module.available()
    elementwise_rnn(u, W)  # no second attempt
    assert launches == [1]
    cuda_like = SimpleNamespace(device=torch.device("cuda"), dtype=torch.float32)
    assert not real_dispatch(cuda_like, 64)
    monkeypatch.setenv("RNNLAB_TRITON", "force")
    monkeypatch.setattr(recurrence, "_triton_dispatch", lambda u, H: True)
    with pytest.raises(RuntimeError, match="PTX"):
        elementwise_rnn(u, W)


def test_the_recurrence_reads_the_setting_where_the_kernel_does(monkeypatch):
    """``RNNLAB_TRITON`` is parsed in one place (rnnlab.kernels.triton_setting): the recurrence's
    dispatch of a CPU tensor follows it, spellings and errors included."""
    from rnnlab.kernels import triton_setting
    from rnnlab.kernels.families import rnn as recurrence

    u = torch.zeros(3, 2, 4)
    for raw in ["", " OFF ", "no", "auto", "False"]:
        monkeypatch.setenv("RNNLAB_TRITON", raw)
        assert triton_setting.mode() in ("auto", "off") and not recurrence._triton_dispatch(u, 4)
    monkeypatch.setenv("RNNLAB_TRITON", "sometimes")
    with pytest.raises(ValueError, match="'sometimes'"):
        recurrence._triton_dispatch(u, 4)
    assert tr_module.mode is triton_setting.mode
