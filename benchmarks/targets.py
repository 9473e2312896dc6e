"""The project's own targets, judged from its timing records: the views of the
``<!-- bench: benchmarks/targets.py:VIEW RECORD ... -->`` blocks of BENCHMARKS.md and docs/
(rendered by ``python -m rnnlab.bench.docsync``, which reads :data:`VIEWS` of this file).

* ``targets MAIN LARGE SCAN`` (three records): the speed targets, measured and judged;
* ``papers-target``: rnnlab at least 3x faster than the papers' own code, as a table row;
  ``papers-sentence``: the speed-ups in one sentence, judged against that target;
* ``scan``: the LT-RNN scan's table with "at least 5x faster than its loop" judged under it;
* ``ensemble-target``: one ensemble of 51 DMU members on adding against its target;
* ``small-targets``: the tiny models' targets (one thread, batch 32, the 15 DMU synthetic presets,
  the scalar floor timed in the same step) judged from a ``benchmarks/small_models.py`` record.

A target is judged met or not only from an idle record (:func:`rnnlab.bench.benchdocs.standing`);
memory and the maps column from any record.
"""

from __future__ import annotations

from rnnlab.bench import benchrecord, speed
from rnnlab.bench.benchdocs import (
    PAPERS_NAMES,
    _judged,
    _rounds_note,
    _row,
    _speedups,
    papers_models,
    papers_ratio,
    scan_speedup,
    scan_table,
)
from rnnlab.bench.benchdocs import papers_sentence as _papers_sentence

#: rnnlab's training step at least this many times faster than the papers' own code
PAPERS_TARGET = 3.0
#: the LT-RNN scan at least this many times faster than its autograd loop
SCAN_TARGET = 5.0
#: an ensemble of 51 DMU members on adding in at most this many times one run's time
ENSEMBLE_TARGET = 4.0


# --- the papers' code -----------------------------------------------------------------------


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
        "| target | measured (`" + source + "`) | status |\n|---|---|---|\n"
        f"| at least {PAPERS_TARGET:g}x faster than the papers' code, same configuration and threads "
        f"| {_speedups(record)} ({_rounds_note(record)}) | {papers_verdict(record)} |"
    )


def papers_sentence(record: dict, source: str) -> str:
    """The speed-ups over the papers' code in one sentence, with the record's standing, judged
    against :data:`PAPERS_TARGET`."""
    return _papers_sentence(
        record, source, f"against the target of at least {PAPERS_TARGET:g}x: {papers_verdict(record)}"
    )


# --- the LT-RNN scan ----------------------------------------------------------------------


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


def scan_view(record: dict, source: str) -> str:
    """The scan's table with its target judged under it."""
    target, measured, status = scan_target_row(record)
    return (
        benchrecord.caption(record, source)
        + "\n\n"
        + scan_table(record)
        + f"\n\nTarget: {target}: {status} (medians of the per-repeat ratios: {measured})."
    )


# --- the speed targets (BENCHMARKS.md) ----------------------------------------------------

CELL_NAMES = {"asrnn": "asRNN", "nnrnn": "nnRNN", "exprnn": "expRNN", "scornn": "scoRNN", "dmu": "DMU", "rhn": "RHN"}


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
                f"PTB shapes: {' and '.join(CELL_NAMES[c] for c in cells)} at most {limit:g}x a matched `nn.LSTM`",
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
        "the orthogonal maps' share as its own column",
        '"maps s/it (share)": PTB '
        + ", ".join(f"{CELL_NAMES[c]} {100 * r['maps']['cpu'] / r['fast']['cpu']:.0f}%" for c, r in ptb.items())
        + f"; MNIST n=257-512 {min(shares):.0f}-{max(shares):.0f}%",
        "**met**",
    )


def _mnist_rows(large: dict) -> list[tuple[str, str, str]]:
    sizes = ("mnist-n257", "mnist-n364", "mnist-n512")
    r = {cell: [_vs_lstm(large, s, cell) for s in sizes] for cell in ("asrnn", "nnrnn")}
    lstm = (
        "sequential MNIST n = 257, 364, 512: asRNN and nnRNN at most 1.0x `nn.LSTM`",
        ", ".join(f"{CELL_NAMES[c]} " + " / ".join(f"{v:.2f}" for v in vs) + "x" for c, vs in r.items()),
        _status(large, all(v <= 1.0 for vs in r.values() for v in vs)),
    )
    cells = ("exprnn", "scornn", "asrnn", "nnrnn")
    f = {(cell, s): _vs_floor(large, s, cell) for cell in cells for s in sizes}
    over = [f"{CELL_NAMES[cell]} at n = {s[7:]}" for (cell, s), v in f.items() if v > 1.5]
    floor = (
        "sequential MNIST n = 257, 364, 512: every cell within 1.5x of its matrix-product floor",
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
    """The speed targets against the main, the large-size and the scan records: the
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
        f"| target | measured (copy / MNIST unless stated; `{main_source}`, the PTB and MNIST n = 257-512 "
        f"rows `{large_source}`) | status |",
        "|---|---|---|",
    ]
    lines += [f"| {t} | {m} | {s} |" for t, m, s in rows]
    return "\n".join(lines)


# --- the ensemble ---------------------------------------------------------------------------


def ensemble_verdict(record: dict) -> str:
    """DMU adding, 51 members, against :data:`ENSEMBLE_TARGET` (from an idle record)."""
    row = next((r for r in record["rows"] if r["bench"] == "dmu-adding" and r["members"] == 51), None)
    if row is None:
        return "not judged: the record has no 51-member DMU adding row"
    ratio = row["ensemble_over_one_run"]
    why = _judged(record)
    verdict = f"not judged: {why}" if why else "met" if ratio <= ENSEMBLE_TARGET else "not met"
    return (
        f"DMU adding, 51 members: {ratio:.2f}x one run's time (target <= {ENSEMBLE_TARGET:g}x: {verdict}), "
        f"{row['speedup']:.1f}x the throughput of separate runs"
    )


# --- the tiny models (benchmarks/small_models.py) ----------------------------------------------

#: the tiny models' targets: a step at E = 51 at most this many floors, at E = 1 at most this many,
#: 8 runs in turn at least this many times one ensemble of 8, an evaluation of 51 members at most
#: this many lone runs' (0.5 a member), the whole protocol (15 presets x 51 seeds) in these CPU-hours
SMALL_TARGETS = {"e51_floor": 0.5, "e1_floor": 2.0, "eight": 4.0, "eval51": 25.5, "protocol_h": 2.0}


def _span(values: dict, fmt: str) -> str:
    lo, hi = min(values, key=values.get), max(values, key=values.get)
    return f"{format(values[lo], fmt)} ({lo}) to {format(values[hi], fmt)} ({hi})"


def _short(preset: str) -> str:
    return preset.split("/", 1)[-1]


def small_target_rows(record: dict) -> list[tuple[str, str, str]]:
    """(target, measured, status) of each tiny-model target the record's sizes allow."""
    from rnnlab.bench.small_bench import in_turn, protocol_hours

    t = SMALL_TARGETS
    by = {(r["preset"], r["members"]): r for r in record["rows"]}
    presets = list(dict.fromkeys(r["preset"] for r in record["rows"]))

    def floors(size):
        return {_short(p): by[p, size]["after_s"] / by[p, size]["floor_s"] for p in presets if (p, size) in by}

    def judged(values, ok, fmt):
        met = [k for k, v in values.items() if ok(v)]
        detail = f"{len(met)} of {len(values)} presets meet it" + (
            f" ({_list(met)})" if 0 < len(met) < len(values) else ""
        )
        return _span(values, fmt), _status(record, len(met) == len(values), detail)

    rows = []
    for size, key in ((51, "e51_floor"), (1, "e1_floor")):
        v = floors(size)
        if v:
            rows.append(
                (
                    f"E = {size}: a step at most {t[key]:g}x the scalar floor",
                    *judged(v, lambda x, lim=t[key]: x <= lim, ".2f"),
                )
            )
    eight = {_short(p): in_turn(by[p, 1], by[p, 8]) for p in presets if (p, 1) in by and (p, 8) in by}
    if eight:
        rows.append(
            (
                f"8 members as one ensemble at least {t['eight']:g}x faster than 8 runs in turn",
                *judged(eight, lambda x: x >= t["eight"], ".2f"),
            )
        )
    ev = {_short(p): by[p, 51]["eval_s"] / by[p, 1]["eval_s"] for p in presets if (p, 1) in by and (p, 51) in by}
    if ev:
        rows.append(
            (
                f"an evaluation of 51 members at most {t['eval51']:g}x a lone run's (0.5 a member)",
                *judged(ev, lambda x: x <= t["eval51"], ".1f"),
            )
        )
    hours = protocol_hours(record["rows"])
    if len(hours) == 15:
        total = sum(hours.values())
        rows.append(
            (
                f"the whole protocol (15 presets x 51 seeds) in at most {t['protocol_h']:g} CPU-h",
                f"{total:.2f} CPU-h (projected)",
                _status(record, total <= t["protocol_h"]),
            )
        )
    return rows


def small_targets(record: dict, source: str) -> str:
    lines = [
        f"| target | measured (`{source}`; lowest to highest, by preset) | status |",
        "|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in small_target_rows(record)]
    return "\n".join(lines)


# --- the views ------------------------------------------------------------------------------

VIEWS = {
    "targets": targets_table,
    "papers-target": lambda record, source: (
        benchrecord.caption(record, source) + "\n\n" + papers_target(record, source)
    ),
    "papers-sentence": papers_sentence,
    "scan": scan_view,
    "ensemble-target": lambda record, source: f"Against the target (`{source}`): {ensemble_verdict(record)}.",
    "small-targets": small_targets,
}
