"""The rules the claims are built from: DMU's threshold protocol (who reaches a threshold first,
how often, how fast), the rules on single presets (solves copy, beats, at chance) and the
analyses' findings: see :mod:`rnnlab.ledger.claims`.
"""

from __future__ import annotations

import contextvars
import math

from ..results import DMU_THRESHOLDS, median_epoch
from .findings import FAILS, HOLDS, UNDECIDED, Finding, _fmt, _pick, _picks, compare, level, negated, untested, within
from .stats import (
    ALPHA,
    binom_sf,
    clopper_pearson,
    fisher_one_sided,
    fmt_p,
    mann_whitney,
    newcombe,
)

# --- DMU's threshold protocol ----------------------------------------------------------------
HIGH = DMU_THRESHOLDS[:3]  # "high thresholds (up to 1e-4)"
LOW = DMU_THRESHOLDS[3:]


#: the last epoch a threshold counts at (None: the whole budget): the budget readings
_EPOCH_CAP: contextvars.ContextVar[int | None] = contextvars.ContextVar("epoch_cap", default=None)


def _firsts(g, th: float) -> list[float]:
    """Each run's first epoch at ``th``; never = inf (later than any run that reached it). Under
    a budget reading, an epoch past its cap counts as never."""
    cap = _EPOCH_CAP.get()
    return [math.inf if e is None or (cap is not None and e > cap) else float(e) for e in g.thresholds((th,))[th]]


# --- readings: the lines we draw ourselves, over a declared range ------------------------------
def with_readings(make, main, others, label):
    """``make(main)``, a rule, carrying its reading (``rule.reading``, ``label(main)``) and the
    same rule at the other values of the line we drew (``rule.readings``: ``(label, rule)``): the
    ledger shows a verdict that flips inside the range as "depends on reading"."""
    rule = make(main)
    rule.reading = label(main)
    rule.readings = tuple((label(v), make(v)) for v in others)
    return rule


def at_epochs(rule, epochs: int):
    """``rule`` with thresholds counted only up to ``epochs`` (a budget reading)."""

    def capped(ev):
        token = _EPOCH_CAP.set(epochs)
        try:
            return rule(ev)
        finally:
            _EPOCH_CAP.reset(token)

    return capped


#: DMU's budget is 100 epochs: half of it is the other reading of "within 100 training epochs"
DMU_HALF_BUDGET = 50


def dmu_readings(rule, extra=()):
    """A DMU threshold rule with its readings: half the budget, plus ``extra``."""
    rule.reading = getattr(rule, "reading", "100 epochs")
    rule.readings = (
        *getattr(rule, "readings", ()),
        *extra,
        (f"{DMU_HALF_BUDGET} epochs", at_epochs(rule, DMU_HALF_BUDGET)),
    )
    return rule


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

    return dmu_readings(rule)


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

    return dmu_readings(rule)


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

    return dmu_readings(rule)


#: "no run reaches it" is confirmed when none of the runs did and the exact 95% upper bound of
#: the share that would is at most this (36 runs or more); one run that reaches it refutes it
NEVER_BOUND = 0.1


def dmu_never(task: str, m: str, thresholds=DMU_THRESHOLDS, bound: float | None = None):
    """No run of ``m`` reaches any of ``thresholds``: refuted by a single run that does;
    confirmed when none did and the Clopper-Pearson upper bound of the share is at most
    ``NEVER_BOUND`` (0 of 5 runs leaves room for a share of up to 0.52)."""
    if bound is None:
        return dmu_readings(
            with_readings(
                lambda b: dmu_never(task, m, thresholds, b), NEVER_BOUND, (0.05, 0.2), lambda b: f"'none': share <= {b}"
            )
        )

    def rule(ev):
        gs, missing = _dmu(ev, task, (m,))
        if missing:
            return untested(*missing)
        g = gs[f"dmu/{task}-{m}"]
        k, n = _reached(g, thresholds[0])
        lo, hi = clopper_pearson(k, n)
        text = (
            f"`{g.preset}`: {k}/{n} runs reached val loss {thresholds[0]:.0e} "
            f"(95% Clopper-Pearson interval of the share {lo:.2f}-{hi:.2f}; 'none': at most {bound})"
        )
        if k:
            return Finding(FAILS, text, (g,))
        if hi <= bound:
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

    return dmu_readings(rule)


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

    return dmu_readings(rule)


def dmu_about_half(task: str, m: str, band=None):
    """About half of the runs reach no threshold and the other half all of them: the exact 95%
    intervals of both shares lie within ``band`` (refuted when one excludes one half)."""
    if band is None:
        return dmu_readings(
            with_readings(
                lambda b: dmu_about_half(task, m, b),
                (0.2, 0.8),
                ((0.1, 0.9), (0.3, 0.7)),
                lambda b: f"'about half': {b[0]}-{b[1]}",
            )
        )

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


#: "solved" for copy: recall at least this (ours), and the other readings of it
SOLVED_RECALL, SOLVED_RECALL_READINGS = 0.99, (0.9, 0.95)


def _recall_label(line: float) -> str:
    return f"solved: recall >= {line}"


def solves_copy(preset: str, variants: bool = True, line: float | None = None):
    """Recall accuracy >= ``line`` (its interval above it; 0.99 and its readings 0.9, 0.95);
    the loss is shown beside it."""
    if line is None:
        return with_readings(
            lambda v: solves_copy(preset, variants, v), SOLVED_RECALL, SOLVED_RECALL_READINGS, _recall_label
        )

    def fn(g):
        f = level(g, "test/recall_accuracy", line, below=False, what="solved")
        loss, base = g.stat("test/loss"), g.records[0].value("baseline/loss")
        if loss is not None and base:
            f.text += f"; test loss {_fmt(loss[0])} against the memoryless {_fmt(base)}"
        return f

    return _one(preset, fn, variants)


def not_solves_copy(preset: str, line: float | None = None):
    if line is None:
        return with_readings(lambda v: not_solves_copy(preset, v), SOLVED_RECALL, SOLVED_RECALL_READINGS, _recall_label)

    return _one(preset, lambda g: negated(level(g, "test/recall_accuracy", line, below=False, what="solved")))


def loss_below_baseline(preset: str, share: float, what: str, readings: bool = True):
    """Test loss below ``share`` x the task's memoryless baseline (readings: half and twice it)."""
    return _vs_baseline(preset, share, what, readings, negate=False)


def loss_not_below_baseline(preset: str, share: float, what: str, readings: bool = True):
    """The negation of :func:`loss_below_baseline` (the same test and readings)."""
    return _vs_baseline(preset, share, what, readings, negate=True)


def _vs_baseline(preset: str, share: float, what: str, readings: bool, negate: bool):
    if readings:
        return with_readings(
            lambda v: _vs_baseline(preset, v, what, False, negate),
            share,
            (share / 2, share * 2),
            lambda v: f"{what}: loss < {v:g} x baseline",
        )

    def fn(g):
        base = g.records[0].value("baseline/loss")
        f = level(g, "test/loss", share * base, below=True, what=what)
        return negated(f) if negate else f

    return _one(preset, fn)


def at_baseline(preset: str, rel: float):
    def fn(g):
        return within(g, "test/loss", g.records[0].value("baseline/loss"), rel, "at the memoryless baseline")

    return _one(preset, fn)


def at_chance(preset: str, chance: float, margin: float, readings: bool = True):
    """Recall accuracy within ``margin`` of chance (its interval inside chance +- margin;
    readings: half and twice the margin)."""
    if readings:
        return with_readings(
            lambda v: at_chance(preset, chance, v, False),
            margin,
            (margin / 2, margin * 2),
            lambda v: f"at chance: within {v:g}",
        )

    def fn(g):
        f = level(g, "test/recall_accuracy", chance + margin, below=True, what=f"at chance ({chance:.3f})")
        return f

    return _one(preset, fn)


def loss_level(preset: str, line: float, what: str, readings: bool = True):
    """Test loss below ``line`` (readings: half and twice it)."""
    if readings:
        return with_readings(
            lambda v: loss_level(preset, v, what, False), line, (line / 2, line * 2), lambda v: f"{what}: loss < {v:g}"
        )
    return _one(preset, lambda g: level(g, "test/loss", line, True, what))


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
