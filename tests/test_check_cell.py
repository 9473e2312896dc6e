"""``rnnlab check-cell``: it fails a cell with a wrong gradient, a wrong state shape or a
non-deterministic step, each at the item that should catch it, and passes a correct cell of
one's own and built-in cells."""

from __future__ import annotations

import json

import pytest

from rnnlab.cellcheck import check_cell
from rnnlab.cli import main

STATIC = ["build", "state", "deterministic", "reference loop", "lengths", "h0", "gradcheck"]


def _verdicts(spec, **kw) -> dict[str, bool]:
    return {it.name: it.ok for it in check_cell(spec, log=lambda _: None, **kw)}


def test_a_correct_cell_of_ones_own_passes_the_float64_items(mycells):
    assert _verdicts("mycells:MinGated", runs=False) == dict.fromkeys(STATIC, True)


@pytest.mark.slow  # seven short training runs: about 10 s
def test_a_correct_cell_of_ones_own_passes_every_item(mycells, capsys):
    assert main(["check-cell", "mycells:MinGated"]) == 0
    out = capsys.readouterr().out.splitlines()
    names = [line[6:22].strip() for line in out if line.startswith(("PASS", "FAIL"))]
    assert names == [*STATIC, "single run", "ensemble", "save/load", "resume"]
    assert all(line.startswith("PASS") for line in out[:-1]) and out[-1] == "11 of 11 passed"


def test_a_wrong_backward_fails_gradcheck(mycells, capsys):
    v = _verdicts("mycells:WrongGradient", runs=False)
    assert not v["gradcheck"]
    # the forward pass is right: everything that compares values passes
    assert all(v[k] for k in STATIC if k != "gradcheck")
    assert main(["check-cell", "mycells:WrongGradient", "--no-runs"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  gradcheck" in out and "finite differences" in out and "failed: gradcheck" in out


def test_a_wrong_state_shape_fails_the_state_item(mycells):
    items = check_cell("mycells:WrongStateShape", runs=False, log=lambda _: None)
    state = next(it for it in items if it.name == "state")
    assert not state.ok and "(4, 7)" in state.detail and "expected (4, 6)" in state.detail


def test_a_non_deterministic_step_fails(mycells):
    items = {it.name: it for it in check_cell("mycells:Noisy", runs=False, log=lambda _: None)}
    assert not items["deterministic"].ok and "not deterministic" in items["deterministic"].detail
    assert items["build"].ok and items["state"].ok


def test_json_and_an_unknown_cell(mycells, capsys):
    assert main(["check-cell", "mycells:MinGated", "--no-runs", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)
    assert [it["name"] for it in items] == STATIC and all(it["ok"] for it in items)
    assert main(["check-cell", "mycells:Missing", "--no-runs"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL  build") and "has no name 'Missing'" in out


@pytest.mark.parametrize("key", ["lstm", "exprnn", "dmu", "nnrnn"])
def test_built_in_cells_pass_the_float64_items(key):
    v = _verdicts(key, runs=False)
    assert all(v.values()), v


@pytest.mark.slow
@pytest.mark.parametrize("key", ["gru", "asrnn", "ltrnn"])
def test_built_in_cells_pass_every_item(key):
    v = _verdicts(key)
    assert all(v.values()) and len(v) == 11, v


def test_a_backward_wrong_only_past_the_first_two_rows_fails_gradcheck(mycells):
    """A custom backward right for rows 0 and 1 only (a kernel's first block): a gradcheck on a
    batch of two passed it."""
    v = _verdicts("mycells:WrongGradientPastTwoRows", runs=False)
    assert not v["gradcheck"]
    assert all(v[k] for k in STATIC if k != "gradcheck")
