"""The commands over many runs: ``suite``, ``sweep``, ``bench``, ``reproduce`` and ``demo``."""

from __future__ import annotations

from pathlib import Path

from .common import DEMO_METRICS, DEMO_PRESETS, _at_least_one, progress_line, quiet
from .training import _device_overrides, _parse_seeds, _print_result


def cmd_suite(args) -> int:
    from ..suite import list_suites, load_suite, main_suite

    if args.name == "list":
        for name in list_suites():
            s = load_suite(name)
            print(f"  {name:22s} {len(s.presets)} presets x {len(s.seeds)} seeds: {s.description}")
        return 0
    if args.price:  # what its runs cost; nothing runs
        import dataclasses

        from ..ledger.price import suite_price_lines

        suite = load_suite(args.name)
        suite = suite if args.seeds is None else suite.only_seeds(_parse_seeds(args.seeds))
        suite = suite if args.ensemble is None else dataclasses.replace(suite, ensemble=args.ensemble)
        print("\n".join(suite_price_lines(suite, list(args.set or []))))
        return 0
    return main_suite(
        name=args.name,
        runs_dir=args.runs_dir,
        jobs=args.jobs,
        overrides=list(args.set or []) + _device_overrides(args),
        data_dir=args.data_dir,
        backend=args.backend,
        address=args.address,
        ensemble=args.ensemble,
        seeds=None if args.seeds is None else _parse_seeds(args.seeds),
    )


def cmd_sweep(args) -> int:
    from ..sweep import main_sweep

    return main_sweep(
        args.spec,
        out=args.out,
        runs_dir=args.runs_dir,
        trials=args.trials,
        overrides=list(args.set or []) + _device_overrides(args),
        storage=args.storage,
        workers=args.workers,
        backend=args.backend,
        address=args.address,
        heartbeat=args.heartbeat,
        db_timeout=args.db_timeout,
        report_only=args.report_only,
        data_dir=args.data_dir,
    )


def cmd_bench(args) -> int:
    from ..bench import speed

    return speed.main(**{k: getattr(args, k) for k in speed.OPTIONS})


def cmd_bench_ensemble(args) -> int:
    from ..bench import ensemble_bench

    return ensemble_bench.main(**{k: getattr(args, k) for k in ensemble_bench.OPTIONS})


def cmd_reproduce(args) -> int:
    from ..ledger import collect, main_compact, main_ledger

    if args.action == "plan":
        from ..ledger.plan import main_plan

        return main_plan(args.runs or ["records"], budget=args.budget, paper=args.paper, output=args.output)
    if args.action == "ledger":
        return main_ledger(args.runs or ["records"], output=args.output)
    if args.action == "promote":
        from ..ledger.declared import main_promote

        return main_promote(args.runs or ["records"], args.output, paper=args.paper)
    if args.action == "compact":
        if len(args.runs) > 1 or args.output:
            raise ValueError("usage: rnnlab reproduce compact [RECORDS_DIR] (one records directory, in place; no -o)")
        return main_compact(args.runs[0] if args.runs else "records")
    if len(args.runs) != 1 or not args.output:
        raise ValueError("usage: rnnlab reproduce collect RUNS_DIR -o RECORDS_DIR (one runs directory)")
    copied = collect(args.runs[0], args.output)
    print(
        f"copied the small files of {len(copied)} runs to {args.output} (metrics.jsonl in columns, config.json, task.json and result.json xz-compressed)"
    )
    return 0


def _demo_run(name: str, out: Path, overrides: list[str], fresh: bool, progress: bool | None = None) -> Path:
    """Train one demo model into ``out`` (or reuse a finished run of the same configuration)."""
    import shutil

    from .. import config, rundir, train

    cfg = config.load(name, overrides)
    # a run with other steps gets its own directory; one is reused only if its config matches
    run_dir = rundir.run_dir(out, cfg, config.load(name)).parent
    with rundir.claim(run_dir):
        if not fresh and rundir.is_finished(run_dir, cfg):
            progress_line(f"{cfg.name}: already done in {run_dir} (use --fresh to rerun)")
            return run_dir
        for f in run_dir.iterdir():  # under the lock: clear a stale or --fresh run
            if f.name != rundir.LOCK_NAME:
                shutil.rmtree(f) if f.is_dir() else f.unlink()
        progress_line(
            f"training {cfg.name} ({cfg.model.cell}, hidden {cfg.model.hidden_size or f'for {cfg.model.params} parameters'}) "
            f"on {cfg.task.name} L={cfg.task.options.get('L')} ..."
        )
        _print_result(train.train(cfg, run_dir, progress=progress))
    return run_dir


def _demo_record(dirs: list[Path], png: Path, record: Path) -> None:
    import shutil

    from .. import rundir
    from ..results import table

    for d in dirs:
        (record / d.name).mkdir(parents=True, exist_ok=True)
        for f in rundir.RunFiles(d).record():
            shutil.copyfile(f, record / d.name / f.name)
    shutil.copyfile(png, record / "loss.png")
    (record / "table.md").write_text(table(record, DEMO_METRICS) + "\n")
    print(f"recorded in {record} (update the README block: python -m rnnlab.bench.docsync README.md)")


def cmd_demo(args) -> int:
    from .. import rundir
    from ..plots import plot_curves
    from ..results import copy_verdict, table

    _at_least_one(args.steps, "--steps", "training steps per model; leave it out for the presets' 600")
    out = Path(args.out)
    overrides = ([f"train.steps={args.steps}"] if args.steps is not None else []) + _device_overrides(args)
    bar = False if quiet(args) else None
    dirs = [_demo_run(name, out, overrides, args.fresh, bar) for name in DEMO_PRESETS]
    png = plot_curves(dirs, out / "loss.png", "val/loss", title="copy task (K=10, L=40): validation loss")
    md = table(dirs, DEMO_METRICS)
    (out / "table.md").write_text(md + "\n")
    print()
    print(md)
    print()
    for d in dirs:  # one sentence per model, from its numbers
        print(copy_verdict(rundir.RunFiles(d).read_result())[1])
    print(f"\nwrote {png} and {out / 'table.md'}")
    if args.record:
        _demo_record(dirs, png, Path(args.record))
    return 0
