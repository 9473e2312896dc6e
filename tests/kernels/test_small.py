"""The compiled loops of tiny recurrences (rnnlab.kernels.small) against the cells' step loop
(rnnlab.unroll), in float64: outputs, final states and the gradient of every parameter and of
the initial state, over the cells and options they serve, stacked layers with per-layer widths,
lengths, a given initial state and bias off; and the same for E members at once."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rnnlab.cells import CELLS
from rnnlab.cells.layers import Recurrent
from rnnlab.kernels import dispatch, small
from rnnlab.kernels.families import rnn

SRC = str(Path(small.__file__).resolve().parents[2])  # the rnnlab under test, for its subprocesses

pytestmark = pytest.mark.skipif(not small.available(), reason="no C compiler for rnnlab.kernels.small")

D = torch.float64
CASES = [  # cell, options
    ("rnn", {}),
    ("rnn", {"nonlinearity": "relu"}),
    ("rnn", {"bias": False}),
    ("irnn", {}),
    ("lstm", {}),
    ("lstm", {"bias": False}),
    ("gru", {}),
    ("gru", {"bias": False}),
    ("rhn", {"depth": 1}),
    ("rhn", {"depth": 3}),
    ("dmu", {}),
    ("dmu", {"layers": []}),
    ("dmu", {"layers": [4, 3]}),
    ("dmu", {"activation": "identity"}),
    ("ltrnn", {}),
    ("ltrnn", {"activation": "tanh", "bias": False}),
]
SHAPES = [  # hidden size(s), layers, lengths, h0 given
    (5, 1, False, False),
    ([3, 2], 1, True, True),
    (4, 2, True, False),
    (2, 2, False, True),
]


def _layer(cell, options, H, layers, backend):
    torch.manual_seed(0)
    return Recurrent(3, H, layers, cell=CELLS[cell], backend=backend, **options).to(D)


def _h0(layer, B, gen):
    def one(width):
        s = layer.cells[0].init_state(B, dtype=D)
        return torch.randn(B, width, generator=gen, dtype=D) if isinstance(s, torch.Tensor) else s

    widths = layer.hidden_sizes
    if isinstance(layer.cells[0].init_state(1, dtype=D), tuple):
        states = [tuple(torch.randn(B, w, generator=gen, dtype=D) for _ in range(2)) for w in widths]
    else:
        states = [torch.randn(B, w, generator=gen, dtype=D) for w in widths]
    if len(set(widths)) > 1:
        return [s if isinstance(s, torch.Tensor) else s for s in states]
    if isinstance(states[0], tuple):
        return tuple(torch.stack(part) for part in zip(*states))
    return torch.stack(states)


def _leaves(tree):
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


#: the cells whose compiled loops also have the lane form (*_lanes_* of small.c)
LANE_CELLS = ("rnn", "irnn", "ltrnn", "dmu", "gru", "lstm", "rhn")
KERNELS = [(c, o, k) for c, o in CASES for k in (("scalar", "lanes") if c in LANE_CELLS else ("scalar",))]


@pytest.mark.parametrize("cell,options,kernel", KERNELS)
@pytest.mark.parametrize("H,layers,lengths,h0", SHAPES)
def test_compiled_loops_equal_the_step_loop(cell, options, kernel, H, layers, lengths, h0, monkeypatch):
    if kernel == "scalar":  # the lane kernels are chosen up to their width: below it, the scalar loop asked for
        monkeypatch.setattr(dispatch, "LANES_MAX_WIDTH", {})
    calls = _calls(monkeypatch)
    T, B = 9, 5
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(T, B, 3, generator=gen, dtype=D)
    L = torch.randint(1, T + 1, (B,), generator=gen) if lengths else None
    fast, ref = _layer(cell, options, H, layers, "small"), _layer(cell, options, H, layers, "reference")
    state = _h0(fast, B, gen) if h0 else None
    results = []
    for layer in (fast, ref):
        s0 = None if state is None else torch.utils._pytree.tree_map(lambda t: t.clone().requires_grad_(), state)
        out, h_n = layer(x, s0, L)
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=D)
        wh = [torch.randn(t.shape, generator=torch.Generator().manual_seed(3), dtype=D) for t in _leaves(h_n)]
        loss = (out * w).sum() + sum((t * v).sum() for t, v in zip(_leaves(h_n), wh))
        inputs = list(layer.parameters()) + ([] if s0 is None else _leaves(s0))
        results.append((out, _leaves(h_n), torch.autograd.grad(loss, inputs)))
    (o1, h1, g1), (o2, h2, g2) = results
    assert calls and all(("_lanes_" in c) == (kernel == "lanes") for c in calls) and len(set(calls)) == 2, calls
    torch.testing.assert_close(o1, o2, rtol=1e-10, atol=1e-12)
    for a, b in zip(h1, h2):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert len(g1) == len(g2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _calls(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = small._call
    monkeypatch.setattr(small, "_call", lambda name, dtype, *args: (calls.append(name), real(name, dtype, *args))[1])
    return calls


@pytest.mark.parametrize(
    "cell,options", [("rnn", {}), ("lstm", {}), ("gru", {}), ("rhn", {"depth": 3}), ("dmu", {}), ("ltrnn", {})]
)
def test_members_at_once_equal_each_member_alone(cell, options, monkeypatch):
    """E members with their own weights through one call (the ensemble's path), against each
    member's step loop; the loss is a plain sum, whose gradient arrives as an expanded
    (zero-stride) tensor: the kernel must read it as contiguous memory."""
    from rnnlab.model import SequenceModel
    from rnnlab.stacked_model import StackedModel

    E, B, T = 3, 4, 8
    models = []
    for k in range(E):
        torch.manual_seed(k)
        models.append(SequenceModel(cell, 3, 2, [3, 2], cell_options=options).to(D))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(E, B, T, 3, generator=gen, dtype=D)
    L = torch.randint(1, T + 1, (E, B), generator=gen)
    calls = _calls(monkeypatch)
    out, _ = StackedModel(models[0]).forward(models, x, None, L)
    out.sum().backward()
    kernel = ("rnn" if cell in ("rnn", "ltrnn") else cell) + ("_lanes" if cell in LANE_CELLS else "")
    assert f"{kernel}_backward" in calls  # the compiled loops ran, backward too
    batched = [[p.grad.clone() for p in m.parameters()] for m in models]
    for k, m in enumerate(models):
        m.zero_grad()
        for c in m.rnn.cells:
            c.backend = "reference"
        o, _ = m(x[k], None, L[k])
        torch.testing.assert_close(out[k], o, rtol=1e-10, atol=1e-12)
        o.sum().backward()
        for p, g in zip(m.parameters(), batched[k]):
            torch.testing.assert_close(g, p.grad, rtol=1e-10, atol=1e-12)


def test_auto_takes_the_compiled_loops_below_the_width_limit_only(monkeypatch):
    x = torch.randn(6, 2, 3)
    limit = dispatch.AUTO_MAX_WIDTH["lstm"]
    for H, expected in ((limit, True), (limit + 1, False)):
        calls = _calls(monkeypatch)
        Recurrent(3, H, cell=CELLS["lstm"])(x)
        assert bool(calls) == expected, H
    calls = _calls(monkeypatch)
    Recurrent(3, limit + 1, cell=CELLS["lstm"], backend="small")(x)  # forced at any width
    assert calls == ["lstm_lanes_forward"]  # the lane kernel, up to its own width limit
    lanes = dispatch.LANES_MAX_WIDTH["lstm"]
    calls = _calls(monkeypatch)
    Recurrent(3, lanes + 1, cell=CELLS["lstm"], backend="small")(x)  # above it: the scalar loop
    assert calls == ["lstm_forward"]
    for backend in ("reference", "auto"):
        calls = _calls(monkeypatch)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # low precision: never the compiled loops
            Recurrent(3, 4, cell=CELLS["gru"], backend=backend)(x)
        assert calls == []


def test_without_a_compiler_the_cells_fall_back_with_a_note(monkeypatch, caplog):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setattr(small, "_libs", {})
    monkeypatch.setattr(small, "_noted", set())
    x = torch.randn(5, 2, 3, dtype=D)
    torch.manual_seed(0)
    out, _ = Recurrent(3, 4, cell=CELLS["lstm"]).to(D)(x)
    assert "no C compiler (cc) found" in caplog.text  # a WARNING record of rnnlab.kernels.small
    torch.manual_seed(0)
    ref, _ = Recurrent(3, 4, cell=CELLS["lstm"], backend="reference").to(D)(x)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert not small.available()


def test_built_once_into_the_cache_and_never_at_import(monkeypatch, tmp_path):
    import subprocess
    import sys

    monkeypatch.setenv("RNNLAB_KERNEL_CACHE", str(tmp_path))
    code = "import rnnlab, rnnlab.kernels.small as s, os, sys; print(len(s._libs), len(os.listdir(sys.argv[1])))"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "0"]  # importing compiles nothing
    monkeypatch.setattr(small, "_libs", {})
    assert small.library(torch.float64) is not None
    built = sorted(p.name for p in tmp_path.iterdir())  # the build, named by its hash, and its record
    assert len(built) == 2 and built[0].endswith(".so") and built[1].endswith("-f64.sha256")
    monkeypatch.setattr(small, "_libs", {})
    small.library(torch.float64)  # a second process (a fresh table) loads the same file
    assert sorted(p.name for p in tmp_path.iterdir()) == built


@pytest.mark.parametrize("cell,options", [("rnn", {}), ("lstm", {}), ("gru", {}), ("rhn", {"depth": 2}), ("dmu", {})])
def test_float32_agrees_with_the_step_loop_to_rounding(cell, options):
    """float32 (what training runs in): the compiled loops' own exp (vectorised) against torch's."""
    x = torch.randn(30, 6, 3, generator=torch.Generator().manual_seed(0)) * 3
    outs = []
    for backend in ("small", "reference"):
        torch.manual_seed(0)
        layer = Recurrent(3, [4, 3], cell=CELLS[cell], backend=backend, **options)
        out, _ = layer(x)
        out.square().sum().backward()
        outs.append((out, [p.grad for p in layer.parameters()]))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=2e-5, atol=2e-6)
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_tanh_is_accurate_relative_to_its_value_and_keeps_nan():
    """The loops' own tanh (vectorised exp; its Taylor series near 0) against torch's, over
    1e-12 .. 30 in both signs: relative error at rounding level in float64, a few float32 ulps;
    NaN stays NaN (a diverged run must not look finite)."""
    mags = torch.logspace(-12, 1.5, 500, dtype=D)
    x = torch.cat([mags, -mags, torch.tensor([0.0, float("nan")], dtype=D)]).reshape(-1, 1, 1)
    for dtype, rtol in ((D, 1e-13), (torch.float32, 1e-5)):
        z = torch.zeros(1, 1, dtype=dtype)
        out, _ = rnn.compiled_rnn(x.to(dtype), z, z, "tanh")
        ref = torch.tanh(x.to(dtype))
        torch.testing.assert_close(out[:-1], ref[:-1], rtol=rtol, atol=0)
        assert out[-1].isnan().all()


def _tiny_run(cache, out, cc=None) -> subprocess.CompletedProcess:
    """``rnnlab train`` of an LSTM of 4 units (the compiled loops' width) in a subprocess."""
    env = {**os.environ, "RNNLAB_KERNEL_CACHE": str(cache), "PYTHONPATH": SRC}
    if cc is not None:
        env["CC"] = str(cc)
    flags = ["train.steps=2", "task.L=4", "model.hidden_size=4", "task.val_size=16", "task.test_size=16"]
    flags += ["train.batch_size=8", "train.eval_every=1"]
    argv = [sys.executable, "-m", "rnnlab.cli", "train", "demo/lstm", "--out", str(out), "--quiet"]
    return subprocess.run(argv + [a for f in flags for a in ("--set", f)], env=env, capture_output=True, text=True)


def test_a_damaged_build_in_the_cache_is_rebuilt_with_a_note(tmp_path):
    """A compiled library cut short in the cache killed every tiny-model run with a bus error
    (SIGBUS) and left a half-made run folder and its lock."""
    cache = tmp_path / "cache"
    assert _tiny_run(cache, tmp_path / "a").returncode == 0
    (lib,) = cache.glob("small-*-f32-*.so")
    whole = lib.read_bytes()
    for damage in (whole[:9000], whole[:-100] + bytes(100), b""):
        lib.write_bytes(damage)
        out = tmp_path / f"run{len(damage)}"
        r = _tiny_run(cache, out)
        assert r.returncode == 0, r.stderr
        assert "cut short or changed since they were built; rebuilt them" in r.stderr, r.stderr
        assert (out / "result.json").exists() and not (out / ".lock").exists()
        (lib,) = cache.glob("small-*-f32-*.so")
        assert lib.read_bytes() == whole or len(lib.read_bytes()) > 9000
    lib.unlink()  # the build gone, its record left: rebuilt as well
    assert "rebuilt them" in _tiny_run(cache, tmp_path / "gone").stderr


@pytest.mark.parametrize(
    "script, words",
    [
        ("exit 0", ["exited with status 0 but wrote nothing"]),
        ("exit 3", ["exited with status 3 and printed nothing"]),
        (
            'for a; do case $p in -o) echo junk > "$a";; esac; p=$a; done; exit 0',
            ["wrote 5 bytes that are not a shared library"],
        ),
    ],
)
def test_a_compiler_that_writes_nothing_or_fails_silently_is_named(tmp_path, script, words):
    """A compiler that exits 0 and writes nothing, or fails with an empty message, left a vague
    note ("RuntimeError: " or "OSError: file too short")."""
    cc = tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\n[ "$1" = --version ] && exit 0\n{script}\n')
    cc.chmod(0o755)
    r = _tiny_run(tmp_path / "cache", tmp_path / "run", cc=cc)
    assert r.returncode == 0, r.stderr
    (note,) = [line for line in r.stderr.splitlines() if "compiled loops" in line]
    assert str(cc) in note and "PyTorch paths" in note
    for w in words:
        assert w in note, note


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu", "identity"])
def test_lane_blocks_that_cut_members_equal_each_member_alone(nonlinearity):
    """5 members of 13 sequences: 65 lanes, so the blocks of 32 lanes cut members apart and the
    last block is mostly padding; each member through the lane kernel at once equals the
    recurrence written in PyTorch operations for that member alone (outputs, final state, the
    gradients of the input terms, the weight and the initial state)."""
    E, T, B, H = 5, 7, 13, 3
    gen = torch.Generator().manual_seed(4)
    u = torch.randn(E, T, B, H, generator=gen, dtype=D, requires_grad=True)
    W = (0.6 * torch.randn(E, H, H, generator=gen, dtype=D)).requires_grad_()
    h0 = torch.randn(E, B, H, generator=gen, dtype=D, requires_grad=True)
    L = torch.randint(1, T + 1, (E, B), generator=gen)
    act = small._ACT[nonlinearity]
    out, h_n = rnn._compiled_lanes(u, W, h0, L, act)  # the members first, as an ensemble calls it
    w = torch.randn(out.shape, generator=gen, dtype=D)
    got = torch.autograd.grad((out * w).sum() + (h_n**2).sum(), [u, W, h0])
    for e in range(E):
        ue, We, he = (t[e : e + 1].detach().requires_grad_() for t in (u, W, h0))
        S = rnn._reference(act, ue, We, he, L[e : e + 1])
        mask = (torch.arange(T)[:, None] < L[e][None, :]).unsqueeze(-1)
        o = S[0] * mask
        torch.testing.assert_close(out[e], o, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(h_n[e], S[0, -1], rtol=1e-10, atol=1e-12)
        want = torch.autograd.grad((o * w[e]).sum() + (S[0, -1] ** 2).sum(), [ue, We, he])
        for g, wnt in zip(got, want):
            torch.testing.assert_close(g[e : e + 1], wnt, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("cell,options", [("rnn", {}), ("lstm", {}), ("gru", {}), ("rhn", {"depth": 3}), ("dmu", {})])
def test_lane_kernels_in_float32_follow_float64(cell, options, monkeypatch):
    """The float32 build of the lane kernels (their own exp polynomial, 16 floats per
    instruction) against the step loop in float64: outputs and gradients within float32's
    rounding over 30 steps."""
    calls = _calls(monkeypatch)
    torch.manual_seed(1)
    fast = Recurrent(3, 5, 2, cell=CELLS[cell], backend="small", **options)
    ref = Recurrent(3, 5, 2, cell=CELLS[cell], backend="reference", **options).double()
    ref.load_state_dict({k: v.double() for k, v in fast.state_dict().items()})
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(30, 40, 3, generator=gen)
    L = torch.randint(1, 31, (40,), generator=gen)
    (o1, _), (o2, _) = fast(x, lengths=L), ref(x.double(), lengths=L)
    o1.square().sum().backward()
    o2.square().sum().backward()
    assert calls and all("_lanes_" in c for c in calls), calls
    torch.testing.assert_close(o1.double(), o2, rtol=1e-5, atol=1e-6)
    for p, q in zip(fast.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.double(), q.grad, rtol=1e-4, atol=1e-5 * float(q.grad.abs().max()))
