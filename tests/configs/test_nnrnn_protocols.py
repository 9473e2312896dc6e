"""The nnRNN presets at their code protocol: ``nnrnn/code/<name>`` is the paper preset with exactly
the settings of ``NNRNN_CODE_DIFFS`` changed, to the values of the authors' released scripts
(file and line) or of their supplement's hyperparameter tables, and one or two training steps of
each."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import flat_config, preset_diff_keys
from rnnlab import config
from rnnlab.ledger import published
from rnnlab.ledger.published_nnrnn import NNRNN_CODE_DIFFS
from rnnlab.train import train

torch.set_num_threads(1)
TOOLS = Path(__file__).resolve().parents[2] / "tools"
CODE = sorted(p for p in published.PROTOCOLS if p.startswith("nnrnn/code/"))


def test_the_code_protocol_differs_from_the_paper_protocol_only_where_the_released_scripts_do():
    """Each code preset is its paper preset with exactly the settings of NNRNN_CODE_DIFFS changed,
    each with its source: the released code (file and line) or the supplement's table; the files
    are what tools/nnrnn_code_presets.py writes from that table."""
    assert CODE == sorted(f"nnrnn/code/{n}" for n in NNRNN_CODE_DIFFS)
    for name, diffs in NNRNN_CODE_DIFFS.items():
        p, paper = f"nnrnn/code/{name}", f"nnrnn/{name}"
        assert published.PROTOCOLS[p][:2] == (paper, "code")
        assert published.protocol(paper) == "paper"
        assert preset_diff_keys(p, paper) == {k for k, *_ in diffs}, p
        code, text = flat_config(config.load(p).to_dict()), flat_config(config.load(paper).to_dict())
        for key, value, src, _what in diffs:
            assert code[key] == value and text.get(key) != value, (p, key)  # a default the resolved diff checked
            if src.kind == "code":
                assert re.search(r"\.py:\d", src.where), (p, key, src)
            else:
                assert src.kind == "text" and re.fullmatch(r"supplement Table [235]", src.where), (p, key, src)
    assert _run_tool("--check").returncode == 0


def test_the_released_settings_the_audit_found():
    """The differences named in issue 57's nnRNN audit, at their values."""
    assert config.load("nnrnn/code/ptb-bptt150-exprnn").optim.lr == 5e-3  # supplement Table 5
    assert config.load("nnrnn/code/ptb-bptt150-exprnn").optim.group_lr == {"orthogonal": 1e-4}
    assert config.load("nnrnn/ptb-bptt150-exprnn").optim.lr == 1e-3  # the later README's
    t = config.load("nnrnn/code/ptb-bptt300").train
    assert (t.schedule, t.plateau_factor, t.plateau_patience, t.plateau_threshold) == ("plateau", 0.5, 0, 0.0)
    assert (t.steps, t.eval_every) == (13100, 131)
    m = config.load("nnrnn/code/ptb-bptt300").model
    assert (m.embedding_init, m.readout_init, m.cell_options["delta"]) == ("uniform0.1", "uniform0.1", 1e-4)
    assert config.load("nnrnn/code/psmnist-exprnn").optim.lr == 5e-4  # Table 3 (the preset: 5e-5)
    assert config.load("nnrnn/code/copy-rnn-orth").model.cell_options["init"] == "expm_skew"
    # no released code: EURNN (TensorFlow, not in the repository) and the fixed-gamma runs (SM F)
    assert not any("eurnn" in p or "fixed-gamma" in p for p in CODE)


def _run_tool(*args):
    return subprocess.run([sys.executable, str(TOOLS / "nnrnn_code_presets.py"), *args], capture_output=True, text=True)


@pytest.mark.parametrize("name", [p for p in CODE if "/copy" in p])
def test_every_copy_code_preset_trains_two_steps(name, tmp_path):
    cfg = config.load(name, ["task.val_size=8", "task.test_size=8", "train.steps=2", "train.eval_every=1"])
    r = train(cfg, tmp_path / "run")
    assert r["steps"] == 2 and r["stopped"] == "completed"
    assert all(v == v for v in r["test"].values())


@pytest.mark.parametrize("name", [p for p in CODE if "/copy" not in p])
def test_every_data_code_preset_trains_two_steps(name, tmp_path, data_root):
    """psMNIST and PTB on the real data (skipped without it), cut to two steps and a few
    evaluation batches."""
    sets = [f"task.data_dir={str(data_root)!r}", "train.steps=2", "train.eval_every=1", "train.eval_max_batches=1"]
    if "/ptb" in name:
        sets += ["train.batch_size=4", "task.bptt=20", "model.hidden_size=64"]
    else:
        sets += ["train.batch_size=4", "model.hidden_size=32"]
    r = train(config.load(name, sets), tmp_path / "run")
    assert r["steps"] == 2 and r["stopped"] == "completed"
    assert all(v == v for v in r["test"].values())


def test_the_nnrnn_fidelity_page_marks_every_difference_with_its_released_source():
    """Each entry of NNRNN_CODE_DIFFS is a row marked **differs** in its paper preset's section
    of docs/fidelity/nnrnn.md, with the code protocol's source beside it; no other row differs
    except the plateau schedule's own factor and patience (given with the schedule)."""
    from rnnlab.ledger import sources
    from rnnlab.ledger.sources_nnrnn import _OUTCOME_KEY

    page = sources.fidelity_page("nnrnn")
    sections = dict((part.split("`", 2)[1], part) for part in page.split("\n## ")[1:] if part.startswith("`nnrnn/"))
    for name, diffs in NNRNN_CODE_DIFFS.items():
        section = sections[f"nnrnn/{name}"]
        marked = {line.split(" | ")[0].lstrip("| ") for line in section.splitlines() if "**differs**" in line}
        want = {_OUTCOME_KEY.get(k, k) for k, *_ in diffs}
        extra = {"train.plateau_factor", "train.plateau_patience"} if "train.schedule" in want else set()
        assert marked == want | extra, name
        for key, _v, src, _what in diffs:
            row = next(line for line in section.splitlines() if line.startswith(f"| {_OUTCOME_KEY.get(key, key)} |"))
            assert f"released: {src}" in row, (name, key)
