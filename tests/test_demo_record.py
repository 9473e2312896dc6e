"""The README's demo table is the committed record docs/demo/, and the record is what the demo
produces: a fresh run reproduces every metric (slow), the README block is generated from the
record (fast), and the record was made from today's demo presets (fast)."""

import json
import shutil
from pathlib import Path

import pytest

from rnnlab import config
from rnnlab.cli import DEMO_METRICS, DEMO_PRESETS, main
from rnnlab.docsync import blocks, render, sync
from rnnlab.results import table

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "demo"


def test_demo_shows_the_papers_models_beside_an_lstm():
    cells = {config.load(p).model.cell for p in DEMO_PRESETS}
    assert cells == {"asrnn", "nnrnn", "dmu", "ltrnn", "lstm"}


def test_readme_tables_equal_their_records():
    found = blocks(ROOT / "README.md")
    assert any(args.split()[0] == "docs/demo" for args, _ in found)
    for args, body in found:
        assert body == render(args, ROOT), f"README block 'table: {args}' is stale: run make readme"
    assert (RECORD / "table.md").read_text() == table(RECORD, DEMO_METRICS) + "\n"


def test_stale_block_is_reported_and_rewritten(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copytree(RECORD, tmp_path / "docs" / "demo")
    shutil.copytree(ROOT / "records", tmp_path / "records")  # the README's ledger line
    text = (ROOT / "README.md").read_text()
    readme.write_text(text.replace("| demo-lstm | lstm |", "| demo-lstm | lstm-edited |", 1))
    assert sync(readme, check=True) and readme.read_text() != text  # reported, left alone
    assert sync(readme) and sync(readme, check=True) == []
    assert [b for b in blocks(readme)] == [b for b in blocks(ROOT / "README.md")]


def test_record_was_made_from_the_demo_presets():
    for preset in DEMO_PRESETS:
        cfg = config.load(preset)
        saved = config.load_json(RECORD / cfg.name / "config.json")
        assert saved == cfg, f"docs/demo/{cfg.name} is not from today's {preset}: run make demo-record"


@pytest.mark.slow
def test_fresh_demo_reproduces_the_record(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--fresh"]) == 0
    for preset in DEMO_PRESETS:
        name = config.load(preset).name
        want = json.loads((RECORD / name / "result.json").read_text())
        got = json.loads((tmp_path / name / "result.json").read_text())
        for split in ("final", "test"):
            assert got[split] == pytest.approx(want[split], rel=1e-6, abs=1e-9), name
        assert got["params"] == want["params"] and got["steps"] == want["steps"]
    assert table(tmp_path, DEMO_METRICS, timing=False) == table(RECORD, DEMO_METRICS, timing=False)
