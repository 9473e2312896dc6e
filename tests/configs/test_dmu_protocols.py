"""The DMU synthetic experiments at their three protocols: ``dmu/<task>-<module>`` the paper's
(Table X's "200 sequences per epoch" read as the authors' released scripts run it: 200 batches
of 32, fixed validation / test sets of 1,000 / 10,000 sequences, stop after 5 evaluations in a
row below 1e-6), ``dmu/code/`` the released scripts where they differ from the text, and
``dmu/short/`` the 10 batches of 20 the first records were made at; the training-loop pieces
they need (``train.target_patience``, ``train.epoch_steps``, the noisy sequence's fixed length
and softmax over every symbol) and one or two training steps of each new preset."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import flat_config, preset_diff_keys
from rnnlab import config, rundir
from rnnlab.ledger import published
from rnnlab.ledger.published_dmu import DMU_CODE_DIFFS
from rnnlab.results import dmu_steps_per_epoch
from rnnlab.tasks.hochreiter import NoisySequenceTask
from rnnlab.train import train

torch.set_num_threads(1)
TOOLS = Path(__file__).resolve().parents[2] / "tools"


def _run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


TASKS = ("adding", "temporal_order", "noisy_sequence")
MODULES = ("rnn", "lstm", "gru", "rhn", "dmu")
PAPER = [f"dmu/{t}-{m}" for t in TASKS for m in MODULES]
REAL = ("dmu/code/natlang-", "dmu/code/polymusic-")  # the real-data code presets: test_dmu_real_protocols.py
CODE = sorted(p for p in published.PROTOCOLS if p.startswith("dmu/code/") and not p.startswith(REAL))
SHORT_KEYS = {
    "train.steps",
    "train.batch_size",
    "train.eval_every",
    "task.val_size",
    "task.test_size",
    "train.target_patience",
}


def test_the_paper_protocol_is_the_released_code_budget_and_the_short_protocol_differs_only_there():
    for p in PAPER:
        cfg = config.load(p)
        t = cfg.train
        assert (t.steps, t.batch_size, t.eval_every, t.epoch_steps) == (20000, 32, 200, 200), p
        assert (t.target_metric, t.target_value, t.target_patience) == ("val/loss", 1e-6, 5), p
        assert (cfg.task.options["val_size"], cfg.task.options["test_size"]) == (1000, 10000), p
        assert published.protocol(p) == "paper"
        short = f"dmu/short/{p.split('/')[1]}"
        assert published.protocol(short) == "short" and published.PROTOCOLS[short][0] == p
        s = config.load(short).train
        assert (s.steps, s.batch_size, s.eval_every, s.target_patience) == (1000, 20, 10, 1), short
        assert preset_diff_keys(short, p) == SHORT_KEYS, short
        assert published.at_other_protocols(p)[-1] == short


def test_the_code_protocol_differs_from_the_paper_protocol_only_where_the_released_scripts_do():
    """Each code preset is its paper preset with exactly the settings of DMU_CODE_DIFFS changed,
    to the released code's values, each with a ``code`` source (file and line); the preset files
    are what tools/dmu_code_presets.py writes from that table."""
    assert CODE == sorted(f"dmu/code/{t}-{m}" for t, m in DMU_CODE_DIFFS)
    for (t, m), diffs in DMU_CODE_DIFFS.items():
        p, paper = f"dmu/code/{t}-{m}", f"dmu/{t}-{m}"
        assert published.PROTOCOLS[p][:2] == (paper, "code")
        assert preset_diff_keys(p, paper) == {k for k, *_ in diffs}, p
        flat = flat_config(config.load(p).to_dict())
        for key, value, src, _what in diffs:
            assert flat[key] == value, (p, key)
            assert src.kind == "code" and src.where, (p, key)
    # the two experiments the released code runs as the text does have no code preset
    assert {(t, m) for t in TASKS for m in MODULES} - set(DMU_CODE_DIFFS) == {
        ("temporal_order", "rnn"),
        ("temporal_order", "gru"),
    }
    assert config.load("dmu/code/adding-dmu").optim.group_lr == {"memory": 0.001}  # guild.yml learning-rate-rnn
    assert config.load("dmu/code/noisy_sequence-gru").optim.lr == 0.1  # experiments_repro/noise_seq.sh
    assert config.load("dmu/noisy_sequence-gru").optim.lr == 0.05  # Table X
    assert _run([sys.executable, str(TOOLS / "dmu_code_presets.py"), "--check"]).returncode == 0


def test_epochs_are_the_protocols_epochs():
    """The paper protocol's epoch is 200 batches (train.epoch_steps); without it, 200 sequences
    over the batch (the short protocol: 10 steps)."""
    assert dmu_steps_per_epoch(config.load("dmu/adding-dmu").to_dict()) == 200
    assert dmu_steps_per_epoch(config.load("dmu/short/adding-dmu").to_dict()) == 10
    assert dmu_steps_per_epoch({"train": {"batch_size": 32, "epoch_steps": 0}}) == pytest.approx(6.25)


def test_noisy_sequence_as_the_released_code_runs_it():
    g = torch.Generator().manual_seed(0)
    code = NoisySequenceTask(L=100, noise_symbols=98, variable_length=False, classes=100)
    b = code.make(64, g)
    assert code.output_size == 100 and b.lengths.unique().tolist() == [100] and b.x.shape[1] == 100
    assert set(b.y.tolist()) <= {0, 1} and torch.equal(b.x[:, 0], b.y)  # the answer is still x or y
    text = NoisySequenceTask(L=100, noise_symbols=98)
    lengths = text.make(512, g).lengths
    assert text.output_size == 2 and lengths.min() >= 100 and lengths.max() == 110
    with pytest.raises(ValueError, match=r"classes must be 2 .* or 100 .* got classes=7"):
        NoisySequenceTask(L=100, noise_symbols=98, classes=7)


def test_target_patience_stops_after_that_many_evaluations_in_a_row(tmp_path):
    """val/loss is always <= 100: with patience 3 the run stops at the third evaluation, with
    the default 1 at the first (as before the key existed)."""
    base = [
        "task.L=20",
        "task.val_size=8",
        "task.test_size=8",
        "train.steps=10",
        "train.eval_every=1",
        "train.target_value=100.0",
    ]
    three = train(config.load("dmu/short/adding-rnn", [*base, "train.target_patience=3"]), tmp_path / "a")
    one = train(config.load("dmu/short/adding-rnn", base), tmp_path / "b")
    assert (three["steps"], three["stopped"]) == (3, "target")
    assert (one["steps"], one["stopped"]) == (1, "target")
    with pytest.raises(config.ConfigError, match="train.target_patience"):
        config.load("dmu/adding-rnn", ["train.target_patience=0"])


def test_a_key_added_later_leaves_earlier_run_keys_as_they_were():
    """A config.json written before train.target_patience existed has the key of the same
    configuration today (the default, 1, is left out of the key); 5 is another configuration."""
    cfg = config.load("dmu/short/adding-dmu").to_dict()
    old = json.loads(json.dumps(cfg))
    del old["train"]["target_patience"], old["train"]["epoch_steps"]
    assert rundir.config_key(cfg) == rundir.config_key(old)
    cfg["train"]["target_patience"] = 5
    assert rundir.config_key(cfg) != rundir.config_key(old)


@pytest.mark.parametrize("name", PAPER + CODE)
def test_every_new_preset_trains_two_steps(name, tmp_path):
    cfg = config.load(name, ["task.val_size=8", "task.test_size=8", "train.steps=2", "train.eval_every=1"])
    r = train(cfg, tmp_path / "run")
    assert r["steps"] == 2 and r["stopped"] == "completed"
    assert all(v == v for v in r["test"].values())  # finite test metrics
