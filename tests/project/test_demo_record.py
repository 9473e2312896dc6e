"""The README's demo table is the committed record docs/demo/, and the record is what the demo
produces: a fresh run reproduces every metric on the kind of host the record was made on, and
each model's verdict (solves the task or not) elsewhere (slow); the README block is generated
from the record, the README's sentence on DMU quotes the record, and the record was made from
today's demo presets (fast)."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from rnnlab import config
from rnnlab.bench.docsync import blocks, render, sync
from rnnlab.cli import DEMO_METRICS, DEMO_PRESETS, main
from rnnlab.results import copy_verdict, table

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "demo"
_spec = importlib.util.spec_from_file_location("demo_host", ROOT / "tools" / "demo_host.py")
demo_host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo_host)


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


def _verdict(result: dict) -> str | None:
    """ "solved" (test loss under 10% of the memoryless baseline, recall >= 0.95), "not solved"
    (over half of it), else None (in between: no verdict): the demo's own rule."""
    return copy_verdict(result)[0]


def test_the_copy_verdict_rule_on_known_answers():
    base = {"name": "r", "baseline": {"loss": 0.4}}
    assert copy_verdict({**base, "test": {"test/loss": 0.039, "test/recall_accuracy": 0.95}})[0] == "solved"
    # loss low but recall short of 0.95, or loss just over 10%: neither solved nor not solved
    assert copy_verdict({**base, "test": {"test/loss": 0.039, "test/recall_accuracy": 0.94}})[0] is None
    assert copy_verdict({**base, "test": {"test/loss": 0.041, "test/recall_accuracy": 1.0}})[0] is None
    verdict, sentence = copy_verdict({**base, "test": {"test/loss": 0.21, "test/recall_accuracy": 0.2}})
    assert verdict == "not solved" and sentence.startswith("r: not solved (test loss 0.21 is 52% of")
    assert copy_verdict({"name": "r", "test": {}})[0] is None


def test_record_names_its_host_and_every_model_has_a_verdict():
    host = json.loads((RECORD / "host.json").read_text())
    assert set(host) == {"cpu_model", "cpu_capability", "blas", "torch"}
    verdicts = {}
    for preset in DEMO_PRESETS:
        cfg = config.load(preset)
        verdicts[cfg.model.cell] = _verdict(json.loads((RECORD / cfg.name / "result.json").read_text()))
    assert None not in verdicts.values(), verdicts  # the cross-CPU check below needs a clear verdict
    assert {c for c, v in verdicts.items() if v == "solved"} == {"asrnn", "nnrnn", "ltrnn"}


def test_readme_sentence_on_dmu_quotes_the_record():
    readme = " ".join((ROOT / "README.md").read_text().split())
    rows = [json.loads(line) for line in (RECORD / "demo-dmu" / "metrics.jsonl").read_text().splitlines()]
    val = {r["step"]: r["val/loss"] for r in rows if "val/loss" in r}
    groups = json.loads((RECORD / "demo-dmu" / "result.json").read_text())["param_groups"]
    lr, memory = groups["default"]["lr"], groups["memory"]["lr"]
    assert memory == pytest.approx(lr / 4)  # lr / (2 n), n = 2 layers
    assert f"`lr / (2 n)` = {memory:.1e}".replace("e-04", "e-4") in readme
    assert f"others' {lr:.0e}".replace("e-03", "e-3") in readme
    first, last = min(val), max(val)
    assert f"from {val[first]:.2f} at step {first} to {val[last]:.2f} at step {last}" in readme
    assert val[last] > json.loads((RECORD / "demo-dmu" / "result.json").read_text())["baseline"]["loss"]
    assert all(a > b for a, b in zip([val[k] for k in sorted(val)], [val[k] for k in sorted(val)][1:])), (
        "the README says DMU's loss is still falling"
    )


@pytest.mark.slow
def test_fresh_demo_reproduces_the_record(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--fresh"]) == 0
    same_host = demo_host.host() == json.loads((RECORD / "host.json").read_text())
    for preset in DEMO_PRESETS:
        name = config.load(preset).name
        want = json.loads((RECORD / name / "result.json").read_text())
        got = json.loads((tmp_path / name / "result.json").read_text())
        assert got["params"] == want["params"] and got["steps"] == want["steps"]
        if same_host:  # the record's kind of host: every number
            for split in ("final", "test"):
                assert got[split] == pytest.approx(want[split], rel=1e-6, abs=1e-9), name
        else:  # another CPU sums in another order: the verdicts hold, the digits drift
            assert _verdict(got) == _verdict(want), (name, got["test"])
    if same_host:
        assert table(tmp_path, DEMO_METRICS, timing=False) == table(RECORD, DEMO_METRICS, timing=False)
