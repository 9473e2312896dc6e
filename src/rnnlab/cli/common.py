"""What every command shares: the documentation's address, the demo's presets and metrics, the
files of a run's record, and the one-line notes.
"""

from __future__ import annotations

import logging
import sys

#: where ``--help`` points for documentation (the wheel ships no docs/); the one home of this URL
DOCS_URL = "https://github.com/rnnlab/rnnlab/blob/main/docs/"
#: the release that stops accepting the deprecated spellings (``analyze jacobian -o FILE``,
#: ``export --csv``); they are accepted, with a note on stderr, until then
DEPRECATED_UNTIL = "0.4.0"

#: the demo: the papers' models (asRNN, nnRNN, DMU, LT-RNN) beside an LSTM, about 7K parameters each
DEMO_PRESETS = ["demo/lstm", "demo/asrnn", "demo/nnrnn", "demo/dmu", "demo/ltrnn"]
DEMO_METRICS = ["test/loss", "test/recall_accuracy"]


def _note(text: str) -> None:
    """A note on stderr; hidden by -qq (only errors), shown by -q."""
    if logging.getLogger("rnnlab").isEnabledFor(logging.WARNING):
        print(f"rnnlab: note: {text}", file=sys.stderr)


def progress_line(text: str, logger: str = "rnnlab.cli") -> None:
    """A progress or information line on stderr ("run NAME -> DIR", "wrote FILE"): shown by
    default, hidden by -q and -qq (the command line's log level decides, as for the library's
    own progress lines: :func:`rnnlab.runtime.show_progress`)."""
    from ..runtime import show_progress

    show_progress(logging.getLogger(logger), text)


def quiet(args) -> bool:
    """Whether a command shows no progress bar: its own --quiet, or -q / -qq."""
    return bool(getattr(args, "quiet", False) or getattr(args, "log_quiet", 0) > 0)


def _names(text: str | None, flag: str, example: str, without: str) -> list[str] | None:
    """A comma-separated option (``--tasks a,b``) as its list of names; None when not given. One
    given but naming nothing (``--tasks ''``, ``','``) is refused: read as "not given", it
    selected everything. ``without``: what leaving the option out gives."""
    from ..config import ConfigError

    if text is None:
        return None
    names = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names:
        raise ConfigError(
            f"{flag} {text!r} names nothing; give one or more (e.g. {flag} {example}), or leave it out for {without}"
        )
    return names


def _at_least_one(value: int | None, flag: str, meaning: str) -> None:
    """Refuse a count below 1 given on the command line (one line, exit 2); None: not given."""
    from ..config import ConfigError

    if value is not None and value < 1:
        raise ConfigError(f"{flag} must be an integer >= 1 ({meaning}), got {value}")
