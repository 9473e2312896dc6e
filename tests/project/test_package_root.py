"""The package root: ``__all__`` lists the library's names; modules that moved keep their old
names for one release: the same module object, with a DeprecationWarning naming the new place
(``rnnlab._MOVED``), and no file left at the root."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import rnnlab

PACKAGE = Path(rnnlab.__file__).parent


@pytest.mark.parametrize("old", sorted(rnnlab._MOVED))
def test_an_old_attribute_name_warns_and_gives_the_moved_module(old, monkeypatch):
    new = rnnlab._MOVED[old]
    monkeypatch.delitem(rnnlab.__dict__, old, raising=False)  # a cached earlier lookup
    with pytest.warns(DeprecationWarning, match=f"rnnlab.{old} moved to {new}"):
        module = getattr(rnnlab, old)
    assert module is importlib.import_module(new)
    assert not (PACKAGE / f"{old}.py").exists()


def test_an_old_dotted_import_warns_and_gives_the_same_module(monkeypatch):
    monkeypatch.delitem(sys.modules, "rnnlab.speed", raising=False)
    monkeypatch.delitem(rnnlab.__dict__, "speed", raising=False)
    with pytest.warns(DeprecationWarning, match="rnnlab.speed moved to rnnlab.bench.speed"):
        old = importlib.import_module("rnnlab.speed")
    assert old is importlib.import_module("rnnlab.bench.speed")
    assert importlib.util.find_spec("rnnlab.no_such_module") is None  # the finder claims only moved names


def test_python_dash_m_of_an_old_name_runs_the_new_module():
    src = str(PACKAGE.parent)
    p = subprocess.run(
        [sys.executable, "-m", "rnnlab.docsync", "--help"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": src, "PATH": ""},
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "usage: python -m rnnlab.bench.docsync" in p.stdout
    assert "DeprecationWarning: python -m rnnlab.docsync is now python -m rnnlab.bench.docsync" in p.stderr


def test_all_lists_the_library_names_and_each_resolves_to_its_home():
    """``__all__`` holds names of the library (no module); each is the object its module
    defines, and the modules stay reachable as attributes."""
    modules = set(rnnlab._submodules())
    assert not modules & set(rnnlab.__all__), modules & set(rnnlab.__all__)
    for name, home in rnnlab._HOME.items():
        assert getattr(rnnlab, name) is getattr(importlib.import_module(f"rnnlab.{home}"), name), name
    for name in rnnlab._CELLS:
        assert getattr(rnnlab, name) is getattr(importlib.import_module("rnnlab.cells"), name), name
    assert rnnlab.train is importlib.import_module("rnnlab.train") and "bench" in dir(rnnlab)
