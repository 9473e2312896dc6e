"""rnnlab speaks through ``logging``: one logger per module under ``rnnlab``; the command line
shows the log on stderr (progress and notes; ``-q`` notes only, ``-qq`` errors only) and leaves
the logger as it found it; ``print`` is left to the commands' own output."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

from rnnlab.cli import main

SRC = Path(__file__).resolve().parents[1] / "src" / "rnnlab"
#: functions outside rnnlab.cli that write a command's own output (the entry points of the commands)
#: besides those named main*: the benchmark records' publishing step
COMMAND_OUTPUT = {("benchrecord.py", "publish"), ("benchrecord.py", "exit_code")}


def _prints_outside_commands() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "cli":  # the command line's own package
            continue
        stack: list[str] = []

        class Visit(ast.NodeVisitor):
            def visit_FunctionDef(self, node):
                stack.append(node.name)
                self.generic_visit(node)
                stack.pop()

            visit_AsyncFunctionDef = visit_FunctionDef

            def visit_Call(self, node):
                if isinstance(node.func, ast.Name) and node.func.id == "print":
                    outer = stack[0] if stack else "<module>"
                    if not outer.startswith("main") and (path.name, outer) not in COMMAND_OUTPUT:
                        found.append(f"{path.relative_to(SRC)}:{node.lineno} in {outer}")
                self.generic_visit(node)

        Visit().visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_the_library_prints_only_in_the_commands_entry_points():
    assert _prints_outside_commands() == []


def _train(tmp_path, name, *flags):
    argv = [*flags, "train", "demo/lstm", "--set", "train.steps=4", "--set", "train.eval_every=2"]
    return main([*argv, "--set", "optim.group_lr.nope=1e-3", "--out", str(tmp_path / name)])


def test_the_command_line_shows_progress_and_notes_and_minus_q_hides_them(tmp_path, capsys):
    # the note: a parameter group named in [optim] that the model does not have
    assert _train(tmp_path, "a") == 0
    err = capsys.readouterr().err
    assert "note: parameter group(s) ['nope']" in err and "demo-lstm step 4/4" in err
    assert _train(tmp_path, "b", "-q") == 0
    err = capsys.readouterr().err
    assert "note: parameter group(s) ['nope']" in err and "step 4/4" not in err
    assert _train(tmp_path, "c", "-qq") == 0
    assert "nope" not in capsys.readouterr().err


def test_a_library_note_is_a_warning_record_and_the_cli_leaves_the_logger_as_it_was(tmp_path, caplog):
    logger = logging.getLogger("rnnlab")
    before = (logger.level, logger.propagate, list(logger.handlers))
    with caplog.at_level(logging.WARNING, logger="rnnlab"):
        from rnnlab import config, train

        cfg = config.load("demo/lstm", ["train.steps=2", "train.eval_every=2", "optim.group_lr.nope=1e-3"])
        train.train(cfg, tmp_path / "py", progress=False)
    notes = [r for r in caplog.records if "parameter group(s) ['nope']" in r.getMessage()]
    assert notes and notes[0].name == "rnnlab.train" and notes[0].levelno == logging.WARNING
    assert _train(tmp_path, "d") == 0
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


def test_minus_qq_leaves_stderr_empty_and_minus_q_shows_no_progress_line(tmp_path, capsys):
    """`-qq` (errors only) still printed "run NAME -> DIR", an ensemble's first line, a suite's
    progress and "wrote ..." on stderr; -q (notes only) printed them too."""
    small = ["--set", "train.steps=2", "--set", "train.eval_every=2", "--set", "task.L=4"]
    small += ["--set", "task.val_size=16", "--set", "task.test_size=16", "--set", "model.hidden_size=6"]
    suite = tmp_path / "s.toml"
    suite.write_text('name = "s"\npresets = ["demo/lstm"]\nseeds = [0]\n')
    commands = {
        "train": ["train", "demo/lstm", *small],
        "ensemble": ["train", "demo/lstm", *small, "--seeds", "0,1", "--ensemble"],
        "suite": ["suite", str(suite), *small],
    }
    progress = ("run demo-lstm ->", "ensemble demo-lstm x2", "wrote ", "suite s:")
    for flag in ("-q", "-qq"):
        for name, argv in commands.items():
            where = ["--runs-dir", str(tmp_path / f"runs{flag}{name}")]
            assert main([flag, *argv, *where]) == 0, name
            err = capsys.readouterr().err
            if flag == "-qq":
                assert err == "", (flag, name, err)
            assert not any(p in err for p in progress), (flag, name, err)
    assert main(commands["train"] + ["--runs-dir", str(tmp_path / "runs")]) == 0  # by default: shown
    assert "run demo-lstm ->" in capsys.readouterr().err
