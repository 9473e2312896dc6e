"""Functions stay readable: none longer than 80 lines, its docstring excluded (issue 20).

Checked over the whole package. And the repository speaks of itself alone: no path of the
machine it was written on in code or docs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rnnlab

PACKAGE = Path(rnnlab.__file__).resolve().parent
MAX_LINES = 80


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the last one."""
    body = node.body
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]
    return 0 if not body else body[-1].end_lineno - body[0].lineno + 1


def long_functions(paths, limit: int = MAX_LINES) -> list[str]:
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body_lines(node) > limit:
                out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({body_lines(node)} lines)")
    return out


def test_body_lines_counts_without_the_docstring(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        'def f():\n    """doc\n    more"""\n    a = 1\n\n    return a\n\n\ndef g():\n    """only a docstring"""\n'
    )
    nodes = [n for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.FunctionDef)]
    assert [body_lines(n) for n in nodes] == [3, 0]


def test_no_function_longer_than_80_lines():
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 40
    assert not long_functions(paths), long_functions(paths)


REPO = PACKAGE.parents[1]
#: paths of the machine rnnlab was developed on, which a user's checkout does not have
MACHINE_PATHS = ("/work/", "../shared/", "/root/")


def test_no_machine_paths_in_code_or_docs():
    import subprocess

    if not (REPO / ".git").exists():
        import pytest

        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for name in files:
        path = REPO / name
        if path.suffix not in (".py", ".md", ".toml", ".sh", ".cff", ".txt", "") or not path.is_file():
            continue
        if name == "tests/project/test_source_shape.py" or name.startswith(".ci/"):  # CI knows its own host
            continue
        text = path.read_text(errors="replace")
        hits += [f"{name}: {p}" for p in MACHINE_PATHS if p in text]
    assert not hits, hits
