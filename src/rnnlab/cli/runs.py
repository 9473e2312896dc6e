"""The commands that read runs or their data: ``evaluate``, ``export``, ``table``, ``thresholds``,
``plot`` and ``data``.
"""

from __future__ import annotations

import json

from .common import DEPRECATED_UNTIL, _at_least_one, _names, _note


def cmd_evaluate(args) -> int:
    from ..train import evaluate, load_run

    cfg, task, model = load_run(args.run, which=args.which, data_dir=args.data_dir, device=args.device, data=True)
    metrics = evaluate(model, task, args.split, cfg.train.eval_batch_size, cfg.train.eval_max_batches)
    print(json.dumps(metrics, indent=2))
    return 0


def cmd_export(args) -> int:
    from ..results import export_csv

    if args.csv:
        _note(
            f"export --csv is no longer needed (CSV is the only format) and is ignored; it is accepted "
            f"until rnnlab {DEPRECATED_UNTIL}"
        )
    print(f"wrote {export_csv(args.run, out=args.output)}")
    return 0


def cmd_table(args) -> int:
    from ..results import table

    metrics = _names(args.metrics, "--metrics", "test/loss,test/accuracy", "the task's own")
    print(table(args.runs_dir, metrics=metrics))
    return 0


def cmd_thresholds(args) -> int:
    from ..config import ConfigError
    from ..results import DMU_THRESHOLDS, threshold_counts

    if args.steps_per_epoch is not None:
        _at_least_one(args.steps_per_epoch, "--steps-per-epoch", "optimizer steps per epoch; the DMU presets use 10")
    try:
        ths = DMU_THRESHOLDS if args.thresholds is None else tuple(float(t) for t in args.thresholds.split(","))
    except ValueError:
        raise ConfigError(
            f"--thresholds must be comma-separated numbers (e.g. --thresholds 1e-2,1e-4), got {args.thresholds!r}"
        ) from None
    counts = threshold_counts(args.runs_dir, metric=args.metric, thresholds=ths, steps_per_epoch=args.steps_per_epoch)
    for name, per in counts.items():
        epochs = len(next(iter(per.values()), []))
        print(f"{name}: runs that reached {args.metric} <= threshold by epoch (of {epochs} epochs)")
        marks = sorted({1, epochs} | {e for e in (5, 10, 20, 50, 100) if e <= epochs})
        print("  threshold | " + " | ".join(f"ep {e}" for e in marks))
        for th, row in per.items():
            print(f"  {th:9.0e} | " + " | ".join(str(row[e - 1]) for e in marks))
    return 0


def cmd_plot(args) -> int:
    from .. import rundir
    from ..plots import plot_curves

    dirs = sorted({p.parent for d in args.runs for p in rundir.RunFiles.below(d, rundir.RunFiles.METRICS)})
    if not dirs:
        from ..rundir import NoSuchPath

        raise NoSuchPath(f"no run directories (with metrics.jsonl) below {args.runs}")
    out = plot_curves(dirs, args.output, metric=args.metric, logy=not args.linear)
    print(f"wrote {out}")
    return 0


def cmd_data(args) -> int:
    from ..tasks import data

    if args.action in ("list", "verify"):
        text, ok = data.status_report(args.names or None, data_dir=args.data_dir)
        print(text)
        return 0 if ok or args.action == "list" else 1
    if not args.names:
        raise ValueError(f"rnnlab data download needs dataset names; known: {sorted(data.DATASETS)}")
    for name in args.names:
        data.download(name, data_dir=args.data_dir, force=args.force, progress=not args.quiet)
    return 0
