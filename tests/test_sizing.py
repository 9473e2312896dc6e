"""``model.params``: the width whose model has the parameter count nearest a budget."""

from __future__ import annotations

import json

import pytest
import torch

from rnnlab import config
from rnnlab.cli import main
from rnnlab.model import build_model
from rnnlab.tasks import build_task

FAST = ["--set", "task.L=8", "--set", "task.val_size=32", "--set", "task.test_size=32"]
FAST += ["--set", "train.eval_every=2", "--set", "train.batch_size=8", "--quiet"]


def _model(preset: str, over=()):
    cfg = config.load(preset, list(over))
    return cfg, build_model(cfg.model, build_task(cfg.task))


def _budget(preset: str, cell: str, params: int, options: str = "{}"):
    over = [f"model.cell={cell}", f"model.cell_options={options}", "model.hidden_size=0", f"model.params={params}"]
    return _model(preset, over)[1].parameter_counts()


@pytest.mark.parametrize("cell, width", [("lstm", 62), ("exprnn", 176)])
def test_the_nnrnn_papers_matched_baselines(cell, width):
    """nnRNN's copy task: N = 128 nnRNN (~18.9K parameters) against an LSTM of 62 units and an
    expRNN of 176 (the presets nnrnn/copy-lstm and nnrnn/copy-exprnn, as the paper states)."""
    budget = _model("nnrnn/copy")[1].parameter_counts()["free"]
    preset = config.load(f"nnrnn/copy-{cell}")
    assert preset.model.hidden_size == width and "18.9K" in preset.description + json.dumps(preset.paper)
    counts = _budget("nnrnn/copy", cell, budget)
    assert counts["hidden_size"] == width and counts["budget"] == budget
    assert counts["matched"] == counts["free"] == _model(f"nnrnn/copy-{cell}")[1].parameter_counts()["free"]


@pytest.mark.parametrize(
    "cell", ["rnn", "gru", "dmu", "nnrnn", "lem", "mingru", "minlstm", "slstm", "mlstm", "lru", "s4d", "mamba"]
)
def test_the_width_is_the_nearest_among_its_neighbours(cell):
    budget = 5000
    got = _budget("demo/lstm", cell, budget)
    w = got["hidden_size"]
    for other in (w - 2, w - 1, w + 1, w + 2):  # each counted by building at that width
        try:
            _, m = _model("demo/lstm", [f"model.cell={cell}", "model.cell_options={}", f"model.hidden_size={other}"])
        except ValueError:  # a width the cell refuses (nnRNN: odd)
            continue
        assert abs(got["free"] - budget) <= abs(m.parameter_counts()["free"] - budget), (cell, w, other)


@pytest.mark.parametrize("cell", ["mingru", "minlstm", "slstm", "mlstm"])
def test_the_modern_copy_presets_are_sized_to_their_budget(cell):
    """configs/modern/copy-L200-*: 16K parameters; the xLSTM cells' 4 heads divide the width
    (widths they refuse are skipped by the search)."""
    cfg, model = _model(f"modern/copy-L200-{cell}")
    counts = model.parameter_counts()
    assert abs(counts["free"] - 16000) / 16000 < 0.05, counts
    heads = cfg.model.cell_options.get("heads", 1)
    assert counts["hidden_size"] % heads == 0


def test_both_given_is_a_one_line_error_and_the_rng_is_left_alone():
    with pytest.raises(config.ConfigError, match="both given.*model.hidden_size=0"):
        config.load("demo/lstm", ["model.params=5000"])
    with pytest.raises(config.ConfigError, match="model.params must be"):
        config.load("demo/lstm", ["model.params=-3", "model.hidden_size=0"])
    from rnnlab import sizing

    sizing._cache.clear()  # the search itself runs here, between the seed and the build
    torch.manual_seed(7)
    counts = _budget("demo/lstm", "gru", 4000)
    first = torch.get_rng_state()
    torch.manual_seed(7)
    _model("demo/lstm", ["model.cell=gru", "model.cell_options={}", f"model.hidden_size={counts['hidden_size']}"])
    assert torch.equal(torch.get_rng_state(), first)


def test_a_non_growing_count_is_refused():
    with pytest.raises(ValueError, match="does not grow with the width"):
        _budget("nnrnn/copy", "kru", 18889)


def test_a_run_records_budget_and_width_and_initialises_as_that_width(tmp_path, capsys):
    a, b = tmp_path / "budget", tmp_path / "width"
    base = ["train", "demo/lstm", "--set", "train.steps=2"] + FAST
    assert main(base + ["--set", "model.hidden_size=0", "--set", "model.params=3000", "--out", str(a)]) == 0
    result = json.loads((a / "result.json").read_text())
    saved = json.loads((a / "config.json").read_text())
    assert saved["model"]["params"] == 3000 and saved["model"]["hidden_size"] == 0
    width = result["params"]["hidden_size"]
    assert result["params"]["budget"] == 3000 and result["params"]["matched"] == result["params"]["free"]
    assert main(base + ["--set", f"model.hidden_size={width}", "--out", str(b)]) == 0
    wa = torch.load(a / "checkpoint.pt", weights_only=False)["model"]
    wb = torch.load(b / "checkpoint.pt", weights_only=False)["model"]
    assert all(torch.equal(wa[k], wb[k]) for k in wb)  # the search drew nothing from the seeded stream
    # a resume continues it
    assert (
        main(
            base[:3]
            + ["train.steps=4"]
            + base[4:]
            + ["--out", str(a), "--resume"]
            + ["--set", "model.hidden_size=0", "--set", "model.params=3000"]
        )
        == 0
    )
    assert json.loads((a / "result.json").read_text())["steps"] == 4


def test_a_budget_below_the_smallest_model_is_refused_with_the_smallest_count(tmp_path, capsys):
    """model.params = 1 trained an LSTM of 70 parameters (70 times the budget) without a word."""
    out = tmp_path / "run"
    argv = ["train", "demo/lstm", "--set", "model.hidden_size=0", "--set", "train.steps=1", "--out", str(out)] + FAST
    assert main(argv + ["--set", "model.params=1"]) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert "Traceback" not in err and line.startswith("rnnlab: error: ")
    assert "model.params = 1 is below the smallest model" in line and "give model.params >= " in line, line
    assert not out.exists()
    smallest = int(line.split("give model.params >= ")[1].split(",")[0])
    assert main(argv + ["--set", f"model.params={smallest}"]) == 0  # the fix works
    assert json.loads((out / "result.json").read_text())["steps"] == 1
