"""The Markdown that BENCHMARKS.md and docs/ show from timing records, with its caption.

A block in a Markdown file is marked::

    <!-- bench: VIEW RECORD [RECORD ...] -->
    ...                      (generated: do not edit by hand)
    <!-- /bench -->

``RECORD`` is a JSON record relative to the Markdown file; ``VIEW`` is one of :data:`VIEWS`:

* ``speed``, ``speed-limits``: a speed record's table (:func:`rnnlab.bench.speed.format_table`) or its
  limits table (:func:`rnnlab.bench.speed.format_limits`);
* ``papers``: the papers' code beside rnnlab (``benchmarks/papers_code.py``), with what each
  reference step keeps and leaves out; ``papers-sentence``: the speed-ups in one sentence, with
  the record's standing;
* ``overhead``: the backends' overhead per run (``benchmarks/backend_overhead.py``);
* ``ensemble``: ``rnnlab bench ensemble``'s table (``--json``);
* ``field``: ``rnnlab field``'s table, the cells on the long-memory tasks (docs/field.md; a results
  record, captioned with its budget and commit, not a timing record);
* ``field-known``: ``rnnlab field --known``'s table, each modern model's known behaviour beside ours
  (docs/field-known.md; a results record);
* ``scan``: the LT-RNN's loop, fused loop and scan (``benchmarks/scan.py --json``);
* ``allocator``: glibc allocator settings against time and page faults (``benchmarks/allocator.py``);
* ``summary``: the papers' cells and the classic baselines on copy, MNIST and PTB, against
  ``nn.LSTM`` (docs/guide.md, from the main speed record); ``memory-sentence``: the T = 10,000
  peak memory of the fused expRNN, its reference loop and ``nn.LSTM`` in one sentence;

or ``FILE.py:NAME``: the view ``NAME`` of the ``VIEWS`` dictionary of the Python file ``FILE.py``
(relative to the Markdown file), called with the records then the paths a reader sees, so a
project keeps its own views (a table of its targets, judged from the records) beside its
benchmarks rather than in the library.

Every table starts with the record's caption (:func:`rnnlab.bench.benchrecord.caption`: idle, loaded
or legacy), and the sentence names the record's standing (:func:`standing`): only an idle
record's numbers judge a target.
``python -m rnnlab.bench.docsync FILE.md`` rewrites the blocks; the test suite checks them.
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

#: what the reference steps of records made before they said so kept and left out
LEGACY_PAPERS_STEPS = {
    "asrnn": "its model, loss, clipping and RMSprop; left out: the per-step one-hot of the batch, "
    "`loss.item()` and `correct().item()`, the checkpoint on a new best loss, the pickled log, the print",
    "nnrnn": "its cell, readout, loss and both optimisers; left out: the per-step one-hot (fed one-hot "
    "inputs), the accuracy with `.item()` over the last K steps, `loss.item()` and the print "
    "(the reference measured 6-9% faster without them)",
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
        return benchrecord.spread(x / y for x, y in zip(rounds[a], rounds[b], strict=True))
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
    lines = [
        "| model | papers' code s/it | rnnlab s/it | speed-up [min-max] | papers' / nn.LSTM | rnnlab / nn.LSTM "
        "| the papers' step as timed |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in papers_models(record):
        p, r = f"{m} papers", f"{m} rnnlab"
        lines.append(
            f"| {m} (n={sizes[m]}) | {med[p]:.3f} | {med[r]:.3f} | {fmt(papers_ratio(record, p, r))}x "
            f"| {fmt(papers_ratio(record, p, lstm))} | {fmt(papers_ratio(record, r, lstm))} | {steps[m]} |"
        )
    lines.append(f"| {lstm} | | {med[lstm]:.3f} | | | 1.00 | |")
    return "\n".join(lines)


def _speedups(record: dict) -> str:
    parts = [
        f"{PAPERS_NAMES[m]} {benchrecord.fmt_spread(papers_ratio(record, f'{m} papers', f'{m} rnnlab'))}x"
        for m in papers_models(record)
    ]
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


def papers_sentence(record: dict, source: str, judged: str = "") -> str:
    """The speed-ups over the papers' code in one sentence, with the record's standing (and
    ``judged``, a clause against a target, before its full stop)."""
    return (
        f"Measured in one process (`{source}`: {standing(record)}; {_rounds_note(record)}), rnnlab "
        f"trains {_speedups(record)} faster than the papers' own code on the copy task"
        + (f"; {judged}" if judged else "")
        + "."
    )


# --- the backends' overhead ---------------------------------------------------------------


def overhead_rows(record) -> list[dict]:
    """The rows of a backend-overhead record (legacy records are the bare list)."""
    return record if isinstance(record, list) else record["rows"]


def overhead_table(record) -> str:
    """The Markdown table of docs/sweeps.md from a backend-overhead record."""
    lines = [
        "| backend | runs | parallel | driver wall (s) | inside train (s) | overhead per run (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in overhead_rows(record):
        lines.append(
            f"| {r['backend']} | {r['runs']} | {r['parallel']} | {r['wall_s']} | {r['in_train_s']} "
            f"| {r['overhead_per_run_s']} |"
        )
    return "\n".join(lines)


def _ensemble_table(record) -> str:
    """``rnnlab bench ensemble``'s table (members per second, ensemble against separate runs)."""
    from .ensemble_bench import format_table

    return format_table(record["rows"])


def _small_table(record) -> str:
    """``benchmarks/small_models.py``'s table (tiny models: before, after, the scalar floor)."""
    from .small_bench import format_table

    cond = benchrecord.conditions_of(record)
    note = ""
    if cond.get("direct") is False:
        note = "*Ensembles' forward under `vmap` (`--vmap`): the path the direct forward replaced.*\n\n"
    return note + format_table(record["rows"])


# --- the LT-RNN scan and the allocator (benchmarks/scan.py, benchmarks/allocator.py) -------


def scan_speedup(row: dict, impl: str) -> tuple:
    """(median, min, max) of the per-repeat ratios loop / ``impl`` of one scan record row."""
    t = row["times_s"]
    return benchrecord.spread(a / b for a, b in zip(t["loop"], t[impl]))


def scan_table(record: dict) -> str:
    """The loop, the fused loop and the scan per size: CPU-second medians and speed-ups."""
    import statistics

    lines = [
        "| B x H | T | loop s | fused s | scan s | fused vs loop [min-max] | scan vs loop [min-max] | auto takes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in record["rows"]:
        med = {k: statistics.median(v) for k, v in r["times_s"].items()}
        lines.append(
            f"| {r['B']} x {r['H']} | {r['T']} | {med['loop']:.3f} | {med['fused']:.3f} | {med['scan']:.3f} "
            f"| {benchrecord.fmt_spread(scan_speedup(r, 'fused'))}x | {benchrecord.fmt_spread(scan_speedup(r, 'scan'))}x "
            f"| {r['auto']} |"
        )
    return "\n".join(lines)


def allocator_line(r: dict) -> str:
    """One row of the allocator table."""
    head = f"| {r['cell']} n={r['hidden']} | {r['allocator']} "
    if "error" in r:
        return head + f"| error: {r['error'][:60]} | | |"
    return head + f"| {r['cpu']:.3f} ({r['wall']:.3f}) | {r['faults']:.0f} | {r['peak_mb']:.0f} |"


def allocator_table(record: dict) -> str:
    """Each cell under each allocator setting, alone in its process."""
    lines = ["| cell | allocator | train s/it CPU (wall) | minor faults/it | peak MB |", "|---|---|---|---|---|"]
    return "\n".join(lines + [allocator_line(r) for r in record["rows"]])


# --- the guide's summary (docs/guide.md, "Where we stand") --------------------------------

#: the cells of the summary, in its order: the papers' cells, then the classic baselines
SUMMARY_CELLS = ("asrnn", "nnrnn", "exprnn", "scornn", "dmu", "rhn", "ltrnn", "rnn", "lstm", "gru")


def summary_table(record: dict) -> str:
    """Each of :data:`SUMMARY_CELLS` on copy, MNIST and PTB from the main speed record: CPU
    seconds per iteration and the median ratio to the ``nn.LSTM`` of its process."""
    rows = {(r["config"], r["label"]): r for r in record["rows"] if "error" not in r}
    lines = [
        "| cell (copy / MNIST / PTB n) | copy s/it | vs `nn.LSTM` | MNIST s/it | vs `nn.LSTM` | PTB s/it | vs `nn.LSTM` |",
        "|---|---|---|---|---|---|---|",
    ]
    for cell in SUMMARY_CELLS:
        ns, cols, depth = [], [], 1
        for config in ("copy", "mnist", "ptb"):
            r = rows.get((config, cell))
            if r is None:
                ns.append("-")
                cols += ["-", "-"]
                continue
            depth = max(depth, r.get("depth", 1))
            ns.append(str(r["hidden"]))
            vs = f"{speed.ratio(r, 'baseline')[0]:.2f}" if r.get("baseline") else "-"
            cols += [f"{r['fast']['cpu']:.3f}", vs]
        name = "`rnn` tanh" if cell == "rnn" else f"`{cell}`"
        sizes = " / ".join(ns) + (f", depth {depth}" if depth > 1 else "")
        lines.append(f"| {name} ({sizes}) | " + " | ".join(cols) + " |")
    return "\n".join(lines)


def memory_sentence(record: dict, source: str) -> str:
    """The T = 10,000 peak memory of the fused expRNN, its reference loop and ``nn.LSTM`` (the
    main record's ``long`` rows, in GiB as the targets table gives them), with the record's
    standing."""
    gib = {k: _row(record, "long", k)["peak_mb"] / 1024 for k in ("exprnn", "exprnn reference loop", speed.BASELINE)}
    return (
        f"At T=10,000 (readout at every step; `{source}`, {standing(record)}) the fused expRNN's "
        f"iteration peaks {gib['exprnn']:.1f} GiB above the process where its reference loop needs "
        f"{gib['exprnn reference loop']:.1f} GiB (`nn.LSTM` {gib[speed.BASELINE]:.1f} GiB)."
    )


# --- the blocks ---------------------------------------------------------------------------


def _captioned(table):
    return lambda record, source: benchrecord.caption(record, source) + "\n\n" + table(record)


def _field_table(record: dict, source: str) -> str:
    """``rnnlab field``'s table from its record (:func:`rnnlab.field.format_table`)."""
    from ..field import format_table

    return format_table(record, source)


def _known_table(record: dict, source: str) -> str:
    """``rnnlab field --known``'s table from its record (:func:`rnnlab.known.format_table`)."""
    from ..known import format_table

    return format_table(record, source)


VIEWS = {
    "speed": _captioned(speed.format_table),
    "speed-limits": _captioned(speed.format_limits),
    "papers": _captioned(papers_table),
    "papers-sentence": papers_sentence,
    "overhead": _captioned(overhead_table),
    "ensemble": _captioned(_ensemble_table),
    "small": _captioned(_small_table),
    "scan": _captioned(scan_table),
    "allocator": _captioned(allocator_table),
    "summary": _captioned(summary_table),
    "memory-sentence": memory_sentence,
    "field": _field_table,
    "field-known": _known_table,
}


def render_block(args: str, base: Path) -> str:
    """The generated text of one ``<!-- bench: VIEW RECORD [RECORD ...] -->`` block (RECORD
    relative to ``base``, the Markdown file's directory; VIEW one of :data:`VIEWS` or
    ``FILE.py:NAME``, see the module's docstring)."""
    parts = args.split()
    view = _view(args, Path(base), parts[0]) if parts and ".py:" in parts[0] else VIEWS.get(parts[0] if parts else "")
    if view is None or len(parts) < 2 or (len(parts) > 2 and view in VIEWS.values()):
        raise ValueError(
            f"bench block arguments {args!r}: expected 'VIEW RECORD' with VIEW one of {sorted(VIEWS)}, "
            "or 'FILE.py:NAME RECORD [RECORD ...]' (NAME a key of the VIEWS dictionary of FILE.py)"
        )
    loaded = [_load(args, Path(base), rel) for rel in parts[1:]]
    return view(*(rec for rec, _ in loaded), *(shown for _, shown in loaded)) + "\n"


_FILE_VIEWS: dict[Path, dict] = {}


def _view(args: str, base: Path, spec: str):
    """The view ``NAME`` of ``FILE.py:NAME``: the file (relative to ``base``) is read once."""
    import importlib.util

    rel, _, name = spec.rpartition(":")
    path = (base / rel).resolve()
    if path not in _FILE_VIEWS:
        if not path.is_file():
            raise ValueError(f"bench block {args!r}: views file {path} not found (fix the path before ':{name}')")
        module_spec = importlib.util.spec_from_file_location(f"_rnnlab_views_{len(_FILE_VIEWS)}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        _FILE_VIEWS[path] = getattr(module, "VIEWS", {})
    views = _FILE_VIEWS[path]
    if name not in views:
        raise ValueError(f"bench block {args!r}: {path} has no view {name!r} in its VIEWS; it has {sorted(views)}")
    return views[name]


def _load(args: str, base: Path, rel: str) -> tuple:
    """(record, the path a reader sees) of a block's record."""
    path = base / rel
    if not path.is_file():
        raise ValueError(f"bench block {args!r}: record {path} not found")
    return json.loads(path.read_text()), _shown(path, rel)


def _shown(path: Path, rel: str) -> str:
    """The record's path as a reader of the repository sees it (from the directory holding
    ``pyproject.toml``), else as the block names it."""
    for root in path.resolve().parents:
        if (root / "pyproject.toml").is_file():
            return path.resolve().relative_to(root).as_posix()
    return rel


def _row(record: dict, config: str, label: str) -> dict:
    for row in record["rows"]:
        if row["config"] == config and row["label"] == label and "error" not in row:
            return row
    raise ValueError(f"the record has no row {config} / {label}")
