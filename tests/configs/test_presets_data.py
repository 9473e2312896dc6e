"""Every run recorded in docs/data.md is one preset: the names the page gives exist, and each
short-run row's model, steps and learning rate are the preset's."""

import re
from pathlib import Path

import pytest

from rnnlab import config

DOC = Path(__file__).resolve().parents[2] / "docs" / "data.md"


def test_presets_named_in_data_md_exist():
    names = set(re.findall(r"`(data/[\w.-]+)`", DOC.read_text()))
    assert len(names) >= 15
    assert names <= set(config.list_presets())
    for n in names:
        assert config.load(n).name == "data-" + n.split("/")[1]


SHORT = {
    "ptb_char": "data/ptb_char-short",
    "music": "data/music-jsb-short",
    "psmnist": "data/psmnist-short",
    "translation": "data/translation-spa-eng-short",
}


@pytest.mark.parametrize("task", sorted(SHORT))
def test_short_run_rows_match_their_presets(task):
    row = next(ln for ln in DOC.read_text().splitlines() if re.match(rf"\| `{task}`.*steps, ", ln))
    m = re.search(r"\| (\w+) (\d+)(?:, emb (\d+))?; (\d+) steps, ([\d.e-]+) \|", row)
    cell, hidden, emb, steps, lr = m.groups()
    cfg = config.load(SHORT[task])
    assert (cfg.task.name, cfg.model.cell, cfg.model.hidden_size, cfg.model.embedding) == (
        task,
        cell,
        int(hidden),
        int(emb or 0),
    )
    assert (cfg.train.steps, cfg.optim.lr, cfg.train.batch_size, cfg.optim.clip) == (int(steps), float(lr), 32, 1.0)
