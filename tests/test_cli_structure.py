"""The command line's shape: one small parser function per command, shared options defined
once, and parsed arguments handed on as keywords (the Namespace never leaves rnnlab.cli)."""

import argparse
import ast
from pathlib import Path

from rnnlab import cli

#: every module of the command-line package, read as one
TREE = ast.Module(
    body=[node for path in sorted(Path(cli.__file__).parent.glob("*.py")) for node in ast.parse(path.read_text()).body],
    type_ignores=[],
)
FUNCTIONS = [n for n in ast.walk(TREE) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _length_without_docstring(fn) -> int:
    body = fn.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(getattr(body[0], "value", None), ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        doc = body[0].end_lineno - body[0].lineno + 1
    else:
        doc = 0
    return fn.end_lineno - fn.lineno + 1 - doc


def test_no_function_is_longer_than_80_lines():
    long = {fn.name: _length_without_docstring(fn) for fn in FUNCTIONS if _length_without_docstring(fn) > 80}
    assert not long, long
    assert len(FUNCTIONS) > 40  # the scan sees the module's functions


def test_one_parser_function_per_command():
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert [f.__name__ for f in cli.COMMANDS] == [f"_parser_{name.replace('-', '_')}" for name in sub.choices]
    for name, p in sub.choices.items():  # and each leaf runs its own handler
        leaves = [p]
        while leaves:
            q = leaves.pop()
            subs = [a for a in q._actions if isinstance(a, argparse._SubParsersAction)]
            if subs:
                leaves += list(subs[0].choices.values())
            else:
                assert q.get_default("func").__name__.startswith(f"cmd_{name.replace('-', '_')}"), (name, q.prog)


SHARED = [
    "--runs-dir",
    "--data-dir",
    "--device",
    "--precision",
    "--set",
    "--seeds",
    "--quiet",
    "--which",
    "--backend",
    "--address",
]


def test_shared_options_are_defined_once():
    defined: dict[str, int] = {}
    for node in ast.walk(TREE):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    defined[arg.value] = defined.get(arg.value, 0) + 1
    assert {opt: defined.get(opt, 0) for opt in SHARED} == {opt: 1 for opt in SHARED}
    # ... and used by more than one command each (else it is not shared)
    used: dict[str, int] = {}

    def walk(p):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for q in a.choices.values():
                    yield from walk(q)
            else:
                yield from a.option_strings

    for opt in walk(cli.build_parser()):
        used[opt] = used.get(opt, 0) + 1
    assert all(used.get(opt, 0) >= 1 for opt in SHARED)
    assert sum(used[opt] >= 2 for opt in SHARED) >= 8


def test_the_parsed_arguments_never_leave_the_module():
    """A handler may pass ``args`` to rnnlab.cli's own helpers only; the library gets keywords."""
    own = {fn.name for fn in FUNCTIONS}
    leaks = []
    for fn in FUNCTIONS:
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            passed = list(call.args) + [k.value for k in call.keywords]
            if any(isinstance(a, ast.Name) and a.id == "args" for a in passed) or any(
                isinstance(a, ast.Starred) and getattr(a.value, "id", None) == "args" for a in call.args
            ):
                callee = call.func.id if isinstance(call.func, ast.Name) else ast.unparse(call.func)
                if callee not in own | {"getattr", "hasattr", "args.func"}:
                    leaks.append(f"{fn.name}: {ast.unparse(call)}")
    assert not leaks, leaks
