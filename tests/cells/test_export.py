"""Cells compile for deployment: torch.jit.trace and torch.export capture one step, and the
captured program computes what the eager cell computes on new inputs and states."""

import pytest
import torch

import rnnlab


def _state_like(cell, B, gen):
    s = cell.init_state(B)
    if isinstance(s, torch.Tensor):
        return torch.randn(s.shape, generator=gen, dtype=s.dtype)
    return tuple(torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in s)


def _close(a, b):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-6)


# jit.trace is deprecated in torch but still what many deployments use: tested while torch has it
@pytest.mark.filterwarnings("ignore:`torch.jit.trace.*` is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.parametrize("key", sorted(rnnlab.CELLS))
def test_jit_trace_of_every_cell(key):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    cell = rnnlab.CELLS[key](5, 8).eval()
    traced = torch.jit.trace(cell, (torch.randn(3, 5, generator=gen), _state_like(cell, 3, gen)), check_trace=False)
    x, s = torch.randn(3, 5, generator=gen), _state_like(cell, 3, gen)
    with torch.no_grad():
        want_h, want_s = cell(x, s)
        got_h, got_s = traced(x, s)
    _close(got_h, want_h)
    _close(got_s, want_s)


@pytest.mark.parametrize("key", ["asrnn", "nnrnn", "dmu", "ltrnn", "lstm"])
def test_torch_export_of_the_papers_cells(key):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(2)
    cell = rnnlab.CELLS[key](5, 8).eval()
    ep = torch.export.export(cell, (torch.randn(3, 5, generator=gen), _state_like(cell, 3, gen)))
    x, s = torch.randn(3, 5, generator=gen), _state_like(cell, 3, gen)
    with torch.no_grad():
        want = cell(x, s)
        got = ep.module()(x, s)
    _close(got[0], want[0])
    _close(got[1], want[1])
