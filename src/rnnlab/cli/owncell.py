"""``rnnlab check-cell`` and ``rnnlab compare``: a cell of your own against the contract and
against the papers' baselines (docs/own-cell.md); ``rnnlab field``: every cell against every
other (docs/field.md)."""

from __future__ import annotations

from .common import _names
from .training import _parse_seeds


def cmd_check_cell(args) -> int:
    from ..cellcheck import main_check_cell

    return main_check_cell(args.cell, args.option or [], runs=not args.no_runs, as_json=args.json)


def cmd_compare(args) -> int:
    from ..compare import main_compare

    return main_compare(
        cell=args.cell,
        tasks=_names(args.tasks, "--tasks", "adding,copy-T200", "all of them"),
        budget=args.budget,
        seeds=_parse_seeds(args.seeds),
        out=args.out,
        runs_dir=args.runs_dir,
        jobs=args.jobs,
        backend=args.backend,
        address=args.address,
        data_dir=args.data_dir,
        overrides=args.set or [],
        ensemble=args.ensemble,
        modern=args.modern,
    )


def cmd_field(args) -> int:
    from ..field import main_field

    if args.known:
        from ..known import main_known

        return main_known(
            checks=_names(args.checks, "--checks", "mamba-selective-copy,lru-ring", "every check"),
            budget=args.budget,
            seeds=_parse_seeds(args.seeds),
            out=args.out,
            record=args.record,
            data_dir=args.data_dir,
        )
    return main_field(
        cells=_names(args.cells, "--cells", "lstm,lru", "every cell"),
        tasks=_names(args.tasks, "--tasks", "adding,mqar", "all of them"),
        budget=args.budget,
        seeds=_parse_seeds(args.seeds),
        out=args.out,
        record=args.record,
        figure_path=args.figure,
        jobs=args.jobs,
        backend=args.backend,
        address=args.address,
        data_dir=args.data_dir,
        overrides=args.set or [],
        priced_out=args.priced_out,
        merge=args.merge,
    )
