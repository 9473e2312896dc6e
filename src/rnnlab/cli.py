"""The ``rnnlab`` command line; the only module that reads ``sys.argv``.

Each command is two functions: ``_parser_NAME(sub)`` adds its parser and sets
``func=cmd_NAME``, taking the options that several commands share from the ``_opt_*``
functions (each defined once); ``cmd_NAME(args)`` reads the parsed arguments and hands them
on to the library as keyword arguments, never as the ``argparse.Namespace``. A new command is
these two functions plus its parser function in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import sys
from pathlib import Path

#: where ``--help`` points for documentation (the wheel ships no docs/); the one home of this URL
DOCS_URL = "https://github.com/rnnlab/rnnlab/blob/main/docs/"
#: the release that stops accepting the deprecated spellings (``analyze jacobian -o FILE``,
#: ``export --csv``); they are accepted, with a note on stderr, until then
DEPRECATED_UNTIL = "0.4.0"

#: the demo: the papers' models (asRNN, nnRNN, DMU, LT-RNN) beside an LSTM, about 7K parameters each
DEMO_PRESETS = ["demo/lstm", "demo/asrnn", "demo/nnrnn", "demo/dmu", "demo/ltrnn"]
DEMO_METRICS = ["test/loss", "test/recall_accuracy"]
#: files of a demo run copied into a record (``rnnlab demo --record``): no weights
RECORD_FILES = ("config.json", "task.json", "metrics.jsonl", "result.json")


def _note(text: str) -> None:
    print(f"rnnlab: note: {text}", file=sys.stderr)


def _at_least_one(value: int | None, flag: str, meaning: str) -> None:
    """Refuse a count below 1 given on the command line (one line, exit 2); None: not given."""
    from .config import ConfigError

    if value is not None and value < 1:
        raise ConfigError(f"{flag} must be an integer >= 1 ({meaning}), got {value}")


# ------------------------------------------------------------------------------ list, preset


def _signature(cls, skip=("self", "input_size", "hidden_size")) -> str:
    parts = []
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in skip or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        parts.append(name if p.default is p.empty else f"{name}={p.default!r}")
    return ", ".join(parts)


def _preset_line(name: str) -> str:
    """What ``rnnlab list presets`` shows of a preset, read from its TOML alone (no torch)."""
    from . import config

    try:
        data = config.tomllib.loads(config.preset_path(name).read_text())
    except (config.tomllib.TOMLDecodeError, OSError) as e:
        return f"  {name:28s} (unavailable: {e})"
    cell = data.get("model", {}).get("cell", config.ModelConfig.cell)
    task = data.get("task", {}).get("name", config.TaskConfig.name)
    steps = data.get("train", {}).get("steps", config.TrainConfig.steps)
    return f"  {name:28s} {cell} on {task}, {steps} steps"


def cmd_list(args) -> int:
    from . import config

    what = args.what
    if what == "presets":  # only the preset files: no torch, starts at once
        print("presets (rnnlab train NAME):")
        for name in config.list_presets():
            print(_preset_line(name))
        return 0
    from .cells import CELLS
    from .tasks import TASKS

    if what in ("all", "cells"):
        print("cells (model.cell; options go under [model.cell_options]):")
        for k, source in CELLS.available().items():  # registered, then installed entry points
            try:
                c = CELLS.resolve(k)
            except ValueError as e:
                print(f"  {k:12s} (unavailable: {e})")
                continue
            where = "" if k in CELLS.builtin else f"  [{source}]"
            print(f"  {k:12s} {c.__name__}({_signature(c)}){where}")
    if what in ("all", "tasks"):
        print("tasks (task.name; options go under [task]):")
        for k, t in TASKS.items():
            print(f"  {k:10s} {t.__name__}({_signature(t, ('self',))})")
    if what in ("all", "presets"):
        print("presets (rnnlab train NAME):")
        for name in config.list_presets():
            try:
                cfg = config.load(name)
            except config.ConfigError as e:  # e.g. a preset whose task is not registered yet
                print(f"  {name:28s} (unavailable: {str(e).split(': ', 1)[-1]})")
                continue
            print(f"  {name:28s} {cfg.model.cell} on {cfg.task.name}, {cfg.train.steps} steps")
    return 0


def cmd_preset_show(args) -> int:
    from .config import preset_path

    print(preset_path(args.name).read_text(encoding="utf-8"), end="")
    return 0


def cmd_preset_copy(args) -> int:
    from .config import ConfigError, preset_path

    src = preset_path(args.name)
    dest = Path(args.file)
    if dest.is_dir():
        dest = dest / src.name
    try:
        with open(dest, "x", encoding="utf-8") as f:  # "x": never overwrite, also not in a race
            f.write(src.read_text(encoding="utf-8"))
    except FileExistsError:
        raise ConfigError(f"{dest} already exists; give another file name, or delete it first") from None
    print(
        f"copied {args.name} to {dest}; edit it (and its name, so that its runs get their own "
        f"directory), then: rnnlab train {dest}"
    )
    return 0


# ------------------------------------------------------------------------------ train


def _run_dir(args, cfg) -> Path:
    """``--out``, else RUNS_DIR/<name>[-<changes>-<hash>]/seed<k> (rundir.run_dir: the directory
    name carries the configuration key when the run differs from its preset)."""
    from . import config, rundir

    if args.out:
        return Path(args.out)
    base = config.load(args.preset, [f"train.seed={cfg.train.seed}"])
    d = rundir.run_dir(args.runs_dir, cfg, base, resume=args.resume)
    if args.resume and not (d / "checkpoint.pt").exists():
        # resuming with a key a resume may change (config.resume_may_change: train.steps,
        # train.precision): the run lives under the name it started with
        same = [
            p.parent
            for p in Path(args.runs_dir).glob(f"{cfg.name}*/seed{cfg.train.seed}/checkpoint.pt")
            if all(config.resume_may_change(k) for k in rundir.differences(rundir.saved_config(p.parent) or {}, cfg))
        ]
        if len(same) == 1:
            return same[0]
        if same:
            raise config.ConfigError(
                f"cannot resume: {d} holds no checkpoint and several runs differ from this "
                f"configuration only in train.steps/train.precision: {', '.join(map(str, same))}; pick one with --out"
            )
    return d


def _print_result(r: dict) -> None:
    """The result of a run, each number labelled with the checkpoint it comes from: the last
    evaluation's validation metrics, then the best checkpoint's (selected by its validation
    metric), which is the one the test metrics were computed on."""
    fmt = lambda d: "  ".join(f"{k}={v:.4g}" for k, v in d.items())  # noqa: E731
    print(f"{r['name']} (seed {r['seed']}): {r['steps']} steps in {r['wall_time_s']:.1f}s [{r['stopped']}]")
    if r.get("final"):
        print(f"  last (step {r['steps']}): {fmt(r['final'])}")
    best = dict(r.get("best") or {})
    test = r.get("test", {})
    if best or test:
        step = best.pop("step", None)
        where = f"step {step}" if step is not None else "step unknown"
        select = r.get("select_metric")
        label = f"best ({where}, by {select})" if select else f"best ({where})"
        print(f"  {label}: {fmt({**best, **test})}")
    base = ", ".join(f"{k}={v:.4g}" for k, v in r["baseline"].items())
    if base:
        print(f"  memoryless baseline: {base}")


def _device_overrides(args, check: bool = True) -> list[str]:
    """``--device`` / ``--precision`` as ``train.*`` overrides, checked against this machine
    first (one-line error before anything is written) unless ``check`` is False (``rnnlab
    train``: the trainer resolves the device once, before it writes anything)."""
    out = []
    if getattr(args, "device", None):
        out.append(f"train.device={args.device}")
    if getattr(args, "precision", None):
        out.append(f"train.precision={args.precision}")
    if out and check and getattr(args, "backend", "local") != "ray":  # Ray: checked against the cluster
        from . import device

        device.resolve(args.device or "auto", args.precision or "fp32")
    return out


#: the most seeds one ``--seeds`` may name (ranges expanded)
MAX_SEEDS = 10_000


def _parse_seeds(text: str) -> list[int]:
    """``0,1,2``, ``0-50`` (both ends included) or a mix (``0-4,10``); at most
    :data:`MAX_SEEDS` seeds, each in [0, ``config.MAX_SEED``]."""
    from .config import MAX_SEED, ConfigError

    spans: list[tuple[int, int]] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            lo, dash, hi = part.partition("-")
            if dash and lo.strip() and int(hi) < int(lo):
                raise ValueError(part)
            spans.append((int(lo), int(hi)) if dash and lo.strip() else (int(part), int(part)))
    except ValueError:
        raise ConfigError(
            f"--seeds must be comma-separated integers >= 0 or ranges A-B with A <= B (e.g. --seeds "
            f"0,1,2 or --seeds 0-50), got {text!r}"
        ) from None
    big = max(b for _, b in spans)
    if big > MAX_SEED:
        raise ConfigError(f"--seeds: seed {big} is too large (seeds are integers in [0, {MAX_SEED}]); got {text!r}")
    count = sum(b - a + 1 for a, b in spans)  # before any range is expanded
    if count > MAX_SEEDS:
        raise ConfigError(
            f"--seeds {text!r} names {count} seeds, more than the {MAX_SEEDS} one command may train; "
            f"split it (e.g. --seeds 0-{MAX_SEEDS - 1}, then --seeds {MAX_SEEDS}-{2 * MAX_SEEDS - 1})"
        )
    seeds = [s for a, b in spans for s in range(a, b + 1)]
    if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds must be distinct integers >= 0 (e.g. --seeds 0,1,2), got {text!r}")
    return seeds


def cmd_train(args) -> int:
    from . import config, device, train

    seeds = _parse_seeds(args.seeds) if args.seeds is not None else [None]
    if args.out and len(seeds) > 1:
        raise config.ConfigError("--out names one run directory; with several --seeds use --runs-dir")
    runs = []
    for seed in seeds:
        overrides = list(args.set or [])
        if seed is not None:
            overrides.append(f"train.seed={seed}")
        if args.threads is not None:
            overrides.append(f"train.threads={args.threads}")
        if args.tensorboard:
            overrides.append("train.tensorboard=true")
        overrides += _device_overrides(args, check=False)
        cfg = config.load(args.preset, overrides)
        run_dir = _run_dir(args, cfg)
        # the run's one device resolution, before anything is printed or written
        dev = device.resolve(cfg.train.device, cfg.train.precision)
        print(f"run {cfg.name} -> {run_dir}", file=sys.stderr)
        if args.ensemble:  # all seeds as one batched model, below
            runs.append((cfg, run_dir))
            continue
        r = train.train(
            cfg, run_dir, resume=args.resume, progress=False if args.quiet else None, data_dir=args.data_dir, device=dev
        )
        _print_result(r)
    if runs:
        from .ensemble import main_train

        return main_train(runs, args.resume, False if args.quiet else None, args.data_dir, _print_result)
    return 0


# ------------------------------------------------------------------------------ runs: read, re-score


def cmd_evaluate(args) -> int:
    from .train import evaluate, load_run

    cfg, task, model = load_run(args.run, which=args.which, data_dir=args.data_dir, device=args.device, data=True)
    metrics = evaluate(model, task, args.split, cfg.train.eval_batch_size, cfg.train.eval_max_batches)
    print(json.dumps(metrics, indent=2))
    return 0


def cmd_export(args) -> int:
    from .results import export_csv

    if args.csv:
        _note(
            f"export --csv is no longer needed (CSV is the only format) and is ignored; it is accepted "
            f"until rnnlab {DEPRECATED_UNTIL}"
        )
    print(f"wrote {export_csv(args.run, out=args.output)}")
    return 0


def cmd_table(args) -> int:
    from .results import table

    print(table(args.runs_dir, metrics=args.metrics.split(",") if args.metrics else None))
    return 0


def cmd_thresholds(args) -> int:
    from .config import ConfigError
    from .results import DMU_THRESHOLDS, threshold_counts

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
    from .plots import plot_curves

    dirs = sorted({p.parent for d in args.runs for p in Path(d).rglob("metrics.jsonl")})
    if not dirs:
        from .rundir import NoSuchPath

        raise NoSuchPath(f"no run directories (with metrics.jsonl) below {args.runs}")
    out = plot_curves(dirs, args.output, metric=args.metric, logy=not args.linear)
    print(f"wrote {out}")
    return 0


def cmd_data(args) -> int:
    from .tasks import data

    if args.action in ("list", "verify"):
        text, ok = data.status_report(args.names or None, data_dir=args.data_dir)
        print(text)
        return 0 if ok or args.action == "list" else 1
    if not args.names:
        raise ValueError(f"rnnlab data download needs dataset names; known: {sorted(data.DATASETS)}")
    for name in args.names:
        data.download(name, data_dir=args.data_dir, force=args.force, progress=not args.quiet)
    return 0


# ------------------------------------------------------------------------------ many runs


def cmd_suite(args) -> int:
    from .suite import list_suites, load_suite, main_suite

    if args.name == "list":
        for name in list_suites():
            s = load_suite(name)
            print(f"  {name:22s} {len(s.presets)} presets x {len(s.seeds)} seeds: {s.description}")
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
    )


def cmd_sweep(args) -> int:
    from .sweep import main_sweep

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
    from . import speed

    return speed.main(**{k: getattr(args, k) for k in speed.OPTIONS})


def cmd_bench_ensemble(args) -> int:
    from . import ensemble_bench

    return ensemble_bench.main(**{k: getattr(args, k) for k in ensemble_bench.OPTIONS})


def cmd_reproduce(args) -> int:
    from .reproduce import collect, main_ledger

    if args.action == "plan":
        from .ledger.plan import main_plan

        return main_plan(args.runs or ["records"], budget=args.budget, paper=args.paper, output=args.output)
    if args.action == "ledger":
        return main_ledger(args.runs or ["records"], output=args.output)
    if len(args.runs) != 1 or not args.output:
        raise ValueError("usage: rnnlab reproduce collect RUNS_DIR -o RECORDS_DIR (one runs directory)")
    copied = collect(args.runs[0], args.output)
    print(f"copied the small files of {len(copied)} runs to {args.output}")
    return 0


def _demo_run(name: str, out: Path, overrides: list[str], fresh: bool) -> Path:
    """Train one demo model into ``out`` (or reuse a finished run of the same configuration)."""
    import shutil

    from . import config, rundir, train

    cfg = config.load(name, overrides)
    # a run with other steps gets its own directory; one is reused only if its config matches
    run_dir = rundir.run_dir(out, cfg, config.load(name)).parent
    with rundir.claim(run_dir):
        if (
            not fresh
            and (run_dir / "result.json").exists()
            and rundir.resolved_saved_key(run_dir) == rundir.config_key(cfg)
        ):
            print(f"{cfg.name}: already done in {run_dir} (use --fresh to rerun)", file=sys.stderr)
            return run_dir
        for f in run_dir.iterdir():  # under the lock: clear a stale or --fresh run
            if f.name != rundir.LOCK_NAME:
                shutil.rmtree(f) if f.is_dir() else f.unlink()
        print(
            f"training {cfg.name} ({cfg.model.cell}, hidden {cfg.model.hidden_size or f'for {cfg.model.params} parameters'}) "
            f"on {cfg.task.name} L={cfg.task.options.get('L')} ...",
            file=sys.stderr,
        )
        _print_result(train.train(cfg, run_dir, progress=None))
    return run_dir


def _demo_record(dirs: list[Path], png: Path, record: Path) -> None:
    import shutil

    from .results import table

    for d in dirs:
        (record / d.name).mkdir(parents=True, exist_ok=True)
        for f in RECORD_FILES:
            shutil.copyfile(d / f, record / d.name / f)
    shutil.copyfile(png, record / "loss.png")
    (record / "table.md").write_text(table(record, DEMO_METRICS) + "\n")
    print(f"recorded in {record} (update the README block: python -m rnnlab.docsync README.md)")


def cmd_demo(args) -> int:
    from .plots import plot_curves
    from .results import copy_verdict, table

    _at_least_one(args.steps, "--steps", "training steps per model; leave it out for the presets' 600")
    out = Path(args.out)
    overrides = ([f"train.steps={args.steps}"] if args.steps is not None else []) + _device_overrides(args)
    dirs = [_demo_run(name, out, overrides, args.fresh) for name in DEMO_PRESETS]
    png = plot_curves(dirs, out / "loss.png", "val/loss", title="copy task (K=10, L=40): validation loss")
    md = table(dirs, DEMO_METRICS)
    (out / "table.md").write_text(md + "\n")
    print()
    print(md)
    print()
    for d in dirs:  # one sentence per model, from its numbers
        print(copy_verdict(json.loads((d / "result.json").read_text()))[1])
    print(f"\nwrote {png} and {out / 'table.md'}")
    if args.record:
        _demo_record(dirs, png, Path(args.record))
    return 0


# ------------------------------------------------------------------------------ analyze


def cmd_analyze_schur(args) -> int:
    from .analysis.schur import analyze_run

    summaries = analyze_run(args.run, out_dir=args.out, which=args.which, data_dir=args.data_dir, device=args.device)
    for s in summaries:
        print(
            f"{s['name']}: n={s['n']}  mean |eigenvalue| = {s['mean_eigenvalue_modulus']:.4f} "
            f"(min {s['min_eigenvalue_modulus']:.4f}, max {s['max_eigenvalue_modulus']:.4f})  "
            f"complex pairs = {s['complex_pairs']}  departure from normality = "
            f"{s['departure_from_normality']:.4g}  mean |T| on sub-diagonal 1 = {s['mean_abs_T_subdiag_1']:.3g}, "
            f"elsewhere = {s['mean_abs_T_all']:.3g}"
        )
        print(f"  wrote {s['figure']}")
    return 0


def _jacobian_summary(digest: dict) -> str:
    """A few lines from ``analyze jacobian``'s digest (``{label: summarize(...)}``): per model,
    log10 sigma_max / sigma_min at each lag of the digest (``<= b``: sigma_min no longer resolved
    by the explicit product, b its QR bound), and for asRNN at which t the conditions of the
    paper's Theorem 2.1 hold."""

    def low(v: dict) -> str:  # unresolved by the explicit product: the QR estimate bounds it from above
        m = v["log10_sigma_min"]
        return f"<= {v['log10_sigma_min_qr_bound']:.3g}" if m is None else f"{m:.3g}"

    lines = []
    for label, d in digest.items():
        lags = "; ".join(f"{k}: {v['log10_sigma_max']:.3g} / {low(v)}" for k, v in d["lags"].items())
        lines.append(f"{label}, T={d['T']}: log10 sigma_max / sigma_min at lag {lags}")
        checks = list((d.get("theorem21") or {}).values())
        if checks:
            held = {
                name: ", ".join(str(c["t"]) for c in checks if c.get(key)) or "none"
                for name, key in (
                    ("assumption A3", "assumption_A3_holds"),
                    ("the D_f condition", "D_f_condition_holds"),
                    ("the W_hh condition", "W_hh_condition_holds"),
                )
            }
            lines.append(
                f"  Theorem 2.1 at t = {', '.join(str(c['t']) for c in checks)}: "
                + "; ".join(f"{name} holds at {ts}" for name, ts in held.items())
            )
    return "\n".join(lines)


def cmd_analyze_jacobian(args) -> int:
    from .analysis.jacobian import analyze_run, plot_lag_spectra, summarize
    from .config import ConfigError

    _at_least_one(args.max_lag, "--max-lag", "the largest lag; leave it out for the sequence length")
    if args.output and args.out:
        raise ConfigError("give --out DIR, or the deprecated -o/--output FILE, not both")
    cells = tuple(c for c in (args.compare or "").split(",") if c)
    res = analyze_run(
        args.run,
        split=args.split,
        index=args.index,
        max_lag=args.max_lag,
        which=args.which,
        data_dir=args.data_dir,
        init_cells=cells,
        device=args.device,
    )
    digest = {label: summarize(r) for label, r in res.items()}
    text = json.dumps(digest, indent=2, default=float) + "\n"
    if args.output:  # the spelling before --out DIR: one figure file, the digest only with --json FILE
        _note(
            f"analyze jacobian -o/--output FILE is deprecated and accepted until rnnlab {DEPRECATED_UNTIL}; "
            f"use --out DIR (writes DIR/jacobian.png and DIR/jacobian.json)"
        )
        figure, written = Path(args.output), []
    else:  # like analyze schur: --out DIR, else RUN/jacobian (RUN: also the directory of a checkpoint)
        run = Path(args.run)
        out = Path(args.out) if args.out else (run if run.is_dir() else run.parent) / "jacobian"
        out.mkdir(parents=True, exist_ok=True)
        figure, written = out / "jacobian.png", [out / "jacobian.json"]
        written[0].write_text(text)
    if args.json not in (None, "-"):
        Path(args.json).write_text(text)
        written.append(Path(args.json))
    if args.json == "-":
        print(text, end="")
    else:
        print(_jacobian_summary(digest))
    plot_lag_spectra(
        {k: r["spectrum"] for k, r in res.items()},
        figure,
        title=f"singular values of J(t1 + lag, t1) along {args.split} sequence {args.index}",
    )
    print(f"wrote {', '.join(map(str, [figure, *written]))}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------ the parser


def cmd_doctor(args) -> int:
    from .doctor import main_doctor

    return main_doctor(
        device=args.device,
        quick=args.quick,
        sections=args.sections,
        cells=args.cells,
        with_kernel_table=args.kernel_table,
        output=args.output,
        verbose=args.verbose,
    )


class _Help(argparse.RawDescriptionHelpFormatter):
    """Each argument's default appended to its help (unless the help states it, or there is
    none to state); examples (the epilog) kept as written."""

    def _get_help_string(self, action):
        h = action.help or ""
        d = action.default
        if "default" in h or d in (None, False, argparse.SUPPRESS) or action.option_strings == [] and d == []:
            return h
        return h + " (default: %(default)s)"


def _sub(sub, name: str, help: str, example: str, docs: str | None = None, **kw) -> argparse.ArgumentParser:
    """A command's parser: ``help`` as its description, an example and (``docs``: a page of
    docs/) the address of its documentation as its epilog."""
    epilog = f"example:\n  {example}" + (f"\n\ndocumentation: {DOCS_URL}{docs}" if docs else "")
    return sub.add_parser(name, help=help, description=help, epilog=epilog, formatter_class=_Help, **kw)


# options that several commands share: one definition each


def _opt_runs_dir(p, what: str = "the run directories") -> None:
    p.add_argument("--runs-dir", default="runs", help=f"parent of {what}, e.g. --runs-dir /scratch/runs")


def _opt_data_dir(p) -> None:
    p.add_argument(
        "--data-dir",
        help="data root for real-data tasks (default: $RNNLAB_DATA, else ~/.cache/rnnlab/data), e.g. --data-dir ~/data",
    )


def _opt_set(p, what: str = "override a config value") -> None:
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help=f"{what} (repeatable), e.g. --set train.steps=100 --set task.L=200",
    )


def _opt_seeds(p, default: str) -> None:
    p.add_argument(
        "--seeds",
        help="initialisation seeds, one run each: a comma-separated list and/or ranges "
        f"(default: {default}), e.g. --seeds 0,1,2 or --seeds 0-50",
    )


def _opt_quiet(p, what: str) -> None:
    p.add_argument("--quiet", action="store_true", help=what)


def _opt_which(p) -> None:
    p.add_argument(
        "--which",
        default="best",
        choices=["best", "last"],
        help="best.pt (best validation score) or checkpoint.pt (the last), e.g. --which last",
    )


def _opt_run(p) -> None:
    p.add_argument(
        "run",
        help="run directory, or a checkpoint file (best.pt / checkpoint.pt) inside one, e.g. runs/demo-lstm/seed1",
    )


def _opt_device(p, precision: bool = True, loads: bool = False) -> None:
    """``--device`` (and ``--precision``). ``loads``: the command loads a trained run, on the
    CPU unless told otherwise; else the configuration's ``train.device`` decides."""
    default = "cpu" if loads else None
    where = "" if loads else "; the default: the configuration's train.device, normally auto"
    p.add_argument(
        "--device",
        default=default,
        help=f"cpu, auto (CUDA, else MPS, else CPU), cuda, cuda:N or mps{where}; e.g. --device cuda",
    )
    if precision:
        p.add_argument(
            "--precision",
            help="fp32 (default), bf16 or fp16 (torch.autocast; fp16 with a gradient scaler), e.g. --precision bf16",
        )


def _opt_backend(p, what: str) -> None:
    p.add_argument(
        "--backend",
        default="local",
        choices=["local", "ray"],
        help=f"where {what} run: local processes or Ray (rnnlab[ray]), e.g. --backend ray",
    )
    p.add_argument(
        "--address", help="Ray cluster address HOST:PORT or 'auto' (default: a local Ray instance), e.g. --address auto"
    )


# one parser function per command


def _parser_list(sub) -> None:
    s = _sub(
        sub, "list", "registered cells, tasks and presets with their options", "rnnlab list presets", docs="guide.md"
    )
    s.add_argument(
        "what",
        nargs="?",
        default="all",
        choices=["all", "cells", "tasks", "presets"],
        help="what to list, e.g. presets",
    )
    s.set_defaults(func=cmd_list)


def _parser_preset(sub) -> None:
    s = _sub(
        sub,
        "preset",
        "print a shipped preset, or copy it to a file to edit",
        "rnnlab preset copy asrnn/copy-L1000 my-copy.toml",
        docs="guide.md",
    )
    psub = s.add_subparsers(dest="preset_action", required=True, metavar="ACTION")
    a = _sub(psub, "show", "print a preset's TOML", "rnnlab preset show demo/asrnn", docs="guide.md")
    a.add_argument("name", help="preset name (see `rnnlab list presets`), e.g. demo/asrnn")
    a.set_defaults(func=cmd_preset_show)
    a = _sub(
        psub,
        "copy",
        "copy a preset's TOML to a file (never overwrites one), to edit and train",
        "rnnlab preset copy demo/asrnn mine.toml && rnnlab train mine.toml",
        docs="guide.md",
    )
    a.add_argument("name", help="preset name (see `rnnlab list presets`), e.g. demo/asrnn")
    a.add_argument("file", help="the new file, or a directory to copy it into, e.g. mine.toml")
    a.set_defaults(func=cmd_preset_copy)


def _parser_train(sub) -> None:
    s = _sub(
        sub,
        "train",
        "train a preset (configs/<paper>/<task>.toml) or a TOML file",
        "rnnlab train demo/asrnn --set train.steps=100 --seeds 0,1",
        docs="runs.md",
    )
    s.add_argument("preset", help="preset name (see `rnnlab list presets`) or path to a .toml, e.g. demo/lstm")
    _opt_set(s)
    s.add_argument("--out", help="run directory (default: RUNS_DIR/<name>/seed<seed>), e.g. --out runs/try1")
    _opt_runs_dir(s)
    _opt_seeds(s, "the preset's train.seed")
    s.add_argument(
        "--ensemble",
        action="store_true",
        help="train all --seeds as one batched model in this process "
        "(the same run directories; the documentation's ensembles page), e.g. --seeds 0-50 --ensemble",
    )
    s.add_argument("--threads", type=int, help="torch threads (default: the preset's, 1), e.g. --threads 2")
    s.add_argument(
        "--resume",
        action="store_true",
        help="continue from the run's checkpoint.pt, e.g. rnnlab train demo/lstm --resume",
    )
    _opt_data_dir(s)
    _opt_quiet(s, "no progress bar and no evaluation lines, e.g. in scripts that only read result.json")
    s.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write TensorBoard events to RUN/tensorboard (needs rnnlab[tensorboard]; "
        "same as --set train.tensorboard=true), e.g. then tensorboard --logdir runs",
    )
    _opt_device(s)
    s.set_defaults(func=cmd_train)


def _parser_evaluate(sub) -> None:
    s = _sub(
        sub,
        "evaluate",
        "re-score a trained run on a split (needs the task's data)",
        "rnnlab evaluate runs/demo-lstm/seed1 --split test",
        docs="outputs.md",
    )
    _opt_run(s)
    s.add_argument("--split", default="test", choices=["val", "test"], help="split to score, e.g. --split val")
    _opt_which(s)
    _opt_device(s, precision=False, loads=True)
    _opt_data_dir(s)
    s.set_defaults(func=cmd_evaluate)


def _parser_export(sub) -> None:
    s = _sub(
        sub,
        "export",
        "a run's metrics.jsonl as CSV",
        "rnnlab export runs/demo-lstm/seed1 -o metrics.csv",
        docs="outputs.md",
    )
    s.add_argument("run", help="run directory, e.g. runs/demo-lstm/seed1")
    s.add_argument("-o", "--output", help="output file (default: RUN/metrics.csv), e.g. -o metrics.csv")
    s.add_argument(
        "--csv",
        action="store_true",
        help=f"deprecated and ignored (CSV is the only format; accepted until {DEPRECATED_UNTIL}), e.g. leave it out",
    )
    s.set_defaults(func=cmd_export)


def _parser_data(sub) -> None:
    s = _sub(
        sub,
        "data",
        "real-data files: list, verify (sha256) or download them",
        "rnnlab data download ptb",
        docs="data.md",
    )
    s.add_argument("action", choices=["list", "verify", "download"], help="what to do, e.g. verify")
    s.add_argument("names", nargs="*", help="datasets (default for list/verify: all), e.g. ptb mnist")
    _opt_data_dir(s)
    s.add_argument("--force", action="store_true", help="download again even when verified, e.g. after a failed verify")
    _opt_quiet(s, "no progress bar, e.g. in batch jobs")
    s.set_defaults(func=cmd_data)


def _parser_table(sub) -> None:
    s = _sub(
        sub,
        "table",
        "mean +- std over seeds of every run below RUNS_DIR",
        "rnnlab table runs/ --metrics test/loss",
        docs="outputs.md",
    )
    s.add_argument("runs_dir", help="directory searched for result.json files, e.g. runs/")
    s.add_argument(
        "--metrics",
        help="comma-separated metric keys (default: all test metrics), e.g. --metrics test/loss,test/accuracy",
    )
    s.set_defaults(func=cmd_table)


def _parser_suite(sub) -> None:
    s = _sub(
        sub,
        "suite",
        "run a benchmark suite (presets x seeds, parallel) and print its table",
        "rnnlab suite demo --jobs 2",
        docs="runs.md",
    )
    s.add_argument("name", help="suite name (`rnnlab suite list`) or path to a suite .toml, e.g. demo")
    _opt_runs_dir(s)
    s.add_argument("--jobs", type=int, default=1, help="parallel runs (each one thread), e.g. --jobs 2")
    _opt_set(s, "override for every run")
    _opt_data_dir(s)
    _opt_device(s)
    _opt_backend(s, "runs")
    s.add_argument(
        "--ensemble",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train the seeds of each configuration as one batched model, one job per ensemble (default: "
        "the suite's own 'ensemble' key; the documentation's ensembles page), e.g. --ensemble",
    )
    s.set_defaults(func=cmd_suite)


def _parser_sweep(sub) -> None:
    s = _sub(
        sub,
        "sweep",
        "hyperparameter sweep of a preset with Optuna (rnnlab[sweep]); rerun to continue a killed sweep",
        "rnnlab sweep demo-lstm --trials 20 --workers 2",
        docs="sweeps.md",
    )
    s.add_argument(
        "spec",
        help="sweep TOML file (preset, [space], metric, trials; its format: the "
        "documentation named below) or a shipped sweep name, e.g. demo-lstm",
    )
    s.add_argument("--out", help="sweep directory (default: RUNS_DIR/sweep-<name>), e.g. --out runs/sweep1")
    _opt_runs_dir(s, "the sweep directory")
    s.add_argument("--trials", type=int, help="finished trials to reach (default: the file's), e.g. --trials 20")
    _opt_set(s, "fixed override for every trial")
    s.add_argument(
        "--storage", help="Optuna RDB URL (default: sqlite:///OUT/study.db), e.g. --storage postgresql://host/db"
    )
    s.add_argument("--workers", type=int, default=1, help="Optuna workers feeding the study, e.g. --workers 2")
    _opt_backend(s, "workers")
    s.add_argument(
        "--heartbeat",
        type=int,
        default=10,
        help="seconds between trial heartbeats; a trial silent for 3x this is retried, e.g. --heartbeat 30",
    )
    s.add_argument(
        "--db-timeout",
        type=float,
        default=60.0,
        help="seconds to wait for a locked SQLite study, e.g. --db-timeout 120",
    )
    s.add_argument(
        "--report-only",
        action="store_true",
        help="write best.toml, trials.md and plots; run nothing, e.g. after a killed sweep",
    )
    _opt_data_dir(s)
    _opt_device(s)
    s.set_defaults(func=cmd_sweep)


def _parser_bench(sub, bench_arguments: bool = True) -> None:
    s = _sub(
        sub,
        "bench",
        "benchmarks (speed: training-iteration time, throughput, memory vs nn.LSTM)",
        "rnnlab bench speed --quick",
        docs="speed.md",
    )
    bsub = s.add_subparsers(dest="bench", required=True, metavar="BENCH")
    b = _sub(
        bsub,
        "speed",
        "the speed table of BENCHMARKS.md (add --quick for a short run)",
        "rnnlab bench speed --quick --cells lstm asrnn",
        docs="speed.md",
    )
    if bench_arguments:  # reading them imports torch: only when the command line is a bench
        from .speed import add_arguments

        add_arguments(b)
    b.set_defaults(func=cmd_bench)
    b = _sub(
        bsub,
        "ensemble",
        "members trained per second: the seeds as one batched model (rnnlab.ensemble) against separate runs",
        "rnnlab bench ensemble --benches dmu-adding --sizes 1 8 51",
        docs="ensembles.md",
    )
    if bench_arguments:
        from .ensemble_bench import add_arguments as ensemble_arguments

        ensemble_arguments(b)
    b.set_defaults(func=cmd_bench_ensemble)


def _parser_thresholds(sub) -> None:
    s = _sub(
        sub,
        "thresholds",
        "DMU-style summary: how many seeds reached each loss threshold by each epoch",
        "rnnlab thresholds runs/ --metric val/loss",
        docs="models.md",
    )
    s.add_argument("runs_dir", help="directory searched for runs, e.g. runs/")
    s.add_argument("--metric", default="val/loss", help="metric of metrics.jsonl, e.g. --metric val/loss")
    s.add_argument(
        "--thresholds",
        default=None,
        help="comma-separated thresholds (default: the DMU protocol's 1e-2 ... 1e-6, the ledger's), "
        "e.g. --thresholds 1e-2,1e-4",
    )
    s.add_argument(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="optimizer steps per epoch, >= 1 (default: the DMU protocol's 200 sequences over each run's "
        "batch size, 10 for the presets' batch 20), e.g. --steps-per-epoch 10",
    )
    s.set_defaults(func=cmd_thresholds)


def _parser_reproduce(sub) -> None:
    s = _sub(
        sub,
        "reproduce",
        "the reproduction ledger: REPRODUCTION.md from the papers' values and run "
        "records (ledger), the missing runs priced and ordered with their commands (plan), or copy "
        "runs' small files into a records folder (collect)",
        "rnnlab reproduce ledger records/ -o REPRODUCTION.md",
        docs="reproduce.md",
    )
    s.add_argument("action", choices=["ledger", "plan", "collect"], help="what to do, e.g. ledger")
    s.add_argument(
        "runs",
        nargs="*",
        help="directories holding run records (ledger, plan; default: records) / one runs directory (collect), "
        "e.g. records/",
    )
    s.add_argument(
        "-o",
        "--output",
        help="ledger: output file (default: stdout); plan: the suite file of the runs within the budget "
        "(and FILE-gpu.toml of the others); collect: the records folder, e.g. -o REPRODUCTION.md",
    )
    s.add_argument(
        "--budget",
        default="6h",
        help="plan: the longest run this machine takes on (hours of one CPU thread; longer ones go to the GPU "
        "section), e.g. --budget 6h or --budget 90m",
    )
    s.add_argument("--paper", help="plan: one paper's runs only (asrnn, nnrnn, dmu, henaff, ...), e.g. --paper henaff")
    s.set_defaults(func=cmd_reproduce)


def _parser_plot(sub) -> None:
    s = _sub(
        sub,
        "plot",
        "curves of a metric for the runs below the given directories",
        "rnnlab plot runs/demo-lstm runs/demo-asrnn -o curves.png --metric val/loss",
        docs="outputs.md",
    )
    s.add_argument("runs", nargs="+", help="directories searched for runs, e.g. runs/")
    s.add_argument("-o", "--output", default="curves.png", help="figure file, e.g. -o loss.png")
    s.add_argument("--metric", default="train/loss", help="metric of metrics.jsonl, e.g. --metric val/loss")
    s.add_argument("--linear", action="store_true", help="linear instead of log y axis, e.g. for accuracies")
    s.set_defaults(func=cmd_plot)


def _parser_analyze(sub) -> None:
    s = _sub(
        sub,
        "analyze",
        "analyses of a trained run (jacobian: temporal Jacobian spectra; schur: real "
        "Schur form views); each writes into --out DIR (default: RUN/<analysis>)",
        "rnnlab analyze schur runs/nnrnn-copy-T200/seed1",
        docs="models.md",
    )
    asub = s.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    a = _sub(
        asub,
        "schur",
        "real Schur form of each recurrent matrix of a run: |Theta| heat map, mean |T| "
        "per sub-diagonal, block angles, eigenvalue moduli",
        "rnnlab analyze schur runs/nnrnn-copy-T200/seed1",
        docs="nnrnn.md",
    )
    _opt_run(a)
    a.add_argument("--out", help="output directory (default: RUN/schur), e.g. --out schur-views")
    _opt_which(a)
    _opt_data_dir(a)
    _opt_device(a, precision=False, loads=True)
    a.set_defaults(func=cmd_analyze_schur)

    a = _sub(
        asub,
        "jacobian",
        "temporal Jacobian spectra vs lag (and Theorem 2.1 for asRNN): a short summary "
        "on stdout, the figure and the full digest in --out DIR",
        "rnnlab analyze jacobian runs/asrnn-copy-L1000/seed5544 --compare exprnn,rnn",
        docs="asrnn.md",
    )
    _opt_run(a)
    a.add_argument(
        "--out", help="output directory for jacobian.png and jacobian.json (default: RUN/jacobian), e.g. --out spectra"
    )
    a.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="print the full digest (sigma at lags 1/10/100/T, Theorem 2.1) as JSON instead of "
        "the summary; with FILE, also write it there; e.g. --json digest.json",
    )
    a.add_argument("--split", default="val", help="split the sequence comes from, e.g. --split test")
    a.add_argument("--index", type=int, default=0, help="which sequence of the split's first batch, e.g. --index 3")
    a.add_argument(
        "--max-lag", type=int, default=None, help="largest lag, >= 1 (default: the sequence length), e.g. --max-lag 200"
    )
    _opt_which(a)
    a.add_argument("--compare", help="comma-separated cells to add at initialisation, e.g. exprnn,rnn")
    _opt_data_dir(a)
    a.add_argument(
        "-o",
        "--output",
        help=f"deprecated (accepted until {DEPRECATED_UNTIL}): the figure file "
        f"alone, in place of --out DIR, e.g. --out spectra instead",
    )
    _opt_device(a, precision=False, loads=True)
    a.set_defaults(func=cmd_analyze_jacobian)


def _parser_doctor(sub) -> None:
    s = _sub(
        sub,
        "doctor",
        "check every fast path against its reference on a device (table; exit 1 on a mismatch)",
        "rnnlab doctor --device cuda",
    )
    from .doctor import add_arguments

    add_arguments(s)
    s.set_defaults(func=cmd_doctor)


def _parser_demo(sub) -> None:
    s = _sub(
        sub,
        "demo",
        "the papers' models beside an LSTM on the copy task (no downloads): table + loss plot",
        "rnnlab demo --out demo-out",
        docs="guide.md",
    )
    s.add_argument("--out", default="demo-out", help="output directory, e.g. --out /tmp/demo")
    s.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps per model, >= 1 (default: the presets' 600), e.g. --steps 100",
    )
    s.add_argument(
        "--fresh", action="store_true", help="rerun models already done in --out, e.g. after changing the code"
    )
    s.add_argument(
        "--record",
        metavar="DIR",
        help="also copy the runs' records (no weights), table and figure to DIR, "
        "e.g. --record docs/demo (what the README's demo table is made from)",
    )
    _opt_device(s)
    s.set_defaults(func=cmd_demo)


# ------------------------------------------------------------------------------ your own cell: check-cell, compare


def _parser_check_cell(sub) -> None:
    s = _sub(
        sub,
        "check-cell",
        "check a cell against the cell contract (reference loop, lengths, h0, float64 gradcheck, "
        "ensemble member, save/load, resume): one line per item, exit 1 on a failure",
        "rnnlab check-cell mypackage.cells:MyCell",
        docs="own-cell.md",
    )
    s.add_argument(
        "cell",
        help="a cell key, package.module:Class, path/to/file.py:Class or an installed entry point, e.g. mycells:MinGated",
    )
    s.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help='a constructor option of the cell (repeatable, TOML values), e.g. --option init="henaff"',
    )
    s.add_argument(
        "--no-runs",
        action="store_true",
        help="leave out the items that train (ensemble, save/load, resume), e.g. --no-runs",
    )
    s.add_argument("--json", action="store_true", help="print the items as JSON instead of lines, e.g. --json")
    s.set_defaults(func=cmd_check_cell)


def cmd_check_cell(args) -> int:
    from .cellcheck import main_check_cell

    return main_check_cell(args.cell, args.option or [], runs=not args.no_runs, as_json=args.json)


def _parser_compare(sub) -> None:
    s = _sub(
        sub,
        "compare",
        "a cell against the papers' strongest baselines on the long-memory tasks, at matched "
        "parameter counts over seeds: one table and one figure per task",
        "rnnlab compare mycells.py:MinGated --tasks adding,copy-T200 --seeds 3",
        docs="own-cell.md",
    )
    s.add_argument("cell", help="the cell: a key, package.module:Class, file.py:Class or an entry point, e.g. gru")
    s.add_argument(
        "--tasks",
        help="comma-separated tasks (default: all of copy-T200, copy-L1000, adding, temporal_order, "
        "noisy_sequence, psmnist, ptb_char; those whose data is absent are skipped), e.g. --tasks adding,copy-T200",
    )
    s.add_argument(
        "--budget",
        default="quick",
        choices=["quick", "paper"],
        help="quick: a few CPU-minutes per task; paper: the presets' budgets, e.g. --budget paper",
    )
    _opt_seeds(s, "0-2, three seeds per model")
    s.add_argument("--out", help="output folder (default: RUNS_DIR/compare-<cell>), e.g. --out runs/cmp")
    _opt_runs_dir(s)
    s.add_argument("--jobs", type=int, default=1, help="parallel runs (each one thread), e.g. --jobs 2")
    _opt_set(s, "override for every run")
    _opt_data_dir(s)
    _opt_backend(s, "runs")
    s.add_argument(
        "--ensemble",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train each model's seeds as one batched model (default: where every model of a task allows), "
        "e.g. --no-ensemble",
    )
    s.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    from .compare import main_compare

    return main_compare(
        cell=args.cell,
        tasks=[t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None,
        budget=args.budget,
        seeds=_parse_seeds(args.seeds) if args.seeds is not None else [0, 1, 2],
        out=args.out,
        runs_dir=args.runs_dir,
        jobs=args.jobs,
        backend=args.backend,
        address=args.address,
        data_dir=args.data_dir,
        overrides=args.set or [],
        ensemble=args.ensemble,
    )


#: the commands, in the order ``rnnlab --help`` lists them. A new command is its parser function
#: added here, e.g. ``rnnlab doctor``: ``_parser_doctor(sub)`` (its ``--device`` from
#: ``_opt_device``) setting ``func=cmd_doctor``, which calls the doctor module with keywords.
COMMANDS = [
    _parser_list,
    _parser_preset,
    _parser_train,
    _parser_evaluate,
    _parser_export,
    _parser_data,
    _parser_table,
    _parser_suite,
    _parser_sweep,
    _parser_bench,
    _parser_thresholds,
    _parser_reproduce,
    _parser_plot,
    _parser_analyze,
    _parser_demo,
    _parser_doctor,
    _parser_check_cell,
    _parser_compare,
]


def build_parser(bench_arguments: bool = True) -> argparse.ArgumentParser:
    """The ``rnnlab`` parser. ``bench_arguments=False`` leaves out the options of ``bench
    speed`` (reading them imports torch), for commands that do not need them."""
    from . import __version__

    p = argparse.ArgumentParser(
        prog="rnnlab",
        description="Long-memory RNNs: train, compare, analyse.",
        formatter_class=_Help,
        epilog="examples:\n  rnnlab demo\n  rnnlab list presets\n  rnnlab train demo/asrnn --seeds 0,1\n"
        f"  rnnlab table runs/\n\n`rnnlab COMMAND --help` describes each command; documentation: {DOCS_URL}",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"rnnlab {__version__}",
        help="print the version and exit, e.g. rnnlab --version",
    )
    p.add_argument(  # short only: each command's --quiet is its own (progress off)
        "-q",
        dest="log_quiet",
        action="count",
        default=0,
        help="fewer messages on stderr: -q only notes (no progress lines), -qq only errors, e.g. rnnlab -q train ...",
    )
    p.add_argument(
        "-v",
        dest="log_verbose",
        action="count",
        default=0,
        help="more messages on stderr (rnnlab's debug log), e.g. rnnlab -v train demo/lstm",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        if add is _parser_bench:
            add(sub, bench_arguments)
        else:
            add(sub)
    return p


# ------------------------------------------------------------------------------ running a command

#: the path arguments checked for a loop of symbolic links before a command starts
_PATH_ARGUMENTS = ("runs_dir", "out", "data_dir", "record", "run", "runs")


def _refuse_symlink_loops(args) -> None:
    """A path that runs into a loop of symbolic links is a one-line error before anything
    starts (pathlib raises a bare RuntimeError for one, deep inside; ``exists()`` says False)."""
    import errno
    import os

    from .config import ConfigError

    for dest in _PATH_ARGUMENTS:
        value = getattr(args, dest, None)
        for path in value if isinstance(value, list) else [value]:
            if not isinstance(path, str):
                continue
            try:
                os.stat(path)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise ConfigError(
                        f"{path}: a loop of symbolic links ({e.strerror}); give a path that "
                        f"leads to a real directory or file"
                    ) from None


def _expected_errors() -> tuple[tuple, tuple]:
    """(errors reported in one line, those of them that are usage errors: exit 2). The
    trainer's own errors count only once it is imported, so light commands never import torch."""
    from .config import ConfigError
    from .rundir import NoSuchPath, RunLocked
    from .tasks.data import DataError

    usage: list = [ConfigError, RunLocked, ValueError, NoSuchPath]
    other: list = [FileNotFoundError, DataError]
    train = sys.modules.get(f"{__package__}.train")
    if train is not None:
        usage.append(train.RunExists)
        other += [train.TrainingDiverged, train.CheckpointError, train.RunWriteError]
    ensemble = sys.modules.get(f"{__package__}.ensemble")
    if ensemble is not None:
        other.append(ensemble.EnsembleFailed)
    return tuple(usage + other), tuple(usage)


def _out_of_memory(e: BaseException) -> str | None:
    """What ran out, if ``e`` is an allocation failure (Python's, torch's CPU allocator's or a
    GPU's), else None."""
    import re

    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", ()) if torch is not None else ()
    text = str(e)
    if not (
        isinstance(e, MemoryError)
        or (oom and isinstance(e, oom))
        or isinstance(e, RuntimeError)
        and re.search(r"can't allocate memory|out of memory", text)
    ):
        return None
    asked = re.search(r"tried to allocate (\d+) bytes", text)
    if asked:
        return f"tried to allocate {int(asked.group(1)) / 2**30:,.1f} GiB"
    return text.splitlines()[0][:200] if text else type(e).__name__


def _error_line(e: Exception) -> tuple[str, int] | None:
    """The one line and exit code for an error the user can act on; None for a bug (traceback)."""
    expected, usage = _expected_errors()
    if isinstance(e, expected):
        return str(e), 2 if isinstance(e, usage) else 1
    memory = _out_of_memory(e)
    if memory:
        return (
            f"out of memory ({memory}); use a smaller model (model.hidden_size, model.num_layers) or "
            f"batch (train.batch_size, train.eval_batch_size), or a device with more memory"
        ), 1
    if isinstance(e, RuntimeError) and str(e).startswith("Symlink loop"):  # pathlib before Python 3.13
        return f"{str(e).split(' from ', 1)[-1]}: a loop of symbolic links; check the path", 1
    if isinstance(e, OSError):  # a file problem no layer above named more precisely
        where = f"{e.filename}: " if e.filename else ""
        return f"{where}{e.strerror or e}; check the path and its permissions", 1
    return None


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (``rnnlab list | head``); True where
    that cannot be told (no poll)."""
    import select

    if not hasattr(select, "poll"):
        return True
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, ValueError, OSError):  # stdout replaced by an object without a descriptor
        return True


def _quiet_exit_on_closed_stdout() -> int:
    """A reader that stopped reading (``| head``) is not an error: no message, and the status of
    a process ended by SIGPIPE (128 + 13), as other command-line tools give."""
    import os

    try:  # the unwritten rest goes nowhere, so the interpreter's last flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):
        pass
    return 141


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(bench_arguments="bench" in argv).parse_args(argv)
    if args.command in ("train", "demo", "suite", "sweep"):
        # glibc's default allocator returns freed tensor memory to the OS and page-faults it back
        # every iteration (about 40% of an nn.LSTM copy-task iteration here, BENCHMARKS.md);
        # keep it instead. RNNLAB_MALLOC=default opts out. The benchmark sets it per its --malloc.
        from .runtime import tune_malloc

        tune_malloc()
    with _log_to_stderr(args.log_verbose - args.log_quiet):
        return _run(args)


def _run(args) -> int:
    """Run the parsed command: its exit code, or one line and the code for an expected error."""
    try:
        _refuse_symlink_loops(args)
        rc = args.func(args)
        sys.stdout.flush()  # a closed stdout shows here, not at the interpreter's exit
        return rc
    except BrokenPipeError as e:
        if _stdout_closed():
            return _quiet_exit_on_closed_stdout()
        line = _error_line(e)
    except Exception as e:
        line = _error_line(e)
        if line is None:
            raise
    except KeyboardInterrupt:
        print("rnnlab: interrupted; `rnnlab train ... --resume` continues from the last checkpoint", file=sys.stderr)
        return 130
    print(f"rnnlab: error: {line[0]}", file=sys.stderr)
    return line[1]


class _NoteFormatter(logging.Formatter):
    """The library's log as the command line shows it: notes (warnings) as ``note: ...``,
    progress and information as they are."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        return f"note: {text}" if record.levelno >= logging.WARNING else text


@contextlib.contextmanager
def _log_to_stderr(verbosity: int):
    """Show rnnlab's log on stderr for one command: progress and notes by default (``INFO``),
    notes only at -q, errors only at -qq, debug at -v. The library itself only logs (one logger
    per module, under ``rnnlab``); this handler is the command line's, and the logger is left as
    it was when the command returns."""
    level = {-2: logging.ERROR, -1: logging.WARNING, 0: logging.INFO}.get(max(verbosity, -2), logging.DEBUG)
    logger = logging.getLogger("rnnlab")
    handler = logging.StreamHandler(sys.stderr)  # the stderr of this call (tests replace it)
    handler.setFormatter(_NoteFormatter())
    before = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False  # shown once, here, whatever handlers the process's root has
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.level, logger.propagate = before


if __name__ == "__main__":
    sys.exit(main())
