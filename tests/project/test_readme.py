"""The README's front page works as written: the two setup commands come first (the second is
what CI runs), the ten-line Python example runs, every CLI example parses, the commands a
newcomer types first start without importing torch, and the page stays short enough to read in
two minutes (the rest lives in docs/guide.md)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _block(after_heading: str, lang: str) -> str:
    section = README.split(after_heading, 1)[1]
    return re.search(rf"```{lang}\n(.*?)```", section, re.S).group(1)


def test_setup_commands_come_first_and_ci_runs_the_second():
    first = README.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert README.startswith("# rnnlab\n\n```bash\n")
    assert first[0].endswith(".venv/bin/rnnlab demo")
    ci = (ROOT / ".ci" / "run").read_text()
    assert first[1] in ci


#: the README's bound in characters (a front page read in two minutes; details go to docs/)
README_LIMIT = 12_000


def test_readme_is_a_short_front_page():
    assert len(README) < README_LIMIT, (
        f"README.md has {len(README):,} characters, over {README_LIMIT:,}: move details to docs/guide.md "
        f"(or another docs page) and link them"
    )
    for heading in ("## The demo", "## Python in ten lines", "## The command line in ten lines", "## Where to read on"):
        assert heading in README
    assert "<!-- ledger: records " in README and "<!-- /ledger -->" in README  # the generated summary line
    guide = (ROOT / "docs" / "guide.md").read_text()
    for moved in ("## Installing and testing", "## The demo", "## Examples", "## Many seeds at once"):
        assert moved in guide, f"docs/guide.md lost its section {moved!r} (moved there from the README)"


def test_python_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = _block("## Python in ten lines", "python")
    assert len(code.strip().splitlines()) <= 11
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["out"].shape == (8, 100, 64) and scope["h_n"].shape == (1, 8, 64)
    assert scope["result"]["steps"] == 50 and scope["model"].training is False


def test_cli_example_parses():
    from rnnlab.cli import build_parser

    lines = _block("## The command line in ten lines", "bash").strip().splitlines()
    assert len(lines) <= 10
    parser = build_parser()
    n = 0
    for line in lines:
        for cmd in line.split("#", 1)[0].split("&&"):
            argv = shlex.split(cmd)
            assert argv[0] == "rnnlab"
            if "COMMAND" in argv:
                continue
            parser.parse_args(argv[1:])
            n += 1
    assert n >= 9


LIGHT = [["--help"], ["--version"], ["list", "presets"], ["table", "docs/demo"], ["data", "list"], ["train", "--help"]]


@pytest.mark.parametrize("argv", LIGHT, ids=" ".join)
def test_light_commands_do_not_import_torch(argv):
    code = (
        "import sys\nfrom rnnlab.cli import main\n"
        f"try:\n    rc = main({argv!r})\nexcept SystemExit as e:\n    rc = e.code\n"
        "print('RC', rc, 'TORCH' if 'torch' in sys.modules else 'NO-TORCH')"
    )
    env = {**os.environ, "RNNLAB_DATA": str(ROOT / "no-such-data-dir")}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip().endswith("RC 0 NO-TORCH") or r.stdout.strip().endswith("RC None NO-TORCH"), (
        r.stdout[-500:],
        r.stderr[-2000:],
    )


def test_import_rnnlab_is_lazy_but_complete():
    code = (
        "import sys, rnnlab\nassert 'torch' not in sys.modules\n"
        "names = [n for n in rnnlab.__all__ if n != '__version__' and n[0].isupper() or n in ('unroll', 'load_run')]\n"
        "assert all(getattr(rnnlab, n) is not None for n in names)\n"
        "assert 'torch' in sys.modules and callable(rnnlab.load_run)\n"
        "from rnnlab.tasks import TASKS, CopyTask\nassert TASKS['copy'] is CopyTask\nprint('OK')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "OK", r.stderr[-2000:]
