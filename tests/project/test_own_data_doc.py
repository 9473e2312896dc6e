"""docs/own-data.md works as written: its five commands run end to end (fast with fewer steps;
in full, slow, where asRNN and nnRNN end below the memoryless baseline), its table is the
committed record docs/own-data/, and its Python examples run."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from rnnlab.bench.docsync import blocks, render

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "own-data.md"
_spec = importlib.util.spec_from_file_location("own_data", ROOT / "tools" / "own_data.py")
own_data = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(own_data)


def _results(workdir: Path) -> dict[str, dict]:
    return {
        json.loads(p.read_text())["cell"]: json.loads(p.read_text()) for p in (workdir / "runs").rglob("result.json")
    }


def test_five_commands():
    script = own_data.commands()
    # a command starts a line outside a heredoc: python -, cat >, and three rnnlab calls
    starts = []
    inside = None
    for ln in script.splitlines():
        if inside:
            inside = None if ln == inside else inside
            continue
        if ln.strip():
            starts.append(ln)
            m = re.search(r"<<'(\w+)'", ln)
            inside = m.group(1) if m else None
    assert len(starts) == 5, starts


def test_the_commands_run_end_to_end(tmp_path):
    r = own_data.run(tmp_path, steps=20)
    assert r.returncode == 0, r.stderr[-3000:]
    results = _results(tmp_path)
    assert set(results) == {"asrnn", "nnrnn"} and all(res["steps"] == 20 for res in results.values())
    assert "| series [model.cell=asrnn] | asrnn |" in r.stdout and "| series [model.cell=nnrnn] | nnrnn |" in r.stdout
    assert (tmp_path / "series.npz").exists()


@pytest.mark.slow
def test_the_commands_as_written_beat_the_memoryless_baseline(tmp_path):
    r = own_data.run(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    for cell, res in _results(tmp_path).items():
        assert res["steps"] == 400
        assert res["test"]["test/loss"] < 0.5 * res["baseline"]["loss"], cell


def test_table_is_the_committed_record():
    found = blocks(DOC)
    assert [args for args, _ in found] == ["own-data test/loss notiming"]
    for args, body in found:
        assert body == render(args, DOC.parent), "stale: python -m rnnlab.bench.docsync docs/own-data.md"
    configs = {json.loads(p.read_text())["model"]["cell"] for p in (DOC.parent / "own-data").rglob("config.json")}
    assert configs == {"asrnn", "nnrnn"}


@pytest.mark.parametrize("heading", ["## From Python", "## Your own training loop"])
def test_python_examples_run(heading, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = re.search(r"```python\n(.*?)```", DOC.read_text().split(heading, 1)[1], re.S).group(1)
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)
    if heading == "## From Python":
        assert scope["result"]["steps"] == 50 and (tmp_path / "mine.npz").exists()
    else:
        assert scope["info"]["grad_norm"] is not None and sorted(scope["stepper"].groups) == [
            "default",
            "nonnormal",
            "orthogonal",
        ]
