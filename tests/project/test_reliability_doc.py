"""RELIABILITY.md stays current: every test it names exists, and the README links it."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_every_test_named_in_reliability_md_exists():
    text = (ROOT / "RELIABILITY.md").read_text()
    files = set(re.findall(r"tests/([\w/]+\.py)", text))
    assert files, "RELIABILITY.md names no test file"
    for f in files:
        assert (ROOT / "tests" / f).exists(), f"RELIABILITY.md names tests/{f}, which does not exist"
    defined = set()
    for f in (ROOT / "tests").rglob("test_*.py"):
        defined |= set(re.findall(r"^def (test_\w+)", f.read_text(), re.M))
    named = set(re.findall(r"::(test_\w+)", text))
    assert named
    missing = sorted(n for n in named if n not in defined)
    assert not missing, f"RELIABILITY.md names tests that do not exist: {missing}"


def test_readme_links_reliability_md():
    assert "RELIABILITY.md)" in (ROOT / "README.md").read_text()  # an absolute link (README is the wheel's description)
