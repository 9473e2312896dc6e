"""The Markdown that BENCHMARKS.md and docs/ show from timing records, with its caption.

A block in a Markdown file is marked::

    <!-- bench: VIEW RECORD -->
    ...                      (generated: do not edit by hand)
    <!-- /bench -->

``RECORD`` is a JSON record relative to the Markdown file; ``VIEW`` is one of :data:`VIEWS`:

* ``speed``, ``speed-limits``: a speed record's table (:func:`rnnlab.bench.speed.format_table`) or its
  limits table (:func:`rnnlab.bench.speed.format_limits`);
* ``papers``: the papers' code beside rnnlab (``benchmarks/papers_code.py``), with what each
  reference step keeps and leaves out; ``papers-target``: the "at least 3x" target as a table
  row; ``papers-sentence``: the speed-ups in one sentence, with the record's standing;
* ``overhead``: the backends' overhead per run (``benchmarks/backend_overhead.py``);
* ``ensemble``: ``rnnlab bench ensemble``'s table (``--json``);
* ``scan``: the LT-RNN's loop, fused loop and scan (``benchmarks/scan.py --json``), with the
  "scan at least 5x faster than its loop" target judged under it;
* ``allocator``: glibc allocator settings against time and page faults (``benchmarks/allocator.py``);
* ``summary``: the papers' cells and the classic baselines on copy, MNIST and PTB, against
  ``nn.LSTM`` (docs/guide.md, from the main speed record); ``memory-sentence``: the T = 10,000
  peak memory of the fused expRNN, its reference loop and ``nn.LSTM`` in one sentence;
* ``targets MAIN LARGE SCAN`` (three records): the issue's speed targets, measured and judged.

Every table starts with the record's caption (:func:`rnnlab.bench.benchrecord.caption`: idle, loaded
or legacy), the sentence names the record's standing, and a target is judged met or not only
from an idle record.
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
    return (
        "| target (issue) | measured (`" + source + "`) | status |\n|---|---|---|\n"
        f"| at least {PAPERS_TARGET:g}x faster than the papers' code, same configuration and threads "
        f"| {_speedups(record)} ({_rounds_note(record)}) | {papers_verdict(record)} |"
    )


def papers_sentence(record: dict, source: str) -> str:
    """The speed-ups over the papers' code in one sentence, with the record's standing."""
    return (
        f"Measured in one process (`{source}`: {standing(record)}; {_rounds_note(record)}), rnnlab "
        f"trains {_speedups(record)} faster than the papers' own code on the copy task; against the target "
        f"of at least {PAPERS_TARGET:g}x: {papers_verdict(record)}."
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

    return format_table(record["rows"])


# --- the LT-RNN scan and the allocator (benchmarks/scan.py, benchmarks/allocator.py) -------

#: the scan's target: at least this many times faster than its autograd loop
SCAN_TARGET = 5.0


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


def scan_target_row(record: dict) -> tuple[str, str, str]:
    """The targets table's row: the scan's speed-up at each size, judged from an idle record."""
    rows = record["rows"]
    T = rows[0]["T"]
    met = [f"{r['B']} x {r['H']}" for r in rows if scan_speedup(r, "scan")[0] >= SCAN_TARGET]
    measured = "; ".join(f"{scan_speedup(r, 'scan')[0]:.2f}x at B x H = {r['B']} x {r['H']}" for r in rows)
    detail = f"at B x H = {_list(met)} only" if met and len(met) < len(rows) else ""
    return (
        f"LT-RNN scan at least {SCAN_TARGET:g}x faster than its loop at T={T}",
        measured,
        _status(record, len(met) == len(rows), detail) if met else _status(record, False),
    )


def _scan_view(record: dict, source: str) -> str:
    target, measured, status = scan_target_row(record)
    return (
        benchrecord.caption(record, source)
        + "\n\n"
        + scan_table(record)
        + f"\n\nTarget: {target}: {status} (medians of the per-repeat ratios: {measured})."
    )


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


VIEWS = {
    "speed": _captioned(speed.format_table),
    "speed-limits": _captioned(speed.format_limits),
    "papers": _captioned(papers_table),
    "papers-target": lambda record, source: (
        benchrecord.caption(record, source) + "\n\n" + papers_target(record, source)
    ),
    "papers-sentence": papers_sentence,
    "overhead": _captioned(overhead_table),
    "ensemble": _captioned(_ensemble_table),
    "small": _captioned(_small_table),
    "scan": _scan_view,
    "allocator": _captioned(allocator_table),
    "summary": _captioned(summary_table),
    "memory-sentence": memory_sentence,
}


def render_block(args: str, base: Path) -> str:
    """The generated text of one ``<!-- bench: VIEW RECORD -->`` block (RECORD relative to
    ``base``, the Markdown file's directory)."""
    parts = args.split()
    if parts[:1] == ["targets"] and len(parts) == 4:  # the main, the large-size and the scan records
        loaded = [_load(args, Path(base), rel) for rel in parts[1:]]
        return targets_table(*(rec for rec, _ in loaded), *(shown for _, shown in loaded)) + "\n"
    if len(parts) != 2 or parts[0] not in VIEWS:
        raise ValueError(
            f"bench block arguments {args!r}: expected 'VIEW RECORD' with VIEW one of {sorted(VIEWS)}, "
            "or 'targets MAIN_RECORD LARGE_RECORD SCAN_RECORD'"
        )
    return VIEWS[parts[0]](*_load(args, Path(base), parts[1])) + "\n"


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


# --- the speed targets (BENCHMARKS.md) ----------------------------------------------------

CELL_NAMES = {"asrnn": "asRNN", "nnrnn": "nnRNN", "exprnn": "expRNN", "scornn": "scoRNN", "dmu": "DMU", "rhn": "RHN"}


def _row(record: dict, config: str, label: str) -> dict:
    for row in record["rows"]:
        if row["config"] == config and row["label"] == label and "error" not in row:
            return row
    raise ValueError(f"the record has no row {config} / {label}")


def _vs_lstm(record: dict, config: str, label: str) -> float:
    return speed.ratio(_row(record, config, label), "baseline")[0]


def _vs_floor(record: dict, config: str, label: str) -> float:
    row = _row(record, config, label)
    return row["fast"]["cpu"] / row["floor"]["s"]


def _status(record: dict, ok: bool, detail: str = "") -> str:
    """met / not met (with ``detail``) from an idle record; why not judged otherwise."""
    why = _judged(record)
    if why:
        return f"not judged: {why}"
    return ("**met**" if ok else "**not met**") + (f": {detail}" if detail else "")


def _list(parts: list[str]) -> str:
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def _no_slower_rows(main: dict) -> list[tuple[str, str, str]]:
    rows = []
    for cell, aim in (("asrnn", 0.8), ("nnrnn", 0.8), ("exprnn", None), ("scornn", None)):
        r = {c: _vs_lstm(main, c, cell) for c in ("copy", "mnist")}
        target = f"{CELL_NAMES[cell]} no slower than a matched `nn.LSTM`" + (f" (aim {aim:g})" if aim else "")
        slow = [c for c, v in r.items() if v > 1.0]
        detail = ""
        if slow:
            row = _row(main, "copy", cell)
            lstm = _row(main, "copy", speed.BASELINE)
            detail = (
                f"slower on {_list(slow)}; on copy its matrix-product floor alone is "
                f"{row['floor']['s'] / lstm['floor']['s']:.2f}x the LSTM's ({row['floor']['s']:.2f} s against "
                f"{lstm['floor']['s']:.2f} s)"
            )
        elif aim and all(v <= aim for v in r.values()):
            detail = "aim reached"
        rows.append((target, f"{r['copy']:.2f}x / {r['mnist']:.2f}x", _status(main, not slow, detail)))
    return rows


def _floor_rows(main: dict) -> list[tuple[str, str, str]]:
    cells = ("exprnn", "scornn", "nnrnn", "asrnn")
    f = {(cell, c): _vs_floor(main, c, cell) for cell in cells for c in ("copy", "mnist")}
    measured = ", ".join(f"{CELL_NAMES[cell]} {f[cell, 'copy']:.2f} / {f[cell, 'mnist']:.2f}" for cell in cells)
    over = [f"{CELL_NAMES[cell]} on {c}" for (cell, c), v in f.items() if v > 1.5]
    floor = (
        "those four within 1.5x of their matrix-product floor",
        measured,
        _status(main, not over, f"over 1.5x: {_list(over)} (exact tanh for asRNN, see docs/speed.md)" if over else ""),
    )
    depth = {}
    for cell in ("dmu", "rhn"):
        for c in ("copy", "mnist", "ptb"):
            row = _row(main, c, cell)
            depth[cell, c] = (_vs_lstm(main, c, cell), row.get("depth", 1))
    measured = "; ".join(
        f"{CELL_NAMES[cell]} (depth {depth[cell, 'copy'][1]}) "
        + " / ".join(f"{v / d:.2f}" for (k, c), (v, d) in depth.items() if k == cell)
        + " (per cell "
        + " / ".join(f"{v:.2f}" for (k, c), (v, d) in depth.items() if k == cell)
        + ")"
        for cell in ("dmu", "rhn")
    )
    worst = max(v / d for v, d in depth.values())
    per_depth = (
        "DMU and RHN within 1.5x of a matched LSTM per unit of recurrence depth (copy / MNIST / PTB)",
        measured,
        _status(main, worst <= 1.5),
    )
    return [floor, per_depth]


def _memory_row(main: dict) -> tuple[str, str, str]:
    """Memory does not depend on the load: judged from any record."""
    long = [r for r in main["rows"] if r["config"] == "long" and "error" not in r]
    big = max(long, key=lambda r: r["peak_mb"])
    exp, lstm = _row(main, "long", "exprnn"), _row(main, "long", speed.BASELINE)
    last, chunk = _row(main, "long-last", "exprnn"), _row(main, "long-last", "exprnn chunk=100")
    fits = all("error" not in r for r in main["rows"] if r["config"].startswith("long"))
    return (
        "memory at T=10,000 within the machine, and a time-chunked recomputation option",
        f"largest {big['peak_mb'] / 1024:.1f} GiB ({big['label']}); fused expRNN {exp['peak_mb'] / 1024:.1f} GiB, "
        f"`nn.LSTM` {lstm['peak_mb'] / 1024:.1f} GiB; `checkpoint_chunk=100` with the readout at the last step: "
        f"{last['peak_mb'] / 1024:.1f} -> {chunk['peak_mb'] / 1024:.1f} GiB",
        "**met**" if fits else "**not met**: a row failed",
    )


def _ptb_rows(large: dict) -> list[tuple[str, str, str]]:
    rows = []
    for cells, limit in ((("asrnn", "exprnn"), 1.5), (("scornn", "nnrnn"), 1.2)):
        r = {cell: _vs_lstm(large, "ptb", cell) for cell in cells}
        bound = []
        for cell in cells:
            row = _row(large, "ptb", cell)
            maps = row["maps"]["cpu"] if row.get("maps") else 0.0
            b = row["baseline"]["cpu"]
            bound.append(
                f"{CELL_NAMES[cell]}: floor alone {row['floor']['s'] / b:.2f}x the LSTM's time, "
                f"floor + maps {(row['floor']['s'] + maps) / b:.2f}x"
            )
        over = [CELL_NAMES[c] for c, v in r.items() if v > limit]
        rows.append(
            (
                f"PTB shapes: {' and '.join(CELL_NAMES[c] for c in cells)} at most {limit:g}x a matched "
                f"`nn.LSTM` (issue 15)",
                ", ".join(f"{CELL_NAMES[c]} {v:.2f}x" for c, v in r.items()),
                _status(large, not over, f"over for {_list(over)} ({'; '.join(bound)})" if over else ""),
            )
        )
    return rows


def _maps_row(large: dict) -> tuple[str, str, str]:
    """The column exists in the record: judged from any record."""
    ptb = {cell: _row(large, "ptb", cell) for cell in ("exprnn", "asrnn", "scornn", "nnrnn")}
    shares = [
        100 * r["maps"]["cpu"] / r["fast"]["cpu"]
        for r in large["rows"]
        if r["config"].startswith("mnist-n") and r.get("maps") and "error" not in r
    ]
    return (
        "the orthogonal maps' share as its own column (issue 15)",
        '"maps s/it (share)": PTB '
        + ", ".join(f"{CELL_NAMES[c]} {100 * r['maps']['cpu'] / r['fast']['cpu']:.0f}%" for c, r in ptb.items())
        + f"; MNIST n=257-512 {min(shares):.0f}-{max(shares):.0f}%",
        "**met**",
    )


def _mnist_rows(large: dict) -> list[tuple[str, str, str]]:
    sizes = ("mnist-n257", "mnist-n364", "mnist-n512")
    r = {cell: [_vs_lstm(large, s, cell) for s in sizes] for cell in ("asrnn", "nnrnn")}
    lstm = (
        "sequential MNIST n = 257, 364, 512: asRNN and nnRNN at most 1.0x `nn.LSTM` (issue 15)",
        ", ".join(f"{CELL_NAMES[c]} " + " / ".join(f"{v:.2f}" for v in vs) + "x" for c, vs in r.items()),
        _status(large, all(v <= 1.0 for vs in r.values() for v in vs)),
    )
    cells = ("exprnn", "scornn", "asrnn", "nnrnn")
    f = {(cell, s): _vs_floor(large, s, cell) for cell in cells for s in sizes}
    over = [f"{CELL_NAMES[cell]} at n = {s[7:]}" for (cell, s), v in f.items() if v > 1.5]
    floor = (
        "sequential MNIST n = 257, 364, 512: every cell within 1.5x of its matrix-product floor (issue 15)",
        ", ".join(f"{CELL_NAMES[c]} " + " / ".join(f"{f[c, s]:.2f}" for s in sizes) for c in cells),
        _status(large, not over, f"over 1.5x: {_list(over)}" if over else ""),
    )
    return [lstm, floor]


#: targets without a timing record, as written (their evidence is named in the row)
STATIC_TARGETS = [
    (
        "allocator and thread conditions stated; `nn.LSTM` under the same; a decision on page faults",
        "every table states them; the CLI calls `tune_malloc()`",
        "**met**",
    ),
    ("the same table on a GPU", "no GPU was lent", "not done"),
]


def targets_table(main: dict, large: dict, scan: dict, main_source: str, large_source: str, scan_source: str) -> str:
    """The issue's speed targets against the main, the large-size and the scan records: the
    measured medians and a verdict, judged only from an idle record (memory and the maps column
    from any); the papers' code target is its own block (``papers-target``)."""
    target, measured, status = scan_target_row(scan)
    rows = [
        *_no_slower_rows(main),
        *_floor_rows(main),
        (target, f"{measured} (`{scan_source}`)", status),
        STATIC_TARGETS[0],
        _memory_row(main),
        STATIC_TARGETS[1],
        *_ptb_rows(large),
        _maps_row(large),
        *_mnist_rows(large),
    ]
    lines = [
        benchrecord.caption(main, main_source),
        "",
        benchrecord.caption(large, large_source),
        "",
        benchrecord.caption(scan, scan_source),
        "",
        f"| target (issue) | measured (copy / MNIST unless stated; `{main_source}`, the PTB and MNIST n = 257-512 "
        f"rows `{large_source}`) | status |",
        "|---|---|---|",
    ]
    lines += [f"| {t} | {m} | {s} |" for t, m, s in rows]
    return "\n".join(lines)
