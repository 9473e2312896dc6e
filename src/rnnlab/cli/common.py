"""What every command shares: the documentation's address, the demo's presets and metrics, the
files of a run's record, and the one-line notes.
"""

from __future__ import annotations

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
    print(f"rnnlab: note: {text}", file=sys.stderr)


def _at_least_one(value: int | None, flag: str, meaning: str) -> None:
    """Refuse a count below 1 given on the command line (one line, exit 2); None: not given."""
    from ..config import ConfigError

    if value is not None and value < 1:
        raise ConfigError(f"{flag} must be an integer >= 1 ({meaning}), got {value}")
