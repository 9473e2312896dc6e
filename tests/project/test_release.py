"""One version everywhere (rnnlab.__version__, pyproject, CHANGELOG, --version) and the API
reference builds from the docstrings."""

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rnnlab

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def _version_from_source() -> str:
    # read statically, as setuptools' attr: does, so a packaging change cannot hide behind an import
    m = re.search(r'^__version__ = "([^"]+)"$', (SRC / "rnnlab" / "__init__.py").read_text(), re.M)
    return m.group(1)


def test_single_source_version():
    import rnnlab

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rnnlab.__version__"}
    assert rnnlab.__version__ == _version_from_source()
    first = re.search(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M).group(1)
    assert first == rnnlab.__version__, "CHANGELOG.md's newest entry must be the current version"


def test_cli_version(capsys):
    from rnnlab import __version__
    from rnnlab.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"rnnlab {__version__}"


def test_api_reference_builds(tmp_path):
    pytest.importorskip("pdoc", reason="pdoc (extra 'docs') is not installed")
    # the same command as `make api-docs`, in a subprocess: pdoc imports every module (named:
    # pdoc walks only rnnlab.__all__, the library's names)
    modules = [f"rnnlab.{m.name}" for m in pkgutil.iter_modules(rnnlab.__path__) if m.name[0] != "_"]
    r = subprocess.run(
        [sys.executable, "-m", "pdoc", "-o", str(tmp_path), "rnnlab", *modules],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    page = (tmp_path / "rnnlab" / "train.html").read_text()
    assert "load_run" in page and "weights_only=True" in page  # a docstring made it through
    for mod in ("cells", "tasks", "parametrize", "results", "bench/docsync"):
        assert (tmp_path / "rnnlab" / f"{mod}.html").exists()


def test_the_package_is_marked_typed():
    """PEP 561: a py.typed marker in the package, shipped as package data (the wheel test checks
    it is installed), so type checkers read rnnlab's annotations."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert (SRC / "rnnlab" / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["rnnlab"]
