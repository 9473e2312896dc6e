"""The test suite passes in a checkout of any name: ``git clone .../rnnlab`` makes a folder named
``rnnlab``, and a test that tells the package's source apart from the tests by the path fragment
``/rnnlab/`` then also matches the tests' own files (the device tests' factory audit once failed
24 times there while passing in any other folder)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEEP = ("src", "tests", "pyproject.toml")


def test_device_tests_pass_in_a_checkout_named_rnnlab(tmp_path):
    checkout = tmp_path / "work" / "rnnlab"
    checkout.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache")
    for name in KEEP:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, checkout / name, ignore=skip, symlinks=True)
        else:
            shutil.copy2(src, checkout / name)
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",  # one process: this test already runs inside the suite's workers
            "tests/test_device.py",
            "-k",
            "factory_audit or (fast_paths_make_no_tensor and (lstm or dmu or exprnn or asrnn))",
        ],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, tail
    # the copy was what ran (not the installed package), and the selection was not empty
    assert " passed" in tail and "failed" not in tail, tail
