"""The speed benchmark's machinery (sizing, one worker row, the table) and the allocator
switch; the benchmark itself is run by benchmarks/speed.py, not by tests."""

import os
import subprocess
import sys

import pytest

from conftest import speed_spec
from rnnlab.bench import speed


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


def test_large_mnist_configurations_match_the_budget_of_exprnn_at_that_size():
    specs = speed.plan(("mnist-n257", "mnist-n364", "mnist-n512"), ["exprnn", "asrnn", "nnrnn", "scornn"])
    for n in (257, 364, 512):
        rows = {s["label"]: s for s in specs if s["config"]["name"] == f"mnist-n{n}"}
        assert set(rows) == {"exprnn", "asrnn", "nnrnn", "scornn", "nn.LSTM"}
        cfg = speed.CONFIGS[f"mnist-n{n}"]
        assert (cfg.T, cfg.batch, cfg.input_size, cfg.readout) == (784, 128, 1, "last")
        target = n * (n - 1) // 2 + n + n + 10 * n + 10  # expRNN: skew, W_ih (n x 1), bias; readout
        assert rows["exprnn"]["hidden"] == n and rows["exprnn"]["target_params"] == target
        for label, s in rows.items():
            assert s["reference"] is False and s["repeats"] == 3
            if label in ("exprnn",) or (n == 512 and label == "asrnn"):
                continue
            key, opts = s["key"], s["options"]
            err = abs(speed._count(key, opts, cfg, s["hidden"]) - target)
            step = 2 if key == "nnrnn" else 1  # nnRNN needs an even n
            for m in (s["hidden"] - step, s["hidden"] + step):
                assert err <= abs(speed._count(key, opts, cfg, m) - target), (n, label)
        assert rows["asrnn"]["hidden"] == (364 if n == 512 else rows["asrnn"]["hidden"])
        assert all(s["baseline_hidden"] == rows["nn.LSTM"]["hidden"] for l, s in rows.items() if l != "nn.LSTM")


def test_worker_row_on_a_tiny_configuration():
    spec = speed_spec(T=6, batch=3, baseline_hidden=4, reference=True)
    res = speed._worker(spec)
    for name in ("fast", "reference", "baseline"):
        assert res[name]["cpu"] > 0 and res[name]["wall"] > 0 and len(res[name]["cpu_all"]) == 2
    assert res["floor"]["s"] > 0 and res["floor"]["gflop"] > 0
    row = {"config": "copy", "label": "exprnn", "hidden": 8, "params": 1, **res}
    table = speed.format_table({"rows": [row]})
    assert "| copy | exprnn | 8 |" in table


def test_the_worker_treats_subnormals_as_its_spec_says_and_records_it():
    """Flushed by default (as the trainer does), kept with denormals="keep"; the row says which,
    and the CPU agrees (a subnormal times one survives only when kept)."""
    import torch

    spec = speed_spec(T=4, batch=2, key="lstm", hidden=4, gates=4, warmup=0, repeats=1)
    kept = speed._worker(dict(spec, denormals="keep"))
    assert kept["denormals"] == "kept" and float(torch.tensor([1e-39]) * 1.0) != 0.0
    flushed = speed._worker(spec)
    if flushed["denormals"] != "kept (not supported by this CPU)":
        assert flushed["denormals"] == "flushed to zero" and float(torch.tensor([1e-39]) * 1.0) == 0.0


def test_run_refuses_an_unknown_subnormal_setting_before_any_row(monkeypatch):
    monkeypatch.setattr(speed, "_spawn", lambda *a: pytest.fail("a row ran"))
    with pytest.raises(ValueError, match="denormals must be 'flush' or 'keep', got 'off'"):
        speed.run(["copy"], ["exprnn"], denormals="off")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_tune_malloc_and_opt_out():
    code = "import rnnlab.runtime as r; print(r.tune_malloc(), '|', r.malloc_conditions())"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout
    off = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, "RNNLAB_MALLOC": "default"}
    ).stdout
    assert on.startswith("True") and "M_MMAP_MAX=0" in on
    assert off.startswith("False") and "RNNLAB_MALLOC=default" in off


def test_flush_denormals_and_opt_out():
    """The CPU itself says whether a subnormal survives a product: flushed by default, kept with
    RNNLAB_DENORMALS=keep, and the run's condition names what the CPU did."""
    code = (
        "import rnnlab.runtime as r, torch; ok = r.flush_denormals(); "
        "x = torch.tensor([1e-39]) * 1.0; print(ok, '|', float(x[0]) == 0.0, '|', r.denormal_conditions())"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout
    off = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, "RNNLAB_DENORMALS": "keep"}
    ).stdout
    if on.startswith("False"):
        pytest.skip(f"this CPU does not flush subnormals: {on}")
    assert on.split(" | ") == ["True", "True", "flushed to zero\n"]
    assert off.split(" | ") == ["False", "False", "kept (RNNLAB_DENORMALS=keep)\n"]
    # a process that never called it: the condition asks the CPU
    plain = subprocess.run(
        [sys.executable, "-c", "import rnnlab.runtime as r; print(r.denormal_conditions())"],
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    assert plain == "kept\n"


def test_worker_times_the_orthogonal_maps_and_the_table_shows_their_share(monkeypatch):
    """The maps column: asRNN's two maps, none for the LSTM; the timed step really runs every
    map's forward and backward (counted through the parametrization), once per call."""
    from rnnlab import parametrize as par

    calls = []
    real = par.Orthogonal.forward
    monkeypatch.setattr(par.Orthogonal, "forward", lambda self, A: calls.append(self.n) or real(self, A))
    base = speed_spec("mnist", T=5, batch=3)
    res = speed._worker({**base, "label": "asrnn", "key": "asrnn"})
    assert res["maps_n"] == [8, 8]
    assert res["maps"]["cpu"] > 0 and len(res["maps"]["cpu_all"]) == 2
    # the map step alone: two maps, each forward once, gradients reach the free parameters
    import torch

    from rnnlab.cells import CELLS

    cell = CELLS["asrnn"](1, 6)
    maps = list(par.orthogonal_parametrizations(cell))
    step = speed._map_step(torch, maps)
    calls.clear()
    step()
    assert calls == [6, 6]
    lstm = speed._worker({**base, "label": "nn.LSTM", "key": "nn.LSTM", "gates": 4})
    assert "maps" not in lstm
    rows = [
        {"config": "mnist", "label": "asrnn", "hidden": 8, "params": 1, **res},
        {"config": "mnist", "label": "nn.LSTM", "hidden": 8, "params": 1, **lstm},
    ]
    table = speed.format_table({"conditions": {"maps_timed": True}, "rows": rows})
    head, rule, a, l = table.splitlines()
    assert "maps s/it (share)" in head and rule.count("---") == 13
    share = f"{res['maps']['cpu']:.3f} ({100 * res['maps']['cpu'] / res['fast']['cpu']:.0f}%)"
    assert a.split(" | ")[9] == share and l.split(" | ")[9] == "-"
    assert all(line.count("|") == 14 for line in (head, a, l))
    # results recorded before the column existed keep their 12-column table
    old = speed.format_table({"rows": [{k: v for k, v in rows[1].items()}]})
    assert "maps" not in old and old.splitlines()[1].count("---") == 12


@pytest.mark.parametrize("key", ["fcurnn", "exprnn", "softorth", "asrnn"])
def test_the_map_step_runs_for_maps_whose_output_is_not_their_parameters_shape(key):
    """The full-capacity uRNN's map takes N x N reals to a 2N x 2N real form: the cotangent
    has the output's shape (the main table's fcurnn rows once failed on it)."""
    import torch

    from rnnlab import parametrize as par
    from rnnlab.cells import CELLS

    maps = list(par.orthogonal_parametrizations(CELLS[key](3, 8)))
    assert maps, f"{key} has no orthogonal map: the test would check nothing"
    speed._map_step(torch, maps)()  # forward and backward of every map, without a shape error


def test_limits_table_divides_the_recorded_times():
    row = {
        "config": "ptb",
        "label": "exprnn",
        "hidden": 1024,
        "params": 1,
        "fast": {"cpu": 3.0, "wall": 3.0},
        "baseline": {"cpu": 1.2, "wall": 1.2},
        "floor": {"s": 1.8},
        "baseline_floor": {"s": 0.9},
        "maps": {"cpu": 0.6, "wall": 0.6},
    }
    lstm = {
        "config": "ptb",
        "label": "nn.LSTM",
        "hidden": 365,
        "params": 1,
        "fast": {"cpu": 1.2, "wall": 1.2},
        "floor": {"s": 0.9},
    }
    nomaps = {**row, "label": "rnn", "maps": None}
    # per-repeat times: ratios 3.3/1.1 = 3, 2.8/1.4 = 2, 3.0/1.2 = 2.5 -> median 2.5 in [2, 3]
    rounds = {
        **row,
        "label": "scornn",
        "fast": {"cpu": 3.0, "wall": 3.0, "cpu_all": [3.3, 2.8, 3.0]},
        "baseline": {"cpu": 1.2, "wall": 1.2, "cpu_all": [1.1, 1.4, 1.2]},
    }
    lines = speed.format_limits({"rows": [row, lstm, nomaps, rounds]}).splitlines()
    assert len(lines) == 5  # the LSTM row itself has no baseline: left out
    assert lines[2] == "| ptb | exprnn | 1024 | 1.800 | 0.900 | 2.00 | 1.50 | 0.600 | 2.00 | 2.50 |"
    assert lines[3] == "| ptb | rnn | 1024 | 1.800 | 0.900 | 2.00 | 1.50 | - | 1.50 | 2.50 |"
    assert lines[4].endswith("| 2.50 [2.00-3.00] |")


def test_ratios_are_the_median_of_per_repeat_ratios_with_their_range():
    """Not the ratio of the medians: with fast (1, 2, 4) against baseline (2, 1, 8) the medians
    give 2/2 = 1, the per-repeat ratios 0.5, 2 and 0.5 give median 0.5 in [0.5, 2]."""
    row = {
        "config": "copy",
        "label": "exprnn",
        "hidden": 8,
        "params": 1,
        "depth": 1,
        "fast": {"cpu": 2.0, "wall": 2.0, "faults": 0, "cpu_all": [1.0, 2.0, 4.0], "wall_all": [1.0, 2.0, 4.0]},
        "baseline": {"cpu": 2.0, "wall": 2.0, "cpu_all": [2.0, 1.0, 8.0], "wall_all": [2.0, 1.0, 8.0]},
        "reference": {"cpu": 4.0, "wall": 4.0, "cpu_all": [4.0, 4.0, 4.0], "wall_all": [4.0, 4.0, 4.0]},
        "infer": {"cpu": 0.1, "wall": 0.1},
        "peak_mb": 1.0,
        "floor": None,
    }
    assert speed.ratio(row, "baseline") == (0.5, 0.5, 2.0)
    assert speed.ratio(row, "reference") == (0.5, 0.25, 1.0)
    cells = [c.strip() for c in speed.format_table({"rows": [row]}).splitlines()[2].split("|")[1:-1]]
    assert cells[5] == "0.50 [0.50-2.00] (0.50)" and cells[6] == "0.50 [0.25-1.00]"
    gpu = [c.strip() for c in speed.format_gpu_table({"rows": [row]}).splitlines()[2].split("|")[1:-1]]
    assert gpu[5] == "0.50 [0.50-2.00]" and gpu[6] == "0.50 [0.25-1.00]"


def test_variants_alternate_their_order_every_repeat():
    calls = []
    variants = {name: (lambda name=name: calls.append(name)) for name in ("fast", "reference", "baseline")}
    out = speed._time_alternating(variants, warmup=1, repeats=3, device=__import__("torch").device("cpu"))
    timed = calls[2:]  # the warm-ups of the two non-fast variants come first
    assert calls[:2] == ["reference", "baseline"]
    assert timed == ["fast", "reference", "baseline", "baseline", "reference", "fast", "fast", "reference", "baseline"]
    assert all(len(out[n]["cpu_all"]) == 3 for n in variants)


def test_quick_rows_with_ratios_have_at_least_three_repeats():
    for spec in speed.plan(("copy", "mnist", "ptb", "long"), ["exprnn"], quick=True):
        if spec["baseline_hidden"] or spec["reference"]:
            assert spec["repeats"] >= 3, spec["label"]


def test_main_takes_keywords_named_by_the_options_it_adds():
    import argparse
    import inspect

    p = argparse.ArgumentParser()
    speed.add_arguments(p)
    dests = {a.dest for a in p._actions} - {"help"}
    assert dests == set(speed.OPTIONS)
    params = inspect.signature(speed.main).parameters
    assert set(params) == set(speed.OPTIONS)
    assert all(v.kind is inspect.Parameter.KEYWORD_ONLY for v in params.values())


def test_a_record_is_refused_on_a_busy_machine_before_any_row_runs(tmp_path, monkeypatch, capsys):
    cores = os.cpu_count()
    monkeypatch.setattr(os, "getloadavg", lambda: (cores * 0.5 + 0.3, 1.0, 1.0))
    monkeypatch.setattr(speed, "_spawn", lambda *a: pytest.fail("a row ran on a busy machine"))
    out = tmp_path / "speed.json"
    assert speed.main(configs=["copy"], cells=["exprnn"], json=str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the load average is") and "--allow-load" in err and err.count("\n") == 1
    assert not out.exists()
