"""benchmarks/small_models.py's parts (rnnlab.bench.small_bench): its floor computes the same
arithmetic as the compiled loops (equal results in float64, so the floor times the same work),
and its table shows the ratios of the measured times."""

from pathlib import Path

import pytest
import torch

from rnnlab.bench import small_bench
from rnnlab.cells import CELLS
from rnnlab.cells.layers import Recurrent
from rnnlab.kernels import small

FLOOR = Path(__file__).resolve().parents[2] / "benchmarks" / "small_floor.c"


@pytest.mark.skipif(not small.available(), reason="no C compiler")
def test_the_floor_computes_what_the_compiled_loops_compute(tmp_path):
    floor = small_bench.build_floor(FLOOR, tmp_path)
    x = torch.randn(7, 3, 2, dtype=torch.float64)
    lengths = torch.tensor([7, 3, 5])
    for key, options in [("rnn", {}), ("lstm", {}), ("gru", {}), ("rhn", {"depth": 2}), ("dmu", {"layers": [3, 2]})]:
        results = []
        for libs in (None, floor):
            torch.manual_seed(0)
            layer = Recurrent(2, [3, 2], cell=CELLS[key], backend="small", **options).double()
            with small_bench.timed_kernels(libs) as spent:
                out, _ = layer(x, lengths=lengths)
                out.square().sum().backward()
            assert spent[0] > 0  # the calls went through the timed kernels
            results.append([out.detach()] + [p.grad for p in layer.parameters()])
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_table_shows_the_ratios():
    rows = [
        {
            "preset": "dmu/adding-rnn",
            "members": 1,
            "before_s": 0.010,
            "after_s": 0.004,
            "floor_s": 0.002,
            "eval_s": 0.02,
        },
        {"preset": "dmu/adding-rnn", "members": 51, "before_s": 0.1, "after_s": 0.08, "floor_s": 0.1, "eval_s": 0.5},
    ]
    table = small_bench.format_table(rows)
    assert "| dmu/adding-rnn | 1 | 10.0 | 4.0 | 2.0 | 2.5x | 2.00 |" in table
    assert "| dmu/adding-rnn | 51 | 100.0 | 80.0 | 100.0 | 1.2x | 0.80 |" in table
    assert "| dmu/adding-rnn | 20 | 500 | 25.0 |" in table


def test_whole_protocol_projection_reads_each_presets_budget():
    # dmu/adding-rnn: 20,000 updates, validation every 200 (100 passes) on 1,000 sequences, one
    # test pass on 10,000 (the preset's description gives all four numbers)
    rows = [
        {
            "preset": "dmu/adding-rnn",
            "members": 1,
            "before_s": 0.01,
            "after_s": 0.004,
            "floor_s": 0.002,
            "eval_s": 0.02,
        },
        {"preset": "dmu/adding-rnn", "members": 51, "before_s": 0.1, "after_s": 0.09, "floor_s": 0.1, "eval_s": 0.36},
    ]
    hours = small_bench.protocol_hours(rows)
    assert list(hours) == ["dmu/adding-rnn"]
    assert hours["dmu/adding-rnn"] == pytest.approx((20_000 * 0.09 + 100 * 0.36 + 10 * 0.36) / 3600)
    assert "**0.51 CPU-h** for 1 presets x 51 seeds" in small_bench.format_table(rows)
    assert small_bench.protocol_hours(rows[:1]) == {}
