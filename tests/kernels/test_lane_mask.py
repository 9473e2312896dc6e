"""The lane kernels zero their outputs from each sequence's length on and return the final
state themselves (no mask pass in Python): outputs past a length are exactly zero, the gradients
arriving there reach nothing (the input terms' gradients past a length are exactly zero), the
final state is the state at the length (h0 at length 0), and everything equals the recurrence
written in PyTorch operations, masked afterwards, in float64."""

import pytest
import torch

from rnnlab.kernels import small
from rnnlab.kernels.families import dmu, gru, lstm, rhn, rnn
from rnnlab.kernels.small_abi import DECLARATIONS

pytestmark = pytest.mark.skipif(not small.available(), reason="no C compiler: the compiled loops cannot be built")

D = torch.float64
E, T, B, H = 3, 6, 5, 2
LENGTHS = [[6, 1, 0, 3, 5], [2, 6, 4, 0, 1], [3, 3, 6, 2, 0]]  # T, 1, 0 among them


def _case(cell: str, gen):
    def r(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=gen, dtype=D)).requires_grad_()

    h0 = r(E, B, H)
    if cell == "rnn":
        ins = [r(E, T, B, H), r(E, H, H, scale=0.6), h0]
        return ins, lambda a, L: rnn._compiled_lanes(*a, L, 0), lambda a, L: rnn._reference(0, *a, L)
    if cell == "lstm":
        ins = [r(E, T, B, 4 * H), r(E, 4 * H, H, scale=0.6), h0, r(E, B, H)]
        return ins, lambda a, L: lstm._compiled(*a, L, True), lambda a, L: lstm._reference(*a, L)
    if cell == "gru":
        ins = [r(E, T, B, 3 * H), r(E, 3 * H, H, scale=0.6), r(E, 3 * H), h0]
        run = lambda a, L: gru._compiled(a[0], a[1], a[2], a[3], L, True)  # noqa: E731
        return ins, run, lambda a, L: gru._reference(*a, L)
    if cell == "rhn":
        ins = [r(E, T, B, 2 * H), r(E, 2, 2 * H, H, scale=0.6), r(E, 2, 2 * H), h0]
        return ins, lambda a, L: rhn._compiled(*a, L, True), lambda a, L: rhn._reference(*a, L)
    # the DMU with one hidden layer of 3: u1 (E, T, B, 3), w1h (E, 3, H), the hidden (3 -> 3), out (2H, 3)
    ins = [r(E, T, B, 3), h0, r(E, 3, H, scale=0.6), r(E, 2 * H, 3, scale=0.6), r(E, 2 * H), r(E, 3, 3), r(E, 3)]
    run = lambda a, L: dmu._compiled(a[0], a[1], a[2], a[3], a[4], L, "tanh", 0.01, True, a[5], a[6])  # noqa: E731
    ref = lambda a, L: dmu._reference(0, 0.01, a[0], a[2], a[3], a[4], a[1], L, a[5], a[6])  # noqa: E731
    return ins, run, ref


@pytest.mark.parametrize("layout", ["time-major", "batch-first"])
@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru", "rhn", "dmu"])
def test_lane_outputs_and_gradients_are_zero_past_each_length(cell, layout, monkeypatch):
    """``layout``: the memory the outputs' gradient comes in (batch-first: as from a readout of
    batch-first outputs), which the backward reads as it is (``batch_first``), without a copy."""
    calls, flags = [], []
    real = small._call

    def spy(name, dtype, *args):
        calls.append(name)
        names = [a.name for a in DECLARATIONS[name]]
        if "batch_first" in names:
            flags.append(args[names.index("batch_first")])
        return real(name, dtype, *args)

    monkeypatch.setattr(small, "_call", spy)
    gen = torch.Generator().manual_seed(7)
    ins, run, ref = _case(cell, gen)
    L = torch.tensor(LENGTHS)
    got = run(ins, L)
    out, finals = got[0], got[1:]
    assert calls and all("_lanes_" in c for c in calls), calls
    live = (torch.arange(T)[None, :, None] < L[:, None, :]).unsqueeze(-1)  # (E, T, B, 1)
    assert torch.all(out.masked_select(~live) == 0)  # exactly zero past each length
    # upstream gradients that are large past the lengths: they must reach nothing
    w = torch.randn(out.shape, generator=gen, dtype=D) * torch.where(live, 1.0, 1e6)
    wf = [torch.randn(f.shape, generator=gen, dtype=D) for f in finals]
    if layout == "batch-first":  # d loss / d out = w, in (E, B, T, H) memory
        read = (out.transpose(1, 2) * w.transpose(1, 2).contiguous()).sum()
    else:
        read = (out * w).sum()
    loss = read + sum((f * v).sum() for f, v in zip(finals, wf))
    grads = torch.autograd.grad(loss, ins)
    assert flags == [int(layout == "batch-first")], flags
    du = grads[0]
    assert torch.all(du.masked_select(~live.expand_as(du)) == 0)

    h0 = ins[1 if cell == "dmu" else (2 if cell in ("rnn", "lstm") else 3)]
    assert torch.equal(finals[0][L == 0], h0[L == 0])  # length 0: the final state is h0
    ref_ins = [t.detach().requires_grad_() for t in ins]
    want = ref(ref_ins, L)
    S, rest = (want[0], want[1:]) if isinstance(want, tuple) else (want, ())
    ref_out, ref_finals = S * live, [S[:, -1], *(x[:, -1] for x in rest)]
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-12)
    for f, g in zip(finals, ref_finals):
        torch.testing.assert_close(f, g, rtol=1e-10, atol=1e-12)
    ref_loss = (ref_out * w).sum() + sum((f * v).sum() for f, v in zip(ref_finals, wf))
    for g, g_ref in zip(grads, torch.autograd.grad(ref_loss, ref_ins)):
        torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-9)
