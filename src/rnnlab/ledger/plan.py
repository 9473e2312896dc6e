"""``rnnlab reproduce plan``: the runs the ledger still lacks at the paper's protocol and its
presets' full budgets, priced (:mod:`.price`) and ordered, with the commands that make them.

Order: first the claims that the fewest CPU-hours would decide (an inconclusive or untested
claim whose every missing run fits the budget, cheapest claim first), each with its runs; then
every other missing run of a row, cheapest first. A run longer than the budget (hours of one
CPU thread on the machine of the records) goes to the GPU section, with the ``--backend ray
--device cuda`` command; a run without a timing goes to its own section. ``-o FILE`` writes the
CPU runs as a suite (``rnnlab suite FILE``; the GPU runs beside it as ``FILE-gpu.toml``), with
``train.checkpoint_every`` set when a run is longer than ``price.LONG_RUN_S``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import config
from ..config import ConfigError, toml_value
from .claims import CLAIMS, CONFIRMED, NOT_APPLICABLE, REFUTED, UNTESTED, needed, verdict_kind
from .document import pricer, row_missing
from .findings import Asking, AtCode
from .price import (
    AFFORDABLE_HOURS,
    LONG_RUN_S,
    PROBE_SET,
    PROBE_STEPS,
    Missing,
    checkpoint_every,
    done_seeds,
    hours,
    missing,
)
from .published import OURS_PROTOCOL, PAPER_PROTOCOL, PAPERS, ROWS, VARIANTS, protocol
from .records import PROBES, Evidence, load_records
from .stats import MIN_SAMPLE, counted

PLAN_SUITE = "plan"


def parse_budget(text: str) -> float:
    """``"6h"``, ``"90m"``, ``"45s"`` or a number of hours -> seconds (> 0)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*([hms]?)\s*", str(text), re.IGNORECASE)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(
            f"--budget {text!r} is not a positive duration; give hours, minutes or seconds, e.g. --budget 6h, "
            f"--budget 90m or --budget 0.5"
        )
    return float(m.group(1)) * {"h": 3600, "m": 60, "s": 1, "": 3600}[m.group(2).lower()]


@dataclass
class Job:
    """The missing runs of one preset, and what they serve."""

    need: Missing
    rows: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)

    @property
    def preset(self) -> str:
        return self.need.preset

    def command(self, gpu: bool = False) -> str:
        seeds = ",".join(str(s) for s in self.need.seeds)
        return f"rnnlab train {self.preset} --seeds {seeds}" + (" --device cuda" if gpu else "")


def _claim_presets(claim, ev: Evidence) -> list[str]:
    """The paper-protocol presets (no variants) a claim's rules read, in the order asked."""
    ask = Asking(ev)
    for part in ([claim.premise] if claim.premise else []) + list(claim.parts):
        part.rule(ask)
        if claim.headline == "code":
            part.rule(AtCode(ask))
    primary = (PAPER_PROTOCOL, OURS_PROTOCOL) + (("code",) if claim.headline == "code" else ())
    out = []
    for p in ask.asked:
        if p not in out and protocol(p) in primary and p not in VARIANTS:
            out.append(p)
    return out


def seeds_for_a_test(claim, ev: Evidence, judged) -> dict[str, int]:
    """The seeds each of ``claim``'s presets needs for its verdict: ``claims.needed`` of the
    paper's runs, and at least ``MIN_SAMPLE`` where that count alone would leave a part without
    a test. With one seed a model (asRNN's copy and MNIST claims), a comparison of single runs
    is tested over the test items, but a group of several seeds against one run has no test,
    and a one-run value without test items no interval: so every preset of a claim with a
    preset already past one seed, and every preset of a part whose runs gave no test, needs
    ``MIN_SAMPLE``."""
    presets = _claim_presets(claim, ev)
    need = dict.fromkeys(presets, needed(claim.runs))
    if max((len(done_seeds(ev, p)) for p in presets), default=0) > 1:
        need = {p: max(n, MIN_SAMPLE) for p, n in need.items()}
    for _, v, f in judged:
        if not f.tested and verdict_kind(v) != UNTESTED:
            for g in f.groups:
                if g.preset in need:
                    need[g.preset] = max(need[g.preset], MIN_SAMPLE)
    return need


@dataclass
class Plan:
    budget_s: float
    claims: list[tuple[str, list[Missing], float]]  # (claim, its runs, CPU seconds), cheapest first
    cpu: list[Job]  # runs within the budget: the claims' first, then cheapest first
    gpu: list[Job]  # runs longer than the budget on the records' CPU
    unpriced: list[Job]  # runs without a timing
    #: declared sweeps not complete (``rnnlab.ledger.declared``): (name, what it judges, runs in the
    #: records, runs declared, CPU seconds of the missing runs or None where one has no price)
    sweeps: list[tuple[str, str, int, int, float | None]] = field(default_factory=list)

    def suite_text(self, jobs: list[Job], name: str, description: str, probe: bool = False) -> str:
        """A suite file (``rnnlab.suite``) of ``jobs``: their presets, each with its own seeds; with
        ``probe``, one short run of each (``PROBE_SET``, the first seed) that times it."""
        lines = [f"name = {toml_value(name)}", f"description = {toml_value(description)}"]
        lines.append("presets = [" + ", ".join(toml_value(j.preset) for j in jobs) + "]")
        lines.append("seeds = []")
        if probe:
            lines.append("set = [" + ", ".join(toml_value(x) for x in PROBE_SET) + "]")
        lines += ["", "[seeds_of]"]
        for j in jobs:
            seeds = j.need.seeds[:1] if probe else j.need.seeds
            lines.append(f"{toml_value(j.preset)} = [{', '.join(str(s) for s in seeds)}]")
        # each run longer than LONG_RUN_S checkpoints at least every CHECKPOINT_S seconds, at its
        # own steps (one interval for all, the slowest run's, made the fast ones checkpoint often)
        long = [j for j in jobs if not probe and j.need.cpu is not None and j.need.run_s() > LONG_RUN_S]
        if long:
            lines += ["", "[set_of]"]
            for j in long:
                lines.append(
                    f'{toml_value(j.preset)} = ["train.checkpoint_every={checkpoint_every(j.need.cpu.step_s)}"]'
                )
        return "\n".join(lines) + "\n"


def make_plan(roots, budget_s: float = AFFORDABLE_HOURS * 3600, paper: str | None = None) -> Plan:
    """The plan over the records below ``roots`` (see the module's docstring)."""
    if paper is not None and paper not in PAPERS:
        raise ValueError(f"--paper {paper!r} is not one of the ledger's papers; choose one of {', '.join(PAPERS)}")
    records, analyses, left = load_records(roots)
    ev = Evidence(records, analyses, left)
    jobs: dict[str, Job] = {}
    for row in ROWS:
        if paper and row.paper != paper:
            continue
        m = row_missing(row, ev)
        if m is None:
            continue
        job = jobs.setdefault(m.preset, Job(m))
        job.rows.append(f"{row.paper} {row.table}: {row.model}, {row.task}" + (f" ({row.size})" if row.size else ""))
    claim_list = []
    for c in CLAIMS:
        if (paper and c.paper != paper) or c.ours:
            continue
        judged = c.judge(ev)
        if {verdict_kind(v) for _, v, _ in judged} <= {CONFIRMED, REFUTED, NOT_APPLICABLE}:
            continue
        need = seeds_for_a_test(c, ev, judged)
        runs = [m for p, n in need.items() if (m := missing(ev, p, c.runs, pricer(ev), n)) is not None]
        if not runs or any(m.cpu is None or m.run_s() > budget_s for m in runs):
            continue
        label = f"{c.paper} {c.where}: {c.text}"
        claim_list.append((label, runs, sum(m.total_s() for m in runs)))
        for m in runs:
            job = jobs.get(m.preset)
            if job is None:  # a preset no row prices (its row at another protocol): the claim's own runs
                job = jobs[m.preset] = Job(m)
            job.claims.append(label)
    claim_list.sort(key=lambda t: (t[2], t[0]))
    rank = {}
    for i, (_, runs, _) in enumerate(claim_list):
        for m in runs:
            rank.setdefault(m.preset, i)
    cpu, gpu, unpriced = [], [], []
    for job in jobs.values():
        s = job.need.run_s()
        (unpriced if s is None else cpu if s <= budget_s else gpu).append(job)
    cpu.sort(key=lambda j: (rank.get(j.preset, len(claim_list)), j.need.total_s(), j.preset))
    gpu.sort(key=lambda j: (j.need.total_s(), j.preset))
    unpriced.sort(key=lambda j: j.preset)
    return Plan(budget_s, claim_list, cpu, gpu, unpriced, sweeps_left(ev, paper))


def sweeps_left(ev, paper: str | None = None) -> list[tuple[str, str, int, int, float | None]]:
    """The declared sweeps whose runs the records do not all hold, with the price of the rest
    (each missing run at its own configuration's price)."""
    from ..suite import grid_points, load_suite
    from .declared import DECLARED, sweep_points, sweep_progress
    from .records import _diffs, _resolved, preset_configs

    out = []
    for name, sweep in DECLARED.items():
        if paper and sweep.paper != paper:
            continue
        suite = load_suite(sweep.suite)
        progress = sweep_progress(name, ev)
        done, total = sum(p[2] for p in progress), sum(p[3] for p in progress)
        if done >= total:
            continue
        left = {(p, d): n - k for p, d, k, n in progress}
        seconds: float | None = 0.0
        for preset in sweep_points(name):
            for point in grid_points(suite.grid):
                over = (*suite.set_for(preset), *point)
                cfg = config.load(preset, list(over))
                d = tuple(_diffs(_resolved(cfg.to_dict()), preset_configs()[preset]))
                t = pricer(ev).timing(preset, overrides=over)
                if t is None:
                    seconds = None
                    break
                if seconds is not None:
                    seconds += left.pop((preset, d), 0) * t.seconds(cfg.train.steps, cfg.train.eval_every)
        out.append((name, sweep.why, done, total, seconds))
    return out


def _job_lines(jobs: list[Job], gpu: bool = False) -> list[str]:
    out = ["| CPU-h | cumulative | runs | serves | command | price |", "|---|---|---|---|---|---|"]
    total = 0.0
    for j in jobs:
        s = j.need.total_s()
        total += s or 0.0
        serves = "; ".join(j.claims[:1] + j.rows[:2]) + (
            f" (+{len(j.rows) + len(j.claims[:1]) - 3} more)" if len(j.rows) + len(j.claims[:1]) > 3 else ""
        )
        out.append(
            f"| {hours(s) if s is not None else '-'} | {hours(total) if s is not None else '-'} | "
            f"{len(j.need.seeds)} | {serves} | `{j.command(gpu)}` | {j.need.text()} |"
        )
    return out


def render(plan: Plan, suite_path: str | None = None) -> str:
    budget = hours(plan.budget_s)
    suite = suite_path or "plan.toml"
    gpu_suite = _beside(suite, "gpu")
    out = [
        "# Reproduction plan",
        "",
        f"The runs the ledger lacks at the paper's protocol and its presets' full budgets; prices in hours of one "
        f"CPU thread (CPU-h) on the machine that made the records (REPRODUCTION.md says how a price is made). "
        f"Budget: {budget} CPU-h per run.",
        "",
        f"## Claims that the fewest CPU-hours would decide ({len(plan.claims)})",
        "",
    ]
    for label, runs, s in plan.claims:
        out.append(f"* {label} -- {counted(sum(len(m.seeds) for m in runs), 'run')}, {hours(s)} CPU-h:")
        for m in runs:
            out.append(f"  `{Job(m).command()}` ({hours(m.total_s())} CPU-h)")
    if not plan.claims:
        out.append("None within the budget.")
    n_cpu = sum(len(j.need.seeds) for j in plan.cpu)
    cpu_s = sum(j.need.total_s() for j in plan.cpu)
    out += [
        "",
        f"## On this machine: {counted(n_cpu, 'run')}, {hours(cpu_s)} CPU-h (each run within {budget} CPU-h)",
        "",
        f"All of them: `rnnlab suite {suite} --jobs 2` (written by `-o {suite}`; runs resume from their "
        "checkpoints when the same command is given again), or one preset at a time:",
        "",
        *_job_lines(plan.cpu),
        "",
        f"## On a GPU: {counted(sum(len(j.need.seeds) for j in plan.gpu), 'run')} longer than {budget} CPU-h each",
        "",
    ]
    if plan.gpu:
        out += [
            f"All of them on a Ray cluster: `rnnlab suite {gpu_suite} --backend ray --device cuda` "
            f"(written beside `{suite}` by `-o`), or one preset at a time:",
            "",
            *_job_lines(plan.gpu, gpu=True),
        ]
    else:
        out.append("None.")
    out += ["", f"## Declared sweeps not complete ({len(plan.sweeps)})", ""]
    if plan.sweeps:
        out += [
            'A claim that a model fails "for any hyperparameters" is confirmed only over its declared sweep '
            "(a suite; docs/reproduce.md, Declared sweeps), refuted by one of its settings where a run works:",
            "",
        ]
        for name, why, done, total, s in plan.sweeps:
            price = "no price" if s is None else f"{hours(s)} CPU-h"
            out.append(
                f"* `rnnlab suite {name} --jobs 2` -- {why}: {done} of {counted(total, 'run')} in the records, the "
                f"rest {price} (a stage of its seeds: `--seeds 0-2`; the price: `--price`)"
            )
    else:
        out.append("None.")
    out += ["", f"## Without a price: {counted(sum(len(j.need.seeds) for j in plan.unpriced), 'run')}", ""]
    if plan.unpriced:
        probes = _beside(suite, "probes")
        out += [
            f"No record or speed benchmark times these configurations. A price probe, one run of "
            f"{PROBE_STEPS} steps of each, prices them on this machine: `rnnlab suite {probes} --runs-dir "
            f"runs` (written beside `{suite}` by `-o`), then `rnnlab reproduce collect runs/{PROBES} -o "
            f"records/{PROBES}` and the ledger again (probes time a configuration and are no "
            "evidence: their rows stay not run). The runs:",
            "",
            *[f"* `{j.command()}` ({'; '.join(j.rows[:1] + j.claims[:1])})" for j in plan.unpriced],
        ]
    else:
        out.append("None.")
    return "\n".join(out) + "\n"


def _beside(suite: str, tag: str) -> str:
    """The suite file written beside ``suite`` for ``tag``: ``plan.toml`` -> ``plan-gpu.toml``."""
    p = Path(suite)
    return str(p.with_name(f"{p.stem}-{tag}{p.suffix or '.toml'}"))


def main_plan(roots, budget: str = "6h", paper: str | None = None, output: str | None = None) -> int:
    """``rnnlab reproduce plan``: print the plan; with ``output``, write its suites."""
    if output:  # refused before anything is printed or written
        if not output.endswith(".toml"):
            raise ConfigError(f"-o {output!r}: a suite file ends in .toml; e.g. -o plan.toml")
        for tag in ("", "gpu", "probes"):
            _check_replaceable(Path(_beside(output, tag) if tag else output))
    plan = make_plan(roots, parse_budget(budget), paper)
    print(render(plan, output), end="")
    if output:
        probe_text = f"price probes, {PROBE_STEPS} steps of each configuration no record times"
        suites = [  # (file, jobs, suite name, description, probe); the first is written even when empty
            (output, plan.cpu, PLAN_SUITE, f"the missing runs within {budget} per run", False),
            (_beside(output, "gpu"), plan.gpu, PLAN_SUITE + "-gpu", f"the runs longer than {budget}", False),
            (_beside(output, "probes"), plan.unpriced, PROBES, probe_text, True),
        ]
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        for i, (path, jobs, name, text, probe) in enumerate(suites):
            p = Path(path)
            if jobs or i == 0:
                replaced = p.exists()
                p.write_text(plan.suite_text(jobs, name, f"{PLAN_MARK} {text}", probe=probe))
                print(f"wrote {path}" + (" (replacing the plan there)" if replaced else ""))
            elif p.exists():  # a suite of an earlier plan that this plan has no runs for
                p.unlink()
                print(f"removed {path}: an earlier plan's suite; this plan has no such runs")
    return 0


#: how the suites ``reproduce plan -o`` writes begin their description
PLAN_MARK = "rnnlab reproduce plan:"


def _check_replaceable(path: Path) -> None:
    """``path`` may be written: absent, or a suite an earlier ``reproduce plan -o`` wrote (its
    description begins with :data:`PLAN_MARK`); any other file is refused, not overwritten."""
    if not path.exists():
        return
    from ..config import tomllib

    try:
        ours = str(tomllib.loads(path.read_text(encoding="utf-8")).get("description", "")).startswith(PLAN_MARK)
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise ConfigError(
            f"-o: {path} exists and is not a suite that rnnlab reproduce plan wrote; it is left as it is: give "
            f"another file name (e.g. -o plan.toml), or move it away first"
        )
