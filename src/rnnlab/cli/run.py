"""Running a command: :func:`main` parses, sets up the log, runs the handler and turns the expected
errors into one line and an exit code.
"""

from __future__ import annotations

import contextlib
import logging
import sys

from .parser import build_parser

#: the path arguments checked for a loop of symbolic links before a command starts
_PATH_ARGUMENTS = ("runs_dir", "out", "data_dir", "record", "run", "runs")


#: what continues a command stopped by Ctrl-C (suite, sweep and compare say it themselves)
_AFTER_INTERRUPT = {
    "train": "; `rnnlab train ... --resume` continues from the last checkpoint",
    "demo": "; rerun the same command: the models already trained are reused, the others start again",
    "check-cell": "; rerun the same command (the checks start again)",
}


def _refuse_symlink_loops(args) -> None:
    """A path that runs into a loop of symbolic links is a one-line error before anything
    starts (pathlib raises a bare RuntimeError for one, deep inside; ``exists()`` says False)."""
    import errno
    import os

    from ..config import ConfigError

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
    from ..config import ConfigError
    from ..rundir import NoSuchPath, RunLocked, StoredFileDamaged
    from ..tasks.data import DataError

    usage: list = [ConfigError, RunLocked, ValueError, NoSuchPath]
    other: list = [FileNotFoundError, DataError, StoredFileDamaged]
    library = __package__.rpartition(".")[0]  # rnnlab, above this package
    train = sys.modules.get(f"{library}.train")
    if train is not None:
        usage.append(train.RunExists)
        other += [train.TrainingDiverged, train.CheckpointError, train.RunWriteError]
    ensemble = sys.modules.get(f"{library}.ensemble")
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
        # keep it instead (RNNLAB_MALLOC=default opts out); and flush subnormal floats to zero,
        # which an LSTM's backward pass over 784 steps is slowed by several times (BENCHMARKS.md;
        # RNNLAB_DENORMALS=keep opts out). The benchmark sets both per its --malloc, --denormals.
        from ..runtime import tune_process

        tune_process()
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
        print(f"rnnlab: interrupted{_AFTER_INTERRUPT.get(args.command, '')}", file=sys.stderr)
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
