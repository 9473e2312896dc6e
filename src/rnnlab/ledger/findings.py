"""A rule's finding and its verdict (the ledger's classes), a claim and its parts, the runs a rule
chooses, and the primitive tests (a level, a band, a comparison): see :mod:`rnnlab.ledger.claims`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

from .published import PAPER_PROTOCOL, VARIANTS, at_other_protocols, protocol
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


def untested(*presets: str) -> Finding:
    return Finding(UNTESTED, "needs runs of " + ", ".join(f"`{p}`" for p in presets))


def needed(paper_runs: int) -> int:
    """Seeds per model a verdict needs: ``FEW_SEEDS``, or the paper's count when smaller."""
    return min(FEW_SEEDS, paper_runs) if paper_runs else FEW_SEEDS


def _variant(preset: str) -> str:
    return VARIANTS[preset][1] if preset in VARIANTS else ""


def protocols_of(f: Finding) -> list[str]:
    """The protocols other than the paper's of the runs and analyses a finding rests on."""
    presets = [g.preset for g in f.groups] + [a.preset for a in f.analyses]
    return sorted({protocol(p) for p in presets} - {PAPER_PROTOCOL})


def verdict(f: Finding, need: int, any_setting: bool = False) -> str:
    """The ledger's verdict class for a finding (see the module's docstring). ``any_setting``:
    the claim holds "for any hyperparameters", which one setting cannot confirm (it can refute)."""
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
    protos = protocols_of(f)
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
    kind = v.split(" ", 1)[0]
    if kind in (CONFIRMED, REFUTED) and v.split(" (", 1)[0].split(" with a variant", 1)[0].endswith(" protocol"):
        return OTHER_PROTOCOL
    return kind


@dataclass(frozen=True)
class Part:
    text: str
    rule: Callable  # (Evidence) -> Finding
    any_setting: bool = False  # the paper says it holds "for any hyperparameters"


@dataclass(frozen=True)
class Claim:
    paper: str
    where: str  # "Fig. 3", "Sec. 5.2"
    text: str  # the paper's sentence, whole
    parts: tuple[Part, ...]
    runs: int = 0  # the paper's runs per model behind it (0: not stated)
    ours: bool = False  # our own finding, not the paper's
    premise: Part | None = None  # a theorem's premise: where it fails, the theorem predicts nothing

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
        return out + [(p.text, verdict(f, need, p.any_setting), f) for p in self.parts for f in [p.rule(ev)]]

    def overall(self, judged) -> str:
        kinds = [verdict_kind(v) for _, v, _ in judged]
        if all(k == UNTESTED for k in kinds):
            return UNTESTED
        if NOT_APPLICABLE in kinds:
            return NOT_APPLICABLE
        if REFUTED in kinds:
            return REFUTED + (" in part" if any(k != REFUTED for k in kinds) else "")
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
