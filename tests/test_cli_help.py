"""The CLI's first impression: suggestions by edit distance for misspelt names."""

import json

import pytest

from conftest import walk_parsers
from rnnlab import config
from rnnlab.cli import main


@pytest.mark.parametrize(
    "override, wanted",
    [
        ('model.cell="asrn"', "Did you mean 'asrnn'"),
        ('model.cell="lstn"', "Did you mean 'lstm'"),
        ('task.name="coppy"', "Did you mean 'copy'"),
        ("train.stpes=3", "Did you mean 'steps'"),
        ("task.LL=3", "Did you mean 'L'"),
    ],
)
def test_misspelt_names_get_suggestions(override, wanted):
    with pytest.raises(config.ConfigError, match=wanted):
        config.load("demo/lstm", [override])


def test_misspelt_preset_and_metric(tmp_path, capsys):
    with pytest.raises(config.ConfigError, match="asrnn/copy-L1000"):
        config.load("asrnn/cpy-L1000")  # not a substring of any preset name; close by edits
    assert main(["train", "demo/lstn", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "demo/lstm" in err
    run = tmp_path / "r"
    run.mkdir()
    (run / "result.json").write_text(
        json.dumps(
            {"name": "a", "cell": "lstm", "task": "copy", "final": {"val/loss": 1.0}, "test": {"test/loss": 1.0}}
        )
    )
    assert main(["table", str(tmp_path), "--metrics", "test/los"]) == 2
    assert "Did you mean 'test/loss'" in capsys.readouterr().err
    assert main(["table", str(tmp_path), "--metrics", "test/loss"]) == 0


def test_no_suggestion_for_a_far_name():
    assert config.did_you_mean("zzzz", ["asrnn", "lstm"]) == ""


def test_every_command_and_argument_has_help_with_an_example():
    import argparse

    from rnnlab.cli import build_parser

    seen = 0
    for path, parser in walk_parsers(build_parser()):
        assert parser.epilog and "rnnlab" in parser.epilog, f"{' '.join(path)}: no example"
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            seen += 1
            where = f"{' '.join(path)} {action.dest}"
            assert action.help and "e.g." in action.help, f"{where}: help without an example"
            shown = parser._get_formatter()._get_help_string(action)
            if action.default not in (None, False, [], argparse.SUPPRESS) and action.option_strings:
                assert "default" in shown, f"{where}: default {action.default!r} not shown"
    assert seen > 60
