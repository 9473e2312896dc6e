"""The DMU paper's Table IV presets and the coRNN / LEM psMNIST presets (issue 23).

Every Table IV row names a preset (no "no preset" row is left); the eight cells of the issue
have the table's N and parameter counts within 5% of its "approximately" figures (the
arithmetic is in docs/models.md); the suites run each preset for one epoch; every preset
trains on a fixture MNIST (full size: slow; at a small width: default).
"""

from __future__ import annotations

import math

import pytest
from test_faithful_presets import train_on_fixtures

from rnnlab import config
from rnnlab.ledger import published
from rnnlab.model import SequenceModel
from rnnlab.suite import load_suite

#: key -> (N, the table's parameter figure(s), hidden_size: 2N for the complex cells)
TABLE = {
    "lstm": (128, 68e3, 128),
    "momentumlstm": (256, 270e3, 256),
    "urnn": (512, 9e3, 1024),
    "fcurnn": (512, 270e3, 1024),
    "softorth": (128, 18e3, 128),
    "kru": (512, 11e3, 1024),
    "antisymrnn": (128, 10e3, 128),
    "incrnn": (128, (4e3, 8e3), 128),
    "exprnn": (360, 69e3, 360),
    "naisnet": (128, 18e3, 128),
    "lipschitz": (128, 34e3, 128),
}
ISSUE_CELLS = {"momentumlstm", "fcurnn", "softorth", "kru", "antisymrnn", "incrnn", "naisnet", "lipschitz"}
PRESETS = [f"dmu/{t}-{k}" for k in TABLE for t in ("smnist", "psmnist")] + ["cornn/psmnist", "lem/psmnist"]


def _count(name: str) -> int:
    m = config.load(name).model
    return SequenceModel(m.cell, 1, 10, m.hidden_size, readout="last", cell_options=m.cell_options).parameter_counts()[
        "free"
    ]


def test_every_table_iv_row_has_a_preset():
    rows = [r for r in published.ROWS if r.paper == "dmu" and r.table == "Table IV"]
    assert len(rows) == 26
    assert all(r.presets and not r.reason for r in rows)
    named = {p for r in rows for p in r.presets}
    assert {p for p in PRESETS if p.startswith("dmu/")} <= named


@pytest.mark.parametrize("key", sorted(TABLE))
def test_presets_have_the_tables_size_and_count(key):
    N, approx, hidden = TABLE[key]
    for i, task in enumerate(("smnist", "psmnist")):
        cfg = config.load(f"dmu/{task}-{key}")
        assert cfg.model.cell == key and cfg.model.hidden_size == hidden and cfg.task.name == task
        target = approx[i] if isinstance(approx, tuple) else approx
        count = _count(f"dmu/{task}-{key}")
        if key == "urnn":  # the table's ~9K matches no count of Arjovsky's uRNN at N=512 (docs/models.md)
            assert count == 2 * 512 + 512 + 7 * 512 + 10 * 1024 + 10
        elif key in ISSUE_CELLS or key in ("lstm", "exprnn"):
            assert abs(count - target) <= 0.05 * target, (key, task, count, target)


def test_exact_counts_written_in_the_docs():
    """The arithmetic of docs/models.md, recomputed here from the formulas."""
    expected = {
        "lstm": 4 * 128 * (1 + 128 + 2) + 1290,
        "momentumlstm": 4 * 256 * (1 + 256 + 2) + 2570,
        "fcurnn": 1024 + 512 + 512**2 + 10250,
        "softorth": 128 + 128 + 128 * 127 + 128 + 1290,
        "kru": 512 + 512 + 9 * 8 + 10250,
        "antisymrnn": 128 + 128 + 128 * 127 // 2 + 1290,
        "exprnn": 360 + 360 + 360 * 359 // 2 + 3610,
        "naisnet": 128 + 128 + 128**2 + 1290,
        "lipschitz": 128 + 128 + 2 * 128**2 + 1290,
    }
    for key, n in expected.items():
        assert _count(f"dmu/smnist-{key}") == n, key
    assert _count("dmu/smnist-incrnn") == 3 * 128 + 2 * 128 * 9 + 1290 == 3978
    assert _count("dmu/psmnist-incrnn") == 3 * 128 + 2 * 128 * 25 + 1290 == 8074
    assert _count("cornn/psmnist") == 256 * (1 + 2 * 256) + 256 + 2570 == 134154  # the coRNN paper's 134k
    assert _count("lem/psmnist") == 4 * 128 + 512 + 3 * 128**2 + 384 + 128**2 + 128 + 1290 == 68362


def test_presets_carry_the_published_accuracies():
    for name in PRESETS:
        cfg = config.load(name)
        rows = [r for r in published.ROWS if name in r.presets and r.metric == "test/accuracy"]
        assert len(rows) == 1 and math.isclose(cfg.paper["test/accuracy"], rows[0].value), name
    assert config.load("cornn/psmnist").paper["test/accuracy"] == 0.9734
    assert config.load("lem/psmnist").paper["test/accuracy"] == 0.966


def test_one_epoch_suites_cover_every_preset_once():
    # (steps, checkpoints between evaluations: the large models' one evaluation is hours away)
    suites = {
        "dmu-table4-1epoch": (429, 0),
        "dmu-table4-1epoch-kru": (429, 20),
        "dmu-table4-1epoch-exprnn": (429, 20),
        "dmu-table4-1epoch-fcurnn": (1100, 50),
        "dmu-table4-1epoch-urnn": (1100, 50),
        "cornn-psmnist-1epoch": (458, 0),
        "lem-psmnist-1epoch": (429, 0),
    }
    covered = []
    for name, (steps, between) in suites.items():
        suite = load_suite(name)
        want = [f"train.steps={steps}"] + ([f"train.checkpoint_every={between}"] if between else [])
        assert suite.set == want and suite.metrics == ["test/accuracy"]
        for p in suite.presets:
            cfg = config.load(p)
            # one epoch of the 55,000 training images at the preset's batch, evaluated at its end
            assert steps == 55000 // cfg.train.batch_size == cfg.train.eval_every, (name, p)
            covered.append(p)
    assert sorted(covered) == sorted(PRESETS)


def _one_step(name, tmp_path, extra=()):
    return train_on_fixtures(name, tmp_path, "task.val_size=2", *extra)


#: one preset per cell at a small width (four in the default suite, the others slow, as T = 784
#: steps of the Python-loop paths take seconds); every preset at its size: slow
SMALL = [p for p in PRESETS if p.startswith(("dmu/psmnist-", "cornn/", "lem/"))]
QUICK = ["cornn/psmnist", "lem/psmnist", "dmu/psmnist-antisymrnn", "dmu/psmnist-softorth"]


@pytest.mark.parametrize("name", [p if p in QUICK else pytest.param(p, marks=pytest.mark.slow) for p in SMALL])
def test_presets_train_a_step_at_a_small_width(name, tmp_path):
    key = config.load(name).model.cell
    extra = ["model.hidden_size=8"] + (["model.cell_options.rank=2"] if key == "incrnn" else [])
    _one_step(name, tmp_path, extra)


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_trains_a_step_at_its_size(name, tmp_path):
    _one_step(name, tmp_path)


def test_memory_table_quotes_its_record():
    """docs/models.md ("Memory") quotes docs/table4-memory.json (tools/preset_memory.py) for
    every preset; the ordered and permuted presets of a cell need the same memory."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    record = json.loads((root / "docs" / "table4-memory.json").read_text())["presets"]
    assert set(record) == set(PRESETS)
    text = (root / "docs" / "models.md").read_text()
    section = text.split("### Memory", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (\d+) \| (\d+) \| ([\d,]+) \|$", section, re.M)
    quoted = {}
    for preset, hidden, batch, mib in rows:
        names = [preset.replace("{smnist,psmnist}", t) for t in ("smnist", "psmnist")] if "{" in preset else [preset]
        for name in names:
            quoted[name] = (int(hidden), int(batch), int(mib.replace(",", "")))
    assert set(quoted) == set(PRESETS)
    for name, (hidden, batch, mib) in quoted.items():
        r, cfg = record[name], config.load(name)
        assert (hidden, batch) == (r["hidden_size"], r["batch_size"]) == (cfg.model.hidden_size, cfg.train.batch_size)
        assert abs(mib - r["step_mib"]) <= 0.02 * mib, (name, mib, r["step_mib"])
        if name.startswith(("dmu/psmnist", "cornn", "lem")):
            assert mib == r["step_mib"], name
