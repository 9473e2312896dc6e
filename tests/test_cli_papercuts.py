"""Papercuts of the command line: consistent output options, short output, presets to copy,
absolute documentation links, descriptions that say what runs."""

import json
import re
from pathlib import Path

import pytest

from conftest import set_flags, walk_parsers
from rnnlab import config
from rnnlab.cli import build_parser, main

ROOT = Path(__file__).parents[1]


# ------------------------------------------------------------------ analyze: --out DIR, short output


@pytest.fixture(scope="module")
def asrnn_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("jac") / "run"
    small = [
        *set_flags("task.L=12", "task.val_size=4", "task.test_size=4", "train.eval_every=2", "train.steps=2"),
        "--quiet",
    ]
    assert main(["train", "asrnn/copy-L1000", "--out", str(run), "--set", "model.hidden_size=8"] + small) == 0
    return run


def test_both_analyses_write_into_out_dir(asrnn_run, tmp_path, capsys):
    by_command = {}
    for path, parser in walk_parsers(build_parser()):
        if path[:2] == ("rnnlab", "analyze") and len(path) == 3:
            by_command[path[2]] = {s for a in parser._actions for s in a.option_strings}
    assert set(by_command) == {"schur", "jacobian"}
    assert all("--out" in opts for opts in by_command.values())

    assert main(["analyze", "jacobian", str(asrnn_run), "--compare", "rnn"]) == 0  # default: RUN/jacobian
    digest = json.loads((asrnn_run / "jacobian" / "jacobian.json").read_text())
    assert list(digest) == ["asrnn (trained: asrnn-copy-L1000)", "rnn (at init, n=8)"]
    assert (asrnn_run / "jacobian" / "jacobian.png").stat().st_size > 1000
    assert (
        main(["analyze", "jacobian", str(asrnn_run / "checkpoint.pt"), "--which", "last", "--out", str(tmp_path / "j")])
        == 0
    )
    assert (tmp_path / "j" / "jacobian.json").exists() and (tmp_path / "j" / "jacobian.png").exists()


def test_analyze_jacobian_prints_a_summary_and_the_json_only_when_asked(asrnn_run, tmp_path, capsys):
    out = tmp_path / "j"
    assert main(["analyze", "jacobian", str(asrnn_run), "--compare", "rnn", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    digest = json.loads((out / "jacobian.json").read_text())
    lines = text.strip().splitlines()
    assert 2 <= len(lines) <= 8, text  # the digest itself is over 100 lines of JSON
    assert not text.lstrip().startswith("{")
    trained = digest["asrnn (trained: asrnn-copy-L1000)"]
    first = lines[0]
    assert first.startswith("asrnn (trained: asrnn-copy-L1000), T=32")
    lag1 = trained["lags"]["1"]
    assert f"1: {lag1['log10_sigma_max']:.3g} / {lag1['log10_sigma_min']:.3g}" in first
    checks = trained["theorem21"]
    held = [str(c["t"]) for c in checks.values() if c["W_hh_condition_holds"]]
    theorem = [ln for ln in lines if ln.strip().startswith("Theorem 2.1 at t = ")]
    assert len(theorem) == 1 and f"the W_hh condition holds at {', '.join(held) or 'none'}" in theorem[0]

    assert main(["analyze", "jacobian", str(asrnn_run), "--compare", "rnn", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == digest
    assert (
        main(
            [
                "analyze",
                "jacobian",
                str(asrnn_run),
                "--compare",
                "rnn",
                "--out",
                str(out),
                "--json",
                str(tmp_path / "d.json"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "d.json").read_text()) == digest
    assert not capsys.readouterr().out.lstrip().startswith("{")


def test_old_output_spellings_still_work_with_a_note(asrnn_run, tmp_path, capsys):
    png = tmp_path / "fig.png"
    assert main(["analyze", "jacobian", str(asrnn_run), "-o", str(png)]) == 0
    err = capsys.readouterr().err
    assert png.stat().st_size > 1000 and "deprecated" in err and "--out DIR" in err and "0.4.0" in err
    assert main(["analyze", "jacobian", str(asrnn_run), "-o", str(png), "--out", str(tmp_path / "d")]) == 2
    assert "not both" in capsys.readouterr().err

    assert main(["export", str(asrnn_run), "--csv", "-o", str(tmp_path / "m.csv")]) == 0
    err = capsys.readouterr().err
    assert "--csv" in err and "ignored" in err and "0.4.0" in err
    assert main(["export", str(asrnn_run), "-o", str(tmp_path / "n.csv")]) == 0
    assert capsys.readouterr().err == ""
    assert (tmp_path / "m.csv").read_text() == (tmp_path / "n.csv").read_text()
    assert (tmp_path / "m.csv").read_text().splitlines()[0].startswith("step,")


# ------------------------------------------------------------------ presets to print and copy


def test_preset_show_prints_the_shipped_file(capsys):
    assert main(["preset", "show", "asrnn/copy-L1000"]) == 0
    shipped = ROOT / "src" / "rnnlab" / "configs" / "asrnn" / "copy-L1000.toml"
    assert capsys.readouterr().out == shipped.read_text()
    assert main(["preset", "show", "asrnn/cpy-L1000"]) == 2
    assert "asrnn/copy-L1000" in capsys.readouterr().err  # did you mean


def test_preset_copy_makes_a_trainable_file_and_never_overwrites(tmp_path, capsys):
    dest = tmp_path / "mine.toml"
    assert main(["preset", "copy", "demo/asrnn", str(dest)]) == 0
    assert "rnnlab train" in capsys.readouterr().out
    assert config.load(str(dest)).to_dict() == config.load("demo/asrnn").to_dict()
    dest.write_text(dest.read_text().replace("demo-asrnn", "my-asrnn"))
    edited = dest.read_bytes()
    assert main(["preset", "copy", "demo/lstm", str(dest)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert dest.read_bytes() == edited
    assert main(["preset", "copy", "demo/lstm", str(tmp_path)]) == 0  # into a directory: the preset's file name
    assert (tmp_path / "lstm.toml").read_text() == config.preset_path("demo/lstm").read_text()


# ------------------------------------------------------------------ documentation links


def test_help_points_at_docs_by_absolute_url_with_one_base(capsys):
    from rnnlab.cli import DOCS_URL

    pages = set()
    for path, parser in walk_parsers(build_parser()):
        text = parser.format_help()
        for m in re.finditer(r"(\S*)docs/([\w./-]+\.md)", text):
            assert m.group(0).startswith(DOCS_URL), f"{' '.join(path)}: relative docs link {m.group(0)!r}"
            pages.add(m.group(2))
    assert len(pages) >= 8
    missing = sorted(p for p in pages if not (ROOT / "docs" / p).exists())
    assert not missing, f"--help links pages that docs/ lacks: {missing}"
    # the base URL lives in one place
    base = DOCS_URL.split("/blob/")[0]
    holders = [p for p in (ROOT / "src" / "rnnlab").rglob("*.py") if base in p.read_text()]
    assert [p.name for p in holders] == ["common.py"] and (ROOT / "src/rnnlab/cli/common.py").read_text().count(
        base
    ) == 1


def test_docs_url_is_the_repository_that_pyproject_names():
    from rnnlab.cli import DOCS_URL

    meta = config.tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    urls = {k.lower(): v for k, v in meta.get("urls", {}).items()}
    repo = next((urls[k] for k in ("repository", "source", "source code", "homepage") if k in urls), None)
    if repo is None:  # no repository named: the default address
        assert DOCS_URL == "https://github.com/rnnlab/rnnlab/blob/main/docs/"
    else:
        assert DOCS_URL == repo.rstrip("/") + "/blob/main/docs/"


# ------------------------------------------------------------------ descriptions that say what runs

NAMES = {
    "lstm": "LSTM",
    "gru": "GRU",
    "rnn": "RNN",
    "exprnn": "expRNN",
    "asrnn": "asRNN",
    "nnrnn": "nnRNN",
    "dmu": "DMU",
    "ltrnn": "LT-RNN",
}
COUNTS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def test_the_demo_suite_says_which_models_it_runs():
    from rnnlab.model import build_model
    from rnnlab.suite import load_suite
    from rnnlab.train import build_task

    suite = load_suite("demo")
    text = suite.description
    for preset in suite.presets:
        cfg = config.load(preset)
        assert re.search(rf"\b{re.escape(NAMES[cfg.model.cell])}\b", text), (preset, text)
        free = build_model(cfg.model, build_task(cfg.task)).parameter_counts()["free"]
        assert 6500 <= free <= 7500, (preset, free)  # "about 7K free parameters each"
    assert COUNTS[len(suite.presets)] in text.lower()
    for cell, name in NAMES.items():  # and no model it does not run
        if cell not in {config.load(p).model.cell for p in suite.presets}:
            assert not re.search(rf"\b{re.escape(name)}\b", text), name


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "{tmp}/nope.toml"],
        ["table", "{tmp}/nope"],
        ["plot", "{tmp}/nope", "-o", "{tmp}/x.png"],
        ["evaluate", "{tmp}/nope"],
        ["export", "{tmp}/nope"],
        ["analyze", "jacobian", "{tmp}/nope"],
        ["thresholds", "{tmp}/nope"],
        ["reproduce", "ledger", "{tmp}/nope"],
        ["reproduce", "collect", "{tmp}/nope", "-o", "{tmp}/out"],
        ["data", "verify", "nope"],
        ["data", "download", "nope"],
    ],
)
def test_a_name_or_path_that_does_not_exist_is_a_usage_error_everywhere(tmp_path, capsys, argv):
    """The same kind of error gets the same exit code: a preset, runs folder, run directory or
    dataset named on the command line that does not exist is a usage error (exit 2), with one
    line naming what was given; nothing is created."""
    from rnnlab.cli import main

    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
