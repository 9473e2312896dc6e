"""The parser: one ``_parser_NAME(sub)`` per command (in :data:`COMMANDS`), the options several
commands share defined once (``_opt_*``), and :func:`build_parser`.
"""

from __future__ import annotations

import argparse

from .analyze import cmd_analyze_jacobian, cmd_analyze_schur, cmd_doctor
from .common import DEPRECATED_UNTIL, DOCS_URL
from .many import cmd_bench, cmd_bench_ensemble, cmd_demo, cmd_reproduce, cmd_suite, cmd_sweep
from .owncell import cmd_check_cell, cmd_compare, cmd_field
from .presets import cmd_list, cmd_preset_copy, cmd_preset_show
from .runs import cmd_data, cmd_evaluate, cmd_export, cmd_plot, cmd_table, cmd_thresholds
from .training import cmd_train


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


def _opt_seeds(p, default: str, what: str | None = None, value: str | None = None) -> None:
    """``--seeds``; ``value`` is the default argparse stores (None: the caller decides, as
    ``default`` describes)."""
    p.add_argument(
        "--seeds",
        default=value,
        help=what
        or "initialisation seeds, one run each: a comma-separated list and/or ranges "
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
        help="continue from the run's checkpoint.pt, e.g. rnnlab train demo/lstm --resume; with several "
        "--seeds (or --ensemble) each seed continues where it is and one not checkpointed yet starts",
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
    _opt_seeds(
        s,
        "",
        "run only these of the suite's seeds (a stage; the same command without --seeds completes the "
        "suite in the same directories), e.g. --seeds 0-2",
    )
    s.add_argument(
        "--price",
        action="store_true",
        help="print the suite's CPU-hours from the timings in ./records and run nothing, e.g. --price --seeds 0-2",
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
        from ..bench.speed import add_arguments

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
        from ..bench.ensemble_bench import add_arguments as ensemble_arguments

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
        "records (ledger), the missing runs priced and ordered with their commands (plan), copy "
        "runs' small files into a records folder (collect), or store a records folder's files compressed "
        "in place (compact: metrics.jsonl in columns, config.json, task.json and result.json xz)",
        "rnnlab reproduce ledger records/ -o REPRODUCTION.md",
        docs="reproduce.md",
    )
    s.add_argument(
        "action",
        choices=["ledger", "plan", "collect", "compact", "promote"],
        help="what to do (promote: the full stage of each staged declared sweep whose screening runs the "
        "records hold, as suite files in -o DIR), e.g. ledger",
    )
    s.add_argument(
        "runs",
        nargs="*",
        help="directories holding run records (ledger, plan; default: records) / one runs directory (collect) / "
        "one records directory (compact; default: records), e.g. records/",
    )
    s.add_argument(
        "-o",
        "--output",
        help="ledger: output file (default: stdout); plan: the suite file of the runs within the budget "
        "(FILE-gpu.toml of the others, FILE-probes.toml of the price probes of the runs without a price); "
        "collect: the records folder, e.g. -o REPRODUCTION.md",
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
    from ..bench.doctor import add_arguments

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


def _parser_compare(sub) -> None:
    s = _sub(
        sub,
        "compare",
        "a cell against the papers' strongest baselines on the long-memory tasks, at matched "
        "parameter counts over seeds: one table and one figure per task",
        "rnnlab compare mycells.py:MinGated --tasks adding,copy-T200 --seeds 0-2",
        docs="own-cell.md",
    )
    s.add_argument("cell", help="the cell: a key, package.module:Class, file.py:Class or an entry point, e.g. gru")
    s.add_argument(
        "--tasks",
        help="comma-separated tasks (default: all of copy-T200, copy-L1000, adding, temporal_order, "
        "noisy_sequence, psmnist, ptb_char, selective_copy, mqar, induction, listops; those whose data is absent "
        "are skipped), e.g. --tasks adding,copy-T200",
    )
    s.add_argument(
        "--modern",
        action="store_true",
        help="add the modern cells (lru, s4d, mamba, mingru, minlstm, slstm, mlstm) to every task's baselines, "
        "each on the home preset, e.g. --modern",
    )
    s.add_argument(
        "--budget",
        default="quick",
        choices=["quick", "paper"],
        help="quick: a few CPU-minutes per task; paper: the presets' budgets, e.g. --budget paper",
    )
    _opt_seeds(s, "0-2, three seeds per model", value="0-2")
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


def _parser_field(sub) -> None:
    s = _sub(
        sub,
        "field",
        "the field table: every cell of the library on the long-memory tasks (the papers' and the field's), "
        "at matched parameter counts over seeds, at a stated budget: one record (JSON), one figure, one table",
        "rnnlab field --data-dir ~/data --record docs/field-results.json --figure docs/field.png",
        docs="field.md",
    )
    s.add_argument("--cells", help="comma-separated cells (default: every cell of the registry), e.g. --cells lstm,lru")
    s.add_argument(
        "--tasks",
        help="comma-separated tasks (default: all of copy-T200, copy-L1000, adding, temporal_order, noisy_sequence, "
        "psmnist, selective_copy, mqar, induction, listops; those whose data is absent are recorded as skipped), "
        "e.g. --tasks adding,mqar",
    )
    s.add_argument(
        "--budget",
        default="table",
        choices=["table", "tiny"],
        help="table: the stated budget (see the documentation below); tiny: seconds per run, to check the table is well formed, "
        "e.g. --budget tiny",
    )
    _opt_seeds(s, "0-2, three seeds per cell", value="0-2")
    s.add_argument("--out", help="the runs' folder (default: runs/field-BUDGET), e.g. --out runs/field")
    s.add_argument(
        "--record", help="the record (default: OUT/field-results.json), e.g. --record docs/field-results.json"
    )
    s.add_argument("--figure", help="the figure (default: the record's name, .png), e.g. --figure docs/field.png")
    s.add_argument(
        "--priced-out",
        action="store_true",
        help="also train the (cell, task) points the budget leaves out for their price, e.g. --priced-out",
    )
    s.add_argument(
        "--merge",
        nargs="+",
        metavar="RECORD",
        help="train nothing: write one record (--record) and figure from the records of parts of one table "
        "(the same budget and seeds), each task from the last record that has it, e.g. --merge "
        "docs/field-results.json listops.json --record docs/field-results.json",
    )
    s.add_argument("--jobs", type=int, default=1, help="parallel runs (each one thread), e.g. --jobs 2")
    s.add_argument(
        "--known",
        action="store_true",
        help="instead of the table, check each modern model's known behaviour from its paper at a CPU scale "
        "(docs/field-known.md; --record, --budget, --seeds, --out, --checks apply), e.g. --known --record "
        "docs/field-known-results.json",
    )
    s.add_argument(
        "--checks",
        help="with --known: comma-separated checks (default: all), e.g. --checks mamba-selective-copy,lru-ring",
    )
    _opt_set(s, "override for every run")
    _opt_data_dir(s)
    _opt_backend(s, "runs")
    s.set_defaults(func=cmd_field)


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
    _parser_field,
]


def build_parser(bench_arguments: bool = True) -> argparse.ArgumentParser:
    """The ``rnnlab`` parser. ``bench_arguments=False`` leaves out the options of ``bench
    speed`` (reading them imports torch), for commands that do not need them."""
    from .. import __version__

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
