"""The ``rnnlab`` command line; the only module that reads ``sys.argv``."""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

#: the demo: the papers' models (asRNN, nnRNN, DMU, LT-RNN) beside an LSTM, about 7K parameters each
DEMO_PRESETS = ["demo/lstm", "demo/asrnn", "demo/nnrnn", "demo/dmu", "demo/ltrnn"]
DEMO_METRICS = ["test/loss", "test/recall_accuracy"]
#: files of a demo run copied into a record (``rnnlab demo --record``): no weights
RECORD_FILES = ("config.json", "task.json", "metrics.jsonl", "result.json")


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
        for k, c in CELLS.items():
            print(f"  {k:10s} {c.__name__}({_signature(c)})")
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


def _run_dir(args, cfg) -> Path:
    """``--out``, else RUNS_DIR/<name>[-<changes>-<hash>]/seed<k> (rundir.run_dir: the directory
    name carries the configuration key when the run differs from its preset)."""
    from . import config, rundir

    if args.out:
        return Path(args.out)
    base = config.load(args.preset, [f"train.seed={cfg.train.seed}"])
    d = rundir.run_dir(args.runs_dir, cfg, base, resume=args.resume)
    if args.resume and not (d / "checkpoint.pt").exists():
        # resuming with another train.steps (or train.precision, which a resume may change):
        # the run lives under the name it started with
        may_change = {"train.steps", "train.precision"}
        same = [p.parent for p in Path(args.runs_dir).glob(f"{cfg.name}*/seed{cfg.train.seed}/checkpoint.pt")
                if set(rundir.differences(rundir.saved_config(p.parent) or {}, cfg)) <= may_change]
        if len(same) == 1:
            return same[0]
        if same:
            raise config.ConfigError(
                f"cannot resume: {d} holds no checkpoint and several runs differ from this "
                f"configuration only in train.steps/train.precision: {', '.join(map(str, same))}; pick one with --out"
            )
    return d


def _print_result(r: dict) -> None:
    scores = {**r["final"], **r.get("test", {})}
    parts = [f"{k}={v:.4g}" for k, v in scores.items()]
    base = ", ".join(f"{k}={v:.4g}" for k, v in r["baseline"].items())
    print(f"{r['name']} (seed {r['seed']}): {r['steps']} steps in {r['wall_time_s']:.1f}s [{r['stopped']}]")
    print("  " + "  ".join(parts))
    if base:
        print(f"  memoryless baseline: {base}")


def _device_overrides(args) -> list[str]:
    """``--device`` / ``--precision`` as ``train.*`` overrides, checked against this machine
    first (one-line error before anything is written)."""
    out = []
    if getattr(args, "device", None):
        out.append(f"train.device={args.device}")
    if getattr(args, "precision", None):
        out.append(f"train.precision={args.precision}")
    if out:
        from . import device

        device.resolve(args.device or "auto", args.precision or "fp32")
    return out


def _add_device_arguments(s, precision: bool = True) -> None:
    s.add_argument("--device", help="auto (CUDA, else MPS, else CPU; the default), cpu, cuda, cuda:N, mps; "
                   "e.g. --device cuda")
    if precision:
        s.add_argument("--precision", help="fp32 (default), bf16 or fp16 (torch.autocast; fp16 with a gradient "
                       "scaler), e.g. --precision bf16")


def _parse_seeds(text: str) -> list[int]:
    from .config import ConfigError

    parts = [p.strip() for p in text.split(",")]
    try:
        seeds = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers >= 0 (e.g. --seeds 0,1,2), got {text!r}") from None
    if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds must be distinct integers >= 0 (e.g. --seeds 0,1,2), got {text!r}")
    return seeds


def cmd_train(args) -> int:
    from . import config, train

    seeds = _parse_seeds(args.seeds) if args.seeds is not None else [None]
    if args.out and len(seeds) > 1:
        raise config.ConfigError("--out names one run directory; with several --seeds use --runs-dir")
    for seed in seeds:
        overrides = list(args.set or [])
        if seed is not None:
            overrides.append(f"train.seed={seed}")
        if args.threads is not None:
            overrides.append(f"train.threads={args.threads}")
        if args.tensorboard:
            overrides.append("train.tensorboard=true")
        overrides += _device_overrides(args)
        cfg = config.load(args.preset, overrides)
        run_dir = _run_dir(args, cfg)
        print(f"run {cfg.name} -> {run_dir}", file=sys.stderr)
        r = train.train(cfg, run_dir, resume=args.resume, progress=False if args.quiet else None,
                        data_dir=args.data_dir)
        _print_result(r)
    return 0


def cmd_table(args) -> int:
    from .results import table

    print(table(args.runs_dir, args.metrics.split(",") if args.metrics else None))
    return 0


def cmd_export(args) -> int:
    from .results import export_csv

    print(f"wrote {export_csv(args.run, args.output)}")
    return 0


def cmd_evaluate(args) -> int:
    import json

    from .train import evaluate, load_run

    cfg, task, model = load_run(args.run, which=args.which, data_dir=args.data_dir, device=args.device,
                                data=True)
    metrics = evaluate(model, task, args.split, cfg.train.eval_batch_size, cfg.train.eval_max_batches)
    print(json.dumps(metrics, indent=2))
    return 0


def cmd_suite(args) -> int:
    from .suite import list_suites, load_suite, main_suite

    if args.name == "list":
        for name in list_suites():
            s = load_suite(name)
            print(f"  {name:22s} {len(s.presets)} presets x {len(s.seeds)} seeds: {s.description}")
        return 0
    return main_suite(args.name, args.runs_dir, args.jobs, list(args.set or []) + _device_overrides(args), args.data_dir,
                      backend=args.backend, address=args.address)


def cmd_sweep(args) -> int:
    from .sweep import main_sweep

    args.set = list(args.set or []) + _device_overrides(args)
    return main_sweep(args)


def cmd_thresholds(args) -> int:
    from .results import threshold_counts

    ths = tuple(float(t) for t in args.thresholds.split(","))
    counts = threshold_counts(args.runs_dir, args.metric, ths, args.steps_per_epoch)
    for name, per in counts.items():
        epochs = len(next(iter(per.values()), []))
        print(f"{name}: runs that reached {args.metric} <= threshold by epoch (of {epochs} epochs)")
        marks = sorted({1, epochs} | {e for e in (5, 10, 20, 50, 100) if e <= epochs})
        print("  threshold | " + " | ".join(f"ep {e}" for e in marks))
        for th, row in per.items():
            print(f"  {th:9.0e} | " + " | ".join(str(row[e - 1]) for e in marks))
    return 0


def cmd_reproduce(args) -> int:
    from .reproduce import collect, main_ledger

    if args.action == "ledger":
        return main_ledger(args.runs, args.output)
    if len(args.runs) != 1 or not args.output:
        raise ValueError("usage: rnnlab reproduce collect RUNS_DIR -o RECORDS_DIR (one runs directory)")
    copied = collect(args.runs[0], args.output)
    print(f"copied the small files of {len(copied)} runs to {args.output}")
    return 0


def cmd_plot(args) -> int:
    from .plots import plot_curves

    dirs = sorted({p.parent for d in args.runs for p in Path(d).rglob("metrics.jsonl")})
    if not dirs:
        raise FileNotFoundError(f"no run directories (with metrics.jsonl) below {args.runs}")
    out = plot_curves(dirs, args.output, args.metric, logy=not args.linear)
    print(f"wrote {out}")
    return 0


def cmd_demo(args) -> int:
    import shutil

    from . import config, rundir, train
    from .plots import plot_curves
    from .results import table

    out = Path(args.out)
    dirs = []
    extra = _device_overrides(args)
    for name in DEMO_PRESETS:
        overrides = ([f"train.steps={args.steps}"] if args.steps else []) + extra
        cfg = config.load(name, overrides)
        # a run with other steps gets its own directory; one is reused only if its config matches
        run_dir = rundir.run_dir(out, cfg, config.load(name)).parent
        with rundir.claim(run_dir):
            if (not args.fresh and (run_dir / "result.json").exists()
                    and rundir.resolved_saved_key(run_dir) == rundir.config_key(cfg)):
                print(f"{cfg.name}: already done in {run_dir} (use --fresh to rerun)", file=sys.stderr)
            else:
                for f in run_dir.iterdir():  # under the lock: clear a stale or --fresh run
                    if f.name != rundir.LOCK_NAME:
                        shutil.rmtree(f) if f.is_dir() else f.unlink()
                print(f"training {cfg.name} ({cfg.model.cell}, hidden {cfg.model.hidden_size}) "
                      f"on {cfg.task.name} L={cfg.task.options.get('L')} ...", file=sys.stderr)
                r = train.train(cfg, run_dir, progress=None)
                _print_result(r)
        dirs.append(run_dir)
    png = plot_curves(dirs, out / "loss.png", "val/loss", title="copy task (K=10, L=40): validation loss")
    md = table(dirs, DEMO_METRICS)
    (out / "table.md").write_text(md + "\n")
    print()
    print(md)
    print(f"\nwrote {png} and {out / 'table.md'}")
    if args.record:
        import shutil

        rec = Path(args.record)
        for d in dirs:
            (rec / d.name).mkdir(parents=True, exist_ok=True)
            for f in RECORD_FILES:
                shutil.copyfile(d / f, rec / d.name / f)
        shutil.copyfile(png, rec / "loss.png")
        (rec / "table.md").write_text(table(rec, DEMO_METRICS) + "\n")
        print(f"recorded in {rec} (update the README block: python -m rnnlab.docsync README.md)")
    return 0


def cmd_data(args) -> int:
    from .tasks import data

    if args.action == "list":
        text, _ = data.status_report(args.names or None, args.data_dir)
        print(text)
        return 0
    if args.action == "verify":
        text, ok = data.status_report(args.names or None, args.data_dir)
        print(text)
        return 0 if ok else 1
    if not args.names:
        raise ValueError(f"rnnlab data download needs dataset names; known: {sorted(data.DATASETS)}")
    for name in args.names:
        data.download(name, args.data_dir, force=args.force, progress=not args.quiet)
    return 0


def cmd_analyze_schur(args) -> int:
    from .analysis.schur import analyze_run

    for s in analyze_run(args.run, args.out, args.which, args.data_dir, device=args.device or "cpu"):
        print(
            f"{s['name']}: n={s['n']}  mean |eigenvalue| = {s['mean_eigenvalue_modulus']:.4f} "
            f"(min {s['min_eigenvalue_modulus']:.4f}, max {s['max_eigenvalue_modulus']:.4f})  "
            f"complex pairs = {s['complex_pairs']}  departure from normality = "
            f"{s['departure_from_normality']:.4g}  mean |T| on sub-diagonal 1 = {s['mean_abs_T_subdiag_1']:.3g}, "
            f"elsewhere = {s['mean_abs_T_all']:.3g}"
        )
        print(f"  wrote {s['figure']}")
    return 0


def cmd_analyze_jacobian(args) -> int:
    import json

    from .analysis.jacobian import analyze_run, plot_lag_spectra, summarize

    cells = tuple(c for c in (args.compare or "").split(",") if c)
    res = analyze_run(args.run, split=args.split, index=args.index, max_lag=args.max_lag, which=args.which,
                      data_dir=args.data_dir, init_cells=cells, device=args.device or "cpu")
    digest = {label: summarize(r) for label, r in res.items()}
    text = json.dumps(digest, indent=2, default=float)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)
    plot_lag_spectra({k: r["spectrum"] for k, r in res.items()}, args.output,
                     title=f"singular values of J(t1 + lag, t1) along {args.split} sequence {args.index}")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from . import speed

    return speed.main(**{k: getattr(args, k) for k in speed.OPTIONS})


def cmd_doctor(args) -> int:
    from .doctor import main_from_args

    return main_from_args(args)


class _Help(argparse.RawDescriptionHelpFormatter):
    """Each argument's default appended to its help (unless the help states it, or there is
    none to state); examples (the epilog) kept as written."""

    def _get_help_string(self, action):
        h = action.help or ""
        d = action.default
        if "default" in h or d in (None, False, argparse.SUPPRESS) or action.option_strings == [] and d == []:
            return h
        return h + " (default: %(default)s)"


def _sub(sub, name: str, help: str, example: str, **kw) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=help, epilog=f"example:\n  {example}",
                          formatter_class=_Help, **kw)


def build_parser(bench_arguments: bool = True) -> argparse.ArgumentParser:
    """The ``rnnlab`` parser. ``bench_arguments=False`` leaves out the options of ``bench
    speed`` (reading them imports torch), for commands that do not need them."""
    from . import __version__

    p = argparse.ArgumentParser(
        prog="rnnlab", description="Long-memory RNNs: train, compare, analyse.", formatter_class=_Help,
        epilog="examples:\n  rnnlab demo\n  rnnlab list presets\n  rnnlab train demo/asrnn --seeds 0,1\n"
               "  rnnlab table runs/\n\n`rnnlab COMMAND --help` describes each command.")
    p.add_argument("--version", action="version", version=f"rnnlab {__version__}",
                   help="print the version and exit, e.g. rnnlab --version")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = _sub(sub, "list", "registered cells, tasks and presets with their options", "rnnlab list presets")
    s.add_argument("what", nargs="?", default="all", choices=["all", "cells", "tasks", "presets"],
                   help="what to list, e.g. presets")
    s.set_defaults(func=cmd_list)

    s = _sub(sub, "train", "train a preset (configs/<paper>/<task>.toml) or a TOML file",
             "rnnlab train demo/asrnn --set train.steps=100 --seeds 0,1")
    s.add_argument("preset", help="preset name (see `rnnlab list presets`) or path to a .toml, e.g. demo/lstm")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config value (repeatable), e.g. --set train.steps=100 --set task.L=200")
    s.add_argument("--out", help="run directory (default: RUNS_DIR/<name>/seed<seed>), e.g. --out runs/try1")
    s.add_argument("--runs-dir", default="runs", help="parent of run directories, e.g. --runs-dir /scratch/runs")
    s.add_argument("--seeds", help="comma-separated initialisation seeds, one run each (default: the "
                   "preset's train.seed), e.g. --seeds 0,1,2")
    s.add_argument("--threads", type=int, help="torch threads (default: the preset's, 1), e.g. --threads 2")
    s.add_argument("--resume", action="store_true", help="continue from the run's checkpoint.pt, e.g. "
                   "rnnlab train demo/lstm --resume")
    s.add_argument("--data-dir", help="data root for real-data tasks (default: $RNNLAB_DATA, else "
                   "~/.cache/rnnlab/data), e.g. --data-dir ~/data")
    s.add_argument("--quiet", action="store_true", help="no progress bar and no evaluation lines, "
                   "e.g. in scripts that only read result.json")
    s.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard events to RUN/tensorboard (needs rnnlab[tensorboard]; "
                        "same as --set train.tensorboard=true), e.g. then tensorboard --logdir runs")
    _add_device_arguments(s)
    s.set_defaults(func=cmd_train)

    s = _sub(sub, "evaluate", "re-score a trained run on a split (needs the task's data)",
             "rnnlab evaluate runs/demo-lstm/seed1 --split test")
    s.add_argument("run", help="run directory, or a checkpoint file inside one, e.g. runs/demo-lstm/seed1")
    s.add_argument("--split", default="test", choices=["val", "test"], help="split to score, e.g. --split val")
    s.add_argument("--which", default="best", choices=["best", "last"],
                   help="best.pt (best validation score) or checkpoint.pt, e.g. --which last")
    s.add_argument("--device", default=None, help="torch device (default: cpu), e.g. --device cuda")
    s.add_argument("--data-dir", help="data root for real-data tasks (default: $RNNLAB_DATA), e.g. --data-dir ~/data")
    s.set_defaults(func=cmd_evaluate)

    s = _sub(sub, "export", "a run's metrics.jsonl as CSV", "rnnlab export runs/demo-lstm/seed1 --csv")
    s.add_argument("run", help="run directory, e.g. runs/demo-lstm/seed1")
    s.add_argument("--csv", action="store_true", default=True, help="CSV (the only format), e.g. --csv")
    s.add_argument("-o", "--output", help="output file (default: RUN/metrics.csv), e.g. -o metrics.csv")
    s.set_defaults(func=cmd_export)

    s = _sub(sub, "data", "real-data files: list, verify (sha256) or download them", "rnnlab data download ptb")
    s.add_argument("action", choices=["list", "verify", "download"], help="what to do, e.g. verify")
    s.add_argument("names", nargs="*", help="datasets (default for list/verify: all), e.g. ptb mnist")
    s.add_argument("--data-dir", help="data root (default: $RNNLAB_DATA, else ~/.cache/rnnlab/data), "
                   "e.g. --data-dir ~/data")
    s.add_argument("--force", action="store_true", help="download again even when verified, e.g. after a "
                   "failed verify")
    s.add_argument("--quiet", action="store_true", help="no progress bar, e.g. in batch jobs")
    s.set_defaults(func=cmd_data)

    s = _sub(sub, "table", "mean +- std over seeds of every run below RUNS_DIR", "rnnlab table runs/ --metrics test/loss")
    s.add_argument("runs_dir", help="directory searched for result.json files, e.g. runs/")
    s.add_argument("--metrics", help="comma-separated metric keys (default: all test metrics), "
                   "e.g. --metrics test/loss,test/accuracy")
    s.set_defaults(func=cmd_table)

    s = _sub(sub, "suite", "run a benchmark suite (presets x seeds, parallel) and print its table",
             "rnnlab suite demo --jobs 2")
    s.add_argument("name", help="suite name (`rnnlab suite list`) or path to a suite .toml, e.g. demo")
    s.add_argument("--runs-dir", default="runs", help="parent of the run directories, e.g. --runs-dir runs")
    s.add_argument("--jobs", type=int, default=1, help="parallel runs (each one thread), e.g. --jobs 2")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override for every run (repeatable), e.g. --set train.steps=50")
    s.add_argument("--data-dir", help="data root for real-data tasks, e.g. --data-dir ~/data")
    _add_device_arguments(s)
    s.add_argument("--backend", default="local", choices=["local", "ray"],
                   help="where runs execute: local process pool or Ray (rnnlab[ray]), e.g. --backend ray")
    s.add_argument("--address", help="Ray cluster address HOST:PORT or 'auto' (default: a local Ray instance), "
                   "e.g. --address auto")
    s.set_defaults(func=cmd_suite)

    s = _sub(sub, "sweep", "hyperparameter sweep of a preset with Optuna (rnnlab[sweep]); rerun to continue a "
             "killed sweep", "rnnlab sweep demo-lstm --trials 20 --workers 2")
    s.add_argument("spec", help="sweep TOML file (preset, [space], metric, trials; see docs/sweeps.md) "
                   "or a shipped sweep name, e.g. demo-lstm")
    s.add_argument("--out", help="sweep directory (default: RUNS_DIR/sweep-<name>), e.g. --out runs/sweep1")
    s.add_argument("--runs-dir", default="runs", help="parent of the sweep directory, e.g. --runs-dir runs")
    s.add_argument("--trials", type=int, help="finished trials to reach (default: the file's), e.g. --trials 20")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="fixed override for every trial, e.g. --set train.steps=200")
    s.add_argument("--storage", help="Optuna RDB URL (default: sqlite:///OUT/study.db), "
                   "e.g. --storage postgresql://host/db")
    s.add_argument("--workers", type=int, default=1, help="Optuna workers feeding the study, e.g. --workers 2")
    s.add_argument("--backend", default="local", choices=["local", "ray"],
                   help="where workers run: local processes or Ray tasks (rnnlab[ray]), e.g. --backend ray")
    s.add_argument("--address", help="Ray cluster address HOST:PORT or 'auto' (default: a local Ray instance), "
                   "e.g. --address auto")
    s.add_argument("--heartbeat", type=int, default=10,
                   help="seconds between trial heartbeats; a trial silent for 3x this is retried, e.g. --heartbeat 30")
    s.add_argument("--db-timeout", type=float, default=60.0,
                   help="seconds to wait for a locked SQLite study, e.g. --db-timeout 120")
    s.add_argument("--report-only", action="store_true",
                   help="write best.toml, trials.md and plots; run nothing, e.g. after a killed sweep")
    s.add_argument("--data-dir", help="data root for real-data tasks, e.g. --data-dir ~/data")
    _add_device_arguments(s)
    s.set_defaults(func=cmd_sweep)

    s = _sub(sub, "bench", "benchmarks (speed: training-iteration time, throughput, memory vs nn.LSTM)",
             "rnnlab bench speed --quick")
    bsub = s.add_subparsers(dest="bench", required=True, metavar="BENCH")
    b = _sub(bsub, "speed", "the speed table of BENCHMARKS.md (add --quick for a short run)",
             "rnnlab bench speed --quick --cells lstm asrnn")
    if bench_arguments:
        from .speed import add_arguments

        add_arguments(b)
    b.set_defaults(func=cmd_bench)

    s = _sub(sub, "doctor", "check every fast path against its reference on a device (table; exit 1 on a mismatch)",
             "rnnlab doctor --device cuda")
    from .doctor import add_arguments as doctor_arguments

    doctor_arguments(s)
    s.set_defaults(func=cmd_doctor)

    s = _sub(sub, "thresholds", "DMU-style summary: how many seeds reached each loss threshold by each epoch",
             "rnnlab thresholds runs/ --metric val/loss")
    s.add_argument("runs_dir", help="directory searched for runs, e.g. runs/")
    s.add_argument("--metric", default="val/loss", help="metric of metrics.jsonl, e.g. --metric val/loss")
    s.add_argument("--thresholds", default="1e-1,1e-2,1e-3,1e-4,1e-5,1e-6",
                   help="comma-separated thresholds, e.g. --thresholds 1e-2,1e-4")
    s.add_argument("--steps-per-epoch", type=int, default=10,
                   help="optimizer steps per epoch (DMU presets: 10), e.g. --steps-per-epoch 10")
    s.set_defaults(func=cmd_thresholds)

    s = _sub(sub, "reproduce", "the reproduction ledger: REPRODUCTION.md from the papers' values and run "
             "records (ledger), or copy runs' small files into a records folder (collect)",
             "rnnlab reproduce ledger records/ -o REPRODUCTION.md")
    s.add_argument("action", choices=["ledger", "collect"], help="what to do, e.g. ledger")
    s.add_argument("runs", nargs="+", help="directories holding run records (ledger) / one runs directory "
                   "(collect), e.g. records/")
    s.add_argument("-o", "--output", help="ledger: output file (default: stdout); collect: the records folder, "
                   "e.g. -o REPRODUCTION.md")
    s.set_defaults(func=cmd_reproduce)

    s = _sub(sub, "plot", "curves of a metric for the runs below the given directories",
             "rnnlab plot runs/demo-lstm runs/demo-asrnn -o curves.png --metric val/loss")
    s.add_argument("runs", nargs="+", help="directories searched for runs, e.g. runs/")
    s.add_argument("-o", "--output", default="curves.png", help="figure file, e.g. -o loss.png")
    s.add_argument("--metric", default="train/loss", help="metric of metrics.jsonl, e.g. --metric val/loss")
    s.add_argument("--linear", action="store_true", help="linear instead of log y axis, e.g. for accuracies")
    s.set_defaults(func=cmd_plot)

    s = _sub(sub, "analyze", "analyses of a trained run (jacobian: temporal Jacobian spectra; schur: real "
             "Schur form views)", "rnnlab analyze schur runs/nnrnn-copy-T200/seed1")
    asub = s.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    a = _sub(asub, "schur", "real Schur form of each recurrent matrix of a run: |Theta| heat map, mean |T| "
             "per sub-diagonal, block angles, eigenvalue moduli", "rnnlab analyze schur runs/nnrnn-copy-T200/seed1")
    a.add_argument("run", help="run directory, or a checkpoint file (best.pt / checkpoint.pt) inside one, "
                   "e.g. runs/x/seed1")
    a.add_argument("--out", help="output directory (default: RUN/schur), e.g. --out schur-views")
    a.add_argument("--which", default="best", choices=["best", "last"],
                   help="weights of a run directory, e.g. --which last")
    a.add_argument("--data-dir", help="data root for real-data tasks (default: $RNNLAB_DATA), e.g. --data-dir ~/data")
    _add_device_arguments(a, precision=False)
    a.set_defaults(func=cmd_analyze_schur)

    a = _sub(asub, "jacobian", "temporal Jacobian spectra vs lag (and Theorem 2.1 for asRNN)",
             "rnnlab analyze jacobian runs/asrnn-copy-L1000/seed5544 --compare exprnn,rnn")
    a.add_argument("run", help="run directory or a checkpoint file inside one, e.g. runs/x/seed1")
    a.add_argument("--split", default="val", help="split the sequence comes from, e.g. --split test")
    a.add_argument("--index", type=int, default=0, help="which sequence of the split's first batch, e.g. --index 3")
    a.add_argument("--max-lag", type=int, default=None, help="largest lag (default: the sequence length), "
                   "e.g. --max-lag 200")
    a.add_argument("--which", default="best", choices=["best", "last"], help="best.pt or checkpoint.pt, "
                   "e.g. --which last")
    a.add_argument("--compare", help="comma-separated cells to add at initialisation, e.g. exprnn,rnn")
    a.add_argument("--data-dir", help="data root for real-data tasks, e.g. --data-dir ~/data")
    a.add_argument("-o", "--output", default="jacobian.png", help="figure file, e.g. -o spectra.png")
    a.add_argument("--json", help="also write the digest (sigma at lags 1/10/100/T, Theorem 2.1) here, "
                   "e.g. --json digest.json")
    _add_device_arguments(a, precision=False)
    a.set_defaults(func=cmd_analyze_jacobian)

    s = _sub(sub, "demo", "the papers' models beside an LSTM on the copy task (no downloads): table + loss plot",
             "rnnlab demo --out demo-out")
    s.add_argument("--out", default="demo-out", help="output directory, e.g. --out /tmp/demo")
    s.add_argument("--steps", type=int, default=0, help="override the steps per model (0: the presets' 600), "
                   "e.g. --steps 100")
    s.add_argument("--fresh", action="store_true", help="rerun models already done in --out, e.g. after "
                   "changing the code")
    s.add_argument("--record", metavar="DIR",
                   help="also copy the runs' records (no weights), table and figure to DIR, "
                        "e.g. --record docs/demo (what the README's demo table is made from)")
    _add_device_arguments(s)
    s.set_defaults(func=cmd_demo)
    return p


def _expected_errors() -> tuple[tuple, tuple]:
    """(errors reported in one line, those of them that are usage errors: exit 2). The
    trainer's own errors count only once it is imported, so light commands never import torch."""
    from .config import ConfigError
    from .rundir import RunLocked
    from .tasks.data import DataError

    usage: list = [ConfigError, RunLocked, ValueError]
    other: list = [FileNotFoundError, DataError]
    train = sys.modules.get(f"{__package__}.train")
    if train is not None:
        usage.append(train.RunExists)
        other += [train.TrainingDiverged, train.CheckpointError, train.RunWriteError]
    return tuple(usage + other), tuple(usage)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(bench_arguments="bench" in argv).parse_args(argv)
    if args.command in ("train", "demo", "suite", "sweep"):
        # glibc's default allocator returns freed tensor memory to the OS and page-faults it back
        # every iteration (about 40% of an nn.LSTM copy-task iteration here, BENCHMARKS.md);
        # keep it instead. RNNLAB_MALLOC=default opts out. The benchmark sets it per its --malloc.
        from .runtime import tune_malloc

        tune_malloc()
    try:
        return args.func(args)
    except Exception as e:
        expected, usage = _expected_errors()
        if isinstance(e, expected):
            print(f"rnnlab: error: {e}", file=sys.stderr)
            return 2 if isinstance(e, usage) else 1
        if isinstance(e, OSError):  # a file problem no layer above named more precisely
            where = f"{e.filename}: " if e.filename else ""
            print(f"rnnlab: error: {where}{e.strerror or e}; check the path and its permissions", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        print("rnnlab: interrupted; `rnnlab train ... --resume` continues from the last checkpoint",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
