"""The speed benchmark's machinery (sizing, one worker row, the table) and the allocator
switch; the benchmark itself is run by benchmarks/speed.py, not by tests."""

import dataclasses
import os
import subprocess
import sys

import pytest

from rnnlab import speed


def test_matched_hidden_size_is_the_closest_count():
    cfg = speed.CONFIGS["copy"]
    target = speed._count("exprnn", {}, cfg, 190)
    assert target == 21764  # the papers' count for expRNN n=190 with a linear readout (REFERENCE-NOTES)
    for key, opts in (("nn.LSTM", {}), ("lstm", {}), ("gru", {}), ("rnn", {"nonlinearity": "modrelu"})):
        n = speed.match_hidden(key, opts, cfg, target)
        err = abs(speed._count(key, opts, cfg, n) - target)
        assert err <= abs(speed._count(key, opts, cfg, n - 1) - target)
        assert err <= abs(speed._count(key, opts, cfg, n + 1) - target)
    # torch's LSTM parameter count, computed independently
    import torch

    m = torch.nn.LSTM(10, 67)
    assert speed._count("nn.LSTM", {}, cfg, 67) == sum(p.numel() for p in m.parameters()) + 67 * 9 + 9


def test_plan_covers_registered_cells_and_fixed_sizes():
    from rnnlab.cells import CELLS

    specs = speed.plan(("copy",))
    labels = {s["label"] for s in specs}
    assert set(CELLS) <= labels and "nn.LSTM" in labels
    sizes = {s["label"]: s["hidden"] for s in specs}
    assert sizes["exprnn"] == 190 and sizes["scornn"] == 190 and sizes["nn.LSTM"] == 68
    with pytest.raises(ValueError, match="'nope'"):
        speed.plan(("nope",))


def test_worker_row_on_a_tiny_configuration():
    cfg = dataclasses.replace(speed.CONFIGS["copy"], T=6, batch=3)
    spec = {
        "config": dataclasses.asdict(cfg), "label": "exprnn", "key": "exprnn", "options": {}, "hidden": 8,
        "gates": 1, "baseline_hidden": 4, "reference": True, "warmup": 1, "repeats": 2,
        "threads": 1, "malloc": "default",
    }
    res = speed._worker(spec)
    for name in ("fast", "reference", "baseline"):
        assert res[name]["cpu"] > 0 and res[name]["wall"] > 0 and len(res[name]["cpu_all"]) == 2
    assert res["floor"]["s"] > 0 and res["floor"]["gflop"] > 0
    row = {"config": "copy", "label": "exprnn", "hidden": 8, "params": 1, **res}
    table = speed.format_table({"rows": [row]})
    assert "| copy | exprnn | 8 |" in table


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_tune_malloc_and_opt_out():
    code = "import rnnlab.runtime as r; print(r.tune_malloc(), '|', r.malloc_conditions())"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**env, "RNNLAB_MALLOC": "default"}).stdout
    assert on.startswith("True") and "M_MMAP_MAX=0" in on
    assert off.startswith("False") and "RNNLAB_MALLOC=default" in off
