"""benchmarks/gpu_check.sh, the prepared GPU run: its arguments, its report file and its
exit code, through the dry run (the CPU-side checks) that any machine can do."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _run(*args, timeout=900):
    return subprocess.run(
        ["bash", str(SCRIPT), "--python", sys.executable, *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_help_and_bad_arguments():
    r = _run("--help")
    assert r.returncode == 0 and "--dry-run" in r.stdout and "under 8 minutes" in r.stdout
    for args, needle in (
        (["--bogus"], "unknown argument '--bogus'"),
        (["--only", "tests,speedy"], "unknown step 'speedy'"),
        (["--out"], "--out needs a file name"),
    ):
        r = _run(*args)
        assert r.returncode == 2 and needle in r.stderr and "usage:" in r.stderr, (args, r.stderr)
    r = subprocess.run(
        ["bash", str(SCRIPT), "--python", "/nonexistent/python"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "cannot import rnnlab and torch" in r.stderr


def test_dry_run_of_the_speed_step_writes_the_report(tmp_path):
    out = tmp_path / "sub" / "gpu-check.md"
    r = _run("--dry-run", "--only", "speed", "--out", out, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    text = out.read_text()
    assert text == r.stdout  # what it prints is what it writes
    assert text.startswith("# GPU check (") and "mode: dry run (--dry-run)" in text
    assert "## speed command (arguments only; nothing timed)" in text
    assert (
        f"parsed: bench speed device cuda configs ['copy', 'mnist'] cells ['asrnn', 'exprnn', 'lstm'] "
        f"quick True allow_load True json {out.parent / 'speed-cuda.json'}"
    ) in text
    assert text.rstrip().endswith(f"All 1 step(s) passed; written to {out}.")


def test_a_failing_step_is_reported_and_the_rest_still_runs(tmp_path):
    """The interpreter named by --python fails pytest (exit 3): the tests step is marked, the
    speed step still runs, the script exits 1."""
    fake = tmp_path / "python"
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then echo "3 failed"; exit 3; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "report.md"
    r = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--only", "tests,speed", "--python", str(fake), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    text = out.read_text()
    assert r.returncode == 1, text
    assert "3 failed" in text and "**CPU-side tests (Triton interpreter, doctor): exit 3**" in text
    assert "speed command (arguments only; nothing timed): passed" in text
    assert text.rstrip().endswith(f"Failed: CPU-side tests (Triton interpreter, doctor) (exit 3); written to {out}.")


@pytest.mark.slow
def test_full_dry_run(tmp_path):
    """Every CPU-side step: the interpreter and doctor tests, the doctor on the CPU, the speed
    command's arguments; all pass."""
    out = tmp_path / "gpu-check.md"
    r = _run("--dry-run", "--out", out, timeout=1800)
    text = out.read_text()
    assert r.returncode == 0, text[-4000:]
    for step in (
        "CPU-side tests (Triton interpreter, doctor): passed",
        "rnnlab doctor --device cpu --quick: passed",
        "speed command (arguments only; nothing timed): passed",
    ):
        assert step in text
    assert "0 mismatched" in text and "| triton H=20 tanh forward | float32 |" in text
