"""The campaign's parked runs (campaign/README.md): each folder under ``campaign/runs`` is a run of
its suite that has not finished, with a readable checkpoint, and the README's table of parked
runs lists exactly those, at the step of their checkpoints, each with a commit git knows.

The checks are functions applied to the repository's folder and, so that they are seen to fail,
to damaged copies of a run made here.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rnnlab import config, rundir
from rnnlab.config import ConfigError
from rnnlab.suite import Suite, _jobs, load_suite

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = ROOT / "campaign"
#: a row of the README's table: | `SUITE/RUN/seedS` | COMMIT | STEP of STEPS |
ROW = re.compile(r"^\| `([^`]+/seed\d+)` \| ([0-9a-f]{7,40}) \| ([\d,]+) of ([\d,]+) \|", re.M)


def parked(runs: Path) -> list[Path]:
    return sorted(p for p in runs.glob("*/*/seed*") if p.is_dir())


def problems(run: Path, runs: Path, suite: Suite | None = None) -> list[str]:
    """What is wrong with the parked run directory ``run`` (under ``runs``): nothing, for one
    that ``rnnlab suite SUITE --runs-dir runs`` would resume (``suite``: the one its folder
    names)."""
    suite_name = run.relative_to(runs).parts[0]
    try:
        suite = suite or load_suite(suite_name)
    except ConfigError as e:
        return [f"{run}: its suite folder names no suite ({e})"]
    files = rundir.RunFiles(run)
    held = (files.stored(files.RESULT), run / files.LOCK)  # a result.json in any form: a finished run
    out = [f"{run}: holds {f.name}" for f in held if f is not None and f.exists()]
    jobs = {rd: (preset, overrides) for preset, overrides, rd in _jobs(suite, runs, [])}
    if run not in jobs:
        return [*out, f"{run}: not a run of suite {suite_name} (its runs: {sorted(map(str, jobs))[:4]}...)"]
    cfg = config.load(*jobs[run])  # the suite's own overrides for this run: its set, grid point and seed
    if rundir.resolved_saved_key(run) != rundir.config_key(cfg):
        out.append(f"{run}: config.json is not the suite's configuration for seed {cfg.train.seed}")
    try:
        ck = rundir.load_checkpoint(files.checkpoint, full=True)
    except (OSError, rundir.CheckpointError) as e:
        return [*out, f"{run}: {e}"]
    if not 0 < ck["progress"]["step"] < cfg.train.steps:
        out.append(f"{run}: checkpoint at step {ck['progress']['step']} of {cfg.train.steps}")
    if ck["progress"].get("best_step") and not files.best.exists():  # evaluated, so best.pt was written
        out.append(f"{run}: no best.pt (the test metrics come from it)")
    return out


def table(readme: Path) -> dict[str, tuple[str, int, int]]:
    return {
        m[1]: (m[2], int(m[3].replace(",", "")), int(m[4].replace(",", ""))) for m in ROW.finditer(readme.read_text())
    }


def listed(runs: Path) -> dict[str, tuple[int, int]]:
    """``{SUITE/RUN/seedS: (checkpoint step, steps)}`` of the parked runs."""
    out = {}
    for run in parked(runs):
        ck = rundir.load_checkpoint(rundir.RunFiles(run).checkpoint, full=True)
        out[run.relative_to(runs).as_posix()] = (ck["progress"]["step"], ck["config"]["train"]["steps"])
    return out


def test_each_parked_run_is_an_unfinished_run_of_its_suite():
    runs = parked(CAMPAIGN / "runs")
    if not runs:
        pytest.skip("no run is parked in campaign/runs")
    assert [p for run in runs for p in problems(run, CAMPAIGN / "runs")] == []


def test_the_readme_lists_the_parked_runs_at_their_checkpoints_steps():
    rows = table(CAMPAIGN / "README.md")
    assert {k: v[1:] for k, v in rows.items()} == listed(CAMPAIGN / "runs")
    if (ROOT / ".git").exists():
        for commit, _, _ in rows.values():
            git = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
            assert git.returncode == 0, f"campaign/README.md names commit {commit}, which git does not know"


# ----------------------------------------------------------------- the checks, seen to fail


@pytest.fixture
def a_run(tmp_path):
    """A run of a small suite stopped before its last step: trained to the end, then its
    result.json removed and its checkpoint's step set back, as a stop leaves it."""
    import torch

    from rnnlab.train import train

    suite = Suite(name="tiny", presets=["demo/lstm"], seeds=[3], set=["train.steps=12", "train.eval_every=6"])
    runs = tmp_path / "runs"
    preset, overrides, rd = next(_jobs(suite, runs, []))
    train(config.load(preset, overrides), rd, progress=False)
    (rd / "result.json").unlink()
    ck = torch.load(rd / "checkpoint.pt", weights_only=True)
    ck["progress"]["step"] = 6
    torch.save(ck, rd / "checkpoint.pt")
    return suite, runs, rd


def test_a_stopped_run_passes_and_each_damage_is_named(a_run):
    suite, runs, rd = a_run
    assert problems(rd, runs, suite) == []
    assert listed(runs) == {"tiny/demo-lstm/seed3": (6, 12)}
    moved = runs / "tiny" / "other" / rd.name
    shutil.copytree(rd, moved)
    assert [p for p in problems(moved, runs, suite) if "not a run of suite tiny" in p]
    (rd / ".lock").write_text("{}")
    (rd / "best.pt").unlink()
    assert problems(rd, runs, suite) == [f"{rd}: holds .lock", f"{rd}: no best.pt (the test metrics come from it)"]
    (rd / "checkpoint.pt").write_bytes(b"not a checkpoint")
    found = problems(rd, runs, suite)
    assert [p for p in found if p.endswith("holds .lock")] and [p for p in found if "damaged or truncated" in p]
    bad = runs / "no-such-suite" / "x" / "seed1"
    bad.mkdir(parents=True)
    assert [p for p in problems(bad, runs) if "names no suite" in p]


def test_a_finished_run_or_another_configuration_is_named(a_run):
    suite, runs, rd = a_run
    (rd / "result.json").write_text("{}")
    assert [p for p in problems(rd, runs, suite) if p.endswith("holds result.json")]
    original = (rd / "config.json").read_text()
    saved = json.loads(original)
    saved["optim"]["lr"] *= 2
    (rd / "config.json").write_text(json.dumps(saved))
    # the suite now puts its run in a folder of its own (rundir.run_dir: the preset was edited)
    assert [p for p in problems(rd, runs, suite) if "not a run of suite tiny" in p or "not the suite's config" in p]
    other = Suite(name="tiny", presets=["demo/lstm"], seeds=[3], set=["train.steps=12", "train.eval_every=4"])
    assert [p for p in problems(rd, runs, other) if "not a run of suite tiny" in p]
    import torch

    (rd / "config.json").write_text(original)
    ck = torch.load(rd / "checkpoint.pt", weights_only=True)
    ck["progress"]["step"] = 12
    torch.save(ck, rd / "checkpoint.pt")
    assert [p for p in problems(rd, runs, suite) if p.endswith("checkpoint at step 12 of 12")]
