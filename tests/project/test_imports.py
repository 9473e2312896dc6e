"""The package's import graph: no circles, and the low rooms import nothing above them.

Every ``import`` and ``from ... import`` in ``src/rnnlab`` is read with ``ast``, at the top
of a module and inside functions and methods alike (an import hidden in a function still
makes a circle at run time). Imports are grouped by room: the first name below ``rnnlab``
(``rnnlab.kernels.families.gru`` is in the room ``kernels``, ``rnnlab.train`` in ``train``) and
``rnnlab`` itself for the package's ``__init__``. DESIGN.md's direction is
``kernels``, ``parametrize`` <- ``cells`` <- ``model`` <- ``train`` <- ``suite``/``cli``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rnnlab

PACKAGE = Path(rnnlab.__file__).resolve().parent

#: what each low room may import (itself always)
ALLOWED_BELOW = {
    "kernels": set(),
    "parametrize": {"kernels"},
    "cells": {"kernels", "parametrize"},
}

#: circles (sets of rooms) still on main that other changes of the same step (issue 20) are
#: removing; a circle found must be one of these exactly (a new room joining one fails too).
#: The coordinator empties this list at merge, once those changes are in.
KNOWN_CIRCLES: list[set[str]] = []


def _modules(package: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` for every module of the package at ``package``."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """The package's modules an import node names (``from .. import parametrize`` names the
    module ``rnnlab.parametrize``; ``from . import x`` names ``x`` when it is a module, else
    the package itself)."""
    root = module.split(".")[0]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == root]
    if node.level == 0:
        base = node.module or ""
        if base.split(".")[0] != root:
            return []
    else:
        parts = module.split(".")
        package = parts if is_package else parts[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in modules else base)
    return out


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def import_arrows(package: Path = PACKAGE, by_module: bool = False) -> dict[tuple[str, str], list[str]]:
    """``{(importer room, imported room): ["module:line", ...]}`` over a whole package; with
    ``by_module``, between modules (``rnnlab.cells.base``) rather than rooms."""
    modules = _modules(package)
    node_of = (lambda m: m) if by_module else _room
    arrows: dict[tuple[str, str], list[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported(node, name, path.name == "__init__.py", modules):
                a, b = node_of(name), node_of(target)
                if a != b:
                    arrows.setdefault((a, b), []).append(f"{name}:{node.lineno}")
    return arrows


def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one room (Tarjan's algorithm)."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walk_reads_every_kind_of_import(tmp_path):
    """On a small package: imports at the top, inside a function and inside a method, relative
    (``from . import``, ``from ..x import``) and absolute, a module imported by name from its
    package, and the package root; imports of other packages are not arrows."""
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .top import run\n")
    (pkg / "top.py").write_text("import os\nfrom .low import deep\n\ndef run():\n    from . import mid\n")
    (pkg / "mid.py").write_text("class A:\n    def f(self):\n        import pkg.top\n")
    (pkg / "low" / "__init__.py").write_text("")
    deep = "import torch\n\ndef g():\n    from .. import other\n    from ..mid import A\n"
    (pkg / "low" / "deep.py").write_text(deep)
    arrows = import_arrows(pkg)
    assert arrows == {
        ("pkg", "top"): ["pkg:1"],
        ("top", "low"): ["pkg.top:2"],
        ("top", "mid"): ["pkg.top:5"],
        ("mid", "top"): ["pkg.mid:3"],
        ("low", "pkg"): ["pkg.low.deep:4"],  # ``other`` is no module: the name comes from the root
        ("low", "mid"): ["pkg.low.deep:5"],
    }
    assert circles(set(arrows)) == [["low", "mid", "pkg", "top"]]


def test_the_module_walk_sees_a_circle_inside_one_room(tmp_path):
    """Two modules of one room that import each other (one of them inside a method) are no
    arrow between rooms, but a circle between modules."""
    pkg = tmp_path / "pkg"
    (pkg / "room").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "room" / "__init__.py").write_text("from .a import A\n")
    (pkg / "room" / "a.py").write_text("class A:\n    def f(self):\n        from .b import g\n")
    (pkg / "room" / "b.py").write_text("from .a import A\n\ndef g():\n    pass\n")
    assert circles(set(import_arrows(pkg))) == []
    assert circles(set(import_arrows(pkg, by_module=True))) == [["pkg.room.a", "pkg.room.b"]]


def test_circles_are_found():
    """Tarjan's components on a small graph with one circle of three rooms and a tail."""
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({("a", "b"), ("b", "c")}) == []


def test_no_import_circles():
    arrows = import_arrows()
    found = [c for c in circles(set(arrows)) if set(c) not in KNOWN_CIRCLES]
    detail = {
        tuple(c): [f"{a} -> {b} ({', '.join(arrows[(a, b)])})" for (a, b) in arrows if a in c and b in c] for c in found
    }
    assert not found, f"import circles between rooms: {detail}"


def test_no_import_circles_between_modules():
    """Inside a room too: no module imports, at the top or in a function, one that imports it
    back (``cells.base`` once reached ``cells.torch_nn`` from ``Recurrent.to_torch``)."""
    arrows = import_arrows(by_module=True)
    found = circles(set(arrows))
    detail = {
        tuple(c): [f"{a} -> {b} ({', '.join(arrows[(a, b)])})" for (a, b) in arrows if a in c and b in c] for c in found
    }
    assert not found, f"import circles between modules: {detail}"


def test_low_rooms_import_nothing_above_them():
    """kernels import no cell and nothing above; parametrize only kernels; cells only kernels
    and parametrize (never the model, the trainer, the suite, the CLI, the package root)."""
    bad = [
        f"{a} -> {b}: {', '.join(where)}"
        for (a, b), where in sorted(import_arrows().items())
        if a in ALLOWED_BELOW and b not in ALLOWED_BELOW[a]
    ]
    assert not bad, "upward imports:\n" + "\n".join(bad)


#: the rooms that may import the lab (``rnnlab.bench``): the command line only; the lab depends
#: on the library, and nothing in the library depends on it
IMPORT_THE_LAB = {"cli"}


def test_nothing_in_the_library_imports_the_lab():
    bad = [
        f"{a} -> bench: {', '.join(where)}"
        for (a, b), where in sorted(import_arrows().items())
        if b == "bench" and a not in IMPORT_THE_LAB
    ]
    assert not bad, "imports of rnnlab.bench from the library:\n" + "\n".join(bad)
    assert ("cli", "bench") in import_arrows()  # the walk sees the lab's one importer
