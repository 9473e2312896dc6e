"""A suite's [analyze] table: each finished run of the named preset gets its analysis record
(analysis.json), equal to what `rnnlab analyze` computes on the same checkpoint, read by the
ledger and copied by `reproduce collect`; a record made since the run's result is kept."""

import json

import pytest

from rnnlab.cli import main
from rnnlab.config import ConfigError
from rnnlab.ledger import records
from rnnlab.ledger.document import collect
from rnnlab.suite import load_suite

SMALL = ["train.steps=4", "train.eval_every=2", "task.val_size=16", "task.test_size=16"]


def _suite(tmp_path, analyze: str) -> str:
    p = tmp_path / "tiny.toml"
    p.write_text(
        'name = "tiny"\npresets = ["demo/asrnn", "demo/nnrnn"]\nseeds = [0]\n'
        f'set = {json.dumps(SMALL)}\nmetrics = ["test/loss"]\n\n[analyze]\n{analyze}\n'
    )
    return str(p)


def test_a_suite_records_its_analyses_as_rnnlab_analyze_computes_them(tmp_path, capsys):
    suite = _suite(tmp_path, '"demo/asrnn" = "jacobian"\n"demo/nnrnn" = "schur"')
    runs = tmp_path / "runs"
    assert main(["suite", suite, "--runs-dir", str(runs)]) == 0
    assert capsys.readouterr().err.count("[analysed]") == 2
    a_run, n_run = runs / "tiny" / "demo-asrnn" / "seed0", runs / "tiny" / "demo-nnrnn" / "seed0"
    a, n = (json.loads((d / "analysis.json").read_text()) for d in (a_run, n_run))
    best = json.loads((a_run / "result.json").read_text())["best"]["step"]
    assert a["preset"] == "demo/asrnn" and a["seeds"] == [0] and a["steps"] == best
    assert "rnnlab suite tiny" in a["command"] and a["eps"] > 0
    assert (a_run / "jacobian" / "jacobian.png").exists() and (n_run / "schur" / "schur_0.png").exists()
    # the same checkpoint through the command line, into another directory
    assert main(["analyze", "jacobian", str(a_run), "--which", "best", "--out", str(tmp_path / "j")]) == 0
    ((_, digest),) = json.loads((tmp_path / "j" / "jacobian.json").read_text()).items()
    assert a["values"] == {"lags": digest["lags"], "theorem21": digest["theorem21"]}
    assert main(["analyze", "schur", str(n_run), "--which", "best", "--out", str(tmp_path / "s")]) == 0
    (summary,) = json.loads((tmp_path / "s" / "schur.json").read_text())
    assert n["values"] == {k: v for k, v in summary.items() if k not in ("name", "figure")}
    # the ledger reads them, collect copies them
    _, analyses, _ = records.load_records([runs])
    assert sorted(x.preset for x in analyses) == ["demo/asrnn", "demo/nnrnn"]
    copied = collect(runs / "tiny", tmp_path / "records")
    assert all((d / "analysis.json").exists() for d in copied) and len(copied) == 2
    # a second call finds every run done and every record current: nothing is analysed again
    before = (a_run / "analysis.json").stat().st_mtime_ns
    assert main(["suite", suite, "--runs-dir", str(runs)]) == 0
    assert "[analysed]" not in capsys.readouterr().err
    assert (a_run / "analysis.json").stat().st_mtime_ns == before


@pytest.mark.parametrize(
    "analyze, words",
    [('"demo/lstm" = "schur"', "not among the suite's presets"), ('"demo/asrnn" = "spectra"', "expected one of")],
)
def test_a_bad_analyze_table_is_refused_before_anything_runs(tmp_path, analyze, words):
    with pytest.raises(ConfigError, match=words):
        load_suite(_suite(tmp_path, analyze))
