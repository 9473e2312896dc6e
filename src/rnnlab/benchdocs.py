"""The Markdown that BENCHMARKS.md and docs/ show from timing records, with its caption.

A block in a Markdown file is marked::

    <!-- bench: VIEW RECORD -->
    ...                      (generated: do not edit by hand)
    <!-- /bench -->

``RECORD`` is a JSON record relative to the Markdown file; ``VIEW`` is one of :data:`VIEWS`:

* ``speed``, ``speed-limits``: a speed record's table (:func:`rnnlab.speed.format_table`) or its
  limits table (:func:`rnnlab.speed.format_limits`);
* ``papers``: the papers' code beside rnnlab (``benchmarks/papers_code.py``), with what each
  reference step keeps and leaves out; ``papers-target``: the "at least 3x" target as a table
  row; ``papers-sentence``: the speed-ups in one sentence, with the record's standing;
* ``overhead``: the backends' overhead per run (``benchmarks/backend_overhead.py``).

Every table starts with the record's caption (:func:`rnnlab.benchrecord.caption`: idle, loaded
or legacy), the sentence names the record's standing, and a target is judged met or not only
from an idle record.
``python -m rnnlab.docsync FILE.md`` rewrites the blocks; the test suite checks them.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import benchrecord, speed

#: the papers' code (``benchmarks/papers_code.py``): model keys in table order, and the sizes
#: of records that do not carry them
PAPERS_MODELS = ("asrnn", "nnrnn", "exprnn", "dmu")
PAPERS_SIZES = {"asrnn": 138, "exprnn": 190, "nnrnn": 128, "dmu": 82}
PAPERS_NAMES = {"asrnn": "asRNN", "nnrnn": "nnRNN", "exprnn": "expRNN", "dmu": "DMU"}
PAPERS_TARGET = 3.0

#: what the reference steps of records made before they said so kept and left out
LEGACY_PAPERS_STEPS = {
    "asrnn": "its model, loss, clipping and RMSprop; left out: the per-step one-hot of the batch, "
             "`loss.item()` and `correct().item()`, the checkpoint on a new best loss, the pickled log, the print",
    "nnrnn": "its cell, readout, loss and both optimisers; left out: the per-step one-hot (fed one-hot "
             "inputs), the accuracy with `.item()` over the last K steps, `loss.item()` and the print "
             "(issue 25 measured the reference 6-9% faster without them)",
    "exprnn": "its OrthogonalRNN, readout, loss and both optimisers; left out: the per-step one-hot, the "
              "accuracy and the print",
    "dmu": "its DMULayer, a linear readout, loss and RMSprop; not run: PyTorch Lightning's loop and "
           "metrics (the repository has no copy task)",
}


# --- the papers' code ---------------------------------------------------------------------


def papers_models(record: dict) -> list[str]:
    return [m for m in PAPERS_MODELS if f"{m} papers" in record["median_s"]]


def _lstm_label(record: dict) -> str:
    return next(k for k in record["median_s"] if k.startswith("nn.LSTM"))


def papers_ratio(record: dict, a: str, b: str) -> tuple:
    """(median, min, max) over the rounds of step ``a``'s time over step ``b``'s (both timed
    in every round); records without rounds: the ratio of the medians, no range."""
    rounds = record.get("rounds_s")
    if rounds:
        return benchrecord.spread(x / y for x, y in zip(rounds[a], rounds[b]))
    med = record["median_s"]
    return med[a] / med[b], None, None


def _rounds_note(record: dict) -> str:
    rounds = record.get("rounds_s")
    if not rounds:
        return "ratios of medians, per-round times not recorded"
    return f"median [min-max] of {len(next(iter(rounds.values())))} alternating rounds in one process"


def papers_table(record: dict) -> str:
    """The papers' code beside rnnlab and ``nn.LSTM``: median seconds per step, the speed-up
    and both over the LSTM (median [min-max] over the rounds), and what each timed
    reference step keeps and leaves out."""
    med, lstm = record["median_s"], _lstm_label(record)
    sizes = record.get("sizes", PAPERS_SIZES)
    steps = record.get("reference_steps", LEGACY_PAPERS_STEPS)
    fmt = benchrecord.fmt_spread
    lines = ["| model | papers' code s/it | rnnlab s/it | speed-up [min-max] | papers' / nn.LSTM | rnnlab / nn.LSTM "
             "| the papers' step as timed |",
             "|---|---|---|---|---|---|---|"]
    for m in papers_models(record):
        p, r = f"{m} papers", f"{m} rnnlab"
        lines.append(f"| {m} (n={sizes[m]}) | {med[p]:.3f} | {med[r]:.3f} | {fmt(papers_ratio(record, p, r))}x "
                     f"| {fmt(papers_ratio(record, p, lstm))} | {fmt(papers_ratio(record, r, lstm))} | {steps[m]} |")
    lines.append(f"| {lstm} | | {med[lstm]:.3f} | | | 1.00 | |")
    return "\n".join(lines)


def _speedups(record: dict) -> str:
    parts = [f"{PAPERS_NAMES[m]} {benchrecord.fmt_spread(papers_ratio(record, f'{m} papers', f'{m} rnnlab'))}x"
             for m in papers_models(record)]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def standing(record: dict) -> str:
    """'idle machine', 'loaded machine' or 'legacy record, load unknown'."""
    return _judged(record) or "idle machine"


def _judged(record: dict) -> str | None:
    """Why a record's numbers cannot judge a target (legacy or loaded), or None (idle)."""
    if benchrecord.is_legacy(record):
        return "legacy record, load unknown"
    if benchrecord.conditions_of(record)["loaded"]:
        return "loaded machine"
    return None


def papers_verdict(record: dict) -> str:
    """'met for ...; not met for ...' against :data:`PAPERS_TARGET` (medians over the rounds),
    or why the record cannot judge it."""
    why = _judged(record)
    if why:
        return f"**not judged**: {why}; to be re-recorded on an idle machine"
    met, missed = [], []
    for m in papers_models(record):
        r = papers_ratio(record, f"{m} papers", f"{m} rnnlab")[0]
        (met if r >= PAPERS_TARGET else missed).append(f"{PAPERS_NAMES[m]} ({r:.2f}x)")
    out = []
    if met:
        out.append("**met** for " + ", ".join(met))
    if missed:
        out.append("**not met** for " + ", ".join(missed))
    return "; ".join(out)


def papers_target(record: dict, source: str) -> str:
    """The "at least 3x faster than the papers' code" target as a one-row table."""
    return ("| target (issue) | measured (`" + source + "`) | status |\n|---|---|---|\n"
            f"| at least {PAPERS_TARGET:g}x faster than the papers' code, same configuration and threads "
            f"| {_speedups(record)} ({_rounds_note(record)}) | {papers_verdict(record)} |")


def papers_sentence(record: dict, source: str) -> str:
    """The speed-ups over the papers' code in one sentence, with the record's standing."""
    return (f"Measured in one process (`{source}`: {standing(record)}; {_rounds_note(record)}), rnnlab "
            f"trains {_speedups(record)} faster than the papers' own code on the copy task; against the target "
            f"of at least {PAPERS_TARGET:g}x: {papers_verdict(record)}.")


# --- the backends' overhead ---------------------------------------------------------------


def overhead_rows(record) -> list[dict]:
    """The rows of a backend-overhead record (legacy records are the bare list)."""
    return record if isinstance(record, list) else record["rows"]


def overhead_table(record) -> str:
    """The Markdown table of docs/sweeps.md from a backend-overhead record."""
    lines = ["| backend | runs | parallel | driver wall (s) | inside train (s) | overhead per run (s) |",
             "|---|---|---|---|---|---|"]
    for r in overhead_rows(record):
        lines.append(f"| {r['backend']} | {r['runs']} | {r['parallel']} | {r['wall_s']} | {r['in_train_s']} "
                     f"| {r['overhead_per_run_s']} |")
    return "\n".join(lines)


# --- the blocks ---------------------------------------------------------------------------


def _captioned(table):
    return lambda record, source: benchrecord.caption(record, source) + "\n\n" + table(record)


VIEWS = {
    "speed": _captioned(speed.format_table),
    "speed-limits": _captioned(speed.format_limits),
    "papers": _captioned(papers_table),
    "papers-target": lambda record, source: benchrecord.caption(record, source) + "\n\n"
                                            + papers_target(record, source),
    "papers-sentence": papers_sentence,
    "overhead": _captioned(overhead_table),
}


def render_block(args: str, base: Path) -> str:
    """The generated text of one ``<!-- bench: VIEW RECORD -->`` block (RECORD relative to
    ``base``, the Markdown file's directory)."""
    parts = args.split()
    if len(parts) != 2 or parts[0] not in VIEWS:
        raise ValueError(f"bench block arguments {args!r}: expected 'VIEW RECORD' with VIEW one of {sorted(VIEWS)}")
    view, rel = parts
    path = Path(base) / rel
    if not path.is_file():
        raise ValueError(f"bench block {args!r}: record {path} not found")
    return VIEWS[view](json.loads(path.read_text()), _shown(path, rel)) + "\n"


def _shown(path: Path, rel: str) -> str:
    """The record's path as a reader of the repository sees it (from the directory holding
    ``pyproject.toml``), else as the block names it."""
    for root in path.resolve().parents:
        if (root / "pyproject.toml").is_file():
            return path.resolve().relative_to(root).as_posix()
    return rel
