"""The linter's rules and the formatter (``[tool.ruff]`` in pyproject.toml) hold over the whole
repository: the README's test command (and so CI) fails on a lint error or an unformatted file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["src", "tests", "benchmarks", "tools", "examples"]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        pytest.fail("ruff is not installed: it is in the [test] extra (pip install -e '.[test]')")
    return [exe]


def test_ruff_check_passes():
    r = subprocess.run([*_ruff(), "check", "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_finds_a_planted_error(tmp_path):
    """The check is live: the same configuration flags an unused import in a file under src/."""
    bad = tmp_path / "src" / "m.py"
    bad.parent.mkdir()
    bad.write_text("import os\n")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    r = subprocess.run([*_ruff(), "check", "--no-cache", "src"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and "F401" in r.stdout


def test_ruff_format_leaves_every_file_as_it_is():
    r = subprocess.run([*_ruff(), "format", "--check", "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, "run `ruff format src tests benchmarks tools`:\n" + r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_format_finds_a_planted_layout(tmp_path):
    """The format check is live: a file the formatter would change fails it."""
    bad = tmp_path / "src" / "m.py"
    bad.parent.mkdir()
    bad.write_text("x = {  'a':1 }\n")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    r = subprocess.run(
        [*_ruff(), "format", "--check", "--no-cache", "src"], cwd=tmp_path, capture_output=True, text=True
    )
    assert r.returncode == 1 and "m.py" in r.stdout
