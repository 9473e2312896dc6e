"""A rule's finding and its verdict (the ledger's classes), a claim and its parts, the runs a rule
chooses, and the primitive tests (a level, a band, a comparison): see :mod:`rnnlab.ledger.claims`.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from .declared import declared_points, sweep_points
from .published import OURS_PROTOCOL, PAPER_PROTOCOL, PROTOCOLS, VARIANTS, at_other_protocols, protocol
from .stats import (
    ALPHA,
    MIN_SAMPLE,
    counted,
    fmt_p,
    mean_interval,
    two_proportions,
    welch,
    wilson,
)

UNTESTED, CONFIRMED, REFUTED, INCONCLUSIVE = "untested", "confirmed", "refuted", "inconclusive"
NOT_APPLICABLE = "not applicable"
#: a claim that something works, not seen in any of the settings of ours that were tried (the
#: paper's text and code leave them open): never "refuted" (``OPEN_SETTINGS``)
NOT_REPRODUCED = "not reproduced"
#: a verdict whose class changes within the range of a line we drew ourselves ("solved" at
#: recall 0.9 / 0.95 / 0.99, "at chance", "about half", half or all of the step budget)
DEPENDS = "depends on reading"
#: settings of ours over which a claim that something fails, or a comparison, may be confirmed
#: (or a comparison refuted): a declared sweep of at least this many
SWEEP_MIN = 3
#: the class of a verdict confirmed or refuted on runs at a protocol other than the paper's
OTHER_PROTOCOL = "other protocol"
HOLDS, FAILS, UNDECIDED = "holds", "fails", "undecided"

#: seeds per model a verdict needs (or the paper's own count where it ran fewer)
FEW_SEEDS = 3


@dataclass
class Finding:
    """What the runs show for one part of a claim."""

    outcome: str  # HOLDS, FAILS, UNDECIDED or UNTESTED
    text: str  # the values, and the test with its p-value or interval
    groups: tuple = ()  # the groups of runs it rests on
    tested: bool = True  # a test (p-value or interval) stands behind the outcome
    why: str = ""  # UNDECIDED: what leaves it open
    analyses: tuple = ()  # analysis records it rests on
    steps_short: str = ""  # analyses: a budget shortfall ("2,300 of 4,000 steps")


def negated(f: Finding) -> Finding:
    """``f`` with its outcome turned over (holds <-> fails; undecided and untested stay), its
    evidence kept: the finding of the claim that ``f``'s does not hold."""
    return replace(f, outcome={HOLDS: FAILS, FAILS: HOLDS}.get(f.outcome, f.outcome))


def untested(*presets: str) -> Finding:
    return Finding(UNTESTED, "needs runs of " + ", ".join(f"`{p}`" for p in presets))


def needed(paper_runs: int) -> int:
    """Seeds per model a verdict needs: ``FEW_SEEDS``, or the paper's count when smaller."""
    return min(FEW_SEEDS, paper_runs) if paper_runs else FEW_SEEDS


def _variant(preset: str) -> str:
    return VARIANTS[preset][1] if preset in VARIANTS else ""


def _head(v: str) -> str:
    """A verdict's class and protocol words, without its reasons: "refuted", "confirmed as
    released (code protocol); refuted with the text's settings (paper protocol)"."""
    return (
        "; ".join(
            part.split(" (", 1)[0] + (" (" + part.split(" (", 1)[1] if "protocol)" in part else "")
            for part in v.split("; ")
            if part
        )
        if " as released" in v
        else v.split(" (", 1)[0]
    )


def protocols_of(f: Finding, native: str = PAPER_PROTOCOL) -> list[str]:
    """The protocols other than the paper's (and ``native``'s) of the runs and analyses a
    finding rests on."""
    presets = [g.preset for g in f.groups] + [a.preset for a in f.analyses]
    return sorted({protocol(p) for p in presets} - {PAPER_PROTOCOL, native})


def verdict(f: Finding, need: int, any_setting: bool = False, native: str = PAPER_PROTOCOL) -> str:
    """The ledger's verdict class for a finding (see the module's docstring). ``any_setting``:
    the claim holds "for any hyperparameters", which one setting cannot confirm (it can refute).
    ``native``: the protocol the verdict is judged at besides the paper's (its runs are not
    labelled "at another protocol")."""
    if f.outcome == UNTESTED:
        return UNTESTED
    reasons = []
    for g in f.groups:
        if g.budget:
            keys = sorted({d.split(" with ")[-1].split(" ")[0] for d in g.budget})
            reasons.append(f"reduced budget: `{g.preset}` {', '.join(keys)}")
        if g.other:
            keys = sorted({d.split(" ")[0] for d in g.other})
            reasons.append(f"another configuration: `{g.preset}` {', '.join(keys)}")
    if f.steps_short:
        reasons.append(f"reduced budget: {f.steps_short}")
    counts = [len(g.records) for g in f.groups] + [len(a.data.get("seeds", [])) or 1 for a in f.analyses]
    n = min(counts) if counts else 0
    if n < need:
        reasons.append(f"{counted(n, 'seed')} of the {need} needed")
    if not f.tested:
        reasons.append("no test possible")
    if f.outcome == UNDECIDED and f.why:
        reasons.append(f.why)
    if any_setting and f.outcome == HOLDS:
        reasons.append("one setting tested of a claim for any hyperparameters")
    protos = protocols_of(f, native)
    at = f" at the {' and '.join(protos)} protocol" if protos else ""
    variants = sorted({p for p in [g.preset for g in f.groups] + [a.preset for a in f.analyses] if _variant(p)})
    label = "; ".join(f"variant `{p}`: {_variant(p)}" for p in variants)
    if reasons:
        lean = {HOLDS: "; so far the runs agree", FAILS: "; so far the runs disagree"}.get(f.outcome, "")
        return (
            f"{INCONCLUSIVE} ({'; '.join(reasons)}{lean}"
            + (f"; runs{at}" if at else "")
            + (f"; {label}" if label else "")
            + ")"
        )
    out = CONFIRMED if f.outcome == HOLDS else REFUTED
    return out + at + (f" with a variant ({label})" if label else "")


def verdict_kind(v: str) -> str:
    """The class a verdict counts in: *confirmed* / *refuted* only at the paper's protocol (at
    another: ``OTHER_PROTOCOL``), else its first word (*not applicable* whole)."""
    if v.startswith(NOT_APPLICABLE):
        return NOT_APPLICABLE
    if v.startswith(NOT_REPRODUCED):
        return NOT_REPRODUCED
    if v.startswith(DEPENDS):
        return DEPENDS
    kind = v.split(" ", 1)[0]
    if kind in (CONFIRMED, REFUTED) and v.split(" (", 1)[0].split(" with a variant", 1)[0].endswith(" protocol"):
        return OTHER_PROTOCOL
    return kind


@dataclass(frozen=True)
class Part:
    text: str
    rule: Callable  # (Evidence) -> Finding
    any_setting: bool = False  # the paper says it holds "for any hyperparameters"
    #: what the part says, for runs at settings of ours (``OPEN_SETTINGS``): "works" (confirmed by
    #: one setting, else not reproduced), "fails" (not reproduced at a setting where it works, never
    #: refuted by settings of ours alone unless ``any_setting``; confirmed over a sweep) or "compares"
    #: (confirmed or refuted over a sweep)
    says: str = "compares"
    #: a claim "for any hyperparameters": the declared sweep (``rnnlab.ledger.declared``) over which
    #: alone it can be confirmed ("" for none: then over ``SWEEP_MIN`` settings tried)
    sweep: str = ""


class Asking:
    """The evidence as a rule sees it, noting every preset it asks for (in order)."""

    def __init__(self, ev):
        self.ev, self.asked = ev, []
        outer = self

        class _Analyses(dict):
            def get(self, key, default=None):
                outer.asked.append(key)
                return ev.analyses.get(key, default)

        self.analyses = _Analyses()

    def best(self, preset):
        self.asked.append(preset)
        return self.ev.best(preset)

    def pooled(self, preset):
        self.asked.append(preset)
        return self.ev.pooled(preset)

    def groups(self, preset, same_config: bool = True):
        self.asked.append(preset)
        return self.ev.groups(preset, same_config)


class AtCode:
    """The evidence as the authors' released code runs the experiments: a paper preset with a
    code-protocol preset (``PROTOCOLS``) is read as that preset, a paper preset without one as
    itself (the code runs it as the text does), and nothing else (no short protocol, no
    variants): its verdicts are the claims' as released."""

    def __init__(self, ev):
        self.ev = ev
        self.analyses = ev.analyses
        self.code = {base: p for p, (base, proto, _) in PROTOCOLS.items() if proto == "code" and base}

    def _at(self, preset: str) -> str | None:
        if preset in self.code:
            return self.code[preset]
        return preset if protocol(preset) in (PAPER_PROTOCOL, "code") and preset not in VARIANTS else None

    def best(self, preset):
        p = self._at(preset)
        return None if p is None else self.ev.best(p)

    def pooled(self, preset):
        p = self._at(preset)
        return None if p is None else self.ev.pooled(p)

    def groups(self, preset, same_config: bool = True):
        p = self._at(preset)
        return [] if p is None else self.ev.groups(p, same_config)


class AtPaper:
    """The evidence as the text's settings run the experiments: the runs of every preset but the
    code-protocol ones (a rule that finds no paper-protocol runs may still take the short
    protocol's or a variant's, and names them; never the released code's, which the headline
    verdict already reads)."""

    def __init__(self, ev):
        self.ev = ev
        self.analyses = ev.analyses

    def _ok(self, preset: str) -> bool:
        return protocol(preset) != "code"

    def best(self, preset):
        return self.ev.best(preset) if self._ok(preset) else None

    def pooled(self, preset):
        return self.ev.pooled(preset) if self._ok(preset) else None

    def groups(self, preset, same_config: bool = True):
        return self.ev.groups(preset, same_config) if self._ok(preset) else []


class OneSetting:
    """The evidence with each of some presets read at one of its settings (one group of runs)."""

    def __init__(self, ev, choice: dict):
        self.ev, self.choice, self.analyses = ev, choice, ev.analyses

    def best(self, preset):
        return self.choice[preset] if preset in self.choice else self.ev.best(preset)

    pooled = best

    def groups(self, preset, same_config: bool = True):
        return [self.choice[preset]] if preset in self.choice else self.ev.groups(preset, same_config)


def _reduced(g) -> list[str]:
    """A group's budget differences that make it a smaller experiment than its preset (fewer
    steps, a shorter sequence): a longer step budget is one more setting of ours."""
    out = []
    for d in g.budget:
        m = re.fullmatch(r"train\.steps (\d+) \(preset (\d+)\)", d)
        if not (m and int(m.group(1)) > int(m.group(2))):
            out.append(d)
    return out


def _setting_label(g) -> str:
    """A setting of ours: the preset's own, or how it differs from it."""
    kept = [d for d in g.diffs if d not in _reduced(g)]
    return "; ".join(kept) if kept else "the preset's own"


def judge_over_settings(part: Part, ev, need: int, view=None, native: str = OURS_PROTOCOL) -> tuple[str, Finding]:
    """A part judged over every setting tried: each group of runs of its presets at full budget
    (the preset's own settings, a grid point, a longer budget) is one setting, the part is judged
    at each, and ``part.says`` decides (see :class:`Part`). Used for runs at settings of ours
    (``native`` = ``OURS_PROTOCOL``: the paper leaves them open) and for a claim "for any
    hyperparameters" (``part.any_setting``: it says something fails, in every setting), seen
    through ``view`` (``AtCode`` for the code protocol). Returns the verdict and the finding
    shown (the deciding setting's, or the first)."""
    view = view or (lambda e: e)
    ask = Asking(ev)
    part.rule(view(ask))
    asked = list(dict.fromkeys(ask.asked))
    presets = [p for p in asked if protocol(p) == OURS_PROTOCOL] if native == OURS_PROTOCOL else asked
    says = "fails" if part.any_setting else part.says
    by_diffs: dict[tuple, dict] = {}
    for p in presets:
        gs = ev.groups(p, same_config=False)
        full = [g for g in gs if not _reduced(g)]  # a setting is judged at its full budget where it has one
        for g in full or gs:
            by_diffs.setdefault(tuple(d for d in g.diffs if d not in _reduced(g)), {})[p] = g
    settings = [(d, c) for d, c in sorted(by_diffs.items()) if len(c) == len(presets)]
    if not settings:
        f = part.rule(view(ev))
        return verdict(f, need, part.any_setting, native), f
    judged = []
    for _d, choice in settings:
        # the grid point's own settings are what is judged, not "another configuration"
        at = {p: type(g)(g.preset, tuple(_reduced(g)), g.records) for p, g in choice.items()}
        f = part.rule(view(OneSetting(ev, at)))
        judged.append((_setting_label(next(iter(choice.values()))), verdict(f, need, False, native), f))
    n = len(judged)
    ours = native == OURS_PROTOCOL
    tried = f"{counted(n, 'setting')}{' of ours' if ours else ''} tried"
    kinds = [verdict_kind(v) for _, v, _ in judged]
    listing = "; ".join(f"{label}: {v.split(' (', 1)[0]}" for label, v, _ in judged)
    if says == "works":
        for (label, _v, f), k in zip(judged, kinds):
            if k == CONFIRMED:
                return f"{CONFIRMED} (setting: {label}; {tried})", f
        if all(k == REFUTED for k in kinds):
            note = _sweep_note(part, presets, ev)
            return f"{NOT_REPRODUCED} in the {tried} ({listing}; the paper's settings are open{note})", judged[0][2]
        reasons = "; ".join(v for _, v, _ in judged if verdict_kind(v) != REFUTED)
        return f"{INCONCLUSIVE} (not reproduced so far in the {tried}: {reasons})", judged[0][2]
    if says == "fails":
        for (label, _v, f), k in zip(judged, kinds):
            if k == REFUTED and ours and not part.any_setting:
                # the paper saw it fail at its own settings, which it leaves open: a setting of ours where
                # it works does not show the paper wrong, only that its failure is not reproduced there
                return f"{NOT_REPRODUCED} in the {tried} ({listing}; the paper's settings are open)", f
            if k == REFUTED:
                return f"{REFUTED} (setting: {label}; {tried})", f
        if part.sweep and set(presets) <= set(sweep_points(part.sweep)):
            return over_declared_sweep(part.sweep, presets, settings, judged, tried, listing, ev)
    if all(k == kinds[0] for k in kinds) and kinds[0] in (CONFIRMED, REFUTED) and n >= SWEEP_MIN:
        if kinds[0] == CONFIRMED or says == "compares":
            return f"{kinds[0]} (over the {tried}: {listing})", judged[0][2]
    lean = "holds" if all(k == CONFIRMED for k in kinds) else "mixed"
    return (
        f"{INCONCLUSIVE} (settings{' of ours' if ours else ''}: {listing}; {lean} in the {tried}, "
        f"and a verdict needs a declared sweep of {SWEEP_MIN} or more)",
        judged[0][2],
    )


def _asks_ours(part: Part, ev) -> bool:
    """Whether ``part``'s rule asks for a preset whose settings are ours (``OPEN_SETTINGS``)."""
    ask = Asking(ev)
    part.rule(ask)
    return any(protocol(p) == OURS_PROTOCOL for p in ask.asked)


def _sweep_note(part: Part, presets, ev) -> str:
    """For a claim that something works, not reproduced so far: how much of its declared sweep
    the records hold ("" without one)."""
    if not part.sweep or not set(presets) <= set(sweep_points(part.sweep)):
        return ""
    points, why = declared_points(part.sweep, ev, presets)
    if why:
        return f"; declared sweep `{part.sweep}`: {why}"
    have = {g.diffs for p in presets for g in ev.groups(p, same_config=False) if len(g.records) >= FEW_SEEDS}
    wanted = [d for p in presets for d, _n in points.get(p, ())]
    return f"; declared sweep `{part.sweep}`: {sum(d in have for d in wanted)} of its {len(wanted)} settings run"


def over_declared_sweep(name: str, presets, settings, judged, tried: str, listing: str, ev=None) -> tuple[str, Finding]:
    """A claim that something fails "for any hyperparameters", none of whose settings refutes it,
    judged over its declared sweep ``name``: confirmed when every grid point of the sweep (of a
    staged sweep: every point its rule promotes from the screening runs of ``ev``), for each of
    ``presets``, is among the ``settings`` tried and confirms it; else inconclusive, saying how
    much of the sweep is still to run or undecided."""
    points, why = declared_points(name, ev, presets) if ev is not None else (sweep_points(name), "")
    if why:
        lean = "holds" if all(verdict_kind(v) == CONFIRMED for _l, v, _f in judged) else "mixed"
        return (
            f"{INCONCLUSIVE} (settings: {listing}; {lean} in the {tried}; confirmed only over the points the "
            f"declared sweep `{name}` promotes: {why})",
            judged[0][2],
        )
    at = {d: v for (d, _c), (_l, v, _f) in zip(settings, judged)}
    if not any(points.get(p) for p in presets):
        return (
            f"{INCONCLUSIVE} (settings: {listing}; the declared sweep `{name}` took no point on: every screening "
            f"point diverged or has no finite score)",
            judged[0][2],
        )
    seeds = max(n for p in presets for _d, n in points[p])
    declared = list(dict.fromkeys(d for p in presets for d, _n in points[p]))
    missing = [d for d in declared if d not in at]
    undecided = [d for d in declared if d in at and verdict_kind(at[d]) != CONFIRMED]
    size = f"the declared sweep `{name}` ({counted(len(declared), 'setting')} x {seeds} seeds)"
    if not missing and not undecided:
        return f"{CONFIRMED} (over {size}; {tried}: {listing})", judged[0][2]
    open_ = [f"{counted(len(missing), 'setting')} not run yet"] if missing else []
    open_ += [f"{len(undecided)} undecided"] if undecided else []
    lean = "holds" if all(verdict_kind(v) == CONFIRMED for _l, v, _f in judged) else "mixed"
    return (
        f"{INCONCLUSIVE} (settings: {listing}; {lean} in the {tried}; confirmed only over {size}: {', '.join(open_)})",
        judged[0][2],
    )


@dataclass(frozen=True)
class Claim:
    paper: str
    where: str  # "Fig. 3", "Sec. 5.2"
    text: str  # the paper's sentence, whole
    parts: tuple[Part, ...]
    runs: int = 0  # the paper's runs per model behind it (0: not stated)
    ours: bool = False  # our own finding, not the paper's
    premise: Part | None = None  # a theorem's premise: where it fails, the theorem predicts nothing
    #: the protocol that produced the paper's figures, whose verdict heads each part: "paper", or
    #: "code" where the authors' released code ran them (the text's verdict is shown beside it)
    headline: str = PAPER_PROTOCOL

    def judge(self, ev) -> list[tuple[str, str, Finding]]:
        """``(part, verdict, finding)`` for each part; with a premise, its own line first, and
        every part *not applicable* when the runs show that it fails."""
        need = needed(self.runs)
        out = []
        if self.premise is not None:
            f = self.premise.rule(ev)
            if f.outcome == FAILS:
                why = f"{NOT_APPLICABLE} (premise fails: {f.why or self.premise.text})"
                return [(f"premise: {self.premise.text}", why, f)] + [(p.text, why, f) for p in self.parts]
            out.append((f"premise: {self.premise.text}", verdict(f, need), f))
        return out + [(p.text, *self.judge_part(p, ev, need)) for p in self.parts]

    def judge_part(self, p: Part, ev, need: int) -> tuple[str, Finding]:
        """One part's verdict and finding (:meth:`judge_reading`) at the line we drew, and at
        each other reading of it (``rule.readings``): a verdict whose class differs between
        readings (confirmed under one, refuted or not reproduced under another) is "depends on
        reading (...)", with each reading's verdict."""
        v, f = self.judge_reading(p, ev, need)
        readings = getattr(p.rule, "readings", ())
        if not readings or verdict_kind(v) == UNTESTED:
            return v, f
        alts = [
            (label, self.judge_reading(Part(p.text, rule, p.any_setting, p.says, p.sweep), ev, need)[0])
            for label, rule in readings
        ]
        # a flip between decisive classes; a reading under which the runs cannot decide (an
        # inconclusive) does not make the verdict depend on it
        kinds = ({verdict_kind(v)} | {verdict_kind(av) for _, av in alts}) & {CONFIRMED, REFUTED, NOT_REPRODUCED}
        if len(kinds) <= 1:
            return v, f
        shown = "; ".join(f"{label}: {_head(av)}" for label, av in alts)
        return f"{DEPENDS} ({p.rule.reading}: {v}; {shown})", f

    def judge_reading(self, p: Part, ev, need: int) -> tuple[str, Finding]:
        """One part's verdict and finding: at the headline protocol (the one that produced the
        paper's figures), with the other beside it; over the settings tried where they are ours."""
        if self.headline == "code":
            if p.any_setting:  # "for any hyperparameters": over the settings tried, at each protocol
                vc, fc = judge_over_settings(p, ev, need, AtCode, "code")
                vp, fp = judge_over_settings(p, ev, need, AtPaper, PAPER_PROTOCOL)
            else:
                fc, fp = p.rule(AtCode(ev)), p.rule(AtPaper(ev))
                vc, vp = verdict(fc, need, p.any_setting, "code"), verdict(fp, need, p.any_setting)
            text = f"as released: {fc.text} / with the text's settings: {fp.text}"
            f = Finding(fc.outcome, text, fc.groups + fp.groups, fc.tested, fc.why, fc.analyses + fp.analyses)
            if vc == vp == UNTESTED:
                return UNTESTED, f
            return f"{vc} as released (code protocol); {vp} with the text's settings (paper protocol)", f
        f = p.rule(ev)
        if any(protocol(g.preset) == OURS_PROTOCOL for g in f.groups) or (f.outcome == UNTESTED and _asks_ours(p, ev)):
            # also where only runs at other settings than the preset's own are in the records (a grid's)
            return judge_over_settings(p, ev, need)
        return verdict(f, need, p.any_setting), f

    def overall(self, judged) -> str:
        kinds = [verdict_kind(v) for _, v, _ in judged]
        if all(k == UNTESTED for k in kinds):
            return UNTESTED
        if NOT_APPLICABLE in kinds:
            return NOT_APPLICABLE
        if REFUTED in kinds:
            return REFUTED + (" in part" if any(k != REFUTED for k in kinds) else "")
        if NOT_REPRODUCED in kinds:
            return NOT_REPRODUCED + (" in part" if any(k != NOT_REPRODUCED for k in kinds) else "")
        if all(k == CONFIRMED for k in kinds):
            return CONFIRMED
        if OTHER_PROTOCOL in kinds:
            return INCONCLUSIVE + " (parts judged only at another protocol than the paper's)"
        return INCONCLUSIVE


def runs_text(f: Finding) -> str:
    """The runs a finding rests on: preset x seeds (steps; differences from the preset)."""
    out = []
    for g in f.groups:
        extra = f"; {'; '.join(g.diffs)}" if g.diffs else ""
        out.append(f"`{g.preset}` x{len(g.records)} ({g.steps()} steps{extra}{g.unverifiable()})")
    for a in f.analyses:
        out.append(f"analysis of `{a.preset}` ({a.data.get('source')})")
    return "; ".join(out) if out else "-"


# --- choosing the runs -----------------------------------------------------------------------
def _pick(ev, preset: str, pooled: bool = False, variants: bool = True):
    """The runs of ``preset`` (all budgets pooled, or the best group), else of the presets that
    run it at another protocol (code, then short), else (``variants``) of its named variants or
    theirs: a verdict on any of these says so."""
    protos = at_other_protocols(preset)
    alts = (
        sorted(v for v, (base, _) in VARIANTS.items() if base in (preset, *protos) and v not in protos)
        if variants
        else []
    )
    for p in [preset, *protos, *alts]:
        g = ev.pooled(p) if pooled else ev.best(p)
        if g is not None:
            return g
    return None


def _picks(ev, presets, pooled=False):
    gs = {p: _pick(ev, p, pooled) for p in presets}
    missing = [p for p, g in gs.items() if g is None]
    return gs, missing


# --- test items: the test set behind an accuracy ---------------------------------------------
def _task_default(task: str, option: str):
    from ..tasks import TASKS

    try:
        return inspect.signature(TASKS[task].__init__).parameters[option].default
    except (KeyError, ValueError, TypeError):
        return None


def test_items(g, metric: str) -> int | None:
    """How many test items an accuracy of this group's runs averages over (the copy tasks'
    recall: test sequences x K; pixel MNIST: the 10,000 test images), None where unknown."""
    cfg = g.records[0].config
    task, opts, tr = cfg["task"]["name"], cfg["task"].get("options", {}), cfg.get("train", {})
    if metric == "test/accuracy" and task in ("smnist", "psmnist"):
        n = 10000
    elif metric == "test/recall_accuracy" and task in ("copy", "copy_variable"):
        size = opts.get("test_size", _task_default(task, "test_size"))
        k = opts.get("K", _task_default(task, "K"))
        if not isinstance(size, int) or not isinstance(k, int):
            return None
        n = size * k
        per = tr.get("eval_batch_size", 0) * tr.get("eval_max_batches", 0)
        if per:
            n = min(n, per * k)
    else:
        return None
    return n


# --- primitive tests -------------------------------------------------------------------------
def _fmt(x: float) -> str:
    return f"{x:.4g}" if x == 0 or 1e-3 <= abs(x) < 1e4 else f"{x:.3g}"


def level(g, metric: str, bound: float, below: bool, what: str) -> Finding:
    """Whether ``metric`` lies below (``below``) or above ``bound``: the 95% interval of the mean
    over seeds (t), or with one run the accuracy's Wilson interval over its test items."""
    vals = g.values(metric)
    if not vals:
        return Finding(UNDECIDED, f"`{g.preset}`: {metric} not recorded", (g,), tested=False)
    mean = sum(vals) / len(vals)
    iv, how = mean_interval(vals), f"95% t interval over {len(vals)} seeds"
    if iv is None:
        n = test_items(g, metric)
        if n:
            iv, how = wilson(round(vals[0] * n), n), f"95% Wilson interval over {n:,} test items"
    side = "<" if below else ">="
    text = f"`{g.preset}` {metric} {_fmt(mean)}"
    if iv is None:
        return Finding(
            UNDECIDED,
            text + f" (needs {what}: {metric} {side} {_fmt(bound)}; one run, no interval)",
            (g,),
            tested=False,
        )
    text += f" [{_fmt(iv[0])}, {_fmt(iv[1])}] ({how}); {what}: {metric} {side} {_fmt(bound)}"
    lo_ok, hi_ok = (iv[1] < bound, iv[0] >= bound) if below else (iv[0] >= bound, iv[1] < bound)
    if lo_ok:
        return Finding(HOLDS, text, (g,))
    if hi_ok:
        return Finding(FAILS, text, (g,))
    return Finding(UNDECIDED, text, (g,), why=f"the interval straddles {_fmt(bound)}")


def within(g, metric: str, centre: float, rel: float, what: str) -> Finding:
    """Whether ``metric`` stays within ``rel`` of ``centre`` (the t interval of the mean)."""
    vals = g.values(metric)
    mean = sum(vals) / len(vals) if vals else math.nan
    iv = mean_interval(vals)
    lo, hi = centre * (1 - rel), centre * (1 + rel)
    text = f"`{g.preset}` {metric} {_fmt(mean)}"
    if iv is None:
        return Finding(
            UNDECIDED,
            text + f" (needs {what}: within [{_fmt(lo)}, {_fmt(hi)}]; one run, no interval)",
            (g,),
            tested=False,
        )
    text += f" [{_fmt(iv[0])}, {_fmt(iv[1])}] (95% t interval over {len(vals)} seeds); {what}: within [{_fmt(lo)}, {_fmt(hi)}]"
    if lo <= iv[0] and iv[1] <= hi:
        return Finding(HOLDS, text, (g,))
    if iv[1] < lo or iv[0] > hi:
        return Finding(FAILS, text, (g,))
    return Finding(UNDECIDED, text, (g,), why="the interval reaches outside the band")


def compare(ga, gb, metric: str, higher: bool) -> Finding:
    """Whether ``ga``'s ``metric`` is better (higher / lower) than ``gb``'s: Welch's one-sided t
    test over seeds, or with one run each the two-proportion z test over the test items."""
    va, vb = ga.values(metric), gb.values(metric)
    if not va or not vb:
        return Finding(UNDECIDED, f"{metric} not recorded", (ga, gb), tested=False)
    ma, mb = sum(va) / len(va), sum(vb) / len(vb)
    text = f"{metric}: `{ga.preset}` {_fmt(ma)}, `{gb.preset}` {_fmt(mb)}"
    p_fwd = p_rev = None
    how = ""
    if len(va) >= MIN_SAMPLE and len(vb) >= MIN_SAMPLE:
        a, b = (va, vb) if higher else ([-x for x in va], [-x for x in vb])
        p_fwd, p_rev, how = welch(a, b), welch(b, a), f"Welch t test over {len(va)} and {len(vb)} seeds"
    elif len(va) == 1 and len(vb) == 1:
        na, nb = test_items(ga, metric), test_items(gb, metric)
        if na and nb:
            ka, kb = round(ma * na), round(mb * nb)
            if not higher:
                ka, kb = na - ka, nb - kb
            p_fwd, p_rev = two_proportions(ka, na, kb, nb), two_proportions(kb, nb, ka, na)
            how = f"two-proportion z test over {na:,} and {nb:,} test items (one run each: test-set noise only)"
    if p_fwd is None:
        return Finding(UNDECIDED, text + f" ({len(va)} and {len(vb)} runs: no test)", (ga, gb), tested=False)
    text += f"; {how}, one-sided {fmt_p(p_fwd)} (reverse {fmt_p(p_rev)})"
    if p_fwd <= ALPHA:
        return Finding(HOLDS, text, (ga, gb))
    if p_rev <= ALPHA:
        return Finding(FAILS, text, (ga, gb))
    return Finding(UNDECIDED, text, (ga, gb), why="no significant difference")
