"""The dispatch table (rnnlab.kernels.dispatch) against what the cells run.

* ``dispatch_golden.json`` holds the path functions each of about 4,000 configurations called
  before the table existed (recorded by ``dispatch_record.py``, spies on every path function);
  :func:`choose` must name the same path for each, and the cells must still call the same
  functions (a sample by default, all of them under ``-m slow``).
* Every (family, path) entry of the table has a probe: a configuration that the rule sends to
  that path, run (the spies confirm the path) and compared with the step loop in float64,
  outputs and every gradient. An entry without a probe fails.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import dispatch_record as rec  # noqa: E402

from rnnlab.cells import CELLS  # noqa: E402
from rnnlab.kernels import dispatch, small  # noqa: E402

GOLDEN = rec.golden()
CASES = {rec.case_id(c): c for c in rec.cases()}


def path_of(seen: str) -> str:
    """The path a recorded call sequence is (the names the spies wrote, in order)."""
    names = seen.split()
    if not names or names[0].startswith("error"):
        names = ["fused"] + names  # a cell's own inline sequence (no spied function)
    if names[0].startswith("small."):
        return "lanes" if names[0].endswith("+lanes") else "compiled"
    if "_triton_forward" in names:
        return "triton"
    if names[0].startswith("ensemble_") or "ensemble_elementwise_rnn" in names or names[0] == "batched_linear":
        return "ensemble"  # batched_linear: a cell's own batched_sequence (its members' input terms at once)
    if names[0] == "run_native":
        return "native"
    if names[0] in ("linear_recurrence_scan", "log_linear_scan"):
        return "scan"
    if names[0] in ("linear_recurrence_fused", "diagonal_loop", "diagonal_recurrence_fused"):
        return "loop"
    if names[0] == "diagonal_recurrence":
        return "scan"
    if names[0] == "causal_convolution":
        return "conv"
    if names[0] == "mlstm_parallel":
        return "parallel"
    if names[0] == "unroll":
        return "step"
    return "fused"


@functools.cache
def _cell(key, options, hidden, backend, dtype):
    return CELLS[key](2, hidden, backend=backend, **json.loads(options)).to(getattr(torch, dtype))


def chosen_for(case: dict) -> str:
    """What :func:`dispatch.choose` says for ``case`` (built as ``dispatch_record`` builds it)."""
    fam = dispatch.family_of(case["key"])
    dtype = getattr(torch, case["dtype"])
    cell = _cell(case["key"], json.dumps(case["options"]), case["hidden"], case["backend"], case["dtype"])
    x = torch.zeros(3, case.get("batch", 2), 2, dtype=dtype)
    weight = next(cell.parameters())
    width = cell.dispatch_width()  # the hidden size; the DMU's widest layer; a diagonal cell's state elements
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if case.get("autocast") else contextlib.nullcontext()
    with autocast:
        return dispatch.choose(
            fam.name,
            case["backend"],
            width=width,
            tensors=(x, weight),
            ensemble=case["ensemble"],
            lengths=case["lengths"],
            nonlinearity=getattr(cell, "nonlinearity", "tanh"),
            batch=x.shape[1],
            chunk=getattr(cell, "chunk", 0),
            convolution="conv" in cell.extra_backends(),
        )


#: paths added after the golden was recorded, and the path they replace there (the lane kernels
#: run the same function, rnnlab.kernels.families.rnn.compiled_rnn, with ``lanes=True``)
LATER = {"lanes": "compiled"}


def test_golden_covers_the_recorded_cases():
    assert set(GOLDEN) == set(CASES), "re-record with python tests/kernels/dispatch_record.py"
    assert len(GOLDEN) > 3000


@pytest.mark.skipif(not small.available(), reason="no C compiler: the compiled loops cannot run here")
def test_choose_names_the_path_recorded_before_the_table():
    wrong = []
    for key, seen in GOLDEN.items():
        want, got = path_of(seen), chosen_for(CASES[key])
        assert got in dispatch.family_of(CASES[key]["key"]).paths, f"{key}: {got} is not in its family's table entry"
        if want != LATER.get(got, got):
            wrong.append(f"{key}: recorded {seen!r} ({want}), choose says {got}")
    assert not wrong, f"{len(wrong)} cases differ, e.g.\n" + "\n".join(wrong[:10])


def _replay(keys):
    torch.set_num_threads(1)
    changed = [
        f"{k}: was {GOLDEN[k]!r}, now {got!r}"
        for k in keys
        if (got := " ".join(rec.run_case(CASES[k])).replace("+lanes", "")) != GOLDEN[k]
    ]
    assert not changed, f"{len(changed)} cases run other functions than before, e.g.\n" + "\n".join(changed[:10])


@pytest.mark.skipif(not small.available(), reason="no C compiler: the compiled loops cannot run here")
def test_cells_still_call_what_they_called_sample():
    _replay(sorted(GOLDEN)[::23])


@pytest.mark.slow
@pytest.mark.skipif(not small.available(), reason="no C compiler: the compiled loops cannot run here")
def test_cells_still_call_what_they_called_all():
    _replay(sorted(GOLDEN))


def test_path_of_the_recorded_names():
    assert path_of("small.dmu") == "compiled"
    assert path_of("small.rnn+lanes") == "lanes"
    assert path_of("elementwise_rnn ensemble_elementwise_rnn") == "ensemble"
    assert path_of("linear_recurrence_scan linear_recurrence_fused") == "scan"
    assert path_of("elementwise_rnn _triton_forward") == "triton"
    assert path_of("") == "fused"
    assert path_of("batched_linear mlstm_parallel") == "ensemble"
    assert path_of("mlstm_parallel") == "parallel"
    assert path_of("log_linear_scan") == "scan"
    assert path_of("diagonal_loop") == "loop"
    assert path_of("diagonal_recurrence_fused diagonal_recurrence") == "loop"
    assert path_of("diagonal_recurrence") == "scan"
    assert path_of("causal_convolution") == "conv"


# ---------------------------------------------------------------------------- probes

D = "float64"


def _probe(key, backend="auto", hidden=4, options=None, lengths=False, ensemble=False, batch=2, needs=None):
    case = dict(key=key, options=options or {}, hidden=hidden, dtype=D, backend=backend, grad=True)
    return {**case, "lengths": lengths, "ensemble": ensemble, "batch": batch, "needs": needs}


#: (family, path) -> a configuration its rule sends there (float64)
PROBES = {
    ("rnn", "step"): _probe("rnn", "reference"),
    ("rnn", "compiled"): _probe("irnn", "small", hidden=65),
    ("rnn", "lanes"): _probe("rnn", lengths=True, batch=3),
    ("rnn", "native"): _probe("rnn", "native", lengths=True),
    ("rnn", "fused"): _probe("rnn", options={"nonlinearity": "modrelu"}, lengths=True),
    ("rnn", "triton"): _probe("rnn", "fused", needs="triton"),
    ("rnn", "ensemble"): _probe("rnn", "fused", ensemble=True, lengths=True),
    ("ltrnn", "step"): _probe("ltrnn", "reference"),
    ("ltrnn", "compiled"): _probe("ltrnn", "small", hidden=65, lengths=True),
    ("ltrnn", "lanes"): _probe("ltrnn", lengths=True),
    ("ltrnn", "fused"): _probe("ltrnn", "scan", lengths=True),
    ("ltrnn", "triton"): _probe("ltrnn", "scan", lengths=True, needs="triton"),
    ("ltrnn", "loop"): _probe("ltrnn", "loop"),
    ("ltrnn", "scan"): _probe("ltrnn", "scan", options={"chunk": 2}),
    ("ltrnn", "ensemble"): _probe("ltrnn", "scan", ensemble=True),
    ("lstm", "step"): _probe("lstm", "reference"),
    ("lstm", "compiled"): _probe("lstm", "small", hidden=65, lengths=True),
    ("lstm", "lanes"): _probe("lstm", lengths=True, batch=3),
    ("lstm", "native"): _probe("lstm", hidden=5, lengths=True),
    ("lstm", "ensemble"): _probe("lstm", hidden=5, ensemble=True, lengths=True),
    ("gru", "step"): _probe("gru", "reference"),
    ("gru", "compiled"): _probe("gru", "small", hidden=65, lengths=True),
    ("gru", "lanes"): _probe("gru", "small", hidden=9, lengths=True),
    ("gru", "native"): _probe("gru", "native"),
    ("gru", "fused"): _probe("gru", hidden=9),
    ("gru", "ensemble"): _probe("gru", "fused", ensemble=True, lengths=True),
    ("dmu", "step"): _probe("dmu", lengths=True, hidden=9),
    ("dmu", "compiled"): _probe("dmu", "small", options={"layers": [3, 65]}, lengths=True),
    ("dmu", "lanes"): _probe("dmu", options={"layers": [3, 5]}, lengths=True, batch=3),
    ("dmu", "fused"): _probe("dmu", "fused", options={"layers": [3, 5]}),
    ("dmu", "ensemble"): _probe("dmu", "fused", ensemble=True, lengths=True),
    ("rhn", "step"): _probe("rhn", "fused", lengths=True),
    ("rhn", "compiled"): _probe("rhn", "small", hidden=65, options={"depth": 2}, lengths=True),
    ("rhn", "lanes"): _probe("rhn", options={"depth": 2}, lengths=True, batch=3),
    ("rhn", "fused"): _probe("rhn", "fused", options={"depth": 2}),
    ("rhn", "ensemble"): _probe("rhn", "fused", ensemble=True, lengths=True),
    ("orthogonal", "step"): _probe("exprnn", "reference"),
    ("orthogonal", "fused"): _probe("scornn", lengths=True),
    ("orthogonal", "triton"): _probe("exprnn", needs="triton"),
    ("orthogonal", "ensemble"): _probe("nnrnn", ensemble=True, lengths=True),
    ("transformed", "step"): _probe("asrnn", ensemble=True),
    ("transformed", "fused"): _probe("asrnn", lengths=True),
    ("transformed", "triton"): _probe("softorth", needs="triton"),
    ("residual", "step"): _probe("lipschitz", "reference"),
    ("residual", "fused"): _probe("antisymrnn"),
    ("oscillator", "step"): _probe("lem", ensemble=True),
    ("oscillator", "fused"): _probe("cornn"),
    ("unitary", "step"): _probe("urnn", "reference"),
    ("unitary", "fused"): _probe("eurnn"),
    ("momentumlstm", "step"): _probe("momentumlstm", "reference"),
    ("momentumlstm", "fused"): _probe("momentumlstm"),
    ("diagonal", "step"): _probe("lru", "reference", lengths=True),
    # auto past the scan's limit: B x d x N = 2 x 8 x 300 state elements > DIAGONAL_SCAN_MAX_STEP
    ("diagonal", "loop"): _probe("mamba", options={"state_size": 300}, lengths=True),
    ("diagonal", "scan"): _probe("lru", options={"chunk": 2}, lengths=True),
    ("diagonal", "conv"): _probe("s4d", options={"state_size": 4}),
    ("mingated", "step"): _probe("mingru", "reference", lengths=True),
    ("mingated", "loop"): _probe("minlstm", lengths=True),
    ("mingated", "scan"): _probe("mingru", "scan", lengths=True),
    ("mingated", "ensemble"): _probe("minlstm", "reference", ensemble=True, lengths=True),
    ("slstm", "step"): _probe("slstm", "reference", options={"heads": 2}),
    ("slstm", "fused"): _probe("slstm", options={"heads": 2}, lengths=True),
    ("slstm", "ensemble"): _probe("slstm", "reference", ensemble=True, lengths=True),
    ("mlstm", "step"): _probe("mlstm", "reference", lengths=True),
    ("mlstm", "parallel"): _probe("mlstm", options={"heads": 2, "chunk": 2}, lengths=True),
    ("mlstm", "ensemble"): _probe("mlstm", "parallel", options={"chunk": 2}, ensemble=True),
}

ENTRIES = [(fam.name, path) for fam in dispatch.TABLE.values() for path in fam.paths]


def test_every_entry_has_a_probe_and_every_probe_an_entry():
    missing = [e for e in ENTRIES if e not in PROBES]
    assert not missing, f"table entries without a probe (add one to PROBES): {missing}"
    extra = [p for p in PROBES if p not in ENTRIES]
    assert not extra, f"probes of no table entry: {extra}"


def test_every_path_is_named_and_every_cell_has_one_family():
    assert all(path in dispatch.PATHS for _, path in ENTRIES)
    listed = [key for fam in dispatch.TABLE.values() for key in fam.cells]
    assert sorted(listed) == sorted(set(listed))
    assert set(listed) >= {k for k in CELLS if CELLS[k].__module__.startswith("rnnlab.")}


def _run(case, cell, x, lengths, h0):
    """Outputs and final state of ``cell`` over ``x``: one run, or each member in an ensemble."""
    if not case["ensemble"]:
        out, state = cell.sequence(x, h0, lengths)
        return [out, *(state if isinstance(state, tuple) else (state,))]
    from torch.func import functional_call, vmap

    class Batched(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = cell

        def forward(self, xx):
            out, state = self.cell.batched_sequence(xx, h0, lengths)
            return (out, *(state if isinstance(state, tuple) else (state,)))

    wrap = Batched()
    params = {f"cell.{k}": torch.stack([v, v]) for k, v in cell.named_parameters()}
    outs = vmap(lambda p, xx: functional_call(wrap, p, (xx,)))(params, torch.stack([x, x]))
    for o in outs:  # two equal members give equal results
        torch.testing.assert_close(o[1], o[0], rtol=0, atol=0)
    return [o[0] for o in outs]


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{f}-{p}" for f, p in ENTRIES])
def test_probe_runs_its_path_and_equals_the_step_loop(entry):
    case = PROBES[entry]
    if case["needs"] == "triton":
        pytest.skip(
            "the Triton path runs on CUDA (or Triton's interpreter); its equivalence is tests/kernels/test_triton_*"
        )
    family, path = entry
    if path in dispatch.COMPILED and not small.available():
        pytest.skip("no C compiler here")
    assert dispatch.family_of(case["key"]).name == family
    full = {**case, "family": family}
    assert chosen_for(full) == path, "the probe's configuration goes elsewhere"
    assert path_of(" ".join(rec.run_case(full))) == path, "the probe ran another path"
    torch.manual_seed(1)
    cell = CELLS[case["key"]](2, case["hidden"], backend=case["backend"], **case["options"]).double()
    ref = CELLS[case["key"]](2, case["hidden"], backend="reference", **case["options"]).double()
    ref.load_state_dict(cell.state_dict())
    T, B = 5, case["batch"]
    x = torch.randn(T, B, 2, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([T] + [T - 2] * (B - 1)) if case["lengths"] else None
    start = cell.init_state(B, dtype=torch.float64)
    h0 = tuple(0.3 * torch.randn_like(s) for s in start) if isinstance(start, tuple) else 0.3 * torch.randn_like(start)
    got = _run(case, cell, x, lengths, h0)
    want = _run({**case, "ensemble": False}, ref, x, lengths, h0)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)
    weights = torch.randn_like(want[0])
    params = [p for p in cell.parameters()]
    g_got = torch.autograd.grad((got[0] * weights).sum(), [x, *params], allow_unused=True)
    g_want = torch.autograd.grad((want[0] * weights).sum(), [x, *ref.parameters()], allow_unused=True)
    for name, g, w in zip(["x", *[n for n, _ in cell.named_parameters()]], g_got, g_want):
        if w is None:
            assert g is None or not g.abs().any(), name
            continue
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10, msg=lambda m, name=name: f"{entry} {name}: {m}")


def test_doctor_prints_the_table(capsys):
    from rnnlab.cli import main

    assert main(["doctor", "--dispatch"]) == 0
    out = capsys.readouterr().out
    for fam in dispatch.TABLE.values():
        assert f"{fam.name} ({', '.join(fam.cells)})" in out
        for path, where in fam.paths.items():
            assert f"  {path:<9} {where}" in out
    assert "ensembles' forward (rnnlab.stacked_model.StackedModel.direct_plan)" in out
    assert "[off:" not in out


def test_the_direct_summary_names_the_covered_cells_and_says_when_it_is_off(monkeypatch):
    from rnnlab import stacked_model

    line = stacked_model.direct_summary()
    for cls in stacked_model.direct_cells():
        assert cls.__name__ in line
        assert cls in set(CELLS.values())
    monkeypatch.setattr(stacked_model, "DIRECT", False)
    assert "[off: rnnlab.stacked_model.DIRECT is False" in stacked_model.direct_summary()


def test_every_builtin_cell_asks_the_rule_of_its_family():
    for key, cls in CELLS.items():
        if cls.__module__.startswith("rnnlab."):
            assert cls.family == dispatch.family_of(key).name, key
