"""Every public layer and cell, and the train / load_run entry points, carry a short runnable
example (``>>>``) in their docstring, and every example runs as written (issue 20)."""

from __future__ import annotations

import doctest
import sys

import pytest
import torch

import rnnlab
from rnnlab import cells, rundir, train
from rnnlab.cells import CELLS


def _public_objects():
    objs = {f"cells.{c.__name__}": c for c in CELLS.values()}
    objs.update(
        {
            f"cells.{n}": getattr(cells, n)
            for n in dir(cells)
            if isinstance(getattr(cells, n), type) and issubclass(getattr(cells, n), cells.Recurrent)
        }
    )
    objs.update({"train.train": train.train, "rundir.load_run": rundir.load_run, "from_torch": rnnlab.from_torch})
    return objs


OBJECTS = _public_objects()


def test_the_list_covers_every_registered_cell_and_its_layer():
    assert len(OBJECTS) >= 2 * len(CELLS)


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_docstring_example_runs(name, tmp_path, monkeypatch):
    obj = OBJECTS[name]
    assert ">>>" in (obj.__doc__ or ""), f"{name} has no runnable example in its docstring"
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    torch.manual_seed(0)
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(obj, name, globs=dict(vars(sys.modules[obj.__module__])))  # as doctest: the module's names
    assert tests and tests[0].examples
    for t in tests:
        runner.run(t, out=lambda s: pytest.fail(s))
    assert runner.failures == 0


def test_a_wrong_example_fails(tmp_path):
    """The runner is live: an example whose output is wrong is reported."""

    def f():
        """
        >>> 1 + 1
        3
        """

    runner = doctest.DocTestRunner()
    for t in doctest.DocTestFinder().find(f, "f", globs={}):
        runner.run(t, out=lambda s: None)
    assert runner.failures == 1
