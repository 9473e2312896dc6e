"""The ``rnnlab`` command line; the only package that reads ``sys.argv``.

Each command is two functions: ``_parser_NAME(sub)`` adds its parser and sets
``func=cmd_NAME``, taking the options that several commands share from the ``_opt_*``
functions (each defined once); ``cmd_NAME(args)`` reads the parsed arguments and hands them
on to the library as keyword arguments, never as the ``argparse.Namespace``. A new command is
these two functions plus its parser function in :data:`COMMANDS`.

One module per command family (:mod:`.presets`, :mod:`.training`, :mod:`.runs`, :mod:`.many`,
:mod:`.analyze`), what they share (:mod:`.common`), the parser (:mod:`.parser`) and running a
command (:mod:`.run`: :func:`main`, the ``rnnlab`` entry point). Every name stays importable
from ``rnnlab.cli``.
"""

from .analyze import _jacobian_summary as _jacobian_summary
from .analyze import cmd_analyze_jacobian, cmd_analyze_schur, cmd_doctor
from .common import DEMO_METRICS, DEMO_PRESETS, DEPRECATED_UNTIL, DOCS_URL
from .common import _at_least_one as _at_least_one
from .common import _note as _note
from .many import _demo_record as _demo_record
from .many import _demo_run as _demo_run
from .many import cmd_bench, cmd_bench_ensemble, cmd_demo, cmd_reproduce, cmd_suite, cmd_sweep
from .owncell import cmd_check_cell, cmd_compare, cmd_field
from .parser import COMMANDS, build_parser
from .parser import _Help as _Help
from .parser import _opt_backend as _opt_backend
from .parser import _opt_data_dir as _opt_data_dir
from .parser import _opt_device as _opt_device
from .parser import _opt_quiet as _opt_quiet
from .parser import _opt_run as _opt_run
from .parser import _opt_runs_dir as _opt_runs_dir
from .parser import _opt_seeds as _opt_seeds
from .parser import _opt_set as _opt_set
from .parser import _opt_which as _opt_which
from .parser import _parser_analyze as _parser_analyze
from .parser import _parser_bench as _parser_bench
from .parser import _parser_check_cell as _parser_check_cell
from .parser import _parser_compare as _parser_compare
from .parser import _parser_data as _parser_data
from .parser import _parser_demo as _parser_demo
from .parser import _parser_doctor as _parser_doctor
from .parser import _parser_evaluate as _parser_evaluate
from .parser import _parser_export as _parser_export
from .parser import _parser_field as _parser_field
from .parser import _parser_list as _parser_list
from .parser import _parser_plot as _parser_plot
from .parser import _parser_preset as _parser_preset
from .parser import _parser_reproduce as _parser_reproduce
from .parser import _parser_suite as _parser_suite
from .parser import _parser_sweep as _parser_sweep
from .parser import _parser_table as _parser_table
from .parser import _parser_thresholds as _parser_thresholds
from .parser import _parser_train as _parser_train
from .parser import _sub as _sub
from .presets import _preset_line as _preset_line
from .presets import _signature as _signature
from .presets import cmd_list, cmd_preset_copy, cmd_preset_show
from .run import _PATH_ARGUMENTS as _PATH_ARGUMENTS
from .run import _error_line as _error_line
from .run import _expected_errors as _expected_errors
from .run import _log_to_stderr as _log_to_stderr
from .run import _NoteFormatter as _NoteFormatter
from .run import _out_of_memory as _out_of_memory
from .run import _quiet_exit_on_closed_stdout as _quiet_exit_on_closed_stdout
from .run import _refuse_symlink_loops as _refuse_symlink_loops
from .run import _run as _run
from .run import _stdout_closed as _stdout_closed
from .run import main
from .runs import cmd_data, cmd_evaluate, cmd_export, cmd_plot, cmd_table, cmd_thresholds
from .training import MAX_SEEDS, cmd_train
from .training import _device_overrides as _device_overrides
from .training import _parse_seeds as _parse_seeds
from .training import _print_result as _print_result
from .training import _run_dir as _run_dir

__all__ = [
    "COMMANDS",
    "DEMO_METRICS",
    "DEMO_PRESETS",
    "DEPRECATED_UNTIL",
    "DOCS_URL",
    "MAX_SEEDS",
    "build_parser",
    "cmd_analyze_jacobian",
    "cmd_analyze_schur",
    "cmd_bench",
    "cmd_check_cell",
    "cmd_compare",
    "cmd_bench_ensemble",
    "cmd_data",
    "cmd_demo",
    "cmd_doctor",
    "cmd_evaluate",
    "cmd_export",
    "cmd_field",
    "cmd_list",
    "cmd_plot",
    "cmd_preset_copy",
    "cmd_preset_show",
    "cmd_reproduce",
    "cmd_suite",
    "cmd_sweep",
    "cmd_table",
    "cmd_thresholds",
    "cmd_train",
    "main",
]


def __getattr__(name: str):  # names that moved: importable from here with a DeprecationWarning
    from .._compat import moved_attribute

    return moved_attribute(__name__, {"RECORD_FILES": "rnnlab.rundir:RunFiles.RECORD"}, name)
