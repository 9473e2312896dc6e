"""Run the five commands of docs/own-data.md, as a reader would, and (with --record) keep their
runs as the committed record docs/own-data/ that the page's table is generated from.

    python tools/own_data.py --record        # rerun the tutorial, rewrite docs/own-data/, then:
    python -m rnnlab.bench.docsync docs/own-data.md

The tests run the same commands (tests/project/test_own_data_doc.py): fast with fewer steps, and in
full (slow), checking that both models end below the memoryless baseline.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "own-data.md"
RECORD = ROOT / "docs" / "own-data"
KEEP = ("config.json", "result.json", "metrics.jsonl", "task.json")


def commands(doc: Path = DOC) -> str:
    """The bash block under the page's "Five commands" heading."""
    text = doc.read_text()
    section = text.split("## Five commands", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def run(workdir: Path, steps: int | None = None, script: str | None = None) -> subprocess.CompletedProcess:
    """Run the commands in ``workdir`` with this interpreter's ``python`` and ``rnnlab`` first on
    PATH; ``steps`` replaces the preset's ``steps = ...`` (a quicker run of the same commands)."""
    script = commands() if script is None else script
    if steps is not None:
        script, n = re.subn(r"^steps = \d+$", f"steps = {steps}", script, flags=re.M)
        assert n == 1, "the tutorial's preset must set train.steps once"
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=workdir, env=env, capture_output=True, text=True, timeout=1800
    )


def record(workdir: Path) -> None:
    """Copy the runs' small files (no weights) to docs/own-data/."""
    shutil.rmtree(RECORD, ignore_errors=True)
    for result in sorted((workdir / "runs").rglob("result.json")):
        run_dir = result.parent
        dest = RECORD / run_dir.relative_to(workdir / "runs")
        dest.mkdir(parents=True)
        for name in KEEP:
            shutil.copy2(run_dir / name, dest / name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--record", action="store_true", help="rewrite docs/own-data/ from this run")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = run(Path(tmp))
        print(r.stdout + r.stderr)
        if r.returncode != 0:
            return r.returncode
        if args.record:
            record(Path(tmp))
            print(f"recorded {RECORD}; now run: python -m rnnlab.bench.docsync docs/own-data.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
