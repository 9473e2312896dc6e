"""Markdown blocks generated from committed run records, so quoted numbers never go stale.

A block in a Markdown file is marked::

    <!-- table: docs/demo test/loss,test/recall_accuracy -->
    | run | cell | ... |            (generated: do not edit by hand)
    <!-- /table -->

The first word after ``table:`` is a directory of run records (``result.json`` files), relative
to the Markdown file; the optional second names the metrics; a last word ``notiming`` leaves
out the timing columns (for tables whose every number a rerun reproduces). ``python -m rnnlab.bench.docsync
README.md`` rewrites every block from its records; ``--check`` only reports the blocks that
differ (exit status 1), which is what the test suite runs. Blocks marked ``<!-- bench: VIEW
RECORD -->`` ... ``<!-- /bench -->`` hold tables and sentences of timing records
(:mod:`rnnlab.bench.benchdocs`) and are kept current the same way. A block marked ``<!-- ledger:
RECORDS LEDGER -->`` ... ``<!-- /ledger -->`` holds the reproduction ledger's one-line summary
(:func:`rnnlab.ledger.summary_line` over the records directory, linking the ledger's file).

A number quoted in prose is marked inline::

    test recall <!-- value: ../records/henaff-T750/henaff-copy-ltirnn-T750 test/recall_accuracy .4f -->0.2418<!-- /value -->

``value: DIR METRIC FORMAT [HOW]``: the run records below DIR (relative to the Markdown file),
METRIC as the ledger reads it (a test metric, else the final one), FORMAT a Python format
specification (``.4f``, ``.2%``; ``x100:.2f`` multiplies by 100 first, for percentage points),
HOW one of ``one`` (the default: exactly one record), ``each`` (every record's value in seed
order, "a, b and c"), ``mean``, ``sd`` (the sample standard deviation), ``min``, ``max``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ..results import table
from . import benchdocs

BLOCK = re.compile(r"(<!-- (?P<kind>table|bench): (?P<args>[^>]*?) -->\n)(?P<body>.*?)(<!-- /(?P=kind) -->)", re.S)
LEDGER_BLOCK = re.compile(r"(<!-- ledger: (?P<args>[^>]*?) -->\n)(?P<body>.*?)(<!-- /ledger -->)", re.S)
VALUE_BLOCK = re.compile(r"(<!-- value: (?P<args>[^>]*?) -->)(?P<body>[^<]*?)(<!-- /value -->)")

#: how a value block reduces its records' values
HOWS = ("one", "each", "mean", "sd", "min", "max")


def render(args: str, base: Path, kind: str = "table") -> str:
    """The generated text of one block: ``args`` = 'DIR [METRIC,METRIC...] [notiming]' (a
    ``bench`` block: :func:`rnnlab.bench.benchdocs.render_block`)."""
    if kind == "bench":
        return benchdocs.render_block(args, base)
    parts = args.split()
    timing = not (parts and parts[-1] == "notiming")
    if not timing:
        parts = parts[:-1]
    if not parts or len(parts) > 2:
        raise ValueError(f"table block arguments {args!r}: expected 'DIR [METRIC,METRIC...] [notiming]'")
    metrics = parts[1].split(",") if len(parts) == 2 else None
    return table(base / parts[0], metrics, timing=timing) + "\n"


def render_ledger(args: str, base: Path) -> str:
    """The generated text of one ledger block: ``args`` = 'RECORDS_DIR LEDGER_FILE'."""
    from ..ledger import summary_line

    parts = args.split()
    if len(parts) != 2:
        raise ValueError(f"ledger block arguments {args!r}: expected 'RECORDS_DIR LEDGER_FILE'")
    return summary_line([base / parts[0]], link=parts[1]) + "\n"


def _format(x: float, spec: str) -> str:
    if spec.startswith("x100:"):
        return format(100.0 * x, spec[5:])
    return format(x, spec)


def render_value(args: str, base: Path) -> str:
    """The generated text of one inline value: ``args`` = 'DIR METRIC FORMAT [HOW]'."""
    from ..ledger.records import load_records
    from ..results import mean_std

    parts = args.split()
    how = parts.pop() if len(parts) == 4 else "one"
    if len(parts) != 3 or how not in HOWS:
        raise ValueError(f"value block arguments {args!r}: expected 'DIR METRIC FORMAT [HOW]', HOW one of {HOWS}")
    rel, metric, spec = parts
    records, _, _ = load_records([base / rel])
    records.sort(key=lambda r: (r.config.get("train", {}).get("seed", 0), str(r.path)))
    values = [r.value(metric) for r in records]
    if not records or any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values):
        raise ValueError(f"value block {args!r}: {len(records)} records below {base / rel}, values {values}")
    if how == "one":
        if len(values) != 1:
            raise ValueError(
                f"value block {args!r}: 'one' needs exactly one record, found {len(values)} (a preset "
                f"with more seeds: point DIR at one seed's folder, DIR/seedNNNN, or give HOW each or mean)"
            )
        return _format(values[0], spec)
    if how == "each":
        shown = [_format(v, spec) for v in values]
        return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
    if how in ("mean", "sd"):
        m, sd = mean_std(values)
        return _format(m if how == "mean" else sd, spec)
    return _format(min(values) if how == "min" else max(values), spec)


def sync(path: str | Path, check: bool = False) -> list[str]:
    """Regenerate the blocks of ``path`` (or with ``check``, leave it alone); returns the
    arguments of the blocks whose committed text differed from their records."""
    path = Path(path)
    text = path.read_text()
    stale: list[str] = []

    def regenerate(body_of, label: str):
        """A substitution that puts ``body_of(match)`` in place of a block's body, noting the
        block (``label`` + its arguments) when the committed body differed."""

        def sub(m: re.Match) -> str:
            new = body_of(m.group("args"), m)
            if new != m.group("body"):
                stale.append(label + m.group("args"))
            return m.string[m.start() : m.start("body")] + new + m.string[m.end("body") : m.end()]

        return sub

    base = path.parent
    new_text = BLOCK.sub(regenerate(lambda a, m: render(a, base, m.group("kind")), ""), text)
    new_text = LEDGER_BLOCK.sub(regenerate(lambda a, m: render_ledger(a, base), "ledger: "), new_text)
    new_text = VALUE_BLOCK.sub(regenerate(lambda a, m: render_value(a, base), "value: "), new_text)
    if not check and new_text != text:
        path.write_text(new_text)
    return stale


def blocks(path: str | Path) -> list[tuple[str, str]]:
    """``(arguments, committed body)`` of every block in ``path``."""
    return [(m.group("args"), m.group("body")) for m in BLOCK.finditer(Path(path).read_text())]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m rnnlab.bench.docsync",
        description="Regenerate the Markdown tables marked <!-- table: DIR --> "
        "(run records), <!-- bench: VIEW RECORD --> (timing records) and "
        "<!-- ledger: RECORDS LEDGER --> (the reproduction ledger's summary), and the inline "
        "numbers marked <!-- value: DIR METRIC FORMAT [HOW] --> (run records quoted in prose).",
    )
    p.add_argument("files", nargs="+", help="Markdown files, e.g. README.md")
    p.add_argument("--check", action="store_true", help="only report stale blocks (exit 1 if any)")
    args = p.parse_args(argv)
    bad = 0
    for f in args.files:
        try:
            stale = sync(f, check=args.check)
        except (ValueError, OSError) as e:  # a block's arguments or records: one line, the file untouched
            print(f"docsync: error: {f}: {e}", file=sys.stderr)
            return 2
        for s in stale:
            print(f"{f}: block '{s}' {'is stale' if args.check else 'regenerated'}")
        bad += len(stale)
    return 1 if (bad and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
