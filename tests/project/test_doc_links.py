"""Every relative link in the Markdown files (docs/, the top-level pages) points at a file that
exists, relative to the page it is on, as GitHub and any Markdown viewer resolve it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _pages():
    return sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("benchmarks/*.md")])


def _broken(page: Path) -> list[str]:
    """The relative links of ``page`` whose target does not exist."""
    return [
        link
        for link in LINK.findall(page.read_text(encoding="utf-8"))
        if not re.match(r"[a-z]+:", link) and not (page.parent / link).exists()  # skip https:, mailto:
    ]


def test_relative_links_resolve():
    assert len(_pages()) > 10
    broken = [f"{p.relative_to(ROOT)} -> {link}" for p in _pages() for link in _broken(p)]
    assert broken == []


def test_the_check_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x")
    page.write_text("[ok](there.md) [web](https://example.org/x.md) [bad](docs/there.md#part)")
    assert _broken(page) == ["docs/there.md"]
