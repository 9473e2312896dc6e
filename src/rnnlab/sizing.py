"""Matched sizes: ``model.params = 16000`` instead of ``model.hidden_size`` (docs/own-cell.md).

The papers compare cells at equal parameter counts (asRNN's n = 122 against an LSTM of 16K
parameters, nnRNN's N = 128 against an LSTM of 62 units). :func:`solve_width` finds, for any
cell, the width whose whole model (encoder, recurrent layers, readout) has the parameter count
nearest the budget, counting as the papers do (``parameter_counts()["free"]``: n(n-1)/2 per
orthogonal matrix). It counts by building the model, first at three small widths (a
quadratic through their counts gives a first guess), then in growing steps from the guess and
by bisection; widths a cell refuses (nnRNN's odd widths, a pool that does not divide the
width) are skipped. The global random
state is left as it was, so a run seeded k still initialises as seed k.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import torch

#: the widest model the search builds
MAX_WIDTH = 1 << 16
#: how far above a budget the smallest model may be before the budget is refused (a narrower
#: model does not exist, so the run would quietly train one that many times too large)
OVER_BUDGET = 0.1
#: how far from a refused width the search looks for an accepted one
NEIGHBOURS = 8

_cache: dict[str, tuple[int, int]] = {}


class BudgetError(ValueError):
    """A parameter budget no width of the cell meets."""


#: the last refusal of a width, for the message when no width builds
_last_refusal: list[str] = [""]


def _count(build: Callable[[int], torch.nn.Module], width: int) -> int | None:
    """The model's free parameter count at ``width``, or None where the cell refuses the width."""
    with torch.random.fork_rng(devices=[]):
        try:
            model = build(width)
        except (ValueError, TypeError, AssertionError) as e:
            _last_refusal[0] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return None
    counts = model.parameter_counts() if hasattr(model, "parameter_counts") else {}
    return int(counts.get("free", sum(p.numel() for p in model.parameters())))


def _valid_near(count, width: int, lo: int, hi: int) -> tuple[int, int] | None:
    """The accepted width nearest ``width`` within [lo, hi] (at most :data:`NEIGHBOURS` away)."""
    for d in range(NEIGHBOURS + 1):
        for w in (width + d, width - d) if d else (width,):
            if lo <= w <= hi:
                c = count(w)
                if c is not None:
                    return w, c
    return None


def _guess(count, budget: int) -> int:
    """A first width: the root of the quadratic through the counts at three small widths (a
    model's count is a quadratic in its width for most cells), else 1."""
    points = [p for p in (_valid_near(count, w, 1, MAX_WIDTH) for w in (8, 16, 32)) if p is not None]
    if len({w for w, _ in points}) < 3:
        return 1
    (x1, y1), (x2, y2), (x3, y3) = points
    a = ((y3 - y1) / (x3 - x1) - (y2 - y1) / (x2 - x1)) / (x3 - x2)
    b = (y2 - y1) / (x2 - x1) - a * (x1 + x2)
    c = y1 - a * x1 * x1 - b * x1
    if abs(a) < 1e-12:
        root = (budget - c) / b if b else 1.0
    else:
        disc = b * b - 4 * a * (c - budget)
        root = (-b + disc**0.5) / (2 * a) if disc >= 0 else 1.0
    return int(min(max(round(root), 1), MAX_WIDTH))


def solve(build: Callable[[int], torch.nn.Module], budget: int, what: str = "the model") -> tuple[int, int]:
    """``(width, count)``: the width whose model ``build(width)`` has the free parameter count
    nearest ``budget`` (the smaller width on a tie). Counts are assumed to grow with the width."""
    seen: dict[int, int | None] = {}

    def count(w: int) -> int | None:
        if w not in seen:
            seen[w] = _count(build, w)
        return seen[w]

    start = _valid_near(count, _guess(count, budget), 1, MAX_WIDTH) or _valid_near(count, 1, 1, MAX_WIDTH)
    if start is None:
        raise BudgetError(
            f"{what} cannot be built at any width tried (the last error: {_last_refusal[0]}); fix the cell, or set "
            f"model.hidden_size instead of model.params"
        )
    w, c = start
    step = max(1, w // 32)
    if c < budget:  # widen in growing steps until the count reaches the budget
        lo, clo = w, c
        while True:
            found = _valid_near(count, min(lo + step, MAX_WIDTH), lo + 1, MAX_WIDTH)
            if found is None:
                raise BudgetError(f"model.params = {budget} is out of reach for {what} (no width above {lo} builds)")
            if found[1] >= budget:
                hi, chi = found
                break
            lo, clo = found
            step *= 2
    else:  # narrow until the count is below the budget (or nothing narrower builds)
        hi, chi = w, c
        while True:
            found = _valid_near(count, max(hi - step, 1), 1, hi - 1) if hi > 1 else None
            if found is None:
                if chi > budget * (1 + OVER_BUDGET):
                    raise BudgetError(
                        f"model.params = {budget} is below the smallest model of {what}: its narrowest width, "
                        f"{hi}, has {chi} parameters ({chi / budget:.3g} times the budget); give model.params >= "
                        f"{chi}, or set model.hidden_size"
                    )
                return hi, chi
            if found[1] < budget:
                lo, clo = found
                break
            hi, chi = found
            step *= 2
    while hi - lo > 1:  # bisection between an accepted width below the budget and one at or above it
        found = _valid_near(count, (lo + hi) // 2, lo + 1, hi - 1)
        if found is None:
            break
        if found[1] >= budget:
            hi, chi = found
        else:
            lo, clo = found
    _check_growing(seen, what)
    return (lo, clo) if budget - clo <= chi - budget else (hi, chi)


def _check_growing(seen: dict[int, int | None], what: str) -> None:
    """The search assumes counts that grow with the width; a cell whose count does not (KRU's
    depends on the factors of the width) is refused rather than sized wrongly."""
    counts = sorted((w, c) for w, c in seen.items() if c is not None)
    for (w1, c1), (w2, c2) in zip(counts, counts[1:]):
        if c2 < c1:
            raise BudgetError(
                f"the parameter count of {what} does not grow with the width (width {w1}: {c1}, width {w2}: "
                f"{c2}), so model.params cannot size it; set model.hidden_size"
            )


def _key(model_cfg, task) -> str:
    sizes = {k: getattr(task, k, None) for k in ("input_size", "output_size", "num_tokens", "readout", "model_kind")}
    return json.dumps([dataclasses.asdict(model_cfg), sizes], sort_keys=True, default=str)


def matched(model_cfg, task, build: Callable) -> tuple[object, dict]:
    """``model_cfg`` with the width of its ``params`` budget, and what the run records of it:
    ``{"budget": ..., "hidden_size": ..., "matched": count}``. ``build(cfg, task)`` builds a
    model from a ModelConfig (the trainer's ``build_model``)."""
    budget = model_cfg.params
    key = _key(model_cfg, task)
    if key not in _cache:

        def at(width: int):
            return build(dataclasses.replace(model_cfg, params=0, hidden_size=width), task)

        _cache[key] = solve(at, budget, f"model.cell = {model_cfg.cell!r}")
    width, count = _cache[key]
    return dataclasses.replace(model_cfg, params=0, hidden_size=width), {
        "budget": budget,
        "hidden_size": width,
        "matched": count,
    }
