"""Benchmark suites: presets x seeds, run in parallel processes, summarised side by side.

A suite is a TOML file (shipped ones live in ``rnnlab/suites/``)::

    name = "dmu-adding"
    description = "..."
    presets = ["dmu/adding-dmu", "dmu/adding-gru", ...]
    seeds = [0, 1, 2, 3, 4]
    set = ["train.steps=1000"]          # optional overrides for every run
    metrics = ["test/loss"]              # columns of the summary table

``run_suite`` trains every (preset, seed) into ``RUNS_DIR/<suite>/<run name>/seed<seed>``,
skipping runs whose ``result.json`` exists and resuming those with only a checkpoint, so an
interrupted suite continues where it stopped. Runs execute on a backend (``rnnlab.backends``:
a local process pool, or Ray with ``--backend ray``), each holding its run directory's lock.
A run that fails (diverges, missing data) is reported and the suite goes on.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from .config import ConfigError, tomllib

SUITE_DIR = Path(__file__).parent / "suites"


@dataclass
class Suite:
    name: str
    presets: list[str]
    seeds: list[int] = field(default_factory=lambda: [0])
    set: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    description: str = ""


def list_suites() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.toml"))


def load_suite(name_or_path: str) -> Suite:
    p = Path(name_or_path)
    if not (p.suffix == ".toml" and p.exists()):
        p = SUITE_DIR / f"{name_or_path}.toml"
    if not p.exists():
        raise ConfigError(f"no suite named {name_or_path!r}; shipped suites: {list_suites()}")
    data = tomllib.loads(p.read_text())
    valid = set(Suite.__dataclass_fields__)
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ConfigError(f"{p}: unknown key(s) {unknown}; valid keys: {sorted(valid)}")
    if "name" not in data or "presets" not in data:
        raise ConfigError(f"{p}: a suite needs 'name' and 'presets'")
    return Suite(**data)


def _jobs(suite: Suite, runs_dir: Path, extra: list[str]):
    from . import config

    for preset in suite.presets:
        for seed in suite.seeds:
            overrides = [*suite.set, *extra, f"train.seed={seed}"]
            cfg = config.load(preset, overrides)  # fails early, before anything runs, on a bad suite
            yield preset, overrides, runs_dir / suite.name / cfg.name / f"seed{seed}"


def run_suite(
    suite: Suite, runs_dir: str | Path = "runs", jobs: int = 1, overrides: list[str] | None = None,
    data_dir: str | None = None, log=print, backend: str = "local", address: str | None = None,
) -> Path:
    """Run (or continue) every run of ``suite`` on ``backend`` (``local``: a pool of ``jobs``
    processes; ``ray``: one Ray task per run on the cluster at ``address``, default a local
    instance); returns the suite's run directory."""
    from .backends import job_for, run_jobs

    runs_dir = Path(runs_dir)
    todo = [job_for(p, ov, rd, data_dir) for p, ov, rd in _jobs(suite, runs_dir, overrides or [])]
    where = f"{jobs} parallel job(s), one thread each" if backend == "local" else \
        f"backend {backend}" + (f" at {address}" if address else " (local instance)")
    log(f"suite {suite.name}: {len(todo)} runs ({len(suite.presets)} presets x {len(suite.seeds)} seeds), {where}")
    results = run_jobs(todo, backend, parallel=jobs, address=address, log=log)
    failed = [j for j, status, _ in results if status == "failed"]
    if failed:
        log(f"suite {suite.name}: {len(failed)} of {len(todo)} runs failed (see above); "
            f"rerun the same command to retry them (finished runs are skipped)")
    return runs_dir / suite.name


def main_suite(name: str, runs_dir: str, jobs: int, overrides: list[str], data_dir: str | None,
               backend: str = "local", address: str | None = None) -> int:
    from .results import table

    suite = load_suite(name)
    out = run_suite(suite, runs_dir, jobs, overrides, data_dir, log=lambda m: print(m, file=sys.stderr),
                    backend=backend, address=address)
    md = table(out, suite.metrics or None)
    (out / "table.md").write_text(md + "\n")
    print(md)
    print(f"\nwrote {out / 'table.md'}", file=sys.stderr)
    return 0
