"""The papers' claims (and our own findings) as rules over run records.

A claim is the paper's whole sentence; each part of it is its own rule with its own verdict.
A rule reads only :class:`rnnlab.ledger.records.Evidence` and returns a :class:`Finding`: what
the runs show (*holds*, *fails* or *undecided*), the values and the statistical test behind it
(``rnnlab.ledger.stats``: its p-value or interval is part of the text), and the groups of runs.

``verdict`` turns a finding into one of the ledger's classes, and is the only place that does:

* *confirmed* / *refuted*: every group of runs at its preset's budget and configuration (a
  variant preset is named in the verdict), at least ``FEW_SEEDS`` seeds per model (or the
  paper's own count when smaller: asRNN's copy and MNIST runs use one seed), and a test;
* *confirmed / refuted at the X protocol*: the same on runs at a protocol other than the
  paper's (``published.PROTOCOLS``: the authors' released code, or a cheaper one of ours). Only
  paper-protocol runs can confirm or refute the paper: these count apart (``verdict_kind``);
* *inconclusive (reasons)*: otherwise (reduced budget, too few seeds, no significant
  difference, no test possible, one setting tested of a claim "for any hyperparameters"), with
  what the runs so far point to;
* *not applicable (premise fails: ...)*: a theorem whose premise does not hold on the runs
  makes no prediction there;
* *untested*: the runs the rule needs are not in the records.

A claim's overall verdict: *confirmed* when every part is, *refuted* when a part is
(*refuted in part* when another is not), *untested* when no part was tested, *not applicable*
when the premise fails, else *inconclusive*.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

from ..results import DMU_THRESHOLDS, median_epoch
from .published import PAPER_PROTOCOL, VARIANTS, at_other_protocols, protocol
from .stats import (
    ALPHA,
    binom_sf,
    clopper_pearson,
    fisher_one_sided,
    fmt_p,
    mann_whitney,
    mean_interval,
    newcombe,
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
        reasons.append(f"{n} seed{'s' if n != 1 else ''} of the {need} needed")
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
    if len(va) >= 2 and len(vb) >= 2:
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


# --- DMU's threshold protocol ----------------------------------------------------------------
HIGH = DMU_THRESHOLDS[:3]  # "high thresholds (up to 1e-4)"
LOW = DMU_THRESHOLDS[3:]


def _firsts(g, th: float) -> list[float]:
    """Each run's first epoch at ``th``; never = inf (later than any run that reached it)."""
    return [math.inf if e is None else float(e) for e in g.thresholds((th,))[th]]


def _reached(g, th: float) -> tuple[int, int]:
    eps = _firsts(g, th)
    return sum(math.isfinite(e) for e in eps), len(eps)


def _dmu(ev, task: str, modules):
    """Every run of the protocol counts, whatever the size of its evaluation sets."""
    return _picks(ev, [f"dmu/{task}-{m}" for m in modules], pooled=True)


def _profile(g) -> str:
    parts = []
    for th in DMU_THRESHOLDS:
        eps = [e for e in _firsts(g, th) if math.isfinite(e)]
        med = median_epoch(eps)
        parts.append(f"{th:.0e} {len(eps)}/{len(_firsts(g, th))}" + (f" (median ep {med:g})" if eps else ""))
    return f"`{g.preset}`: " + ", ".join(parts)


def _bonferroni(ps: list[float]) -> list[float]:
    return [min(1.0, p * len(ps)) for p in ps]


def dmu_ahead(task: str, a: str, b: str, thresholds=DMU_THRESHOLDS):
    """``a`` outperforms ``b``: its runs reach a threshold earlier or more often (one-sided
    Mann-Whitney on first epochs, never = inf; Bonferroni over the thresholds)."""

    def rule(ev):
        gs, missing = _dmu(ev, task, (a, b))
        if missing:
            return untested(*missing)
        ga, gb = gs[f"dmu/{task}-{a}"], gs[f"dmu/{task}-{b}"]
        fwd = _bonferroni([mann_whitney(_firsts(ga, t), _firsts(gb, t)) for t in thresholds])
        rev = _bonferroni([mann_whitney(_firsts(gb, t), _firsts(ga, t)) for t in thresholds])
        sig = [t for t, p in zip(thresholds, fwd) if p <= ALPHA]
        bad = [t for t, p in zip(thresholds, rev) if p <= ALPHA]
        text = (
            _profile(ga) + "; " + _profile(gb) + f"; Mann-Whitney on first epochs (never = later than all), "
            f"Bonferroni over {len(thresholds)} thresholds: {a} ahead {fmt_p(min(fwd))}, {b} ahead {fmt_p(min(rev))}"
        )
        if sig and not bad:
            return Finding(HOLDS, text, (ga, gb))
        if bad and not sig:
            return Finding(FAILS, text, (ga, gb))
        return Finding(
            UNDECIDED,
            text,
            (ga, gb),
            why="ahead at some thresholds, behind at others" if sig else "no significant difference",
        )

    return rule


#: "similar": the difference of the shares of runs reaching a threshold within +- this
SIMILAR_MARGIN = 0.2


def dmu_similar(task: str, a: str, b: str, thresholds=DMU_THRESHOLDS):
    """``a`` and ``b`` reach the thresholds about as often: at every threshold the 95% interval
    of the difference of their shares of runs reaching it (Newcombe) lies within
    +-``SIMILAR_MARGIN``; refuted when a Fisher exact test (two-sided, Bonferroni over the
    thresholds) finds a difference. No significant difference with wide intervals is no
    evidence of similarity: inconclusive."""

    def rule(ev):
        gs, missing = _dmu(ev, task, (a, b))
        if missing:
            return untested(*missing)
        ga, gb = gs[f"dmu/{task}-{a}"], gs[f"dmu/{task}-{b}"]
        ps, ivs = [], []
        for t in thresholds:
            (ka, na), (kb, nb) = _reached(ga, t), _reached(gb, t)
            ps.append(min(1.0, 2 * min(fisher_one_sided(ka, na, kb, nb), fisher_one_sided(kb, nb, ka, na))))
            ivs.append(newcombe(ka, na, kb, nb))
        ps = _bonferroni(ps)
        widest = max(max(abs(lo), abs(hi)) for lo, hi in ivs)
        text = (
            _profile(ga) + "; " + _profile(gb) + f"; at {', '.join(f'{t:.0e}' for t in thresholds)}: Fisher exact "
            f"(two-sided, Bonferroni) smallest {fmt_p(min(ps))}; 95% Newcombe intervals of the difference of shares "
            f"reach +-{widest:.2f} ('similar': within +-{SIMILAR_MARGIN})"
        )
        if min(ps) <= ALPHA:
            return Finding(FAILS, text, (ga, gb))
        if widest <= SIMILAR_MARGIN:
            return Finding(HOLDS, text, (ga, gb))
        return Finding(UNDECIDED, text, (ga, gb), why="no significant difference, but too few runs to show similarity")

    return rule


def dmu_faster(task: str, a: str, b: str):
    """``a`` reaches the thresholds sooner than ``b`` among the runs that reach them (one-sided
    Mann-Whitney on first epochs, Bonferroni over the thresholds both reach)."""

    def rule(ev):
        gs, missing = _dmu(ev, task, (a, b))
        if missing:
            return untested(*missing)
        ga, gb = gs[f"dmu/{task}-{a}"], gs[f"dmu/{task}-{b}"]
        both = []
        for t in DMU_THRESHOLDS:
            ea = [e for e in _firsts(ga, t) if math.isfinite(e)]
            eb = [e for e in _firsts(gb, t) if math.isfinite(e)]
            if ea and eb:
                both.append((t, ea, eb))
        text = _profile(ga) + "; " + _profile(gb)
        if not both:
            return Finding(UNDECIDED, text + "; no threshold reached by both", (ga, gb), tested=False)
        fwd = _bonferroni([mann_whitney(ea, eb) for _, ea, eb in both])
        rev = _bonferroni([mann_whitney(eb, ea) for _, ea, eb in both])
        text += (
            f"; Mann-Whitney on first epochs of the runs that reached {', '.join(f'{t:.0e}' for t, *_ in both)}, "
            f"Bonferroni: {a} sooner {fmt_p(min(fwd))}, {b} sooner {fmt_p(min(rev))}"
        )
        sig, bad = min(fwd) <= ALPHA, min(rev) <= ALPHA
        if sig and not bad:
            return Finding(HOLDS, text, (ga, gb))
        if bad and not sig:
            return Finding(FAILS, text, (ga, gb))
        return Finding(UNDECIDED, text, (ga, gb), why="no significant difference" if not sig else "mixed")

    return rule


#: "no run reaches it" is confirmed when none of the runs did and the exact 95% upper bound of
#: the share that would is at most this (36 runs or more); one run that reaches it refutes it
NEVER_BOUND = 0.1


def dmu_never(task: str, m: str, thresholds=DMU_THRESHOLDS):
    """No run of ``m`` reaches any of ``thresholds``: refuted by a single run that does;
    confirmed when none did and the Clopper-Pearson upper bound of the share is at most
    ``NEVER_BOUND`` (0 of 5 runs leaves room for a share of up to 0.52)."""

    def rule(ev):
        gs, missing = _dmu(ev, task, (m,))
        if missing:
            return untested(*missing)
        g = gs[f"dmu/{task}-{m}"]
        k, n = _reached(g, thresholds[0])
        lo, hi = clopper_pearson(k, n)
        text = (
            f"`{g.preset}`: {k}/{n} runs reached val loss {thresholds[0]:.0e} "
            f"(95% Clopper-Pearson interval of the share {lo:.2f}-{hi:.2f}; 'none': at most {NEVER_BOUND})"
        )
        if k:
            return Finding(FAILS, text, (g,))
        if hi <= NEVER_BOUND:
            return Finding(HOLDS, text, (g,))
        return Finding(
            UNDECIDED, text, (g,), why=f"no run reached it, but {n} runs leave room for a share up to {hi:.2f}"
        )

    return rule


def dmu_partial(task: str, m: str, thresholds=HIGH):
    """Some but not all runs of ``m`` reach a threshold of ``thresholds`` ("partial success")."""

    def rule(ev):
        gs, missing = _dmu(ev, task, (m,))
        if missing:
            return untested(*missing)
        g = gs[f"dmu/{task}-{m}"]
        counts = [(t, *_reached(g, t)) for t in thresholds]
        text = (
            f"`{g.preset}`: "
            + ", ".join(
                f"{t:.0e} {k}/{n} ({clopper_pearson(k, n)[0]:.2f}-{clopper_pearson(k, n)[1]:.2f})" for t, k, n in counts
            )
            + " runs (95% Clopper-Pearson interval of the share)"
        )
        partial = any(0 < k < n for _, k, n in counts)
        return Finding(HOLDS if partial else FAILS, text, (g,))

    return rule


def dmu_most_reach_all(task: str, m: str):
    """Most runs of ``m`` reach every threshold (one-sided binomial test against one half)."""

    def rule(ev):
        gs, missing = _dmu(ev, task, (m,))
        if missing:
            return untested(*missing)
        g = gs[f"dmu/{task}-{m}"]
        k, n = _reached(g, DMU_THRESHOLDS[-1])
        p_most, p_few = binom_sf(k, n, 0.5), binom_sf(n - k, n, 0.5)
        text = (
            f"`{g.preset}`: {k}/{n} runs reached every threshold (down to {DMU_THRESHOLDS[-1]:.0e}); "
            f"binomial test against one half: most {fmt_p(p_most)}, few {fmt_p(p_few)}"
        )
        if p_most <= ALPHA:
            return Finding(HOLDS, text, (g,))
        if p_few <= ALPHA:
            return Finding(FAILS, text, (g,))
        return Finding(UNDECIDED, text, (g,), why="not significantly more or fewer than half")

    return rule


def dmu_about_half(task: str, m: str, band=(0.2, 0.8)):
    """About half of the runs reach no threshold and the other half all of them: the exact 95%
    intervals of both shares lie within ``band`` (refuted when one excludes one half)."""

    def rule(ev):
        gs, missing = _dmu(ev, task, (m,))
        if missing:
            return untested(*missing)
        g = gs[f"dmu/{task}-{m}"]
        none = sum(1 for e in _firsts(g, DMU_THRESHOLDS[0]) if not math.isfinite(e))
        k_all, n = _reached(g, DMU_THRESHOLDS[-1])
        iv_none, iv_all = clopper_pearson(none, n), clopper_pearson(k_all, n)
        text = (
            f"`{g.preset}`: {none}/{n} runs reached no threshold ({iv_none[0]:.2f}-{iv_none[1]:.2f}), "
            f"{k_all}/{n} all of them ({iv_all[0]:.2f}-{iv_all[1]:.2f}); 95% Clopper-Pearson intervals, "
            f"'about half': within {band[0]}-{band[1]}"
        )
        if any(not lo <= 0.5 <= hi for lo, hi in (iv_none, iv_all)):
            return Finding(FAILS, text, (g,))
        if all(band[0] <= lo and hi <= band[1] for lo, hi in (iv_none, iv_all)):
            return Finding(HOLDS, text, (g,))
        return Finding(UNDECIDED, text, (g,), why="too few runs to tell 'about half' (the intervals are wide)")

    return rule


# --- rules on single presets -----------------------------------------------------------------
def _one(preset: str, fn, variants: bool = True):
    def rule(ev):
        g = _pick(ev, preset, variants=variants)
        return untested(preset) if g is None else fn(g)

    return rule


def _two(a: str, b: str, fn):
    def rule(ev):
        gs, missing = _picks(ev, (a, b))
        return untested(*missing) if missing else fn(gs[a], gs[b])

    return rule


def beats(a: str, b: str, metric: str, higher: bool):
    return _two(a, b, lambda ga, gb: compare(ga, gb, metric, higher))


def solves_copy(preset: str, variants: bool = True):
    """Recall accuracy >= 0.99 (its interval above it); the loss is shown beside it."""

    def fn(g):
        f = level(g, "test/recall_accuracy", 0.99, below=False, what="solved")
        loss, base = g.stat("test/loss"), g.records[0].value("baseline/loss")
        if loss is not None and base:
            f.text += f"; test loss {_fmt(loss[0])} against the memoryless {_fmt(base)}"
        return f

    return _one(preset, fn, variants)


def not_solves_copy(preset: str):
    def fn(g):
        f = level(g, "test/recall_accuracy", 0.99, below=False, what="solved")
        return Finding({HOLDS: FAILS, FAILS: HOLDS}.get(f.outcome, f.outcome), f.text, f.groups, f.tested, f.why)

    return _one(preset, fn)


def loss_below_baseline(preset: str, share: float, what: str):
    """Test loss below ``share`` x the task's memoryless baseline."""

    def fn(g):
        base = g.records[0].value("baseline/loss")
        return level(g, "test/loss", share * base, below=True, what=what)

    return _one(preset, fn)


def loss_not_below_baseline(preset: str, share: float, what: str):
    def fn(g):
        base = g.records[0].value("baseline/loss")
        f = level(g, "test/loss", share * base, below=True, what=what)
        return Finding({HOLDS: FAILS, FAILS: HOLDS}.get(f.outcome, f.outcome), f.text, f.groups, f.tested, f.why)

    return _one(preset, fn)


def at_baseline(preset: str, rel: float):
    def fn(g):
        return within(g, "test/loss", g.records[0].value("baseline/loss"), rel, "at the memoryless baseline")

    return _one(preset, fn)


def at_chance(preset: str, chance: float, margin: float):
    """Recall accuracy within ``margin`` of chance (its interval inside chance +- margin)."""

    def fn(g):
        f = level(g, "test/recall_accuracy", chance + margin, below=True, what=f"at chance ({chance:.3f})")
        return f

    return _one(preset, fn)


# --- analyses --------------------------------------------------------------------------------
def _analysis(ev, presets, want):
    for p in presets:
        for a in ev.analyses.get(p, []):
            if want(a.data.get("values", {})):
                return a
    return None


def _preset_steps(preset: str) -> int | None:
    from .records import preset_configs

    return preset_configs().get(preset, {}).get("train.steps")


def _analysis_finding(a, outcome: str, text: str) -> Finding:
    how = f"; {a.data['command']}" if a.data.get("command") else ""
    return Finding(outcome, text + f" (exact check on the analysed model{how})", analyses=(a,))


def asrnn_s_stuck(ev):
    a = _analysis(ev, ["asrnn/copy-L1000", "asrnn/copy-L1000-code"], lambda v: "t=1" in v.get("theorem21", {}))
    if a is None:
        return untested("a Jacobian analysis of an asRNN copy run")
    th, eps = a.data["values"]["theorem21"]["t=1"], a.data.get("eps")
    stuck = math.isclose(th["D_f_norm"], eps, rel_tol=1e-6) and math.isclose(th["D_f_cond"], 1.0, rel_tol=1e-6)
    text = (
        f"trained copy model (best checkpoint, step {a.data.get('steps')}): ||D_f||_2 = {th['D_f_norm']:g}, "
        f"sigma_min(D_f) = {th['D_f_sigma_min']:g}, cond(D_f) = {th['D_f_cond']:g}, eps = {eps:g}: D_f = eps I, "
        "so asRNN ran as a linear orthogonal RNN (s starts at 0, where d|s|/ds = 0)"
    )
    return _analysis_finding(a, HOLDS if stuck else FAILS, text)


def asrnn_conditions(ev):
    a = _analysis(ev, ["asrnn/copy-L1000", "asrnn/copy-L1000-code"], lambda v: v.get("theorem21"))
    if a is None:
        return untested("a Jacobian analysis of an asRNN copy run")
    th = a.data["values"]["theorem21"]
    holds = [k for k, v in th.items() if v.get("D_f_condition_holds")]
    text = (
        f"the first condition (||D_f||_2 <= bound) holds at {len(holds)} of {len(th)} checked t: the bound is "
        f"{th['t=1']['D_f_bound']:g} because arctanh(sqrt(1 - ||W_hh^-1||_2)) = 0 for an orthogonal W_hh"
    )
    f = _analysis_finding(a, HOLDS if holds else FAILS, text)
    if not holds:
        f.why = (
            f"||D_f||_2 <= {th['t=1']['D_f_bound']:g} holds at none of the {len(th)} checked t; for the orthogonal "
            "W_hh asRNN uses, arctanh(sqrt(1 - ||W_hh^-1||_2)) = 0, so the condition cannot hold"
        )
    return f


def asrnn_conclusion(ev):
    a = _analysis(ev, ["asrnn/copy-L1000", "asrnn/copy-L1000-code"], lambda v: v.get("lags"))
    if a is None:
        return untested("a Jacobian analysis of an asRNN copy run")
    lags = a.data["values"]["lags"]
    last = max(lags, key=int)
    lo = lags[last]["log10_sigma_min"]
    text = (
        f"log10 sigma_min(J) = {lo:.2g} at lag {last} (sigma_min = {10**lo:.5f}); 'approximately': sigma_min >= 0.999"
    )
    return _analysis_finding(a, HOLDS if 10**lo >= 0.999 else FAILS, text)


def nnrnn_schur(key: str, check, what: str):
    def rule(ev):
        a = _analysis(ev, ["nnrnn/copy"], lambda v: key in v)
        if a is None:
            return untested("a Schur analysis of an nnRNN copy run")
        v = a.data["values"][key]
        f = _analysis_finding(a, HOLDS if check(v) else FAILS, f"{key} = {v:.4g} ({what})")
        steps = _preset_steps(a.preset)
        if steps and a.data.get("steps", steps) < steps:
            f.steps_short = f"analysed at step {a.data['steps']:,} of {steps:,}"
        return f

    return rule


# --- the claims ------------------------------------------------------------------------------
def _ptb(model: str) -> str:
    return {
        "LSTM": "asrnn/ptb_char-bptt150-lstm",
        "asRNN": "asrnn/ptb_char-bptt150",
        "expRNN": "asrnn/ptb_char-bptt150-exprnn",
        "EURNN": "asrnn/ptb_char-bptt150-eurnn",
        "nnRNN": "nnrnn/ptb-bptt150",
        "RNN-orth": "nnrnn/ptb-bptt150-rnn-orth",
        "RNN": "nnrnn/ptb-bptt150-rnn",
    }[model]


CLAIMS: list[Claim] = [
    # asRNN
    Claim(
        "asrnn",
        "Fig. 2, Sec. 3",
        "asRNN shows excellent performance by converging stably on the Copy task (Fig. 2: L=1000, training loss to ~0)",
        (
            Part("solves copy L=1000 with Table 5's values", solves_copy("asrnn/copy-L1000", variants=False)),
            Part("solves copy L=1000 with the reference code's settings", solves_copy("asrnn/copy-L1000-code")),
        ),
        runs=1,
    ),
    Claim(
        "asrnn",
        "Fig. 2",
        "asRNN beats the LSTM on copy at L=1000",
        (
            Part(
                "asRNN ahead of the LSTM (recall accuracy)",
                beats("asrnn/copy-L1000", "asrnn/copy-L1000-lstm", "test/recall_accuracy", True),
            ),
        ),
        runs=1,
    ),
    Claim(
        "asrnn",
        "Fig. 1a",
        "asRNN beats the LSTM on copy at L=2000",
        (
            Part(
                "asRNN ahead of the LSTM (recall accuracy)",
                beats("asrnn/copy-L2000", "asrnn/copy-L2000-lstm", "test/recall_accuracy", True),
            ),
        ),
        runs=1,
    ),
    Claim(
        "asrnn",
        "Fig. 1b-c, Sec. 3",
        "asRNN achieves better generalization on the sequential and permuted MNIST tasks (n=122 budget)",
        (
            Part(
                "sMNIST: asRNN ahead of expRNN",
                beats("asrnn/smnist-n122", "asrnn/smnist-n122-exprnn", "test/accuracy", True),
            ),
            Part(
                "sMNIST: asRNN ahead of the LSTM",
                beats("asrnn/smnist-n122", "asrnn/smnist-n122-lstm", "test/accuracy", True),
            ),
            Part(
                "pMNIST: asRNN ahead of expRNN",
                beats("asrnn/psmnist-n122", "asrnn/psmnist-n122-exprnn", "test/accuracy", True),
            ),
            Part(
                "pMNIST: asRNN ahead of the LSTM",
                beats("asrnn/psmnist-n122", "asrnn/psmnist-n122-lstm", "test/accuracy", True),
            ),
        ),
        runs=1,
    ),
    Claim(
        "asrnn",
        "Table 1, Sec. 3",
        "On the PTB task, asRNN achieved encouraging results by outperforming all "
        "orthogonal RNN baselines, only second to LSTM (T=150; Table 1's baselines: nnRNN, expRNN, EURNN, "
        "RNN-orth, RNN)",
        (
            Part("the LSTM ahead of asRNN", beats(_ptb("LSTM"), _ptb("asRNN"), "test/bpc", False)),
            *(
                Part(f"asRNN ahead of {m}", beats(_ptb("asRNN"), _ptb(m), "test/bpc", False))
                for m in ("nnRNN", "expRNN", "EURNN", "RNN-orth", "RNN")
            ),
        ),
        runs=5,
    ),
    Claim(
        "asrnn",
        "ours",
        "Finding: on copy L=1000, at equal steps, expRNN and scoRNN reach a higher recall "
        "accuracy than asRNN with the paper's Table 5 values",
        (
            Part(
                "expRNN ahead of asRNN",
                beats("asrnn/copy-L1000-exprnn", "asrnn/copy-L1000", "test/recall_accuracy", True),
            ),
            Part(
                "scoRNN ahead of asRNN",
                beats("asrnn/copy-L1000-scornn", "asrnn/copy-L1000", "test/recall_accuracy", True),
            ),
        ),
        runs=1,
        ours=True,
    ),
    Claim(
        "asrnn",
        "ours",
        "Finding: the copy setting a = b = 0 leaves s at 0, so D_f stays eps I",
        (Part("D_f = eps I in the trained model", asrnn_s_stuck),),
        runs=1,
        ours=True,
    ),
    Claim(
        "asrnn",
        "Theorem 2.1",
        "Under its conditions, sigma_min(J(t2, t1)) >= 1",
        (Part("the conclusion holds there approximately (sigma_min >= 0.999)", asrnn_conclusion),),
        runs=1,
        premise=Part("its conditions hold on a trained copy model", asrnn_conditions),
    ),
    # nnRNN
    Claim(
        "nnrnn",
        "Fig. 2, Sec. 5.1",
        "Copy (T=200): the LSTM struggled to solve the task and RNN failed completely, "
        "unlike all orthogonal RNNs who learn to solve at very high performance very quickly; the nnRNN matched "
        "the performance of orthogonal RNNs (solved: test loss below 10% of the 0.095 baseline)",
        (
            Part("nnRNN solves it", loss_below_baseline("nnrnn/copy", 0.1, "solved")),
            Part("expRNN solves it", loss_below_baseline("nnrnn/copy-exprnn", 0.1, "solved")),
            Part("RNN-orth (orthogonal init) solves it", loss_below_baseline("nnrnn/copy-rnn-orth", 0.1, "solved")),
            Part("the LSTM does not solve it", loss_not_below_baseline("nnrnn/copy-lstm", 0.1, "solved")),
            Part("the RNN stays at the baseline (within 10%)", at_baseline("nnrnn/copy-rnn", 0.1)),
        ),
    ),
    Claim(
        "nnrnn",
        "Fig. 3",
        "Trained on copy, nnRNN's eigenvalue moduli go to about 1 and its T to about 0",
        (
            Part(
                "mean eigenvalue modulus within 0.01 of 1",
                nnrnn_schur("gamma_mean", lambda v: abs(v - 1) <= 0.01, "paper ~1; tolerance 0.01"),
            ),
            Part(
                "T about 0 (departure from normality <= 0.05)",
                nnrnn_schur("departure_from_normality", lambda v: v <= 0.05, "paper: T ~ 0; tolerance 0.05"),
            ),
        ),
    ),
    Claim(
        "nnrnn",
        "Table 1, Sec. 5.2",
        "The performance gap to expRNN is modest for equal number of parameters and "
        "T=150, it appreciatively improves for T=300; where the nnRNN shines is for equal numbers of hidden units",
        (
            Part(
                "T=150, equal parameters: nnRNN ahead of expRNN",
                beats("nnrnn/ptb-bptt150", "nnrnn/ptb-bptt150-exprnn", "test/bpc", False),
            ),
            Part(
                "T=300, equal parameters: nnRNN ahead of expRNN",
                beats("nnrnn/ptb-bptt300", "nnrnn/ptb-bptt300-exprnn", "test/bpc", False),
            ),
            Part(
                "T=150, equal hidden units (N=1024): nnRNN ahead of expRNN",
                beats("nnrnn/ptb-bptt150", "nnrnn/ptb-bptt150-exprnn-n1024", "test/bpc", False),
            ),
        ),
    ),
    # DMU
    Claim(
        "dmu",
        "Fig. 3, Sec. IV-A",
        "Adding: DMU significantly outperforms all other modules, and GRU scores better "
        "than LSTM. RNN and RHN are not able to reach any threshold within 100 training epochs for any "
        "hyperparameters",
        (
            *(Part(f"DMU ahead of {m.upper()}", dmu_ahead("adding", "dmu", m)) for m in ("rnn", "lstm", "gru", "rhn")),
            Part("GRU ahead of LSTM", dmu_ahead("adding", "gru", "lstm")),
            Part("RNN reaches no threshold, for any hyperparameters", dmu_never("adding", "rnn"), any_setting=True),
            Part("RHN reaches no threshold, for any hyperparameters", dmu_never("adding", "rhn"), any_setting=True),
        ),
        runs=51,
    ),
    Claim(
        "dmu",
        "Fig. 4, Sec. IV-B",
        "Temporal order: DMU has faster convergence than GRU and maintains similar "
        "results for high thresholds (up to 1e-4). For lower thresholds, DMU outperforms GRU. LSTM reaches partial "
        "success on higher thresholds but fails for lower ones. RNN and RHN fail for all thresholds",
        (
            Part("DMU converges faster than GRU", dmu_faster("temporal_order", "dmu", "gru")),
            Part("DMU and GRU similar down to 1e-4", dmu_similar("temporal_order", "dmu", "gru", HIGH)),
            Part("DMU ahead of GRU at 1e-5 and 1e-6", dmu_ahead("temporal_order", "dmu", "gru", LOW)),
            Part("LSTM: partial success down to 1e-4", dmu_partial("temporal_order", "lstm")),
            Part("LSTM: no run reaches 1e-5", dmu_never("temporal_order", "lstm", LOW)),
            Part("RNN reaches no threshold", dmu_never("temporal_order", "rnn")),
            Part("RHN reaches no threshold", dmu_never("temporal_order", "rhn")),
        ),
        runs=51,
    ),
    Claim(
        "dmu",
        "Fig. 5, Sec. IV-C",
        "Noisy sequence: GRU and DMU obtain similar results, in most cases reaching all "
        "the loss thresholds, with GRU training faster. RHN in about half of the cases does not reach any threshold, "
        "and in the other half, it reaches all of them. RNN performs worse than RHN, and LSTM performs worse than RNN",
        (
            Part("GRU and DMU similar", dmu_similar("noisy_sequence", "gru", "dmu")),
            Part("GRU: most runs reach every threshold", dmu_most_reach_all("noisy_sequence", "gru")),
            Part("DMU: most runs reach every threshold", dmu_most_reach_all("noisy_sequence", "dmu")),
            Part("GRU trains faster than DMU", dmu_faster("noisy_sequence", "gru", "dmu")),
            Part("RHN: about half reach none, half all", dmu_about_half("noisy_sequence", "rhn")),
            Part("RHN ahead of RNN", dmu_ahead("noisy_sequence", "rhn", "rnn")),
            Part("RNN ahead of LSTM", dmu_ahead("noisy_sequence", "rnn", "lstm")),
        ),
        runs=51,
    ),
    Claim(
        "dmu",
        "Table I, Sec. IV-D",
        "PolyMusic: DMU outperforms RHN at 3 out of 4 depths with regard to test mean "
        "loss (Table I: RHN ahead at depth 1, DMU at 2, 5 and 10)",
        (
            Part("depth 1: RHN ahead of DMU", beats("dmu/polymusic-N1-rhn", "dmu/polymusic-N1-dmu", "test/nll", False)),
            *(
                Part(
                    f"depth {n}: DMU ahead of RHN",
                    beats(f"dmu/polymusic-N{n}-dmu", f"dmu/polymusic-N{n}-rhn", "test/nll", False),
                )
                for n in (2, 5, 10)
            ),
        ),
        runs=5,
    ),
    Claim(
        "dmu",
        "Tables V-VII, Sec. V-C",
        "The results confirm that efficiency benefits from reducing the learning "
        "rate of the DMU module (NatLang depth 5 tested here)",
        (
            Part(
                "NatLang N=5: DMU (lr/(2n)) ahead of DMU-C (one rate)",
                beats("dmu/natlang-N5-dmu", "dmu/natlang-N5-dmuc", "test/perplexity", False),
            ),
        ),
        runs=5,
    ),
    # Henaff et al.
    Claim(
        "henaff",
        "Fig. 2, Sec. 4.1",
        "LT-ORNN solves fixed-length copy almost immediately, while LT-IRNN does not",
        (
            Part("LT-ORNN solves copy (first timescale; ours T=500)", solves_copy("henaff/copy-ltornn")),
            Part("LT-IRNN does not", not_solves_copy("henaff/copy-ltirnn")),
        ),
    ),
    Claim(
        "henaff",
        "Fig. 2, Sec. 4.1",
        "The same at T=750, one run of each",
        (
            Part("LT-ORNN solves copy at T=750", solves_copy("henaff/copy-ltornn-T750")),
            Part("LT-IRNN does not", not_solves_copy("henaff/copy-ltirnn-T750")),
        ),
        runs=1,
    ),
    Claim(
        "henaff",
        "Fig. 3, Sec. 4.1",
        "On addition, LT-IRNN solves efficiently, whereas LT-ORNN may take much "
        "longer or fail (solved: test MSE < 0.01)",
        (
            Part(
                "LT-IRNN solves adding (first timescale; ours T=500)",
                _one("henaff/adding-ltirnn", lambda g: level(g, "test/loss", 0.01, True, "solved")),
            ),
            Part("LT-ORNN behind LT-IRNN", beats("henaff/adding-ltirnn", "henaff/adding-ltornn", "test/loss", False)),
        ),
    ),
    Claim(
        "henaff",
        "Fig. 4, Sec. 4.2",
        "Pooling lets LT-ORNN solve copy at both tested timescales and approximately "
        "solve addition (approximately: test MSE below 10% of the predict-the-mean baseline)",
        (
            Part("LT-ORNN + pooling solves copy (first timescale)", solves_copy("henaff/copy-ltornn-pool")),
            Part("LT-ORNN + pooling solves copy at T=750", solves_copy("henaff/copy-ltornn-pool-T750")),
            Part(
                "LT-ORNN + pooling approximately solves adding",
                loss_below_baseline("henaff/adding-ltornn-pool", 0.1, "approximately solved"),
            ),
        ),
    ),
    Claim(
        "henaff",
        "Fig. 5, Sec. 4.3",
        "On variable-length copy at T = 100, none of the tested LT-RNNs beat chance, "
        "while the LSTM solves the task slowly",
        (
            Part("LT-ORNN at chance (within 0.05 of 1/8)", at_chance("henaff/copy_variable-ltornn", 1 / 8, 0.05)),
            Part("LT-IRNN at chance (within 0.05 of 1/8)", at_chance("henaff/copy_variable-ltirnn", 1 / 8, 0.05)),
            Part("the LSTM solves it", solves_copy("henaff/copy_variable-lstm")),
        ),
    ),
    # coRNN and LEM (their psMNIST results)
    Claim(
        "cornn",
        "Abstract, psMNIST",
        "Experiments show that the proposed RNN is comparable in performance to the "
        "state of the art on a variety of benchmarks (psMNIST tested here: within 1% of the paper's 97.34%)",
        (
            Part(
                "coRNN's psMNIST accuracy within 1% of 97.34%",
                _one("cornn/psmnist", lambda g: within(g, "test/accuracy", 0.9734, 0.01, "the paper's accuracy")),
            ),
        ),
        runs=1,
    ),
    Claim(
        "lem",
        "Abstract, psMNIST",
        "LEM outperforms state-of-the-art recurrent neural networks, gated recurrent "
        "units, and long short-term memory models (psMNIST tested here: against the LSTM baseline of the DMU "
        "paper's Table IV, N=128 both)",
        (Part("LEM ahead of the LSTM on psMNIST", beats("lem/psmnist", "dmu/psmnist-lstm", "test/accuracy", True)),),
        runs=1,
    ),
]
