"""``REPRODUCTION.md`` generated from the papers' published values (:mod:`.published`), the run
records (:mod:`.records`) and the claims (:mod:`.claims`), never typed by hand; and the one-line
summary the README shows (``summary_line``, kept current by :mod:`rnnlab.bench.docsync`).

A row of the papers' tables is compared with the runs of its preset:

* *reproduced* / *not reproduced*: runs at the paper's protocol and the preset's budget and
  configuration, with at least ``claims.FEW_SEEDS`` seeds (or the paper's count when smaller),
  and ``|ours - paper| <= max(2 spread_paper, 2 std_ours, rel |paper|)`` (``rel`` 2%, 0.5% for
  weight counts; for accuracies the paper's *error rate*, 1 - accuracy) or not;
* a value the paper reports from **one run** (``runs=1``) has no spread to compare with: it is
  *reproduced* only when it lies within our seed spread (mean +- 2 std over at least
  ``FEW_SEEDS`` seeds), *not reproduced* when that spread and the test on the test set
  (two-sided two-proportion test over its items, ``ONE_RUN_TEST``) both exclude it;
* *inconclusive (...)*: at the preset's budget but with too few seeds, or a one-run value that
  only one of the two excludes;
* *not comparable (reduced budget / another configuration: ...)*: runs smaller than, or
  different from, the preset; seconds per step on the paper's GPU against our CPU;
* *curves only (see claims)*: a figure without numbers; the claims judge its content;
* *run; metric not recorded*, *not run yet*, *no preset: reason*.

Each trained-result row ends with the runs it still lacks at the paper's protocol and its
preset's full budget, priced in CPU-hours from the records' timings (:mod:`.price`).

Weight counts do not depend on the training budget (only on the configuration), analytic
checks (baselines, analyses of trained matrices) only on the task's size; both are their own
sections. A variant preset's line says so.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from .._compat import moved_attribute
from ..results import DMU_THRESHOLDS, median_epoch
from ..rundir import RunFiles
from .claims import (
    CLAIMS,
    DEPENDS,
    FEW_SEEDS,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    OTHER_PROTOCOL,
    needed,
    runs_text,
    test_items,
    verdict_kind,
)
from .price import AFFORDABLE_HOURS, Missing, Pricer, hours, missing
from .published import OURS_PROTOCOL, PAPER_PROTOCOL, PAPERS, ROWS, VARIANTS, Published, protocol
from .records import (
    AWAITING_REMAKE,
    PROBES,
    PROVENANCE_SINCE,
    UNVERIFIABLE,
    Analysis,
    Evidence,
    Group,
    Record,
    _num,
    load_records,
)
from .stats import ALPHA, counted, fmt_p, two_proportions

log = logging.getLogger(__name__)

REL_TOL = {"params": 0.005, "params/recurrent": 0.005}
COMMAND = "rnnlab reproduce ledger records -o REPRODUCTION.md"
KINDS = {
    "trained": "Trained results",
    "timing": "Timings",
    "weights": "Weight counts",
    "analytic": "Analytic checks",
    "settings": "Hyperparameters",
}
STATUS_KINDS = (
    "reproduced",
    "not reproduced",
    "inconclusive",
    "not comparable",
    "curves only",
    "metric not recorded",
    "not run yet",
    "no preset",
)
HEAD = [
    "row",
    "metric",
    "paper",
    "ours (mean +- std)",
    "steps run",
    "hardware",
    "wall time",
    "diff",
    "status",
    "preset",
    "note",
    "protocol",
    "missing runs (price)",
]


# --- the ledger rows -------------------------------------------------------------------------
def accuracy_like(metric: str) -> bool:
    """Accuracies (fractions correct): compared as error rates, 1 - accuracy."""
    return metric.split("/")[-1].endswith("accuracy")


def _tolerance(row: Published, ours_std: float) -> float:
    """max(2 x the paper's spread, 2 x our std, ``rel`` of the paper's value: of its error rate
    for an accuracy, where 2% of 0.9889 would be 2 points and 2% of its error 0.02 points)."""
    scale = 1 - row.value if accuracy_like(row.metric) else row.value
    return max(2 * (row.spread or 0.0), 2 * ours_std, REL_TOL.get(row.metric, 0.02) * abs(scale))


def one_run_test(row: Published, g: Group, ours: float) -> float | None:
    """Two-sided p-value of the two-proportion test of our accuracy against the paper's one-run
    value over the test items of one run each (None where the metric has no test items)."""
    n = test_items(g, row.metric) if accuracy_like(row.metric) else None
    if not n:
        return None
    k_ours, k_paper = round(ours * n), round(row.value * n)
    return min(1.0, 2 * min(two_proportions(k_ours, n, k_paper, n), two_proportions(k_paper, n, k_ours, n)))


def _one_run_verdict(row: Published, g: Group, m: float, s: float) -> str:
    """The rule for a value the paper reports from one run (see the module's docstring)."""
    n = len(g.records)
    p = one_run_test(row, g, m)
    rejects = p is not None and p <= ALPHA
    test = "" if p is None else f"the test on the test set {'rejects' if rejects else 'does not reject'} it, {fmt_p(p)}"
    if n < FEW_SEEDS:
        return (
            f"inconclusive ({counted(n, 'seed')} of the {FEW_SEEDS} a one-run value needs for our spread"
            + (f"; {test}" if test else "")
            + ")"
        )
    lo, hi = m - 2 * s, m + 2 * s
    inside = lo <= row.value <= hi
    if inside and not rejects:
        return "reproduced"
    if not inside and (p is None or rejects):
        return f"not reproduced (outside our spread {_num(lo)}-{_num(hi)}" + (f"; {test}" if test else "") + ")"
    # the spread and the test disagree (inside it, the test can still reject the paper's value
    # when our seeds agree on a mean off it by more than the test-set noise)
    return f"inconclusive ({'within' if inside else 'outside'} our spread {_num(lo)}-{_num(hi)}, but {test})"


def _paper_text(row: Published) -> str:
    if row.value is not None:
        paper = _num(row.value, row.metric)
    elif row.metric == "settings":
        paper = "hyperparameters"
    elif row.missing:
        paper = f"- ({row.missing})"
    else:
        paper = "curves"
    if row.value is not None and row.spread is not None:
        paper += f" +- {_num(row.spread)}"
    if row.best is not None:
        paper += f" (best {_num(row.best, row.metric)})"
    if row.runs:
        paper += f" [{counted(row.runs, 'run')}]"
    return paper


def _keys(diffs) -> str:
    return ", ".join(sorted({d.split(" with ")[-1].split(" ")[0] for d in diffs}))


def pricer(ev: Evidence) -> Pricer:
    """The evidence's pricer, made once: every record is read once, every preset priced once."""
    if getattr(ev, "pricer", None) is None:
        ev.pricer, ev.missing = Pricer(ev.records + ev.probes), {}
    return ev.pricer


def row_missing(row: Published, ev: Evidence) -> Missing | None:
    """The runs a trained-result row still needs at the paper's protocol and its preset's full
    budget (``price.missing``), priced from the records' timings; None when none is missing."""
    if row.kind != "trained" or not row.presets or protocol(row.presets[0]) not in (PAPER_PROTOCOL, OURS_PROTOCOL):
        return None
    p = pricer(ev)
    key = (row.presets[0], row.runs)
    if key not in ev.missing:
        ev.missing[key] = missing(ev, row.presets[0], row.runs, p)
    return ev.missing[key]


def _row_lines(row: Published, ev: Evidence) -> list[list[str]]:
    """Table lines ``[row, metric, paper, ours, steps, hardware, wall, diff, status, preset, note,
    protocol, missing runs]``; the first line of a row that names presets is its primary line (the
    faithful preset's runs), and the only one that carries the price of the missing runs."""
    lines = _lines(row, ev)
    m = row_missing(row, ev)
    lines[0].append(m.text() if m is not None else "-")
    for ln in lines[1:]:
        ln.append("")
    return lines


def _lines(row: Published, ev: Evidence) -> list[list[str]]:
    label = f"{row.model}, {row.task}" + (f" ({row.size})" if row.size else "")
    paper = _paper_text(row)
    if not row.presets:
        return [[label, row.metric, paper, "-", "-", "-", "-", "-", f"no preset: {row.reason}", "-", row.note, "-"]]
    lines = []
    for i, preset in enumerate(row.presets):
        tag = f"`{preset}`" + (" (variant)" if preset in VARIANTS else "")
        groups = ev.by_preset.get(preset, [])
        found = [a for a in ev.analyses.get(preset, []) if row.metric in a.data.get("values", {})]
        for a in found:
            lines.append(_analysis_line(row, label, paper, tag, a))
        if found:  # the analysis holds the number; runs that do not record it add nothing
            groups = [g for g in groups if g.stat(row.metric) is not None]
            if not groups:
                continue
        if not groups:
            if i == 0:
                lines.append(
                    [label, row.metric, paper, "-", "-", "-", "-", "-", "not run yet", tag, row.note, protocol(preset)]
                )
            continue
        for g in groups:
            lines.append(_group_line(row, label, paper, tag, g))
    return lines


def _variant_prefix(preset: str) -> str:
    return f"variant ({VARIANTS[preset][1]}): " if preset in VARIANTS else ""


def _analysis_line(row: Published, label: str, paper: str, tag: str, a: Analysis) -> list[str]:
    v = a.data["values"][row.metric]
    seeds = a.data.get("seeds", [])
    ours = f"{_num(v)} ({counted(len(seeds), 'seed')}; analysis record)"
    diff = f"{v - row.value:+.4g}" if row.value is not None else "-"
    need = needed(row.runs)
    if row.value is None:
        status = "curves only (see claims)"
    elif len(seeds) < need:
        within = abs(v - row.value) <= _tolerance(row, 0.0)
        status = (
            f"inconclusive ({counted(len(seeds), 'seed')} of the {need} needed; "
            f"ours is {'within' if within else 'outside'} the tolerance)"
        )
    else:
        status = "reproduced" if abs(v - row.value) <= _tolerance(row, 0.0) else "not reproduced"
    return [
        label,
        row.metric,
        paper,
        ours,
        f"{a.data.get('steps', 0):,}",
        "-",
        "-",
        diff,
        _variant_prefix(a.preset) + status,
        tag,
        row.note,
        protocol(a.preset),
    ]


def _group_line(row: Published, label: str, paper: str, tag: str, g: Group) -> list[str]:
    n = len(g.records)
    seeds = f"{counted(n, 'seed')}" + (f" of {row.runs}" if row.runs and n < row.runs else "")
    need = needed(row.runs)
    diff, ours = "-", "-"
    not_comparable = []
    if row.kind == "weights":  # the count depends on the configuration only, not on the budget
        if g.other:
            not_comparable.append(f"another configuration: {_keys(g.other)}")
    elif row.kind == "analytic":  # a task's baseline depends on its size, not on the training budget
        sized = [d for d in g.budget if _keys([d]) in ("task.L", "task.T")]
        if g.other or sized:
            not_comparable.append("another configuration: " + _keys(list(g.other) + sized))
    else:
        if g.budget:
            not_comparable.append(f"reduced budget: {_keys(g.budget)}")
        if g.other:
            not_comparable.append(f"another configuration: {_keys(g.other)}")
    if row.metric == "thresholds":
        th = g.thresholds(DMU_THRESHOLDS)
        parts = []
        for t, eps in th.items():
            reached = [e for e in eps if e is not None]
            med = f" (median epoch {median_epoch(reached):g})" if reached else ""
            parts.append(f"{t:.0e}: {len(reached)}/{len(eps)}{med}")
        ours = "; ".join(parts) + f" ({seeds}{g.unverifiable()})"
        verdict = "curves only (see claims)"
    elif (st := g.stat(row.metric)) is None:
        verdict = f"run; metric {row.metric} not recorded"
    else:
        m, s, _ = st
        ours = f"{_num(m, row.metric)} +- {_num(s)} ({seeds}{g.unverifiable()})"
        if row.value is None:
            verdict = "curves only (see claims)"
        elif row.kind == "timing":  # seconds per step: not comparable whatever the budget
            diff = f"{m - row.value:+.3g}"
            verdict, not_comparable = f"not comparable (paper: a GPU; ours: {g.hardware()})", []
        else:
            diff = f"{m - row.value:+.4g}"
            within = abs(m - row.value) <= _tolerance(row, s)
            proto = protocol(g.preset)
            if not_comparable:
                verdict, not_comparable = f"not comparable ({'; '.join(not_comparable)})", []
            elif proto != PAPER_PROTOCOL and row.kind == "trained":
                verdict = f"not comparable (runs at the {proto} protocol)"
            elif row.runs == 1 and row.kind == "trained":
                verdict = _one_run_verdict(row, g, m, s)
            elif n < need and row.kind == "trained":
                verdict = (
                    f"inconclusive ({counted(n, 'seed')} of the {need} needed; "
                    f"ours is {'within' if within else 'outside'} the tolerance)"
                )
            else:
                verdict = "reproduced" if within else "not reproduced"
                if proto != PAPER_PROTOCOL:
                    verdict += f" at the {proto} protocol"
    status = (f"not comparable ({'; '.join(not_comparable)}); " if not_comparable else "") + verdict
    return [
        label,
        row.metric,
        paper,
        ours,
        g.steps(),
        g.hardware(),
        g.wall(),
        diff,
        _variant_prefix(g.preset) + status,
        tag,
        row.note,
        protocol(g.preset),
    ]


def status_kind(status: str) -> str:
    """The summary column of a status (every status has one)."""
    s = status.split("): ", 1)[1] if status.startswith("variant (") else status
    for k in (
        "no preset",
        "not run yet",
        "metric",
        "not comparable",
        "inconclusive",
        "not reproduced",
        "reproduced",
        "curves only",
    ):
        if s.startswith(k) or (k == "metric" and "not recorded" in s):
            return {"metric": "metric not recorded"}.get(k, k)
    raise ValueError(f"a ledger status without a summary column: {status!r}")


def _cell(text: str) -> str:
    return str(text).replace("\n", " ").replace("|", "\\|")


def _table(head: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in line) + " |" for line in lines]
    return "\n".join(out)


# --- the document ----------------------------------------------------------------------------
def _rows_by_paper(ev: Evidence) -> dict:
    """``{paper: {kind: {table: [(row, lines)]}}}`` in the order of ``ROWS``."""
    out: dict = {p: {k: {} for k in KINDS} for p in PAPERS}
    for r in ROWS:
        out[r.paper][r.kind].setdefault(r.table, []).append((r, _row_lines(r, ev)))
    return out


def _provenance(records: list[Record]) -> list[str]:
    groups: dict[tuple, list[Record]] = defaultdict(list)
    for r in records:
        p = r.provenance()
        commit = p["commit"] and p["commit"] + (f" ({UNVERIFIABLE})" if r.unverifiable else "")
        key = (
            (
                commit or (f"source {p['source']}" if p["source"] else None),
                p["cpu"],
                p["torch"],
                p["blas"],
                p["device"],
            )
            if r.has_provenance()
            else None
        )
        groups[key].append(r)
    lines = []
    for key, rs in sorted(groups.items(), key=lambda kv: (kv[0] is None, str(kv[0]))):
        folders = sorted({str(r.path.parent.parent.name) for r in rs})
        if key is None:
            torch = sorted({str(r.provenance()["torch"]) for r in rs})
            lines.append(
                [
                    f"provenance not recorded (made before rnnlab recorded it, commit {PROVENANCE_SINCE})",
                    "-",
                    ", ".join(torch),
                    "-",
                    "-",
                    str(len(rs)),
                    ", ".join(folders),
                ]
            )
        else:
            commit, cpu, torch, blas, device = key
            lines.append(
                [
                    commit or "-",
                    cpu or "-",
                    torch or "-",
                    blas or "-",
                    device or "CPU",
                    str(len(rs)),
                    ", ".join(folders),
                ]
            )
    return [
        "## Where the records were made",
        "",
        "Each record's commit (or source hash), host CPU, torch, BLAS and device, as its `result.json` "
        f"states them; a number can be traced to the code and machine that made it, except where marked "
        f"*{UNVERIFIABLE}*: a commit outside the repository's history or a working tree with uncommitted "
        "changes (the records awaiting re-making, below).",
        "",
        _table(["commit", "CPU", "torch", "BLAS", "device", "records", "record folders"], lines),
        "",
    ]


def _seed_ranges(seeds: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    out, start = [], None
    for i, s in enumerate(seeds):
        if start is None:
            start = s
        if i + 1 == len(seeds) or seeds[i + 1] != s + 1:
            out.append(f"{start}" if start == s else f"{start}-{s}")
            start = None
    return ", ".join(out)


def _awaiting(records: list[Record], roots) -> list[str]:
    """The records awaiting re-making, named by folder and seeds, with the reason."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in records:
        if r.unverifiable:
            seed = r.config.get("train", {}).get("seed")
            groups[(_shown(r.path.parent, roots), r.unverifiable)].append(seed)
    if not groups:
        return []
    n = sum(len(v) for v in groups.values())
    lines = [
        [f"`{folder}`", _seed_ranges(sorted(s for s in seeds if isinstance(s, int))), str(len(seeds)), why]
        for (folder, why), seeds in sorted(groups.items())
    ]
    return [
        "## Records awaiting re-making",
        "",
        f"{n} records name a commit outside the repository's history or a working tree with uncommitted changes "
        f"(`records/{AWAITING_REMAKE}`): the code that made them cannot be checked "
        f"out. They count, marked *{UNVERIFIABLE}* in every row and claim that uses them, until each is re-made "
        "from a clean commit of the history (same configuration and seed); docs/reproduce.md says how.",
        "",
        _table(["record folder", "seeds", "records", "why"], lines),
        "",
    ]


def _claims(ev: Evidence) -> tuple[list[str], Counter]:
    parts, counts = [], Counter()
    for paper in PAPERS:
        lines = []
        for c in (c for c in CLAIMS if c.paper == paper):
            judged = c.judge(ev)
            where = "our finding" if c.ours else c.where
            lines.append([f"{c.text} ({where})", "**whole claim**", f"**{c.overall(judged)}**", "", "", ""])
            for text, verdict, f in judged:
                counts[verdict_kind(verdict)] += 1
                presets = [g.preset for g in f.groups] + [a.preset for a in f.analyses]
                protos = ", ".join(sorted({protocol(p) for p in presets})) or "-"
                lines.append(["", text, verdict, f.text, runs_text(f), protos])
        head = ["claim", "part", "verdict", "evidence and test", "runs", "protocol"]
        parts += [f"### {paper}", "", _table(head, lines), ""]
    return parts, counts


def _shown(text, roots) -> str:
    """``text`` with each records root's parent folder dropped from the paths in it, so that the
    ledger names ``records/...`` the same way from any working directory or absolute root."""
    text = str(text)
    for root in roots:
        parent = str(Path(root).resolve().parent)
        text = text.replace(parent + "/", "")
    return text


#: how to read the ledger: its protocols, the status of a row, the verdict of a claim
READING = [
    "Protocols: each row and claim part names the protocol of its runs: *paper* (the text's values; where "
    "the text is silent, the released code's choice, stated in the preset), *code* (the authors' released "
    "scripts as they run, where they differ from the text) or *short* (a cheaper protocol of ours). Only "
    "paper-protocol runs can reproduce a number or confirm or refute a claim; a verdict on runs at another "
    "protocol says so.",
    "",
    "Status of a row: *reproduced* / *not reproduced* when paper-protocol runs at the preset's budget and "
    "configuration, with at least 3 seeds (or the paper's count when smaller), are within max(2 x the paper's "
    "spread, 2 x our std, 2% of the paper's value, of its error rate for accuracies; 0.5% for weight counts) "
    "of it or not; a value the paper reports from one run is *reproduced* only within our spread (mean +- 2 "
    "std) over at least 3 seeds, *not reproduced* when that spread and the test on the test set both exclude "
    "it; *inconclusive* with fewer seeds or when only one excludes it; *not comparable* when the runs are "
    "smaller than the preset (reduced budget), differ from it (another configuration) or run another "
    "protocol, and for GPU timings; *curves only* for figures without numbers (the claims judge them); *not "
    "run yet*; *no preset*. A *variant* line is a preset that differs from the paper on purpose. Claims: "
    "*confirmed* / *refuted* only at the paper's protocol and the preset's budget with at least 3 seeds (or "
    "the paper's count when smaller) and a test whose p-value or interval is shown (at another protocol: "
    "*confirmed / refuted at the X protocol*, which counts apart); a theorem whose premise fails on the runs: "
    "*not applicable*; otherwise *inconclusive (why)*; *untested* without runs.",
    "",
    "Missing runs (price): for each trained result, the seeds its preset still needs at the paper's protocol and "
    "the preset's full budget (3 seeds, or the paper's count when smaller; 3 for a value the paper reports from "
    "one run), and what they cost on the machine that made the records, in hours of one CPU thread (CPU-h): the "
    "preset's steps x the seconds per training step, plus its evaluations x the seconds per evaluation, *measured* "
    "by a record of the same configuration (`train_time_s` / steps, `eval_time_s` per evaluation, per member of an "
    "ensemble), else an *estimate* from the closest record of the same cell and task family scaled by parameters x "
    "sequence length x batch size (the record and the factor are named), else a row of the speed benchmark "
    "(`rnnlab bench`, `docs/speed-results-*.json`) of the same cell, width, sequence length and batch (training "
    "steps only), else *no price*. A GPU price is given where a GPU record times the configuration. A run stopped "
    "at its target costs less. `rnnlab reproduce plan` lists these runs cheapest first, with their commands.",
    "",
]


def _left_out_count(left: list, every: list) -> str:
    """The header's count of the records left out: of the evidence (``left``), and of single
    counts (the rest of ``every``, :attr:`Evidence.left_out`)."""
    some = len(every) - len(left)
    if not every:
        return "(none left out of the evidence), "  # nor of any count
    parts = [f"{len(left)} left out of the evidence"] if left else []
    parts += [f"{some} left out of some counts"] if some else []
    return "(" + ", ".join(parts) + ", listed below), "


def ledger(roots, command: str = COMMAND) -> str:
    """The Markdown text of REPRODUCTION.md from the run records below ``roots``."""
    records, analyses, left = load_records(roots)
    ev = Evidence(records, analyses, left)
    by_paper = _rows_by_paper(ev)
    parts = [
        "# Reproduction ledger",
        "",
        f"Generated by `{command}` from the papers' published values (`rnnlab.ledger.published`), the run "
        "records in `records/` and the claims (`rnnlab.ledger.claims`); do not edit by hand (a test regenerates "
        "it and compares). How to read it and how to add runs: docs/reproduce.md.",
        "",
        *READING,
        f"{len(ev.records) + len(left)} run records "
        + _left_out_count(left, ev.left_out)
        + f"{len(analyses)} analysis records"
        + (f", {len(ev.probes)} price probes (timings only: `{PROBES}`)" if ev.probes else "")
        + (
            f"; {k} of the run records await re-making ({UNVERIFIABLE}, listed below)."
            if (k := sum(1 for r in records if r.unverifiable))
            else "."
        ),
        "",
    ]
    summary = ["## Summary", "", "Every line of the tables below, by section and status.", ""]
    srows = []
    for paper, kinds in by_paper.items():
        for kind, tables in kinds.items():
            lines = [ln for trs in tables.values() for _, lns in trs for ln in lns]
            if not lines:
                continue
            c = Counter(status_kind(ln[8]) for ln in lines)
            srows.append([paper, KINDS[kind].lower(), str(len(lines))] + [str(c[k]) for k in STATUS_KINDS])
    summary += [_table(["paper", "section", "lines", *STATUS_KINDS], srows), ""]
    claim_parts, _ = _claims(ev)
    parts += summary
    for paper, kinds in by_paper.items():
        parts += [f"## {PAPERS[paper]}", ""]
        for kind, tables in kinds.items():
            if not tables:
                continue
            parts += [f"### {paper}: {KINDS[kind].lower()}", ""]
            for table, trs in tables.items():
                parts += [f"#### {paper}: {table}", "", _table(HEAD, [ln for _, lns in trs for ln in lns]), ""]
    parts += [
        "## Claims",
        "",
        "Each claim is the paper's sentence; each part of it is judged on its own, with the test behind the "
        "verdict. The whole claim is *confirmed* when every part is, *refuted* when a part is (*in part* "
        "when others are not), *untested* when no part has runs, else *inconclusive*.",
        "",
    ]
    parts += claim_parts
    parts += _provenance(records)
    parts += _awaiting(records, roots)
    parts += ["## Records left out of the evidence", ""]
    if ev.left_out:  # left out of the evidence (load_records) and of single counts (Evidence)
        parts += [
            "A record with a non-finite metric, without metrics, unreadable, resumed in another precision, or "
            "repeating another record's configuration and seed counts for nothing; a record left out of one "
            "count only says which. Each is named here.",
            "",
            _table(
                ["record", "why"], [[f"`{_shown(lo.path, roots)}`", _shown(lo.reason, roots)] for lo in ev.left_out]
            ),
            "",
        ]
    else:
        parts += ["None.", ""]
    return "\n".join(parts).rstrip() + "\n"


def summary_counts(roots) -> dict:
    """The counts behind the README's line: trained-result rows by their primary status and
    claim parts by verdict."""
    records, analyses, left = load_records(roots)
    ev = Evidence(records, analyses, left)
    rows = Counter()
    jobs: dict[str, Missing] = {}
    affordable = 0
    for r in ROWS:
        if r.kind != "trained":
            continue
        rows[status_kind(_row_lines(r, ev)[0][8])] += 1
        m = row_missing(r, ev)
        if m is not None and m.cpu is not None and m.run_s() <= AFFORDABLE_HOURS * 3600:
            affordable += 1
            jobs[m.preset] = m
    _, claims = _claims(ev)
    cpu_s = sum(m.total_s() for m in jobs.values())
    return {"rows": rows, "claims": claims, "affordable": affordable, "affordable_s": cpu_s}


SUMMARY_WORDS = {
    "reproduced": "reproduced at full budget",
    "not reproduced": "not reproduced",
    "inconclusive": "inconclusive (too few seeds, or our seed spread and the test on the test set disagree)",
    "not comparable": "not comparable (reduced budget or another configuration)",
    "curves only": "curves judged by the claims",
    "metric not recorded": "with the metric not recorded",
    "not run yet": "not run yet",
    "no preset": "without a preset",
}


def summary_line(roots, link: str = "REPRODUCTION.md") -> str:
    """One sentence on what the ledger shows (the README's, kept by ``docsync``): every
    trained-result row by the status of its primary line, every claim part by its verdict."""
    c = summary_counts(roots)
    r, k = c["rows"], c["claims"]
    rows = ", ".join(
        f"{r[s]} {SUMMARY_WORDS[s]}"
        for s in STATUS_KINDS
        if r[s] or s in ("reproduced", "not reproduced", "inconclusive")
    )
    words = {
        OTHER_PROTOCOL: "confirmed or refuted only at another protocol than the paper's",
        NOT_REPRODUCED: "not reproduced in the settings of ours tried (the paper leaves them open)",
        DEPENDS: "depending on how a line of ours is read (solved, at chance, about half, the budget)",
    }
    kinds = (
        "confirmed",
        "refuted",
        NOT_REPRODUCED,
        DEPENDS,
        OTHER_PROTOCOL,
        "inconclusive",
        NOT_APPLICABLE,
        "untested",
    )
    parts = ", ".join(f"{k[v]} {words.get(v, v)}" for v in kinds if k[v])
    # the link's text is its file name (the README links absolutely: it is the wheel's description)
    return (
        f"**Reproduction** ([{link.rsplit('/', 1)[-1]}]({link})): of the papers' {sum(r.values())} trained results, {rows}; "
        f"{c['affordable']} more affordable on this machine in {hours(c['affordable_s'])} CPU-hours (runs of at most "
        f"{AFFORDABLE_HOURS:g} CPU-hours each, `rnnlab reproduce plan`); "
        f"of the {sum(k.values())} parts of their claims, {parts}."
    )


# --- collecting runs -------------------------------------------------------------------------
#: public names that moved out of this module (importable from here with a DeprecationWarning)
MOVED = {"RECORD_FILES": "rnnlab.rundir:RunFiles.RECORD"}


def __getattr__(name: str):
    return moved_attribute(__name__, MOVED, name)


def _key_and_seed(d: Path):

    from ..rundir import saved_key

    try:
        seed = RunFiles(d).read_result().get("seed")
    except (OSError, ValueError, AttributeError):
        seed = None
    return saved_key(d), seed


def _half_copied(dest: Path, src: Path) -> bool:
    """Whether ``dest`` holds a copy of ``src``'s record that stopped part way (a copy by a
    version of ``collect`` that did not write atomically, or by hand): every record file in
    ``dest`` is a beginning of ``src``'s, and one is shorter or missing."""
    from ..rundir import StoredFileDamaged, read_stored

    complete = True
    for path in RunFiles(src).record():
        if RunFiles(dest).stored(path.name) is None:
            complete = False
            continue
        try:  # either form on either side: a record stores metrics.jsonl compressed
            have, want = read_stored(dest / path.name), read_stored(path)
        except StoredFileDamaged:  # not a beginning of anything: the same run is copied again
            return False
        if not want.startswith(have):
            return False
        complete = complete and have == want
    return not complete


def collect(runs_dir, out_dir) -> list[Path]:
    """Copy the small files of every finished run below ``runs_dir`` (config.json, result.json,
    metrics.jsonl and an analysis record, analysis.json; never checkpoints) to the same relative
    place below ``out_dir``, each file atomically (a temporary file, then a rename) and
    ``result.json`` last, so a record is never seen half-copied; the files of
    ``RunFiles.COMPRESSED`` go in their stored form (``metrics.jsonl.cols.xz``,
    ``config.json.xz``, ``task.json.xz``, ``result.json.xz``: ``rundir.write_stored``), each read
    back and compared, and a copy in another form an earlier collect left there is removed. A place that holds a record of
    another configuration or seed is never overwritten: the run goes beside it, into
    ``<place>-<config key>``, with a note; one that holds a half-copied record of this same run
    is completed, with a note. Records are ``<preset>/seed<k>``: given one preset's folder (or
    one run's), its runs keep their preset's folder name below ``out_dir``."""
    from ..config import ConfigError
    from ..rundir import atomic_copy, plain_name, read_stored, write_stored

    runs_dir, out_dir = Path(runs_dir), Path(out_dir)
    if not runs_dir.exists():
        from ..rundir import NoSuchPath

        raise NoSuchPath(f"no such runs directory: {runs_dir}")
    if out_dir.resolve() == runs_dir.resolve():
        raise ConfigError(
            f"collect copies runs into another folder, but -o {out_dir} is the runs directory itself; "
            f"give a records folder, e.g. -o records"
        )
    copied = []
    for p in RunFiles.outcomes(runs_dir):  # finished runs, and those stopped by divergence
        src = p.parent
        rel = src.relative_to(runs_dir)
        if len(rel.parts) < 2:  # runs_dir is a preset's folder or a run: keep the preset's name
            rel = src.relative_to(src.parent.parent)
        dest = out_dir / rel
        if RunFiles(dest).has(RunFiles.RESULT) and _half_copied(dest, src):
            log.warning(f"{dest} holds a half-copied record of {src}; completing it")
        elif RunFiles(dest).has(RunFiles.RESULT) and _key_and_seed(dest) != _key_and_seed(src):
            key = _key_and_seed(src)[0] or "nokey"
            alt = dest.with_name(f"{dest.name}-{key[:8]}")
            log.warning(
                f"{dest} holds a record of another configuration or seed; {src} goes to {alt} instead "
                f"(nothing overwritten)"
            )
            dest = alt
            if RunFiles(dest).has(RunFiles.RESULT) and _key_and_seed(dest) != _key_and_seed(src):
                if not _half_copied(dest, src):
                    raise FileExistsError(f"{dest} also holds another record; move one of them by hand")
        dest.mkdir(parents=True, exist_ok=True)
        for path in RunFiles(src).record():  # result.json last
            name = plain_name(path).name
            if name in RunFiles.COMPRESSED:
                write_stored(dest / name, read_stored(path))
                (dest / name).unlink(missing_ok=True)  # a plain copy by an earlier collect
            else:
                atomic_copy(path, dest / name)
        copied.append(dest)
    return copied


@dataclass(frozen=True)
class Compacted:
    """One file ``compact`` converted: its plain path and its sizes in bytes before and after."""

    path: Path
    before: int
    after: int


def compact(records_dir) -> tuple[list[Compacted], list[str]]:
    """Store every record file below ``records_dir`` in its stored form (``RunFiles.COMPRESSED``:
    ``metrics.jsonl`` in columns, ``metrics.jsonl.cols.xz``; ``config.json``, ``task.json`` and
    ``result.json`` xz-compressed), in place, from the plain form or from the earlier
    ``metrics.jsonl.xz``: each new file is written atomically, read back and compared with what
    it replaces before that is removed (keeping its modification time), so an interruption
    leaves every record readable (at worst in two forms, which the next run settles). A
    ``metrics.jsonl.xz`` the columns cannot give back byte for byte, or hold in fewer bytes,
    stays as it is. A second run
    converts nothing. A run directory with a ``checkpoint.pt`` is a live run (``rnnlab train
    --resume`` appends to its plain ``metrics.jsonl``): it is left as it is and named in the
    notes. A damaged stored file stops it (:class:`~rnnlab.rundir.StoredFileDamaged`, naming the
    file and the fix; what was converted before stays converted). Returns the files converted
    and the notes."""
    import os

    from ..rundir import (
        COLS,
        STORED_SUFFIXES,
        NoSuchPath,
        StoredFileDamaged,
        read_stored,
        stored,
        stored_form,
        write_stored,
    )

    root = Path(records_dir)
    if not root.is_dir():
        raise NoSuchPath(f"no such records directory: {root}; give the folder of run records, e.g. records")
    done, notes, live = [], [], set()
    for name in RunFiles.COMPRESSED:
        found = {p.parent for p in root.rglob(name) if p.is_file()}
        for suffix in STORED_SUFFIXES:
            found |= {p.parent for p in root.rglob(name + suffix) if p.is_file()}
        for d in sorted(found):
            if RunFiles(d).checkpoint.exists():
                live.add(d)
                continue
            plain = d / name
            forms = [f for f in (plain, *(d / (name + s) for s in STORED_SUFFIXES)) if f.is_file()]
            if len(forms) == 1 and (forms[0].name.endswith(COLS) or (forms[0] != plain and name != RunFiles.METRICS)):
                continue  # stored already (only an earlier metrics.jsonl.xz may still go into columns)
            source = stored(plain)  # what readers read until now: the plain file where there is one
            data = read_stored(source)  # a damaged one stops here: StoredFileDamaged names it and the fix
            target, packed = stored_form(plain, data)
            if forms == [target]:
                continue  # stored already
            for other in forms:
                if other != source:  # left by an interrupted compact, or a copy by hand
                    try:
                        same = read_stored(other) == data
                    except StoredFileDamaged:
                        same = False
                    if not same:  # readers saw the source: it wins
                        notes.append(
                            f"{other} differed from {source.name} beside it (read until now): rewritten from it"
                        )
            before = source.stat()
            written = write_stored(plain, data, (target, packed))  # atomic; read back, compared; other forms removed
            os.utime(written, ns=(before.st_atime_ns, before.st_mtime_ns))
            plain.unlink(missing_ok=True)
            done.append(Compacted(plain, before.st_size, written.stat().st_size))
    notes += [f"{d}: a live run directory (it has checkpoint.pt): left plain" for d in sorted(live)]
    return done, notes


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())


def main_compact(records_dir) -> int:
    """``rnnlab reproduce compact [RECORDS_DIR]``: :func:`compact`, then what it converted (per
    top-level folder) and the sizes before and after."""
    root = Path(records_dir)
    total_before = _tree_bytes(root) if root.is_dir() else 0
    done, notes = compact(root)
    for n in notes:
        log.warning(n)
    mb = lambda n: f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"  # noqa: E731
    if not done:
        live = sum("a live run directory" in n for n in notes)
        kept = f" (but {live} live run directories, left plain)" if live else ""
        print(
            f"nothing to compact below {root}: its record files are stored compressed{kept}; {mb(total_before)} in all"
        )
        return 0
    folders: dict[str, list[Compacted]] = defaultdict(list)
    for c in done:
        rel = c.path.relative_to(root)
        folders[rel.parts[0] if len(rel.parts) > 1 else "."].append(c)
    for folder, cs in sorted(folders.items()):
        b, a = sum(c.before for c in cs), sum(c.after for c in cs)
        print(f"  {root / folder}: {len(cs)} files, {mb(b)} -> {mb(a)}")
    b, a = sum(c.before for c in done), sum(c.after for c in done)
    counts = {n: sum(c.path.name == n for c in done) for n in RunFiles.COMPRESSED}
    print(
        f"compacted {len(done)} files below {root} ({', '.join(f'{k} {n}' for n, k in counts.items() if k)}): "
        f"{mb(b)} -> {mb(a)}; all files below it: {mb(total_before)} -> {mb(_tree_bytes(root))}"
    )
    return 0


def main_ledger(roots, output: str | None) -> int:
    text = ledger(roots)
    if output:
        Path(output).write_text(text)
        print(f"wrote {output}")
    else:
        print(text, end="")
    return 0
